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

from grpo_lab.numerics.validate import as_float_array, as_mask, describe, working_dtype

__all__ = ["log_softmax", "sequence_logprob_mean", "sequence_logprob_sum", "token_logprobs"]


def _at_least_float32(dtype: np.dtype) -> np.dtype:
    """The dtype a low-precision result is returned in: float32, or the input's if wider."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize >= 8:
        return dtype
    return np.dtype(np.float32)


def _logsumexp(z: np.ndarray) -> np.ndarray:
    """log(sum(exp(z))) over the last axis, shifted by the max so no exp overflows."""
    m = z.max(axis=-1, keepdims=True)                          # (..., 1)
    return m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))  # (..., 1), exp(.) <= 1


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

    >>> import numpy as np, grpo_lab as gl
    >>> gl.log_softmax(np.array([0.0, np.log(3.0)])).round(4)        # p = 1/4, 3/4
    array([-1.3863, -0.2877])
    >>> gl.log_softmax(np.array([1000.0, 0.0], dtype=np.float16))    # no overflow, float32
    array([    0., -1000.], dtype=float32)
    """
    arr, dtype = as_float_array("logits", logits, shape_doc=" of shape (..., V)")
    if arr.ndim == 0:
        raise ValueError(f"logits: expected an array with at least 1 dimension of shape "
                         f"(..., V), got {describe(arr)}")
    z = arr.astype(working_dtype(dtype))                      # (..., V), a wide copy
    return (z - _logsumexp(z)).astype(_at_least_float32(dtype))


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
    arr, dtype = as_float_array("logits", logits, shape_doc=" of shape (..., T, V)")
    if arr.ndim < 2:
        raise ValueError(f"logits: expected an array with at least 2 dimensions of shape "
                         f"(..., T, V), got {describe(arr)}")
    tok = None if tokens is None or isinstance(tokens, (str, bytes)) else np.asarray(tokens)
    if tok is None or tok.dtype.kind not in "iu":
        got = describe(tokens) if tok is None else f"dtype {tok.dtype}"
        raise TypeError(f"tokens: expected integer token ids of shape (..., T), got {got}")
    if tok.shape != arr.shape[:-1]:
        raise ValueError(f"tokens: expected shape {arr.shape[:-1]} (logits' shape without V, "
                         f"no broadcasting), got {describe(tok)}")
    V = arr.shape[-1]
    bad = (tok < 0) | (tok >= V)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"tokens: expected ids in [0, {V}) for a vocabulary of V = {V}, "
                         f"got {int(tok[where])} at index {where}")
    z = arr.astype(working_dtype(dtype))                                   # (..., T, V)
    picked = np.take_along_axis(z, tok[..., None].astype(np.intp), axis=-1)  # (..., T, 1)
    return (picked - _logsumexp(z))[..., 0].astype(_at_least_float32(dtype))  # (..., T)


def _masked_logp(logp, mask) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    arr, dtype = as_float_array("logp", logp, shape_doc=" of shape (..., T)")
    if arr.ndim == 0:
        raise ValueError(f"logp: expected an array with at least 1 dimension of shape "
                         f"(..., T), got {describe(arr)}")
    keep = as_mask("mask", mask, arr.shape, " (the shape of logp)")  # (..., T) bool
    x = np.where(keep, arr.astype(working_dtype(dtype)), 0.0)   # (..., T), padding is 0
    return x, keep, _at_least_float32(dtype)


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
    float16 overflows to -inf there. Padding never enters the sum, whatever its value.

    >>> import numpy as np, grpo_lab as gl
    >>> logp = np.array([[-1.0, -2.0, -99.0], [-0.5, -0.5, -0.5]], dtype=np.float16)
    >>> gl.sequence_logprob_sum(logp, [[1, 1, 0], [1, 1, 1]])      # the -99 is padding
    array([-3. , -1.5], dtype=float32)
    """
    x, _, out = _masked_logp(logp, mask)
    return x.sum(axis=-1).astype(out)                          # (...,)


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
    x, keep, out = _masked_logp(logp, mask)
    count = keep.sum(axis=-1)                                  # (...,) real tokens
    if (count == 0).any():
        where = tuple(int(i) for i in np.argwhere(count == 0)[0])
        raise ValueError(f"mask: expected at least one real token per sequence for a mean, "
                         f"got none in sequence {where}")
    return (x.sum(axis=-1) / count).astype(out)                # (...,)
