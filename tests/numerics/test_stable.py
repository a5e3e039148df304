"""The careful numerics, one helper at a time: hand-worked numbers, the failure each one
prevents (shown naively first), invariants (hypothesis), and bad input."""

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl

groups = hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 8)),
                    elements=st.floats(-1e6, 1e6))


# --- centred_deviations --------------------------------------------------------------------------

def test_centred_deviations_by_hand():
    # rows: mean 3 -> (-2, -1, 3); a constant row of 0.1 -> exact zeros
    out = gl.centred_deviations(np.array([[1.0, 2.0, 6.0], [0.1, 0.1, 0.1]]))
    np.testing.assert_array_equal(out, [[-2.0, -1.0, 3.0], [0.0, 0.0, 0.0]])


def test_naive_mean_removal_leaves_noise_in_a_constant_row_centred_does_not():
    x = np.full((1, 3), 0.1)
    assert np.any(x - x.mean(axis=-1, keepdims=True) != 0)        # 0.1 + 0.1 + 0.1 != 0.3
    assert np.all(gl.centred_deviations(x) == 0)


def test_centred_deviations_with_a_mask_ignore_padding_whatever_it_holds():
    x = np.array([[9.0, 1.0, 3.0, -7.0], [2.0, 4.0, 1e300, 0.0]])
    mask = np.array([[False, True, True, False], [True, True, False, False]])
    np.testing.assert_array_equal(gl.centred_deviations(x, mask=mask),
                                  [[0.0, -1.0, 1.0, 0.0], [-1.0, 1.0, 0.0, 0.0]])


@given(groups)
def test_centred_deviations_sum_to_zero_and_match_the_float64_formula(x):
    dev = gl.centred_deviations(x)
    scale = np.abs(x).max() + 1.0
    np.testing.assert_allclose(dev.sum(axis=-1), 0.0, atol=1e-9 * scale)
    np.testing.assert_allclose(dev, x - x.mean(axis=-1, keepdims=True), atol=1e-9 * scale)


@given(groups, st.floats(-1e3, 1e3))
def test_centred_deviations_do_not_see_a_shift_of_a_constant_row(x, c):
    const = np.full_like(x, c)
    assert np.all(gl.centred_deviations(const) == 0)              # any constant: exact zeros


# --- std_from_deviations, power of two, divide_or_zero ---------------------------------------

def test_std_from_deviations_by_hand_population_bessel_and_ragged_counts():
    dev = np.array([[-1.0, 1.0, -1.0, 1.0]])
    assert gl.std_from_deviations(dev)[0, 0] == 1.0                         # sqrt(4 / 4)
    assert gl.std_from_deviations(dev, ddof=1)[0, 0] == pytest.approx(np.sqrt(4 / 3))
    ragged = np.array([[-1.0, 1.0, 0.0, 0.0], [-2.0, 0.0, 2.0, 0.0]])    # padding is 0
    std = gl.std_from_deviations(ragged, count=np.array([[2], [3]]))
    np.testing.assert_allclose(std, [[1.0], [np.sqrt(8 / 3)]])
    assert std.shape == (2, 1)


def test_power_of_two_rescale_is_exact_and_brings_everything_below_one():
    x = np.array([3.0, -6.0, 0.5, 1e-300])
    scaled, k = gl.power_of_two_rescale(x)
    assert k == 3 and isinstance(k, int)
    assert np.abs(scaled).max() < 1 and np.abs(scaled).max() >= 0.5
    np.testing.assert_array_equal(gl.scale_by_power_of_two(scaled, k), x)   # bit for bit


def test_power_of_two_rescale_lets_huge_values_be_squared():
    x = np.array([1e300, -3e299])
    with np.errstate(over="ignore"):
        assert np.isinf(x * x).all()                                # the naive square overflows
    scaled, k = gl.power_of_two_rescale(x)
    assert np.isfinite(scaled * scaled).all()


def test_power_of_two_rescale_of_zeros_is_zeros_with_k_zero():
    scaled, k = gl.power_of_two_rescale(np.zeros(3))
    assert k == 0 and np.all(scaled == 0)


normal_values = st.floats(-1e100, 1e100).filter(lambda v: v == 0 or abs(v) > 1e-100)


@given(hnp.arrays(np.float64, st.integers(1, 20), elements=normal_values), st.integers(-50, 50))
def test_scaling_by_powers_of_two_round_trips_exactly(x, j):
    # exact while nothing underflows: values 2**1000 below the largest would (and then
    # they are far below one rounding of it)
    scaled, k = gl.power_of_two_rescale(x)
    np.testing.assert_array_equal(gl.scale_by_power_of_two(scaled, k), x)
    np.testing.assert_array_equal(gl.scale_by_power_of_two(gl.scale_by_power_of_two(scaled, j), -j),
                                  scaled)


def test_scale_by_power_of_two_overflows_to_inf_quietly_and_takes_scalars():
    assert np.isinf(gl.scale_by_power_of_two(np.array([1e308]), 10)).all()   # no warning
    assert gl.scale_by_power_of_two(1e-8, 3) == 8e-8


def test_divide_or_zero_reads_zero_over_zero_as_zero():
    num = np.array([[1.0, -1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(gl.divide_or_zero(num, np.array([[0.5], [0.0]])),
                                  [[2.0, -2.0], [0.0, 0.0]])
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.array(0.0) / np.array(0.0))               # what it replaces


# --- the k3 series -----------------------------------------------------------------------------

def exact_k3(d):
    """e^{-d} + d - 1 at 50 digits (mpmath)."""
    with mpmath.workdps(50):
        return float(mpmath.exp(-mpmath.mpf(d)) + mpmath.mpf(d) - 1)


@pytest.mark.parametrize("d", [1e-12, -1e-9, 1e-6, -3e-4, 0.01, -0.05, 0.0999])
def test_k3_series_is_accurate_where_the_direct_formula_cancels(d):
    exact = exact_k3(d)
    assert gl.k3_series(np.array([d]))[0] == pytest.approx(exact, rel=4e-16)
    naive = np.exp(-d) + d - 1
    if abs(d) < 1e-6:
        assert abs(naive - exact) > 0.5 * abs(exact)                # the naive one lost it all


def test_k3_series_by_hand_and_at_zero():
    # d^2/2 - d^3/6 = 5e-19 - 1.7e-28; e^0.05 - 1.05 = 0.00127109637602403...
    np.testing.assert_allclose(gl.k3_series(np.array([1e-9, -0.05])),
                               [exact_k3(1e-9), exact_k3(-0.05)], rtol=4e-16)
    assert gl.k3_series(np.array([1e-9]))[0] == pytest.approx(5e-19, rel=1e-9)
    assert gl.k3_series(np.array([0.0]))[0] == 0.0
    assert gl.k3_series(np.zeros(0)).shape == (0,)                  # an empty selection is fine


@pytest.mark.parametrize("d", [0.099, 0.1, -0.1, 0.5, -2.0, 30.0, -300.0, -700.0])
def test_k3_from_log_ratio_is_accurate_on_both_sides_of_the_switch(d):
    assert gl.k3_from_log_ratio(np.array([d]))[0] == pytest.approx(exact_k3(d), rel=1e-15)


def test_k3_from_log_ratio_overflows_to_inf_never_nan():
    out = gl.k3_from_log_ratio(np.array([-800.0, -np.inf, np.inf, 0.0]))
    assert np.isinf(out[:2]).all() and out[2] == np.inf and out[3] == 0.0
    assert not np.isnan(out).any()


@given(hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(-50, 50)))
def test_k3_is_never_negative_and_zero_only_at_zero(d):
    k = gl.k3_from_log_ratio(d)
    assert np.all(k >= 0)
    assert np.all(k[d == 0] == 0)
    assert np.all(k[np.abs(d) > 1e-150] > 0)            # below, d^2 / 2 underflows to 0


# --- logsumexp, log_ratio, masked_mean --------------------------------------------------------

def test_logsumexp_by_hand_without_overflow():
    np.testing.assert_allclose(gl.logsumexp(np.array([[1000.0, 1000.0], [0.0, np.log(3.0)]])),
                               [[1000.0 + np.log(2.0)], [np.log(4.0)]], rtol=1e-15)
    with np.errstate(over="ignore"):
        assert np.isinf(np.log(np.exp(np.array([1000.0])).sum()))   # the naive one


@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 10)),
                  elements=st.floats(-300, 300)), st.floats(-500, 500))
def test_logsumexp_shifts_with_its_input(z, c):
    np.testing.assert_allclose(gl.logsumexp(z + c), gl.logsumexp(z) + c, rtol=1e-12, atol=1e-9)
    assert np.all(gl.logsumexp(z) >= z.max(axis=-1, keepdims=True))


def test_log_ratio_by_hand_with_and_without_clamp():
    lp, old = np.array([-0.5, -1.0, -30.0]), np.array([-15.5, -1.5, 0.0])
    np.testing.assert_array_equal(gl.log_ratio(lp, old), [15.0, 0.5, -30.0])
    np.testing.assert_array_equal(gl.log_ratio(lp, old, clamp=10.0), [10.0, 0.5, -10.0])
    assert np.isinf(gl.log_ratio(np.array([1e308]), np.array([-1e308]))).all()  # quietly


def test_the_ratio_from_the_log_ratio_survives_where_the_quotient_is_zero_over_zero():
    lp, old = np.array([-800.0]), np.array([-800.5])
    with np.errstate(invalid="ignore", under="ignore"):
        assert np.isnan(np.exp(lp) / np.exp(old)).all()             # e^-800 is 0: 0 / 0
    np.testing.assert_allclose(np.exp(gl.log_ratio(lp, old)), [np.exp(0.5)])


def test_masked_mean_over_all_and_per_row_ignores_padding():
    x = np.array([[1.0, 3.0, 99.0], [2.0, 2.0, -1e300]])
    mask = [[1, 1, 0], [1, 1, 0]]
    assert gl.masked_mean(x, mask) == 2.0
    np.testing.assert_array_equal(gl.masked_mean(x, mask, axis=-1), [2.0, 2.0])
    assert gl.masked_mean(np.array([True, False, True]), [1, 1, 0]) == 0.5   # a fraction


def test_building_blocks_keep_a_float32_input_float32():
    x = np.array([[1.0, 2.0, 4.0]], dtype=np.float32)
    for out in (gl.centred_deviations(x), gl.logsumexp(x), gl.power_of_two_rescale(x)[0]):
        assert out.dtype == np.float32
    assert gl.k3_from_log_ratio(np.array([0.5, 1e-3], dtype=np.float32)).dtype == np.float32
    assert gl.k3_from_log_ratio(np.array([0.5], dtype=ml_dtypes.bfloat16)).dtype.kind == "f"


# --- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, message", [
    (lambda: gl.centred_deviations("abc"), TypeError, r"x: expected a numeric array, got str"),
    (lambda: gl.centred_deviations(np.float64(1.0)), ValueError,
     r"x: expected an array with at least 1 dimension, got a 0-D"),
    (lambda: gl.centred_deviations(np.zeros((2, 0))), ValueError, r"x: expected a non-empty array"),
    (lambda: gl.centred_deviations(np.ones((1, 3)), mask=np.ones((1, 2), bool)), ValueError,
     r"mask: expected shape \(1, 3\) \(the shape of x\)"),
    (lambda: gl.centred_deviations(np.ones((1, 3)), mask=[[1, 0.5, 1]]), ValueError,
     r"mask: expected only 0 and 1"),
    (lambda: gl.power_of_two_rescale([]), ValueError, r"x: expected a non-empty array"),
    (lambda: gl.scale_by_power_of_two(np.ones(2), 1.5), TypeError,
     r"k: expected an integer, got float 1.5"),
    (lambda: gl.logsumexp([[1 + 2j]]), TypeError, r"z: expected a real numeric dtype"),
    (lambda: gl.log_ratio(np.zeros(3), np.zeros(2)), ValueError,
     r"old_logp: expected shape \(3,\) \(the shape of logp; nothing is broadcast\)"),
    (lambda: gl.log_ratio(np.zeros(3), np.zeros(3), clamp=0.0), ValueError,
     r"clamp: expected a number > 0.0, got 0.0"),
    (lambda: gl.masked_mean(np.ones((2, 2)), np.ones(2, bool)), ValueError,
     r"mask: expected shape \(2, 2\)"),
    (lambda: gl.k3_series(None), TypeError, r"d: expected a numeric array, got NoneType"),
    (lambda: gl.std_from_deviations(["a"]), TypeError, r"dev: expected a real numeric dtype"),
    (lambda: gl.divide_or_zero("x", 1.0), TypeError, r"num: expected a numeric array"),
])
def test_bad_input_is_refused_with_a_message(call, exc, message):
    with pytest.raises(exc, match=message):
        call()
