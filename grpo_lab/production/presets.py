r"""What TRL, verl and OpenRLHF do by default, written as grpo_lab options, with sources.

Taught in chapter 8 (``chapters/08_production_knobs.ipynb``).

Every production trainer implements the same GRPO formulas with its own defaults: the std
convention and the eps beside it, where the KL goes, how per-token losses are averaged. This
module holds those defaults, so the chapter and the tests use the same numbers:

* :data:`PRESETS`: one :class:`Preset` per system, the grpo_lab keyword arguments that
  reproduce its defaults for a GRPO run, each field citing a source key;
* :func:`default_loss`: one batch's policy loss under a preset, built from grpo_lab pieces;
* the knob map, re-exported from :mod:`grpo_lab.production.knobs`, whose facts live in the
  data file ``knobs.toml``: :data:`SOURCES` (the files read, each with its repository and the
  commit read), :data:`KNOB_MAP` / :func:`knob_table` (one :class:`Row` per concept, from a
  grpo_lab option to the setting of each system, every cell citing the sources it was read
  in) and :func:`knob_map_markdown` (the map and its sources as a Markdown table).

What was read, and how far it goes: each system was read at the commits listed in
:data:`SOURCES`, from a stored copy of its public repository. The config file and the code
that uses it were not always available at the same commit, so a row can describe two commits;
the row says which. A cell that says *not verified* was not read in any of these files: it is
a pointer for the reader to check, not a fact. Defaults move between releases (older copies of
TRL's ``grpo_config.py`` give ``beta`` 0.04, T1 gives 0.0; the trainer at T2 knows no
``"dapo"``, which T1 makes the default ``loss_type``): check your version's files before you
trust a number here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.core.surrogate import clipped_surrogate_loss
from grpo_lab.numerics.validate import as_float_array, as_mask, check_choice, check_shape
from grpo_lab.production.knobs import (KNOB_MAP, SOURCES, Row, Source, knob_map_markdown,
                                       knob_sources, knob_table)

__all__ = ["KL_ESTIMATORS", "KNOB_MAP", "PRESETS", "SOURCES", "Preset", "Row", "Source",
           "check_default_loss_arguments", "default_loss", "knob_map_markdown", "knob_sources",
           "knob_table"]


@dataclass(frozen=True)
class Preset:
    """A system's defaults for a GRPO run, as grpo_lab options.

    ``advantages`` are keyword arguments of :func:`grpo_lab.group_advantages`; the clip, KL and
    aggregation fields map onto :func:`grpo_lab.clipped_surrogate_loss`, the ``kl_k*``
    estimators and :func:`grpo_lab.aggregate_loss`. ``kl_in`` is ``"loss"`` (a per-token
    term added to the loss), ``"reward"`` (subtracted from each token's reward, before the
    advantages) or ``"off"``; ``beta`` is the coefficient *in effect*, 0 when KL is off.
    ``mask_truncated`` is None where no such switch was found in the files read.
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
    agg: str
    level: str
    num_iterations: int
    mask_truncated: bool | None
    sources: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def version(self) -> str:
        """The files and commits this preset was read from, one per line."""
        return "\n".join(f"{SOURCES[k].repo}: {SOURCES[k].short}" for k in self.sources)


#: One preset per system. Each value cites, in the comment beside it, the source it was read in.
PRESETS: dict[str, Preset] = {
    "grpo_lab": Preset(
        name="grpo_lab", system="grpo_lab", selects_grpo="gl.grpo_loss",
        # DeepSeekMath's formula as written: population std, a tiny eps (chapter 1).
        advantages=dict(eps=1e-8, ddof=0, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2, dual_clip=None,
        kl_in="loss", beta=0.04, kl="k3", kl_clamp=None,        # grpo_loss's defaults (ch. 2-3)
        agg="grpo", level="token", num_iterations=1, mask_truncated=None,
        sources=("grpo_lab",),
        notes=("DeepSeekMath's eq. 3 with the package's default arguments.",)),
    "trl": Preset(
        name="trl", system="TRL", selects_grpo="GRPOTrainer + GRPOConfig",
        # T2: rewards.view(-1, G).std(dim=1) is torch's Bessel std; advantages / (std + 1e-4).
        advantages=dict(eps=1e-4, ddof=1, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2, dual_clip=None,   # T1: epsilon=0.2, epsilon_high=None
        # T1: beta=0.0 ("the reference model is not loaded"); T2: k3 added to the loss, no clamp
        kl_in="loss", beta=0.0, kl="k3", kl_clamp=None,
        agg="dapo",                                  # T1: loss_type="dapo"
        level="token",                               # T1: importance_sampling_level="token"
        num_iterations=1,                            # T1: num_iterations=1
        mask_truncated=False,                        # T1: mask_truncated_completions=False
        sources=("T1", "T2"),
        notes=("Defaults from GRPOConfig at T1; the advantage and loss code from GRPOTrainer "
               "at T2, an older copy: its eps, std and k3 were not re-read at T1's commit.",
               "TRL's 'dapo' divides by the tokens of the whole accumulated batch across "
               "processes (T1); on one batch that is grpo_lab's 'dapo'.")),
    "verl": Preset(
        name="verl", system="verl", selects_grpo="algorithm.adv_estimator=grpo (default gae)",
        # V2: torch.std (Bessel), (r - mean) / (std + epsilon), epsilon=1e-6;
        # V1: algorithm.norm_adv_by_std_in_grpo=true.
        advantages=dict(eps=1e-6, ddof=1, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2,                   # V1: clip_ratio_low=0.2, clip_ratio_high=0.2
        # V1: clip_ratio_c=3.0, always on in V2's vanilla loss.
        dual_clip=3.0,
        # V1: actor.use_kl_loss=false and algorithm.use_kl_in_reward=false: no KL at all.
        # Switched on, the loss uses low_var_kl (k3, clamped to 10) with kl_loss_coef=0.001.
        kl_in="off", beta=0.0, kl="k3", kl_clamp=10.0,
        agg="bnpo",                                  # V1: loss_agg_mode=token-mean
        level="token",                               # V1: policy_loss.loss_mode=vanilla
        num_iterations=1,                            # V1: ppo_epochs=1
        mask_truncated=None,                         # no such switch in V1
        sources=("V1", "V2"),
        notes=("verl's token-mean is a masked mean over one micro-batch (V2); how the "
               "trainer combines micro-batches was not read.",)),
    "openrlhf": Preset(
        name="openrlhf", system="OpenRLHF",
        selects_grpo="--advantage_estimator group_norm (default gae)",
        # O3: (rewards - mean) / (rewards.std() + 1e-9), torch's Bessel std.
        advantages=dict(eps=1e-9, ddof=1, scale="group", baseline="mean"),
        eps_low=0.2, eps_high=0.2, dual_clip=None,   # O1: --eps_clip 0.2, --dual_clip None
        # O1: --use_kl_loss off, so O3 puts -init_kl_coef * KL into every token's reward;
        # O1: --kl_estimator k1, --init_kl_coef 0.01; O4: every estimator clamped to [-10, 10].
        kl_in="reward", beta=0.01, kl="k1", kl_clamp=10.0,
        agg="bnpo",                                  # O2: PolicyLoss(token_level_loss=True)
        level="token",                               # O1: --policy_loss_type ppo
        num_iterations=1,                            # O1: --max_epochs 1
        mask_truncated=None,                         # no such flag in O1
        sources=("O1", "O2", "O3", "O4"),
        notes=("token_level_loss=True is PolicyLoss's own default (O2); how the actor "
               "constructs PolicyLoss was not read.",
               "O3 clamps the shaped reward to --reward_clip_range (-10, 10) before adding "
               "the KL; that clamp is not modelled here.")),
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
    r"""One batch's policy loss under a system's defaults, built from grpo_lab pieces.

    The steps, each one grpo_lab function with the preset's options:

    1. advantages: :func:`grpo_lab.group_advantages` (eps, ddof, scale, baseline), one per
       completion, then copied to its tokens;
    2. KL in the reward (OpenRLHF): every token's reward gets :math:`-\beta\, k(t)`, so the
       advantage of token t becomes :math:`A_i - \beta \sum_{t' \ge t} k(t')` (the reward-to-go
       with gamma 1 that OpenRLHF uses for ``group_norm``); the KL is read at sampling time,
       from ``old_logp``;
    3. the clipped surrogate: :func:`grpo_lab.clipped_surrogate_loss` (eps_low, eps_high,
       dual_clip);
    4. KL in the loss (TRL, when beta > 0): :math:`+\beta\, k(t)` per token, from ``logp``;
    5. the aggregation: :func:`grpo_lab.aggregate_loss` with the preset's mode.

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
    kl = KL_ESTIMATORS[p.kl]
    adv = group_advantages(r, **p.advantages).astype(np.float64).ravel()   # (N,) per completion
    if p.kl_in == "reward" and p.beta > 0:             # OpenRLHF: -beta k(t) in each reward
        shaped = np.where(m, -p.beta * kl(old, ref, clamp=p.kl_clamp), 0.0)     # (N, T) sampled
        to_go = np.flip(np.cumsum(np.flip(shaped, axis=-1), axis=-1), axis=-1)  # sum over t' >= t
        adv = adv[:, None] + to_go                                  # (N, 1) + (N, T) -> (N, T)
    per_token = clipped_surrogate_loss(lp, old, adv, eps_low=p.eps_low,
                                       eps_high=p.eps_high, dual_clip=p.dual_clip)  # (N, T)
    if p.kl_in == "loss" and p.beta > 0:               # TRL: +beta k(t) per token, from logp
        per_token = per_token + p.beta * kl(lp, ref, clamp=p.kl_clamp)          # (N, T)
    return float(aggregate_loss(per_token, m, p.agg))
