"""Drill checkers for chapter 4 (low precision): they run the reader's function on worked
cases and on float16 / bfloat16 inputs, and say what exactly goes wrong, and why.

Each ``check_<name>(fn)`` prints a short verdict and returns True or False. Unlike the other
checkers, these pass the reader's function arrays *in their low-precision dtype*: surviving
that is the drill.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from grpo_lab.drills.harness import call, named_mistake, verdict

__all__ = ["check_log_softmax", "check_sequence_logprob_sum"]

BF16 = np.dtype(ml_dtypes.bfloat16)


def _call(fn, *arrays, **where_and_shape):
    """The reader's function on copies in their own (low-precision) dtype."""
    return call(fn, *arrays, dtype=None, **where_and_shape)


def _reference_log_softmax(z):
    z = np.asarray(z).astype(np.float64)
    return z - np.logaddexp.reduce(z, axis=-1, keepdims=True)


def check_log_softmax(fn, *, verbose=True) -> bool:
    """Check ``fn(logits) -> log-probs`` over the last axis, for float16 and bfloat16 logits.

    The drill: shift by the row max (no exp overflows), accumulate the sum of exponentials
    in float32 or wider, and return float32 or wider.
    """
    say = verdict(verbose, fn)

    # 1. the worked example, with the usual mix-ups named
    z = np.log([[1.0, 1.0, 2.0], [1.0, 3.0, 4.0]])                 # (2, V=3), float64
    want = _reference_log_softmax(z)                               # log(1/4, 1/4, 1/2), ...
    out, problem = _call(fn, z, where="the worked example", shape=z.shape,
                         shape_hint="; log-probs have the logits' shape")
    if problem:
        return say(False, problem)
    out = out.astype(np.float64)
    if not np.allclose(out, want, atol=1e-6):
        hint = named_mistake(out, {
            "those are probabilities (softmax); take their log, or z - logsumexp(z)":
                np.exp(want),
            "you normalised over axis 0; the vocabulary is the last axis (axis=-1)":
                z - np.log(np.exp(z).sum(0, keepdims=True)),
            "you subtracted the max but not log(sum(exp(z - max)))": z - z.max(-1, keepdims=True),
        }, rtol=1e-5, atol=1e-6)
        hint = hint or f"row 0 should be {np.round(want[0], 4).tolist()}"
        return say(False, f"on the worked example the log-probs are wrong: {hint}")

    # 2. float16 logits past exp's range: the max shift
    z16 = np.array([[0.0, 5.0, 12.0]], dtype=np.float16)           # exp(12) > 65504
    out, problem = _call(fn, z16, where="float16 logits", shape=z16.shape)
    if problem:
        return say(False, problem)
    if not np.isfinite(out.astype(np.float64)).all():
        return say(False, "float16 logits [0, 5, 12] gave inf or NaN: exp(12) = 162755 is "
                          "beyond float16's 65504. Subtract the row max before exp")

    # 3. bfloat16 logits over a 32k vocabulary: the accumulator and the output dtype
    rng = np.random.default_rng(0)
    zb = rng.normal(scale=0.5, size=(2, 32_000)).astype(BF16)      # a flat distribution
    want = _reference_log_softmax(zb)
    out, problem = _call(fn, zb, where="bfloat16 logits", shape=zb.shape)
    if problem:
        return say(False, problem)
    if out.dtype in (np.dtype(np.float16), BF16):
        err = np.abs(out.astype(np.float64) - want).max()
        return say(False, f"the log-probs come back in {out.dtype}, off by up to {err:.3f} "
                          "nats from rounding alone: return float32 or wider")
    err = np.abs(out.astype(np.float64) - want).max()
    if err > 1e-3:
        return say(False, f"on 32000 bfloat16 logits the log-probs are off by {err:.2f} nats: "
                          "the sum of exp ran in bfloat16, where a running sum stops growing "
                          "near 256. Cast to float32 (or float64) before summing")

    return say(True, "worked example, float16 overflow and a 32k bfloat16 vocabulary are all "
                     "right")


def check_sequence_logprob_sum(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, mask) -> (N,)`` sums of the real tokens' log-probs, for bfloat16 and
    float16 log-probs over 32k tokens.

    The drill: padding (mask 0) never enters, the sum runs along the last axis, it is
    accumulated in float32 or wider, and the result is returned in float32 or wider.
    """
    say = verdict(verbose, fn)

    # 1. the worked example: the padded token is -99
    logp = np.array([[-1.0, -2.0, -99.0], [-0.5, -0.5, -0.5]])
    mask = np.array([[1, 1, 0], [1, 1, 1]], dtype=bool)
    out, problem = _call(fn, logp, mask, where="the worked example (logp of shape (2, 3))",
                         shape=(2,), shape_hint=": one sum per sequence")
    if problem:
        return say(False, problem)
    out = out.astype(np.float64)
    if np.allclose(out, [-102.0, -1.5]):
        return say(False, "the padded token (-99) was counted: multiply by the mask, or "
                          "np.where(mask, logp, 0), before summing")
    if np.allclose(out, [-1.5, -0.5]) or np.allclose(out, [-1.5, -1.5 / 3]):
        return say(False, f"you gave {out.tolist()}: that is a mean; this drill is the sum")
    if not np.allclose(out, [-3.0, -1.5]):
        return say(False, f"on the worked example you gave {np.round(out, 4).tolist()}, "
                          "expected [-3.0, -1.5]")

    # 2. 32k tokens in bfloat16 and in float16
    rng = np.random.default_rng(0)
    long = -rng.exponential(2.5, size=(1, 32_768))                  # sum near -82000
    ones = np.ones(long.shape, dtype=bool)
    for dtype in (BF16, np.dtype(np.float16)):
        x = long.astype(dtype)
        exact = math.fsum(x.astype(np.float64).ravel())
        out, problem = _call(fn, x, ones, where=f"32768 {dtype} log-probs", shape=(1,))
        if problem:
            return say(False, problem)
        got = float(out.astype(np.float64).ravel()[0])
        if not math.isfinite(got):
            return say(False, f"32768 {dtype} log-probs summed to {got}: the sum ({exact:.0f}) "
                              f"is beyond {dtype}'s range. Accumulate in float32 or float64")
        low_out = out.dtype in (np.dtype(np.float16), BF16)
        # storing the exact sum in a 16-bit dtype costs at most half its spacing there
        rounding = abs(exact) * float(ml_dtypes.finfo(out.dtype).eps) / 2 if low_out else 0.0
        if abs(got - exact) > rounding + 0.1:
            return say(False, f"32768 {dtype} log-probs summed to {got:.1f}, expected "
                              f"{exact:.1f}: the running sum was kept in {dtype}, which stops "
                              "growing once it dwarfs the terms. Accumulate in float32+")
        if low_out:
            return say(False, f"the sum comes back in {out.dtype}: {exact:.1f} is stored as "
                              f"{got:.1f}. Return float32 or wider")

    return say(True, "worked example with padding, and 32k tokens in bfloat16 and float16 "
                     "are all right")
