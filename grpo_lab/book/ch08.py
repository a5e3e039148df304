"""Chapter 8's figures (``chapters/08_production_knobs.ipynb``: production knobs, process
supervision). Each is a plain function of its inputs, drawn and tested without a browser.

* ``advantages_by_system_figure``: the advantages each system's defaults give to the same
  groups of rewards, side by side;
* ``losses_by_system_figure``: one ragged batch's loss under each system's defaults and under
  each aggregation;
* ``process_vs_outcome_figure``: the per-token advantages of outcome and of process
  supervision for one group, as two heat maps.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.process import process_advantages, steps_to_tokens
from grpo_lab.production.presets import PRESETS

__all__ = ["advantages_by_system_figure", "losses_by_system_figure",
           "process_vs_outcome_figure"]

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
