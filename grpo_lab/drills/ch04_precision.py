"""Drill checkers for chapter 4 (low precision): they hand the reader's function float16 and
bfloat16 arrays *in their own dtype*, and say what goes wrong, and why.

* ``check_log_softmax(fn)``: ``fn(logits) -> logp`` over the last axis. The statement: shift by
  the row max, accumulate in float32 or wider, return float32 or wider, accurate to 1e-3 nats
  on 32000 bfloat16 logits. Every answer is graded at float32, the statement's floor (a float64
  answer too); rows far apart tell a batch-wide shift from each row's own.
* ``check_sequence_logprob_sum(fn)``: ``fn(logp, mask) -> (N,)``. The statement fixes the
  accumulator: float32 or wider. So every answer is allowed what a float32 running sum of n
  terms makes in practice, ``8 sqrt(n) u32 sum|x|`` (its rounding errors add like a random
  walk: a float32 loop over 32768 log-probs is off by about 0.15), far below what a
  bfloat16 accumulator loses (tens to tens of thousands).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from grpo_lab.drills.cases import Case, Mistake, full
from grpo_lab.drills.grading import check_cases
from grpo_lab.drills.harness import verdict

__all__ = ["check_log_softmax", "check_sequence_logprob_sum"]

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


def _reference_log_softmax(z):
    z = np.asarray(z).astype(np.float64)
    return z - np.logaddexp.reduce(z, axis=-1, keepdims=True)


# --- log-softmax --------------------------------------------------------------------------------

def _ls_cases():
    rng = np.random.default_rng(0)
    rows = [("the worked example", np.log([[1.0, 1.0, 2.0], [1.0, 3.0, 4.0]]), 0.0),
            ("float16 logits [0, 5, 12]", np.array([[0.0, 5.0, 12.0]], dtype=F16), 0.0),
            ("32000 bfloat16 logits", rng.normal(scale=0.5, size=(2, 32_000)).astype(BF16),
             1e-3),                                        # the statement's accuracy
            ("bfloat16 logits spread over +-150", rng.normal(scale=50, size=(2, 40)).astype(BF16),
             0.0),
            ("float32 logits of +-1000", np.array([[1000.0, 0.0, -1000.0, 999.0]], np.float32),
             0.0),
            ("float32 logits of shape (3, 7)", rng.normal(size=(3, 7)).astype(np.float32), 0.0),
            ("float32 rows 300 apart (each row needs its own max)",
             np.array([[0.0, 1.0, 2.0], [-300.0, -299.0, -298.0]], np.float32), 0.0),
            ("float64 rows 1000 apart", np.array([[5.0, 3.0], [-995.0, -997.0]]), 0.0),
            ("float64 logits of shape (2, 3, 5)", rng.normal(size=(2, 3, 5)), 0.0),
            ("one logit per row", np.array([[3.0], [-2.0]], dtype=F16), 0.0)]
    for where, z, atol in rows:
        wide = z.astype(np.float64)
        spread = np.abs(wide - wide.max(-1, keepdims=True))
        yield Case(where, (z,), _reference_log_softmax(z), inputs={"logits": z},
                   scale=np.abs(wide) + spread + np.log(z.shape[-1]) + 1, atol=atol,
                   reference=_reference_log_softmax, perturb=(0,),
                   show=lambda i, z=z: f"logits{list(i)} = {full(z[i], str(z.dtype))} in "
                                       f"{z.dtype}, row max {full(z[i[:-1]].max(), str(z.dtype))}")


def _ls_mistakes():
    def m(hint, f, dtypes=None):
        def value(c):
            z = c.inputs["logits"]
            return None if dtypes and z.dtype not in dtypes else f(z)
        return Mistake(hint, value)

    def low_sum(z):                                   # every step in the input's dtype
        shifted = z - z.max(-1, keepdims=True)
        return (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))).astype(np.float32)

    return [
        m("those are probabilities (softmax); take their log, or z - logsumexp(z)",
          lambda z: np.exp(_reference_log_softmax(z))),
        m("you normalised over axis 0; the vocabulary is the last axis (axis=-1)",
          lambda z: None if z.shape[0] == 1 else z.astype(np.float64) - np.logaddexp.reduce(
              z.astype(np.float64), axis=0, keepdims=True)),
        m("you subtracted the max but not log(sum(exp(z - max)))",
          lambda z: (z.astype(np.float64) - z.astype(np.float64).max(-1, keepdims=True))),
        m("the sum of exp ran in bfloat16, where a running sum stops growing near 256 (and "
          "exp rounds to 3 digits): cast to float32 (or float64) before exp and the sum",
          low_sum, dtypes=(BF16,)),
    ]


_TINY_LOG = {"float64": -708.4, "float32": -87.3}    # log of the smallest normal number
_EXP_MAX = {"float64": 709.8, "float32": 88.7, "bfloat16": 88.7, "float16": 11.1}


def _finite(case, answer):
    """A non-finite entry, said from what it is: +inf (a row's sum of exponentials underflowed
    to 0), -inf where the exact log-prob is below log(smallest float) (the log of an
    underflowed probability), a row whose largest logit overflowed exp itself."""
    bad = ~np.isfinite(answer.values)
    if not bad.any():
        return None
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    z, got, want = case.inputs["logits"], answer.values[i], case.expected[i]
    row_max = z[i[:-1]].astype(np.float64).max()
    text = (f"on {case.where} entry {list(i)} is {got}, expected {full(want)}, in a row whose "
            f"largest logit is {full(row_max, str(z.dtype))}")
    wide = "float64" if answer.dtype == "float64" else "float32"
    if got == np.inf:
        return text + (": +inf is what subtracting log(0) gives: the sum of exp(z - m) over "
                       "this row came out 0, every exp underflowed, so the shift m was far "
                       "above this row's own max (the batch's max?). Shift each row by its own "
                       "max, z.max(axis=-1, keepdims=True)")
    top = int(np.argmax(z[i[:-1]].astype(np.float64)))               # the row's max logit
    limit = min(_EXP_MAX.get(str(z.dtype), 709.8), _EXP_MAX[wide])
    if row_max > limit and not np.isfinite(answer.values[i[:-1]][top]):
        return text + (f": even the row's largest logit gives {answer.values[i[:-1]][top]}, "
                       f"so exp of a logit that large overflowed ({z.dtype} and float32 stop "
                       "near exp(88), float16 at exp(11), float64 at exp(709)), and inf - inf "
                       "or log(inf) followed. Subtract the row max before exp: every exp is "
                       "then at most 1")
    if got == -np.inf and want < _TINY_LOG[wide]:
        return text + (f": its probability, exp({want:.4g}), is below the smallest {wide} "
                       "(about 1e-38 in float32, 1e-308 in float64), so it rounds to 0 and its "
                       "log is -inf. Never take the log of a probability: compute "
                       "z - m - log(sum(exp(z - m))) directly")
    return text + ": the exact log-probs of this row are all finite"


def check_log_softmax(fn, *, verbose=True) -> bool:
    """Check ``fn(logits) -> log-probs`` over the last axis, for float16, bfloat16, float32 and
    float64 logits handed over in their own dtype.

    The drill: shift by the row max (no exp overflows), accumulate the sum of exponentials in
    float32 or wider, return float32 or wider.
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_ls_cases()), say, mistakes=_ls_mistakes(), extra=_finite,
                       fixed="float32", dtype=None, returns="the log-probs array",
                       shape_hint="; log-probs have the logits' shape",
                       signature="my_log_softmax(logits)",
                       passed="worked example, float16 past exp's range, 32000 bfloat16 "
                              "logits, bfloat16 spread over +-150, float32 at +-1000, rows "
                              "300 and 1000 apart, and float32 / float64 batches are all "
                              "right")


# --- sequence log-prob sums ---------------------------------------------------------------------

def _sum_cases():
    rng = np.random.default_rng(0)
    long = -rng.exponential(2.5, size=(1, 32_768))                  # sum near -82000

    def ragged(n, t, dtype, pad=-99.0):
        mask = np.arange(t) < rng.integers(1, t + 1, size=(n, 1))   # (N, T) bool
        return np.where(mask, -rng.exponential(2.0, size=(n, t)), pad).astype(dtype), mask

    rows = [("the worked example (logp of shape (2, 3), the padding -99)",
             np.array([[-1.0, -2.0, -99.0], [-0.5, -0.5, -0.5]]),
             np.array([[1, 1, 0], [1, 1, 1]], dtype=bool)),
            ("32768 bfloat16 log-probs", long.astype(BF16), np.ones(long.shape, bool)),
            ("32768 float16 log-probs", long.astype(F16), np.ones(long.shape, bool)),
            ("a ragged (4, 300) bfloat16 batch", *ragged(4, 300, BF16)),
            ("a ragged 5 x 5 float32 batch (N == T)", *ragged(5, 5, np.float32)),
            ("a ragged (3, 1000) float16 batch", *ragged(3, 1000, F16, pad=-60000.0))]
    for where, logp, mask in rows:
        kept = np.where(mask, logp.astype(np.float64), 0.0)           # (N, T)
        exact = np.array([math.fsum(row) for row in kept])            # (N,) correctly rounded
        n = mask.sum(-1)
        yield Case(where, (logp, mask), exact, inputs={"logp": logp, "mask": mask},
                   scale=np.sqrt(n) * np.abs(kept).sum(-1),
                   show=lambda i, n=n, d=logp.dtype: f"{n[i[0]]} real {d} tokens in row {i[0]}")


def _sum_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["logp"], c.inputs["mask"]))

    def wide(logp):
        return logp.astype(np.float64)

    return [
        m("the padded tokens were counted: multiply by the mask, or np.where(mask, logp, 0), "
          "before summing", lambda lp, mask: wide(lp).sum(-1)),
        m("that is a mean (the sum divided by the length); this drill is the sum",
          lambda lp, mask: np.where(mask, wide(lp), 0).sum(-1) / mask.sum(-1)),
        m("that is a mean over all T positions; this drill is the sum",
          lambda lp, mask: np.where(mask, wide(lp), 0).mean(-1)),
        m("the sum was taken over axis 0 (across sequences); each row is a sequence: sum "
          "along the last axis", lambda lp, mask: np.where(mask, wide(lp), 0).sum(0)
          if lp.shape[0] == lp.shape[1] else None),
        m("the running sum was kept in the input's dtype, which stops growing once it dwarfs "
          "the terms: cast to float32 (or float64) before the sum",
          lambda lp, mask: None if lp.dtype == np.float64 else
          (lp * mask.astype(lp.dtype)).sum(-1).astype(np.float64)),
    ]


def _finite_sum(case, answer):
    """A non-finite sum, said from what it is: beyond the input dtype's range (a sum kept in
    that dtype) only when the exact sum is; else -inf as the log of an underflowed product, or
    NaN (a product of inf and 0: the padding multiplied in)."""
    bad = ~np.isfinite(answer.values)
    if not bad.any():
        return None
    i = int(np.argwhere(bad)[0, 0])
    logp, mask = case.inputs["logp"], case.inputs["mask"]
    d, got, want = logp.dtype, answer.values[i], case.expected[i]
    top = 3.39e38 if d == BF16 else float(np.finfo(d).max)           # the dtype's largest
    text = f"on {case.where} sum {i} is {got}, expected {full(want)}"
    if abs(want) > top:
        return text + (f": that sum is beyond {d}'s range ({d} stops at {top:.5g}), so a "
                       f"running sum kept in {d} overflows there. Accumulate in float32 or "
                       "float64")
    padded = float(logp[i].astype(np.float64).sum())
    if not mask[i].all() and abs(padded) > top:
        return text + (f": with the padding ({full(logp[i][~mask[i]][0], str(d))}) counted, "
                       f"the sum is {padded:.6g}, beyond {d}'s range ({top:.5g}). Leave the "
                       "padding out (np.where(mask, logp, 0)) and accumulate in float32 or "
                       "float64")
    if got == -np.inf:
        gone = [(n, low) for n, low in (("float64", -745.2), ("float32", -103.3)) if want < low]
        if not gone:
            return text + (": -inf is the log of 0, yet exp of this sum is not 0 even in "
                           "float32, so a 0 came from somewhere else: look for a log of 0")
        name, low = gone[0]
        return text + (f": -inf is the log of 0, and exp({want:.6g}) is 0 in {name} and every "
                       f"narrower float (the smallest {name} is about exp({low:.0f})): was a "
                       "product of probabilities (or exp of the sum) taken before the log? Sum "
                       "the log-probs")
    return text + (": a sum of finite log-probs is finite; a NaN comes from inf - inf or "
                   "0 * inf (padding multiplied by the mask?). Set the padding to 0 with "
                   "np.where(mask, logp, 0) and sum in float32 or float64")


def check_sequence_logprob_sum(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, mask) -> (N,)`` sums of the real tokens' log-probs, for float64,
    bfloat16, float16 and float32 log-probs (32768 tokens, and ragged batches).

    The drill: padding (mask False) never enters, the sum runs along the last axis, it is
    accumulated in float32 or wider, and the result is returned in float32 or wider.
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_sum_cases()), say, mistakes=_sum_mistakes(), extra=_finite_sum,
                       fixed="float32", k=8.0, dtype=None, returns="the (N,) sums",
                       shape_hint=": one sum per sequence",
                       signature="my_sequence_logprob_sum(logp, mask)",
                       passed="worked example with padding, 32k tokens in bfloat16 and "
                              "float16, and ragged bfloat16, float32 and float16 batches are "
                              "all right")
