"""Chapter 4: a log-softmax and a sequence log-prob sum for float16 / bfloat16."""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.logprobs import log_softmax, sequence_logprob_sum
from tests.drills.catalogue.entry import Drill, Wrong


# --- chapter 4: log-softmax for float16 / bfloat16 logits, fn(logits) --------------------------

def _ls_right(z):
    z = np.asarray(z).astype(np.float32)                          # wide accumulator
    z = z - z.max(-1, keepdims=True)                              # every exp <= 1
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _ls_in_place(z):
    z -= z.max(-1, keepdims=True)
    return _ls_right(z)


def _ls_raises(z):
    raise RuntimeError("boom")


_LOG_SOFTMAX = Drill("check_log_softmax", 4, rights=(_ls_right, log_softmax), wrongs=(
    Wrong("no max shift", lambda z: z - np.log(np.exp(z).sum(-1, keepdims=True)),
          "Subtract the row max"),
    Wrong("the sum of exp in the input's dtype",
          lambda z: ((z - z.max(-1, keepdims=True))
                     - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
                     ).astype(np.float32), "sum of exp ran in bfloat16"),
    Wrong("returns the input's dtype", lambda z: _ls_right(z).astype(z.dtype),
          "come back in bfloat16"),
    Wrong("returns softmax", lambda z: np.exp(_ls_right(z)), "probabilities (softmax)"),
    Wrong("normalises over axis 0",
          lambda z: np.asarray(z, np.float64) - np.log(np.exp(np.asarray(z, np.float64))
                                                       .sum(0, keepdims=True)), "axis 0"),
    Wrong("subtracts the max only",
          lambda z: np.asarray(z, np.float32) - np.asarray(z, np.float32).max(-1, keepdims=True),
          "subtracted the max but not"),
    Wrong("shifts in place", _ls_in_place, "modified its input"),
    Wrong("crashes", _ls_raises, "raised RuntimeError: boom"),
    Wrong("forgets to return", lambda z: None, "returned None"),
    Wrong("keeps one column", lambda z: z[..., :1], "returned shape (2, 1)"),
))


# --- chapter 4: sequence log-prob sums, fn(logp, mask) -> (N,) ----------------------------------

def _sum_right(logp, mask):
    return np.where(mask, np.asarray(logp).astype(np.float64), 0.0).sum(-1)


def _sum_low(logp, mask):
    return (logp * mask.astype(logp.dtype)).sum(-1)               # accumulates in bf16 / f16


def _sum_low_for_float16(logp, mask):
    return _sum_low(logp, mask) if logp.dtype == np.float16 else _sum_right(logp, mask)


_SEQUENCE_SUM = Drill("check_sequence_logprob_sum", 4, rights=(
    _sum_right,
    lambda logp, mask: (logp.astype(np.float32) * mask).sum(-1),
    sequence_logprob_sum,
), wrongs=(
    Wrong("padding summed too", lambda logp, mask: logp.astype(np.float64).sum(-1),
          "padded token (-99) was counted"),
    Wrong("accumulates in bfloat16", _sum_low, "running sum was kept in bfloat16"),
    Wrong("sums wide, returns bfloat16",
          lambda logp, mask: _sum_right(logp, mask).astype(logp.dtype),
          "comes back in bfloat16"),
    Wrong("a mean, not a sum", lambda logp, mask: _sum_right(logp, mask) / mask.sum(-1),
          "that is a mean"),
    Wrong("sums over axis 0", lambda logp, mask: np.where(mask, logp, 0.0).sum(0),
          "expected (2,): one sum per sequence"),
    Wrong("float16 accumulation only", _sum_low_for_float16, "beyond float16's range"),
    Wrong("returns strings", lambda logp, mask: np.array(["a", "b"]), "expected a float array"),
))


DRILLS = (_LOG_SOFTMAX, _SEQUENCE_SUM)
