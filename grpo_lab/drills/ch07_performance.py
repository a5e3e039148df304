"""Drill checkers for chapter 7: a blocked group_advantages, and the surrogate's gradient.

* ``check_blocked_advantages(fn)``: ``fn(rewards, block_rows) -> adv``, float32 (B, G) in and
  out. The statement fixes float64 inside each block, so every entry must be the float64 result
  rounded once to float32 (within one float32 ulp); rows of 1000 +- 1e-3 tell float32 block
  arithmetic apart. The peak memory counts NumPy's and torch's allocations
  (:mod:`grpo_lab.drills.memory`): only the output may be the size of the input (a list of
  blocks concatenated at the end is a second one), on 6000 rows in blocks of 32.
* ``check_surrogate_grad(fn)``: ``fn(ratio, adv, eps_low, eps_high) -> d loss / d logp`` per
  token, (T,); the dtype is open (a float32 answer is graded to float32's precision).
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.surrogate import surrogate_grad_logp
from grpo_lab.drills.cases import Case, Mistake, full
from grpo_lab.drills.grading import check_cases, warm_up_package
from grpo_lab.drills.harness import TIMED_OUT, exception_text, verdict
from grpo_lab.drills.memory import peak_bytes

__all__ = ["check_blocked_advantages", "check_surrogate_grad"]


# --- blocked advantages -------------------------------------------------------------------------

def _blocked_cases():
    rng = np.random.default_rng(7)
    big = rng.normal(size=(6000, 32)).astype(np.float32)            # (B, G), the memory case
    big[5] = 0.1                                                     # an all-equal group
    near = (1000 + 1e-3 * rng.normal(size=(64, 16))).astype(np.float32)
    equal = np.full((6, 5), 0.1, dtype=np.float32)
    equal[3:] = rng.normal(size=(3, 5))
    rows = [("(6000, 32) float32 rewards with block_rows=32", big, 32),
            ("rows of 1000 +- 1e-3 (float32), block_rows=16", near, 16),
            ("(1000, 5) rewards, block_rows=96 (B not a multiple of it)",
             rng.uniform(0, 1, size=(1000, 5)).astype(np.float32), 96),
            ("a 7 x 7 batch with block_rows=100 (more than B)",
             rng.normal(size=(7, 7)).astype(np.float32), 100),
            ("block_rows=1", rng.normal(size=(5, 4)).astype(np.float32), 1),
            ("all-equal groups of 5 copies of 0.1 (float32)", equal, 2)]
    for where, rewards, block_rows in rows:
        yield Case(where, (rewards, block_rows), group_advantages(rewards.astype(np.float64)),
                   inputs={"rewards": rewards, "block_rows": block_rows},
                   show=lambda i, r=rewards: f"rewards[{i[0]}] = "
                                             f"{[full(v, 'float32') for v in r[i[0]][:6]]}")


def _blocked_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["rewards"].astype(np.float64)))
    return [m("that is Bessel's std (ddof=1); the drill uses gl.group_advantages's population "
              "std (ddof=0)", lambda r: group_advantages(r, ddof=1)),
            m("eps is missing from the std (gl.group_advantages adds eps = 1e-8)",
              lambda r: group_advantages(r, 0.0))]


#: What a measured call allocates beside the reader's arrays: the interpreter's and the torch
#: tracker's own bookkeeping (110 to 160 KiB measured with torch, under 1 KiB without).
#: With it and 16 float64 blocks, the allowance on the memory case (6000 x 32 float32, blocks
#: of 32 rows: a 750 KiB output) is 1.5x the output: a second full-size copy, 2x, is refused.
_BOOKKEEPING = 256 * 1024


def _float32_advantages(rewards):
    """The formula computed in float32 throughout: how far float32 block arithmetic drifts."""
    r = np.asarray(rewards, np.float32)
    dev = r - r.mean(-1, keepdims=True, dtype=np.float32)                  # (B, G)
    std = np.sqrt((dev * dev).mean(-1, keepdims=True, dtype=np.float32))    # (B, 1)
    return (dev / (std + np.float32(1e-8))).astype(np.float64)


def _unwritten(case, answer):
    """Rows that are exactly 0 where the advantages are not: rows the answer never wrote."""
    zero = (answer.values == 0).all(-1) & (case.expected != 0).any(-1)      # (B,)
    if not zero.any():
        return None
    rows, (B, _), block_rows = np.flatnonzero(zero), case.expected.shape, case.args[1]
    return (f"on {case.where} {rows.size} of the {B} rows are exactly 0 where the advantages "
            f"are not (rows {int(rows[0])} to {int(rows[-1])}; row {int(rows[0])} should be "
            f"{[full(v, 'float32') for v in case.expected[rows[0]][:3]]}...), as rows never "
            f"written into an np.zeros output are: does the loop over blocks reach every row "
            f"(range(0, B, block_rows), a last block shorter than block_rows = {block_rows})?")


def _rounding(case, answer):
    """An entry more than one float32 rounding from the float64 result; it blames float32
    arithmetic only when the difference is the size of what float32 arithmetic gives here."""
    wide = np.abs(answer.values - case.expected)
    off = wide > 2 * 2.0**-24 * np.abs(case.expected)
    if not off.any():
        return None
    i = tuple(int(j) for j in np.argwhere(off)[0])
    text = (f"on {case.where} entry {list(i)} is {full(answer.values[i], 'float32')}, "
            f"expected {full(case.expected[i])} (the float64 result rounds to "
            f"{full(case.expected[i], 'float32')}), for {case.entry_inputs(i)}: more than one "
            "float32 rounding away")
    with np.errstate(all="ignore"):
        drift = np.abs(_float32_advantages(case.inputs["rewards"]) - case.expected).max()
    if wide[i] <= 4 * drift + 4 * 2.0**-24 * abs(case.expected[i]):
        return text + (f", the size of what float32 arithmetic gives here (up to {drift:.2g}),"
                       " so the block arithmetic ran in float32; the drill asks for float64 "
                       "inside each block (on rows of 1000 +- 1e-3 a float32 mean loses most "
                       "of the spread)")
    return text + (f", and farther than float32 arithmetic drifts here (up to {drift:.2g}): "
                   "not a rounding, a difference in the formula")


def _requirements(fn, memory_case):
    def extra(case, answer):
        out, rewards = answer.raw, case.inputs["rewards"]
        if not isinstance(out, np.ndarray):
            return f"on {case.where} it returned {type(out).__name__}, expected a NumPy array"
        if out.dtype != np.float32:
            return (f"on {case.where} it returned {out.dtype}; float32 rewards give float32 "
                    "advantages (allocate the output with np.empty_like(rewards))")
        equal = (rewards == rewards[:, :1]).all(-1)
        if np.any(answer.values[equal] != 0):
            b = int(np.flatnonzero(equal & (answer.values != 0).any(-1))[0])
            return (f"on {case.where} the all-equal group (row {b}, every reward "
                    f"{full(rewards[b, 0], 'float32')}) is {answer.values[b][:3].tolist()}..., "
                    "not exactly 0: compute the mean in float64 (G copies of a float32 sum "
                    "exactly there), or subtract the row's first reward before the mean")
        problem = _unwritten(case, answer) or _rounding(case, answer)
        if problem:
            return problem
        if case is not memory_case:
            return None
        got, exc, numpy_peak, torch_peak = peak_bytes(fn, rewards.copy(), case.args[1])
        if exc is not None:
            return (f"on {case.where}, run again to measure its memory, your function "
                    + ("did not finish in time" if exc is TIMED_OUT else
                       f"raised {exception_text(exc)}"))
        peak, block_bytes = numpy_peak + torch_peak, case.args[1] * rewards.shape[1] * 8
        if peak > out.nbytes + 16 * block_bytes + _BOOKKEEPING:
            return (f"right values, but the peak memory was {peak / out.nbytes:.1f}x the output "
                    f"(NumPy {numpy_peak / out.nbytes:.1f}x, torch {torch_peak / out.nbytes:.1f}x)"
                    ": some temporary is the size of the whole input. Only the output may be; "
                    "keep the rest to a block")
        extra.peak = (numpy_peak, torch_peak, out.nbytes)
        return None
    return extra


def check_blocked_advantages(fn, *, verbose=True) -> bool:
    """Check ``fn(rewards, block_rows) -> advantages`` (float32 in, float32 out), done in blocks.

    The drill (chapter 7): the formula of :func:`group_advantages` on a (B, G) float32 array,
    a block of ``block_rows`` rows at a time, float64 inside the block, the result written
    into one float32 array, so that no temporary is larger than a block.
    """
    say = verdict(verbose, fn)
    warm_up_package()                 # gl.group_advantages_fast's compilation is not the reader's
    cases = list(_blocked_cases())
    extra = _requirements(fn, cases[0])

    def passed():
        numpy_peak, torch_peak, nbytes = extra.peak
        return (f"equal to gl.group_advantages within one float32 rounding on 6 batches (rows "
                f"near 1000, ragged last blocks, exact zeros), and a peak of "
                f"{(numpy_peak + torch_peak) / nbytes:.1f}x the output (NumPy and torch)")
    return check_cases(fn, cases, say, k=2.0, fixed="float32", mistakes=_blocked_mistakes(),
                       extra=extra, dtype=None, returns="the float32 advantages array",
                       signature="my_blocked_advantages(rewards, block_rows)", passed=passed)


# --- the surrogate's gradient -------------------------------------------------------------------

def _grad_reference(ratio, adv, eps_low, eps_high):
    logp, old = np.log(ratio)[None], np.zeros((1, np.size(ratio)))     # (1, T): r = exp(logp)
    return surrogate_grad_logp(logp, old, np.asarray(adv)[None], eps_low=eps_low,
                               eps_high=eps_high)[0]                    # (T,)


def _grad_cases():
    rng = np.random.default_rng(5)
    rows = [("the worked example", np.array([1.0, 1.1, 1.5, 0.5, 0.9, 0.5, 1.5, 1.25]),
             np.array([1.0, 2.0, 1.0, 1.0, -1.0, -1.0, -1.0, 1.0]), 0.2, 0.28)]
    for lo, hi in ((0.1, 0.3), (0.3, 0.1), (0.2, 0.2), (0.05, 0.5)):
        rows.append((f"40 random tokens, eps_low={lo}, eps_high={hi}",
                     np.exp(rng.normal(0, 0.3, size=40)), rng.normal(size=40), lo, hi))
    for where, ratio, adv, lo, hi in rows:
        yield Case(where, (ratio, adv, lo, hi), _grad_reference(ratio, adv, lo, hi),
                   inputs={"ratio": ratio, "adv": adv, "eps_low": lo, "eps_high": hi},
                   scale=np.abs(ratio * adv), perturb=(0, 1),
                   reference=lambda r, a, lo=lo, hi=hi: _grad_reference(r, a, lo, hi),
                   show=lambda i, r=ratio, a=adv, lo=lo, hi=hi: (
                       f"ratio = {full(r[i])}, adv = {full(a[i])}, eps_low = {lo}, "
                       f"eps_high = {hi}"))


def _grad_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(*(c.inputs[k] for k in ("ratio", "adv", "eps_low",
                                                                  "eps_high"))))
    return [
        m("the gradient with respect to the ratio, -A: the loss is differentiated with respect "
          "to logp, and d r / d logp = r", lambda r, a, lo, hi: np.where(
              _grad_reference(r, a, lo, hi) != 0, -a, 0.0)),
        m("no clipping: where the clipped term wins, the gradient is 0",
          lambda r, a, lo, hi: -a * r),
        m("the sign is flipped: the loss is minus the objective",
          lambda r, a, lo, hi: -_grad_reference(r, a, lo, hi)),
        m("eps_high was used for both bounds: below 1 the clip is at 1 - eps_low",
          lambda r, a, lo, hi: None if lo == hi else _grad_reference(r, a, hi, hi)),
        m("eps_low was used for both bounds: above 1 the clip is at 1 + eps_high",
          lambda r, a, lo, hi: None if lo == hi else _grad_reference(r, a, lo, lo)),
        m("eps_low and eps_high are swapped: the clip range is [1 - eps_low, 1 + eps_high]",
          lambda r, a, lo, hi: None if lo == hi else _grad_reference(r, a, hi, lo)),
        m("only A > 0 is clipped (above 1 + eps_high): with A < 0 the clip holds below "
          "1 - eps_low", lambda r, a, lo, hi: np.where((a > 0) & (r > 1 + hi), 0.0, -a * r)),
        m("only A < 0 is clipped (below 1 - eps_low): with A > 0 the clip holds above "
          "1 + eps_high", lambda r, a, lo, hi: np.where((a < 0) & (r < 1 - lo), 0.0, -a * r)),
    ]


def check_surrogate_grad(fn, *, verbose=True) -> bool:
    """Check ``fn(ratio, adv, eps_low, eps_high) -> d loss / d logp`` of PPO's clipped loss.

    The drill (chapter 7): the per-token gradient the fused loss computes in its forward pass,
    for the loss ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` with ``r = exp(logp -
    old_logp)``; compared with the package's :func:`grpo_lab.surrogate_grad_logp` on the worked
    example and on random tokens with four clip ranges (asymmetric both ways).
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_grad_cases()), say, mistakes=_grad_mistakes(),
                       returns="the (T,) gradient", shape_hint=": one gradient per token",
                       signature="my_surrogate_grad(ratio, adv, eps_low, eps_high)",
                       passed="-A r where the unclipped term wins, 0 where the clip holds, both "
                              "sides, on the worked example and 160 random tokens with four "
                              "clip ranges")
