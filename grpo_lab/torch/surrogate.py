r"""PPO's clipped surrogate and GSPO's sequence ratio on tensors (:mod:`grpo_lab.core.surrogate`).

Taught in chapter 2 (the NumPy reference). Same names, arguments, equations and results, on
tensors on CPU or CUDA; worked in float32 (float64 for float64 inputs, see
:func:`grpo_lab.numerics.validate.working_dtype`), returned in the inputs' dtype, and
differentiable in ``logp`` (and in ``adv``).

One difference of form, for autograd's sake. The NumPy reference writes the surrogate as
CleanRL does, ``max(-r A, -clip(r) A)``; autograd would keep both (N, T) arguments of that
``max`` alive until the backward pass. The same values and gradients come from one clamp of
the ratio to a per-row range, :func:`clip_bounds`, which keeps only the ratio.
"""

from __future__ import annotations

import math

import torch

from grpo_lab.core.surrogate import MAX_LOG_RATIO, check_adv_shape, check_surrogate_options
from grpo_lab.numerics.validate import (as_float_array, as_mask, cast_result, check_shape,
                                        common_dtype, describe, same_device, valid_lengths,
                                        working_dtype)

__all__ = ["MAX_LOG_RATIO", "check_adv", "check_clipped_surrogate_arguments", "check_logp_pair",
           "check_sequence_ratio_arguments", "clip_bounds", "clipped_surrogate_loss",
           "mean_log_ratio", "probability_ratio", "sequence_ratio"]

TOKENS_DOC = " of per-token log-probs, shape (N, T)"
SAME = " (the shape of logp; nothing is broadcast)"


def check_logp_pair(logp, old_logp, *, ndim=None):
    """Validate ``logp`` and ``old_logp`` (same shape and device): ``(lp, old, dtype)``."""
    lp, lp_dtype = as_float_array("logp", logp, ndim=ndim, shape_doc=TOKENS_DOC, backend="torch")
    if lp.dim() == 0:
        raise ValueError(f"logp: expected a tensor with at least 1 dimension (T tokens), "
                         f"got {describe(lp)}")
    old, old_dtype = as_float_array("old_logp", old_logp, shape_doc=TOKENS_DOC, backend="torch")
    check_shape("old_logp", old, lp.shape, SAME)
    same_device("logp", lp, old_logp=old)
    return lp, old, common_dtype(lp_dtype, old_dtype)


def check_adv(adv, lp):
    """``adv`` per sequence, ``lp.shape[:-1]``, given its token axis; or per token, ``lp.shape``."""
    a, a_dtype = as_float_array("adv", adv, min_size=0, backend="torch")
    same_device("logp", lp, adv=a)
    per_sequence = check_adv_shape(a.shape, lp.shape, describe(a))  # NumPy's shape rule
    return (a[..., None] if per_sequence else a), a_dtype            # (N, 1) or (N, T)


def check_clipped_surrogate_arguments(logp, old_logp, adv, eps_low, eps_high, dual_clip):
    """Everything :func:`clipped_surrogate_loss` takes, checked: ``(logp, old_logp, adv, dtype,
    eps_low, eps_high, dual_clip)``, the tensors in the working dtype (adv (N, 1) or (N, T))."""
    lp, old, dtype = check_logp_pair(logp, old_logp)
    a, a_dtype = check_adv(adv, lp)
    options = check_surrogate_options(eps_low, eps_high, dual_clip)
    dtype = common_dtype(dtype, a_dtype)
    work = working_dtype(dtype)
    return (lp.to(work), old.to(work), a.to(work), dtype) + options


def check_sequence_ratio_arguments(logp, old_logp, mask):
    """``(logp, old_logp, mask, lengths, dtype)``: (N, T) tensors and the 0.0 / 1.0 mask in the
    working dtype, the valid tokens per row (none empty), and the result's dtype."""
    lp, old, dtype = check_logp_pair(logp, old_logp, ndim=2)
    work = working_dtype(dtype)
    m = as_mask("mask", mask, lp.shape, " (the shape of logp)", backend="torch", dtype=work)
    same_device("logp", lp, mask=m)
    return lp.to(work), old.to(work), m, valid_lengths(m), dtype


def probability_ratio(log_ratio):
    r""":math:`r = e^{\operatorname{clip}(\log r,\ -20,\ 20)}`: the ratio, never inf (verl's clamp).

    >>> import torch, grpo_lab.torch as glt
    >>> glt.probability_ratio(torch.tensor([0.0, 800.0]))
    tensor([1.0000e+00, 4.8517e+08])
    """
    return torch.exp(torch.clamp(log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO))


def clip_bounds(adv, eps_low, eps_high, dual_clip=None):
    r"""The range ``[lo, hi]`` PPO's clip holds the ratio to, on the side A points (per row).

    .. math::

        -\min\big(r A,\ \operatorname{clip}(r, 1-\varepsilon_{low}, 1+\varepsilon_{high}) A\big)
        = -A \operatorname{clamp}(r, lo, hi), \qquad
        (lo, hi) = \begin{cases} (0,\ 1+\varepsilon_{high}) & A > 0 \\
                                 (1-\varepsilon_{low},\ c) & A < 0 \\
                                 (0,\ \infty) & A = 0 \end{cases}

    For A > 0 the minimum picks the clipped term only above 1 + eps_high, for A < 0 only
    below 1 - eps_low; dual-clip (Ye et al. 2020) caps the ratio of an A < 0 token at c
    (infinity without it). Same values and gradients as the two-term ``max``.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.clip_bounds(torch.tensor([[1.0], [-1.0]]), 0.2, 0.28)
    (tensor([[0.0000],
            [0.8000]]), tensor([[1.2800],
            [   inf]]))
    """
    lo = (adv < 0).to(adv.dtype) * (1 - eps_low)                       # (N, 1) or (N, T)
    ceiling = math.inf if dual_clip is None else dual_clip
    hi = torch.where(adv > 0, adv.new_tensor(1 + eps_high), adv.new_tensor(ceiling))
    return lo, hi


def clipped_surrogate_loss(logp, old_logp, adv, *, eps_low=0.2, eps_high=None, dual_clip=None):
    r"""PPO's clipped surrogate as a per-token loss (see :func:`grpo_lab.clipped_surrogate_loss`).

    .. math::

        \ell_t = -\min\big(r_t A_t,\ \operatorname{clip}(r_t, 1-\varepsilon_{low},
                 1+\varepsilon_{high})\, A_t\big), \qquad r_t = e^{\,logp_t - old\_logp_t}

    ==========  ===============  ====================================================
    Symbol      Shape            Meaning
    ==========  ===============  ====================================================
    logp        (N, T)           log pi_theta(y_t), current policy (carries the grad)
    old_logp    (N, T)           log pi_old(y_t), the policy that sampled them
    adv         (N,) or (N, T)   per sequence (broadcast over tokens) or per token
    eps_low     scalar           lower clip in [0, 1], usually 0.2
    eps_high    scalar           upper clip, None means eps_low (DAPO: 0.28)
    dual_clip   scalar           None, or c > 1
    return      (N, T)           per-token loss, in the inputs' common dtype
    ==========  ===============  ====================================================

    >>> import torch, grpo_lab.torch as glt
    >>> logp = torch.log(torch.tensor([[1.0, 1.5, 1.5, 5.0]]))
    >>> glt.clipped_surrogate_loss(logp, torch.zeros(1, 4), torch.tensor([[1.0, 1, -1, -1]]))
    tensor([[-1.0000, -1.2000,  1.5000,  5.0000]])
    """
    lp, old, a, dtype, eps_low, eps_high, dual_clip = check_clipped_surrogate_arguments(
        logp, old_logp, adv, eps_low, eps_high, dual_clip)            # a: (N, 1) or (N, T)
    ratio = probability_ratio(lp - old)                                # (N, T) pi / pi_old
    lo, hi = clip_bounds(a, eps_low, eps_high, dual_clip)             # where the clip bites
    pg_loss = -a * torch.clamp(ratio, lo, hi)                          # (N, T)
    return cast_result("logp, old_logp, adv", "per-token losses", pg_loss, dtype)


def mean_log_ratio(log_ratio, m, lengths):
    """GSPO's per-sequence mean of the token log-ratios over the valid tokens, (N,)."""
    return (log_ratio * m).sum(-1) / lengths                          # (N, T) -> (N,)


def sequence_ratio(logp, old_logp, mask):
    r"""GSPO's length-normalised sequence ratio (N,), see :func:`grpo_lab.sequence_ratio`.

    .. math::

        s_i = \exp\Big(\frac{1}{|y_i|}\sum_t m_{i,t}\,(logp_{i,t} - old\_logp_{i,t})\Big)
    """
    lp, old, m, lengths, dtype = check_sequence_ratio_arguments(logp, old_logp, mask)
    s = probability_ratio(mean_log_ratio(lp - old, m, lengths))       # (N,)
    return cast_result("logp, old_logp", "sequence ratios", s, dtype)
