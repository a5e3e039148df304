"""Chapter 3's figures and sliders (``chapters/03_kl_estimators.ipynb``). Each figure is a plain
function of the slider values, so it is drawn and tested without a browser; ``*_explorer()``
wires it to ipywidgets through :func:`grpo_lab.book.sliders.explorer` (live in Jupyter,
precomputed frames on the static site).

* ``kl_estimator_explorer``: the distance ``mu`` between pi_theta = N(0, 1) and
  pi_ref = N(mu, 1) redraws the distributions of k1, k2, k3 and their std/KL.
* ``kl_beta_explorer``: the KL coefficient ``beta`` redraws the policy that a reverse-KL
  penalty (KL in the reward, or k2) and a k3 loss term lead to, on a 5-token toy problem.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.theory.kl_theory import (gaussian_estimator_moments, gaussian_log_probs,
                                       kl_categorical, kl_regularised_policy)
from grpo_lab.book.frames import describe_figures

# In IPython, every figure shown carries its alt text (its title, panels and axes) as
# output metadata, which the site puts on the page (gl.book.frames.describe_figures).
describe_figures()

__all__ = ["kl_estimator_figure", "kl_estimator_explorer", "kl_beta_figure",
           "kl_beta_explorer", "BETA_TOY"]

_NAMES = ("k1", "k2", "k3")
_COLOURS = {"k1": "#3b75af", "k2": "#e1812c", "k3": "#3a923a"}

# The toy problem of the beta explorer: 5 answers, the best one rare under the reference.
BETA_TOY = {
    "tokens": ("A", "B", "C", "D", "E"),
    "rewards": np.array([1.0, 0.6, 0.2, 0.0, 0.0]),
    "ref_probs": np.array([0.05, 0.15, 0.30, 0.30, 0.20]),
}


def kl_estimator_figure(mu=0.5, n=20_000, *, seed=0, fig=None):
    """Draw chapter 3's estimator explorer for one distance ``mu`` between the policies.

    Left: histograms of k1, k2, k3 over ``n`` sampled tokens, with the true KL = mu^2/2.
    Right: std/KL of each estimator against mu, in closed form, and the Monte Carlo value at
    this ``mu``. Returns the Figure (``fig`` is cleared and reused when given).
    """
    import matplotlib.pyplot as plt

    logp, ref_logp = gaussian_log_probs(mu, n, seed)
    samples = {name: fn(logp, ref_logp) for name, fn in zip(_NAMES, (kl_k1, kl_k2, kl_k3))}
    exact = gaussian_estimator_moments(mu)
    kl = exact["kl"]

    if fig is None:
        fig = plt.figure(figsize=(10, 3.8))
    fig.clear()
    ax_hist, ax_std = fig.subplots(1, 2)

    lo, hi = np.percentile(np.concatenate(list(samples.values())), [0.5, 99.5])
    bins = np.linspace(lo, hi, 80)
    for name, k in samples.items():
        ax_hist.hist(k, bins=bins, histtype="step", lw=1.6, color=_COLOURS[name],
                     label=f"{name}: mean {k.mean():.3f}, std {k.std():.3f}")
    ax_hist.axvline(kl, color="k", ls="--", lw=1, label=f"true KL {kl:.3f}")
    ax_hist.set_yscale("log")
    ax_hist.set_xlabel("per-token estimate (nats)")
    ax_hist.set_ylabel(f"tokens (of {n})")
    negative = float(np.mean(samples["k1"] < 0))
    ax_hist.set_title(f"mu = {mu:.2f}: k1 < 0 on {100 * negative:.0f}% of tokens")
    ax_hist.legend(fontsize=8, loc="upper right")

    mus = np.linspace(0.05, 2.0, 100)
    for name in _NAMES:
        ratio = [gaussian_estimator_moments(m)[name]["std"] / gaussian_estimator_moments(m)["kl"]
                 for m in mus]
        ax_std.plot(mus, ratio, color=_COLOURS[name], label=f"{name} (closed form)")
        ax_std.plot([mu], [samples[name].std() / kl], "o", color=_COLOURS[name])
    ax_std.axvline(mu, color="grey", lw=0.8)
    ax_std.set_yscale("log")
    ax_std.set_xlabel("mu, distance between the policies (std units)")
    ax_std.set_ylabel("std / KL  (per token)")
    ratio_k1 = exact["k1"]["std"] / kl
    ratio_k3 = exact["k3"]["std"] / kl
    if ratio_k3 <= ratio_k1:
        ax_std.set_title(f"here k3 is {ratio_k1 / ratio_k3:.1f}x less noisy than k1")
    else:
        ax_std.set_title(f"here k1 is {ratio_k3 / ratio_k1:.1f}x less noisy than k3")
    ax_std.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def kl_beta_figure(beta=0.1, *, fig=None):
    """Draw chapter 3's beta explorer: where ``reward - beta * KL`` leads on ``BETA_TOY``.

    Bars: pi_ref; the optimum with the reverse KL (k1 in the reward, or k2 as a loss term);
    the optimum with the forward KL (k3 as a loss term, GRPO). Returns the Figure.
    """
    import matplotlib.pyplot as plt

    rewards, ref_p = BETA_TOY["rewards"], BETA_TOY["ref_probs"]
    ref_logits = np.log(ref_p)
    policies = {
        "pi_ref": ref_p,
        "reverse KL (k1 in reward, k2 loss)": kl_regularised_policy(rewards, ref_logits, beta),
        "forward KL (k3 loss, GRPO)": kl_regularised_policy(rewards, ref_logits, beta,
                                                           direction="forward"),
    }
    if fig is None:
        fig = plt.figure(figsize=(10, 3.6))
    fig.clear()
    ax = fig.subplots(1, 1)
    V = len(rewards)
    width = 0.8 / len(policies)
    for i, (label, p) in enumerate(policies.items()):
        kl = kl_categorical(np.log(np.maximum(p, np.finfo(float).tiny)), ref_logits)
        ax.bar(np.arange(V) + (i - 1) * width, p, width,
               label=f"{label}: reward {p @ rewards:.3f}, KL(pi||pi_ref) {kl:.3f}")
    ax.set_xticks(np.arange(V),
                  [f"{t} (r={r:g})" for t, r in zip(BETA_TOY["tokens"], rewards)])
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1)
    rev = policies["reverse KL (k1 in reward, k2 loss)"]
    fwd = policies["forward KL (k3 loss, GRPO)"]
    low = rewards == 0
    ax.set_title(f"beta = {beta:.3g}: zero-reward answers keep {100 * fwd[low].sum():.1f}% "
                 f"under k3, {100 * rev[low].sum():.1f}% under the reverse KL")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def kl_estimator_explorer(mu=0.5, n=20_000):
    """Live sliders for ``kl_estimator_figure``; returns the widget box.

    Move ``mu`` towards 0 and watch k1's std/KL explode while k2 and k3 stay near sqrt(2);
    move it past 1 and watch k2's bias and k3's right tail grow.
    """
    import ipywidgets as w

    from grpo_lab.book.sliders import explorer

    controls = {
        "mu": w.FloatSlider(value=mu, min=0.05, max=2.0, step=0.05, description="mu"),
        "n": w.Dropdown(options=[2_000, 20_000, 200_000], value=n, description="tokens"),
    }
    grid = {"mu": [0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0], "n": sorted({2_000, 20_000, n})}
    if mu not in grid["mu"]:
        grid["mu"] = sorted(grid["mu"] + [mu])
    return explorer(kl_estimator_figure, controls, grid)


def kl_beta_explorer(beta=0.1):
    """Live slider for ``kl_beta_figure``; returns the widget box.

    Small beta: both penalties let the policy collapse onto the best answer. Large beta: both
    stay at pi_ref. In between, k3's forward KL keeps mass on everything pi_ref likes.
    """
    import ipywidgets as w

    from grpo_lab.book.sliders import explorer

    controls = {
        "beta": w.FloatLogSlider(value=beta, base=10, min=-3, max=1, step=0.05,
                                 description="beta"),
    }
    grid = {"beta": sorted({0.001, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, float(beta)})}
    return explorer(kl_beta_figure, controls, grid)
