"""Input checks shared by every public function, on NumPy arrays and on torch tensors.

Every public function of ``grpo_lab`` and ``grpo_lab.torch`` checks its arguments here, so a
reader who passes the wrong thing gets one kind of message,
``<argument>: expected <what was expected>, got <what came>``, as a ``TypeError`` (wrong kind
of object or dtype) or a ``ValueError`` (right kind, wrong shape or value). Nothing is
silently broadcast, truncated or turned into NaN. The array checks take ``backend="torch"``
for tensors: the same rules and words. This module never imports torch; it finds it in
``sys.modules`` once a caller has (a tensor cannot exist otherwise). The dtype a result is
computed and returned in is :mod:`grpo_lab.numerics.dtypes`' business.

A public function makes one call to a ``check_*_arguments`` function of its module, which
calls the checks here once for each argument; the math it then runs takes checked values and
checks nothing again (``tests/core/test_validate_once.py`` counts the calls).
"""

from __future__ import annotations

import numbers

import numpy as np

# The dtype policy lives in its own module; these names are also importable from here, where
# the modules that check arguments have always found them.
from grpo_lab.numerics.dtypes import (cast_result, common_dtype, count_non_finite,
                                      first_non_finite, is_float_dtype, is_tensor,
                                      torch_if_imported, working_dtype)

__all__ = ["INT_RANGE", "as_array", "as_counts", "as_float_array", "as_mask", "cast_result",
           "check_block_input", "check_choice", "check_finite", "first_non_finite", "check_int", "check_real",
           "check_shape", "common_dtype", "describe", "is_float_dtype", "is_tensor",
           "same_device", "scalar_text", "valid_lengths", "working_dtype"]

#: The integers an integer option may hold: those of int64, which NumPy and torch index with.
INT_RANGE = (-2**63, 2**63 - 1)


def _huge(value) -> bool:
    """An integer too long to print whole in a message (10**400 has 401 digits)."""
    return (isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
            and abs(int(value)) >= 10**30)


def scalar_text(value) -> str:
    """A scalar for a message; an integer too long to print whole is given by its size."""
    if _huge(value):
        return f"an integer of about {int(abs(int(value)).bit_length() * 0.30103) + 1} digits"
    return repr(value) if isinstance(value, numbers.Integral) else str(value)


def describe(x) -> str:
    """A short description of ``x`` for error messages, e.g. ``a 1-D float32 array of shape (4,)``."""
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D {x.dtype} array of shape {x.shape}"
    if is_tensor(x):
        return f"a {x.dim()}-D {x.dtype} tensor of shape {tuple(x.shape)} on {x.device}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of length {len(x)}"
    if _huge(x):
        return scalar_text(x)
    return f"{type(x).__name__} {x!r}" if np.isscalar(x) or x is None else type(x).__name__


def _row_lengths(x) -> str:
    """The lengths of the first rows of a ragged list, for a message: ``[2, 1]``."""
    try:
        lengths = [len(row) if hasattr(row, "__len__") else "a number" for row in list(x)[:6]]
    except TypeError:
        return ""
    return f" (row lengths {lengths}{', ...' if len(x) > 6 else ''})"


def _tensor_as_array(name: str, x, expected: str) -> np.ndarray:
    """A CPU tensor without grad as an array, exactly (bfloat16 as ml_dtypes' bfloat16)."""
    torch = torch_if_imported()
    advice = ("grpo_lab.torch has the same functions on tensors, with autograd and any device; "
              f"for NumPy's, pass {name}.detach().cpu()")
    if x.requires_grad or x.device.type != "cpu":
        why = "that requires grad" if x.requires_grad else f"on {x.device}"
        raise TypeError(f"{name}: expected {expected}, got a tensor {why} ({describe(x)}): "
                        f"the NumPy functions would drop its gradient or device; {advice}")
    if x.dtype == torch.bfloat16:                                 # NumPy has no bfloat16
        import ml_dtypes
        return x.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    try:
        return x.numpy()
    except (TypeError, RuntimeError):                             # float8, complex32, conj bit
        raise TypeError(f"{name}: expected {expected}, got {describe(x)}, a dtype NumPy cannot "
                        f"hold; pass {name}.float(), or use grpo_lab.torch") from None


def _check_has_data(name: str, x, shape_doc: str) -> None:
    """A tensor on the meta device has a shape but no values to check or compute with."""
    if x.device.type == "meta":
        raise ValueError(f"{name}: expected a tensor with values{shape_doc}, got {describe(x)} "
                         f"(a meta tensor has a shape but no data)")


def as_array(name: str, x, expected: str = "an array") -> np.ndarray:
    """``np.asarray(x)`` for the argument ``name``, or an error that names it.

    A ragged list (rows of different lengths) is a ``ValueError``, not NumPy's "inhomogeneous
    shape". A torch tensor on the CPU without grad is read exactly, as NumPy would (bfloat16
    included, as ml_dtypes' bfloat16); one that requires grad or lives on another device is a
    ``TypeError``: converting it would silently drop the gradient or copy it off the device.
    ``expected`` completes "expected ..." in the messages.
    """
    if is_tensor(x):
        return _tensor_as_array(name, x, expected)
    try:
        return np.asarray(x)
    except ValueError:                                            # NumPy: inhomogeneous shape
        raise ValueError(f"{name}: expected {expected} whose rows all have one length, got a "
                         f"ragged {type(x).__name__}{_row_lengths(x)}; pad the rows and pass a mask"
                         ) from None
    except (TypeError, RuntimeError) as err:      # a broken __array__, a list of grad tensors
        raise TypeError(f"{name}: expected {expected}, got {describe(x)} that NumPy cannot read "
                        f"({err})") from None


def _result_dtype(name: str, x, shape_doc: str):
    """Floats keep their dtype; ints and bools give float64; anything else is a TypeError."""
    if is_tensor(x):
        torch = torch_if_imported()
        if x.is_floating_point():
            return x.dtype
        if x.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
            return torch.float64
    elif is_float_dtype(x.dtype):
        return x.dtype
    elif x.dtype.kind in "biu":
        return np.dtype(np.float64)
    raise TypeError(f"{name}: expected a real numeric dtype (float, int or bool){shape_doc}, "
                    f"got dtype {x.dtype}")


def as_float_array(name: str, x, *, ndim: int | None = None, shape_doc: str = "",
                   min_size: int = 1, finite: bool = True, backend: str = "numpy"):
    """Validate an array (or, with ``backend="torch"``, tensor) argument: ``(x, result_dtype)``.

    The input comes back as given (not copied, not cast): callers cast to ``working_dtype``.
    ``result_dtype`` is the input's dtype for floats (float16, bfloat16, float32, float64) and
    float64 for integers and bools (pass/fail rewards are often bools). Anything else
    (strings, objects, complex numbers, datetimes) is a ``TypeError``.
    """
    kind = "tensor" if backend == "torch" else "array"
    if backend == "torch" and not is_tensor(x):
        raise TypeError(f"{name}: expected a torch.Tensor{shape_doc} (grpo_lab.torch works on "
                        f"tensors; the NumPy functions are gl.*), got {describe(x)}")
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name}: expected a numeric array{shape_doc}, got {describe(x)}")
    if backend == "torch":
        _check_has_data(name, x, shape_doc)
    arr = x if backend == "torch" else as_array(name, x, f"a numeric array{shape_doc}")
    result_dtype = _result_dtype(name, arr, shape_doc)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D {kind}{shape_doc}, got {describe(arr)}")
    if int(np.prod(arr.shape)) < min_size:
        raise ValueError(f"{name}: expected a non-empty {kind}{shape_doc}, got {describe(arr)}")
    if finite:
        check_finite(name, arr)
    return arr, result_dtype


def check_finite(name: str, x) -> None:
    """Raise a ``ValueError`` naming the first NaN or inf of ``x`` (an array or a tensor)."""
    where = first_non_finite(x)
    if where is not None:
        count = count_non_finite(x)
        raise ValueError(f"{name}: expected finite values, got {_value(x, where)} at index "
                         f"{where} ({count} non-finite value(s) in all)")


def _value(x, where: tuple):
    """``x[where]`` for a message: a Python number for a tensor, NumPy's own print for an array."""
    return x[where].item() if is_tensor(x) else x[where]


def check_real(name: str, value, *, minimum: float | None = None,
               allow_equal: bool = True, maximum: float | None = None) -> float:
    """Validate a real scalar (a Python or NumPy int or float, not a bool or an array).

    ``minimum`` is inclusive unless ``allow_equal=False``; ``maximum`` is inclusive. A Python
    int too large for a float (``10**400``) is a ``ValueError`` naming ``name``, as inf is.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {describe(value)}")
    try:
        value = float(value)
    except OverflowError:                                         # an int past float64's range
        raise ValueError(f"{name}: expected a finite number (at most 1.8e308 in magnitude), "
                         f"got {scalar_text(value)}") from None
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
    """Validate an integer scalar in ``[minimum, maximum]``; ``why`` explains the bound.

    Without a bound of its own, an integer must still fit in int64 (:data:`INT_RANGE`): a
    Python int of 10**400 is refused here by name, not by an ``OverflowError`` further on.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {describe(value)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "-inf" if minimum is None else minimum
        hi = "inf" if maximum is None else maximum
        raise ValueError(f"{name}: expected an integer in [{lo}, {hi}]{why}, got {scalar_text(value)}")
    if not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise ValueError(f"{name}: expected an integer that fits in int64, [-2**63, 2**63 - 1]"
                         f"{why}, got {scalar_text(value)}")
    return value


def check_choice(name: str, value, choices) -> str:
    """Validate a string option against its allowed values."""
    if not isinstance(value, str) or value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        shown = scalar_text(value) if _huge(value) else repr(value)
        raise ValueError(f"{name}: expected one of {allowed}, got {shown}")
    return value


def check_shape(name: str, arr, shape: tuple, shape_doc: str = "") -> None:
    """Require ``arr.shape == shape`` exactly: nothing is broadcast to make them agree."""
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}{shape_doc}, got {describe(arr)}")


def same_device(first: str, x, **others) -> None:
    """Tensors only: every tensor of ``others`` on the device of ``x`` (named ``first``)."""
    for name, y in others.items():
        if y is not None and y.device != x.device:
            raise ValueError(f"{name}: expected a tensor on {x.device} (the device of {first}), "
                             f"got {describe(y)}")


def as_mask(name: str, x, shape: tuple | None, shape_doc: str = "", *, backend: str = "numpy",
            dtype=None):
    """Validate a token mask of exactly ``shape`` (of any shape for None); return it as bools
    (NumPy: a new array).

    Accepted: bools, or ints / floats whose every value is 0 or 1 (a float mask of 0.5 is a
    weighting, not a mask, and is refused rather than rounded). With ``backend="torch"`` the
    mask is a tensor, returned as a bool tensor, or as ``dtype`` 0.0 / 1.0 if given (the
    input itself when it already has that dtype: nothing is copied that need not be).
    """
    tensor = backend == "torch"
    if isinstance(x, (str, bytes)) or x is None or (tensor and not is_tensor(x)):
        kind = "torch.Tensor mask" if tensor else "mask"
        raise TypeError(f"{name}: expected a {kind} of 0/1 or bools{shape_doc}, got {describe(x)}")
    if tensor:
        _check_has_data(name, x, shape_doc)
    arr = x if tensor else as_array(name, x, f"a mask of 0/1 or bools{shape_doc}")
    if arr.is_complex() if tensor else not (arr.dtype.kind in "biuf" or is_float_dtype(arr.dtype)):
        raise TypeError(f"{name}: expected a mask of 0/1 or bools{shape_doc}, got dtype {arr.dtype}")
    if shape is not None:
        check_shape(name, arr, shape, shape_doc)
    values = arr if tensor or arr.dtype == bool else arr.astype(np.float64)
    bad = None if str(arr.dtype) in ("bool", "torch.bool") else (values != 0) & (values != 1)
    if bad is not None and bool(bad.any()):
        where = tuple((bad.nonzero()[0] if tensor else np.argwhere(bad)[0]).tolist())
        raise ValueError(f"{name}: expected only 0 and 1 (or bools), got "
                         f"{_value(arr, where)} at index {where}")
    if tensor:
        return arr.to(torch_if_imported().bool if dtype is None else dtype)
    return values == 1 if values is not arr else arr.copy()


def valid_lengths(m):
    """Valid tokens per sequence, (N,), from a mask (N, T) of 0/1 or bools, array or tensor;
    a sequence without one has no mean, and is almost always a masking bug."""
    if m.shape[0] == 0:
        raise ValueError(f"mask: expected at least one sequence (row), got {describe(m)}")
    lengths = m.sum(-1)                                           # (N,)
    empty = [i for i, n in enumerate((lengths == 0).tolist()) if n]
    if empty:
        raise ValueError(
            f"mask: expected at least one valid token in every sequence (row), got none in row "
            f"{empty[0]} ({len(empty)} empty row(s) in all): an empty completion has no mean, "
            f"and is almost always a masking bug")
    return lengths


def as_counts(name: str, x, shape: tuple, shape_doc: str = "") -> np.ndarray:
    """Validate counts (token lengths, ...) of exactly ``shape``: integers >= 0, as a new int64
    array. Floats are refused even when whole (3.0): such a count was averaged on the way."""
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name}: expected an integer array of counts{shape_doc}, got {describe(x)}")
    arr = as_array(name, x, f"an integer array of counts{shape_doc}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer counts{shape_doc}, got dtype {arr.dtype}")
    check_shape(name, arr, shape, shape_doc)
    if (arr < 0).any():
        where = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        raise ValueError(f"{name}: expected counts >= 0, got {arr[where]} at index {where}")
    return arr.astype(np.int64)


def check_block_input(name: str, x, *, mask=None, min_ndim: int = 1, min_size: int = 0,
                      mask_required: bool = False):
    """The one cheap check of a careful-numerics building block (:mod:`grpo_lab.numerics.stable`,
    :mod:`grpo_lab.numerics.logspace`): a real array of at least ``min_ndim`` dimensions and
    ``min_size`` elements, as ``(x, mask)``.

    Ints and bools come back as float64; floats as given (not copied). A ``mask`` must have
    ``x``'s shape and comes back as bools; None is no mask, unless ``mask_required``. No scan
    for NaN: a building block lets NaN through, as NumPy does.
    """
    if mask is None and mask_required:
        raise TypeError(f"mask: expected a mask of 0/1 or bools (the shape of {name}), got None")
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.size >= min_size:
        arr = x                                        # the usual case, checked in O(1)
    else:
        arr, dtype = as_float_array(name, x, finite=False, min_size=min_size)
        arr = arr.astype(dtype, copy=False)
    if arr.ndim < min_ndim:
        raise ValueError(f"{name}: expected an array with at least {min_ndim} dimension, "
                         f"got {describe(arr)}")
    if mask is not None:
        mask = as_mask("mask", mask, arr.shape, f" (the shape of {name})")
    return arr, mask
