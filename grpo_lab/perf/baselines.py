r"""The baselines the bench measures against: the plain formula and TRL's eager torch code.

Taught in chapter 7 (``chapters/07_performance.ipynb``). Hugging Face TRL's ``GRPOTrainer`` is
the implementation most readers meet first, so it sets the bar. Each baseline names the
release it follows: :func:`trl_style_advantages` is the arithmetic core of TRL's group
advantages (mean and std per group, ``repeat_interleave`` back to every completion), without the
NaN handling TRL 1.16.0 wraps it in (``torch.nanmean``, its own ``nanstd``, ``torch.isclose``
for the zero-std metric and ``torch.nan_to_num``: ``trl/trainer/grpo_trainer.py:2765-2810``):
the form of older releases, equal to 1.16.0's on rewards without NaN; :func:`trl_style_loss` is TRL's default loss up to 0.16 (per-sequence "grpo"
aggregation, beta 0.04, k3; 0.17 and 0.18 defaulted to "bnpo", 1.16.0 to "dapo" with beta 0),
on log-probs already computed (TRL 1.16.0 computes them with its own fused LM head, which
:mod:`grpo_lab.perf.bench_linear` measures). The torch mirror
(:mod:`grpo_lab.torch`) has to run within 1.2x of :func:`trl_style_loss` in time and peak memory,
and its group advantages no slower than :func:`trl_style_advantages` (issue 13). Both are
written from the description of TRL's code, not copied, and are tested equal to the package's
own functions. :func:`loss_inputs` makes the seeded batch every loss is measured on.

``import grpo_lab`` never imports torch: the torch baselines import it when called.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import check_int, check_real

__all__ = ["TRL_EPS", "loss_inputs", "plain_advantages", "trl_style_advantages",
           "trl_style_loss"]

TRL_EPS = 1e-4                                  # TRL adds 1e-4 to the std


def plain_advantages(rewards, eps=1e-8):
    """The formula as written, in the rewards' dtype: (r - mean) / (std + eps), row by row.

    Three reductions and three full-size temporaries; in float32 the squares inside ``std``
    overflow for rewards above about 1e19 (chapter 1). A baseline, not for use.

    >>> plain_advantages(np.array([[1.0, 0.0]]))
    array([[ 0.99999998, -0.99999998]])
    """
    mean = rewards.mean(axis=1, keepdims=True)                 # (B, 1)
    std = rewards.std(axis=1, keepdims=True)                   # (B, 1)
    return (rewards - mean) / (std + eps)                      # (B, G)


def _check_groups(rewards, G, eps):
    """The checks of :func:`trl_style_advantages`: whole groups of G >= 2 in a flat tensor."""
    G = check_int("G", G, minimum=2)
    if getattr(rewards, "ndim", None) != 1 or rewards.shape[0] % G:
        raise ValueError(f"rewards: expected a flat (B*G,) tensor of whole groups of G = {G}, "
                         f"got shape {tuple(getattr(rewards, 'shape', ()))}")
    return G, check_real("eps", eps, minimum=0.0)


def trl_style_advantages(rewards, G, eps=TRL_EPS):
    """Group advantages by the arithmetic of TRL's ``GRPOTrainer``, on a flat tensor, without
    1.16.0's NaN handling (nanmean, nanstd, nan_to_num: its result on NaN-free rewards).

    ``rewards`` is (B*G,), the groups side by side. The group statistics are computed on a
    (B, G) view and then *repeated* back to (B*G,) with ``repeat_interleave`` before the
    subtraction and the division: two more full-size tensors than the broadcast needs.
    ``torch.std`` is Bessel-corrected, so this equals ``group_advantages(ddof=1, eps=1e-4)``.
    (Written after the description in TRL's ``_generate_and_score_completions``; not copied.)

    >>> import torch
    >>> trl_style_advantages(torch.tensor([1.0, 0.0, 3.0, 3.0]), 2)
    tensor([ 0.7070, -0.7070,  0.0000,  0.0000])
    """
    G, eps = _check_groups(rewards, G, eps)
    mean_grouped = rewards.view(-1, G).mean(dim=1)             # (B,)
    std_grouped = rewards.view(-1, G).std(dim=1)               # (B,)
    mean_grouped = mean_grouped.repeat_interleave(G, dim=0)    # (B*G,)
    std_grouped = std_grouped.repeat_interleave(G, dim=0)      # (B*G,)
    return (rewards - mean_grouped) / (std_grouped + eps)      # (B*G,)


def _check_loss_batch(logp, old_logp, ref_logp, adv, mask, eps_low, eps_high, beta):
    """The checks of :func:`trl_style_loss`: tensors of shapes (N, T) and (N,), and 3 scalars."""
    import torch
    tensors = {"logp": logp, "old_logp": old_logp, "ref_logp": ref_logp, "adv": adv,
               "mask": mask}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if logp.dim() != 2:
        raise ValueError(f"logp: expected an (N, T) tensor, got shape {tuple(logp.shape)}")
    for name, t in tensors.items():
        want = tuple(logp.shape[:1]) if name == "adv" else tuple(logp.shape)
        if tuple(t.shape) != want:
            raise ValueError(f"{name}: expected shape {want} (logp is (N, T) = "
                             f"{tuple(logp.shape)}), got {tuple(t.shape)}")
    eps_low = check_real("eps_low", eps_low, minimum=0.0, maximum=1.0)
    eps_high = eps_low if eps_high is None else check_real("eps_high", eps_high, minimum=0.0)
    return eps_low, eps_high, check_real("beta", beta, minimum=0.0)


def trl_style_loss(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None,
                   beta=0.04):
    r"""The GRPO loss of TRL's default up to 0.16, composed eagerly as its ``_compute_loss`` did.

    .. math::

        \ell_{i,t} = -\min(c_{i,t} A_i,\ \operatorname{clip}(c_{i,t}, 1-\varepsilon_{low},
        1+\varepsilon_{high}) A_i) + \beta\,(e^{d_{i,t}} - d_{i,t} - 1),\qquad
        \mathcal L = \frac1N \sum_i \frac{\sum_t m_{i,t}\,\ell_{i,t}}{\max(1, \sum_t m_{i,t})}

    with :math:`c = e^{\mathrm{logp} - \mathrm{old}}` and :math:`d = \mathrm{ref} - \mathrm{logp}`.
    Written from TRL's description, not copied; it equals
    ``grpo_lab.torch.grpo_loss(..., kl="k3", agg="grpo")`` (tested).

    ==========  ========  ===================================================
    Symbol      Shape     Meaning
    ==========  ========  ===================================================
    logp        (N, T)    log pi_theta of the sampled tokens (carries the grad)
    old_logp    (N, T)    log pi_old at sampling time
    ref_logp    (N, T)    log pi_ref, the frozen reference
    adv         (N,)      one advantage per completion
    mask        (N, T)    1 for completion tokens, 0 for padding
    ==========  ========  ===================================================

    Returns ``(loss, metrics)``: a 0-d tensor and TRL's logged clip ratios and mean KL as
    Python floats (``clip_frac_low``, ``clip_frac_high``, ``clip_frac``, ``mean_kl``).

    >>> import torch
    >>> logp = torch.zeros(2, 3, requires_grad=True)
    >>> loss, metrics = trl_style_loss(logp, logp.detach(), logp.detach(),
    ...                                torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    >>> float(loss.detach()), metrics["clip_frac"]
    (0.0, 0.0)
    """
    import torch
    eps_low, eps_high, beta = _check_loss_batch(logp, old_logp, ref_logp, adv, mask,
                                                eps_low, eps_high, beta)
    a = adv.unsqueeze(1)                                           # (N, 1)
    d = ref_logp - logp                                            # (N, T) log pi_ref/pi_theta
    per_token_kl = torch.exp(d) - d - 1                            # (N, T) k3
    coef_1 = torch.exp(logp - old_logp)                            # (N, T) the ratio
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)        # (N, T) clipped
    per_token_loss1 = coef_1 * a                                   # (N, T)
    per_token_loss2 = coef_2 * a                                   # (N, T)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2) + beta * per_token_kl
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()

    with torch.no_grad():                                          # TRL's clip_ratio/* metrics
        tokens = mask.sum()
        is_low = (coef_1 < 1 - eps_low) & (a < 0)                  # (N, T)
        is_high = (coef_1 > 1 + eps_high) & (a > 0)                # (N, T)
        metrics = {"clip_frac_low": float((is_low * mask).sum() / tokens),
                   "clip_frac_high": float((is_high * mask).sum() / tokens),
                   "clip_frac": float(((is_low | is_high) * mask).sum() / tokens),
                   "mean_kl": float((per_token_kl * mask).sum() / tokens)}
    return loss, metrics


def _check_size(shape):
    """The check of :func:`loss_inputs`: ``(N, T)``, two positive integers."""
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ValueError(f"shape: expected (N, T), two positive integers, got {shape!r}")
    return tuple(check_int(name, n, minimum=1) for name, n in zip(("N", "T"), shape))


def loss_inputs(shape, device="cpu", seed=0):
    """Seeded inputs of a GRPO loss: ``[logp, old_logp, ref_logp, adv, mask]`` on ``device``.

    ``logp`` around -2 (a token probability near 0.14), ``old_logp`` and ``ref_logp`` 0.05 away
    (a ratio within a few percent of 1), one standard-normal advantage per row, and a boolean
    mask whose rows are valid prefixes of random lengths between T/4 and T.

    >>> logp, old, ref, adv, mask = loss_inputs((4, 8))
    >>> tuple(logp.shape), tuple(adv.shape), mask.dtype
    ((4, 8), (4,), torch.bool)
    """
    import torch
    N, T = _check_size(shape)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    logp = -2.0 + 0.3 * torch.randn(N, T, generator=gen)           # (N, T)
    old = logp + 0.05 * torch.randn(N, T, generator=gen)           # (N, T)
    ref = logp + 0.05 * torch.randn(N, T, generator=gen)           # (N, T)
    adv = torch.randn(N, generator=gen)                            # (N,)
    lengths = torch.randint(max(1, T // 4), T + 1, (N,), generator=gen)
    mask = torch.arange(T)[None, :] < lengths[:, None]             # (N, T) valid prefix
    return [t.to(device) for t in (logp, old, ref, adv, mask)]
