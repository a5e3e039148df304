r"""Log-probabilities from logits, and their sums over tokens, that survive low precision.

Taught in chapter 4 (``chapters/04_low_precision.ipynb``).

Every GRPO loss starts from ``logp``, the log-probability of each sampled token, and many
reduce it over a sequence. A model that runs in bfloat16 or float16 hands over logits in that
dtype; these functions

* shift by the row max before any ``exp`` (no overflow, whatever the logits);
* accumulate every sum (over the vocabulary V, over the tokens T) in float64;
* return float32 or wider, never float16 or bfloat16: a bfloat16 log-prob near -5 is off by
  up to 0.016, a 1.6% error in every probability ratio computed from it.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.logspace import logsumexp_math
from grpo_lab.numerics.stable import masked_mean_math
from grpo_lab.numerics.validate import (as_array, as_float_array, as_mask, cast_result, describe,
                                        working_dtype)

__all__ = ["at_least_float32", "check_logits", "shift_by_max", "check_sequence_logprob_arguments",
           "check_token_logprobs_arguments", "log_softmax", "sequence_logprob_mean",
           "sequence_logprob_sum", "token_logprobs"]


def at_least_float32(dtype) -> np.dtype:
    """The dtype a log-prob is returned in: float32, or the input's if wider (never float16 or
    bfloat16: a bfloat16 log-prob near -5 is off by up to 0.016).

    >>> import numpy as np
    >>> at_least_float32(np.float16), at_least_float32(np.float64)
    (dtype('float32'), dtype('float64'))
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize >= 8:
        return dtype
    return np.dtype(np.float32)


def shift_by_max(z):
    """``z - max(z)`` over the last axis, each entry <= 0 and the max exactly 0 (float64 in).

    A gap past float64's range (logits 1e308 and -1e308) is -inf: that token's probability
    is below the smallest float64, and ``exp`` gives it 0, as it should. The caller refuses
    the -inf where it would be returned as a log-prob (:func:`log_softmax`).
    """
    with np.errstate(over="ignore"):
        return z - z.max(axis=-1, keepdims=True)


def check_logits(logits, *, min_ndim=1, shape_doc=" of shape (..., V)"):
    """``(logits, out_dtype)``: finite logits of at least ``min_ndim`` dimensions in float64 (a
    copy) and the float32-or-wider dtype of the log-probs."""
    arr, dtype = as_float_array("logits", logits, shape_doc=shape_doc)
    if arr.ndim < min_ndim:
        dims = "dimension" if min_ndim == 1 else "dimensions"
        raise ValueError(f"logits: expected an array with at least {min_ndim} {dims}{shape_doc}, "
                         f"got {describe(arr)}")
    return arr.astype(working_dtype(dtype)), at_least_float32(dtype)


def check_token_logprobs_arguments(logits, tokens):
    """``(logits, tokens, out_dtype)`` for :func:`token_logprobs`: logits (..., T, V) in float64
    and integer ids (..., T) in [0, V)."""
    z, out_dtype = check_logits(logits, min_ndim=2, shape_doc=" of shape (..., T, V)")
    tok = None if tokens is None or isinstance(tokens, (str, bytes)) else as_array(
        "tokens", tokens, "integer token ids of shape (..., T)")
    if tok is None or tok.dtype.kind not in "iu":
        got = describe(tokens) if tok is None else f"dtype {tok.dtype}"
        raise TypeError(f"tokens: expected integer token ids of shape (..., T), got {got}")
    if tok.shape != z.shape[:-1]:
        raise ValueError(f"tokens: expected shape {z.shape[:-1]} (logits' shape without V, "
                         f"no broadcasting), got {describe(tok)}")
    V = z.shape[-1]
    bad = (tok < 0) | (tok >= V)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"tokens: expected ids in [0, {V}) for a vocabulary of V = {V}, "
                         f"got {int(tok[where])} at index {where}")
    return z, tok.astype(np.intp), out_dtype


def check_sequence_logprob_arguments(logp, mask, *, need_a_token=False):
    """``(logp, mask, out_dtype)``: log-probs (..., T) in float64, a same-shape bool mask (with
    a real token in every sequence if ``need_a_token``), the float32-or-wider result dtype."""
    arr, dtype = as_float_array("logp", logp, shape_doc=" of shape (..., T)")
    if arr.ndim == 0:
        raise ValueError(f"logp: expected an array with at least 1 dimension of shape "
                         f"(..., T), got {describe(arr)}")
    keep = as_mask("mask", mask, arr.shape, " (the shape of logp)")   # (..., T) bool
    count = keep.sum(axis=-1)
    if need_a_token and (count == 0).any():
        where = tuple(int(i) for i in np.argwhere(count == 0)[0])
        raise ValueError(f"mask: expected at least one real token per sequence for a mean, "
                         f"got none in sequence {where}")
    return arr.astype(working_dtype(dtype)), keep, at_least_float32(dtype)


def log_softmax(logits) -> np.ndarray:
    r"""Log-probabilities over the last axis, accumulated in float64, returned in float32+.

    .. math::

        \log \pi(v) = z_v - \log \sum_{w=1}^{V} e^{z_w}
                    = (z_v - m) - \log \sum_{w} e^{z_w - m}, \quad m = \max_w z_w

    Shifting by the max makes every exponential at most 1 (no overflow, whatever the logits)
    and the largest one exactly 1 (so the sum is at least 1 and its log never underflows).
    The sum over the vocabulary is accumulated in float64: in bfloat16 a running sum stops
    growing once it is 2**8 times larger than the terms added to it.

    ========  ========  ==============================================================
    Symbol    Shape     Meaning
    ========  ========  ==============================================================
    logits    (..., V)  unnormalised scores over a vocabulary of V tokens, any float
    return    (..., V)  log-probabilities; float32 for float16/bfloat16/float32 logits,
                        float64 for float64
    ========  ========  ==============================================================

    The result is never returned in float16 or bfloat16: a bfloat16 log-prob near -5 is off
    by up to 0.016, which is a 1.6% error in every probability ratio computed from it.

    A log-prob that the result's dtype cannot hold is refused, not rounded to -inf: float32
    logits 3e38 and -3e38 give a log-prob of -6e38, below float32's -3.4e38, and the
    ``ValueError`` (naming ``logits``) says to pass them as float64, where it fits. In float64
    itself (1e308 and -1e308) no float holds it: also an error. Such a spread only comes
    from a bug, and a -inf would turn into NaN in the first ``logp - old_logp``.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.log_softmax(np.array([0.0, np.log(3.0)])).round(4)        # p = 1/4, 3/4
    array([-1.3863, -0.2877])
    >>> gl.log_softmax(np.array([1000.0, 0.0], dtype=np.float16))    # no overflow, float32
    array([    0., -1000.], dtype=float32)
    """
    z, out_dtype = check_logits(logits)                     # (..., V) float64, a copy
    shifted = shift_by_max(z)                               # (..., V) <= 0, the max exactly 0
    return cast_result("logits", "log-probabilities", shifted - logsumexp_math(shifted), out_dtype)


def token_logprobs(logits, tokens) -> np.ndarray:
    r"""``log pi(x_t)`` of each sampled token: the ``logp`` every GRPO loss starts from.

    .. math::

        \texttt{logp}_{n,t} = z_{n,t,x_{n,t}} - \log \sum_{v=1}^{V} e^{z_{n,t,v}}

    ========  ===========  ============================================================
    Symbol    Shape        Meaning
    ========  ===========  ============================================================
    logits    (..., T, V)  the model's scores at each of T positions, any float dtype
    tokens    (..., T)     the sampled token ids, integers in [0, V)
    return    (..., T)     their log-probabilities, <= 0; float32 (float64 for float64)
    ========  ===========  ============================================================

    Same numerics as :func:`log_softmax` (max shift, float64 sum, float32-or-wider result),
    without materialising the (..., T, V) log-probabilities in the output dtype.

    >>> import numpy as np, grpo_lab as gl
    >>> logits = np.log([[[1.0, 3.0], [2.0, 2.0]]])    # (1, T=2, V=2): p = (1/4, 3/4), (1/2, 1/2)
    >>> gl.token_logprobs(logits, [[1, 0]]).round(4)                 # float64 in, float64 out
    array([[-0.2877, -0.6931]])
    >>> gl.token_logprobs(logits.astype(np.float16), [[1, 0]]).dtype  # float16 in, float32 out
    dtype('float32')
    """
    z, tok, out_dtype = check_token_logprobs_arguments(logits, tokens)   # (..., T, V), (..., T)
    shifted = shift_by_max(z)                                            # (..., T, V) <= 0
    picked = np.take_along_axis(shifted, tok[..., None], axis=-1)        # (..., T, 1)
    logp = (picked - logsumexp_math(shifted))[..., 0]                         # (..., T)
    return cast_result("logits", "log-probabilities", logp, out_dtype)


def sequence_logprob_sum(logp, mask) -> np.ndarray:
    r"""``log pi(o)`` of each completion: its token log-probs summed over the real tokens.

    .. math::

        \log \pi(o_n) = \sum_{t=1}^{T} m_{n,t}\, \texttt{logp}_{n,t}

    ========  ========  ========================================================
    Symbol    Shape     Meaning
    ========  ========  ========================================================
    logp      (..., T)  per-token log-probs, any float dtype
    mask      (..., T)  1 (True) on real tokens, 0 on padding; same shape as logp
    return    (...,)    one sum per sequence, float32 (float64 for float64 logp)
    ========  ========  ========================================================

    Accumulated in float64. In bfloat16 the sum of 32k log-probs near -2 is about -65000,
    where bfloat16's spacing is 256: a running bfloat16 sum stops growing in the hundreds,
    and even a perfectly accumulated sum loses up to 128 nats when rounded to bfloat16;
    float16 overflows to -inf there. Padding never enters the sum, whatever its value. A sum
    that the result's dtype cannot hold (two float32 log-probs of -3e38) is a ``ValueError``
    naming ``logp``, not -inf: pass such log-probs as float64.

    >>> import numpy as np, grpo_lab as gl
    >>> logp = np.array([[-1.0, -2.0, -99.0], [-0.5, -0.5, -0.5]], dtype=np.float16)
    >>> gl.sequence_logprob_sum(logp, [[1, 1, 0], [1, 1, 1]])      # the -99 is padding
    array([-3. , -1.5], dtype=float32)
    """
    x, keep, out_dtype = check_sequence_logprob_arguments(logp, mask)   # (..., T) float64
    with np.errstate(over="ignore"):                                    # refused just below
        total = np.where(keep, x, 0.0).sum(axis=-1)                     # (...,) padding is 0
    return cast_result("logp", "sums over the tokens", total, out_dtype)


def sequence_logprob_mean(logp, mask) -> np.ndarray:
    r"""The mean log-prob per real token of each sequence (a length-normalised ``log pi(o)``).

    .. math::

        \overline{\texttt{logp}}_n = \frac{\sum_t m_{n,t}\,\texttt{logp}_{n,t}}{\sum_t m_{n,t}}

    Same arguments as :func:`sequence_logprob_sum`; every sequence needs at least one real
    token. Numerator and count are accumulated in float64, so the mean of 32k bfloat16
    log-probs is as accurate as their float64 mean rounded once to float32.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.sequence_logprob_mean([[-1.0, -2.0, -99.0]], [[1, 1, 0]])
    array([-1.5])
    """
    x, keep, out_dtype = check_sequence_logprob_arguments(logp, mask, need_a_token=True)
    return masked_mean_math(x, keep, axis=-1).astype(out_dtype)              # (...,)
