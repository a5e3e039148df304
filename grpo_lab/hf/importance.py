r"""Importance-sampling corrections for a sampler that is not the trainer: TIS, MIS, TRL's mask.

Taught in chapter 6b, section "`old_logp`, the sampler's log-probs and the IS correction"
(``chapters/06b_real_model.ipynb``).

An inference engine (vLLM, SGLang) samples the completions with its own kernels, often in
bf16; the trainer then recomputes the same tokens' log-probs, ``old_logp``. The two disagree a
little (chapter 4's "two kernels, one product"), so the batch is slightly off-policy: it was
drawn from :math:`\pi_{sampler}`, not from :math:`\pi_{old}`. The correction reweights each
token (or each sequence) by how much likelier the trainer finds it than the sampler did:

.. math::

    \delta_{i,t} = \big(\log\pi_{old}(y_{i,t}) - \log\pi_{sampler}(y_{i,t})\big)\, m_{i,t},
    \qquad w = e^{\delta}\ \text{(token)}\quad\text{or}\quad
    w_i = e^{\sum_t \delta_{i,t}}\ \text{(sequence)}

and bounds it, because a ratio of two probabilities has no upper limit:

==================  =========================================================================
Mode                Weight
==================  =========================================================================
token_truncate      TIS: :math:`\min(\max(w_{i,t}, C_{min}), C_{max})` (Yao et al. 2025)
token_mask          MIS / IcePop: :math:`w_{i,t}\,\mathbb 1[C_{min} \le w_{i,t} \le C_{max}]`,
                    a token far off-policy is dropped rather than down-weighted
sequence_truncate   one truncated weight per completion, on all its tokens
sequence_mask       one weight per completion, 0 if it leaves [C_min, C_max]: TRL's default
==================  =========================================================================

TRL 1.16.0 (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._generate_and_score_completions``)
computes exactly these four (``vllm_importance_sampling_mode``), with the defaults
``"sequence_mask"``, ``vllm_importance_sampling_clip_max=3.0`` and ``clip_min=None``
(``trl/trainer/grpo_config.py``, ``GRPOConfig``): a whole completion whose summed log-ratio
exceeds log 3 is masked out. It applies them only with vLLM
(``use_vllm and vllm_importance_sampling_correction``, on by default there); a sampler's NaN
log-prob (a token vLLM did not score) counts as a log-ratio of 0. In ``_compute_loss`` the
weight multiplies the clipped policy term of each token, not the KL term, and carries no
gradient. Since :math:`w \ge 0`, :math:`w \cdot \min(rA, \mathrm{clip}(r)A) = \min(r\,wA,
\mathrm{clip}(r)\,wA)`: the correction is the advantage times ``w``
(:func:`weighted_advantages`), so ``glt.grpo_loss`` takes it unchanged.
"""

from __future__ import annotations

import math

import torch

from grpo_lab.core.surrogate import MAX_LOG_RATIO
from grpo_lab.numerics.validate import (as_float_array, as_mask, cast_result, check_choice,
                                        check_real, check_shape, describe, same_device,
                                        working_dtype)

__all__ = ["IS_MODES", "check_is_arguments", "is_weights", "is_weights_math", "masked_is",
           "sampler_log_ratio", "sequence_log_ratio", "sequence_masked_is_plain", "token_truncated_is_plain",
           "truncated_is", "weighted_advantages", "weighted_advantages_math"]
# sampler_log_ratio, sequence_log_ratio, truncated_is and masked_is are is_weights' four steps,
# named so that its listing reads as the formulas; they take tensors is_weights has checked
# (the door is is_weights, which validates once), so they are not on gl.hf.

#: TRL's ``vllm_importance_sampling_mode`` values, each one of :func:`is_weights`' modes.
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
_SHAPE = " of per-token log-probs, shape (N, T)"


def token_truncated_is_plain(old_logp, sampler_logp, c_max):
    """TIS, plainly: w = min(pi_old / pi_sampler, C) per token."""
    return torch.exp(old_logp - sampler_logp).clamp(max=c_max)


def sequence_masked_is_plain(old_logp, sampler_logp, mask, c_max):
    """TRL's default, plainly: one ratio per sequence, 0 if it exceeds C."""
    w = torch.exp(((old_logp - sampler_logp) * mask).sum(-1, keepdim=True))    # (N, 1)
    return torch.where(w > c_max, torch.zeros_like(w), w)


def check_is_arguments(old_logp, sampler_logp, mask, mode, clip_min, clip_max):
    """Validate :func:`is_weights`' arguments; returns them with the mask as 0.0 / 1.0 in the
    working dtype. ``sampler_logp`` may hold NaN (a token the engine did not score)."""
    old, dtype = as_float_array("old_logp", old_logp, ndim=2, shape_doc=_SHAPE, backend="torch")
    if bool((old > 0).any()):
        raise ValueError(f"old_logp: expected log-probabilities (<= 0), got "
                         f"{float(old.max())}")
    smp, _ = as_float_array("sampler_logp", sampler_logp, ndim=2, shape_doc=_SHAPE,
                            backend="torch", finite=False)
    check_shape("sampler_logp", smp, old.shape, " (the shape of old_logp)")
    if bool((smp == float("inf")).any()) or bool((smp > 0).any()):
        raise ValueError("sampler_logp: expected log-probabilities (<= 0, or NaN where the "
                         f"engine gave none), got {float(smp.nan_to_num(-1.0).max())}")
    work = working_dtype(dtype)
    m = as_mask("mask", mask, tuple(old.shape), " (the shape of old_logp)", backend="torch",
                dtype=work)
    mode = check_choice("mode", mode, IS_MODES)
    lo = None if clip_min is None else check_real("clip_min", clip_min, minimum=0.0)
    hi = None if clip_max is None else check_real("clip_max", clip_max, minimum=0.0,
                                                  allow_equal=False)
    if lo is not None and hi is not None and lo >= hi:
        raise ValueError(f"clip_min: expected a bound below clip_max = {hi} (TRL's GRPOConfig "
                         f"refuses it too), got {lo}")
    return old.to(work), smp.to(work), m, mode, lo, hi


def sampler_log_ratio(old_logp, sampler_logp, mask):
    r""":math:`\delta = (\log\pi_{old} - \log\pi_{sampler})\, m`, (N, T); NaN (unscored) -> 0."""
    return torch.nan_to_num((old_logp - sampler_logp) * mask, nan=0.0)     # (N, T)


def sequence_log_ratio(log_ratio):
    r""":math:`\sum_t \delta_{i,t}`, (N, 1): the log of the sequence's probability ratio."""
    return log_ratio.sum(dim=-1, keepdim=True)                              # (N, 1)


def truncated_is(log_ratio, clip_min, clip_max):
    r""":math:`\min(\max(e^{\delta}, C_{min}), C_{max})`. The log-ratio is capped first so
    nothing overflows (at log C_max, or at MAX_LOG_RATIO = 20 without ``clip_max``); the bounds
    are then applied to the weight itself, since exp(log C) can round below C."""
    hi = MAX_LOG_RATIO if clip_max is None else min(math.log(clip_max), MAX_LOG_RATIO)
    w = torch.exp(log_ratio.clamp(max=hi))                                  # same shape
    return w if clip_min is None and clip_max is None else w.clamp(min=clip_min, max=clip_max)


def masked_is(log_ratio, clip_min, clip_max):
    r""":math:`e^{\delta}\,\mathbb 1[C_{min} \le e^{\delta} \le C_{max}]`: kept, or exactly 0."""
    w = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))                       # e^20 < float32 max
    out = (w < clip_min) if clip_min is not None else torch.zeros_like(w, dtype=torch.bool)
    if clip_max is not None:                            # past the cap, w = e^20 is not the ratio
        out = out | (w > clip_max) | (log_ratio > MAX_LOG_RATIO)
    return w.masked_fill(out, 0.0)


@torch.no_grad()
def is_weights(old_logp, sampler_logp, mask, *, mode: str = "sequence_mask",
               clip_min: float | None = None, clip_max: float | None = 3.0) -> torch.Tensor:
    r"""The importance-sampling weight of each token (N, T) or sequence (N, 1), TRL's four modes.

    ============  =========  =============================================================
    Symbol        Shape      Meaning
    ============  =========  =============================================================
    old_logp      (N, T)     the trainer's log-probs of the sampled tokens (no gradient)
    sampler_logp  (N, T)     the engine's log-probs of the same tokens; NaN: not scored
    mask          (N, T)     the completion mask
    mode          str        one of :data:`IS_MODES`; TRL's default "sequence_mask"
    clip_min      scalar     C_min >= 0 or None (no lower bound); TRL: None
    clip_max      scalar     C_max > 0 or None (no upper bound); TRL: 3.0
    return        (N, T)     token modes; (N, 1) sequence modes. No gradient.
    ============  =========  =============================================================

    The guards: a NaN sampler log-prob counts as agreement (log-ratio 0), as in TRL; the
    ratio is formed from the clamped log-ratio, so a sequence of many disagreeing tokens gives
    a weight of C_max (truncate) or 0 (mask), never inf; without an upper bound the log-ratio
    is capped at 20 (e^20 = 4.9e8) instead of overflowing.

    >>> import torch, grpo_lab.hf as glh
    >>> old = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.9]]))
    >>> smp = torch.log(torch.tensor([[0.5, 0.25], [0.2, 0.2]]))
    >>> mask = torch.ones(2, 2)
    >>> glh.is_weights(old, smp, mask, mode="token_truncate")     # 1, 2 | 4.5 -> 3, 4.5 -> 3
    tensor([[1., 2.],
            [3., 3.]])
    >>> glh.is_weights(old, smp, mask)       # sequences: 1 * 2 = 2 kept, 4.5^2 = 20.25 masked
    tensor([[2.],
            [0.]])
    """
    return is_weights_math(*check_is_arguments(old_logp, sampler_logp, mask, mode, clip_min,
                                               clip_max))


@torch.no_grad()
def is_weights_math(old, smp, m, mode, lo, hi):
    """:func:`is_weights` on checked arguments (``check_is_arguments``' output): four steps."""
    delta = sampler_log_ratio(old, smp, m)                                  # (N, T)
    if mode.startswith("sequence"):
        delta = sequence_log_ratio(delta)                                   # (N, 1)
    bound = truncated_is if mode.endswith("truncate") else masked_is
    return bound(delta, lo, hi)


def weighted_advantages(adv, weights) -> torch.Tensor:
    r"""The advantages times the IS weights: :math:`A_i w_{i,t}`, (N, T), for token weights
    (N, T); :math:`A_i w_i`, (N,), for sequence weights (N, 1).

    Because :math:`w \ge 0`, ``glt.grpo_loss(logp, old_logp, ref_logp, weighted_advantages(
    adv, w), mask)`` is TRL's ``per_token_loss * importance_sampling_ratio`` followed by the
    KL term, which the weight leaves alone.

    >>> import torch, grpo_lab.hf as glh
    >>> glh.weighted_advantages(torch.tensor([1.0, -2.0]), torch.tensor([[3.0], [0.0]]))
    tensor([3., -0.])
    >>> glh.weighted_advantages(torch.tensor([1.0, -2.0]), torch.tensor([[3.0, 1.0], [0.5, 0.0]]))
    tensor([[ 3.,  1.],
            [-1., -0.]])
    """
    a, w, dtype = check_weighted_arguments(adv, weights)
    return weighted_advantages_math(a, w, dtype)


def check_weighted_arguments(adv, weights):
    """Validate :func:`weighted_advantages`' arguments; returns them and the result dtype."""
    a, a_dtype = as_float_array("adv", adv, ndim=1, shape_doc=" of per-completion advantages "
                                "(N,)", backend="torch")
    w, w_dtype = as_float_array("weights", weights, ndim=2, shape_doc=" (N, T) or (N, 1)",
                                backend="torch")
    same_device("adv", a, weights=w)
    if w.shape[0] != a.shape[0]:
        raise ValueError(f"weights: expected {a.shape[0]} rows, one per advantage, got "
                         f"{describe(w)}")
    if bool((w < 0).any()):
        raise ValueError(f"weights: expected importance weights >= 0, got {float(w.min())}")
    return a, w, torch.promote_types(a_dtype, w_dtype)


def weighted_advantages_math(a, w, dtype):
    """:func:`weighted_advantages` on checked tensors: the product in float32 or wider, then
    the inputs' dtype (a float16 product past 65504 is a ValueError, not inf)."""
    work = working_dtype(dtype)
    a, w = a.to(work), w.to(work)
    out = a * w[:, 0] if w.shape[1] == 1 else a[:, None] * w                # (N,) or (N, T)
    return cast_result("adv and weights", "A * w", out, dtype)
