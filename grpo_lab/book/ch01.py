"""Chapter 1's figure and sliders (``chapters/01_group_advantages.ipynb``).

* ``advantage_explorer_figure``: the advantages of many simulated groups of ``G`` rewards and
  the spread of the group-std estimate, for one setting of the sliders;
* ``advantage_explorer``: sliders for G, the reward spread and the reward distribution, live
  in Jupyter and precomputed on the static site (:func:`grpo_lab.book.sliders.explorer`).

The figure is a plain function of the slider values, so it is drawn and tested without a
browser.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import SCALES, group_advantages
from grpo_lab.theory.group_stats import (REWARD_KINDS, sample_rewards, true_reward_std,
                                         zero_spread_probability)
from grpo_lab.book.frames import describe_figures

# In IPython, every figure shown carries its alt text (its title, panels and axes) as
# output metadata, which the site puts on the page (gl.book.frames.describe_figures).
describe_figures()

__all__ = ["ADVANTAGE_GRID", "advantage_explorer_figure", "advantage_explorer"]

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


# The static page offers these values (frames drawn when the book builds, see gl.book.sliders):
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
    ``G``, ``spread`` and ``scale`` move over ``ADVANTAGE_GRID`` (see ``gl.book.sliders``).
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
