"""Chapter 7's figures (``chapters/07_performance.ipynb``: performance).

* ``step_figure``: where the time of one GRPO step goes, stage by stage
  (:func:`grpo_lab.perf.step_profile.time_grpo_step`);
* ``ratio_figure``: each implementation's median time from ``python -m grpo_lab.bench`` as a
  multiple of a memory copy of the same size;
* ``roofline_figure``: the roofline ``min(P, I W)`` (:func:`grpo_lab.perf.roofline.attainable`)
  with measured kernels placed under it.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.perf.roofline import attainable

__all__ = ["ratio_figure", "roofline_figure", "step_figure"]


def step_figure(times, *, title=None, fig=None):
    """Horizontal bars: each stage's share of one GRPO step's time, in stage order.

    ``times`` is ``{stage: seconds}`` (the first result of ``time_grpo_step``). The title says
    which stage takes the most, unless ``title`` is given. Returns the Figure (``fig`` is
    cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(8, 0.35 * len(times) + 1.4))
    fig.clear()
    ax = fig.subplots()
    total = sum(times.values())
    stages = list(times)
    shares = [100 * times[s] / total for s in stages]
    y = np.arange(len(stages))[::-1]
    ax.barh(y, shares, color="tab:blue")
    for yi, share, stage in zip(y, shares, stages):
        ax.text(share + 0.5, yi, f"{share:.1f}% ({times[stage] * 1e3:.1f} ms)", va="center",
                fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(stages, fontsize=8)
    ax.set_xlim(0, max(shares) * 1.35)
    ax.set_xlabel(f"share of one step's time (%); the step took {total * 1e3:.0f} ms")
    top = max(times, key=times.get)
    ax.set_title(title or f"One GRPO step of the tiny policy: {top} takes the most time")
    fig.tight_layout()
    return fig


def ratio_figure(report, *, fig=None):
    """Horizontal bars: each implementation's median time as a multiple of the copy (log x).

    ``report`` is the bench's report (``gl.bench.run(...)`` or its JSON): a ``"results"``
    list of rows with ``bench``, ``shape``, ``impl`` and ``ratio_to_copy``. The copy rows are
    the axis line at 1, not bars. Returns the Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    rows = [r for r in report["results"]                  # the loss from hidden states has
            if "copy" not in r["impl"] and "ratio_to_copy" in r]   # no copy to compare with
    if fig is None:
        fig = plt.figure(figsize=(9, 0.42 * len(rows) + 1.4))
    fig.clear()
    ax = fig.subplots()
    labels = [f"{r['bench']} {tuple(r['shape'])}\n{r['impl']}" for r in rows]
    ratios = [r["ratio_to_copy"] for r in rows]
    colours = ["tab:green" if ("fast" in r["impl"] or "fused" in r["impl"]) else "tab:gray"
               for r in rows]
    y = np.arange(len(rows))[::-1]
    ax.barh(y, ratios, color=colours)
    for yi, ratio in zip(y, ratios):
        ax.text(ratio * 1.05, yi, f"{ratio:.1f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xscale("log")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("median time / time of a memory copy of the same size (log scale; 1 = copy)")
    fast = [r for r in rows if r["impl"].startswith("numpy fast")]
    ref = [r for r in rows if r["impl"].startswith("numpy reference")]
    if fast and ref:
        gain = np.median([r["ratio_to_copy"] / f["ratio_to_copy"] for r, f in zip(ref, fast)])
        ax.set_title(f"One pass over memory brings group_advantages {gain:.0f}x closer to the copy")
    fig.tight_layout()
    return fig


def roofline_figure(bandwidth, peak_flops, points, *, title=None, fig=None):
    """The roofline ``min(P, I W)`` on log-log axes, with ``points``: {label: (I, flop/s)}.

    ``bandwidth`` W in byte/s, ``peak_flops`` P in flop/s; each point is a kernel's arithmetic
    intensity I (flop/byte) and the flop/s it attained. Returns the Figure (``fig`` is cleared
    and reused when given).
    """
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(7, 4.5))
    fig.clear()
    ax = fig.subplots()
    intensity = np.logspace(-2, 3, 200)
    ax.loglog(intensity, attainable(intensity, peak_flops, bandwidth) / 1e9, "k-", lw=2,
              label=f"roof: {bandwidth / 1e9:.0f} GB/s, {peak_flops / 1e9:.0f} GFLOP/s")
    ax.axvline(peak_flops / bandwidth, color="k", ls=":", lw=1)
    ax.text(peak_flops / bandwidth * 1.1, peak_flops / 1e9 / 3, "ridge point", fontsize=8)
    for (label, (i, flops)), marker in zip(points.items(), "osD^vP*X"):
        ax.loglog([i], [flops / 1e9], marker, ms=8, label=label)
    ax.set_xlabel("arithmetic intensity (flop per byte moved)")
    ax.set_ylabel("attained GFLOP/s")
    ax.set_title(title or "Memory-bound: every implementation sits under the sloped roof")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
