"""Every drill checker is proven: it accepts right answers, rejects each catalogued wrong one
with the hint that names the mistake, and never raises because of the reader's code."""

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.drills import harness
from tests.drills.catalogue import (CATALOGUE, ENDLESS_LOOP, ENDLESS_LOOP_LIMIT_S, Drill,
                                    Wrong, prove)

ROOT = Path(__file__).resolve().parents[2]
CHECKERS = [name for name in gl.drills.__all__ if name.startswith("check_")]
RIGHTS = [(name, i) for name, d in CATALOGUE.items() for i in range(len(d.rights))]
WRONGS = [(name, w) for name, d in CATALOGUE.items() for w in d.wrongs]

# Chapter 6's drill is written in torch (pinned in requirements.txt; an optional extra of the
# package): without it, its cases are skipped rather than failed.
NO_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                              reason="chapter 6's drill needs torch")


def needs_torch(name):
    """The marks of a case of drill ``name``: chapter 6's is the one written in torch."""
    torch_drills = ("grpo_loss", "completion_logprobs", "masked_entropy",
                    "accumulated_gradient", "sequence_is_weight", "grpo_step")  # chapters 6, 6b
    return [NO_TORCH] if name.removeprefix("check_") in torch_drills else []


@pytest.fixture(autouse=True)
def short_time_limit(monkeypatch):
    """The catalogue's endless loops are stopped after 0.5 s, not the readers' 5 s."""
    monkeypatch.setattr(harness, "TIME_LIMIT_S", 0.5)
    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  imported once here, never inside a time-limited call


RIGHT_CASES = [pytest.param(n, i, marks=needs_torch(n), id=f"{n}-{i}") for n, i in RIGHTS]
WRONG_CASES = [pytest.param(n, w, marks=needs_torch(n), id=f"{n}-{w.mistake}") for n, w in WRONGS]
DRILL_CASES = [pytest.param(n, marks=needs_torch(n), id=n) for n in sorted(CATALOGUE)]
CHECKER_CASES = [pytest.param(c, marks=needs_torch(c), id=c) for c in CHECKERS]


def test_every_checker_has_five_right_answers_and_ten_mistakes():
    assert len(CHECKERS) == 18
    assert sorted(CATALOGUE) == sorted(c.removeprefix("check_") for c in CHECKERS)
    for name, drill in CATALOGUE.items():
        assert drill.checker == f"check_{name}" and callable(getattr(gl.drills, drill.checker))
        assert len(drill.wrongs) >= 10, name
        assert len(drill.rights) >= 5, name
        mistakes = [w.mistake for w in drill.wrongs]
        assert len(set(mistakes)) == len(mistakes), f"{name}: a mistake listed twice"


def test_the_catalogue_holds_the_mistakes_the_issue_names():
    """Wrong axis, keepdims, std convention, a missing clip side, a sign error, padding in a
    mean, a modified input: each is in the catalogue, under the drill where it happens."""
    def has(name, words):
        return any(words in w.mistake for w in CATALOGUE[name].wrongs)
    assert has("group_advantages", "axis 0") and has("group_advantages", "keepdims")
    assert has("group_advantages", "Bessel's std")
    assert has("clipped_surrogate", "a missing clip side")
    assert has("clipped_surrogate", "sign error") and has("group_advantages", "sign error")
    assert has("aggregate_loss", "padding counted")
    assert sum("in place" in w.mistake or "caller's array" in w.mistake
               for _, w in WRONGS) >= 5


def test_the_catalogue_holds_the_classes_issue_14_names():
    """Each class of the issue is a catalogued wrong answer, under the drill where it bites."""
    def has(name, words):
        return any(words in w.mistake for w in CATALOGUE[name].wrongs)
    assert has("group_advantages", "inside the square root")            # near-tied groups
    assert has("group_advantages", "E[x^2] - mean^2")                   # equal groups of 0.1
    assert has("group_advantages", "eps argument ignored")              # a non-default eps
    assert has("clipped_surrogate", "dual-clip") and has("grpo_loss", "dual-clip")
    assert has("log_softmax", "no max shift, in float32")               # bf16, large spread
    assert has("log_softmax", "float16 comes back float16")
    assert has("format_reward", "opening tags") and has("format_reward", "own search")
    assert has("format_reward", "order in the middle")                  # interleaved
    assert has("blocked_advantages", "float32 arithmetic inside")
    assert has("blocked_advantages", "in torch (invisible to tracemalloc)")
    assert has("surrogate_grad", "eps_high used for both") and has("surrogate_grad", "hard-coded")
    assert has("aggregate_loss", "N * N")
    assert has("process_advantages", "K = 3 hard-coded")
    endless = [n for n, w in WRONGS if "endless loop" in w.mistake or "stuck" in w.mistake]
    assert len(endless) >= 6, endless


@pytest.mark.parametrize("name, index", RIGHT_CASES)
def test_checker_accepts_the_right_answers(name, index, capsys):
    checker = getattr(gl.drills, CATALOGUE[name].checker)
    assert checker(CATALOGUE[name].rights[index]) is True
    out = capsys.readouterr().out
    assert out.startswith("PASS: ") and out.count("\n") == 1, out


@pytest.mark.parametrize("name, wrong", WRONG_CASES)
def test_checker_rejects_the_wrong_answer_with_its_hint(name, wrong, capsys, monkeypatch):
    if wrong.limit_s is not None:          # an endless loop: any limit gives its verdict
        monkeypatch.setattr(harness, "TIME_LIMIT_S", wrong.limit_s)
    checker = getattr(gl.drills, CATALOGUE[name].checker)
    assert checker(wrong.fn) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and out.count("\n") == 1, out
    assert wrong.hint in out, f"expected {wrong.hint!r} in the verdict:\n{out}"


def test_the_proof_table_of_chapter_9_reads_this_catalogue_in_the_books_order():
    """gl.drills.proof_table, which chapter 9 prints, loads this catalogue from its folder, in
    the book's order, and refuses a folder that is not one. Its verdicts are not proven a
    second time here: chapter 9's checked cell runs proof_table on this folder in every test
    run and nbval compares each of its counts (every right answer accepted, every wrong one
    named), and the tests above prove each answer on its own."""
    loaded = gl.drills.load_catalogue(ROOT / "tests" / "drills" / "catalogue")
    assert [d.checker for d in loaded.values()] == [d.checker for d in CATALOGUE.values()]
    assert {name: (len(d.rights), len(d.wrongs)) for name, d in loaded.items()} == {
        name: (len(d.rights), len(d.wrongs)) for name, d in CATALOGUE.items()}
    with pytest.raises(FileNotFoundError, match="path: expected the catalogue's folder"):
        gl.drills.proof_table(ROOT / "chapters")
    with pytest.raises(ValueError, match="a package that defines CATALOGUE"):
        gl.drills.load_catalogue(ROOT / "tests" / "drills")


def test_prove_reports_a_checker_that_lets_a_mistake_through(monkeypatch):
    """The proof can fail: a 'wrong' answer that is in fact right, and a hint that the checker
    does not give, are both reported."""
    right = CATALOGUE["group_advantages"].rights[0]
    flipped = lambda r, eps=1e-8: -right(r, eps)                            # noqa: E731
    fake = Drill("check_group_advantages", 1, rights=(right, flipped), wrongs=(
        Wrong("not wrong at all", right, "anything"),
        Wrong("a sign error, expecting the wrong hint", flipped, "keepdims"),
        Wrong("a sign error, expecting the right hint", flipped, "signs are flipped"),
    ))
    monkeypatch.setitem(CATALOGUE, "fake", fake)
    proof = prove("fake")
    assert not proof.ok
    assert (proof.rights_accepted, proof.wrongs_named) == (1, 1)
    missed = [mistake for mistake, _ in proof.failures]
    assert any("right answer" in m for m in missed)
    assert "not wrong at all" in missed and "a sign error, expecting the wrong hint" in missed


@pytest.mark.parametrize("checker", CHECKER_CASES)
def test_quiet_mode_prints_nothing(checker, capsys):
    name = checker.removeprefix("check_")
    check = getattr(gl.drills, checker)
    assert check(CATALOGUE[name].rights[0], verbose=False) is True
    assert check(CATALOGUE[name].wrongs[0].fn, verbose=False) is False
    assert capsys.readouterr().out == ""


def _raises_keyerror(*args, **kwargs):
    return {}["missing"]


def _hangs(*args, **kwargs):
    while True:
        pass


def _requires_grad(*args, **kwargs):
    import torch
    return torch.zeros(3, requires_grad=True) * 2


HOSTILE = {
    "a string": lambda *a, **k: "0.5",
    "a dict": lambda *a, **k: {"loss": 1.0},
    "an object": lambda *a, **k: object(),
    "a ragged list": lambda *a, **k: [[1.0, 2.0], [3.0]],
    "a complex array": lambda *a, **k: np.ones(3, dtype=complex),
    "NaN": lambda *a, **k: float("nan"),
    "an empty array": lambda *a, **k: np.array([]),
    "a 4-D array": lambda *a, **k: np.zeros((2, 2, 2, 2)),
    "a generator": lambda *a, **k: (x for x in range(3)),
    "an exception": _raises_keyerror,
    "a wrong signature": lambda: 0.0,
    ENDLESS_LOOP: _hangs,
    "a tensor that requires grad": _requires_grad,
    "SystemExit": lambda *a, **k: sys.exit(3),
    "the input itself": lambda *a, **k: a[0],
}


def _shape_of_first_call(checker):
    """A function right in shape on the first call only: later cases get a wrong shape."""
    calls = []

    def fn(*args, **kwargs):
        calls.append(1)
        first = np.asarray(args[0].detach() if hasattr(args[0], "detach") else args[0],
                           dtype=object if isinstance(args[0], str) else float)
        return np.zeros(first.shape if len(calls) == 1 else first.shape + (2,))
    return fn


@pytest.mark.parametrize("what", sorted(HOSTILE))
@pytest.mark.parametrize("checker", CHECKER_CASES)
def test_checkers_never_raise_on_the_readers_bugs(checker, what, capsys, monkeypatch):
    if what == "a tensor that requires grad" and importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    if what == ENDLESS_LOOP:
        monkeypatch.setattr(harness, "TIME_LIMIT_S", ENDLESS_LOOP_LIMIT_S)
    assert getattr(gl.drills, checker)(HOSTILE[what]) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and out.count("\n") == 1, out


@pytest.mark.parametrize("checker", CHECKER_CASES)
def test_a_wrong_shape_in_a_later_case_is_a_verdict(checker, capsys):
    assert getattr(gl.drills, checker)(_shape_of_first_call(checker)) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and out.count("\n") == 1, out


def test_exceptions_are_named_and_a_broadcast_error_gets_the_drills_hint(capsys):
    gl.drills.check_group_advantages(_raises_keyerror)
    assert "raised KeyError: 'missing'" in capsys.readouterr().out
    gl.drills.check_group_advantages(lambda r, eps=1e-8: (r - r.mean(-1)) / (r.std(-1) + eps))
    assert "keepdims=True" in capsys.readouterr().out
    gl.drills.check_format_reward(_raises_keyerror)
    assert "it never raises on the policy's output" in capsys.readouterr().out


def test_format_cases_are_the_package_rewards():
    from grpo_lab.drills.ch05_rewards import FORMAT_CASES
    assert len(FORMAT_CASES) >= 15
    for name, text, expected, _ in FORMAT_CASES:
        assert gl.format_reward(text) == expected, name
    assert {e for _, _, e, _ in FORMAT_CASES} == {0.0, 1.0}


def test_aggregation_cases_separate_the_modes():
    """Each case of several sequences must tell the modes apart, or a reader's mode mix-up
    could pass it (one sequence alone is the edge case where grpo and dapo agree)."""
    from grpo_lab.drills.ch02_aggregation import AGGREGATION_CASES
    for name, loss, mask, max_len in AGGREGATION_CASES:
        if max_len is None and loss.shape[0] > 1:
            values = [float(gl.aggregate_loss(loss, mask, m)) for m in ("grpo", "dapo", "dr_grpo")]
            assert len({round(v, 12) for v in values}) == 3, (name, values)


@pytest.mark.parametrize("old", ["drills_kl", "drills_precision", "drills_production"])
def test_the_old_alias_modules_are_gone(old):
    """The alias modules only re-exported gl.drills (issue 25 dropped the old-layout shims too:
    no reader's notebook imports a layout that was never released)."""
    with pytest.raises(ModuleNotFoundError, match=rf"No module named 'grpo_lab\.{old}'"):
        importlib.import_module(f"grpo_lab.{old}")
    with pytest.raises(AttributeError, match=rf"module 'grpo_lab' has no attribute '{old}'"):
        getattr(gl, old)
    assert not (ROOT / "grpo_lab" / f"{old}.py").exists()


def test_the_drills_subpackage_is_installed_with_the_package():
    """pyproject must ship every subpackage of grpo_lab (a plain `packages = ["grpo_lab"]`
    would leave grpo_lab.drills out of a non-editable install, e.g. on Colab)."""
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = find_packages(str(ROOT), include=["grpo_lab", "grpo_lab.*"])
    assert "grpo_lab.drills" in found
    if "packages" in config and isinstance(config["packages"], list):
        assert sorted(config["packages"]) == sorted(found)
    else:
        include = config["packages"]["find"]["include"]
        assert all(any(re.fullmatch(p.replace(".", r"\.").replace("*", ".*"), f) for p in include)
                   for f in found), include


@pytest.mark.parametrize("checker", CHECKERS)
def test_a_checker_called_wrongly_raises_a_type_error_naming_the_argument(checker, capsys):
    check = getattr(gl.drills, checker)
    with pytest.raises(TypeError, match=r"fn: expected the function to check .*got int 5"):
        check(5)
    with pytest.raises(TypeError, match=r"verbose: expected True or False, got str 'yes'"):
        check(CATALOGUE[checker.removeprefix("check_")].rights[0], verbose="yes")
    assert capsys.readouterr().out == ""


def test_the_eps_a_checker_takes_reaches_the_readers_function(capsys):
    """check_group_advantages(fn, eps=...) calls fn(rewards, eps=...) and grades with it."""
    right = CATALOGUE["group_advantages"].rights[0]
    calls = []

    def spy(rewards, eps=1e-8):
        calls.append(eps)
        return right(rewards, eps)
    assert gl.drills.check_group_advantages(spy, eps=1e-4) is True
    assert set(calls) == {1e-4}
    assert gl.drills.check_group_advantages(lambda r, eps=1e-8: right(r), eps=1e-4) is False
    assert "eps argument is ignored" in capsys.readouterr().out
