"""Group-relative advantages on tensors: :func:`grpo_lab.group_advantages`, line for line.

Taught in chapter 1 (the NumPy reference) and used by chapter 6's training loop.
"""

from __future__ import annotations

import torch

from grpo_lab.core.advantages import check_options
from grpo_lab.torch._checks import WORK, as_float_tensor, cast_result

__all__ = ["group_advantages"]


def _deviations(x: torch.Tensor) -> torch.Tensor:
    """``x - mean(x)`` along the last axis, about each row's first element (see the NumPy one)."""
    y = x - x[..., :1]                             # (B, G), first column exactly 0
    return y - y.mean(dim=-1, keepdim=True)        # (B, G) - (B, 1)


def _std(dev: torch.Tensor, ddof: int) -> torch.Tensor:
    """Standard deviation along the last axis from deviations that already have mean 0."""
    n = dev.shape[-1]
    var = (dev * dev).sum(dim=-1, keepdim=True) / (n - ddof)                # (B, 1)
    # sqrt has an infinite slope at 0: an all-equal group would get a NaN gradient (inf * 0),
    # so its std is set to 0 outside the sqrt, where the gradient is then 0.
    positive = var > 0
    return torch.where(positive, torch.sqrt(torch.where(positive, var, torch.ones_like(var))),
                       torch.zeros_like(var))


def group_advantages(rewards, eps=1e-8, *, scale="group", ddof=0, baseline="mean"):
    r"""Advantages of G completions per prompt, each judged against its own group (tensors).

    The same function as :func:`grpo_lab.group_advantages` (equation, arguments, variants),
    on a ``torch.Tensor`` of shape (B, G) on any device; it returns a tensor of the same shape,
    dtype (float64 for ints and bools) and device, and is differentiable in ``rewards``.

    ========  ========  =========================================================
    Symbol    Shape     Meaning
    ========  ========  =========================================================
    rewards   (B, G)    one scalar reward per completion; row b is prompt b's group
    eps       scalar    added to the std so an all-equal group gives 0, not 0/0
    return    (B, G)    advantages; each row has mean 0
    ========  ========  =========================================================

    Statistics are worked in float64 after a power-of-two rescale, as in the NumPy reference.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.group_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]))  # float32: 1 - 2e-8 is 1
    tensor([[ 1., -1.,  1., -1.]])
    """
    arr, out_dtype = as_float_tensor("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)")
    B, G = arr.shape
    eps, scale, ddof, baseline = check_options(tuple(arr.shape), eps, scale, ddof, baseline)

    x = arr.to(WORK)                                # (B, G) float64
    # Divide by a power of two near max|r| (exact) so |x| <= 1 and no square overflows.
    # A multiply by 2**-k, not torch.ldexp: ldexp's backward in torch 2.13 does not scale the
    # gradient (tests/test_torch_parity.py checks the gradient with gradcheck).
    _, k = torch.frexp(x.detach().abs().max())
    down = torch.exp2(-k.to(WORK))                  # 2**-k, exact
    x = x * down

    dev = _deviations(x)                            # (B, G)
    dev_baseline = dev * (G / (G - 1)) if baseline == "leave_one_out" else dev

    if scale == "none":
        adv = dev_baseline / down                   # back to reward units (exact)
    else:
        if scale == "group":
            std = _std(dev, ddof)                                  # (B, 1)
        else:
            std = _std(_deviations(x.reshape(1, B * G)), ddof)     # (1, 1)
        denom = std + eps * down                    # eps rescaled like the rewards
        # 0 / 0 (an all-equal group with eps = 0) is defined as 0; the safe denominator keeps
        # the unused branch of `where` finite, so its gradient is 0 rather than NaN.
        safe = torch.where(denom > 0, denom, torch.ones_like(denom))
        adv = torch.where(denom > 0, dev_baseline / safe, torch.zeros_like(dev_baseline))
    return cast_result("rewards", "advantages", adv, out_dtype)
