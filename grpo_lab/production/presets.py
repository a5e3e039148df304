r"""What TRL, verl and OpenRLHF do by default, written as grpo_lab options, with sources.

Taught in chapter 8 (``chapters/08_production_knobs.ipynb``).

Every production trainer implements the same GRPO formulas with its own defaults: the std
convention and the eps beside it, where the KL goes, how per-token losses are averaged. This
module holds those defaults as data, so the chapter and the tests use the same numbers:

* :data:`SOURCES`: the files read, each with its repository and the commit read;
* :data:`PRESETS`: one :class:`Preset` per system, the grpo_lab keyword arguments that
  reproduce its defaults for a GRPO run, each field citing a source key;
* :data:`KNOB_MAP`: the map, one :class:`Row` per concept, from a grpo_lab option to the
  setting of each system, every cell citing the sources it was read in;
* :func:`default_loss`: one batch's policy loss under a preset, built from grpo_lab pieces;
* :func:`knob_map_markdown`: the map and its sources as a Markdown table for the chapter.

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

from grpo_lab.numerics.validate import as_float_array, as_mask, check_choice, check_shape
from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.core.losses import clipped_surrogate_loss

__all__ = ["KNOB_MAP", "PRESETS", "SOURCES", "Preset", "Row", "Source", "default_loss",
           "knob_map_markdown"]


@dataclass(frozen=True)
class Source:
    """One file that was read: where it lives and at which commit."""

    system: str      # "TRL", "verl", "OpenRLHF" or "grpo_lab"
    repo: str        # owner/name on GitHub
    path: str        # the file inside the repository
    commit: str      # the 40-hex commit of the copy read ("" for this package)
    what: str        # what was read in it

    @property
    def short(self) -> str:
        """``path @ 1234567``: how a row cites it."""
        return f"{self.path} @ {self.commit[:7]}" if self.commit else self.path


#: Every file the map and the presets rest on. Keys are the tags the map's cells cite.
SOURCES: dict[str, Source] = {
    "grpo_lab": Source("grpo_lab", "grpo-lab/grpo-lab", "grpo_lab/", "",
                       "this package's own defaults (chapters 1-3)"),
    "T1": Source("TRL", "huggingface/trl", "trl/trainer/grpo_config.py",
                 "006d32c9bf5da698815726ebd0de78b404e8163d",
                 "GRPOConfig fields, defaults and their docstrings (a 2026 main-branch copy)"),
    "T2": Source("TRL", "huggingface/trl", "trl/trainer/grpo_trainer.py",
                 "d2b69d769dab6f77acbfd33252bcd7d22765571b",
                 "GRPOTrainer: advantages in _generate_and_score_completions, the loss in "
                 "_compute_loss (a 2025 copy; loss types grpo, bnpo, dr_grpo only)"),
    "V1": Source("verl", "volcengine/verl", "verl/trainer/config/_generated_ppo_trainer.yaml",
                 "035682ed7d98f4e5e7633141b4e7add1ef7d2430",
                 "the flattened default config: actor_rollout_ref.actor.*, algorithm.*"),
    "V2": Source("verl", "volcengine/verl", "verl/trainer/ppo/core_algos.py",
                 "012be9d9dcb7c38499f23616142870d2682757fc",
                 "compute_grpo_outcome_advantage, compute_rloo_outcome_advantage, agg_loss, "
                 "compute_policy_loss_vanilla, compute_policy_loss_gspo, kl_penalty"),
    "O1": Source("OpenRLHF", "OpenRLHF/OpenRLHF", "openrlhf/cli/train_ppo_ray.py",
                 "f5b3f08a05fd6cbd9a5b712ed931bbb72c24f2c4",
                 "the command-line flags and their defaults"),
    "O2": Source("OpenRLHF", "OpenRLHF/OpenRLHF", "openrlhf/models/loss.py",
                 "f5b3f08a05fd6cbd9a5b712ed931bbb72c24f2c4",
                 "PolicyLoss: clip, dual-clip, GSPO ratio, token_level_loss"),
    "O3": Source("OpenRLHF", "OpenRLHF/OpenRLHF", "openrlhf/trainer/ppo_utils/experience_maker.py",
                 "89308a0b768dec168dff240ae746710fc967a49b",
                 "compute_advantages_and_returns: group_norm, rloo, dr_grpo, KL in the "
                 "reward, reward-to-go, batch whitening"),
    "O4": Source("OpenRLHF", "OpenRLHF/OpenRLHF", "openrlhf/models/utils.py",
                 "473f61bd290a1718381e65338316a87b4f722b5a",
                 "compute_approx_kl (k1, k2, k3 and their clamp), compute_reward"),
}


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
        dual_clip=3.0,                               # V1: clip_ratio_c=3.0, always on in V2's vanilla loss
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

_KL = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
_SHAPE_DOC = " of per-token log-probs, shape (B*G, T)"


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
    p = PRESETS[check_choice("name", name, tuple(PRESETS))]
    lp, _ = as_float_array("logp", logp, ndim=2, shape_doc=_SHAPE_DOC)
    r, _ = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)")
    if r.size != lp.shape[0]:
        raise ValueError(f"rewards: expected B*G = {lp.shape[0]} rewards, one per row of logp, "
                         f"got shape {r.shape}")
    kl_on = p.kl_in != "off" and p.beta > 0
    if kl_on and ref_logp is None:
        raise ValueError(f"ref_logp: expected an (N, T) array of reference log-probs for "
                         f"{p.system}, whose default puts beta = {p.beta} of KL in the "
                         f"{p.kl_in}, got None")
    if ref_logp is not None:
        ref, _ = as_float_array("ref_logp", ref_logp, shape_doc=_SHAPE_DOC)
        check_shape("ref_logp", ref, lp.shape, " (the shape of logp; nothing is broadcast)")
    m = as_mask("mask", mask, lp.shape, " (the shape of logp; nothing is broadcast)")

    adv = group_advantages(r, **p.advantages).astype(np.float64).ravel()          # (N,)
    if kl_on and p.kl_in == "reward":
        k = _KL[p.kl](old_logp, ref_logp, clamp=p.kl_clamp)       # (N, T) at sampling time
        shaped = np.where(m, -p.beta * k, 0.0)                    # (N, T) per-token KL reward
        to_go = np.flip(np.cumsum(np.flip(shaped, axis=-1), axis=-1), axis=-1)  # sum over t' >= t
        adv = adv[:, None] + to_go                                # (N, 1) + (N, T) -> (N, T)
    per_token = clipped_surrogate_loss(lp, old_logp, adv, eps_low=p.eps_low,
                                       eps_high=p.eps_high, dual_clip=p.dual_clip)
    if kl_on and p.kl_in == "loss":
        per_token = per_token + p.beta * _KL[p.kl](lp, ref_logp, clamp=p.kl_clamp)
    return float(aggregate_loss(per_token, mask, p.agg))


@dataclass(frozen=True)
class Row:
    """One concept of the map: the grpo_lab option and each system's setting, with sources.

    Each cell is ``(text, source keys)``; the keys are those of :data:`SOURCES`.
    """

    concept: str
    grpo_lab: tuple[str, tuple[str, ...]]
    trl: tuple[str, tuple[str, ...]]
    verl: tuple[str, tuple[str, ...]]
    openrlhf: tuple[str, tuple[str, ...]]

    def cells(self):
        return (self.grpo_lab, self.trl, self.verl, self.openrlhf)


_G = ("grpo_lab",)

#: The map, one row per concept of issue 10, in the order a GRPO step uses them.
KNOB_MAP: tuple[Row, ...] = (
    Row("Advantage estimator; std convention and its eps",
        ("`group_advantages(eps=1e-8, ddof=0)`: (r - mean) / (std + eps), population std", _G),
        ("GRPOTrainer only; group std by `torch.std` (Bessel, ddof=1), "
         "`/ (std + 1e-4)`: eps 1e-4, hard-coded", ("T2",)),
        ("`algorithm.adv_estimator` (default `gae`) `=grpo`: `torch.std` (Bessel), "
         "`/ (std + epsilon)`, epsilon 1e-6; a group of one gets mean 0, std 1",
         ("V1", "V2")),
        ("`--advantage_estimator` (default `gae`) `group_norm`: `/ (std + 1e-9)`, "
         "`torch.std` (Bessel)", ("O1", "O3"))),
    Row("Std scaling on or off",
        ("`scale=\"group\"` (on) or `scale=\"none\"` (Dr. GRPO)", _G),
        ("`scale_rewards=\"group\"` (default; also `True`); `\"none\"` / `False` turns it off",
         ("T1",)),
        ("`algorithm.norm_adv_by_std_in_grpo: true`; `false` is Dr. GRPO", ("V1", "V2")),
        ("`group_norm` (on) or `--advantage_estimator dr_grpo` (mean only); "
         "`--no_advantage_std_norm` acts only in the batch whitening of gae / reinforce / "
         "reinforce_baseline", ("O1", "O3"))),
    Row("Group vs batch std",
        ("`scale=\"group\"` or `scale=\"batch\"` (centre per group, one std for all B*G)", _G),
        ("`scale_rewards=\"batch\"`: the std of the whole batch (PPO Lite); an experimental "
         "`\"mean\"` (MaxRL) also exists and has no grpo_lab option", ("T1",)),
        ("no batch-std option for `grpo` in the code read; `reinforce_plus_plus_baseline` "
         "subtracts the group mean, then whitens over the batch's tokens", ("V2",)),
        ("no batch option for `group_norm`; `reinforce_baseline` subtracts the group mean, "
         "then whitens advantages over all tokens of the batch", ("O3",))),
    Row("Leave-one-out baseline (RLOO)",
        ("`baseline=\"leave_one_out\"` (with `scale=\"none\"` for RLOO)", _G),
        ("not a GRPOConfig option (TRL's separate RLOO trainer was not read)", ("T1",)),
        ("`adv_estimator=rloo`: r * G/(G-1) - mean * G/(G-1), no std", ("V2",)),
        ("`--advantage_estimator rloo`: r - (sum - r)/(G-1), no std", ("O1", "O3"))),
    Row("Clip epsilons and clip-higher",
        ("`eps_low=0.2`, `eps_high=None` (= eps_low); DAPO: 0.28", _G),
        ("`epsilon=0.2`, `epsilon_high=None` (= epsilon); `delta=None` would cap the ratio "
         "from above (INTELLECT-2), which is not dual-clip", ("T1", "T2")),
        ("`actor.clip_ratio=0.2`, `clip_ratio_low=0.2`, `clip_ratio_high=0.2`", ("V1", "V2")),
        ("`--eps_clip 0.2`; `--eps_clip_low_high LOW HIGH` (default: both eps_clip)", ("O1",))),
    Row("Dual-clip",
        ("`clipped_surrogate_loss(dual_clip=c)`, off by default (`grpo_loss` has none)", _G),
        ("none in the trainer read", ("T2",)),
        ("`actor.clip_ratio_c=3.0`, applied to every A < 0 token by the `vanilla` loss: "
         "**on by default**", ("V1", "V2")),
        ("`--dual_clip` (default None: off)", ("O1", "O2"))),
    Row("KL estimator",
        ("`kl=\"k1\"`, `\"k2\"` or `\"k3\"` (default k3)", _G),
        ("k3 only, written out in `_compute_loss`", ("T2",)),
        ("loss: `actor.kl_loss_type=low_var_kl` (k3); reward: `algorithm.kl_penalty=kl` (k1); "
         "k1, k2, k3, abs available", ("V1", "V2")),
        ("`--kl_estimator k1` (k1, k2 or k3); the CLI recommends k2 or k3 with "
         "`--use_kl_loss`", ("O1",))),
    Row("KL coefficient",
        ("`beta=0.04` (DeepSeekMath)", _G),
        ("`beta=0.0`: no KL and no reference model", ("T1",)),
        ("`actor.kl_loss_coef=0.001`; `algorithm.kl_ctrl.kl_coef=0.001`, type fixed; both "
         "unused unless switched on (next row)", ("V1",)),
        ("`--init_kl_coef 0.01`; `--kl_target` (default None) selects the controller, whose "
         "code was not read", ("O1",))),
    Row("KL in the reward or in the loss",
        ("in the loss (`grpo_loss`); chapter 3 compares the two", _G),
        ("in the loss: `per_token_loss + beta * per_token_kl`", ("T2",)),
        ("`actor.use_kl_loss=false`, `algorithm.use_kl_in_reward=false`: **neither** by "
         "default", ("V1",)),
        ("`--use_kl_loss` off by default, so **in the reward**: -coef * KL on every token, "
         "then reward-to-go with gamma 1", ("O1", "O3", "O4"))),
    Row("KL clamp",
        ("`kl_k3(..., clamp=None)`; `clamp=c` clips to [-c, c]", _G),
        ("none", ("T2",)),
        ("`low_var_kl`: log-ratio clamped to [-20, 20], k3 to [-10, 10]; k1, k2 not clamped",
         ("V2",)),
        ("every estimator clamped to [-10, 10] at O4; an older copy of the file "
         "(02a2605) has no clamp", ("O4",))),
    Row("Loss aggregation",
        ("`agg=\"grpo\"` (default), `\"bnpo\"`, `\"dapo\"`, `\"dr_grpo\"`", _G),
        ("`loss_type=\"dapo\"` (default): tokens of the accumulated batch; also `grpo`, "
         "`bnpo`, `dr_grpo` (/ N * max_completion_length), `cispo`, `sapo`, `luspo`",
         ("T1", "T2")),
        ("`actor.loss_agg_mode=token-mean` (= bnpo); `seq-mean-token-mean` (= grpo); "
         "`seq-mean-token-sum-norm` (sum / T: N times dr_grpo)", ("V1", "V2")),
        ("`PolicyLoss(token_level_loss=True)` (= bnpo); False = grpo; no CLI flag for it in "
         "O1 (how the actor sets it: not verified)", ("O1", "O2"))),
    Row("Sequence-level ratio (GSPO)",
        ("`level=\"sequence\"`", _G),
        ("`importance_sampling_level=\"token\"` (default) or `\"sequence\"`", ("T1", "T2")),
        ("`actor.policy_loss.loss_mode=vanilla` (default) or `gspo` (always "
         "seq-mean-token-mean)", ("V1", "V2")),
        ("`--policy_loss_type ppo` (default) or `gspo` (per-sequence loss mean)",
         ("O1", "O2"))),
    Row("Inner iterations (mu)",
        ("one loss per call; the loop is chapter 2's", _G),
        ("`num_iterations=1`", ("T1",)),
        ("`actor.ppo_epochs=1`", ("V1",)),
        ("`--max_epochs 1`", ("O1",))),
    Row("Masking truncated completions",
        ("drop the truncated rows before `aggregate_loss` (an all-padding row is refused as "
         "a masking bug)", _G),
        ("`mask_truncated_completions=False`; True zeroes the mask of completions without "
         "an EOS", ("T1", "T2")),
        ("no switch in the config read (not verified elsewhere, e.g. recipes)", ("V1",)),
        ("no flag in O1; `--overlong_buffer_len` (default None) adds DAPO's length penalty "
         "to the reward instead", ("O1", "O3"))),
)


def knob_map_markdown() -> str:
    """The map as a Markdown table, each cell tagged with its sources, and the sources below."""
    head = ("| Concept | grpo_lab | TRL | verl | OpenRLHF |\n"
            "| --- | --- | --- | --- | --- |\n")
    rows = []
    for row in KNOB_MAP:
        cells = [f"{text} [{', '.join(keys)}]" for text, keys in row.cells()]
        rows.append("| " + " | ".join([row.concept, *cells]) + " |")
    legend = ["", "**Sources** (the version each cell describes):", ""]
    for key, s in SOURCES.items():
        where = f"`{s.path}` at commit `{s.commit[:10]}`" if s.commit else f"`{s.path}`"
        legend.append(f"- **{key}** ({s.system}, {s.repo}): {where}: {s.what}")
    return head + "\n".join(rows) + "\n" + "\n".join(legend) + "\n"
