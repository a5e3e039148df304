"""Tests of gl.gae: hand-worked numbers, the lambda = 0 and lambda = 1 limits, invariants, bad input.

Chapter 2 ("The two limits") checks both limits on four random episodes of 12 tokens; the two
hypothesis tests of the limits below check the same over 300 random episodes each, and the bad
input tests hold the door that chapter 2's "The package's guards" shows (no bootstrap value,
lambda outside [0, 1])."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False, width=64)
unit = st.floats(0, 1)


@st.composite
def episodes(draw):
    """(rewards (N, T), values (N, T+1)) with 1 <= N <= 4, 1 <= T <= 12."""
    n = draw(st.integers(1, 4))
    t = draw(st.integers(1, 12))
    rewards = draw(hnp.arrays(np.float64, (n, t), elements=finite))
    values = draw(hnp.arrays(np.float64, (n, t + 1), elements=finite))
    return rewards, values


# --- hand-worked numbers -------------------------------------------------------------------

def test_worked_example_by_hand():
    # rewards [1, 0, 2], values [0.5, 1, 0.5, 0.25], gamma 0.9, lam 0.5:
    # delta_0 = 1 + 0.9*1    - 0.5 =  1.4
    # delta_1 = 0 + 0.9*0.5  - 1   = -0.55
    # delta_2 = 2 + 0.9*0.25 - 0.5 =  1.725
    # A_2 = 1.725
    # A_1 = -0.55 + 0.45*1.725   =  0.22625
    # A_0 =  1.4  + 0.45*0.22625 =  1.5018125
    adv, ret = gl.gae([1.0, 0.0, 2.0], [0.5, 1.0, 0.5, 0.25], gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv, [1.5018125, 0.22625, 1.725], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ret, [2.0018125, 1.22625, 2.225], rtol=0, atol=1e-12)


def test_docstring_example_terminal_reward():
    adv, ret = gl.gae([0, 0, 1], [0.5, 0.5, 0.5, 0.0], gamma=1.0, lam=1.0)
    np.testing.assert_array_equal(adv, [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(ret, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(gl.gae([0, 0, 1], [0.5, 0.5, 0.5, 0.0], lam=0.0)[0], [0, 0, 0.5])
    np.testing.assert_array_equal(gl.gae([0, 0, 1], [0.5, 0.5, 0.5, 0.0], lam=0.5)[0],
                                  [0.125, 0.25, 0.5])


def test_lambda_zero_is_one_step_td_error_by_hand():
    # gamma 0.5: delta = r + 0.5 V_next - V
    adv, ret = gl.gae([[1.0, 2.0]], [[4.0, 2.0, 8.0]], gamma=0.5, lam=0.0)
    np.testing.assert_array_equal(adv, [[1 + 1 - 4, 2 + 4 - 2]])       # [-2, 4]
    np.testing.assert_array_equal(ret, [[1 + 0.5 * 2, 2 + 0.5 * 8]])   # r + gamma V_next


def test_lambda_one_is_discounted_return_minus_baseline_by_hand():
    # gamma 0.5, rewards [1, 2], V_T = 8: returns G_1 = 2 + 0.5*8 = 6, G_0 = 1 + 0.5*6 = 4
    adv, ret = gl.gae([1.0, 2.0], [3.0, 100.0, 8.0], gamma=0.5, lam=1.0)
    np.testing.assert_array_equal(ret, [4.0, 6.0])
    np.testing.assert_array_equal(adv, [4.0 - 3.0, 6.0 - 100.0])


def test_padding_after_the_end_does_not_leak():
    # One sequence of length 2 padded to 4: reward 0 and value 0 after the end.
    adv_short, ret_short = gl.gae([0.0, 1.0], [0.3, 0.6, 0.0], lam=0.9)
    adv_pad, ret_pad = gl.gae([0.0, 1.0, 0.0, 0.0], [0.3, 0.6, 0.0, 0.0, 0.0], lam=0.9)
    np.testing.assert_array_equal(adv_pad[:2], adv_short)
    np.testing.assert_array_equal(adv_pad[2:], [0.0, 0.0])
    np.testing.assert_array_equal(ret_pad[:2], ret_short)


# --- the two limits and invariants, over random episodes -----------------------------------

@settings(max_examples=300, deadline=None)
@given(episodes(), unit)
def test_lambda_zero_limit_is_td_error(ep, gamma):
    r, v = ep
    adv, ret = gl.gae(r, v, gamma=gamma, lam=0.0)
    np.testing.assert_allclose(adv, r + gamma * v[:, 1:] - v[:, :-1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret, r + gamma * v[:, 1:], rtol=1e-12, atol=1e-12)


@settings(max_examples=300, deadline=None)
@given(episodes(), unit)
def test_lambda_one_limit_is_monte_carlo_return_minus_value(ep, gamma):
    r, v = ep
    T = r.shape[1]
    adv, ret = gl.gae(r, v, gamma=gamma, lam=1.0)
    expected_ret = np.empty_like(r)
    for t in range(T):
        discounts = gamma ** np.arange(T - t)
        expected_ret[:, t] = (r[:, t:] * discounts).sum(axis=1) + gamma ** (T - t) * v[:, T]
    np.testing.assert_allclose(ret, expected_ret, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(adv, expected_ret - v[:, :T], rtol=1e-9, atol=1e-9)


@settings(max_examples=300, deadline=None)
@given(episodes(), unit, unit)
def test_recursion_equals_the_explicit_sum_of_td_errors(ep, gamma, lam):
    r, v = ep
    T = r.shape[1]
    delta = r + gamma * v[:, 1:] - v[:, :-1]
    expected = np.stack([(delta[:, t:] * (gamma * lam) ** np.arange(T - t)).sum(axis=1)
                         for t in range(T)], axis=1)
    adv, ret = gl.gae(r, v, gamma=gamma, lam=lam)
    np.testing.assert_allclose(adv, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ret - v[:, :T], adv, rtol=1e-9, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(episodes(), unit)
def test_rows_are_independent_and_1d_matches_2d(ep, lam):
    r, v = ep
    adv, ret = gl.gae(r, v, gamma=0.99, lam=lam)
    for i in range(r.shape[0]):
        a_i, r_i = gl.gae(r[i], v[i], gamma=0.99, lam=lam)
        np.testing.assert_array_equal(a_i, adv[i])
        np.testing.assert_array_equal(r_i, ret[i])


@settings(max_examples=200, deadline=None)
@given(episodes(), st.floats(0.1, 10))
def test_advantages_scale_with_rewards_and_values(ep, c):
    r, v = ep
    adv, _ = gl.gae(r, v, gamma=0.9, lam=0.7)
    adv_c, _ = gl.gae(c * r, c * v, gamma=0.9, lam=0.7)
    np.testing.assert_allclose(adv_c, c * adv, rtol=1e-9, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(episodes(), finite)
def test_lambda_one_gamma_one_ignores_the_middle_values(ep, shift):
    # With gamma = lam = 1 the TD errors telescope: A_t + V_t = sum of rewards + V_T,
    # whatever the critic says about the states in between.
    r, v = ep
    v2 = v.copy()
    v2[:, 1:-1] += shift
    _, ret = gl.gae(r, v, gamma=1.0, lam=1.0)
    _, ret2 = gl.gae(r, v2, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(ret, ret2, rtol=1e-9, atol=1e-9)


def test_inputs_are_not_modified_and_dtypes():
    r = np.array([0.0, 1.0], dtype=np.float32)
    v = np.array([0.5, 0.5, 0.0], dtype=np.float32)
    r0, v0 = r.copy(), v.copy()
    adv, ret = gl.gae(r, v, lam=0.95)
    np.testing.assert_array_equal(r, r0)
    np.testing.assert_array_equal(v, v0)
    assert adv.dtype == np.float32 and ret.dtype == np.float32
    bf = np.dtype(ml_dtypes.bfloat16)
    adv, _ = gl.gae(r.astype(bf), v.astype(bf))
    assert adv.dtype == bf
    adv, _ = gl.gae([0, 1], [0.5, 0.5, 0.0])          # ints and floats -> float64
    assert adv.dtype == np.float64
    adv, _ = gl.gae(r.astype(bf), v.astype(np.float16))  # no common NumPy type -> float32
    assert adv.dtype == np.float32


def test_float16_overflow_is_an_error_not_inf():
    r = np.full(3, 60000.0, dtype=np.float16)
    v = np.zeros(4, dtype=np.float16)
    with pytest.raises(ValueError, match=r"do not fit in float16"):
        gl.gae(r, v)


# --- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("rewards, values, exc, message", [
    ([0.0, 1.0], [0.5, 0.5], ValueError,
     r"values: expected shape \(3,\) \(the rewards' shape with one more step.*got a 1-D float64 array of shape \(2,\)"),
    ([[0.0, 1.0]], [0.5, 0.5, 0.0], ValueError, r"values: expected shape \(1, 3\)"),
    ([[0.0, 1.0], [1.0, 0.0]], [[0.5, 0.5, 0.0]], ValueError, r"values: expected shape \(2, 3\)"),
    (np.zeros((1, 2, 3)), np.zeros((1, 2, 4)), ValueError,
     r"rewards: expected a 1-D \(T,\) or 2-D \(N, T\) array, got a 3-D"),
    ([], [0.0], ValueError, r"rewards: expected a non-empty array"),
    ([0.0, np.nan], [0.0, 0.0, 0.0], ValueError, r"rewards: expected finite values, got nan at index \(1,\)"),
    ([0.0, 1.0], [0.0, np.inf, 0.0], ValueError, r"values: expected finite values, got inf"),
    ("01", [0.0, 0.0, 0.0], TypeError, r"rewards: expected a numeric array"),
    ([0.0, 1.0], ["a", "b", "c"], TypeError, r"values: expected a real numeric dtype"),
])
def test_bad_arrays(rewards, values, exc, message):
    with pytest.raises(exc, match=message):
        gl.gae(rewards, values)


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"gamma": 1.5}, ValueError, r"gamma: expected a number <= 1.0, got 1.5"),
    ({"gamma": -0.1}, ValueError, r"gamma: expected a number >= 0.0, got -0.1"),
    ({"lam": 2}, ValueError, r"lam: expected a number <= 1.0, got 2.0"),
    ({"lam": -1e-9}, ValueError, r"lam: expected a number >= 0.0"),
    ({"lam": True}, TypeError, r"lam: expected a real number, got bool True"),
    ({"gamma": "0.9"}, TypeError, r"gamma: expected a real number, got str '0.9'"),
    ({"lam": float("nan")}, ValueError, r"lam: expected a finite number, got nan"),
    ({"gamma": np.array([0.9])}, TypeError, r"gamma: expected a real number, got a 1-D float64 array"),
])
def test_bad_gamma_and_lambda(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        gl.gae([0.0, 1.0], [0.0, 0.0, 0.0], **kwargs)
