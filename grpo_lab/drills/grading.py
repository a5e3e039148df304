"""How a checker grades: it runs its cases (:mod:`grpo_lab.drills.cases`) against the
package's reference and says what differs.

:func:`check_cases` runs a checker's cases in order. The first case the answer fails is the
verdict: its first differing entry at full precision, with that entry's inputs, and when the
difference is the size of a coarser dtype's rounding, that this is what it means. A usual
mistake (:class:`~grpo_lab.drills.cases.Mistake`, a wrong implementation) is named only if the
reader's outputs equal that mistake's on every case run (the failing case, and the others'
finite entries), and the mistake differs from the reference on the failing case: a case that
cannot tell the mistake apart never names it. An answer in float16 or bfloat16 is a verdict of
its own (the drills want float32 or wider).
"""

from __future__ import annotations

import importlib.util
import re
import warnings

import numpy as np

from grpo_lab.drills.cases import (SCALAR_TYPE, UNIT_ROUNDOFF, Case, close, full, grade_dtype,
                                   tolerance)
from grpo_lab.drills.harness import Answer, call

__all__ = ["broadcast_note", "check_cases", "matching_mistakes", "precision_note",
           "warm_up_package", "wide_enough"]

_WARM = []               # one entry once the package's Numba kernels are compiled


def warm_up_package() -> None:
    """Compile the package's Numba kernels (``gl.group_advantages_fast``, about 2 s on a cold
    call) before a checker times the reader, so that an answer calling them is not charged for
    the package's own compilation. Once per process; nothing without Numba."""
    if _WARM or importlib.util.find_spec("numba") is None:
        return
    _WARM.append(True)
    from grpo_lab.perf.advantages_fast import group_advantages_fast
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for dtype in (np.float32, np.float64):
            group_advantages_fast(np.zeros((2, 3), dtype))


def _shape(x) -> tuple:
    return tuple(int(n) for n in getattr(x, "shape", ()))


def broadcast_note(problem: str, case: Case, hint: str) -> str:
    """What an exception about broadcasting shows, from the sizes it names: ``hint`` (a per-row
    quantity of shape (N,) against (N, T), or one reduced over the wrong axis, (T,)) only when
    N and T of the first 2-D input (N != T) are its sizes; a size that no input has, as a
    hard-coded length; else nothing.

    >>> c = Case("x", (np.zeros((3, 5)),), np.zeros((3, 5)))
    >>> broadcast_note("shapes (3,5) (3,) ", c, " (keepdims)")
    ' (keepdims)'
    >>> broadcast_note("shapes (3,5) (4,) ", c, " (keepdims)")  # doctest: +NORMALIZE_WHITESPACE
    " (the sizes it names, (3, 5) and (4,), include 4, which no input has: the inputs' shapes
    are (3, 5); is a length hard-coded? Take it from the input's shape)"
    """
    first = next((_shape(x) for x in case.args if len(_shape(x)) >= 2), None)
    dims = {n for x in case.args for n in _shape(x)}
    torch_sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b "
                            r"\((\d+)\)", problem)
    if torch_sizes:
        sizes = [(int(torch_sizes[1]),), (int(torch_sizes[2]),)]
        fits = (first is not None and first[0] != first[-1]
                and {s[0] for s in sizes} == {first[0], first[-1]})
    else:
        found = problem.split("shapes", 1)[1] if "shapes" in problem else ""
        sizes = [tuple(int(n) for n in re.findall(r"\d+", s))
                 for s in re.findall(r"\(([\d,\s]*)\)", found)]
        fits = (first is not None and first[0] != first[-1] and any(len(s) == 1 for s in sizes)
                and {n for s in sizes for n in s} - {1} == {first[0], first[-1]})
    if fits:
        return hint
    alien = sorted({n for s in sizes for n in s} - dims - {1})
    if not alien:
        return ""
    shown = " and ".join(str(s) if len(s) != 1 else f"({s[0]},)" for s in sizes)
    inputs = ", ".join(str(_shape(x)) for x in case.args if _shape(x))
    return (f" (the sizes it names, {shown}, include {', '.join(map(str, alien))}, which no "
            f"input has: the inputs' shapes are {inputs}; is a length hard-coded? Take it from "
            "the input's shape)")


def wide_enough(answer: Answer, case: Case) -> str | None:
    """A problem when the answer came back in float16 or bfloat16 (the drills want float32 or
    wider), else None. It says how much of the error storing in that dtype explains."""
    if answer.dtype not in ("float16", "bfloat16"):
        return None
    digits = {"float16": 3, "bfloat16": 2}[answer.dtype]
    text = (f"on {case.where} your function returned {answer.dtype} values, which keep about "
            f"{digits} decimal digits")
    if not np.isfinite(answer.values).all():
        return text + _sixteen_bit_nonfinite(answer, case)
    with np.errstate(all="ignore"):
        err = np.abs(answer.values - case.expected).max(initial=0.0)
        stored = np.abs(case.expected.astype(SCALAR_TYPE[answer.dtype]).astype(np.float64)
                        - case.expected).max(initial=0.0)
    if err <= 2 * stored + tolerance(case, "float32").max(initial=0.0):
        return text + (f": off by up to {err:.3g} here, from that rounding alone. Return "
                       "float32 or wider")
    return text + (f": off by up to {err:.3g} here, while storing the right answer in "
                   f"{answer.dtype} costs at most {stored:.3g}, so most of the error comes from "
                   f"computing in {answer.dtype} (a running sum in a 16-bit float stops growing "
                   "once it dwarfs its terms). Compute in float32 or wider, and return float32 "
                   "or wider")


#: The largest finite value of each 16-bit dtype, and the log of it (where exp passes it).
RANGE_16 = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def _sixteen_bit_nonfinite(answer: Answer, case: Case) -> str:
    """What a non-finite entry of a 16-bit answer shows: an overflow only where the exact value
    (the reference, in float64 from the same inputs) is beyond the dtype's range; else what
    the entry is (NaN: inf - inf, 0 * inf or 0 / 0; +-inf: a division by 0, log(0) or an inf
    carried along), with the inputs' largest exp when it is beyond the range."""
    d, top = answer.dtype, RANGE_16[answer.dtype]
    bad = ~np.isfinite(answer.values)
    i = tuple(int(j) for j in np.argwhere(bad)[0]) if bad.ndim else ()
    got, want = float(answer.values[i]), float(case.expected[i])
    where = f"entry {list(i)}" if i != () else "the value"
    fix = f". Compute in float32 or wider, and return float32 or wider"
    if not np.isfinite(want) or abs(want) > top:
        return (f", and some are inf or NaN: {where} is {got}, and its exact value, "
                f"{full(want)}, is beyond {d}'s range ({top:.5g}), so stored in {d} it "
                f"overflows" + fix)
    what = ("NaN is what inf - inf, 0 * inf or 0 / 0 gives" if np.isnan(got) else
            f"{got} is what a division by 0, a log of 0 or an inf carried along gives")
    text = (f", and some are inf or NaN: {where} is {got}, while its exact value, "
            f"{full(want)}, is within {d}'s range ({top:.5g}), so the result itself fits; "
            f"{what}, so a step on the way gave it")
    reach = max((float(np.abs(np.asarray(x, np.float64)).max(initial=0.0))
                 for x in case.inputs.values()
                 if isinstance(x, np.ndarray) and x.dtype.kind in "fV" and x.size), default=0.0)
    if reach > np.log(top):
        text += (f" (an input here is {reach:.6g}, and exp({reach:.6g}) is beyond {d}'s "
                 f"range: exp before a shift?)")
    return text + fix


def _coarser(graded: str, case: Case) -> tuple:
    """The dtypes whose rounding could explain a difference at ``graded``: float32 below
    float64; below float32 the 16-bit dtypes, the one the case's inputs come in first."""
    if graded == "float64":
        return ("float32",)
    if graded != "float32":
        return ()
    given = {str(np.asarray(x).dtype) for x in case.inputs.values() if isinstance(x, np.ndarray)}
    return tuple(sorted(("float16", "bfloat16"), key=lambda d: d not in given))


def precision_note(diff: float, case: Case, answer: Answer, index, *, fixed=None,
                   k: float = 16.0, slack: float = 0.0) -> str:
    """What the size of a difference means: the rounding of a coarser dtype, a few times what
    rounding explains, or nothing (a difference in the formula)."""
    graded = grade_dtype(answer, fixed)
    if not np.isfinite(diff):
        return ""
    scale = np.broadcast_to(np.abs(case.expected) if case.scale is None else np.abs(case.scale),
                            case.expected.shape)[index]
    tiny = False
    for coarser in _coarser(graded, case):
        if diff > tolerance(case, coarser, k=k, slack=slack)[index]:
            continue
        if diff < UNIT_ROUNDOFF[coarser] * scale / 64:
            tiny = True               # far below what one rounding in that dtype gives here:
            continue                  # no step ran in it
        size = (f"The difference, {diff:.2g}, is within what {coarser} rounding gives here "
                f"(unit roundoff {UNIT_ROUNDOFF[coarser]:.2g}, against "
                f"{UNIT_ROUNDOFF[graded]:.2g} for {graded}, the precision graded)")
        if answer.dtype == coarser:                  # a float32 answer where float64 is asked
            return f". {size}: your answer is {coarser}; the drill asks for {graded}"
        fix = ("keep float64 throughout: the drill asks for float64" if fixed == "float64"
               else "compute in float64 throughout, or return the float32 result as float32, "
               "which is graded at float32's precision" if coarser == "float32"
               else "compute in float32 or wider")
        return (f". {size}: your answer is {answer.dtype}, but if a step ran in {coarser} (an "
                f"input or constant cast to {coarser}, torch's default dtype), that explains "
                f"it; {fix}")
    allowed = tolerance(case, graded, k=k, slack=slack)[index]
    if 0 < allowed and diff < 100 * allowed:
        return (f". The difference, {diff:.2g}, is {diff / allowed:.1f} times what {graded} "
                f"rounding explains for this entry ({allowed:.2g}): a little more than rounding, "
                "so look for a step that loses digits (a subtraction of near-equal numbers, a "
                "long sum)")
    if tiny and 0 < allowed:
        return (f". The difference, {diff:.2g}, is {diff / allowed:.0f} times what {graded} "
                f"rounding explains for this entry ({allowed:.2g}), yet far below what one "
                f"{_coarser(graded, case)[0]} rounding gives here: a {graded} step loses digits "
                "(a finite difference, a subtraction of near-equal numbers)")
    return ""



def mistake_output(mistake, case):
    """What ``mistake`` gives on ``case``, as float64 of the expected shape; None where it
    gives nothing or cannot take this case's shape."""
    try:
        with np.errstate(all="ignore"):
            wrong = mistake.value(case)
        if wrong is None:
            return None
        return np.broadcast_to(np.asarray(wrong, np.float64), case.expected.shape)
    except (ValueError, TypeError, IndexError, ZeroDivisionError):
        return None

def matching_mistakes(mistakes, runs, failed: int, *, fixed=None, k=16.0, slack=0.0):
    """The hints of the mistakes that the answers match on every run case (on their finite
    entries, except the failing case) and that the failing case ``runs[failed]`` tells apart
    from the reference."""
    hints = []
    for mistake in mistakes:
        told, same = False, True
        for i, (case, answer) in enumerate(runs):
            wrong = mistake_output(mistake, case)
            if wrong is None:
                continue                                  # the mistake cannot be this shape
            tol = tolerance(case, grade_dtype(answer, fixed), k=k, slack=slack)
            agree = close(answer.values, wrong, tol)
            if not (agree if i == failed else agree | ~np.isfinite(answer.values)).all():
                same = False                # (a NaN elsewhere is another bug, not evidence)
                break
            told |= i == failed and not close(wrong, case.expected, tol).all()
        if same and told and mistake.hint not in hints:
            hints.append(mistake.hint)
    return hints


def check_cases(fn, cases, say, *, passed, mistakes=(), fixed: str | None = None,
                k: float = 16.0, slack: float = 0.0, extra=None, signature: str = "",
                **call_options) -> bool:
    """Run ``fn`` on ``cases`` and say the verdict (see the module's docstring).

    ``passed``: the PASS message, or a function giving it (read after the cases ran).
    ``extra(case, answer) -> problem or None``: a further requirement of the statement (an
    exact zero, an output dtype). ``signature``: the drill's, quoted when a call fails on the
    arguments (a keyword the function does not take). ``call_options`` go to
    :func:`harness.call` (``shape_hint``, ``returns``, ``dtype``), except ``broadcast_hint``,
    which follows an exception about broadcasting only when its sizes show that mistake
    (:func:`broadcast_note`), or is a function ``(problem, case) -> text`` that reads the sizes
    itself (a drill whose first input is not (N, T)).
    """
    runs, failed, verdict_text = [], None, None
    hint = call_options.pop("broadcast_hint", "")
    for case in cases:
        answer, problem = call(fn, *case.args, kwargs=case.kwargs, where=case.where,
                               shape=case.expected.shape, **call_options)
        if problem is not None and " raised " in problem and (
                "broadcast" in problem or "must match the size" in problem):
            problem += (hint(problem, case) if callable(hint)
                        else broadcast_note(problem, case, hint))
        if problem is not None:
            if failed is None:
                wrong_call = any(words in problem for words in (
                    "unexpected keyword argument", "positional argument"))
                return say(False, problem + (f" (the drill's signature is {signature})"
                                             if signature and wrong_call else ""))
            break                                   # only collecting evidence for the hint
        if failed is None:
            problem = wide_enough(answer, case)
            if problem:
                return say(False, problem)
            tol = tolerance(case, grade_dtype(answer, fixed), k=k, slack=slack)
            bad = ~close(answer.values, case.expected, tol)
            required = extra(case, answer) if extra else None
            if bad.any() or required:
                failed = len(runs)
                verdict_text = (_difference(case, answer, bad, fixed, k, slack) if bad.any()
                                else None, required)
        runs.append((case, answer))
    if failed is None:
        return say(True, passed() if callable(passed) else passed)
    hints = matching_mistakes(mistakes, runs, failed, fixed=fixed, k=k, slack=slack)
    (difference, (note, index)), required = (verdict_text[0] or (None, (None, None)),
                                             verdict_text[1])
    if note and "but if a step ran in float32" in note and not _float32_explains(
            runs, failed, index, mistakes):
        case, answer = runs[failed]
        f32 = float32_evaluation(case)
        gap = abs(float(answer.values[index]) - float(case.expected[index]))
        note = (f". The difference, {gap:.2g}, is about the size of a float32 rounding here, "
                "but your outputs are not a float32 evaluation of the formula on every case "
                f"run (here that gives {full(f32[index], 'float32')}), so float32 does not "
                "explain it: look at the formula itself")
    if hints and difference:   # a named mistake says more than the size of the difference
        return say(False, difference + f": {'; or '.join(hints[:2])}")
    return say(False, required or difference + note)


def float32_evaluation(case: Case):
    """The correct formula evaluated in float32: the case's reference on its float inputs
    rounded to float32, in float32 where the reference keeps its inputs' dtype, the result
    rounded to float32. Where the case has no reference (chapter 6b's cases, graded against
    NumPy references of tensors), the exact value rounded to float32."""
    if case.reference is None or not case.perturb:
        return case.expected.astype(np.float32).astype(np.float64)
    args = list(case.args)
    for i in case.perturb:
        args[i] = np.asarray(args[i], np.float64).astype(np.float32)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = np.asarray(case.reference(*args), np.float64)
        return np.broadcast_to(value.astype(np.float32).astype(np.float64), case.expected.shape)
    except (ValueError, TypeError, IndexError, ZeroDivisionError):
        return None


def _float32_explains(runs, failed: int, index, mistakes) -> bool:
    """Whether a float64 answer's outputs are a float32 evaluation of the correct formula: on
    every case run, every finite entry within float32's tolerance of
    :func:`float32_evaluation` (the failing case's every entry), and no usual mistake (one
    that differs from the reference at ``index`` of the failing case) closer to the output
    there."""
    for i, (case, answer) in enumerate(runs):
        f32 = float32_evaluation(case)
        agree = close(answer.values, f32, tolerance(case, "float32"))
        if not (agree if i == failed else agree | ~np.isfinite(answer.values)).all():
            return False
    case, answer = runs[failed]
    f32 = float32_evaluation(case)
    gap = abs(float(answer.values[index]) - float(f32[index]))
    for mistake in mistakes:
        wrong = mistake_output(mistake, case)
        if wrong is None:
            continue
        if (wrong[index] != case.expected[index]
                and abs(float(answer.values[index]) - float(wrong[index])) < gap):
            return False
    return True


def _difference(case, answer, bad, fixed, k, slack) -> tuple:
    index = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    got, want = answer.values[index], case.expected[index]
    what = f"entry {list(index)}" if index != () else "the value"
    text = (f"on {case.where} {what} is {full(got, answer.dtype)} ({answer.dtype}), expected "
            f"{full(want)}")
    inputs = case.entry_inputs(index)
    if inputs:
        text += f", for {inputs}"
    if bad.sum() > 1:
        text += f" ({int(bad.sum()) - 1} more of the {bad.size} entries differ)"
    note = precision_note(abs(got - want), case, answer, index, fixed=fixed, k=k, slack=slack)
    return text, (note, index)
