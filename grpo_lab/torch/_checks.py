"""Input checks for the torch path: the same messages as :mod:`grpo_lab.numerics.validate`, on tensors.

``<argument>: expected <what was expected>, got <what came>``, raised as a ``TypeError``
(not a tensor, wrong dtype) or a ``ValueError`` (wrong shape, device or value). Scalar
arguments (``eps``, ``beta``, ...) are plain Python numbers and use the NumPy path's checks.
"""

from __future__ import annotations

import torch

from grpo_lab.numerics.validate import describe as _describe_numpy

__all__ = ["WORK", "as_float_tensor", "as_mask", "cast_result", "check_shape", "describe",
           "same_device"]

#: Every statistic and loss is worked in float64, as in the NumPy reference; results go back
#: to the inputs' dtype. The tensors of a GRPO loss are (B*G, T): small next to the model.
WORK = torch.float64
_INTEGER_OR_BOOL = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def describe(x) -> str:
    """``a 2-D torch.float32 tensor of shape (4, 3) on cpu``, or the NumPy path's description."""
    if isinstance(x, torch.Tensor):
        return f"a {x.dim()}-D {x.dtype} tensor of shape {tuple(x.shape)} on {x.device}"
    return _describe_numpy(x)


def as_float_tensor(name: str, x, *, ndim: int | None = None, shape_doc: str = "",
                    min_size: int = 1, finite: bool = True) -> tuple[torch.Tensor, torch.dtype]:
    """Validate a tensor argument; return ``(tensor, result_dtype)`` (the tensor is not copied).

    Floats (float16, bfloat16, float32, float64) keep their dtype; ints and bools give float64.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor{shape_doc} (grpo_lab.torch works on "
                        f"tensors; the NumPy functions are gl.*), got {describe(x)}")
    if x.is_floating_point():
        out_dtype = x.dtype
    elif x.dtype in _INTEGER_OR_BOOL:
        out_dtype = torch.float64
    else:
        raise TypeError(f"{name}: expected a real dtype (float, int or bool){shape_doc}, "
                        f"got dtype {x.dtype}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor{shape_doc}, got {describe(x)}")
    if x.numel() < min_size:
        raise ValueError(f"{name}: expected a non-empty tensor{shape_doc}, got {describe(x)}")
    if finite and x.is_floating_point():
        bad = ~torch.isfinite(x.detach())
        if bool(bad.any()):
            where = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise ValueError(f"{name}: expected finite values, got {x.detach()[where].item()} "
                             f"at index {where} ({int(bad.sum())} non-finite value(s) in all)")
    return x, out_dtype


def check_shape(name: str, x: torch.Tensor, shape, shape_doc: str = "") -> None:
    """Require ``x.shape == shape`` exactly: nothing is broadcast to make them agree."""
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}{shape_doc}, got {describe(x)}")


def same_device(first: str, x: torch.Tensor, **others: torch.Tensor) -> None:
    """Every tensor of ``others`` on the device of ``x`` (named ``first``): no silent copies."""
    for name, y in others.items():
        if y is not None and y.device != x.device:
            raise ValueError(f"{name}: expected a tensor on {x.device} (the device of {first}), "
                             f"got {describe(y)}")


def as_mask(name: str, x, shape, shape_doc: str = "") -> torch.Tensor:
    """Validate a token mask of exactly ``shape``; return it as a bool tensor (a new one).

    Bools, or ints / floats whose every value is 0 or 1; a float mask of 0.5 is refused.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor mask of 0/1 or bools{shape_doc}, "
                        f"got {describe(x)}")
    if x.is_complex():
        raise TypeError(f"{name}: expected a mask of 0/1 or bools{shape_doc}, got dtype {x.dtype}")
    check_shape(name, x, shape, shape_doc)
    if x.dtype == torch.bool:
        return x.clone()
    bad = (x != 0) & (x != 1)
    if bool(bad.any()):
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"{name}: expected only 0 and 1 (or bools), got {x[where].item()} "
                         f"at index {where}")
    return x == 1


def cast_result(names: str, what: str, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast a float64 result back to ``dtype``, refusing an inf (a float16 loss above 65504)."""
    out = x.to(dtype)
    if not bool(torch.isfinite(out.detach()).all()):
        raise ValueError(f"{names}: the {what} do not fit in {dtype} (largest magnitude "
                         f"{x.detach().abs().max().item():.4g}); pass them in a wider dtype "
                         f"such as float32")
    return out
