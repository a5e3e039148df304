"""group_stats (the noise of a group's statistics) and the chapter-1 sliders."""

import matplotlib
import numpy as np
import pytest

import grpo_lab as gl

matplotlib.use("Agg")


def test_zero_spread_probability_matches_simulation_and_formula():
    assert gl.group_stats.zero_spread_probability(2, 0.5) == 0.5
    assert gl.group_stats.zero_spread_probability(8, 0.9) == pytest.approx(0.9**8 + 0.1**8)
    sim = gl.group_stats.group_noise(4, pass_rate=0.3, n_groups=50_000, seed=3)["zero_spread"]
    assert sim == pytest.approx(0.3**4 + 0.7**4, abs=0.01)


def test_group_std_is_biased_low_and_bessel_less_so():
    n0 = gl.group_stats.group_noise(4, kind="continuous", ddof=0, n_groups=50_000)
    n1 = gl.group_stats.group_noise(4, kind="continuous", ddof=1, n_groups=50_000)
    # E[s] for normal samples, G=4: c4 = sqrt(2/3) * Gamma(2)/Gamma(1.5) = 0.9213 (ddof=1)
    assert n1["std_bias"] == pytest.approx(0.9213 - 1, abs=0.01)
    assert n0["std_bias"] == pytest.approx(0.9213 * np.sqrt(3 / 4) - 1, abs=0.01)
    assert n0["mean_sd"] == pytest.approx(1 / np.sqrt(4), abs=0.01)


def test_sample_rewards_kinds():
    r = gl.group_stats.sample_rewards(1000, 8, kind="pass/fail", pass_rate=0.25, spread=2.0)
    assert r.shape == (1000, 8) and set(np.unique(r)) <= {0.0, 2.0}
    assert (r == 2.0).mean() == pytest.approx(0.25, abs=0.02)
    c = gl.group_stats.sample_rewards(1000, 8, kind="continuous", spread=3.0, seed=1)
    assert c.std() == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: gl.group_stats.sample_rewards(10, 1), ValueError, r"G: expected an integer in \[2"),
    (lambda: gl.group_stats.sample_rewards(0, 4), ValueError, r"n_groups: expected an integer"),
    (lambda: gl.group_stats.sample_rewards(10, 4, pass_rate=1.5), ValueError,
     r"pass_rate: expected a probability in \[0, 1\], got 1.5"),
    (lambda: gl.group_stats.sample_rewards(10, 4, spread=0.0), ValueError,
     r"spread: expected a number > 0.0, got 0.0"),
    (lambda: gl.group_stats.sample_rewards(10, 4, kind="gaussian"), ValueError,
     r"kind: expected one of 'pass/fail', 'continuous', got 'gaussian'"),
    (lambda: gl.group_stats.group_noise(4, ddof=4), ValueError, r"ddof: expected an integer"),
])
def test_bad_sampling_arguments(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_explorer_figure_reflects_its_arguments():
    fig = gl.book.ch01.advantage_explorer_figure(G=4, pass_rate=0.9, n_groups=500)
    exact = gl.group_stats.zero_spread_probability(4, 0.9)
    assert f"exact: {100 * exact:.1f}%" in fig._suptitle.get_text()
    assert fig.axes[0].get_title().startswith("G=4:")
    fig2 = gl.book.ch01.advantage_explorer_figure(G=4, kind="continuous", scale="none",
                                                spread=100.0, n_groups=500)
    assert "scale='none'" in fig2.axes[0].get_xlabel()
    lo, hi = fig2.axes[0].get_xlim()
    assert hi - lo > 100  # advantages in reward units grow with the spread


def test_explorer_sliders_redraw_the_figure():
    box = gl.book.ch01.advantage_explorer(G=8)
    fig = box.figure
    assert fig.axes[0].get_title().startswith("G=8:")
    box.controls["G"].value = 32
    assert fig.axes[0].get_title().startswith("G=32:")
    box.controls["kind"].value = "continuous"
    assert box.controls["pass_rate"].disabled
    assert "continuous" in fig._suptitle.get_text()
    before = fig.axes[0].get_xlim()
    box.controls["scale"].value = "none"
    box.controls["spread"].value = 1000.0
    assert fig.axes[0].get_xlim()[1] > 10 * before[1]
