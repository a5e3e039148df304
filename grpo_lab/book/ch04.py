"""Chapter 4's figures (``chapters/04_low_precision.ipynb``: float16 and bfloat16, measured).

* ``cancellation_figure``: the error of a naive advantage formula and of
  ``gl.group_advantages`` as the group mean grows against the spread, per dtype
  (the numbers: ``cancellation_errors``);
* ``logprob_sum_figure``: the error of a sequence's summed log-probs against its length T,
  naive in float16 and bfloat16 against ``gl.sequence_logprob_sum``
  (the numbers: ``logprob_sum_errors``);
* ``mismatch_figure``: the per-token log-ratio between a training and an inference kernel
  (``gl.rounded_matmul`` with two summation orders) and its random walk along a sequence;
* ``master_weight_figure``: how far K weight updates drift from the float64 run when they are
  added in bfloat16 alone and through a float32 master copy (``gl.master_weights``);
* ``loss_scale_figure``: a dynamic loss scaler's scale along a run, with its skipped steps.

Each title states what the figure measured; every input is seeded.
"""

from __future__ import annotations

import math

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.numerics.logprobs import sequence_logprob_sum
from grpo_lab.numerics.precision import DTYPES, as_dtype, round_trip, unit_roundoff
from grpo_lab.numerics.validate import as_float_array, as_mask, check_int, describe
from grpo_lab.book.frames import describe_figures

# In IPython, every figure shown carries its alt text (its title, panels and axes) as
# output metadata, which the site puts on the page (gl.book.frames.describe_figures).
describe_figures()

__all__ = ["cancellation_errors", "cancellation_figure", "logprob_sum_errors",
           "logprob_sum_figure", "loss_scale_figure", "master_weight_figure", "mismatch_figure"]

_COLOURS = {"float16": "C0", "bfloat16": "C1", "float32": "C2", "float64": "C3"}


def _median_relative_error(y, ref, keep):
    """Median over the kept groups of max|y - ref| / max|ref| (NaN when none is kept)."""
    if not keep.any():
        return math.nan
    worst = np.abs(y - ref).max(axis=1)[keep] / np.abs(ref).max(axis=1)[keep]   # (kept,)
    return float(np.median(worst))


def cancellation_errors(naive, dtype, ratios, *, G=8, n_groups=256, seed=1):
    """Median relative error of ``naive(rewards)`` and of ``gl.group_advantages(rewards)``
    for groups of spread 1 around a mean of ``ratio``, stored in ``dtype``, per ratio.

    Both are compared with ``gl.group_advantages`` in float64 of the same stored rewards;
    groups that storage made all-equal (no spread left) are left out. Returns two arrays of
    ``len(ratios)``: (naive, package).

    >>> naive = lambda r: (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + 1e-8)
    >>> naive_err, ours = cancellation_errors(naive, "float32", [1.0, 1e6])
    >>> bool(naive_err[1] > 1000 * naive_err[0]), bool(ours.max() < 1e-7)
    (True, True)
    """
    if not callable(naive):
        raise TypeError(f"naive: expected a function rewards (B, G) -> advantages (B, G), "
                        f"got {describe(naive)}")
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    noise = rng.normal(size=(n_groups, G))                               # (n_groups, G), sigma 1
    naive_err, package_err = [], []
    for ratio in ratios:
        r = (ratio + noise).astype(as_dtype(dtype))                      # stored in the dtype
        ref = group_advantages(r.astype(np.float64))                     # (n_groups, G)
        keep = np.ptp(r.astype(np.float64), axis=1) > 0                  # groups with a spread
        with np.errstate(all="ignore"):
            naive_adv = np.asarray(naive(r)).astype(np.float64)
        ours = group_advantages(r).astype(np.float64)
        naive_err.append(_median_relative_error(naive_adv, ref, keep))
        package_err.append(_median_relative_error(ours, ref, keep))
    return np.array(naive_err), np.array(package_err)


def cancellation_figure(naive, *, G=8, n_groups=256, seed=1, points=14, fig=None):
    """The relative error of ``naive`` (solid) and of ``gl.group_advantages`` (dashed) against
    ``|mu| / sigma``, one colour per dtype, up to ``1 / (4u)``: a spread of a few spacings.

    Returns the Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(7.5, 4))
    fig.clear()
    ax = fig.subplots()
    worst_naive, worst_ours = 0.0, 0.0          # the naive error's peak; ours in units of u
    for name in DTYPES:
        u = unit_roundoff(name)
        ratios = np.logspace(0, np.log10(0.25 / u), points)             # sigma down to 4 u|mu|
        naive_err, ours = cancellation_errors(naive, name, ratios, G=G, n_groups=n_groups,
                                              seed=seed)
        ax.loglog(ratios, naive_err, "o-", color=_COLOURS[name], ms=3, label=f"naive, {name}")
        ax.loglog(ratios, ours, "--", color=_COLOURS[name], lw=1)
        worst_naive = max(worst_naive, np.nanmax(naive_err))
        worst_ours = max(worst_ours, np.nanmax(ours) / u)
    ax.set(xlabel=r"$|\mu| / \sigma$ (group mean over group spread)",
           ylabel=f"relative error of the advantages\n(median over {n_groups} groups)")
    ax.set_title(f"Cancellation: the naive error grows like $u|\\mu|/\\sigma$, up to "
                 f"{100 * worst_naive:.0f}%;\nthe package's (dashed) stays under "
                 f"{worst_ours:.1f} u in every dtype", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def logprob_sum_errors(logp, mask):
    """|error| in nats of one sequence's summed log-probs over its first T tokens, per T.

    ``logp``, ``mask``: (1, T_max). T runs over the powers of two up to T_max. Returns
    ``(Ts, curves)``: curves maps a label to an array of len(Ts), each against the exact sum
    (``math.fsum``) of the same stored values: NumPy's sum in float16 and in bfloat16, the
    exact sum rounded to bfloat16, and ``gl.sequence_logprob_sum`` of the bfloat16 values.
    """
    logp, _ = as_float_array("logp", logp, ndim=2, shape_doc=" of shape (1, T)")
    if logp.shape[0] != 1:
        raise ValueError(f"logp: expected shape (1, T), one sequence, got {describe(logp)}")
    mask = as_mask("mask", mask, logp.shape, " of shape (1, T)")
    Ts = 2 ** np.arange(int(math.log2(logp.shape[1])) + 1)               # 1, 2, 4, ... T_max
    x16, xbf = logp.astype(np.float16), logp.astype(as_dtype("bfloat16"))  # (1, T_max)
    curves = {"float16, naive (NumPy pairwise)": [], "bfloat16, naive (NumPy)": [],
              "exact sum stored in bfloat16": [], "gl.sequence_logprob_sum (bfloat16 in)": []}
    for t in Ts:
        exact16 = math.fsum(x16[0, :t][mask[0, :t]].astype(np.float64))
        exactbf = math.fsum(xbf[0, :t][mask[0, :t]].astype(np.float64))
        with np.errstate(over="ignore"):
            naive16 = float((x16[:, :t] * mask[:, :t]).sum())           # in float16
        naivebf = float((xbf[:, :t] * mask[:, :t].astype(xbf.dtype)).sum())  # in bfloat16
        ours = float(sequence_logprob_sum(xbf[:, :t], mask[:, :t])[0])
        curves["float16, naive (NumPy pairwise)"].append(abs(naive16 - exact16))
        curves["bfloat16, naive (NumPy)"].append(abs(naivebf - exactbf))
        curves["exact sum stored in bfloat16"].append(abs(round_trip([exactbf], "bfloat16")[0]
                                                          - exactbf))
        curves["gl.sequence_logprob_sum (bfloat16 in)"].append(abs(ours - exactbf))
    return Ts, {label: np.array(errs, dtype=np.float64) for label, errs in curves.items()}


def logprob_sum_figure(logp, mask, *, fig=None):
    """The curves of :func:`logprob_sum_errors` against T on log-log axes (an error of 0 is
    drawn at 1e-6); a dotted line marks the T from which the float16 sum is -inf.

    Returns the Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    Ts, curves = logprob_sum_errors(logp, mask)
    if fig is None:
        fig = plt.figure(figsize=(7.5, 4))
    fig.clear()
    ax = fig.subplots()
    T_inf = None
    for (label, errs), style in zip(curves.items(), ["s-", "o-", "^--", "k.-"]):
        finite = np.isfinite(errs)
        ax.plot(Ts[finite], np.maximum(errs[finite], 1e-6), style, ms=4, label=label)
        if not finite.all():
            T_inf = int(Ts[~finite][0])
            ax.axvline(T_inf, color="C0", ls=":", lw=1)
            ax.text(T_inf * 0.9, 2e-5, "float16 sum\nis -inf", ha="right", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel="sequence length T (tokens)",
           ylabel="|error| of the sequence log-prob (nats)\n(1e-6 stands for 0)")
    stall = curves["bfloat16, naive (NumPy)"][-1]
    ours = curves["gl.sequence_logprob_sum (bfloat16 in)"][-1]
    f16 = f"float16 is -inf from T = {T_inf}" if T_inf else "float16 stays finite"
    ax.set_title(f"Summing log-probs: bfloat16 stalls ({stall:,.0f} nats off at T = {Ts[-1]}),"
                 f"\n{f16}; gl.sequence_logprob_sum is off by {ours:.1g} nats", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def mismatch_figure(log_ratio, *, fig=None):
    """Left: histogram of the per-token ``|log pi_train - log pi_infer|`` per dtype, with each
    dtype's u dotted. Right: its running sum along each sequence, the log of the sequence-level
    weight pi/mu, for the 16-bit dtypes.

    ``log_ratio`` maps dtype names ("float16" and "bfloat16" required, "float32" optional) to
    (N, T) arrays of per-token log-ratios that should all be 0. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    expected = "a dict 'float16', 'bfloat16' (and optionally 'float32') -> (N, T) arrays"
    if not isinstance(log_ratio, dict):
        raise TypeError(f"log_ratio: expected {expected}, got {describe(log_ratio)}")
    if not {"float16", "bfloat16"} <= set(log_ratio):
        raise ValueError(f"log_ratio: expected {expected}, got the keys {sorted(log_ratio)}")
    d = {name: as_float_array(f"log_ratio[{name!r}]", log_ratio[name], ndim=2,
                              shape_doc=" of shape (N, T)")[0].astype(np.float64)
         for name in ("bfloat16", "float16", "float32") if name in log_ratio}  # each (N, T)
    if fig is None:
        fig = plt.figure(figsize=(11, 3.8))
    fig.clear()
    ax0, ax1 = fig.subplots(1, 2)
    bins = np.logspace(-9, 0, 55)
    for name, dn in d.items():
        colour = _COLOURS[name]
        ax0.hist(np.abs(dn[dn != 0]), bins=bins, histtype="step", lw=1.5, color=colour,
                 label=name)
        ax0.axvline(unit_roundoff(name), color=colour, ls=":", lw=1)
        if name != "float32":
            walk = np.cumsum(dn, axis=1)                          # (N, T) log pi/mu so far
            ax1.plot(np.arange(1, dn.shape[1] + 1), walk.T, color=colour, lw=0.7, alpha=0.8)
            ax1.plot([], [], color=colour, label=name)
    times = np.abs(d["bfloat16"]).mean() / np.abs(d["float16"]).mean()
    ax0.set(xscale="log", xlabel="|log pi_train - log pi_infer| per token (nats); dotted: u",
            ylabel="tokens")
    ax0.set_title(f"Per-token mismatch: bfloat16's is {times:.0f}x float16's", fontsize=10)
    ax0.legend(fontsize=8)
    weight = np.exp(d["bfloat16"].sum(axis=1))                    # (N,) pi/mu per sequence
    ax1.axhline(0, color="k", lw=0.8)
    ax1.set(xlabel="tokens so far, t", ylabel="log of the sequence weight pi/mu up to t")
    ax1.set_title(f"The sequence weight drifts like a random walk: in bfloat16\npi/mu ends "
                  f"in [{weight.min():.2f}, {weight.max():.2f}] after {d['bfloat16'].shape[1]} "
                  f"tokens, where it should be 1", fontsize=10)
    ax1.legend(fontsize=8)
    fig.tight_layout()
    return fig


def master_weight_figure(run, *, fig=None):
    """The RMS distance from the float64 run after each step, for the weights updated in the
    dtype alone, the float32 master copy and the dtype copy made from it after each update.

    ``run`` is a :class:`grpo_lab.numerics.master_weights.MasterWeightRun`. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    from grpo_lab.numerics.master_weights import MasterWeightRun

    if not isinstance(run, MasterWeightRun):
        raise TypeError(f"run: expected a MasterWeightRun (gl.master_weights.master_weight_run),"
                        f" got {describe(run)}")
    if fig is None:
        fig = plt.figure(figsize=(7, 3.8))
    fig.clear()
    ax = fig.subplots()
    steps = np.arange(1, len(run.distance["low"]) + 1)
    moved = np.sqrt(np.mean((run.reference - run.start) ** 2))
    labels = {"low": f"{run.dtype} only: w + step rounded to {run.dtype}",
              "copy": f"{run.dtype} copy of the float32 master (what the model reads)",
              "master": "float32 master weights"}
    for key, colour in (("low", _COLOURS["bfloat16"]), ("copy", "C4"), ("master", _COLOURS["float32"])):
        ax.plot(steps, np.maximum(run.distance[key], 1e-12), color=colour, lw=1.5,
                label=labels[key])
    ax.set(yscale="log", xlabel="optimiser step", ylabel="RMS distance from the float64 run")
    ax.set_title(f"{run.dtype} alone makes {run.moved('low'):.0%} of the updates' movement "
                 f"(RMS {moved:.1e});\nthrough float32 master weights, "
                 f"{run.moved('master'):.0%}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def loss_scale_figure(run, *, fig=None):
    """A dynamic loss scaler's scale (log2) at each step, with the skipped steps marked.

    ``run`` is a :class:`grpo_lab.numerics.master_weights.DynamicScalerRun`. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    from grpo_lab.numerics.master_weights import DynamicScalerRun

    if not isinstance(run, DynamicScalerRun):
        raise TypeError(f"run: expected a DynamicScalerRun (gl.master_weights."
                        f"dynamic_loss_scaling), got {describe(run)}")
    if fig is None:
        fig = plt.figure(figsize=(7, 3.8))
    fig.clear()
    ax = fig.subplots()
    steps = np.arange(1, len(run.scales) + 1)
    ax.step(steps, np.log2(run.scales), where="post", color="C0", lw=1.5, label="log2 of the scale S")
    ax.plot(steps[run.skipped], np.log2(run.scales[run.skipped]), "x", color="C3", ms=7,
            label="skipped: a scaled gradient overflowed")
    ax.set(xlabel="optimiser step", ylabel="log2 S")
    ax.set_title(f"The scale rises until the gradients overflow, then halves:\n"
                 f"{int(run.skipped.sum())} of {len(steps)} steps skipped", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
