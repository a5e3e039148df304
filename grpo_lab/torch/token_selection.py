r"""Which tokens count, and VESPO's weight: the loss options TRL 1.16.0 has and the book lacked.

Taught in chapter 8, section "TRL, option by option" (``chapters/08_production_knobs.ipynb``);
each is proven equal to TRL's real trainer in ``tests/hf/test_trl_matrix.py``.

==============================  =========================================================  =======================================
Function                        What it returns                                            TRL 1.16.0 (``grpo_trainer.py``)
==============================  =========================================================  =======================================
:func:`high_entropy_mask`       the top ``quantile`` of valid tokens by entropy (Wang et    ``top_entropy_quantile``, 1380-1415
                                al. 2025, "the 20% of forking tokens")
:func:`off_policy_sequence_mask`  0 for a sequence with A < 0 whose mean                   ``off_policy_mask_threshold``,
                                :math:`\log\pi_{old} - \log\pi_\theta` exceeds delta        2945-2969
                                (DeepSeek-V3.2's off-policy sequence masking)
:func:`vespo_weight`            VESPO's gamma weight :math:`\phi(w) = e^{\lambda} w^k       ``loss_type="vespo"``, 2972-3017
                                e^{-\lambda w}` of the sequence ratio, detached
==============================  =========================================================  =======================================

Each mask is 0 or 1 and multiplies the policy term only, so it folds into the advantages
(:math:`m \cdot \min(rA, \mathrm{clip}(r)A) = \min(r\,mA, \mathrm{clip}(r)\,mA)` for
:math:`m \ge 0`), as :func:`grpo_lab.hf.weighted_advantages` does for the IS weight.
"""

from __future__ import annotations

import math

import torch

from grpo_lab.numerics.validate import (as_float_array, as_mask, check_real, check_shape,
                                        describe, same_device, working_dtype)

__all__ = ["high_entropy_mask", "high_entropy_mask_plain", "off_policy_sequence_mask",
           "off_policy_sequence_mask_plain", "vespo_weight", "vespo_weight_plain"]

_TOKENS = " of shape (N, T)"
#: VESPO's clamps of the log ratio (TRL's, from the paper's code): tokens to +-20, the sequence
#: to [log 1e-8, 20], so that w^k e^{-lambda w} never overflows.
LOG_RATIO_CLAMP = 20.0
LOG_W_MIN = math.log(1e-8)


# --- the plain faces -----------------------------------------------------------------------------

def high_entropy_mask_plain(entropy, mask, quantile):
    """Keep the tokens whose entropy is in the top ``quantile`` of the batch's valid tokens."""
    tau = torch.quantile(entropy[mask.bool()].float(), 1 - quantile)       # the threshold
    return (entropy >= tau) & mask.bool()                                   # (N, T)


def off_policy_sequence_mask_plain(adv, logp, old_logp, mask, delta):
    """Drop a sequence with A < 0 whose mean log(pi_old / pi_theta) exceeds delta."""
    kl = ((old_logp - logp) * mask).sum(-1) / mask.sum(-1)                 # (N,)
    return ((adv >= 0) | (kl <= delta)).float()                             # (N,)


def vespo_weight_plain(logp, old_logp, adv, mask, k_pos, lam_pos, k_neg, lam_neg):
    """phi(w) = e^lam w^k e^(-lam w), w the sequence ratio; phi(1) = 1."""
    log_w = ((logp - old_logp) * mask).sum(-1)                              # (N,) log w
    k = torch.where(adv >= 0, k_pos, k_neg)
    lam = torch.where(adv >= 0, lam_pos, lam_neg)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).detach()     # (N,)


# --- the hardened ones ---------------------------------------------------------------------------

def _token_pair(a_name, a, b_name, b, mask):
    x, dtype = as_float_array(a_name, a, ndim=2, shape_doc=_TOKENS, backend="torch")
    y, _ = as_float_array(b_name, b, ndim=2, shape_doc=_TOKENS, backend="torch")
    check_shape(b_name, y, x.shape, f" (the shape of {a_name})")
    m = as_mask("mask", mask, x.shape, f" (the shape of {a_name})", backend="torch",
                dtype=working_dtype(dtype))
    same_device(a_name, x, **{b_name: y, "mask": m})
    return x.to(working_dtype(dtype)), y.to(working_dtype(dtype)), m


def _adv_per_sequence(adv, n):
    a, _ = as_float_array("adv", adv, backend="torch")
    if a.dim() == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.shape != (n,):
        raise ValueError(f"adv: expected one advantage per sequence, shape ({n},) or ({n}, 1), "
                         f"got {describe(a)}")
    return a


def high_entropy_mask(entropy, mask, quantile):
    r"""The tokens whose entropy is at least the batch's :math:`(1-\rho)` quantile, (N, T) bool.

    .. math::

        \tau = Q_{1-\rho}\big(\{H_{i,t} : m_{i,t} = 1\}\big), \qquad
        \text{keep}_{i,t} = m_{i,t}\, \mathbb 1[H_{i,t} \ge \tau]

    ========  ======  ==============================================================
    Symbol    Shape   Meaning
    ========  ======  ==============================================================
    entropy   (N, T)  per-token entropy of the policy (:func:`grpo_lab.hf.token_entropy`)
    mask      (N, T)  1 for completion tokens
    quantile  scalar  rho in (0, 1]: the share kept (Wang et al. 2025 keep 0.2); 1 keeps all
    ========  ======  ==============================================================

    The quantile is ``torch.quantile``'s (linear interpolation), over the valid tokens in
    float32, as TRL's ``get_high_entropy_mask``; on several processes TRL takes it over every
    process's tokens, so pass the whole batch's entropies. No valid token: nothing is kept.

    >>> import torch
    >>> from grpo_lab.torch.token_selection import high_entropy_mask
    >>> high_entropy_mask(torch.tensor([[0.1, 2.0, 0.5, 1.0]]), torch.ones(1, 4), 0.5)
    tensor([[False,  True, False,  True]])
    """
    h, _ = as_float_array("entropy", entropy, ndim=2, shape_doc=_TOKENS, backend="torch")
    m = as_mask("mask", mask, h.shape, " (the shape of entropy)", backend="torch")
    same_device("entropy", h, mask=m)
    q = check_real("quantile", quantile, minimum=0.0, maximum=1.0, allow_equal=True)
    if q == 0.0:
        raise ValueError("quantile: expected a share of tokens in (0, 1], got 0")
    m = m.bool()
    if not m.any():
        return torch.zeros_like(m)
    tau = torch.quantile(h[m].float(), 1 - q)                               # the threshold
    return (h * m >= tau) & m                                               # (N, T)


def off_policy_sequence_mask(adv, logp, old_logp, mask, delta):
    r"""DeepSeek-V3.2's off-policy sequence mask, (N,) float 0 / 1.

    .. math::

        M_i = \mathbb 1\Big[A_i \ge 0\ \lor\ \frac{1}{|y_i|}\sum_t m_{i,t}
        \big(\log\pi_{old}(y_{i,t}) - \log\pi_\theta(y_{i,t})\big) \le \delta\Big]

    ========  ==========  ==========================================================
    Symbol    Shape       Meaning
    ========  ==========  ==========================================================
    adv       (N,)        the advantages (only their sign is read)
    logp      (N, T)      log pi_theta (read without gradient)
    old_logp  (N, T)      the sampler's log-probs (TRL: vLLM's when it has them, else
                          old_logp); a NaN (a token the engine did not score) counts 0
    mask      (N, T)      1 for completion tokens
    delta     scalar      the threshold, >= 0 (TRL's ``off_policy_mask_threshold``)
    ========  ==========  ==========================================================

    A sequence the policy has moved away from *and* that the update would push down is
    dropped: pushing down tokens the policy no longer samples is the riskiest off-policy
    update. A row without a valid token reads a mean of 0.

    >>> import torch
    >>> from grpo_lab.torch.token_selection import off_policy_sequence_mask
    >>> lp = torch.zeros(2, 2); old = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    >>> off_policy_sequence_mask(torch.tensor([1.0, -1.0]), lp, old, torch.ones(2, 2), 0.1)
    tensor([1., 0.])
    """
    lp, old, m = _token_pair("logp", logp, "old_logp", old_logp, mask)
    a = _adv_per_sequence(adv, lp.shape[0])
    d = check_real("delta", delta, minimum=0.0)
    gap = torch.nan_to_num(old - lp.detach(), nan=0.0)                      # (N, T)
    kl = (gap * m).sum(-1) / m.sum(-1).clamp(min=1.0)                       # (N,)
    return ((a >= 0) | (kl <= d)).to(lp.dtype)                              # (N,)


def vespo_weight(logp, old_logp, adv, mask, *, k_pos=2.0, lam_pos=3.0, k_neg=3.0, lam_neg=2.0):
    r"""VESPO's gamma weight of the sequence ratio, detached, (N,).

    .. math::

        w_i = \exp\Big(\sum_t m_{i,t} (\log\pi_\theta - \log\pi_{old})\Big), \qquad
        \phi(w) = e^{\lambda} w^{k} e^{-\lambda w}\ (\phi(1) = 1), \qquad
        \ell_{i,t} = -\operatorname{sg}(\phi(w_i))\, A_i \log\pi_\theta(y_{i,t})

    with :math:`(k, \lambda)` = ``(k_pos, lam_pos)`` for :math:`A \ge 0`, else
    ``(k_neg, lam_neg)`` (TRL's defaults 2, 3, 3, 2). The weight peaks at w = k / lambda and
    falls smoothly on both sides: a soft trust region on the *sum* of the log ratios, not the
    mean (unlike GSPO). Worked in log space with TRL's clamps (each token's log ratio to
    +-20, the sum to [log 1e-8, 20]), so no inf or NaN comes out of finite input.

    >>> import torch
    >>> from grpo_lab.torch.token_selection import vespo_weight
    >>> z = torch.zeros(1, 3)
    >>> vespo_weight(z, z, torch.tensor([1.0]), torch.ones(1, 3))       # w = 1: phi = 1
    tensor([1.])
    """
    lp, old, m = _token_pair("logp", logp, "old_logp", old_logp, mask)
    a = _adv_per_sequence(adv, lp.shape[0])
    k_pos, k_neg = (check_real(n, v, minimum=0.0) for n, v in (("k_pos", k_pos), ("k_neg", k_neg)))
    lam_pos, lam_neg = (check_real(n, v, minimum=0.0, allow_equal=False)
                        for n, v in (("lam_pos", lam_pos), ("lam_neg", lam_neg)))
    with torch.no_grad():
        step = torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)     # (N, T)
        log_w = torch.clamp((step * m).sum(-1), LOG_W_MIN, LOG_RATIO_CLAMP)  # (N,)
        k = torch.where(a >= 0, k_pos, k_neg).to(lp.dtype)
        lam = torch.where(a >= 0, lam_pos, lam_neg).to(lp.dtype)
        return torch.exp(lam + k * log_w - lam * torch.exp(log_w))          # (N,)
