"""Chapter 6's figure (``chapters/06_training_loop.ipynb``: the GRPO training loop).

* ``training_curves_figure``: the six curves of a run's history (``gl.train.train(...).history``,
  one dict per step with the metrics of ``gl.train.METRICS``): accuracy, reward, length, clip
  fraction, KL and the share of groups with zero spread. ``python -m grpo_lab.train`` saves it
  as ``curves.png``.

It reads only the history's dicts, so drawing it needs no torch.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["training_curves_figure"]

# (y label, [(legend, metric, style)], y limits): one panel each; "o-" marks the metric that
# is measured only every eval_every steps (NaN in between).
_PANELS = (
    ("accuracy", [("train (sampled)", "train_accuracy", "-"),
                  ("held-out (greedy)", "held_out_accuracy", "o-")], (0, 1.02)),
    ("reward", [("reward", "reward", "-"), ("format", "format", "-")], None),
    ("completion length (tokens)", [("length", "length", "-")], None),
    ("clip fraction", [("clip_frac", "clip_frac", "-")], None),
    ("KL to reference (nats per token)", [("kl", "kl", "-")], None),
    ("groups with zero spread", [("zero_spread", "zero_spread", "-")], (0, 1.02)),
)


def training_curves_figure(history, *, title=None, fig=None):
    """The six curves of chapter 6 on one figure, against the GRPO step.

    ``history`` is a run's list of per-step dicts; step 0 is the start after the format
    warm-up. The title states the held-out accuracy at the start and at the last evaluation
    unless ``title`` is given. Returns the Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    steps = np.array([h["step"] for h in history])                       # (S,)
    col = {metric: np.array([h.get(metric, math.nan) for h in history], dtype=float)
           for _, series, _ in _PANELS for _, metric, _ in series}        # each (S,)
    if fig is None:
        fig = plt.figure(figsize=(12, 6.5))
    fig.clear()
    axes = fig.subplots(2, 3).ravel()
    held = ~np.isnan(col["held_out_accuracy"])                           # evaluated steps
    for ax, (label, series, ylim) in zip(axes, _PANELS):
        for name, metric, style in series:
            y = col[metric]
            shown = held if style == "o-" else ~np.isnan(y)
            ax.plot(steps[shown], y[shown], style, ms=3, label=name)
        ax.set(xlabel="GRPO step", ylabel=label)
        if ylim:
            ax.set_ylim(*ylim)
        if len(series) > 1:
            ax.legend(fontsize=8)
    final = col["held_out_accuracy"][held][-1] if held.any() else math.nan
    fig.suptitle(title or f"GRPO on addition: held-out accuracy {col['held_out_accuracy'][0]:.0%}"
                 f" -> {final:.0%}")
    fig.tight_layout()
    return fig
