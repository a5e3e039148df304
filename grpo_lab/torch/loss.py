r"""The GRPO loss on tensors: the eager torch loss, checked by the same call as the fused one.

The NumPy reference and its chapter: :func:`grpo_lab.grpo_loss` (chapter 2). Same arguments,
equations and diagnostics; tensors on CPU or CUDA, differentiable in ``logp`` (and in ``adv``
and ``ref_logp``, though a trainer detaches those). Chapter 6 trains with it; chapter 7 tests
the fused loss (:mod:`grpo_lab.perf.loss_fused`) equal to it and benches it against TRL's
way of writing the same loss.

As fast as the straightforward eager code: float32 for float32 and narrower inputs (float64
for float64), k3 as ``expm1(r) - r`` (:func:`grpo_lab.torch.k3_expm1`), the clip as one
clamp (:func:`grpo_lab.torch.clip_bounds`), no (N, T) weight tensor, and the diagnostics
under ``no_grad`` in one scratch buffer; the only full pass of the checks is one sum per input.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from grpo_lab.core.loss import check_grpo_loss_knobs, check_grpo_loss_options
from grpo_lab.numerics.validate import (as_float_array, as_mask, cast_result, check_shape,
                                        common_dtype, same_device, valid_lengths, working_dtype)
from grpo_lab.torch.aggregation import aggregate, row_weights
from grpo_lab.torch.kl import kl_estimate
from grpo_lab.torch.surrogate import (MAX_LOG_RATIO, SAME, TOKENS_DOC, check_adv, check_logp_pair,
                                      clip_bounds, mean_log_ratio, probability_ratio)

__all__ = ["DIAGNOSTICS", "LossArguments", "check_loss_arguments", "diagnostic_means",
           "diagnostic_sums", "grpo_loss", "grpo_loss_math", "loss_arguments"]

#: The diagnostics ``grpo_loss`` returns, in this order (TRL's ``clip_ratio/*`` and more).
DIAGNOSTICS = ("clip_frac_low", "clip_frac_high", "clip_frac", "mean_ratio", "mean_kl",
               "approx_kl")


class LossArguments(NamedTuple):
    """What :func:`check_loss_arguments` returns: the tensors as given (``adv`` with its token
    axis), the mask as 0.0 / 1.0 in the working dtype, the valid tokens per row, the options."""
    logp: torch.Tensor
    old_logp: torch.Tensor
    ref_logp: torch.Tensor | None
    adv: torch.Tensor                   # (N, 1) or (N, T)
    mask: torch.Tensor                  # (N, T) 0.0 / 1.0 in ``work``
    lengths: torch.Tensor               # (N,) valid tokens, in ``work``
    eps_low: float
    eps_high: float
    beta: float
    kl: str
    agg: str
    level: str
    work: torch.dtype                   # float32, or float64 if an input is
    out_dtype: torch.dtype              # the inputs' common dtype
    dual_clip: float | None = None      # the production knobs (chapter 8)
    max_len: int | None = None          # dr_grpo's divisor (T when None)
    kl_clamp: float | None = None
    kl_bias_correction: bool = False


def check_loss_arguments(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None,
                         beta=0.04, kl="k3", agg="grpo", level="token", dual_clip=None,
                         max_len=None, kl_clamp=None, kl_bias_correction=False,
                         autograd=False) -> LossArguments:
    """Validate every argument of :func:`grpo_loss` in one call (the fused loss makes it too).

    ``autograd``: True for a loss differentiated by autograd (the eager one), which alone can
    take the straight-through ``kl="k3+"``; the fused loss writes its gradient by hand.

    Each tensor costs one sum (the scan for NaN and inf); nothing is copied, except a mask
    that is not already 0.0 / 1.0 in the working dtype.
    """
    lp, old, dtype = check_logp_pair(logp, old_logp, ndim=2)
    as_mask("mask", mask, lp.shape, SAME, backend="torch")        # 0/1 or bools (not copied)
    same_device("logp", lp, mask=mask)
    a, a_dtype = check_adv(adv, lp)
    options = check_grpo_loss_options(eps_low, eps_high, beta, kl, agg, level,
                                      has_ref=ref_logp is not None, kind="tensor")
    if options[3] == "k3+" and not autograd:
        raise ValueError("kl: expected one of 'k1', 'k2', 'k3' for a loss that writes its own "
                         "gradient, got 'k3+' (straight-through: it needs autograd, use "
                         "grpo_lab.torch.grpo_loss)")
    knobs = check_grpo_loss_knobs(dual_clip, max_len, kl_clamp, kl_bias_correction, options[4],
                                  lp.shape[-1])
    dtypes = [dtype, a_dtype]
    if ref_logp is not None:
        ref_logp, ref_dtype = as_float_array("ref_logp", ref_logp, shape_doc=TOKENS_DOC,
                                             backend="torch")
        check_shape("ref_logp", ref_logp, lp.shape, SAME)
        same_device("logp", lp, ref_logp=ref_logp)
        dtypes.append(ref_dtype)
    out_dtype = common_dtype(*dtypes)
    work = working_dtype(out_dtype)
    m = mask.to(work)                                              # (N, T) 0.0 / 1.0
    return LossArguments(lp, old, ref_logp, a, m, valid_lengths(m), *options, work, out_dtype,
                         *knobs)


def diagnostic_sums(ratio, lo, hi, per_token_kl, log_ratio, m, buf):
    """The diagnostics' sums over the valid tokens, 0-d tensors, worked in the scratch ``buf``.

    Clipped tokens are those the clamp moved: below ``lo`` (A < 0, r < 1 - eps_low) or above
    ``hi`` (A > 0, r > 1 + eps_high), exactly TRL's ``is_low_clipped`` / ``is_high_clipped``.
    ``approx_kl`` is k3 of KL(pi_old || pi_theta) from each token's ``log_ratio``, clipped at
    MAX_LOG_RATIO as the NumPy reference clips it. No gradient: call it under ``no_grad``.
    The fused loss calls it block by block with its own buffer.
    """
    ratio = ratio.expand(m.shape)                                     # (N, 1) under GSPO
    low = torch.lt(ratio, lo, out=buf).mul_(m).sum()                  # buf: (N, T) 0.0 / 1.0
    high = torch.gt(ratio, hi, out=buf).mul_(m).sum()
    sums = {"clip_frac_low": low, "clip_frac_high": high, "clip_frac": low + high,
            "mean_ratio": torch.mul(ratio, m, out=buf).sum(),
            "mean_kl": None if per_token_kl is None else torch.mul(per_token_kl, m, out=buf).sum()}
    r = torch.clamp(log_ratio, max=MAX_LOG_RATIO, out=buf)           # k3(20) > 20 anyway
    k3 = torch.expm1(r).sub_(r)                                       # k3_expm1, one temporary
    sums["approx_kl"] = k3.clamp_(max=MAX_LOG_RATIO).mul_(m).sum()
    return sums


def diagnostic_means(sums, lengths):
    """Each sum over the number of valid tokens, as a Python float (None stays None)."""
    count = float(lengths.detach().sum())                           # divided in float64
    return {key: None if s is None else float(s.detach()) / count for key, s in sums.items()}


def grpo_loss(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None, beta=0.04,
              kl="k3", agg="grpo", level="token", dual_clip=None, max_len=None, kl_clamp=None,
              kl_bias_correction=False):
    r"""The GRPO loss of a batch and its diagnostics (see :func:`grpo_lab.grpo_loss`).

    .. math::

        \ell_{i,t} = -\min\big(r_{i,t} A_{i,t},\ \operatorname{clip}(r_{i,t}, 1-\varepsilon_{low},
        1+\varepsilon_{high}) A_{i,t}\big) + \beta\, \mathbb{D}_{KL}[\pi_\theta \| \pi_{ref}]_{i,t},
        \qquad \mathcal{L} = \operatorname{agg}(\ell, m)

    ==========  ===============  ======================================================
    Symbol      Shape            Meaning
    ==========  ===============  ======================================================
    logp        (N, T)           log pi_theta(y_t), N = B*G completions (carries the grad)
    old_logp    (N, T)           log pi_old(y_t) at sampling time
    ref_logp    (N, T) or None   log pi_ref(y_t); None only with beta = 0
    adv         (N,) or (N, T)   per sequence or per token
    mask        (N, T)           1 for completion tokens, 0 for padding
    eps_low     scalar           usually 0.2;  eps_high: None means eps_low
    beta        scalar           KL weight >= 0 (DeepSeekMath 0.04)
    kl          str              "k1", "k2", "k3" or "k3+" (k3's value, k2's gradient)
    agg         str              "grpo", "bnpo", "dapo" or "dr_grpo"
    level       str              "token" or "sequence" (GSPO)
    dual_clip, max_len, kl_clamp, kl_bias_correction: the production knobs of chapter 8,
                                 as in :func:`grpo_lab.grpo_loss`
    ==========  ===============  ======================================================

    Returns ``(loss, diagnostics)``: a 0-d tensor in the inputs' common dtype, and a dict of
    Python floats (``clip_frac_low``, ``clip_frac_high``, ``clip_frac``, ``mean_ratio``,
    ``mean_kl`` (None without a reference) and ``approx_kl``), means over valid tokens.

    >>> import torch, grpo_lab.torch as glt
    >>> logp = torch.log(torch.full((4, 3), 0.5)).requires_grad_()
    >>> adv, mask = torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.ones(4, 3)
    >>> loss, diag = glt.grpo_loss(logp, logp.detach(), logp.detach(), adv, mask)
    >>> float(loss.detach()), diag["clip_frac"], diag["mean_kl"]
    (0.0, 0.0, 0.0)
    """
    x = check_loss_arguments(logp, old_logp, ref_logp, adv, mask, eps_low=eps_low,
                             eps_high=eps_high, beta=beta, kl=kl, agg=agg, level=level,
                             dual_clip=dual_clip, max_len=max_len, kl_clamp=kl_clamp,
                             kl_bias_correction=kl_bias_correction, autograd=True)
    return grpo_loss_math(x)


def loss_arguments(logp, old_logp, ref_logp, adv, mask, *, eps_low, eps_high, beta, kl, agg,
                   level="token", dual_clip=None, max_len=None, kl_clamp=None,
                   kl_bias_correction=False) -> LossArguments:
    """:class:`LossArguments` from values a composed caller has already checked, with no
    check of its own: ``gl.hf.grpo_step`` validates its knobs once at the door
    (``StepConfig.validate``) and its tensors are its own, so each micro-batch's loss goes
    straight to :func:`grpo_loss_math` (validate once, DESIGN.md)."""
    a = adv[:, None] if adv.dim() == 1 else adv                    # (N, 1) or (N, T)
    dtypes = [logp.dtype, a.dtype] + ([] if ref_logp is None else [ref_logp.dtype])
    out_dtype = common_dtype(*dtypes)
    work = working_dtype(out_dtype)
    m = mask.to(work)                                              # (N, T) 0.0 / 1.0
    return LossArguments(logp, old_logp, ref_logp, a, m, valid_lengths(m), eps_low,
                         eps_low if eps_high is None else eps_high, beta, kl, agg, level, work,
                         out_dtype, dual_clip, max_len, kl_clamp, kl_bias_correction)


def grpo_loss_math(x: LossArguments):
    """:func:`grpo_loss` on checked arguments: the loss and its diagnostics."""
    lp, a, m = x.logp.to(x.work), x.adv.to(x.work), x.mask        # (N, T), (N, 1)/(N, T), (N, T)
    log_ratio = lp - x.old_logp.to(x.work)                         # (N, T) log pi_theta / pi_old
    if x.level == "token":
        ratio = probability_ratio(log_ratio)                       # (N, T)
    else:                                                          # GSPO: one per sequence
        ratio = probability_ratio(mean_log_ratio(log_ratio, m, x.lengths))[:, None]   # (N, 1)
    lo, hi = clip_bounds(a, x.eps_low, x.eps_high, x.dual_clip)    # where the clip bites
    per_token_loss = -a * torch.clamp(ratio, lo, hi)               # -min(r A, clip(r) A)
    per_token_kl = None if x.ref_logp is None else kl_estimate(
        x.kl, lp, x.ref_logp.to(x.work), x.kl_clamp)               # (N, T)
    if per_token_kl is not None and x.kl_bias_correction:
        per_token_kl = ratio * per_token_kl                        # TRL: k weighted by r
    if x.beta != 0:
        per_token_loss = per_token_loss + x.beta * per_token_kl    # (N, T)
    max_len = lp.shape[1] if x.max_len is None else x.max_len
    loss = aggregate(per_token_loss, m, row_weights(x.lengths, x.agg, max_len=max_len))
    with torch.no_grad():                                          # what TRL's trainer logs
        sums = diagnostic_sums(ratio, lo, hi, per_token_kl, log_ratio, m, torch.empty_like(m))
    diagnostics = diagnostic_means(sums, x.lengths)
    return cast_result("logp, old_logp, ref_logp, adv", "loss", loss, x.out_dtype), diagnostics
