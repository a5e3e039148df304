"""Chapter 8's figures (``chapters/08_production_knobs.ipynb``: production knobs, process
supervision). Each is a plain function of its inputs, drawn and tested without a browser.

* ``advantages_by_system_figure``: the advantages each system's defaults give to the same
  groups of rewards, side by side;
* ``losses_by_system_figure``: one ragged batch's loss under each system's defaults and under
  each aggregation;
* ``process_vs_outcome_figure``: the per-token advantages of outcome and of process
  supervision for one group, as two heat maps;
* the all-equal float32 finding (issue 17): ``trl_advantages``, ``verl_advantages`` and
  ``openrlhf_advantages`` redo each trainer's group advantage with the same torch operations
  in the same order as its code (TRL 1.16.0, verl 0.9.1, OpenRLHF 0.11.2; each docstring cites
  the lines), ``all_equal_table`` runs them on groups whose rewards are all equal, and
  ``all_equal_figure`` draws it. ``tests/reference/test_ch08_finding.py`` proves each of the
  three bit for bit equal to the real code;
* "TRL, option by option": ``trl_matrix_record`` reads the record that
  ``python -m grpo_lab.hf.trl_matrix --write`` wrote (TRL 1.16.0's real trainer against the
  book's functions, option by option), ``trl_matrix_markdown`` renders it as the chapter's
  table, and ``TRL_MAP_OPTIONS`` names the runs that back each TRL cell of the knob map
  (``trl_map_backing``);
* REINFORCE++ as the trainers run it: ``reinforce_pp_token_advantages`` puts a per-token KL
  penalty in the reward, takes the reward-to-go and whitens it over the batch's tokens, so its
  advantage varies along a completion once beta > 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.process import process_advantages, steps_to_tokens
from grpo_lab.production.presets import PRESETS
from grpo_lab.book.frames import describe_figures
from grpo_lab.numerics.validate import as_float_array, as_mask, check_int, check_real, check_shape

# In IPython, every figure shown carries its alt text (its title, panels and axes) as
# output metadata, which the site puts on the page (gl.book.frames.describe_figures).
describe_figures()

__all__ = ["SYSTEM_ADVANTAGES", "advantages_by_system_figure", "all_equal_figure",
           "all_equal_table", "losses_by_system_figure", "openrlhf_advantages",
           "process_vs_outcome_figure", "reinforce_pp_token_advantages", "TRL_MAP_OPTIONS", "TRL_RECORD", "trl_advantages",
           "trl_config", "trl_map_backing", "trl_matrix_markdown", "trl_matrix_record", "trl_nanstd",
           "verl_advantages"]

_COLOURS = {"grpo_lab": "#555555", "trl": "#e1812c", "verl": "#3b75af", "openrlhf": "#3a923a"}


def advantages_by_system_figure(groups, *, titles=None, fig=None):
    """Bars: each system's default advantage of every completion, one panel per group.

    ``groups`` is a list of 1-D reward arrays (one group each); ``titles`` names the panels.
    Returns the Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    groups = [np.asarray(g, dtype=np.float64) for g in groups]
    titles = titles or [f"rewards {np.round(g, 5).tolist()}" for g in groups]
    if fig is None:
        fig = plt.figure(figsize=(4.6 * len(groups), 3.6))
    fig.clear()
    axes = np.atleast_1d(fig.subplots(1, len(groups)))
    names = list(PRESETS)
    width = 0.8 / len(names)
    for ax, rewards, title in zip(axes, groups, titles):
        x = np.arange(rewards.size)
        for j, name in enumerate(names):
            adv = group_advantages(rewards[None, :], **PRESETS[name].advantages)[0]
            ax.bar(x + (j - (len(names) - 1) / 2) * width, adv, width,
                   color=_COLOURS[name], label=PRESETS[name].system)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xticks(x, [f"o{i + 1}" for i in x])
        ax.set_xlabel("completion in the group")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("advantage (reward std units)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Same rewards, different advantages: Bessel's std scales them by "
                 "sqrt((G-1)/G); the eps decides tiny spreads", fontsize=10)
    fig.tight_layout()
    return fig


def losses_by_system_figure(system_losses, agg_losses, *, fig=None):
    """Bars: a batch's loss under each system's defaults (left) and each aggregation (right).

    ``system_losses`` maps preset names to losses (e.g. from ``presets.default_loss``);
    ``agg_losses`` maps aggregation labels to losses of the same per-token losses.
    """
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(10, 3.6))
    fig.clear()
    left, right = fig.subplots(1, 2)
    names = list(system_losses)
    left.bar([PRESETS[n].system for n in names], [system_losses[n] for n in names],
             color=[_COLOURS[n] for n in names])
    left.set_ylabel("loss of the batch")
    left.set_title("Each system's defaults, end to end", fontsize=10)
    labels = list(agg_losses)
    right.bar(labels, [agg_losses[k] for k in labels], color="#8a6bbe")
    right.set_title("Same per-token losses, each aggregation", fontsize=10)
    right.tick_params(axis="x", labelsize=8, rotation=20)
    for ax in (left, right):
        ax.axhline(0, color="k", lw=0.6)
    fig.suptitle("One ragged batch: the defaults differ in advantages, clipping and "
                 "aggregation; the aggregation alone moves the loss by a factor", fontsize=10)
    fig.tight_layout()
    return fig


def process_vs_outcome_figure(step_rewards, step_mask, step_lengths, outcome_rewards, *,
                              eps=1e-8, fig=None):
    """Two heat maps of one group's per-token advantages: outcome and process supervision.

    ``step_rewards``, ``step_mask``, ``step_lengths``: (G, K) for one group;
    ``outcome_rewards``: (G,), one reward per completion. Padding is drawn blank.
    """
    import matplotlib.pyplot as plt

    step_rewards = np.asarray(step_rewards, dtype=np.float64)[None]     # (1, G, K)
    step_mask = np.asarray(step_mask)[None]
    step_lengths = np.asarray(step_lengths)[None]
    proc, mask = steps_to_tokens(process_advantages(step_rewards, step_mask, eps),
                                 step_lengths)                          # (G, T)
    outcome = group_advantages(np.asarray(outcome_rewards, dtype=np.float64)[None], eps)[0]
    out_tok = np.where(mask, outcome[:, None], np.nan)                  # (G, T)
    proc = np.where(mask, proc, np.nan)
    top = np.nanmax(np.abs(np.concatenate([out_tok, proc])))

    if fig is None:
        fig = plt.figure(figsize=(10, 3.6))
    fig.clear()
    fig.set_layout_engine("constrained")      # room for the colour bar and the labels
    axes = fig.subplots(1, 2, sharey=True)
    for ax, values, title in ((axes[0], out_tok, "outcome supervision: one value per answer"),
                              (axes[1], proc, "process supervision: credit per step")):
        im = ax.imshow(values, cmap="RdBu", vmin=-top, vmax=top, aspect="auto",
                       interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("token position t")
        ends = np.cumsum(step_lengths[0], axis=-1)                      # step boundaries
        for i in range(values.shape[0]):
            for e in ends[i][step_mask[0][i].astype(bool)][:-1]:
                ax.plot([e - 0.5, e - 0.5], [i - 0.5, i + 0.5], color="k", lw=1)
    axes[0].set_yticks(range(proc.shape[0]), [f"o{i + 1}" for i in range(proc.shape[0])])
    axes[0].set_ylabel("completion")
    fig.colorbar(im, ax=axes, label="advantage of the token")
    fig.suptitle("Process rewards tell the tokens of one answer apart; outcome rewards cannot "
                 "(black ticks: step boundaries)", fontsize=10)
    return fig


# --- the all-equal float32 finding: each trainer's group advantage, op for op ---------------------

def trl_nanstd(x, dim):
    """TRL's ``nanstd`` (``trl/trainer/utils.py`` l. 1021-1050): Bessel's factor as
    ``count / (count - 1)``, an integer division that torch returns in float32."""
    import torch

    mean = torch.nanmean(x, dim=dim, keepdim=True)
    variance = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(x), dim=dim, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    variance *= correction
    return torch.sqrt(variance).squeeze(dim)


def trl_advantages(rewards, G):
    """TRL's advantages, one reward function of weight 1, ``scale_rewards="group"``
    (``grpo_trainer.py`` l. 2761-2788 and 2810). ``rewards`` (N,) tensor -> (N,)."""
    import torch

    rewards_per_func = rewards[:, None]                                   # (N, 1)
    weights = torch.ones(1, dtype=torch.float32)                           # reward_weights
    r = (rewards_per_func * weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)   # (N,)
    mean = torch.nanmean(r.view(-1, G), dim=1).repeat_interleave(G, dim=0)          # (N,)
    std = trl_nanstd(r.view(-1, G), dim=1).repeat_interleave(G, dim=0)              # (N,)
    adv = r - mean
    adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0)


def verl_advantages(rewards, G, epsilon=1e-6):
    """verl's ``compute_grpo_outcome_advantage`` (``core_algos.py`` l. 304-330): per group,
    ``torch.mean`` and ``torch.std`` of the stacked scores, then each score in turn. The
    scores are the rewards (verl sums a row of token rewards that holds one non-zero)."""
    import torch

    scores = rewards.clone()                                               # (N,)
    with torch.no_grad():
        for start in range(0, scores.shape[0], G):
            group = torch.stack([scores[i] for i in range(start, start + G)])    # (G,)
            mean, std = ((torch.tensor(0.0), torch.tensor(1.0)) if G == 1
                         else (torch.mean(group), torch.std(group)))
            for i in range(start, start + G):
                scores[i] = (scores[i] - mean) / (std + epsilon)
    return scores


def openrlhf_advantages(rewards, G, reward_clip_range=(-10.0, 10.0)):
    """OpenRLHF's ``group_norm`` (``experience_maker.py`` l. 244, 256, 274), then the clip of
    ``compute_reward`` (``models/utils.py`` l. 141-142); without a KL term every token's
    reward-to-go is this value. ``rewards`` (N,) tensor -> (N,)."""
    import torch

    rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    rewards = rewards.reshape(-1, G)                                       # (B, G)
    rewards = (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)
    r = rewards.reshape(-1)                                                # (N,)
    return r.clamp(min=reward_clip_range[0], max=reward_clip_range[1])


#: The three re-implementations by preset name.
SYSTEM_ADVANTAGES = {"trl": trl_advantages, "verl": verl_advantages,
                     "openrlhf": openrlhf_advantages}


def all_equal_table(values=(0.1, 0.7, 0.9), sizes=(2, 4, 8, 16), prompts=4, dtype="float32",
                    seed=0):
    """``{(value, G): {system: largest |A|}}`` for a group of G equal rewards ``value``, the
    first of a batch of ``prompts`` groups (the others seeded 0/1 rewards, as a verifier gives):
    each trainer's computation (above) and ``gl.group_advantages`` (key ``"grpo_lab"``).

    The batch matters: torch reduces a (B, G) batch with other kernels than a single group,
    and where the std of the tied row comes out exactly 0 while its mean is one rounding off,
    the deviation is divided by the eps alone."""
    import torch

    rng = np.random.default_rng(seed)
    table = {}
    for value in values:
        for G in sizes:
            batch = rng.choice([0.0, 1.0], size=(prompts, G))            # (B, G)
            batch[0] = value                                              # the tied group
            r = torch.from_numpy(batch).to(getattr(torch, dtype)).reshape(-1)   # (B*G,)
            row = {name: float(f(r.clone(), G)[:G].abs().max())
                   for name, f in SYSTEM_ADVANTAGES.items()}
            ours = group_advantages(r.numpy().reshape(prompts, G))[0]
            row["grpo_lab"] = float(np.abs(ours).max())
            table[(value, G)] = row
    return table


def all_equal_figure(table, *, fig=None):
    """One panel per reward value: the largest |A| of an all-equal group against G, a line per
    system (symlog: exact zeros sit on the axis). Returns the Figure."""
    import matplotlib.pyplot as plt

    values = sorted({v for v, _ in table})
    sizes = sorted({G for _, G in table})
    if fig is None:
        fig = plt.figure(figsize=(4.2 * len(values), 3.6))
    fig.clear()
    axes = np.atleast_1d(fig.subplots(1, len(values), sharey=True))
    for ax, value in zip(axes, values):
        for name in ("openrlhf", "verl", "trl", "grpo_lab"):
            ax.plot(sizes, [table[(value, G)][name] for G in sizes], marker="o",
                    color=_COLOURS[name], label=PRESETS[name].system)
        ax.set_yscale("symlog", linthresh=1e-5)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(G) for G in sizes])
        ax.set_xlabel("group size G")
        ax.set_title(f"a group of rewards all {value} (float32)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("largest |advantage| (should be 0)")
    axes[0].legend(fontsize=8)
    fig.suptitle("An all-equal group should get no signal: three trainers give it one")
    fig.tight_layout()
    return fig


# --- TRL, option by option: the matrix's record as the chapter's table ----------------------------

#: The record ``python -m grpo_lab.hf.trl_matrix --write`` writes (read without importing torch).
TRL_RECORD = Path(__file__).resolve().parents[1] / "hf" / "trl_matrix.json"

#: The knob map's rows (``knobs.toml`` concepts) whose TRL cell a run of the matrix backs, with
#: the options that back it; the map's other TRL cells are read from TRL's code, not run.
TRL_MAP_OPTIONS = {
    "Advantage estimator; std convention and its eps": ("scale_rewards=group",),
    "Std scaling on or off": ("scale_rewards=group", "scale_rewards=none"),
    "Group vs batch std": ("scale_rewards=batch",),
    "Several rewards: sum then normalise, or normalise then sum": ("normalize_then_sum",),
    "Clip epsilons and clip-higher": ("epsilon, epsilon_high",),
    "Dual-clip": ("delta (two-sided clip)",),
    "KL estimator": ("beta>0, plain k3",),
    "KL weighted by the ratio (bias correction)": ("beta>0, bias-corrected KL",
                                                   "beta>0, plain k3"),
    "KL in the reward or in the loss": ("beta>0, plain k3",),
    "Loss aggregation": ("loss_type=grpo", "loss_type=bnpo", "loss_type=dr_grpo",
                         "loss_type=dapo", "loss_type=cispo", "loss_type=sapo",
                         "loss_type=luspo", "loss_type=vespo"),
    "Which tokens a token mean counts": ("loss_type=dapo", "loss_type=bnpo",
                                         "gradient_accumulation_steps=2",
                                         "steps_per_generation=4"),
    "Sequence-level ratio (GSPO)": ("level=token", "level=sequence (GSPO)"),
    "Optimiser steps per rollout (mini-batches, epochs)": ("steps_per_generation=4",),
    "Training/inference mismatch: importance-sampling correction": (
        "vllm IS token_truncate", "vllm IS token_mask", "vllm IS sequence_truncate",
        "vllm IS sequence_mask"),
    "Masking truncated completions": ("mask_truncated_completions",),
}


def trl_matrix_record(path=TRL_RECORD) -> dict:
    """The matrix's record: ``trl_version``, ``tolerance`` and one row per option (``option``,
    ``trl`` the formula, ``where`` its lines in ``grpo_trainer.py``, ``book`` the book's call,
    ``loss``, ``grad``, ``grad_max``, ``adv`` the largest differences measured)."""
    record = json.loads(Path(path).read_text())
    if not record.get("rows"):
        raise ValueError(f"path: expected the matrix's record with rows, got {path}")
    return record


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def trl_matrix_markdown(record) -> str:
    """The record as one Markdown table: option, TRL's formula, its lines, the book's call, and
    the largest differences (loss; gradient, relative to its largest entry where that
    exceeds 1; advantages)."""
    lines = ["| Option | TRL computes | `grpo_trainer.py` line | The book's call | "
             "Largest difference: loss / gradient / advantages |",
             "| --- | --- | --- | --- | --- |"]
    for r in record["rows"]:
        grad = r["grad"] / max(1.0, r["grad_max"])
        lines.append(f"| `{_cell(r['option'])}` | {_cell(r['trl'])} | "
                     f"{_cell(r['where'].replace('grpo_trainer.py:', ''))} | "
                     f"`{_cell(r['book'])}` | {r['loss']:.0e} / {grad:.0e} / {r['adv']:.0e} |")
    return "\n".join(lines)


def trl_map_backing(record, concepts) -> list:
    """For each knob-map concept of ``concepts`` (in order): ``(concept, options, verdict)``,
    ``options`` the matrix's rows that back its TRL cell (empty: read from the code, not run)
    and ``verdict`` ``"run, equal"`` when each of them is within the record's tolerances."""
    rows = {r["option"]: r for r in record["rows"]}
    tol = record["tolerance"]
    out = []
    for concept in concepts:
        options = TRL_MAP_OPTIONS.get(concept, ())
        equal = all(rows[o]["loss"] < tol["loss"] and rows[o]["adv"] < tol["adv"]
                    and rows[o]["grad"] < tol["grad"] * max(1.0, rows[o]["grad_max"])
                    for o in options)
        verdict = "read, not run" if not options else "run, equal" if equal else "run, DIFFERS"
        out.append((concept, options, verdict))
    return out


def trl_config(**fields):
    """TRL's ``GRPOConfig(**fields)`` for reading (never for training): a temporary
    ``output_dir``, no reporting, the CPU. transformers' FutureWarning about the
    ``gradient_checkpointing`` name, which GRPOConfig itself passes, is silenced."""
    import tempfile
    import warnings

    from trl import GRPOConfig

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*",
                                category=FutureWarning)
        return GRPOConfig(output_dir=tempfile.gettempdir(), report_to="none", use_cpu=True,
                          **fields)


def reinforce_pp_token_advantages(rewards, kl, mask, *, beta=0.01, ddof=0, eps=1e-8):
    r"""REINFORCE++'s per-token advantages as OpenRLHF and verl compute them (Hu et al. 2025).

    Each token's reward is the outcome on the completion's last token minus a KL penalty on
    every token, the advantage is the reward-to-go (gamma 1), whitened over the batch's tokens:

    .. math::

        r_{i,t} = \mathbb 1[t = L_i]\, r_i - \beta\, k_{i,t}, \qquad
        R_{i,t} = \sum_{s \ge t} r_{i,s}, \qquad
        A_{i,t} = \frac{R_{i,t} - \mu}{\sqrt{\sigma^2 + \varepsilon}}

    with mu and sigma^2 over the valid tokens of the batch (``ddof=0``: OpenRLHF 0.11.2,
    ``experience_maker.py:284, 312, 332``, ``models/utils.py:131-157``; ``ddof=1``: verl 0.9.1's
    ``masked_whiten``, ``core_algos.py:694-731``, the KL in its token rewards when
    ``use_kl_in_reward`` is on). At ``beta = 0`` every token of a completion carries one
    number, :func:`grpo_lab.neighbours.reinforce_pp_advantages`'s (up to where eps sits).

    ========  ========  =========================================================
    Symbol    Shape     Meaning
    ========  ========  =========================================================
    rewards   (N,)      one outcome reward per completion
    kl        (N, T)    the per-token KL estimate k_{i,t} (at sampling time)
    mask      (N, T)    1 on completion tokens; every row needs one
    beta      scalar    the KL coefficient, >= 0 (OpenRLHF's init_coef, 0.01)
    ddof      int       0 (OpenRLHF, population variance) or 1 (verl, Bessel)
    eps       scalar    inside the square root, > 0
    return    (N, T)    A_{i,t}; 0 on padding
    ========  ========  =========================================================

    >>> import numpy as np
    >>> A = reinforce_pp_token_advantages([1.0, 0.0], np.full((2, 2), 0.5), np.ones((2, 2)),
    ...                                   beta=0.1)
    >>> bool(A[0, 0] != A[0, 1])                          # varies along the completion
    True
    """
    kl_, _ = as_float_array("kl", kl, ndim=2, shape_doc=" of per-token KL, shape (N, T)")
    r, _ = as_float_array("rewards", rewards, ndim=1, shape_doc=" of shape (N,)")
    check_shape("rewards", r, kl_.shape[:1], " (one reward per row of kl)")
    m = as_mask("mask", mask, kl_.shape, " (the shape of kl)")
    if not m.any(axis=1).all():
        raise ValueError(f"mask: expected at least one token in every row, got an empty row "
                         f"at {int(np.flatnonzero(~m.any(axis=1))[0])}")
    beta = check_real("beta", beta, minimum=0.0)
    ddof = check_int("ddof", ddof, minimum=0, maximum=1)
    eps = check_real("eps", eps, minimum=0.0, allow_equal=False)
    last = kl_.shape[1] - 1 - np.argmax(m[:, ::-1], axis=1)                  # (N,) L_i
    token_r = np.where(m, -beta * kl_, 0.0)                                  # (N, T)
    token_r[np.arange(len(r)), last] += r                                    # outcome at L_i
    to_go = np.flip(np.cumsum(np.flip(token_r, axis=1), axis=1), axis=1)     # sum over s >= t
    valid = to_go[m]                                                         # (n_tokens,)
    if valid.size <= ddof:
        raise ValueError(f"mask: expected more than ddof = {ddof} valid token(s), got {valid.size}")
    var = ((valid - valid.mean()) ** 2).sum() / (valid.size - ddof)
    return np.where(m, (to_go - valid.mean()) / np.sqrt(var + eps), 0.0)     # (N, T)

