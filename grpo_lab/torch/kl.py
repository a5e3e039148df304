r"""Schulman's per-token KL estimators k1, k2, k3 on tensors (see :mod:`grpo_lab.core.kl`).

Taught in chapter 3 (the NumPy reference). Same arguments, equations and numerics: worked in
float64, k3 as ``expm1(r) - r`` with a Taylor series for ``|r| < 0.1``, an estimate that does
not fit the output dtype refused unless ``clamp`` clips it. Differentiable in both inputs.

The estimators themselves, without checks, are :data:`PER_TOKEN_KL`: the loss
(:func:`grpo_lab.torch.grpo_loss`) uses them in its own working dtype.
"""

from __future__ import annotations

import math

import torch

from grpo_lab.core.kl import cast_kl_estimate, check_kl_shapes
from grpo_lab.numerics.logspace import K3_SERIES_BELOW, K3_SERIES_TERMS
from grpo_lab.numerics.validate import (as_float_array, check_real, common_dtype, describe,
                                        same_device)

__all__ = ["PER_TOKEN_KL", "check_kl_arguments", "k3_expm1", "k3_series", "kl_estimate", "kl_k1",
           "kl_k2", "kl_k3", "kl_k3_math", "kl_k3_plus", "straight_through"]

_SHAPE_DOC = " of per-token log-probs, shape (..., T)"
_WORK = torch.float64                 # as the NumPy reference: the estimates are the result
_LOG_MAX = math.log(torch.finfo(_WORK).max)

def k3_expm1(r: torch.Tensor) -> torch.Tensor:
    r"""k3 = e^r - r - 1 as ``expm1(r) - r``: two operations, nothing of size 1 subtracted.

    Its error is about ulp(r) / k3 relative (TRL's ``exp(r) - r - 1`` has ulp(1) / k3): good
    to a few ulp for ``|r| >= 0.1``, and below that still far under the ulp of anything it is
    added to in a loss. :func:`kl_k3`, whose per-token values are the result, adds
    :func:`k3_series` there.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.k3_expm1(torch.tensor([0.5, -2.0]))      # e^0.5 - 1.5, e^-2 + 1
    tensor([0.1487, 1.1353])
    """
    return torch.expm1(r) - r


def straight_through(value: torch.Tensor, grad_from: torch.Tensor) -> torch.Tensor:
    """The value of ``value`` with the gradient of ``grad_from``: ``g - sg(g) + sg(v)``."""
    return grad_from - grad_from.detach() + value.detach()


#: The estimators on checked tensors of one dtype, ``(logp, ref_logp) -> (..., T)``; "k3+" is
#: verl's straight-through k3 (k3's value, k2's gradient; chapter 8).
PER_TOKEN_KL = {
    "k1": lambda logp, ref_logp: logp - ref_logp,
    "k2": lambda logp, ref_logp: 0.5 * (logp - ref_logp) ** 2,
    "k3": lambda logp, ref_logp: k3_expm1(ref_logp - logp),
    "k3+": lambda logp, ref_logp: straight_through(k3_expm1(ref_logp - logp),
                                                   0.5 * (logp - ref_logp) ** 2),
}


def kl_estimate(kl: str, logp, ref_logp, clamp=None):
    """One estimator of :data:`PER_TOKEN_KL` on checked tensors, its value clipped to
    ``[-clamp, clamp]``; for "k3+" only the value is clipped, k2's gradient stays (as verl)."""
    if kl == "k3+":
        value = PER_TOKEN_KL["k3"](logp, ref_logp)
        value = value if clamp is None else value.clamp(-clamp, clamp)
        return straight_through(value, PER_TOKEN_KL["k2"](logp, ref_logp))
    k = PER_TOKEN_KL[kl](logp, ref_logp)
    return k if clamp is None else k.clamp(-clamp, clamp)


def check_kl_arguments(logp, ref_logp, clamp):
    """``(logp, ref_logp, out_dtype, clamp)``: the log-probs in float64, the result's dtype and
    ``clamp`` (None or > 0); the tensor twin of :func:`grpo_lab.core.kl.check_kl_arguments`."""
    a, a_dtype = as_float_array("logp", logp, shape_doc=_SHAPE_DOC, backend="torch")
    b, b_dtype = as_float_array("ref_logp", ref_logp, shape_doc=_SHAPE_DOC, backend="torch")
    if a.dim() == 0:
        raise ValueError(
            f"logp: expected a tensor with at least 1 dimension{_SHAPE_DOC}, got {describe(a)}")
    check_kl_shapes(a.shape, b.shape)
    same_device("logp", a, ref_logp=b)
    if clamp is not None:
        clamp = check_real("clamp", clamp, minimum=0.0, allow_equal=False)
    return a.to(_WORK), b.to(_WORK), common_dtype(a_dtype, b_dtype), clamp


def kl_k1(logp, ref_logp, *, clamp=None):
    r"""k1 = logp - ref_logp, per token (see :func:`grpo_lab.kl_k1`).

    ==========  ========  =====================================================
    Symbol      Shape     Meaning
    ==========  ========  =====================================================
    logp        (..., T)  log pi_theta(x_t) of the sampled tokens x_t ~ pi_theta
    ref_logp    (..., T)  log pi_ref(x_t) of the same tokens, same device
    clamp       scalar    None, or c > 0: clip each estimate to [-c, c]
    return      (..., T)  per-token estimate, in the inputs' (promoted) float dtype
    ==========  ========  =====================================================
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)
    return cast_kl_estimate("k1", PER_TOKEN_KL["k1"](lp, ref), out_dtype, clamp)


def kl_k2(logp, ref_logp, *, clamp=None):
    r"""k2 = (logp - ref_logp)^2 / 2, per token (see :func:`grpo_lab.kl_k2`)."""
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)
    return cast_kl_estimate("k2", PER_TOKEN_KL["k2"](lp, ref), out_dtype, clamp)


def k3_series(r: torch.Tensor) -> torch.Tensor:
    r"""e^r - r - 1 = r^2/2! + r^3/3! + ... in Horner form, for small ``|r|`` (tensors).

    :func:`grpo_lab.k3_series` on a tensor of ``r = ref_logp - logp`` (note the sign: the
    NumPy helper takes ``d = -r``), differentiable; accurate to a few ulp for ``|r| < 0.1``.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.k3_series(torch.tensor([1e-9], dtype=torch.float64))      # r^2 / 2
    tensor([5.0000e-19], dtype=torch.float64)
    """
    acc = torch.ones_like(r)
    for n in range(K3_SERIES_TERMS, 2, -1):          # 1 + r/3 (1 + r/4 (1 + ... (1 + r/13)))
        acc = 1.0 + acc * r / n
    return 0.5 * r * r * acc


def kl_k3(logp, ref_logp, *, clamp=None):
    r"""k3 = exp(r) - r - 1 with r = ref_logp - logp, per token (see :func:`grpo_lab.kl_k3`).

    DeepSeekMath's per-token KL. Both branches of the ``where`` below are kept finite (the
    series gets only small r, ``expm1`` a capped r) so that its gradient is never 0 * inf.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.kl_k3(torch.log(torch.tensor([0.5, 0.25])), torch.log(torch.tensor([0.25, 0.5])))
    tensor([0.1931, 0.3069])
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)
    return cast_kl_estimate("k3", kl_k3_math(lp, ref, clamp), out_dtype, clamp)


def kl_k3_math(logp, ref_logp, clamp=None):
    """:func:`kl_k3` on checked float64 tensors of one shape and device, before the clip and
    the cast (``clamp``, None or c > 0, only lowers the cap on r)."""
    # Past this r the estimate is beyond float64, or, with clamp=c, surely above c
    # (e^r - r - 1 >= e^r / 2 once r >= 2.5): capping r there changes no result.
    cap = _LOG_MAX + 1.0 if clamp is None else max(2.5, math.log(2.0 * clamp)) + 1.0
    r = torch.clamp(ref_logp - logp, max=cap)                      # (..., T) log pi_ref/pi_theta
    small = r.abs() < K3_SERIES_BELOW                              # where expm1(r) - r cancels
    series = k3_series(torch.where(small, r, torch.zeros_like(r)))
    direct = k3_expm1(torch.where(small, torch.ones_like(r), r))
    return torch.where(small, series, direct)


def kl_k3_plus(logp, ref_logp, *, clamp=None):
    r"""verl's straight-through "k3+": the value of :func:`kl_k3`, the gradient of :func:`kl_k2`.

    ``k2 - sg(k2) + sg(k3)`` (``kl_penalty(..., "k3+")`` in verl 0.9.1's ``core_algos.py``):
    the loss reads k3, its gradient is ``logp - ref_logp``, whose expectation is the gradient
    of KL(pi_theta || pi_ref). See :func:`grpo_lab.kl_k3_plus` and
    :func:`grpo_lab.kl_grad_logp` (chapter 8).

    >>> import torch, grpo_lab.torch.kl as gltk
    >>> lp = torch.log(torch.tensor([0.5])).requires_grad_()
    >>> k = gltk.kl_k3_plus(lp, torch.log(torch.tensor([0.25])))
    >>> k.detach(), torch.autograd.grad(k.sum(), lp)[0]      # k3's value, k2's gradient log 2
    (tensor([0.1931]), tensor([0.6931]))
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)
    value = cast_kl_estimate("k3", kl_k3_math(lp, ref, clamp), out_dtype, clamp)   # clipped
    k2 = PER_TOKEN_KL["k2"](lp, ref)                               # float64
    return straight_through(value, k2.to(value.dtype))
