"""The dtype policy: which dtype a formula is computed in, and which it is returned in.

Taught in chapter 4 (``chapters/04_precision.ipynb``). Three rules, for arrays and tensors:

* :func:`working_dtype`: compute in float64 (NumPy) for every input of float64 precision or
  less, so a float16 square cannot overflow and an ``eps`` of 1e-8 cannot underflow; the torch
  mirror computes in float32 (float64 for float64), never below;
* :func:`common_dtype`: a result computed from several inputs comes back in their common
  float dtype (NumPy's promotion; bfloat16 with float16 gives float32);
* :func:`cast_result`: the cast back to that dtype refuses a result that does not fit (a
  float16 loss of 70000) with a ``ValueError`` naming the inputs, never a silent inf.

:func:`first_non_finite` is the one scan for NaN and inf they and the argument checks of
:mod:`grpo_lab.numerics.validate` share. This module never imports torch; it finds it in
``sys.modules`` once a caller has (a tensor cannot exist otherwise).
"""

from __future__ import annotations

import functools
import sys

import numpy as np

__all__ = ["all_finite", "cast_result", "common_dtype", "first_non_finite", "is_float_dtype",
           "is_tensor", "working_dtype"]


def torch_if_imported():
    """The torch module if it has been imported, else None."""
    return sys.modules.get("torch")


def is_tensor(x) -> bool:
    """True for a ``torch.Tensor`` (without importing torch)."""
    torch = torch_if_imported()
    return torch is not None and isinstance(x, torch.Tensor)


def _ml_dtypes_float(dtype: np.dtype) -> bool:
    """True for the ml_dtypes float types (bfloat16, float8_*), which NumPy files under kind 'V'."""
    if dtype.kind != "V" or dtype.fields is not None:
        return False
    try:
        import ml_dtypes
        ml_dtypes.finfo(dtype)
    except (ImportError, ValueError, TypeError):  # ml_dtypes is a dependency; stay importable
        return False
    return True


def is_float_dtype(dtype) -> bool:
    """True for NumPy floats (float16/32/64, longdouble) and ml_dtypes floats (bfloat16, ...)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or _ml_dtypes_float(dtype)


def working_dtype(dtype):
    """The dtype to compute in. NumPy: float64 for every input of float64 precision or less.

    float16, bfloat16 and float32 values all square without overflow in float64 (the largest
    float32 squared is about 1.2e77), and an ``eps`` of 1e-8 never underflows to zero there.
    A longdouble input keeps its own. A torch dtype gives float64 for float64 and float32 for
    anything narrower: the torch mirror runs as fast as eager float32 code, and never computes
    below float32 (DESIGN: low precision accumulates in float32 or wider).
    """
    torch = torch_if_imported()
    if torch is not None and isinstance(dtype, torch.dtype):
        return torch.float64 if dtype == torch.float64 else torch.float32
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize > 8:
        return dtype
    return np.dtype(np.float64)


def common_dtype(*dtypes):
    """The float dtype for a result computed from inputs of several float dtypes.

    NumPy's promotion (float16 + float32 -> float32, bfloat16 + float64 -> float64); the one
    pair NumPy cannot promote, bfloat16 with float16, gives float32, the narrowest dtype that
    holds both exactly (torch's own promotion, used for torch dtypes, does the same).
    """
    torch = torch_if_imported()
    if torch is not None and isinstance(dtypes[0], torch.dtype):
        return functools.reduce(torch.promote_types, dtypes)
    out = np.dtype(dtypes[0])
    for d in dtypes[1:]:
        try:
            out = np.promote_types(out, d)
        except TypeError:
            out = np.dtype(np.float32)   # bfloat16 with float16: both fit in float32
    return out


def _finite_elements(x):
    """Elementwise ``isfinite`` of a tensor, or of an array in its working dtype (ml_dtypes)."""
    if is_tensor(x):
        return torch_if_imported().isfinite(x.detach())
    return np.isfinite(x.astype(working_dtype(x.dtype), copy=False))


def all_finite(x) -> bool:
    """True when no entry of ``x`` (a float array or tensor) is NaN or inf.

    One sum, finite exactly when every term is unless it overflows; only then, or when there
    is a NaN or an inf, is every element looked at. Half precision sums in float32.
    """
    if is_tensor(x):
        torch = torch_if_imported()
        half = x.dtype in (torch.float16, torch.bfloat16)
        total = x.detach().sum(dtype=torch.float32 if half else x.dtype)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            total = x.sum(dtype=np.float32 if x.dtype.itemsize < 4 else None)
    return bool(np.isfinite(float(total))) or bool(_finite_elements(x).all())


def first_non_finite(x):
    """The index of the first NaN or inf of ``x`` (array or tensor, floats), or None if none.

    It costs one pass, a sum, when there is none (see :func:`all_finite`); ints are all finite.
    """
    floating = x.is_floating_point() if is_tensor(x) else is_float_dtype(x.dtype)
    if not floating or all_finite(x):
        return None
    bad = ~_finite_elements(x)
    return tuple(bad.nonzero()[0].tolist() if is_tensor(x) else np.argwhere(bad)[0].tolist())


def count_non_finite(x) -> int:
    """How many entries of ``x`` (array or tensor) are NaN or inf, for a message."""
    return int((~_finite_elements(x)).sum())


def cast_result(names: str, what: str, x, dtype):
    """Cast a result worked out in a wider dtype back to the inputs' ``dtype``, refusing inf.

    A float16 result above 65504 would silently become inf; this raises a ``ValueError``
    that names the inputs (``names``) and the result (``what``) instead, and says which wider
    dtype would hold it (none past float64: the inputs' spread is then beyond any float's
    range, which only a bug produces). Arrays or tensors.
    """
    if is_tensor(x):
        out = x.to(dtype)
    else:
        dtype = np.dtype(dtype)
        with np.errstate(over="ignore"):
            out = np.asarray(x).astype(dtype)
    if not all_finite(out):
        largest = float(abs(x).max())
        size = dtype.itemsize                          # np.dtype and torch.dtype alike
        wider = "float64" if size == 4 else "float32"
        advice = ("no float is wider: values this far apart come from a bug upstream" if size >= 8
                  else f"pass them in a wider dtype such as {wider}")
        raise ValueError(f"{names}: the {what} do not fit in {dtype} (largest magnitude "
                         f"{largest:.4g}); {advice}")
    return out
