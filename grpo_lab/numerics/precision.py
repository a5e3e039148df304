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
* ``error_table``: a function's error at several dtypes against a float64 reference, the
  table every section of chapter 4 prints.

The log-prob functions that survive low precision (``log_softmax``, ``token_logprobs``,
``sequence_logprob_sum``, ``sequence_logprob_mean``) are in :mod:`grpo_lab.numerics.logprobs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from grpo_lab.numerics.validate import as_float_array, check_int, describe, is_float_dtype

__all__ = [
    "DTYPES",
    "ErrorRow",
    "ErrorTable",
    "as_dtype",
    "error_table",
    "round_trip",
    "rounded_matmul",
    "unit_roundoff",
]

DTYPES = ("float16", "bfloat16", "float32", "float64")
_NAMED = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
          "float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def as_dtype(dtype) -> np.dtype:
    """One of the four floats of this chapter as a NumPy dtype, from a name or a type.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.as_dtype("bfloat16"), gl.as_dtype(np.float16)
    (dtype(bfloat16), dtype('float16'))
    """
    allowed = ", ".join(DTYPES)
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
    d = as_dtype(dtype)
    arr, _ = as_float_array("x", x)
    with np.errstate(over="ignore"):              # overflow to inf is what this shows
        return arr.astype(d).astype(np.float64)


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
    bounds = np.linspace(0, K, splits + 1).round().astype(int)
    out = None
    with np.errstate(over="ignore"):              # a product beyond the dtype's range: inf
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            part = (a_r[:, lo:hi] @ b_r[lo:hi, :]).astype(d)   # (N, M), one wide chunk
            out = part if out is None else (out + part).astype(d)  # added in dtype
    return out.astype(np.float64)


# --- measuring error across dtypes ---------------------------------------------------------

@dataclass(frozen=True)
class ErrorRow:
    """One function at one dtype against the float64 reference.

    ``max_abs`` is ``max |out - ref|``; ``rel`` is the normwise relative error
    ``max |out - ref| / max |ref|`` (Higham's measure), ``in_u`` the same in units of the
    dtype's unit roundoff. An output that is NaN or inf where the reference is finite counts
    as an infinite error and is counted in ``nonfinite``. ``note`` says why a row has no
    numbers (the function raised, or the input does not fit the dtype).
    """

    function: str
    dtype: str
    max_abs: float
    rel: float
    in_u: float
    nonfinite: int
    note: str = ""


@dataclass(frozen=True)
class ErrorTable:
    """The rows of :func:`error_table`; prints as a fixed-width table, indexes by name."""

    rows: tuple

    def __getitem__(self, key) -> ErrorRow:
        function, dtype = key
        name = as_dtype(dtype).name
        for row in self.rows:
            if row.function == function and row.dtype == name:
                return row
        raise KeyError(key)

    def __str__(self) -> str:
        width = max(8, *(len(r.function) for r in self.rows))
        lines = [f"{'function':<{width}} | {'dtype':>8} | {'max abs err':>11} | "
                 f"{'rel err':>9} | {'in u':>9} | {'nan/inf':>7} | note"]
        for r in self.rows:
            if r.note and not np.isfinite(r.max_abs) and r.nonfinite == 0:
                nums = f"{'-':>11} | {'-':>9} | {'-':>9} | {'-':>7}"
            else:
                nums = (f"{_fmt(r.max_abs):>11} | {_fmt(r.rel):>9} | {_fmt(r.in_u):>9} | "
                        f"{r.nonfinite:>7}")
            lines.append(f"{r.function:<{width}} | {r.dtype:>8} | {nums} | {r.note}".rstrip())
        return "\n".join(lines)

    __repr__ = __str__


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if not np.isfinite(x):
        return "inf" if x > 0 else "nan"
    return f"{x:.2e}"


def _cast_args(args, kwargs, dtype):
    """Round every float array argument to ``dtype``; ints, bools, scalars and None pass."""
    def cast(v):
        if isinstance(v, np.ndarray) and is_float_dtype(v.dtype):
            with np.errstate(over="ignore"):
                return v.astype(dtype)
        return v
    return [cast(a) for a in args], {k: cast(v) for k, v in kwargs.items()}


def _fits(args, kwargs) -> bool:
    for v in (*args, *kwargs.values()):
        if isinstance(v, np.ndarray) and is_float_dtype(v.dtype):
            if not np.isfinite(v.astype(np.float64)).all():
                return False
    return True


def error_table(fns, *args, dtypes=DTYPES, reference=None, **kwargs) -> ErrorTable:
    r"""Run ``fn(*args, **kwargs)`` with its float arrays in each dtype; measure against float64.

    For each dtype, every float NumPy array among ``args`` and ``kwargs`` is rounded to that
    dtype, each function is called, and its output (upcast to float64) is compared with
    ``reference`` called on the *same rounded inputs* upcast to float64. The table therefore
    measures the error a computation adds, not the rounding of its inputs (:func:`round_trip`
    shows that). Ints, bools and scalars pass unchanged.

    ==========  ===================  ===================================================
    Symbol      Type                 Meaning
    ==========  ===================  ===================================================
    fns         callable or dict     one function, or ``{"name": fn, ...}`` to compare
    args        arrays, scalars      the inputs, float arrays in float64
    dtypes      sequence             names or types from ``DTYPES``
    reference   callable or None     the float64 reference; None: the last of ``fns``
    return      ErrorTable           one :class:`ErrorRow` per function and dtype
    ==========  ===================  ===================================================

    A function that raises gets a row with ``note="raised <Error>"``; an input that does not
    fit a dtype (1e20 in float16) gets ``note="input overflows <dtype>"``.

    >>> import numpy as np, grpo_lab as gl
    >>> naive = lambda z: z - np.log(np.exp(z).sum(-1, keepdims=True))   # no max shift
    >>> z = np.array([[0.0, 5.0, 12.0]])               # exp(12) > 65504: float16 overflows
    >>> t = gl.error_table({"naive": naive, "gl.log_softmax": gl.log_softmax}, z,
    ...                    dtypes=["float16", "float32"])
    >>> t["naive", "float16"].nonfinite, t["gl.log_softmax", "float16"].nonfinite
    (3, 0)
    """
    if callable(fns):
        fns = {getattr(fns, "__name__", "fn"): fns}
    if not isinstance(fns, dict) or not fns or not all(callable(f) for f in fns.values()):
        raise TypeError(f"fns: expected a function or a non-empty dict of name -> function, "
                        f"got {describe(fns)}")
    if reference is None:
        reference = list(fns.values())[-1]
    elif not callable(reference):
        raise TypeError(f"reference: expected a function or None, got {describe(reference)}")
    if isinstance(dtypes, (str, bytes)) or not hasattr(dtypes, "__iter__"):
        raise TypeError(f"dtypes: expected a sequence of dtypes from {DTYPES}, "
                        f"got {describe(dtypes)}")
    dtypes = [as_dtype(d) for d in dtypes]
    if not dtypes:
        raise ValueError("dtypes: expected at least one dtype, got an empty sequence")

    rows = []
    for d in dtypes:
        low_args, low_kwargs = _cast_args(args, kwargs, d)
        u = unit_roundoff(d)
        if not _fits(low_args, low_kwargs):
            rows += [ErrorRow(name, d.name, np.inf, np.inf, np.inf, 0,
                              f"input overflows {d.name}") for name in fns]
            continue
        ref_args, ref_kwargs = _cast_args(low_args, low_kwargs, np.float64)
        ref = np.asarray(reference(*ref_args, **ref_kwargs), dtype=np.float64)
        scale = np.abs(ref).max() if ref.size else 0.0
        for name, fn in fns.items():
            try:
                with np.errstate(all="ignore"):   # a naive function's inf and NaN are the data
                    out = np.asarray(fn(*low_args, **low_kwargs)).astype(np.float64)
            except (ValueError, TypeError, FloatingPointError, OverflowError) as exc:
                rows.append(ErrorRow(name, d.name, np.inf, np.inf, np.inf, 0,
                                     f"raised {type(exc).__name__}"))
                continue
            if out.shape != ref.shape:
                raise ValueError(f"fns: expected {name!r} to return the reference's shape "
                                 f"{ref.shape}, got {describe(out)}")
            bad = ~np.isfinite(out) & np.isfinite(ref)
            with np.errstate(invalid="ignore"):
                err = np.where(bad, np.inf, np.abs(out - ref))
            max_abs = float(err.max()) if err.size else 0.0
            rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else np.inf)
            rows.append(ErrorRow(name, d.name, max_abs, rel, rel / u, int(bad.sum())))
    return ErrorTable(tuple(rows))
