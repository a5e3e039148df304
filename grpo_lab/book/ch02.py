"""Chapter 2's figures and slider (``chapters/02_ppo_to_grpo.ipynb``).

* ``gae_figure``: one completion's per-token advantages under GAE, for several lambdas;
* ``clip_objective_figure``: PPO's clipped objective against the ratio, with clip-higher and
  dual-clip; ``clip_explorer`` puts its eps_low, eps_high and dual-clip on sliders;
* ``length_bias_figure``: the weight of a token and of a whole completion under each loss
  aggregation (grpo, dapo, dr_grpo);
* ``learning_curves_figure``: PPO against GRPO on the hidden-string task
  (:func:`grpo_lab.rl.hidden_string.run_toy`), reward against completions sampled.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.book.frames import describe_figures

# In IPython, every figure shown carries its alt text (its title, panels and axes) as
# output metadata, which the site puts on the page (gl.book.frames.describe_figures).
describe_figures()

__all__ = ["clip_explorer", "clip_explorer_figure", "clip_objective_figure", "gae_figure",
           "learning_curves_figure", "length_bias_figure"]


def clip_objective_figure(eps_low=0.2, eps_high=None, dual_clip=None, *, max_ratio=4.0,
                          fig=None):
    """PPO's clipped objective against the ratio, for A = +1 (left) and A = -1 (right).

    The objective is ``-gl.clipped_surrogate_loss`` (what the policy maximises), drawn for
    symmetric PPO clipping (dashed), the given ``eps_high`` / ``dual_clip`` (solid) and the
    unclipped ``r * A`` (dotted). Shaded: ratios where the gradient is zero.
    """
    import matplotlib.pyplot as plt

    from grpo_lab.core.surrogate import clipped_surrogate_loss

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


def clip_explorer_figure(eps_low=0.2, eps_high=0.28, dual_clip=3.0, use_dual=True, *,
                         fig=None):
    """``clip_objective_figure`` with dual-clip switched on and off by ``use_dual`` (the
    explorer's checkbox), so that every control is an argument of the figure."""
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
    return explorer(clip_explorer_figure, controls, grid, before_draw=disable_dual)


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


def learning_curves_figure(results, *, fig=None):
    """Expected reward against completions sampled, for each method: the mean over seeds
    (line), one standard deviation (band) and each seed (thin lines)."""
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(7, 4))
    fig.clear()
    ax = fig.subplots()
    colors = {"ppo": "#e1812c", "grpo": "#3b75af"}
    for method, res in results.items():
        x, R = res["samples"], res["reward"]                       # (I+1,), (seeds, I+1)
        mean, sd = R.mean(axis=0), R.std(axis=0)
        label = {"ppo": "PPO (critic + GAE)", "grpo": "GRPO (group baseline)"}[method]
        ax.plot(x, mean, color=colors[method], lw=2, label=f"{label}, {len(R)} seeds")
        ax.fill_between(x, mean - sd, mean + sd, color=colors[method], alpha=0.25)
        for row in R:
            ax.plot(x, row, color=colors[method], lw=0.5, alpha=0.5)
    ax.set_xlabel("completions sampled (the same budget for both)")
    ax.set_ylabel("expected reward (fraction of tokens right)")
    ax.set_ylim(0, 1.02)
    final = " vs ".join(f"{m.upper()} {r['reward'][:, -1].mean():.2f} ± {r['reward'][:, -1].std():.2f}"
                        for m, r in results.items())
    ax.set_title(f"Same sample budget; final reward {final}", fontsize=10)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    return fig
