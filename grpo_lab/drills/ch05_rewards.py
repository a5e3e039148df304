"""Drill checker for chapter 5: the R1 format reward.

The drill: ``my_format_reward(completion) -> float``, 1.0 for
``<think>...</think><answer>...</answer>`` and 0.0 for anything else, as ``gl.format_reward``
defines it: each of the four tags exactly once and in that order, only whitespace around and
between the two blocks, the thinking may be empty, the answer may not. A reward function
never raises on the policy's text: whatever the text, it returns a number.
"""

from __future__ import annotations

import re

import numpy as np

from grpo_lab.drills.harness import call, verdict
from grpo_lab.rl.rewards import TAGS, format_reward

__all__ = ["FORMAT_CASES", "PROBE_BASE", "check_format_reward", "evidence"]

#: (what the case is, the completion, its reward, the hint when the reader's reward differs).
#: The rewards are those of gl.format_reward (tests/drills/test_checkers_against_catalogue.py
#: checks it).
FORMAT_CASES = (
    ("the worked example", "<think>7 + 5 = 12</think><answer>12</answer>", 1.0,
     "the R1 format is <think>...</think><answer>...</answer>"),
    ("a multi-line <think>",
     "<think>\n7 + 5:\n7 + 3 = 10, 10 + 2 = 12\n</think><answer>12</answer>", 1.0,
     "a block may span several lines"),
    ("a newline between </think> and <answer>",
     "<think>7 + 5 = 12</think>\n<answer>12</answer>", 1.0,
     "whitespace may separate the blocks"),
    ("whitespace around the completion",
     "\n<think>7 + 5 = 12</think><answer>12</answer>\n", 1.0,
     "whitespace may come around the completion: sampled text often starts or ends with a "
     "newline"),
    ("a space between the blocks", "<think>7 + 5 = 12</think> <answer>12</answer>", 1.0,
     "whitespace may separate the blocks"),
    ("two newlines between the blocks",
     "<think>7 + 5 = 12</think>\n\n<answer>12</answer>", 1.0,
     "whitespace may separate the blocks"),
    ("a tab between the blocks", "<think>7 + 5 = 12</think>\t<answer>12</answer>", 1.0,
     "whitespace may separate the blocks"),
    ("a trailing space", "<think>7 + 5 = 12</think><answer>12</answer> ", 1.0,
     "whitespace may come around the completion"),
    ("a space, a tab and newlines around and between",
     " \t<think>7 + 5 = 12</think> \n <answer>12</answer>\n\n", 1.0,
     "whitespace of any kind and amount is allowed around and between the blocks"),
    ("spaces inside the answer", "<think>7 + 5 = 12</think><answer> 12 </answer>", 1.0,
     "spaces around the answer's text are fine; only a blank answer is not"),
    ("a '<' inside the thinking",
     "<think>is 3 < 5? yes, so 5 - 3 = 2</think><answer>2</answer>", 1.0,
     "mathematics is full of '<'; only the four tags are special"),
    ("an empty <think></think>", "<think></think><answer>12</answer>", 1.0,
     "the thinking may be empty (as in gl.format_reward); only the answer must not be"),
    ("text without any tags", "the answer is 12", 0.0,
     "no tags at all is the plainest format failure"),
    ("no <think> block", "<answer>12</answer>", 0.0,
     "both blocks are required"),
    ("no <answer> block", "<think>7 + 5 = 12</think>", 0.0,
     "both blocks are required"),
    ("the blocks in the wrong order", "<answer>12</answer><think>7 + 5 = 12</think>", 0.0,
     "<think> comes first; that the tags appear somewhere is not the format"),
    ("text after </answer>",
     "<think>7 + 5 = 12</think><answer>12</answer> Hope this helps!", 0.0,
     "anchor the end: nothing but whitespace may follow </answer> (re.fullmatch checks the "
     "whole text)"),
    ("text before <think>", "Sure! <think>7 + 5 = 12</think><answer>12</answer>", 0.0,
     "anchor the start: nothing but whitespace may come before <think> (re.fullmatch checks "
     "the whole text)"),
    ("two <answer> blocks",
     "<think>7 + 5 = 12</think><answer>11</answer><answer>12</answer>", 0.0,
     "each tag exactly once, or the policy learns to hedge with several answers"),
    ("a nested <think>", "<think><think>7 + 5 = 12</think></think><answer>12</answer>", 0.0,
     "each tag exactly once, the <think> tags too"),
    ("text between the blocks", "<think>7 + 5 = 12</think> so: <answer>12</answer>", 0.0,
     "only whitespace may separate </think> and <answer>"),
    ("an empty answer", "<think>7 + 5 = 12</think><answer> </answer>", 0.0,
     "an empty (or blank) answer is no answer; reward it and the policy stops answering"),
    ("an unclosed <answer>", "<think>7 + 5 = 12</think><answer>12", 0.0,
     "the answer must be closed by </answer>"),
    ("a stray closing tag", "<think>7 + 5 = 12</think></think><answer>12</answer>", 0.0,
     "each tag exactly once, the closing tags too"),
    ("a stray </answer> at the end",
     "<think>7 + 5 = 12</think><answer>12</answer></answer>", 0.0,
     "each tag exactly once, the closing tags too"),
    ("a lone extra <think>", "<think>7 + 5<think> = 12</think><answer>12</answer>", 0.0,
     "each tag exactly once, the opening tags too"),
    ("a lone extra <answer>", "<think>7 + 5 = 12</think><answer>1<answer>2</answer>", 0.0,
     "each tag exactly once, the opening tags too"),
    ("an answer tag inside the thinking",
     "<think>I will write </answer> later</think><answer>12</answer>", 0.0,
     "each tag exactly once, also where one sits inside the thinking"),
    ("the answer block inside the thinking",
     "<think>7 + 5 <answer>12</answer></think>", 0.0,
     "the blocks come one after the other, not one inside the other: the answer must "
     "follow </think>"),
    ("interleaved blocks", "<think>7 + 5<answer></think>12</answer>", 0.0,
     "the blocks must not interleave: </think> closes the thinking before <answer> opens"),
    ("upper-case tags", "<THINK>7 + 5 = 12</THINK><ANSWER>12</ANSWER>", 0.0,
     "the tags are lower-case, as gl.format_reward and the prompt have them: a reward that "
     "accepts them in another case rewards tags the format does not allow"),
    ("capitalised tags", "<Think>7 + 5 = 12</Think><Answer>12</Answer>", 0.0,
     "the tags are lower-case, as gl.format_reward and the prompt have them: a reward that "
     "accepts them in another case rewards tags the format does not allow"),
    ("a long thinking (20000 characters)",
     "<think>" + "7 + 5 is 12. " * 1540 + "</think><answer>12</answer>", 1.0,
     "a long completion is still a completion"),
)


#: The completion the probes vary (gl.format_reward gives 1.0 on it and on every probe below
#: that varies only whitespace: tests/drills/test_hint_claims.py checks it).
PROBE_BASE = ("<think>7 + 5 = 12</think>", "<answer>12</answer>")
#: Whitespace put between the blocks, and around the completion (both ends), by the probes.
BETWEEN = (" ", "\n", "\n\n", "\t", " \n ")
AROUND = ("\n", " ", "\t", "\n\n")
#: A completion whose answer block spans lines (gl.format_reward: 1.0).
MULTI_LINE_ANSWER = "<think>7 + 5 = 12</think><answer>\n12\n</answer>"


def _score(fn, text):
    """The answer's reward on a probe: 0.0 or 1.0, or None (it raised, hung or gave another
    value: no evidence either way)."""
    out, problem = call(fn, text, where="a probe", shape=(), returns="1.0 or 0.0")
    if problem is not None:
        return None
    got = float(out.values)
    return got if got in (0.0, 1.0) else None


def _blocks_flat(text: str) -> str:
    """``text`` with every newline inside a block (between a block's two tags) a space."""
    out, inside = [], False
    for part in re.split(r"(</?(?:think|answer)>)", text):
        if part in TAGS:
            inside = not part.startswith("</")
        elif inside:
            part = part.replace("\n", " ")
        out.append(part)
    return "".join(out)


def _multi_line(text: str) -> bool:
    return _blocks_flat(text) != text


def _listed(texts) -> str:
    return ", ".join(repr(t) for t in texts)


def evidence(fn, name: str, text: str, got: float) -> str:
    """What the answer's own output says about its mistake on ``text`` (case ``name``, where
    it gave ``got``): its rewards on probes that vary one thing, the thing named only when they
    show it. Every claim gives the completions and both rewards, the answer's and
    gl.format_reward's."""
    think, answer = PROBE_BASE
    if got == 0.0 and _multi_line(text):
        multi = [t for _, t, e, _ in FORMAT_CASES if e == 1.0 and _multi_line(t)]
        multi.append(MULTI_LINE_ANSWER)
        if all(_score(fn, t) == 0.0 for t in multi) and all(
                _score(fn, _blocks_flat(t)) == 1.0 for t in multi):
            between = think + "\n" + answer                 # a newline the text keeps
            outside = [between] if _score(fn, between) == 1.0 else []
            flat = ("; it gives 0.0 on every completion here whose block spans lines "
                    f"({_listed(multi)}) and 1.0 on each with the newlines inside the blocks "
                    "replaced by spaces")
            if outside:
                return (flat + f", and 1.0 with a newline outside the blocks ({outside[0]!r}); "
                        "gl.format_reward gives 1.0 on all of them. In a regular expression "
                        "'.' does not match a newline: pass re.DOTALL (re.S)")
            return (flat + f", and 0.0 with a newline between the blocks too ({between!r}); "
                    "gl.format_reward gives 1.0 on all of them: newlines are whitespace, "
                    "allowed inside the blocks and outside them")
        flat = _blocks_flat(text)
        return (f"; with the newlines inside the blocks replaced by spaces ({flat!r}) it "
                f"gives {_score(fn, flat)}, gl.format_reward 1.0")
    if got == 0.0 and name != "spaces inside the answer" and text.strip() != text or (
            got == 0.0 and re.search(r"</think>\s+<answer>", text)):
        between = {w: _score(fn, think + w + answer) for w in BETWEEN}
        around = {w: _score(fn, w + think + answer + w) for w in AROUND}
        parts = []
        for where, probes in (("between the blocks", between), ("around the completion",
                                                                 around)):
            ok = [w for w, v in probes.items() if v == 1.0]
            no = [w for w, v in probes.items() if v == 0.0]
            if no:
                parts.append(f"{where} it accepts {_listed(ok) or 'none of'} "
                             f"{'and refuses ' if ok else ''}{_listed(no)}")
        fix = []
        ok_b = [w for w, v in between.items() if v == 1.0]
        ok_a = [w for w, v in around.items() if v == 1.0]
        if not ok_b and between[" "] == 0.0:
            fix.append("allow whitespace between the two blocks (\\s*)")
        elif any(v == 0.0 for v in between.values()):
            fix.append("any whitespace, of any amount, may separate the blocks (\\s*)")
        if not ok_a and around[" "] == 0.0:
            fix.append("strip the completion first (str.strip())")
        elif ok_a == ["\n", "\n\n"] or ok_a == ["\n"]:
            fix.append("strip every kind of whitespace around the completion (str.strip(), "
                       "not strip('\\n'))")
        elif any(v == 0.0 for v in around.values()):
            fix.append("strip every kind of whitespace around the completion (str.strip())")
        if parts:
            return (f" (of the probes {think + '...' + answer!r} with whitespace put in, "
                    f"{'; '.join(parts)}; gl.format_reward accepts them all): "
                    + "; ".join(fix))
        return ""
    if got == 0.0 and "<" in text.replace("<think>", "").replace("</think>", "").replace(
            "<answer>", "").replace("</answer>", ""):
        plain = re.sub(r"<(?!/?(?:think|answer)>)", "less than", text)
        if _score(fn, plain) == 1.0 and format_reward(plain) == 1.0:
            return (f"; it gives 1.0 on the same completion with '<' written out ({plain!r}), "
                    "so the '<' itself is what it refuses")
        return ""
    if got == 1.0 and any(text.count(t) != 1 for t in TAGS) and any(map(text.count, TAGS)):
        counts = ", ".join(f"{t!r} {text.count(t)} times" for t in TAGS if text.count(t) != 1)
        extra = f" (here {counts})"
        stray = [t for t in TAGS if text.count(t) > 1]
        if stray and all(t.startswith("</") for t in stray):
            mirror = [(n, t) for n, t, e, _ in FORMAT_CASES if n.startswith("a lone extra <")]
            if all(_score(fn, t) == 0.0 for _, t in mirror):
                extra += (f"; your function refuses an extra opening tag (0.0 on "
                          f"{', '.join(n for n, _ in mirror)}) but not this extra closing one: "
                          "hold the closing tags to one each as you do the opening ones (count "
                          "them, or forbid them inside a block too)")
        elif stray and not any(t.startswith("</") for t in stray):
            mirror = [(n, t) for n, t, e, _ in FORMAT_CASES
                      if n in ("a stray closing tag", "a stray </answer> at the end")]
            if all(_score(fn, t) == 0.0 for _, t in mirror):
                extra += (f"; your function refuses an extra closing tag (0.0 on "
                          f"{', '.join(n for n, _ in mirror)}) but not this extra opening one: "
                          "hold the opening tags to one each as you do the closing ones (count "
                          "them, or forbid them inside a block too)")
        return extra
    if got == 0.0 and len(text) > 10_000:
        short = text[:7] + "7 + 5 is 12. " * 20 + text[text.index("</think>"):]
        if _score(fn, short) == 1.0:
            return (f"; it gives 1.0 on the same completion with a {len(short)}-character "
                    "thinking, so the length alone is refused: a length cap cuts real answers")
    return ""


def check_format_reward(fn, *, verbose=True) -> bool:
    """Check ``fn(completion) -> 1.0 or 0.0`` on FORMAT_CASES, the rewards of gl.format_reward.

    The first completion scored wrong is the verdict, with its hint; every call runs under
    the harness's time limit, so a pattern that backtracks for ever is a verdict too.
    """
    say = verdict(verbose, fn)
    for name, text, expected, hint in FORMAT_CASES:
        shown = text if len(text) < 80 else f"{text[:40]}...{text[-30:]}"
        out, problem = call(fn, text, where=f"{name} ({shown!r})", shape=(),
                            returns="1.0 or 0.0",
                            shape_hint="; a reward is one number per completion")
        if problem:
            never = ("; a reward returns 0.0 for text it does not like, it never raises on "
                     "the policy's output") if " your function raised " in problem else ""
            return say(False, problem + never)
        got = float(out.values)
        if got not in (0.0, 1.0):
            return say(False, f"on {name} you gave {got!r}; a format reward is 1.0 or 0.0")
        if got != expected:
            return say(False, f"{name} ({shown!r}) got {got:.1f}, gl.format_reward gives "
                              f"{expected:.1f}: {hint}{evidence(fn, name, text, got)}")
    return say(True, f"all {len(FORMAT_CASES)} completions (multi-line, spaces, tabs and "
                     "newlines around and between, repeated, lone, stray, nested, interleaved, "
                     "unclosed, upper-case and misplaced tags, empty answers, a long thinking) "
                     "are scored right")
