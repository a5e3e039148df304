"""Chapter 6's figures (``chapters/06_training_loop.ipynb``: the GRPO training loop).

* ``training_curves_figure``: the eight curves of a run's history (``gl.train.train(...)
  .history``, one dict per step with the metrics of ``gl.train.METRICS``): accuracy, reward,
  entropy, the share of groups with zero spread, clip fraction, KL to the reference (mean and
  largest token), how far each batch moved the policy, and length. ``python -m
  grpo_lab.train`` saves it as ``curves.png``.
* ``compare_runs_figure``: a few metrics of several runs side by side (the healthy run, the
  collapsing one, the symmetric clip).

Both read only the histories' dicts, so drawing them needs no torch.
"""

from __future__ import annotations

import math

import numpy as np

from grpo_lab.book.frames import describe_figures

# In IPython, every figure shown carries its alt text (its title, panels and axes) as
# output metadata, which the site puts on the page (gl.book.frames.describe_figures).
describe_figures()

__all__ = ["compare_runs_figure", "training_curves_figure"]

# (y label, [(legend, metric, style)], y limits, log scale): one panel each; "o-" marks the
# metric that is measured only every eval_every steps (NaN in between).
_PANELS = (
    ("accuracy", [("train (sampled)", "train_accuracy", "-"),
                  ("held-out (greedy)", "held_out_accuracy", "o-")], (0, 1.02), False),
    ("reward", [("reward", "reward", "-"), ("format", "format", "-")], None, False),
    ("entropy (nats per token)", [("entropy", "entropy", "-")], (0, None), False),
    ("groups with zero spread", [("zero_spread", "zero_spread", "-")], (0, 1.02), False),
    ("clip fraction", [("clip_frac", "clip_frac", "-")], None, False),
    ("KL to reference (nats)", [("mean per token", "kl", "-"),
                                ("largest token", "kl_max", "-")], None, True),
    ("batch moved the policy (approx KL)", [("approx_kl", "approx_kl", "-")], None, False),
    ("completion length (tokens)", [("length", "length", "-")], None, False),
)
_LABELS = {"held_out_accuracy": "held-out accuracy (greedy)", "entropy": "entropy (nats/token)",
           "kl": "KL to reference (nats/token)", "train_accuracy": "train accuracy (sampled)",
           "zero_spread": "groups with zero spread", "clip_frac": "clip fraction"}


def _column(history, metric):
    return np.array([h.get(metric, math.nan) for h in history], dtype=float)      # (S,)


def training_curves_figure(history, *, title=None, fig=None):
    """The eight curves of chapter 6 on one figure, against the GRPO step.

    ``history`` is a run's list of per-step dicts; step 0 is the start after the format
    warm-up. The title states the held-out accuracy at the start and at the last evaluation
    unless ``title`` is given. Returns the Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    steps = np.array([h["step"] for h in history])                       # (S,)
    col = {metric: _column(history, metric)
           for _, series, _, _ in _PANELS for _, metric, _ in series}    # each (S,)
    if fig is None:
        fig = plt.figure(figsize=(14, 6.5))
    fig.clear()
    axes = fig.subplots(2, 4).ravel()
    held = ~np.isnan(col["held_out_accuracy"])                           # evaluated steps
    for ax, (label, series, ylim, log) in zip(axes, _PANELS):
        for name, metric, style in series:
            y = col[metric]
            shown = held if style == "o-" else ~np.isnan(y)
            if log:
                shown &= y > 0
            ax.plot(steps[shown], y[shown], style, ms=3, lw=1, label=name)
        ax.set(xlabel="GRPO step", ylabel=label)
        if log:
            ax.set_yscale("log")
        if ylim:
            ax.set_ylim(*ylim)
        if len(series) > 1:
            ax.legend(fontsize=8)
    final = col["held_out_accuracy"][held][-1] if held.any() else math.nan
    fig.suptitle(title or f"GRPO on addition: held-out accuracy {col['held_out_accuracy'][0]:.0%}"
                 f" -> {final:.0%}")
    fig.tight_layout()
    return fig


def compare_runs_figure(histories, metrics=("held_out_accuracy", "entropy", "kl"), *,
                        title=None):
    """One panel per metric, one line per run: ``histories`` maps a label to a history.

    Held-out accuracy is drawn at its evaluated steps only; the other metrics every step.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for label, history in histories.items():
            steps, y = np.array([h["step"] for h in history]), _column(history, metric)
            shown = ~np.isnan(y)
            ax.plot(steps[shown], y[shown], "o-" if metric == "held_out_accuracy" else "-",
                    ms=3, lw=1, label=label)
        ax.set(xlabel="GRPO step", ylabel=_LABELS.get(metric, metric))
        if metric in ("held_out_accuracy", "train_accuracy", "zero_spread"):
            ax.set_ylim(0, 1.02)
    axes[0, 0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
