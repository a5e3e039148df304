r"""Group-relative advantages on tensors: :func:`grpo_lab.group_advantages`, step for step.

Taught in chapter 1 (the NumPy reference) and used by chapter 6's training loop. The careful
steps are tensor versions of :mod:`grpo_lab.numerics.stable`'s helpers, written so that
autograd gives finite gradients everywhere (an all-equal group included) and so that no step
makes a full-size temporary it does not need: two (B, G) tensors in all, where TRL's two-liner
makes five (``python -m grpo_lab.bench`` times both).

Worked in float32 for float32 and narrower rewards, float64 for float64, ints and bools
(:func:`grpo_lab.numerics.validate.working_dtype`). The steps that make the reference exact
work in float32 too: the shift by each row's first reward gives an all-equal group exact zeros,
and the power-of-two rescale keeps every square a normal float32 number. The one thing float32
gives up against the reference's float64: in a group whose spread is below 2**-105 (2e-32) of
the batch's largest reward, the squares underflow, and with eps smaller than that spread its
advantages come out 0 where the reference gives about +-1; and an advantage below float32's
smallest normal number (1.2e-38: rewards 1e33 with eps = 1e76) may come out 0.
"""

from __future__ import annotations

import math

import torch

from grpo_lab.core.advantages import check_group_advantages_options as check_options
from grpo_lab.numerics.validate import as_float_array, cast_result, working_dtype

__all__ = ["centred_deviations_", "check_group_advantages_arguments", "divide_or_zero",
           "group_advantages", "power_of_two_rescale", "std_from_deviations"]


def check_group_advantages_arguments(rewards, eps, scale, ddof, baseline):
    """``(rewards, out_dtype, eps, scale, ddof, baseline)``: a finite (B, G) tensor (not
    copied) and the options, checked by the NumPy reference's own option check."""
    arr, out_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)",
                                    backend="torch")
    return (arr, out_dtype) + check_options(tuple(arr.shape), eps, scale, ddof, baseline)


def power_of_two_rescale(x, work, *, eps=0.0):
    r"""``(x * 2**s, 2**s)`` in the dtype ``work``: exact, and far from both ends of its range.

    :func:`grpo_lab.power_of_two_rescale` on a tensor, with one change for float32: the
    largest magnitude is brought just under 2**(e // 3) (2**42 in float32, e its largest
    exponent), not under 1, so that the squares of the deviations can neither overflow
    (2**86 each, summed over up to 2**39 rewards) nor underflow for any group whose spread is
    above 2**-105 of the batch's largest reward. The factor is a 0-d tensor (a multiply, not
    ``torch.ldexp``, whose backward in torch 2.13 does not scale the gradient); one pass finds
    the largest magnitude, one writes the scaled copy (a new tensor, which the caller owns).
    With ``eps`` (> 0, a Python float added to the std in these units) the scale is also
    small enough that ``eps * 2**s`` stays below 2**(e - 24), as in the reference, but never
    below the smallest normal number: an eps that would need that (above 2**(2e - 26), so
    float32 only) dwarfs every reward, and ``eps * 2**s`` may then be inf (advantages 0).

    >>> import torch, grpo_lab.torch as glt
    >>> x, up = glt.power_of_two_rescale(torch.tensor([3.0, -6.0, 0.5]), torch.float32)
    >>> int(torch.log2(up)), (x / up).tolist()          # max 6 < 2**3: times 2**(42 - 3)
    (39, [3.0, -6.0, 0.5])
    """
    e = math.frexp(torch.finfo(work).max)[1]                        # 128 in float32
    lo, hi = torch.aminmax(x.detach())
    _, k = torch.frexp(torch.maximum(-lo.to(work), hi.to(work)))  # max|x| = m 2**k, m in [.5, 1)
    s_max = max(min(e - 28, e - 24 - math.frexp(eps)[1]), 2 - e)    # eps 2**s finite too
    up = torch.exp2((e // 3 - k).clamp(2 - e, s_max).to(work))     # 2**s, normal, exact
    return x.to(work) * up, up                                     # (B, G), a new tensor


def centred_deviations_(x):
    r"""``x - mean(x)`` along the last axis, about each row's first element, *in place*.

    :func:`grpo_lab.centred_deviations` on a tensor the caller owns (e.g. the fresh copy of
    :func:`power_of_two_rescale`): the shift leaves a constant row exact zeros, and working in
    place makes no new (B, G) tensor. Differentiable (the steps before it keep nothing of x).

    >>> import torch, grpo_lab.torch as glt
    >>> glt.centred_deviations_(torch.tensor([[0.1, 0.1, 0.1], [1.0, 2.0, 6.0]]))
    tensor([[ 0.,  0.,  0.],
            [-2., -1.,  3.]])
    """
    x.sub_(x[..., :1].clone())                                     # (B, G), column 0 exactly 0
    return x.sub_(x.mean(dim=-1, keepdim=True))                    # (B, G) - (B, 1)


def std_from_deviations(dev, ddof=0):
    r"""The std along the last axis from deviations of mean 0, (..., 1), with a finite gradient
    at 0 (``sqrt`` has an infinite slope there, and an all-equal group sits there).

    >>> import torch, grpo_lab.torch as glt
    >>> glt.std_from_deviations(torch.tensor([[-1.0, 1.0, -1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))
    tensor([[1.],
            [0.]])
    """
    n = dev.shape[-1]
    var = torch.einsum("...g,...g->...", dev, dev)[..., None] / (n - ddof)   # no (B, G) square
    positive = var > 0
    return torch.where(positive, torch.sqrt(torch.where(positive, var, 1.0)), 0.0)


def divide_or_zero(num, den):
    r"""``num / den`` where ``den > 0`` and 0 where ``den`` is 0 (no spread, no signal), for a
    ``den`` of shape (..., 1) that broadcasts over ``num``: one multiply by its reciprocal.
    A ``den`` below the smallest normal float (a zero std plus eps's tiny share, whose
    reciprocal would be inf, and inf times 0 NaN) counts as 0.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.divide_or_zero(torch.tensor([[1.0, -1.0], [0.0, 0.0]]), torch.tensor([[0.5], [0.0]]))
    tensor([[ 2., -2.],
            [ 0.,  0.]])
    """
    positive = den >= torch.finfo(den.dtype).tiny      # 1 / den finite; below, std is 0 and
    inverse = torch.where(positive, 1.0 / torch.where(positive, den, 1.0), 0.0)   # so is num
    return num * inverse                                           # (B, G)


def group_advantages(rewards, eps=1e-8, *, scale="group", ddof=0, baseline="mean"):
    r"""Advantages of G completions per prompt, each judged against its own group (tensors).

    The same function as :func:`grpo_lab.group_advantages` (equation, arguments, variants),
    on a ``torch.Tensor`` of shape (B, G) on any device; it returns a tensor of the same shape,
    dtype (float64 for ints and bools) and device, and is differentiable in ``rewards``.

    .. math::

        A_{b,i} = (r_{b,i} - \bar r_b) / (\sigma_b + \varepsilon), \qquad
        \bar r_b,\ \sigma_b = \text{mean and std of group } b

    ========  ========  ===================================================
    Symbol    Shape     Meaning
    ========  ========  ===================================================
    rewards   (B, G)    a tensor of rewards; row b is prompt b's group of G
    return    (B, G)    a tensor of advantages, same dtype and device
    ========  ========  ===================================================

    >>> import torch, grpo_lab.torch as glt
    >>> glt.group_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]))  # float32: 1 - 2e-8 is 1
    tensor([[ 1., -1.,  1., -1.]])
    """
    arr, out_dtype, eps, scale, ddof, baseline = check_group_advantages_arguments(
        rewards, eps, scale, ddof, baseline)
    B, G = arr.shape
    work = working_dtype(out_dtype)

    used = 0.0 if scale == "none" else eps                         # eps only joins a std
    x, up = power_of_two_rescale(arr, work, eps=used)              # (B, G) r * 2**s, owned
    if scale == "batch":                                           # the std of all B*G rewards
        std = std_from_deviations(centred_deviations_(x.reshape(1, B * G).clone()), ddof)
    dev = centred_deviations_(x)                                   # (B, G) r - group mean
    if scale == "group":
        std = std_from_deviations(dev, ddof)                       # (B, 1)
    c = G / (G - 1) if baseline == "leave_one_out" else 1.0        # LOO: r_i - mean of others
    if scale == "none":
        factor = c / up                                            # back to reward units
    else:
        m, e_eps = math.frexp(eps)                                 # eps = m 2**e_eps: add the
        eps_up = m * torch.exp2(torch.log2(up) + e_eps)            # exponents, no inf on the way
        factor = divide_or_zero(c, std + eps_up)                   # eps scaled like rewards
    return cast_result("rewards", "advantages", dev * factor, out_dtype)
