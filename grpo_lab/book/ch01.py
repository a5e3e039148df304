"""Sliders for the chapters. The figures are plain functions of the slider values, so they
are drawn (and tested) without a browser; ``*_explorer()`` wires them to ipywidgets through
``gl.sliders.explorer``, which also precomputes frames for the static site.

Chapter 1 uses ``advantage_explorer`` (sliders for G, the reward spread and the reward
distribution, redrawing the advantage histogram and the spread of the group-std estimate).
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import SCALES, group_advantages
from grpo_lab.theory.group_stats import REWARD_KINDS, sample_rewards, true_reward_std, zero_spread_probability

__all__ = ["ADVANTAGE_GRID", "advantage_explorer_figure", "advantage_explorer", "clip_explorer",
           "clip_objective_figure", "gae_figure", "length_bias_figure"]

HIST_DECIMALS = 4  # values are rounded to this many decimals before they are binned


def advantage_explorer_figure(G=8, spread=1.0, kind="pass/fail", pass_rate=0.3,
                              scale="group", ddof=0, *, n_groups=2000, seed=0, fig=None):
    """Draw the two panels of chapter 1's explorer for one setting of the sliders.

    Left: histogram of the advantages of ``n_groups`` simulated groups of ``G`` rewards.
    Right: histogram of the group std (``ddof``) relative to the true reward std.
    Returns the matplotlib Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    rewards = sample_rewards(n_groups, G, kind=kind, pass_rate=pass_rate, spread=spread,
                             seed=seed)                                  # (n_groups, G)
    adv = group_advantages(rewards, scale=scale, ddof=ddof)              # (n_groups, G)
    sigma = true_reward_std(kind=kind, pass_rate=pass_rate, spread=spread)
    group_std = rewards.std(axis=1, ddof=ddof)                           # (n_groups,)
    zero = float(np.mean(np.ptp(rewards, axis=1) == 0))

    if fig is None:
        fig = plt.figure(figsize=(10, 3.6))
    fig.clear()
    ax_adv, ax_std = fig.subplots(1, 2)

    # Pass/fail advantages take a few discrete values, which can sit exactly on a bin edge.
    # eps moves them by about eps/std (1e-7 at spread 0.1), far below what a histogram can
    # show, yet enough to cross an edge; rounding first keeps settings that agree to that
    # precision (spread x10 under scale='group') drawing the same figure.
    ax_adv.hist(np.round(adv.ravel(), HIST_DECIMALS), bins=60, color="#3b75af",
                histtype="stepfilled")  # one polygon, not 60 bars: faster frames
    ax_adv.set_xlabel(f"advantage (scale={scale!r}, ddof={ddof})")
    ax_adv.set_ylabel("completions")
    lo, hi = np.percentile(adv, [0.5, 99.5])
    ax_adv.set_title(f"G={G}: advantages span [{lo:.2f}, {hi:.2f}]")

    if sigma > 0:
        ax_std.hist(np.round(group_std / sigma, HIST_DECIMALS), bins=60, color="#e1812c",
                    histtype="stepfilled")
        ax_std.axvline(1.0, color="k", lw=1, ls="--", label="true std")
        ax_std.set_xlabel("group std / true reward std")
        rel_sd = float(np.std(group_std / sigma))
        ax_std.set_title(f"one group's std is off by {100 * rel_sd:.0f}% (1 sd)")
        ax_std.legend(loc="upper right")
    else:
        ax_std.text(0.5, 0.5, "pass rate 0 or 1: every group is all-equal",
                    ha="center", va="center", transform=ax_std.transAxes)
        ax_std.set_xlabel("group std / true reward std")
    ax_std.set_ylabel("groups")
    if kind == "pass/fail":
        exact = zero_spread_probability(G, pass_rate)
        fig.suptitle(f"{100 * zero:.1f}% of groups are all-equal and teach nothing "
                     f"(exact: {100 * exact:.1f}%)", fontsize=11)
    else:
        fig.suptitle("continuous rewards: no group is all-equal", fontsize=11)
    fig.tight_layout()
    return fig


# The static page offers these values (frames drawn when the book builds, see gl.sliders):
# G across the range the chapter discusses, three spreads a decade apart, and the two scales
# whose contrast the chapter asks the reader to see. 6 x 3 x 2 = 36 settings.
ADVANTAGE_GRID = {"G": [2, 4, 8, 16, 32, 64], "spread": [0.1, 1.0, 10.0],
                  "scale": ["group", "none"]}


def advantage_explorer(G=8, spread=1.0, kind="pass/fail", pass_rate=0.3, scale="group",
                       ddof=0, *, static=None):
    """Sliders for ``advantage_explorer_figure``: live in Jupyter, precomputed on the site.

    Move ``G`` to see the std estimate tighten and the all-equal share fall; move ``spread``
    with ``scale='group'`` to see that it changes nothing (the std divides it out), and with
    ``scale='none'`` to see the advantages grow with it. On the static site the sliders for
    ``G``, ``spread`` and ``scale`` move over ``ADVANTAGE_GRID`` (see ``gl.sliders``).
    """
    import ipywidgets as w

    from grpo_lab.book.sliders import explorer

    controls = {
        "G": w.IntSlider(value=G, min=2, max=64, description="G"),
        "spread": w.FloatLogSlider(value=spread, base=10, min=-3, max=3, step=0.1,
                                   description="spread"),
        "kind": w.Dropdown(options=REWARD_KINDS, value=kind, description="rewards"),
        "pass_rate": w.FloatSlider(value=pass_rate, min=0.0, max=1.0, step=0.05,
                                   description="pass rate"),
        "scale": w.Dropdown(options=SCALES, value=scale, description="scale"),
        "ddof": w.Dropdown(options=[0, 1], value=ddof, description="ddof"),
    }

    def disable_pass_rate(controls):  # a pass rate means nothing for continuous rewards
        controls["pass_rate"].disabled = controls["kind"].value != "pass/fail"

    return explorer(advantage_explorer_figure, controls, ADVANTAGE_GRID, static=static,
                    before_draw=disable_pass_rate)


# --- chapter 2: the clipped objective, GAE and the length bias of loss aggregation ------------

def clip_objective_figure(eps_low=0.2, eps_high=None, dual_clip=None, *, max_ratio=4.0,
                          fig=None):
    """PPO's clipped objective against the ratio, for A = +1 (left) and A = -1 (right).

    The objective is ``-gl.clipped_surrogate_loss`` (what the policy maximises), drawn for
    symmetric PPO clipping (dashed), the given ``eps_high`` / ``dual_clip`` (solid) and the
    unclipped ``r * A`` (dotted). Shaded: ratios where the gradient is zero.
    """
    import matplotlib.pyplot as plt

    from grpo_lab.core.losses import clipped_surrogate_loss

    eps_high = eps_low if eps_high is None else eps_high
    ratio = np.linspace(0.01, max_ratio, 800)                   # (R,)
    logp, old = np.log(ratio)[None, :], np.zeros((1, ratio.size))

    def objective(adv, **kw):
        return -clipped_surrogate_loss(logp, old, np.full((1,), adv), eps_low=eps_low, **kw)[0]

    if fig is None:
        fig = plt.figure(figsize=(10, 3.6))
    fig.clear()
    axes = fig.subplots(1, 2, sharex=True)
    for ax, adv in zip(axes, (1.0, -1.0)):
        ours = objective(adv, eps_high=eps_high, dual_clip=dual_clip if adv < 0 else None)
        ax.plot(ratio, ratio * adv, ":", color="0.5", label="unclipped $rA$")
        ax.plot(ratio, objective(adv), "--", color="#e1812c",
                label=f"PPO, $\\varepsilon$={eps_low:g}")
        label = f"$\\varepsilon_{{high}}$={eps_high:g}"
        if adv < 0 and dual_clip is not None:
            label += f", dual-clip c={dual_clip:g}"
        ax.plot(ratio, ours, color="#3b75af", lw=2, label=label)
        flat = np.abs(np.gradient(ours, ratio)) < 1e-9           # zero-gradient ratios
        ax.fill_between(ratio, 0, 1, where=flat, color="0.85", alpha=0.6,
                        transform=ax.get_xaxis_transform(), label="no gradient")
        ax.axvline(1.0, color="k", lw=0.6)
        ax.set_xlabel(r"ratio $r = \pi_\theta / \pi_{old}$")
        ax.set_ylabel("objective (maximised)")
        ax.legend(fontsize=8, loc="upper left" if adv > 0 else "lower left")
    axes[0].set_title(f"A > 0: the gain stops at r = {1 + eps_high:g}")
    low_title = f"A < 0: the penalty stops at r = {1 - eps_low:g}"
    if dual_clip is not None:
        low_title += f" and above r = {dual_clip:g}"
    axes[1].set_title(low_title)
    fig.tight_layout()
    return fig


def _clip_explorer_figure(eps_low=0.2, eps_high=0.28, dual_clip=3.0, use_dual=True, *,
                          fig=None):
    """``clip_objective_figure`` with dual-clip switched by a checkbox (for the explorer)."""
    return clip_objective_figure(eps_low, eps_high, dual_clip if use_dual else None, fig=fig)


def clip_explorer(eps_low=0.2, eps_high=0.28, dual_clip=3.0):
    """Sliders for ``clip_objective_figure``: eps_low, eps_high, and dual-clip's c (with a
    checkbox to switch it off). Live in Jupyter; on the static site over a small grid."""
    import ipywidgets as w

    from grpo_lab.book.sliders import explorer

    controls = {
        "eps_low": w.FloatSlider(value=eps_low, min=0.0, max=0.9, step=0.01,
                                 description="eps_low"),
        "eps_high": w.FloatSlider(value=eps_high, min=0.0, max=2.0, step=0.01,
                                  description="eps_high"),
        "dual_clip": w.FloatSlider(value=dual_clip or 3.0, min=1.05, max=4.0, step=0.05,
                                   description="dual-clip c"),
        "use_dual": w.Checkbox(value=dual_clip is not None, description="dual-clip"),
    }

    def disable_dual(controls):  # c means nothing with dual-clip off
        controls["dual_clip"].disabled = not controls["use_dual"].value

    grid = {"eps_low": sorted({0.1, 0.2, float(eps_low)}),
            "eps_high": sorted({0.2, 0.28, 0.5, float(eps_high)}),
            "dual_clip": sorted({2.0, 3.0, float(dual_clip or 3.0)}),
            "use_dual": [False, True]}
    return explorer(_clip_explorer_figure, controls, grid, before_draw=disable_dual)


def gae_figure(rewards, values, lams=(0.0, 0.5, 0.9, 1.0), gamma=1.0, *, fig=None):
    """Per-token advantages of one completion under GAE for several lambdas."""
    import matplotlib.pyplot as plt

    from grpo_lab.core.gae import gae

    if fig is None:
        fig = plt.figure(figsize=(6.5, 3.6))
    fig.clear()
    ax = fig.subplots()
    t = np.arange(len(rewards))
    for lam in lams:
        adv, _ = gae(rewards, values, gamma=gamma, lam=lam)
        ax.plot(t, adv, "o-", ms=4, label=f"$\\lambda$ = {lam:g}")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("token position t")
    ax.set_ylabel(r"advantage $\hat A_t$")
    ax.set_title("Small lambda: credit only where the critic's value moved;\n"
                 "lambda = 1: every token gets the final reward minus V(s_t)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def length_bias_figure(lengths=(16, 64, 256, 1024), max_len=1024, *, fig=None):
    """The weight of one token, and of a whole completion, under each aggregation mode.

    One batch holds one completion of each length in ``lengths``; the weights come from
    ``gl.aggregation_weights``.
    """
    import matplotlib.pyplot as plt

    from grpo_lab.core.aggregation import aggregation_weights

    lengths = np.asarray(lengths)
    T = int(max(max_len, lengths.max()))
    mask = np.arange(T)[None, :] < lengths[:, None]                 # (N, T)
    if fig is None:
        fig = plt.figure(figsize=(10, 3.6))
    fig.clear()
    ax_tok, ax_seq = fig.subplots(1, 2)
    for mode, style in (("grpo", "o-"), ("dapo", "s--"), ("dr_grpo", "^:")):
        w = aggregation_weights(mask, mode, max_len=T if mode == "dr_grpo" else None)
        ax_tok.plot(lengths, w[:, 0], style, label=mode)            # (N,) weight of one token
        ax_seq.plot(lengths, w.sum(axis=1), style, label=mode)      # (N,) weight of the answer
    for ax in (ax_tok, ax_seq):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("completion length (tokens)")
        ax.legend(fontsize=8)
    ax_tok.set_ylabel("weight of one token in the loss")
    ax_tok.set_title("grpo: a token of a short answer counts more")
    ax_seq.set_ylabel("weight of the whole completion")
    ax_seq.set_title("dapo, dr_grpo: a long answer counts more")
    fig.tight_layout()
    return fig
