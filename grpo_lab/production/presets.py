r"""What TRL, verl and OpenRLHF do by default, written as grpo_lab options, with sources.

Taught in chapter 8 (``chapters/08_production_knobs.ipynb``).

Every production trainer implements the same GRPO formulas with its own defaults: the std
convention and the eps beside it, where the KL goes, how per-token losses are averaged. This
module holds those defaults, so the chapter and the tests use the same numbers:

* :data:`PRESETS`: one :class:`Preset` per system, the grpo_lab keyword arguments that
  reproduce its defaults for a GRPO run, each field citing a source key;
* :func:`default_loss`: one batch's policy loss under a preset: ``group_advantages`` then
  ``grpo_loss`` with the preset's knobs;
* the knob map, re-exported from :mod:`grpo_lab.production.knobs`, whose facts live in the
  data file ``knobs.toml``: :data:`SOURCES` (the files read, each with its release),
  :data:`KNOB_MAP` / :func:`knob_table` (one :class:`Row` per concept, from a grpo_lab option
  to the setting of each system, every cell citing file and line) and
  :func:`knob_map_markdown` (the map and its sources as a Markdown table).

What was read: TRL 1.16.0, verl 0.9.1 and OpenRLHF 0.11.2, the wheels on PyPI.
``tests/reference`` downloads those wheels, runs their own tensor code against
:func:`default_loss`, the presets and the package's functions, and checks every citation and
every stated default of the map, so a number here is a checked fact about those releases.
Defaults move between releases (TRL's ``beta`` was 0.04 before 0.19, its ``loss_type`` became
``"dapo"`` later, OpenRLHF's flags became namespaced): check your version's files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.core.loss import grpo_loss
from grpo_lab.numerics.validate import as_float_array, as_mask, check_choice, check_shape
from grpo_lab.production.knobs import (KNOB_MAP, SOURCES, Cite, Row, Source, knob_map_markdown,
                                       knob_sources, knob_table, parse_cite)

__all__ = ["KL_ESTIMATORS", "KNOB_MAP", "PRESETS", "SOURCES", "Cite", "Preset", "Row", "Source",
           "check_default_loss_arguments", "default_loss", "knob_map_markdown", "knob_sources",
           "knob_table", "parse_cite"]


@dataclass(frozen=True)
class Preset:
    """A system's defaults for a GRPO run, as grpo_lab options.

    ``advantages`` are keyword arguments of :func:`grpo_lab.group_advantages`; the clip, KL and
    aggregation fields map onto :func:`grpo_lab.clipped_surrogate_loss`, the ``kl_k*``
    estimators and :func:`grpo_lab.aggregate_loss`. ``kl_in`` is ``"loss"`` (a per-token
    term added to the loss), ``"reward"`` (subtracted from each token's reward, before the
    advantages) or ``"off"``; ``beta`` is the coefficient *in effect*, 0 when KL is off.
    ``mask_truncated`` is None where the system has no such switch. ``group_size`` is the
    default G (1 for verl and OpenRLHF: a GRPO run must set it), ``steps_per_rollout`` the
    optimiser steps each batch of rollouts feeds at the defaults (1 means on-policy).
    """

    name: str
    system: str
    selects_grpo: str            # the setting that turns the trainer into GRPO
    advantages: dict
    eps_low: float
    eps_high: float
    dual_clip: float | None
    kl_in: str
    beta: float
    kl: str
    kl_clamp: float | None
    kl_bias_correction: bool     # the KL weighted by the ratio (TRL's use_bias_correction_kl)
    agg: str
    level: str
    num_iterations: int
    mask_truncated: bool | None
    group_size: int | None       # the default G (None: the caller's)
    steps_per_rollout: int       # optimiser steps per batch of rollouts, at the defaults
    sources: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def version(self) -> str:
        """The files and releases this preset was read from, one per line."""
        return "\n".join(f"{SOURCES[k].repo}: {SOURCES[k].short}" for k in self.sources)


#: One preset per system. Each value cites, in the comment beside it, the file and line it
#: was read at (the keys of SOURCES; tests/reference checks the values against the releases).
PRESETS: dict[str, Preset] = {
    "grpo_lab": Preset(
        name="grpo_lab", system="grpo_lab", selects_grpo="gl.grpo_loss",
        # DeepSeekMath's formula as written: population std, a tiny eps (chapter 1).
        advantages=dict(eps=1e-8, ddof=0, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2, dual_clip=None,
        kl_in="loss", beta=0.04, kl="k3", kl_clamp=None,        # grpo_loss's defaults (ch. 2-3)
        kl_bias_correction=False,
        agg="grpo", level="token", num_iterations=1, mask_truncated=None, group_size=None,
        # Chapter 6's loop (gl.train's TrainConfig): inner_iters=4 optimiser steps per batch,
        # and there beta=0.4, eps_high=0.28, not grpo_loss's defaults above.
        steps_per_rollout=4, sources=("grpo_lab",),
        notes=("DeepSeekMath's eq. 3 with the package's default arguments.",
               "Chapter 6's loop (TrainConfig) takes inner_iters=4 optimiser steps per batch, "
               "with beta=0.4 and eps_high=0.28.")),
    "trl": Preset(
        name="trl", system="TRL", selects_grpo="GRPOTrainer + GRPOConfig",
        # T2 l. 2770, 2787: nanstd (Bessel, T3 l. 1041), advantages / (std_rewards + 1e-4).
        advantages=dict(eps=1e-4, ddof=1, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2, dual_clip=None,   # T1 l. 693, 705: epsilon 0.2, high None;
                                                     # T1 l. 697: delta None
        # T1 l. 681: beta=0.0, so no reference model and no KL; with beta > 0, k3 in the loss
        # (T2 l. 3101), weighted by the ratio (T1 l. 972 use_bias_correction_kl=True).
        kl_in="loss", beta=0.0, kl="k3", kl_clamp=None, kl_bias_correction=True,
        agg="dapo",                                  # T1 l. 801: loss_type="dapo"
        level="token",                               # T1 l. 760: importance_sampling_level
        num_iterations=1,                            # T1 l. 689
        mask_truncated=False,                        # T1 l. 836
        group_size=8,                                # T1 l. 480: num_generations=8
        steps_per_rollout=1,                         # T1 l. 1099: one step per generation
        sources=("T1", "T2", "T3"),
        notes=("TRL 1.16.0's GRPOConfig defaults and GRPOTrainer code.",
               "TRL's 'dapo' divides by the tokens of the whole generation batch over all "
               "processes (T2 l. 3170); on one batch that is grpo_lab's 'dapo'.",
               "Run, not only read: gl.hf.trl_knobs(GRPOConfig()) gives these knobs, and "
               "python -m grpo_lab.hf.trl_matrix proves TRL's loss, gradient and advantages "
               "equal to the book's, option by option (chapter 8).")),
    "verl": Preset(
        name="verl", system="verl", selects_grpo="algorithm.adv_estimator=grpo (default gae)",
        # V2 l. 321, 326: torch.std (Bessel), (r - mean) / (std + epsilon), epsilon=1e-6;
        # V1 l. 862: algorithm.norm_adv_by_std_in_grpo: true.
        advantages=dict(eps=1e-6, ddof=1, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2,                   # V1 l. 85-87: clip_ratio(_low, _high) 0.2
        dual_clip=3.0,                               # V1 l. 100: clip_ratio_c 3.0, always on
        # V1 l. 106, 869: use_kl_loss and use_kl_in_reward false: no KL at all. Switched on,
        # the loss uses low_var_kl (k3, clamped to 10, V2 l. 2245) with kl_loss_coef 0.001.
        kl_in="off", beta=0.0, kl="k3", kl_clamp=10.0, kl_bias_correction=False,
        agg="dapo",                                  # V1 l. 101: token-mean over the global
                                                     # token count of the mini-batch (V3 l. 66)
        level="token",                               # V1 l. 93: policy_loss.loss_mode vanilla
        num_iterations=1,                            # V1 l. 111: ppo_epochs 1
        mask_truncated=None,                         # no such switch
        group_size=1,                                # V1 l. 329: rollout.n 1 (set it!)
        steps_per_rollout=4,                         # V1 l. 506, 80: 1024 / 256 mini-batches
        sources=("V1", "V2", "V3"),
        notes=("verl 0.9.1's generated trainer config and its core_algos; the actor's loss "
               "is composed in workers/utils/losses.py (ppo_loss).",)),
    "openrlhf": Preset(
        name="openrlhf", system="OpenRLHF",
        selects_grpo="--algo.advantage.estimator group_norm (default gae)",
        # O3 l. 274: (rewards - mean) / (rewards.std() + 1e-9), torch's Bessel std.
        advantages=dict(eps=1e-9, ddof=1, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2, dual_clip=None,   # O1 l. 406-408
        # O1 l. 524: --algo.kl.use_loss off, so O3 puts -init_coef * KL into every token's
        # reward; O1 l. 449, 438: estimator k1, init_coef 0.01; O4 l. 113: clamped to 10.
        kl_in="reward", beta=0.01, kl="k1", kl_clamp=10.0, kl_bias_correction=False,
        agg="dapo",                                  # O1 l. 440, O5 l. 80: token-mean over
                                                     # the optimiser step's tokens
        level="token",                               # O1 l. 439: --actor.policy_loss_type ppo
        num_iterations=1,                            # O1 l. 397: --train.max_epochs 1
        mask_truncated=None,                         # no such flag
        group_size=1,                                # O1 l. 433: n_samples_per_prompt 1
        steps_per_rollout=8,                         # O1 l. 392, 413: 1024 n / 128, for n = 1
        sources=("O1", "O2", "O3", "O4", "O5"),
        notes=("OpenRLHF 0.11.2's flags, PolicyLoss and compute_advantages_and_returns.",
               "O3 clamps the normalised reward to --reward.clip_range (-10, 10) before "
               "adding the KL; that clamp is not modelled here.")),
}

#: The KL estimators a preset names, by name.
KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
_SHAPE_DOC = " of per-token log-probs, shape (B*G, T)"
_SAME = " (the shape of logp; nothing is broadcast)"


def check_default_loss_arguments(name, rewards, logp, old_logp, mask, ref_logp):
    """Validate :func:`default_loss`'s arguments: ``(preset, rewards, logp, old_logp, mask,
    ref_logp)``, the arrays as given (not cast), the mask as bools, ``ref_logp`` maybe None.

    ``rewards`` (B, G) holds one reward per row of ``logp`` (N, T), N = B*G; ``old_logp``,
    ``mask`` and ``ref_logp`` have exactly the shape of ``logp``. ``ref_logp`` is required
    when the preset's KL is on (``kl_in`` not ``"off"`` and ``beta > 0``).
    """
    p = PRESETS[check_choice("name", name, tuple(PRESETS))]
    lp, _ = as_float_array("logp", logp, ndim=2, shape_doc=_SHAPE_DOC)
    old, _ = as_float_array("old_logp", old_logp, shape_doc=_SHAPE_DOC)
    check_shape("old_logp", old, lp.shape, _SAME)
    r, _ = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)")
    if r.size != lp.shape[0]:
        raise ValueError(f"rewards: expected B*G = {lp.shape[0]} rewards, one per row of logp, "
                         f"got shape {r.shape}")
    if p.kl_in != "off" and p.beta > 0 and ref_logp is None:
        raise ValueError(f"ref_logp: expected an (N, T) array of reference log-probs for "
                         f"{p.system}, whose default puts beta = {p.beta} of KL in the "
                         f"{p.kl_in}, got None")
    ref = ref_logp
    if ref_logp is not None:
        ref, _ = as_float_array("ref_logp", ref_logp, shape_doc=_SHAPE_DOC)
        check_shape("ref_logp", ref, lp.shape, _SAME)
    m = as_mask("mask", mask, lp.shape, _SAME)
    return p, r, lp, old, m, ref


def default_loss(name, rewards, logp, old_logp, mask, *, ref_logp=None):
    r"""One batch's policy loss under a system's defaults: ``group_advantages``, then
    ``grpo_loss`` with the preset's knobs.

    The steps, each one grpo_lab function with the preset's options:

    1. advantages: :func:`grpo_lab.group_advantages` (eps, ddof, scale, baseline), one per
       completion;
    2. KL in the reward (OpenRLHF): every token's reward gets :math:`-\beta\, k(t)`, so the
       advantage of token t becomes :math:`A_i - \beta \sum_{t' \ge t} k(t')` (the reward-to-go
       with gamma 1 that OpenRLHF uses for ``group_norm``); the KL is read at sampling time,
       from ``old_logp``;
    3. :func:`grpo_lab.grpo_loss`: the clipped surrogate with the preset's clip range and
       dual-clip (verl), the KL in the loss when the preset puts it there (TRL, when
       beta > 0, weighted by the ratio), the aggregation.

    ========  ========  =======================================================
    Symbol    Shape     Meaning
    ========  ========  =======================================================
    name      str       a key of :data:`PRESETS`
    rewards   (B, G)    one reward per completion
    logp      (N, T)    current log-probs, N = B*G rows in ``rewards.ravel()`` order
    old_logp  (N, T)    log-probs at sampling time
    mask      (N, T)    1 for completion tokens
    ref_logp  (N, T)    reference log-probs; needed only when the preset's KL is on
    return    float     the loss, as a Python float
    ========  ========  =======================================================

    Example: the first update of a batch (``logp == old_logp``) with KL off: every ratio is
    1, so the loss is the aggregated -A, and TRL's ``dapo`` weighs the longer completion more.

    >>> import numpy as np, grpo_lab as gl
    >>> logp = np.full((2, 3), -1.0)
    >>> mask = [[1, 0, 0], [1, 1, 1]]
    >>> round(gl.presets.default_loss("trl", [[1.0, 0.0]], logp, logp, mask), 4)  # (-A + 3A)/4
    0.3535
    """
    p, r, lp, old, m, ref = check_default_loss_arguments(name, rewards, logp, old_logp, mask,
                                                         ref_logp)
    adv = group_advantages(r, **p.advantages).astype(np.float64).ravel()   # (N,) per completion
    if p.kl_in == "reward" and p.beta > 0:             # OpenRLHF: -beta k(t) in each reward
        k = KL_ESTIMATORS[p.kl](old, ref, clamp=p.kl_clamp)                  # (N, T) sampled
        shaped = np.where(m, -p.beta * k, 0.0)                              # (N, T)
        to_go = np.flip(np.cumsum(np.flip(shaped, axis=-1), axis=-1), axis=-1)  # sum over t' >= t
        adv = adv[:, None] + to_go                                  # (N, 1) + (N, T) -> (N, T)
    kl_in_loss = p.kl_in == "loss" and p.beta > 0      # TRL: +beta k(t) per token, from logp
    loss, diagnostics = grpo_loss(
        lp, old, ref if kl_in_loss else None, adv, m, eps_low=p.eps_low, eps_high=p.eps_high,
        beta=p.beta if kl_in_loss else 0.0, kl=p.kl, agg=p.agg, level=p.level,
        dual_clip=p.dual_clip, kl_clamp=p.kl_clamp, kl_bias_correction=p.kl_bias_correction)
    return float(loss)
