"""Chapter 6c's figures and tables (``chapters/06c_clinic.ipynb``: the clinic).

* ``dashboard_figure``: a small grid of TRL's logged metrics, the sick run beside the run its
  one knob healed, step by step, as a user's dashboard (TensorBoard, W&B) draws them;
  non-finite values (NaN, Infinity, null) are marked where a dashboard leaves a gap.
* ``healthy_ranges``: each metric's range over the steps of the healthy runs.
* ``moved_by``: the staged failures whose sick run leaves a metric's healthy range.
* ``guide_table``: the dashboard guide, one row per TRL metric, as a Markdown table.

They read only the logged dicts (``trainer.state.log_history``), so drawing needs no torch.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.book.frames import describe_figures
from grpo_lab.doctor import VERL_NAMES, VERL_SOURCES, rows_of, series
from grpo_lab.numerics.validate import check_choice, describe

describe_figures()

__all__ = ["DASHBOARD", "GUIDE", "dashboard_figure", "guide_table", "healthy_ranges", "moved_by"]

#: The metrics a GRPO dashboard shows first, in TRL 1.16.0's names.
DASHBOARD = ("reward", "reward_std", "frac_reward_zero_std", "completions/clipped_ratio",
             "completions/mean_length", "entropy", "kl", "grad_norm", "loss")

#: TRL's metric -> what it means (the guide's second column).
GUIDE = {
    "reward": "mean total reward of the step's completions (the weighted sum of the reward "
              "functions)",
    "reward_std": "std of the total reward within each group, averaged over the groups",
    "frac_reward_zero_std": "share of groups whose completions all got the same reward: "
                            "their advantages are 0",
    "rewards/<name>/mean": "mean of one reward function (one line per function)",
    "completions/clipped_ratio": "share of completions cut at max_completion_length "
                                 "(no EOS)",
    "completions/mean_length": "mean completion length in tokens",
    "entropy": "mean entropy of the policy over the completion tokens (nats per token)",
    "kl": "mean k3 estimate of KL(policy || reference) per token (logged when beta > 0)",
    "clip_ratio/region_mean": "share of tokens whose ratio left [1 - eps, 1 + eps] "
                              "(0 with one update per batch)",
    "grad_norm": "the gradient's norm before clipping (transformers' Trainer)",
    "loss": "the GRPO loss; about 0 at the start of each batch (the advantages sum to 0)",
}


def _steps(rows, key):
    return np.array([row.get("step", i + 1) for i, row in enumerate(rows) if key in row])


def _check_log(name, log):
    if not isinstance(log, list):
        raise TypeError(f"{name}: expected TRL's log_history (a list of dicts), got "
                        f"{describe(log)}")
    return rows_of(log)


def dashboard_figure(sick, healed=None, keys=DASHBOARD, *, title: str,
                     labels=("sick", "healed"), ncols: int = 3):
    """The metrics ``keys`` of the ``sick`` run (and the ``healed`` one), one panel each.

    ``sick`` and ``healed`` are TRL's ``log_history`` (the summary row is dropped); a metric a
    run did not log is left out of that panel. A non-finite value (NaN, Infinity, null) is a
    red cross on the panel's floor: a dashboard shows a gap there.
    """
    import matplotlib.pyplot as plt

    runs = [(labels[0], _check_log("sick", sick), "C3")]
    if healed is not None:
        runs.append((labels[1], _check_log("healed", healed), "C0"))
    if not isinstance(keys, (list, tuple)) or not keys or not all(isinstance(k, str)
                                                                   for k in keys):
        raise TypeError(f"keys: expected a non-empty tuple of metric names, got {describe(keys)}")
    if not isinstance(title, str):
        raise TypeError(f"title: expected a str, got {describe(title)}")
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(nrows, min(ncols, len(keys)), figsize=(3.3 * min(ncols, len(keys)),
                                                                     2.3 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for label, rows, colour in runs:
            x, y = _steps(rows, key), series(rows, key)
            if not len(y):
                continue
            good = np.isfinite(y)
            ax.plot(x[good], y[good], "-o", ms=2.5, color=colour, label=label)
            if (~good).any():
                floor = np.nanmin(y[good]) if good.any() else 0.0
                ax.plot(x[~good], np.full((~good).sum(), floor), "x", color="red", ms=7,
                        label=f"{label}: non-finite")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def healthy_ranges(logs, keys) -> dict:
    """``{key: (low, high)}``: each metric's smallest and largest finite value over every step
    of the healthy ``logs`` (a list of ``log_history`` lists); a key none logged is left out."""
    if not isinstance(logs, list) or not logs:
        raise TypeError(f"logs: expected a non-empty list of log_history lists, got "
                        f"{describe(logs)}")
    rows = [_check_log(f"logs[{i}]", log) for i, log in enumerate(logs)]
    out = {}
    for key in keys:
        values = np.concatenate([series(r, key) for r in rows])
        values = values[np.isfinite(values)]
        if len(values):
            out[key] = (float(values.min()), float(values.max()))
    return out


def moved_by(key, sick_logs, ranges) -> list:
    """The names of the sick runs (``{name: log_history}``) whose mean of ``key`` over their
    finite steps leaves ``ranges[key]``, or which log a non-finite value of it."""
    check_choice("key", key, tuple(ranges))
    low, high = ranges[key]
    names = []
    for name, log in sick_logs.items():
        x = series(_check_log(f"sick_logs[{name!r}]", log), key)
        if not len(x):
            continue
        finite = x[np.isfinite(x)]
        if not np.isfinite(x).all() or not len(finite) or not low <= finite.mean() <= high:
            names.append(name)
    return names


def guide_table(ranges, sick_logs) -> str:
    """The dashboard guide as Markdown: TRL's metric, what it means, its healthy range (from
    ``ranges``), the staged failures that move it (:func:`moved_by`); then, in a second table
    (two fit the page at 1280 px where one did not), verl 0.9.1's name for each metric with
    the line of verl's code that logs it (``grpo_lab.doctor.VERL_NAMES``)."""
    verl = {trl: (name, VERL_SOURCES[name]) for name, trl in VERL_NAMES.items()}
    lines = ["| TRL metric | what it means | healthy range | moved by |", "|---|---|---|---|"]
    names = ["| TRL metric | verl 0.9.1 | logged at |", "|---|---|---|"]
    for key, meaning in GUIDE.items():
        if key in ranges:
            low, high = ranges[key]
            span = f"{low:.3g} to {high:.3g}"
            moved = ", ".join(f"`{n}`" for n in moved_by(key, sick_logs, ranges)) or "none"
        else:
            span, moved = "per function", "see reward_hacking"
        lines.append(f"| `{key}` | {meaning} | {span} | {moved} |")
        name, where = verl.get(key, (None, None))
        names.append(f"| `{key}` | `{name}` | {where} |" if name
                     else f"| `{key}` | not logged under one name | |")
    return "\n".join(lines) + "\n\n" + "\n".join(names)
