r"""Low precision: what float16 and bfloat16 do to GRPO's numbers, and versions that survive.

Taught in chapter 4 (``chapters/04_low_precision.ipynb``).

RL for language models runs its forward passes in bfloat16 or float16. Each format keeps a
few significant bits and a limited exponent range:

=========  ==============  ===========  ======================  ===================
dtype      mantissa bits   largest      smallest normal         unit roundoff ``u``
=========  ==============  ===========  ======================  ===================
float16    11              65504        6.1e-5                  2**-11 = 4.9e-4
bfloat16   8               3.4e38       1.2e-38                 2**-8  = 3.9e-3
float32    24              3.4e38       1.2e-38                 2**-24 = 6.0e-8
float64    53              1.8e308      2.2e-308                2**-53 = 1.1e-16
=========  ==============  ===========  ======================  ===================

(mantissa bits count the implicit leading one; a value rounds to the nearest representable
number, with relative error at most ``u``.) This module has

* ``round_trip`` and ``rounded_matmul``: simulate storing, and computing, in a low-precision
  dtype (bfloat16 through ``ml_dtypes``), so every pitfall can be measured on a CPU;
* ``error_table`` (in :mod:`grpo_lab.numerics.error_table`): a function's error at several
  dtypes against a float64 reference, the table every section of chapter 4 prints.

The log-prob functions that survive low precision (``log_softmax``, ``token_logprobs``,
``sequence_logprob_sum``, ``sequence_logprob_mean``) are in :mod:`grpo_lab.numerics.logprobs`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from grpo_lab.numerics.validate import as_float_array, check_int, describe

__all__ = ["DTYPES", "as_dtype", "check_round_trip_arguments", "check_rounded_matmul_arguments",
           "round_trip", "rounded_matmul", "unit_roundoff"]

DTYPES = ("float16", "bfloat16", "float32", "float64")
_NAMED = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
          "float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def as_dtype(dtype) -> np.dtype:
    """One of the four floats of this chapter as a NumPy dtype, from a name or a type.

    ``None`` is refused: NumPy reads ``np.dtype(None)`` as float64, which would silently
    pick one of the four for a caller who forgot to.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.as_dtype("bfloat16"), gl.as_dtype(np.float16)
    (dtype(bfloat16), dtype('float16'))
    """
    allowed = ", ".join(DTYPES)
    if dtype is None or isinstance(dtype, (bool, np.bool_)):   # NumPy reads None as float64
        raise TypeError(f"dtype: expected one of {allowed} (a name or a NumPy/ml_dtypes type), "
                        f"got {describe(dtype)}")
    if isinstance(dtype, str):
        if dtype not in _NAMED:
            raise ValueError(f"dtype: expected one of {allowed}, got {dtype!r}")
        return _NAMED[dtype]
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: expected one of {allowed} (a name or a NumPy/ml_dtypes "
                        f"type), got {describe(dtype)}") from None
    if d not in _NAMED.values():
        raise ValueError(f"dtype: expected one of {allowed}, got {d}")
    return d


def unit_roundoff(dtype) -> float:
    """``u = 2**-p`` for a dtype with ``p`` mantissa bits: the largest relative rounding error.

    >>> import grpo_lab as gl
    >>> [gl.unit_roundoff(d) == 2.0 ** -p for d, p in [("float16", 11), ("bfloat16", 8)]]
    [True, True]
    """
    d = as_dtype(dtype)
    return float(ml_dtypes.finfo(d).eps) / 2  # eps is the spacing above 1, 2**(1-p)


def round_trip(x, dtype) -> np.ndarray:
    """``x`` rounded to ``dtype`` and back: float64 values that ``dtype`` can hold exactly.

    This is what storing a number in ``dtype`` does to it. Values beyond the dtype's range
    become ``inf`` (that is the point: float16 overflows above 65504), values below its
    smallest subnormal become 0.

    >>> import grpo_lab as gl
    >>> gl.round_trip([1e-8, 0.1, 300.0, 70000.0], "float16")
    array([0.00000000e+00, 9.99755859e-02, 3.00000000e+02,            inf])
    >>> gl.round_trip([1e-8, 0.1, 257.0], "bfloat16")   # 8 bits: 257 is not representable
    array([1.00117177e-08, 1.00097656e-01, 2.56000000e+02])
    """
    x, d = check_round_trip_arguments(x, dtype)
    with np.errstate(over="ignore"):              # overflow to inf is what this shows
        return x.astype(d).astype(np.float64)


def rounded_matmul(a, b, dtype, *, splits=1) -> np.ndarray:
    r"""A model of a low-precision matrix product: ``a @ b`` as a kernel in ``dtype`` computes it.

    Inputs are rounded to ``dtype`` (weights and activations are stored in it). The inner
    dimension K is cut into ``splits`` contiguous chunks; each chunk's dot products are
    accumulated wide (float64 here, float32 on a GPU: the products of two float16 or bfloat16
    numbers are exact in either) and rounded to ``dtype``; the chunks are then added in
    ``dtype``, each addition rounded.

    .. math::

        C = \operatorname{fl}\bigl(\dots\operatorname{fl}(\operatorname{fl}(P_1) +
            \operatorname{fl}(P_2)) + \dots\bigr), \qquad
        P_s = \sum_{k \in \text{chunk } s} \operatorname{fl}(a_{nk})\operatorname{fl}(b_{km})

    ========  ========  ===================================================
    Symbol    Shape     Meaning
    ========  ========  ===================================================
    a         (N, K)    e.g. hidden states, one row per token
    b         (K, M)    e.g. the unembedding matrix (M = vocabulary size V)
    splits    scalar    1: round once (the correctly rounded product); 2, 4: a split-K kernel
    return    (N, M)    float64 values representable in ``dtype``
    ========  ========  ===================================================

    Two kernels with different ``splits`` give the same product up to a few roundings of
    ``dtype``: the training/inference mismatch of chapter 4 in miniature.

    >>> import numpy as np, grpo_lab as gl
    >>> a = np.array([[1.0, 1.0, 1.0, 1.0]]); b = np.array([[1.0], [2**-8], [2**-8], [0.0]])
    >>> gl.rounded_matmul(a, b, "bfloat16"), gl.rounded_matmul(a, b, "bfloat16", splits=2)
    (array([[1.0078125]]), array([[1.]]))
    """
    a_r, b_r, d, splits = check_rounded_matmul_arguments(a, b, dtype, splits)  # rounded to d
    K = a_r.shape[1]
    bounds = np.linspace(0, K, splits + 1).round().astype(int)   # chunk edges along K
    out = None
    with np.errstate(over="ignore"):              # a product beyond the dtype's range: inf
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            part = (a_r[:, lo:hi] @ b_r[lo:hi, :]).astype(d)   # (N, M), one wide chunk
            out = part if out is None else (out + part).astype(d)  # added in dtype
    return out.astype(np.float64)


def check_round_trip_arguments(x, dtype):
    """``(x, dtype)`` for :func:`round_trip`: a finite real array and one of ``DTYPES``."""
    d = as_dtype(dtype)
    arr, _ = as_float_array("x", x)
    return arr, d


def check_rounded_matmul_arguments(a, b, dtype, splits):
    """``(a, b, dtype, splits)`` for :func:`rounded_matmul`: (N, K) and (K, M) rounded to
    ``dtype`` (as float64 values that fit in it) and ``splits`` in [1, K]."""
    d = as_dtype(dtype)
    a_arr, _ = as_float_array("a", a, ndim=2, shape_doc=" of shape (N, K)")
    b_arr, _ = as_float_array("b", b, ndim=2, shape_doc=" of shape (K, M)")
    K = a_arr.shape[1]
    if b_arr.shape[0] != K:
        raise ValueError(f"b: expected shape ({K}, M) to match a's inner dimension K = {K}, "
                         f"got {describe(b_arr)}")
    splits = check_int("splits", splits, minimum=1, maximum=K, why=" (at most K chunks)")
    a_r, b_r = round_trip(a_arr, d), round_trip(b_arr, d)     # (N, K), (K, M) in dtype
    if not (np.isfinite(a_r).all() and np.isfinite(b_r).all()):
        raise ValueError(f"a, b: expected values that fit in {d}, got some beyond its "
                         f"largest finite value {float(ml_dtypes.finfo(d).max):.6g}")
    return a_r, b_r, d, splits
