"""Chapter 4: a log-softmax and a sequence log-prob sum for float16 / bfloat16."""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.logprobs import log_softmax, sequence_logprob_sum
from .entry import Drill, Wrong


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


def _ls_float64(z):
    z = np.asarray(z).astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _ls_torch(z):
    import torch
    return torch.log_softmax(torch.from_numpy(np.asarray(z).astype(np.float32)), -1)


def _ls_logaddexp(z):
    z = np.asarray(z).astype(np.float64)
    return z - np.logaddexp.reduce(z, axis=-1, keepdims=True)


def _ls_loops(z):
    z = np.asarray(z).astype(np.float64)
    out = np.empty_like(z)
    for i in np.ndindex(z.shape[:-1]):
        row = z[i]
        top = max(row)
        log_sum = top + np.log(sum(np.exp(v - top) for v in row))
        out[i] = row - log_sum
    return out


def _ls_no_shift_float64(z):
    z = np.asarray(z).astype(np.float64)                          # fine until exp(709)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _ls_upcast_bf16_only(z):
    z = np.asarray(z)
    if z.dtype.name == "bfloat16":
        z = z.astype(np.float32)                                  # float16 stays float16
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _ls_float32_as_float64(z):
    """Computed in float32, the floor the statement sets, handed back as float64."""
    return _ls_right(z).astype(np.float64)


def _ls_logsumexp_float32(z):
    z = np.asarray(z).astype(np.float32)
    return z - np.logaddexp.reduce(z, axis=-1, keepdims=True)        # float32 throughout


def _ls_batch_max(z, dtype=np.float32):
    """Shifted by the whole batch's max, not each row's: a row far below it underflows."""
    z = np.asarray(z).astype(dtype)
    z = z - z.max()
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _ls_log_of_softmax(z, dtype=np.float32):
    """Shifted right, then the log of the probabilities: a tiny one rounds to 0, log 0 = -inf."""
    z = np.asarray(z).astype(dtype)
    e = np.exp(z - z.max(-1, keepdims=True))
    with np.errstate(divide="ignore"):
        return np.log(e / e.sum(-1, keepdims=True))


def _ls_log_of_softmax_own(z):
    """The log of exp(z) / sum(exp(z)), all in the logits' own dtype: inf / inf in float16."""
    e = np.exp(z)
    return np.log(e / e.sum(-1, keepdims=True))


_LOG_SOFTMAX = Drill("check_log_softmax", 4, rights=(
    _ls_right, log_softmax, _ls_float64, _ls_torch, _ls_logaddexp, _ls_loops,
    _ls_float32_as_float64, _ls_logsumexp_float32), wrongs=(
    Wrong("the batch's max, in float32", _ls_batch_max, "the batch's max?"),
    Wrong("the batch's max, in float64", lambda z: _ls_batch_max(z, np.float64),
          "float64 rows 1000 apart entry [1, 0] is inf"),
    Wrong("the log of the softmax, in float32", _ls_log_of_softmax,
          "Never take the log of a probability"),
    Wrong("the log of the softmax, in float64", lambda z: _ls_log_of_softmax(z, np.float64),
          "is below the smallest float64"),
    Wrong("no max shift", lambda z: z - np.log(np.exp(z).sum(-1, keepdims=True)),
          "exp(12) is beyond float16's range"),
    Wrong("the log of an unshifted softmax, in the input's dtype", _ls_log_of_softmax_own,
          "-inf is what a division by 0, a log of 0 or an inf carried along gives"),
    Wrong("no max shift, in float32",
          lambda z: (lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True)))(
              np.asarray(z).astype(np.float32)), "Subtract the row max"),
    Wrong("no max shift, in float64", _ls_no_shift_float64, "Subtract the row max"),
    Wrong("upcasts bfloat16 only (float16 comes back float16)", _ls_upcast_bf16_only,
          "returned float16 values"),
    Wrong("the sum of exp in the input's dtype",
          lambda z: ((z - z.max(-1, keepdims=True))
                     - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
                     ).astype(np.float32), "float16 rounding"),
    Wrong("returns the input's dtype", lambda z: _ls_right(z).astype(z.dtype),
          "returned float16 values"),
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


def _sum_sequential_float32(logp, mask):
    out = np.zeros(len(logp), dtype=np.float32)
    for i, (row, keep) in enumerate(zip(np.asarray(logp).astype(np.float32), mask)):
        total = np.float32(0.0)
        for value, k in zip(row, keep):                           # a float32 running sum
            if k:
                total = np.float32(total + value)
        out[i] = total
    return out


def _sum_torch(logp, mask):
    import torch
    x = torch.from_numpy(np.asarray(logp).astype(np.float32))
    return torch.where(torch.from_numpy(mask), x, 0.0).sum(-1)


def _sum_pairwise_bf16(logp, mask):
    x = np.where(mask, logp, 0).astype(logp.dtype)
    while x.shape[-1] > 1:                                        # pairwise, but in bfloat16
        if x.shape[-1] % 2:
            x = np.concatenate([x, np.zeros(x.shape[:-1] + (1,), x.dtype)], -1)
        x = (x[..., 0::2] + x[..., 1::2]).astype(x.dtype)
    return x[..., 0].astype(np.float32)


def _sum_log_of_product(logp, mask):
    """The sequence's probability, then its log: the product underflows to 0 on long text."""
    p = np.where(mask, np.exp(np.asarray(logp).astype(np.float64)), 1.0)
    with np.errstate(divide="ignore"):
        return np.log(p.prod(-1))


def _sum_exp_then_log(logp, mask):
    total = np.where(mask, np.asarray(logp).astype(np.float64), 0.0).sum(-1)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(total))                              # exp(-82000) is 0


_SEQUENCE_SUM = Drill("check_sequence_logprob_sum", 4, rights=(
    _sum_right,
    lambda logp, mask: (logp.astype(np.float32) * mask).sum(-1),
    sequence_logprob_sum, _sum_sequential_float32, _sum_torch,
    lambda logp, mask: np.array([np.sum(row[keep], dtype=np.float64)
                                 for row, keep in zip(logp, mask)]),
), wrongs=(
    Wrong("padding summed too", lambda logp, mask: logp.astype(np.float64).sum(-1),
          "padded tokens were counted"),
    Wrong("accumulates in bfloat16", _sum_low, "most of the error comes from computing"),
    Wrong("sums wide, returns bfloat16",
          lambda logp, mask: _sum_right(logp, mask).astype(logp.dtype),
          "from that rounding alone"),
    Wrong("accumulates in bfloat16 but returns float32",
          lambda logp, mask: _sum_low(logp, mask).astype(np.float32), "input's dtype"),
    Wrong("pairwise in bfloat16 (better, still not float32)", _sum_pairwise_bf16,
          "32768 bfloat16 log-probs entry [0]"),
    Wrong("a mean over all T positions",
          lambda logp, mask: np.where(mask, logp.astype(np.float64), 0).mean(-1),
          "mean over all T positions"),
    Wrong("a mean, not a sum", lambda logp, mask: _sum_right(logp, mask) / mask.sum(-1),
          "that is a mean"),
    Wrong("sums over axis 0", lambda logp, mask: np.where(mask, logp, 0.0).sum(0),
          "expected (2,): one sum per sequence"),
    Wrong("float16 accumulation only", _sum_low_for_float16,
          "is beyond float16's range (65504), so stored in float16 it overflows"),
    Wrong("returns strings", lambda logp, mask: np.array(["a", "b"]), "expected a float array"),
    Wrong("the log of the product of probabilities", _sum_log_of_product,
          "was a product of probabilities"),
    Wrong("exp of the sum, then its log", _sum_exp_then_log, "was a product of probabilities"),
))


DRILLS = (_LOG_SOFTMAX, _SEQUENCE_SUM)
