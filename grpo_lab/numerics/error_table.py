r"""How much error a computation adds in float16, bfloat16, float32: one table per pitfall.

Taught in chapter 4 (``chapters/04_low_precision.ipynb``), where every section prints one:
:func:`error_table` runs functions with their float inputs rounded to each dtype and measures
their outputs against a float64 reference run on the same rounded inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.numerics.precision import DTYPES, as_dtype, unit_roundoff
from grpo_lab.numerics.validate import describe, is_float_dtype

__all__ = ["ErrorRow", "ErrorTable", "check_error_table_arguments", "error_table"]


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
    fns, reference, dtypes = check_error_table_arguments(fns, reference, dtypes)
    rows = []
    for d in dtypes:
        low_args, low_kwargs = _cast_args(args, kwargs, d)        # the inputs, rounded to d
        if not _fits(low_args, low_kwargs):
            rows += [ErrorRow(name, d.name, np.inf, np.inf, np.inf, 0,
                              f"input overflows {d.name}") for name in fns]
            continue
        ref_args, ref_kwargs = _cast_args(low_args, low_kwargs, np.float64)
        ref = np.asarray(reference(*ref_args, **ref_kwargs), dtype=np.float64)
        rows += [_error_row(name, fn, low_args, low_kwargs, ref, d) for name, fn in fns.items()]
    return ErrorTable(tuple(rows))


def _error_row(name, fn, args, kwargs, ref, d) -> ErrorRow:
    """``fn(*args, **kwargs)`` in dtype ``d`` against ``ref``: one row of the table."""
    try:
        with np.errstate(all="ignore"):           # a naive function's inf and NaN are the data
            out = np.asarray(fn(*args, **kwargs)).astype(np.float64)
    except (ValueError, TypeError, FloatingPointError, OverflowError) as exc:
        return ErrorRow(name, d.name, np.inf, np.inf, np.inf, 0, f"raised {type(exc).__name__}")
    if out.shape != ref.shape:
        raise ValueError(f"fns: expected {name!r} to return the reference's shape "
                         f"{ref.shape}, got {describe(out)}")
    bad = ~np.isfinite(out) & np.isfinite(ref)                 # NaN or inf where ref is finite
    with np.errstate(invalid="ignore"):
        err = np.where(bad, np.inf, np.abs(out - ref))
    max_abs = float(err.max()) if err.size else 0.0
    scale = np.abs(ref).max() if ref.size else 0.0
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else np.inf)
    return ErrorRow(name, d.name, max_abs, rel, rel / unit_roundoff(d), int(bad.sum()))


def check_error_table_arguments(fns, reference, dtypes):
    """``(fns, reference, dtypes)`` for :func:`error_table`: a dict of name -> function, the
    reference function (the last of ``fns`` by default) and a list of NumPy dtypes."""
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
    try:
        dtypes = [as_dtype(d) for d in dtypes]
    except (TypeError, ValueError) as err:                 # as_dtype speaks of one "dtype"
        raise type(err)(f"dtypes: {str(err).removeprefix('dtype: ')}") from None
    if not dtypes:
        raise ValueError("dtypes: expected at least one dtype, got an empty sequence")
    return fns, reference, dtypes
