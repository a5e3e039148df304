"""Input checks shared by every public function.

Every public function of ``grpo_lab`` validates its arguments through these helpers, so a
reader who passes the wrong thing gets one kind of message everywhere:

    ``<argument>: expected <what was expected>, got <what came>``

raised as a ``TypeError`` (wrong kind of object or dtype) or a ``ValueError`` (right kind,
wrong shape or value). Nothing is silently broadcast, truncated or turned into NaN.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "as_counts",
    "as_float_array",
    "as_mask",
    "check_choice",
    "check_int",
    "check_real",
    "cast_result",
    "check_shape",
    "common_dtype",
    "describe",
    "is_float_dtype",
    "working_dtype",
]


def describe(x) -> str:
    """A short description of ``x`` for error messages, e.g. ``a 1-D float32 array of shape (4,)``."""
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D {x.dtype} array of shape {x.shape}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of length {len(x)}"
    return f"{type(x).__name__} {x!r}" if np.isscalar(x) or x is None else type(x).__name__


def _ml_dtypes_float(dtype: np.dtype) -> bool:
    """True for the ml_dtypes float types (bfloat16, float8_*), which NumPy files under kind 'V'."""
    if dtype.kind != "V" or dtype.fields is not None:
        return False
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - ml_dtypes is a dependency, but stay importable
        return False
    try:
        ml_dtypes.finfo(dtype)
    except (ValueError, TypeError):
        return False
    return True


def is_float_dtype(dtype) -> bool:
    """True for NumPy floats (float16/32/64, longdouble) and ml_dtypes floats (bfloat16, ...)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or _ml_dtypes_float(dtype)


def working_dtype(dtype) -> np.dtype:
    """The dtype to accumulate in: float64 for every input of float64 precision or less.

    float16, bfloat16 and float32 values all square without overflow in float64 (the largest
    float32 squared is about 1.2e77), so low-precision inputs never reach an inf in a sum of
    squares and an ``eps`` of 1e-8 never underflows to zero. A longdouble input keeps its own.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize > 8:
        return dtype
    return np.dtype(np.float64)


def as_float_array(name: str, x, *, ndim: int | None = None, shape_doc: str = "",
                   min_size: int = 1, finite: bool = True) -> tuple[np.ndarray, np.dtype]:
    """Validate an array argument and return ``(array, result_dtype)``.

    The array is returned as given (not copied, not cast): callers cast to ``working_dtype``,
    which copies, so the caller's array is never modified.

    ``result_dtype`` is the input's dtype for floats (float16, bfloat16, float32, float64)
    and float64 for integers and bools (pass/fail rewards are often bools). Anything else
    (strings, objects, complex numbers, datetimes) is a ``TypeError``.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name}: expected a numeric array{shape_doc}, got {describe(x)}")
    arr = np.asarray(x)
    dtype = arr.dtype
    if is_float_dtype(dtype):
        result_dtype = dtype
    elif dtype.kind in "biu":
        result_dtype = np.dtype(np.float64)
    else:
        raise TypeError(
            f"{name}: expected a real numeric dtype (float, int or bool){shape_doc}, "
            f"got dtype {dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array{shape_doc}, got {describe(arr)}")
    if arr.size < min_size:
        raise ValueError(f"{name}: expected a non-empty array{shape_doc}, got {describe(arr)}")
    if finite and result_dtype.kind != "b":
        bad = ~np.isfinite(arr.astype(working_dtype(result_dtype), copy=False))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            value = arr[where]
            raise ValueError(
                f"{name}: expected finite values, got {value} at index {where} "
                f"({int(bad.sum())} non-finite value(s) in all)")
    return arr, result_dtype


def check_real(name: str, value, *, minimum: float | None = None,
               allow_equal: bool = True, maximum: float | None = None) -> float:
    """Validate a real scalar (a Python or NumPy int or float, not a bool or an array).

    ``minimum`` is inclusive unless ``allow_equal=False``; ``maximum`` is inclusive.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {describe(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value}")
    if minimum is not None:
        if value < minimum or (value == minimum and not allow_equal):
            bound = ">=" if allow_equal else ">"
            raise ValueError(f"{name}: expected a number {bound} {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: expected a number <= {maximum}, got {value}")
    return value


def check_int(name: str, value, *, minimum: int | None = None,
              maximum: int | None = None, why: str = "") -> int:
    """Validate an integer scalar in ``[minimum, maximum]``; ``why`` explains the bound."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {describe(value)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "-inf" if minimum is None else minimum
        hi = "inf" if maximum is None else maximum
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}]{why}, got {value}")
    return value


def check_choice(name: str, value, choices) -> str:
    """Validate a string option against its allowed values."""
    if not isinstance(value, str) or value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")
    return value


def common_dtype(*dtypes) -> np.dtype:
    """The float dtype for a result computed from inputs of several float dtypes.

    NumPy's promotion (float16 + float32 -> float32, bfloat16 + float64 -> float64); the one
    pair NumPy cannot promote, bfloat16 with float16, gives float32, the narrowest dtype that
    holds both exactly.
    """
    out = np.dtype(dtypes[0])
    for d in dtypes[1:]:
        try:
            out = np.promote_types(out, d)
        except TypeError:
            out = np.dtype(np.float32)   # bfloat16 with float16: both fit in float32
    return out


def check_shape(name: str, arr: np.ndarray, shape: tuple, shape_doc: str = "") -> None:
    """Require ``arr.shape == shape`` exactly: nothing is broadcast to make them agree."""
    if arr.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}{shape_doc}, got {describe(arr)}")


def as_mask(name: str, x, shape: tuple, shape_doc: str = "") -> np.ndarray:
    """Validate a token mask of exactly ``shape`` and return it as a bool array (a new array).

    Accepted: bools, or ints / floats whose every value is 0 or 1 (a float mask of 0.5 is a
    weighting, not a mask, and is refused rather than rounded).
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name}: expected a mask of 0/1 or bools{shape_doc}, got {describe(x)}")
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf" and not is_float_dtype(arr.dtype):
        raise TypeError(f"{name}: expected a mask of 0/1 or bools{shape_doc}, got dtype {arr.dtype}")
    check_shape(name, arr, shape, shape_doc)
    if arr.dtype.kind == "b":
        return arr.copy()
    values = arr.astype(np.float64)
    bad = (values != 0) & (values != 1)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: expected only 0 and 1 (or bools), got {arr[where]} at index {where}")
    return values == 1


def as_counts(name: str, x, shape: tuple, shape_doc: str = "") -> np.ndarray:
    """Validate an array of counts (token lengths, ...) of exactly ``shape``: integers >= 0.

    Returned as a new int64 array. Floats are refused even when whole (``3.0``): a count that
    arrives as a float has usually been averaged or divided somewhere on the way.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name}: expected an integer array of counts{shape_doc}, got {describe(x)}")
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer counts{shape_doc}, got dtype {arr.dtype}")
    check_shape(name, arr, shape, shape_doc)
    if (arr < 0).any():
        where = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        raise ValueError(f"{name}: expected counts >= 0, got {arr[where]} at index {where}")
    return arr.astype(np.int64)


def cast_result(names: str, what: str, x: np.ndarray, dtype) -> np.ndarray:
    """Cast a result worked out in float64 back to the inputs' ``dtype``, refusing inf.

    A float16 result above 65504 would silently become inf; this raises a ``ValueError``
    that names the inputs (``names``) and the result (``what``) instead.
    """
    with np.errstate(over="ignore"):
        out = np.asarray(x).astype(dtype)
    if not np.all(np.isfinite(out.astype(np.float64))):
        raise ValueError(
            f"{names}: the {what} do not fit in {np.dtype(dtype)} (largest magnitude "
            f"{np.abs(x).max():.4g}); pass them in a wider dtype such as float32")
    return out
