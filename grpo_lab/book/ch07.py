"""Chapter 7's figures (``chapters/07_performance.ipynb``: performance).

* ``step_figure``: where the time of one GRPO step goes, stage by stage
  (:func:`grpo_lab.perf.step_profile.time_grpo_step`);
* ``ratio_figure``: each implementation's median time from ``python -m grpo_lab.bench`` as a
  multiple of a memory copy of the same size;
* ``roofline_figure``: the roofline ``min(P, I W)`` (:func:`grpo_lab.perf.roofline.attainable`)
  with measured kernels placed under it;
* ``decode_figure`` and its slider ``decode_explorer``: the cost model of one GRPO step
  (:mod:`grpo_lab.perf.cost_model`), decode intensity against the ridge and the stages' seconds.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.perf.roofline import attainable
from grpo_lab.book.frames import describe_figures

# In IPython, every figure shown carries its alt text (its title, panels and axes) as
# output metadata, which the site puts on the page (gl.book.frames.describe_figures).
describe_figures()

__all__ = ["decode_explorer", "decode_figure", "ratio_figure", "roofline_figure", "step_figure"]


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


def decode_figure(batch=64, T=1024, prompt_len=256, *, model=None, fig=None):
    """The cost model at ``batch`` sequences per inference engine (one engine per GPU).

    Left: a decode step's arithmetic intensity against the batch (the weight GEMMs: ``b``
    flop/byte in bf16), with the H100 and H200 ridge points and the crossover batch once the
    KV cache at the mean context is read too, both at the cost model's one set of efficiencies
    (``gl.cost_model.EFFICIENCY``). Right: one GRPO step's stages on each GPU
    (:func:`grpo_lab.perf.cost_model.grpo_step_cost`, ``prompts = batch / 8``, G = 8).
    Arithmetic on datasheet figures, labelled so. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    from grpo_lab.perf import cost_model as cm
    from grpo_lab.perf.roofline import H100_SXM, H200_SXM

    model = model or cm.QWEN25_7B
    if fig is None:
        fig = plt.figure(figsize=(11, 4.8))
    fig.clear()
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    b = np.unique(np.geomspace(1, 10_000, 200).astype(np.int64))            # whole sequences
    left.loglog(b, cm.decode_intensity(b), "k-", lw=2, label="decode weight GEMMs: b flop/byte")
    mean_len = cm.completion_lengths(max(1, batch), T).mean()
    context = prompt_len + mean_len / 2                      # a decode step's mean context
    titles = []
    for gpu, colour in ((H100_SXM, "tab:blue"), (H200_SXM, "tab:orange")):
        ridge = cm.ridge_point(gpu, cm.EFFICIENCY)              # the chapter's one assumption
        short = gpu.name.split(" (")[0]
        left.axhline(ridge, color=colour, ls=":", lw=1.5, label=f"{short} ridge {ridge:.0f}")
        cross = cm.crossover_batch(model, gpu, context, cm.EFFICIENCY)
        if np.isfinite(cross):
            left.axvline(cross, color=colour, ls="--", lw=1,
                         label=f"{short} crossover with KV: b = {cross:.0f}")
        titles.append(f"{short} {'never' if not np.isfinite(cross) else f'b > {cross:.0f}'}")
    left.axvline(batch, color="k", lw=1)
    left.text(batch * 1.1, 1.5, f"b = {batch}", fontsize=8)
    left.set_xlabel("sequences decoded together per engine, b")
    left.set_ylabel("flop per byte moved")
    left.set_title("Arithmetic: decode turns compute-bound at\n" + ", ".join(titles), fontsize=9)
    left.legend(fontsize=7, loc="upper left")
    G = 8
    bottoms = np.zeros(2)
    costs = [cm.grpo_step_cost(model, gpu, prompts=max(1, batch // G), G=G, T=T,
                               prompt_len=prompt_len) for gpu in (H100_SXM, H200_SXM)]
    stages = list(costs[0])
    colours = plt.get_cmap("tab10")(np.arange(len(stages)))
    for stage, colour in zip(stages, colours):
        widths = np.array([c[stage] for c in costs])
        right.barh([1, 0], widths, left=bottoms, color=colour, label=stage)
        bottoms += widths
    for y, total in zip((1, 0), bottoms):
        right.text(total * 1.01, y, f"{total:.1f} s", va="center", fontsize=8)
    right.set_yticks([1, 0])
    right.set_yticklabels(["H100 SXM", "H200 SXM"])
    right.set_xlim(0, bottoms.max() * 1.2)
    right.set_xlabel(f"seconds per GRPO step (arithmetic), {model.name}, b = {batch}, "
                     f"T = {T}", fontsize=8)
    gen = [c["decode: weights"] + c["decode: KV cache"] + c["prefill"] for c in costs]
    train = [c["reference forward"] + c["old-logp forward"] + c["policy forward + backward"]
             for c in costs]
    right.set_title(f"Rollout {gen[0]:.1f} s vs training {train[0]:.1f} s on an H100 "
                    f"({gen[1]:.1f} vs {train[1]:.1f} on an H200)", fontsize=9)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    fig.tight_layout()
    return fig


def decode_explorer(batch=64):
    """A slider over the sequences per engine for :func:`decode_figure`. Live in Jupyter; on
    the static site over the grid 8 ... 1024."""
    import ipywidgets as w

    from grpo_lab.book.sliders import explorer

    grid = sorted({8, 16, 32, 64, 128, 256, 512, 1024, int(batch)})
    controls = {"batch": w.SelectionSlider(options=grid, value=int(batch),
                                           description="b per engine")}
    return explorer(decode_figure, controls, grid={"batch": grid})
