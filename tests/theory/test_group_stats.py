"""group_stats: the noise of a group's statistics (its explorer figure and sliders are tested
in tests/book/test_ch01_figures.py)."""

import numpy as np
import pytest

import grpo_lab as gl


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
    (lambda: gl.group_stats.group_noise(4, n_groups=0), ValueError, r"n_groups: expected an integer"),
    (lambda: gl.group_stats.zero_spread_probability(8, -0.1), ValueError,
     r"pass_rate: expected a number >= 0.0, got -0.1"),
    (lambda: gl.group_stats.true_reward_std(kind="binary"), ValueError, r"kind: expected one of"),
])
def test_bad_sampling_arguments(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()
