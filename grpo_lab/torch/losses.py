r"""The GRPO loss on tensors: clipped surrogate, GSPO's sequence ratio, aggregation, grpo_loss.

The NumPy reference and its chapter: :mod:`grpo_lab.core.losses` and :mod:`grpo_lab.core.aggregation`
(chapter 2). Same names, arguments, equations and diagnostics; tensors on CPU or CUDA, worked
in float64 and returned in the inputs' dtype, differentiable in ``logp`` (and in ``adv`` and
``ref_logp``, though a trainer detaches those). Chapter 6 trains with these.
"""

from __future__ import annotations

import torch

from grpo_lab.numerics.validate import check_choice, check_int, check_real
from grpo_lab.core.aggregation import AGGREGATIONS
from grpo_lab.core.losses import LEVELS, MAX_LOG_RATIO
from grpo_lab.core.losses import _eps  # the clip range is checked exactly as in NumPy
from grpo_lab.torch._checks import (WORK, as_float_tensor, as_mask, cast_result, check_shape, describe,
                      same_device)
from grpo_lab.torch.kl import kl_k1, kl_k2, kl_k3

__all__ = ["AGGREGATIONS", "KL_ESTIMATORS", "LEVELS", "MAX_LOG_RATIO", "aggregate_loss",
           "aggregation_weights", "clipped_surrogate_loss", "grpo_loss", "sequence_ratio"]

#: The same names as the NumPy reference (the options are imported from it, not copied).
KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}

_TOKENS_DOC = " of per-token log-probs, shape (N, T)"


# --- aggregation -----------------------------------------------------------------------------

def _valid_lengths(m: torch.Tensor) -> torch.Tensor:
    """Valid tokens per sequence, (N,); an empty row is an error (it has no mean)."""
    lengths = m.sum(dim=-1)                                         # (N,)
    if bool((lengths == 0).any()):
        rows = torch.nonzero(lengths == 0).flatten()
        raise ValueError(
            f"mask: expected at least one valid token in every sequence (row), got none in row "
            f"{int(rows[0])} ({rows.numel()} empty row(s) in all): an empty completion has no "
            f"mean, and is almost always a masking bug")
    return lengths


def aggregation_weights(mask, mode, *, max_len=None):
    r"""The weight of each token's loss in :func:`aggregate_loss`, an (N, T) float64 tensor.

    ``grpo``: :math:`1/(N L_i)`; ``bnpo``, ``dapo``: :math:`1/\sum_j L_j`; ``dr_grpo``:
    :math:`1/(N\,\text{max\_len})`, ``max_len`` defaulting to T. Padding gets 0.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask: expected a torch.Tensor mask of 0/1 or bools, got {describe(mask)}")
    m = as_mask("mask", mask, mask.shape)
    if m.dim() != 2:
        raise ValueError(f"mask: expected a 2-D (N, T) tensor of 0/1 or bools, got {describe(m)}")
    mode = check_choice("mode", mode, AGGREGATIONS)
    N, T = m.shape
    if max_len is not None and mode != "dr_grpo":
        raise ValueError(f"max_len: expected None with mode {mode!r} (only 'dr_grpo' divides by "
                         f"it), got {max_len!r}")
    lengths = _valid_lengths(m).to(WORK)                              # (N,)
    if mode == "grpo":
        per_token = 1.0 / (N * lengths[:, None])                       # (N, 1)
    elif mode in ("bnpo", "dapo"):
        per_token = 1.0 / lengths.sum()
    else:
        max_len = T if max_len is None else check_int(
            "max_len", max_len, minimum=T, why=f" (at least T = {T}, the padded length)")
        per_token = torch.tensor(1.0 / (N * max_len), dtype=WORK, device=m.device)
    return torch.where(m, per_token, torch.zeros((), dtype=WORK, device=m.device))   # (N, T)


def aggregate_loss(per_token_loss, mask, mode, *, max_len=None):
    r"""Reduce per-token losses (N, T) to one scalar by TRL's ``loss_type`` rules.

    See :func:`grpo_lab.aggregate_loss`. Returns a 0-d tensor in the dtype of
    ``per_token_loss``; padded positions must hold finite numbers.

    >>> import torch, grpo_lab.torch as glt
    >>> loss, mask = torch.tensor([[1.0, 0, 0], [0, 0, 0]]), torch.tensor([[1, 0, 0], [1, 1, 1]])
    >>> [round(glt.aggregate_loss(loss, mask, m).item(), 4) for m in ("grpo", "dapo", "dr_grpo")]
    [0.5, 0.25, 0.1667]
    """
    lt, dtype = as_float_tensor("per_token_loss", per_token_loss, ndim=2,
                                shape_doc=" of shape (N, T)")
    m = as_mask("mask", mask, lt.shape, " (the shape of per_token_loss; nothing is broadcast)")
    same_device("per_token_loss", lt, mask=m)
    w = aggregation_weights(m, mode, max_len=max_len)                 # (N, T)
    return cast_result("per_token_loss", "aggregated loss", (w * lt.to(WORK)).sum(), dtype)


# --- the clipped surrogate -------------------------------------------------------------------

def _logp_pair(logp, old_logp, *, ndim=None):
    lp, lp_dtype = as_float_tensor("logp", logp, ndim=ndim, shape_doc=_TOKENS_DOC)
    if lp.dim() == 0:
        raise ValueError(f"logp: expected a tensor with at least 1 dimension (T tokens), "
                         f"got {describe(lp)}")
    old, old_dtype = as_float_tensor("old_logp", old_logp, shape_doc=_TOKENS_DOC)
    check_shape("old_logp", old, lp.shape, " (the shape of logp; nothing is broadcast)")
    same_device("logp", lp, old_logp=old)
    return lp, old, torch.promote_types(lp_dtype, old_dtype)


def _advantages(adv, shape, device):
    """(N,) per sequence, given its token axis explicitly, or (N, T) per token."""
    a, a_dtype = as_float_tensor("adv", adv, min_size=0)
    same_device("logp", torch.empty(0, device=device), adv=a)
    if tuple(a.shape) == tuple(shape):
        return a, a_dtype                                             # (N, T)
    if tuple(a.shape) == tuple(shape[:-1]):
        return a[..., None], a_dtype                                  # (N,) -> (N, 1)
    raise ValueError(f"adv: expected shape {tuple(shape[:-1])} (one advantage per sequence) or "
                     f"{tuple(shape)} (one per token), got {describe(a)}")


def _surrogate(log_ratio, adv, eps_low, eps_high, dual_clip):
    """PPO's clipped objective as a loss, term by term (CleanRL's layout); float64 in and out."""
    ratio = torch.exp(log_ratio)                                        # (N, T) pi / pi_old
    pg_loss1 = -adv * ratio                                             # -r A
    pg_loss2 = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)     # -clip(r) A
    pg_loss = torch.maximum(pg_loss1, pg_loss2)                         # -min(r A, clip(r) A)
    if dual_clip is not None:
        pg_loss3 = -adv * dual_clip                                     # Ye et al. 2020, eq. 6
        pg_loss = torch.where(adv < 0, torch.minimum(pg_loss, pg_loss3), pg_loss)
    return pg_loss, ratio


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
    lp, old, dtype = _logp_pair(logp, old_logp)
    a, a_dtype = _advantages(adv, lp.shape, lp.device)
    eps_low, eps_high = _eps(eps_low, eps_high)
    if dual_clip is not None:
        dual_clip = check_real("dual_clip", dual_clip, minimum=1.0, allow_equal=False)
    log_ratio = torch.clamp(lp.to(WORK) - old.to(WORK), -MAX_LOG_RATIO, MAX_LOG_RATIO)
    pg_loss, _ = _surrogate(log_ratio, a.to(WORK), eps_low, eps_high, dual_clip)
    return cast_result("logp, old_logp, adv", "per-token losses", pg_loss,
                       torch.promote_types(dtype, a_dtype))


def _mean_log_ratio(lp, old, m):
    d = torch.where(m, lp.to(WORK) - old.to(WORK), torch.zeros((), dtype=WORK, device=lp.device))
    mean = d.sum(dim=-1) / _valid_lengths(m).to(WORK)                  # (N,)
    return torch.clamp(mean, -MAX_LOG_RATIO, MAX_LOG_RATIO)


def sequence_ratio(logp, old_logp, mask):
    r"""GSPO's length-normalised sequence ratio (N,), see :func:`grpo_lab.sequence_ratio`.

    .. math::

        s_i = \exp\Big(\frac{1}{|y_i|}\sum_t m_{i,t}\,(logp_{i,t} - old\_logp_{i,t})\Big)
    """
    lp, old, dtype = _logp_pair(logp, old_logp, ndim=2)
    m = as_mask("mask", mask, lp.shape, " (the shape of logp)")
    same_device("logp", lp, mask=m)
    return cast_result("logp, old_logp", "sequence ratios", torch.exp(_mean_log_ratio(lp, old, m)),
                       dtype)


# --- everything together ---------------------------------------------------------------------

def _masked_mean(x, m) -> float:
    """Mean over the valid tokens as a Python float (a logged metric; no gradient)."""
    x = x.detach().to(WORK)
    return float(torch.where(m, x, torch.zeros_like(x)).sum() / m.sum())


def grpo_loss(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None, beta=0.04,
              kl="k3", agg="grpo", level="token"):
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
    kl          str              "k1", "k2" or "k3"
    agg         str              "grpo", "bnpo", "dapo" or "dr_grpo"
    level       str              "token" or "sequence" (GSPO)
    ==========  ===============  ======================================================

    Returns ``(loss, diagnostics)``: a 0-d tensor in the inputs' common dtype, and a dict of
    Python floats (``clip_frac_low``, ``clip_frac_high``, ``clip_frac``, ``mean_ratio``,
    ``mean_kl`` (None without a reference) and ``approx_kl``), means over valid tokens.
    """
    lp, old, dtype = _logp_pair(logp, old_logp, ndim=2)
    m = as_mask("mask", mask, lp.shape, " (the shape of logp; nothing is broadcast)")
    same_device("logp", lp, mask=m)
    a, a_dtype = _advantages(adv, lp.shape, lp.device)
    eps_low, eps_high = _eps(eps_low, eps_high)
    beta = check_real("beta", beta, minimum=0.0)
    kl = check_choice("kl", kl, tuple(KL_ESTIMATORS))
    agg = check_choice("agg", agg, AGGREGATIONS)
    level = check_choice("level", level, LEVELS)
    out_dtype = torch.promote_types(dtype, a_dtype)
    if ref_logp is None:
        if beta != 0:
            raise ValueError(f"ref_logp: expected an (N, T) tensor of reference log-probs "
                             f"when beta = {beta} > 0, got None")
    else:
        ref, ref_dtype = as_float_tensor("ref_logp", ref_logp, shape_doc=_TOKENS_DOC)
        check_shape("ref_logp", ref, lp.shape, " (the shape of logp; nothing is broadcast)")
        same_device("logp", lp, ref_logp=ref)
        out_dtype = torch.promote_types(out_dtype, ref_dtype)
    w = aggregation_weights(m, agg)                                    # (N, T)

    if level == "token":
        log_ratio = torch.clamp(lp.to(WORK) - old.to(WORK), -MAX_LOG_RATIO, MAX_LOG_RATIO)
    else:
        log_ratio = _mean_log_ratio(lp, old, m)[:, None]               # (N, 1) over T
    adv_w = a.to(WORK)                                                 # (N, 1) or (N, T)
    pg_loss, ratio = _surrogate(log_ratio, adv_w, eps_low, eps_high, None)
    ratio = ratio.expand(lp.shape)                                     # (N, T)

    if ref_logp is None:
        per_token_kl, mean_kl = 0.0, None
    else:
        per_token_kl = KL_ESTIMATORS[kl](lp.to(WORK), ref.to(WORK))    # (N, T)
        mean_kl = _masked_mean(per_token_kl, m)
    per_token_loss = pg_loss + beta * per_token_kl                     # (N, T)
    loss = cast_result("logp, old_logp, ref_logp, adv", "loss", (w * per_token_loss).sum(),
                       out_dtype)

    with torch.no_grad():       # the diagnostics TRL's GRPOTrainer logs (clip_ratio/*)
        is_low = (ratio < 1 - eps_low) & (adv_w < 0)                   # (N, T)
        is_high = (ratio > 1 + eps_high) & (adv_w > 0)                 # (N, T)
        diagnostics = {
            "clip_frac_low": _masked_mean(is_low, m),
            "clip_frac_high": _masked_mean(is_high, m),
            "clip_frac": _masked_mean(is_low | is_high, m),
            "mean_ratio": _masked_mean(ratio, m),
            "mean_kl": mean_kl,
            "approx_kl": _masked_mean(kl_k3(old.detach().to(WORK), lp.detach().to(WORK),
                                            clamp=MAX_LOG_RATIO), m),
        }
    return loss, diagnostics
