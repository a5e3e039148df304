"""Hostile completions (chapter 5): whatever the policy writes, every reward returns 0.0 or
1.0, quickly, without evaluating the text, and text that only looks right scores 0.

Chapter 5's "Hostile text" runs a list of such strings once, in the page. Here they and more
run in a child process with a time limit (a hang fails), with eval, exec, compile and
__import__ spied on (none may be called), and hypothesis feeds random text to every reward."""

import ast
import builtins
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grpo_lab as gl
from grpo_lab.rl import rewards as R

ROOT = Path(__file__).resolve().parents[2]


def good(answer, think="reasoning"):
    return f"<think>{think}</think><answer>{answer}</answer>"


MB = 1 << 20
HOSTILE = [
    "__import__('os').system('x')",
    good("__import__('os').system('x')"),
    good("9**9**9**9"),
    "9**9**9**9",
    good("exec('import os')"),
    good("{{7*7}}"),
    "x" * MB,                                                  # 1 MB of text
    good(12, think="x" * MB),                                  # 1 MB inside a good format
    "<answer>" * 100_000,                                      # many opening tags
    "<think>" * 50_000 + "</think>" * 50_000 + good(12),
    "<answer>" + "1" * 5000 + "</answer>",                     # a 5000-digit number
    good("1" * 5000),
    good("1" * 100_000),                                       # past int()'s digit limit
    "<think><answer></think></answer>",
    "<think>x</think><answer>12",                              # unbalanced
    "</answer></think><answer><think>",
    good("١٢"), good("１２"), good("१२"), good("¹²"), good("𝟏𝟐"),   # unicode digits for 12
    good("1\x002"), "\x00" * 1000, good("12") + "\x00",          # NUL bytes
    good("12\ud800"), "\ud800\udfff",                          # lone surrogates
    good("\u202e21"),                                          # right-to-left override
    good("1e999"), good("nan"), good("inf"), good("-0"), good("1_2"),
    good("12" + "\u0301"),                                     # combining accent
    "\n" * 10_000,
]


def _all_rewards(text):
    return [gl.accuracy_reward(text, 12), gl.accuracy_reward(text, "12", compare="exact"),
            gl.format_reward(text), R.contains_reward(text, 12)]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:30]) + f"..{len(t)}")
def test_hostile_completion_gets_a_reward_not_an_exception(text):
    values = _all_rewards(text)
    assert all(type(v) is float and v in (0.0, 1.0) for v in values), values


def test_hostile_completions_that_look_right_are_still_wrong():
    for text in [good("١٢"), good("１２"), good("1\x002"), good("12\ud800"), good("\u202e21"),
                 good("1_2"), good("12" + "\u0301"), good(12, think="x" * MB)]:
        assert gl.accuracy_reward(text, 12) == 0.0, repr(text[:40])
    assert gl.format_reward(good(12, think="x" * MB)) == 0.0        # over max_chars: not read
    # ... while the same completion below the size limit is read and scored
    assert gl.accuracy_reward(good(12, think="x" * 1000), 12) == 1.0
    assert gl.accuracy_reward(good(12, think="x" * MB), 12, max_chars=2 * MB) == 1.0


def test_no_hostile_completion_hangs():
    """Every hostile case, in a child process with a generous limit: a hang fails the test.

    ``9**9**9**9`` evaluated, or ``int()`` of a huge digit string, would never return.
    This is a guard against hangs, not a speed claim (see chapter 5 for a measured timing).
    """
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(ROOT)!r})
        from tests.rl.test_hostile_completions import HOSTILE, _all_rewards
        for text in HOSTILE:
            _all_rewards(text)
        print("done", len(HOSTILE))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"done {len(HOSTILE)}"


def test_model_output_is_never_evaluated(monkeypatch):
    calls = []
    for name in ("eval", "exec", "compile", "__import__"):
        original = getattr(builtins, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(builtins, name, spy)
    for text in HOSTILE[:6]:
        _all_rewards(text)
    monkeypatch.undo()
    assert calls == []


@pytest.mark.parametrize("module", ["rewards.py", "parsing.py"])
def test_reward_and_parsing_modules_call_no_evaluator_or_regex(module):
    tree = ast.parse((ROOT / "grpo_lab" / "rl" / module).read_text())
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    imported = {alias.name for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    assert not called & {"eval", "exec", "compile", "__import__"}
    assert "re" not in imported and "ast" not in imported


@given(st.text(max_size=300))
def test_any_text_gets_zero_or_one(text):
    assert all(v in (0.0, 1.0) for v in _all_rewards(text))
