"""Chapter 6: the loss of one inner iteration, in torch,
``fn(logp, old_logp, ref_logp, adv, mask, eps, beta) -> loss``.

Written with tensor methods (``x.exp()``, ``x.clamp(...)``), as a reader may, so that this
module imports without torch; the checker hands over torch tensors.
"""

from __future__ import annotations

from .entry import Drill, Wrong, endless_loop


def _terms(logp, old_logp, ref_logp, adv, eps, *, combine="max", kl="k3"):
    """The per-token surrogate and KL terms, with switches for the usual slips."""
    ratio = (logp - old_logp).exp()                               # (N, T)
    a = adv[:, None]                                              # (N, 1)
    unclipped, clipped = -a * ratio, -a * ratio.clamp(1 - eps, 1 + eps)
    pg = {"max": unclipped.maximum(clipped), "min": unclipped.minimum(clipped),
          "unclipped": unclipped}[combine]
    r = ref_logp - logp                                           # log(pi_ref / pi_theta)
    penalty = {"k3": r.exp() - r - 1, "k3 upside down": (-r).exp() + r - 1, "k1": -r}[kl]
    return pg, penalty


def _grpo(per_token, mask):
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()      # mean per completion, then all


def _loss_right(logp, old_logp, ref_logp, adv, mask, eps, beta):
    ratio = (logp - old_logp).exp()                               # (N, T)
    a = adv[:, None]                                              # (N, 1)
    pg = (-a * ratio).maximum(-a * ratio.clamp(1 - eps, 1 + eps))
    r = ref_logp - logp
    per_token = (pg + beta * (r.exp() - r - 1)) * mask            # (N, T)
    return (per_token.sum(1) / mask.sum(1)).mean()                # grpo


def _loss_where(logp, old_logp, ref_logp, adv, mask, eps, beta):
    """torch.where for the mask, expm1 for k3, the lengths counted as floats."""
    pg, _ = _terms(logp, old_logp, ref_logp, adv, eps)
    r = ref_logp - logp
    per_token = (pg + beta * (r.expm1() - r)).where(mask, 0.0)   # (N, T)
    return (per_token.sum(-1) / mask.double().sum(-1)).mean()


def _loss_package(logp, old_logp, ref_logp, adv, mask, eps, beta):
    import grpo_lab.torch as glt

    loss, _ = glt.grpo_loss(logp, old_logp, ref_logp, adv, mask, eps_low=eps, beta=beta,
                            kl="k3", agg="grpo")
    return loss


def _slip(*, combine="max", kl="k3", beta_sign=1.0, reduce=_grpo):
    """The right loss but for one slip in the terms or in the reduction."""
    def fn(logp, old_logp, ref_logp, adv, mask, eps, beta):
        pg, penalty = _terms(logp, old_logp, ref_logp, adv, eps, combine=combine, kl=kl)
        return reduce(pg + beta_sign * beta * penalty, mask)
    return fn


def _stub(logp, old_logp, ref_logp, adv, mask, eps, beta):
    # the chapter's stub: the token mean over the whole batch (dapo's reduction)
    pg, penalty = _terms(logp, old_logp, ref_logp, adv, eps)
    return ((pg + beta * penalty) * mask).sum() / mask.sum()


def _hard_coded(logp, old_logp, ref_logp, adv, mask, eps, beta):
    return _loss_right(logp, old_logp, ref_logp, adv, mask, 0.2, 0.04)   # debugged on these


def _adv_not_broadcast(logp, old_logp, ref_logp, adv, mask, eps, beta):
    ratio = (logp - old_logp).exp()                               # (N, T)
    pg = (-adv * ratio).maximum(-adv * ratio.clamp(1 - eps, 1 + eps))   # (N,) * (N, T)
    return _grpo(pg, mask)


def _kl_detached(logp, old_logp, ref_logp, adv, mask, eps, beta):
    pg, _ = _terms(logp, old_logp, ref_logp, adv, eps)
    r = ref_logp - logp.detach()                                  # "the reference is frozen"
    return _grpo(pg + beta * (r.exp() - r - 1), mask)


def _adv_in_place(logp, old_logp, ref_logp, adv, mask, eps, beta):
    a = adv.unsqueeze_(1)                                         # reshapes the caller's adv
    return _loss_right(logp, old_logp, ref_logp, a[:, 0], mask, eps, beta)


def _float32(logp, old_logp, ref_logp, adv, mask, eps, beta):
    logp, old_logp, ref_logp, adv = (x.float() for x in (logp, old_logp, ref_logp, adv))
    return _loss_right(logp, old_logp, ref_logp, adv, mask, eps, beta)    # "GPUs like float32"


def _with_diagnostics(logp, old_logp, ref_logp, adv, mask, eps, beta):
    loss = _loss_right(logp, old_logp, ref_logp, adv, mask, eps, beta)
    return loss, {"clip_frac": 0.0}


def _loss_verl_guard(logp, old_logp, ref_logp, adv, mask, eps, beta):
    """verl's masked_mean: a guard 1e-8 beside each length."""
    pg, penalty = _terms(logp, old_logp, ref_logp, adv, eps)
    m = mask.to(logp.dtype)
    return (((pg + beta * penalty) * m).sum(-1) / (m.sum(-1) + 1e-8)).mean()


def _loss_loop(logp, old_logp, ref_logp, adv, mask, eps, beta):
    """One completion at a time, sliced to its own tokens."""
    per_completion = []
    for i in range(logp.shape[0]):
        keep = mask[i]
        lp, old, ref = logp[i][keep], old_logp[i][keep], ref_logp[i][keep]
        ratio = (lp - old).exp()
        pg = (-adv[i] * ratio).maximum(-adv[i] * ratio.clamp(1 - eps, 1 + eps))
        r = ref - lp
        per_completion.append((pg + beta * (r.exp() - r - 1)).mean())
    return sum(per_completion) / len(per_completion)


def _loss_dual_clip(logp, old_logp, ref_logp, adv, mask, eps, beta):
    pg, penalty = _terms(logp, old_logp, ref_logp, adv, eps)
    a = adv[:, None]
    pg = pg.minimum(-3.0 * a).where(a < 0, pg)                   # verl's clip_ratio_c = 3
    return _grpo(pg + beta * penalty, mask)


def _loss_hangs(*args):
    while True:
        pass


_GRPO_LOSS = Drill("check_grpo_loss", 6, rights=(_loss_right, _loss_where, _loss_package,
                                                  _loss_verl_guard, _loss_loop), wrongs=(
    Wrong("the token mean over the whole batch (the chapter's stub)", _stub,
          "token mean over the whole batch (dapo)"),
    Wrong("divides by N * T (dr_grpo)",
          _slip(reduce=lambda x, m: (x * m).sum() / m.numel()), "divides by N * T"),
    Wrong("a plain mean over the padded tensor (padding counted)",
          _slip(reduce=lambda x, m: x.mean(1).mean()), "the padded tokens entered the loss"),
    Wrong("divides by the lengths but sums the padding too",
          _slip(reduce=lambda x, m: (x.sum(1) / m.sum(1)).mean()),
          "the padded tokens entered the loss"),
    Wrong("returns the objective, not the loss (sign error)",
          lambda *args: -_loss_right(*args), "the sign is flipped"),
    Wrong("beta ignored: no KL term", _slip(beta_sign=0.0), "the KL term is missing"),
    Wrong("the KL term subtracted", _slip(beta_sign=-1.0), "the KL term has the wrong sign"),
    Wrong("k3 with the ratio upside down", _slip(kl="k3 upside down"), "upside down"),
    Wrong("k1 as the penalty", _slip(kl="k1"), "that penalty is k1"),
    Wrong("torch.minimum of the two losses (optimistic)", _slip(combine="min"), "optimistic"),
    Wrong("no clipping", _slip(combine="unclipped"), "no clipping"),
    Wrong("eps and beta hard-coded", _hard_coded, "use the arguments"),
    Wrong("adv (N,) multiplied with (N, T) terms", _adv_not_broadcast, "adv[:, None]"),
    Wrong("returns loss.item()", lambda *args: _loss_right(*args).item(),
          "the loss must stay a tensor"),
    Wrong("the KL term on logp.detach()", _kl_detached, "its gradient is not"),
    Wrong("computed on a detached logp", lambda lp, *rest: _loss_right(lp.detach(), *rest),
          "no grad_fn"),
    Wrong("adv.unsqueeze_(1) on the caller's advantages", _adv_in_place, "modified its input"),
    Wrong("computed in float32", _float32, "the drill asks for float64"),
    Wrong("returns (loss, diagnostics) like gl.torch.grpo_loss", _with_diagnostics,
          "returned a tuple of 2"),
    Wrong("verl's dual-clip at c = 3", _loss_dual_clip, "dual-clip"),
    endless_loop(_loss_hangs),
))


DRILLS = (_GRPO_LOSS,)
