"""Drill checker for chapter 1: group-relative advantages.

The drill: ``my_group_advantages(rewards, eps=1e-8)``, rewards (B, G) -> (r - group mean) /
(group std + eps), statistics along the last axis with keepdims, the population std (ddof=0),
an all-equal group giving 0, the caller's array left alone.

The cases: the worked example, several groups, B == G, seeded random batches (G odd, G even,
binary rewards), all-equal groups of G = 3, 5 and 7 copies of a number that is not a power of
two (where ``E[x^2] - mean^2`` comes out below 0), near-tied groups (where eps inside the square
root is not eps beside the std), a large offset, and eps = 1e-4 and 0.5 passed by keyword.

Chapter 1 shows the plain formula (``gl.paper.group_advantages``) before its drill, so the
drill there asks for the float32 version, ``check_group_advantages(fn, dtype="float32")``: the
answer must come back in float32 and still give an all-equal group 0, which the plain formula
computed in float32 does not (its group mean is off by a rounding, divided by eps).
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.drills.cases import UNIT_ROUNDOFF, Case, Mistake, full
from grpo_lab.drills.grading import check_cases, warm_up_package
from grpo_lab.drills.harness import verdict

__all__ = ["check_group_advantages", "equal_group_note"]

_KEEPDIMS = (" (a group statistic of shape (B,) does not broadcast against (B, G): keep it "
             "(B, 1) with keepdims=True)")
_EXACT_ZERO = 1e-6       # what "an all-equal group gives 0" allows: far below any real advantage


def _stats(r, eps, ddof=0):
    mean = r.mean(-1, keepdims=True)                             # (B, 1)
    return r - mean, r.std(-1, keepdims=True, ddof=ddof), eps


def _mistakes():
    def m(hint, f):
        return Mistake(hint, lambda case: f(case.inputs["rewards"], case.inputs["eps"]))
    square = lambda r: r.shape[0] == r.shape[1]                  # noqa: E731
    return [
        m("that is Bessel's std (ddof=1, torch.std's default); this drill uses the population "
          "std (ddof=0, NumPy's default)", lambda r, e: (lambda d, s, e: d / (s + e))(
              *_stats(r, e, ddof=1))),
        m("the mean is subtracted but the std is not divided out", lambda r, e: _stats(r, e)[0]),
        m("the mean of the whole batch is subtracted, and the std is not divided out: each "
          "group needs its own mean and std (axis=-1, keepdims=True)", lambda r, e: r - r.mean()),
        m("the statistics were taken over axis 0 (across prompts); each row is a group: take "
          "them along the last axis (axis=-1, keepdims=True)",
          lambda r, e: (r - r.mean(0)) / (r.std(0) + e)),
        m("the mean and std were taken over the whole batch; each prompt's group needs its "
          "own (axis=-1, keepdims=True)", lambda r, e: (r - r.mean()) / (r.std() + e)),
        m("the signs are flipped: a reward above the group mean must get a positive advantage",
          lambda r, e: -group_advantages(r, e)),
        m("eps is inside the square root, sqrt(var + eps); the drill adds it to the std, "
          "std + eps, and the two differ when a group's rewards nearly tie",
          lambda r, e: _stats(r, e)[0] / np.sqrt(r.var(-1, keepdims=True) + e)),
        m("eps is used as a floor, max(std, eps); the drill adds it, std + eps",
          lambda r, e: _stats(r, e)[0] / np.maximum(r.std(-1, keepdims=True), e)),
        m("eps is missing: an all-equal group divides 0 by 0; add eps to the std",
          lambda r, e: _stats(r, e)[0] / r.std(-1, keepdims=True)),
        m("the eps argument is ignored (1e-8 is used whatever is passed): use eps",
          lambda r, e: None if e == 1e-8 else group_advantages(r, 1e-8)),
        m("the variance as E[x^2] - mean^2 can come out just below 0 for equal rewards (three "
          "copies of 0.1 give -1.7e-18), and its square root is NaN: take the mean of the "
          "squared deviations, ((r - mean)**2).mean(-1), or r.std(-1)",
          lambda r, e: _stats(r, e)[0] / (np.sqrt((r * r).mean(-1, keepdims=True)
                                                  - r.mean(-1, keepdims=True) ** 2) + e)),
    ] + [m("on a batch with B == G the statistics broadcast along the wrong axis: a mean "
           "of shape (B,) lines up with the last axis; keep it (B, 1) with keepdims=True",
           lambda r, e, keep=keep: (r - r.mean(-1)) / (r.std(-1, keepdims=keep) + e)
           if square(r) else None) for keep in (False, True)]


def _cases(eps):
    """(where, rewards, eps passed by keyword or None) of every case, the worked example first."""
    rng = np.random.default_rng(1)
    near = 0.5 + 1e-6 * np.array([1.0, -1.0, 0.5, -0.5])          # std 7.9e-7 beside eps 1e-8
    rows = [
        ("the worked example [[1, 0, 1, 0]]", [[1.0, 0.0, 1.0, 0.0]], None),
        ("a batch of 3 groups", [[1.0, 2.0, 3.0, 6.0], [10.0, 10.0, 40.0, 20.0],
                                 [0.0, 1.0, 0.0, 0.0]], None),
        ("a 3 x 3 batch (B == G)", [[1.0, 0.0, 0.0], [5.0, 6.0, 9.0], [2.0, 2.0, 3.0]], None),
        ("an all-equal group", [[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 1.0]], None),
        ("a random (5, 8) batch", rng.normal(size=(5, 8)), None),
        ("a random (4, 4) batch of 0/1 rewards", rng.integers(0, 2, size=(4, 4)) * 1.0, None),
        ("a random (6, 5) batch (G odd)", 3 * rng.normal(size=(6, 5)) + 1, None),
        ("a random (2, 7) batch", rng.uniform(-2, 2, size=(2, 7)), None),
        ("all-equal groups of G = 3", [[0.1] * 3, [0.2] * 3, [0.72] * 3, [0.3, 0.1, 0.2]], None),
        ("all-equal groups of G = 5", [[0.11] * 5, [0.21] * 5, [0.0, 1.0, 1.0, 0.0, 1.0]], None),
        ("all-equal groups of G = 7", [[0.3] * 7, [0.03] * 7, list(range(7))], None),
        ("near-tied groups", [near, near[::-1] * 3], None),
        ("rewards near 1e4", 1e4 + rng.normal(size=(2, 6)), None),
        ("rewards 0.5 +- 1e-4 with eps=1e-4", [0.5 + 1e-4 * np.array([1.0, -1.0, 1.0, -1.0]),
                                               [0.0, 1.0, 0.0, 0.0]], 1e-4),
        ("0/1 rewards with eps=0.5", rng.integers(0, 2, size=(3, 6)) * 1.0, 0.5),
    ]
    for where, rewards, case_eps in rows:
        rewards = np.asarray(rewards, dtype=np.float64)
        e = eps if eps is not None else 1e-8 if case_eps is None else case_eps
        kwargs = {} if eps is None and case_eps is None else {"eps": e}
        equal = (rewards == rewards[:, :1]).all(-1, keepdims=True)   # (B, 1) all-equal groups
        yield Case(where, (rewards,), group_advantages(rewards, e), kwargs=kwargs,
                   inputs={"rewards": rewards, "eps": e}, atol=np.where(equal, _EXACT_ZERO, 0.0),
                   reference=lambda r, e=e: group_advantages(r, e), perturb=(0,),
                   show=lambda i, r=rewards, e=e: (f"rewards[{i[0]}] = "
                                                   f"{[full(v) for v in r[i[0]]]}, eps = {e}"))


def equal_group_note(values, reward: float, G: int, eps: float, dtype: str, *,
                     terms: int = 1) -> str:
    """What an all-equal group's non-zero advantages show, said from the values themselves:
    NaN (0 / 0 without eps; the square root of E[x^2] - mean^2 only when that is below 0 for
    this group in ``dtype``), +-inf (a non-zero deviation over a std of exactly 0, no eps), or
    values the size of one rounding of the group mean divided by eps; else only that they are
    not 0. ``terms``: how many normalised rewards an entry sums (chapter 8's steps to go).
    Shared by chapter 8's checker."""
    values = np.asarray(values, dtype=np.float64)
    wide = np.float32 if dtype == "float32" else np.float64
    if np.isnan(values).any():
        r = np.full(G, reward, dtype=wide)
        second = float((r * r).mean() - r.mean() ** 2)           # E[x^2] - mean^2, as written
        zero = ("0 / 0, a deviation of 0 over a std of 0 with no eps to keep the denominator "
                "above 0: add eps to the std")
        if second >= 0:             # E[x^2] - mean^2 is no NaN here: 0 / 0 is what is left
            return ": NaN here is " + zero
        return (f": NaN here is either {zero}; or the square root of E[x^2] - mean^2, which "
                f"comes out {second:.2g} in {dtype} for these rewards, below 0: take the mean "
                "of the squared deviations, ((r - mean)**2).mean(-1), or r.std(-1)")
    if np.isinf(values).any():
        return (": inf is a non-zero deviation over a std of exactly 0 with no eps: the group "
                "mean of equal rewards came out a rounding away from them. Add eps to the std, "
                "and subtract each group's first reward before the mean so that the "
                "deviations are exactly 0")
    rounding = G * terms * UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["float64"]) * abs(reward)
    size = float(np.abs(values).max())
    if eps > 0 and 0 < size * eps <= 2 * rounding:
        return (f": {size:.2g} times eps = {eps:g} is {size * eps:.2g}, the size of a rounding of "
                f"the group mean of {G} copies of {full(reward)} in {dtype} (up to "
                f"{rounding:.2g}): the mean came out a rounding away from the rewards, and that "
                "was divided by a std of 0 plus eps: subtract each group's first reward before "
                "the mean (the deviations are then exactly 0), or compute in float64")
    return (f": with no spread there is no signal, yet your entries reach {size:.2g}, more "
            "than a rounding of the group mean divided by eps explains: look at how the "
            "deviation and the std are computed for a group with no spread")


def _all_equal_gives_zero(case, answer):
    r = case.inputs["rewards"]
    rows = np.flatnonzero((r == r[:, :1]).all(-1))                # the all-equal groups
    got = answer.values[rows]
    if rows.size and not (np.abs(got) <= _EXACT_ZERO).all():
        b = int(rows[np.argmax(~(np.abs(got) <= _EXACT_ZERO).any(-1))])
        where = (f"on {case.where} the all-equal group rewards[{b}] = {full(r[b, 0])} x "
                 f"{r.shape[1]} gave {[full(v, answer.dtype) for v in answer.values[b]]}, "
                 "expected 0 (no spread, no signal)")
        return where + equal_group_note(answer.values[b], float(r[b, 0]), r.shape[1],
                                        case.inputs["eps"], answer.dtype)
    return None


def _returns_float32(case, answer):
    if answer.dtype != "float32":
        return (f"on {case.where} your function returned {answer.dtype} values; this drill "
                "asks for float32 arithmetic and a float32 result, as a GPU trainer computes "
                "it (r = np.asarray(rewards, dtype=np.float32))")
    return None


def check_group_advantages(fn, *, eps=None, dtype=None, verbose=True) -> bool:
    """Check ``fn(rewards, eps=1e-8) -> advantages`` against GRPO's formula, population std.

    ``eps``: None tries the default (``fn(rewards)``) and eps = 1e-4 and 0.5 passed as
    ``fn(rewards, eps=...)``; a number passes that eps to every call. A float32 answer is
    graded to float32's precision; an all-equal group must give 0 (within 1e-6) in any dtype.
    ``dtype="float32"`` also asks for a float32 result (chapter 1's drill); None takes any.

    >>> import grpo_lab as gl
    >>> gl.drills.check_group_advantages(lambda r, eps=1e-8: gl.group_advantages(r, eps))
    ... # doctest: +ELLIPSIS
    PASS: the worked example, per-group statistics, B == G, odd and even G, all-equal and ...
    True
    >>> gl.drills.check_group_advantages(lambda r, eps=1e-8: gl.group_advantages(r, eps, ddof=1),
    ...                                  verbose=False)
    False
    >>> gl.drills.check_group_advantages(lambda r, eps=1e-8: gl.group_advantages(r, eps),
    ...                                  dtype="float32", verbose=False)       # float64 back
    False
    """
    if dtype not in (None, "float32"):
        raise ValueError(f"dtype: expected None or 'float32', got {dtype!r}")
    say = verdict(verbose, fn)
    warm_up_package()                 # gl.group_advantages_fast's compilation is not the reader's

    def extra(case, answer):
        return ((_returns_float32(case, answer) if dtype else None)
                or _all_equal_gives_zero(case, answer))
    return check_cases(
        fn, list(_cases(eps)), say, mistakes=_mistakes(), extra=extra,
        returns="the advantages array", broadcast_hint=_KEEPDIMS,
        signature="my_group_advantages(rewards, eps=1e-8)",
        shape_hint="; advantages have the rewards' shape (B, G)",
        passed="the worked example, per-group statistics, B == G, odd and even G, all-equal "
               "and near-tied groups and eps passed by keyword are all right"
               + (", in float32" if dtype else ""))
