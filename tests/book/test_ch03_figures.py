"""Chapter 3's sliders: the figures are drawn without a browser and say what they show."""

import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import grpo_lab as gl  # noqa: E402
from grpo_lab.book import ch03  # noqa: E402


def title_numbers(ax):
    return [float(x) for x in re.findall(r"\d+\.?\d*", ax.get_title())]


@pytest.mark.parametrize("mu", [0.1, 1.0])
def test_estimator_figure_reports_the_closed_form_noise_ratio(mu):
    fig = ch03.kl_estimator_figure(mu, n=5_000)
    ax_hist, ax_std = fig.axes
    m = gl.kl_theory.gaussian_estimator_moments(mu)
    assert f"{m['k1']['std'] / m['k3']['std']:.1f}x less noisy than k1" in ax_std.get_title()
    logp, ref_logp = gl.kl_theory.gaussian_log_probs(mu, 5_000)
    negative = 100 * np.mean(gl.kl_k1(logp, ref_logp) < 0)
    assert f"k1 < 0 on {negative:.0f}% of tokens" in ax_hist.get_title()
    assert ax_hist.get_xlabel() and ax_hist.get_ylabel() and ax_std.get_xlabel()
    # one histogram per estimator plus the true-KL line, and the legend names them
    labels = [t.get_text() for t in ax_hist.get_legend().get_texts()]
    assert [lab.split(":")[0] for lab in labels[:3]] == ["k1", "k2", "k3"]
    assert labels[3] == f"true KL {mu * mu / 2:.3f}"


def test_estimator_figure_says_when_k1_is_the_quieter_one():
    fig = ch03.kl_estimator_figure(2.0, n=2_000)
    m = gl.kl_theory.gaussian_estimator_moments(2.0)
    expected = f"k1 is {m['k3']['std'] / m['k1']['std']:.1f}x less noisy than k3"
    assert expected in fig.axes[1].get_title()


def test_estimator_figure_is_seeded():
    a = ch03.kl_estimator_figure(0.5, n=3_000, seed=4).axes[0].get_legend().get_texts()
    b = ch03.kl_estimator_figure(0.5, n=3_000, seed=4).axes[0].get_legend().get_texts()
    assert [t.get_text() for t in a] == [t.get_text() for t in b]


@pytest.mark.parametrize("beta", [0.01, 0.1, 1.0])
def test_beta_figure_reports_the_mass_left_on_zero_reward_answers(beta):
    fig = ch03.kl_beta_figure(beta)
    toy = ch03.BETA_TOY
    low = toy["rewards"] == 0
    fwd = gl.kl_theory.kl_regularised_policy(toy["rewards"], np.log(toy["ref_probs"]), beta,
                                   direction="forward")
    rev = gl.kl_theory.kl_regularised_policy(toy["rewards"], np.log(toy["ref_probs"]), beta)
    title = fig.axes[0].get_title()
    assert f"keep {100 * fwd[low].sum():.1f}% under k3, {100 * rev[low].sum():.1f}%" in title
    assert len(fig.axes[0].patches) == 3 * len(toy["rewards"])     # 3 bars per answer


def test_explorers_redraw_when_a_slider_moves():
    box = ch03.kl_estimator_explorer(mu=0.5, n=2_000)
    before = box.figure.axes[0].get_title()
    box.controls["mu"].value = 1.5
    assert box.figure.axes[0].get_title() != before
    assert "mu = 1.50" in box.figure.axes[0].get_title()

    box = ch03.kl_beta_explorer(beta=0.1)
    box.controls["beta"].value = 1.0
    assert box.figure.axes[0].get_title().startswith("beta = 1:")
