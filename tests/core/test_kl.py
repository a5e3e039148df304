"""kl_k1, kl_k2, kl_k3: worked numbers, numerics, properties, the gradient claims (checked
against the exact answers of gl.kl_theory), bad input."""

import re

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import grpo_lab as gl

ESTIMATORS = [gl.kl_k1, gl.kl_k2, gl.kl_k3]
LOW_AND_FULL = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
LOG2 = np.log(2.0)


def k3_exact(r):
    """exp(r) - r - 1 in 50-digit arithmetic, rounded once to float64."""
    with mpmath.workdps(50):
        r = mpmath.mpf(float(r))
        return float(mpmath.exp(r) - r - 1)


# --- worked numbers -------------------------------------------------------------------------

def test_worked_example_both_directions():
    # token 0: pi_theta = 1/2, pi_ref = 1/4 (d = +log 2); token 1 the other way (d = -log 2)
    logp, ref_logp = np.log([0.5, 0.25]), np.log([0.25, 0.5])
    np.testing.assert_allclose(gl.kl_k1(logp, ref_logp), [LOG2, -LOG2], rtol=1e-15)
    np.testing.assert_allclose(gl.kl_k2(logp, ref_logp), [LOG2 ** 2 / 2] * 2, rtol=1e-15)
    # k3 = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1: 1/2 + log 2 - 1 and 2 - log 2 - 1
    np.testing.assert_allclose(gl.kl_k3(logp, ref_logp), [LOG2 - 0.5, 1 - LOG2], rtol=1e-15)


def test_k3_punishes_tokens_the_reference_prefers_more():
    # same |log-ratio| 3: pi_ref 20x more likely gives e^3 - 4; 20x less likely gives 2 + e^-3
    k = gl.kl_k3([-3.0, 0.0], [0.0, -3.0])
    np.testing.assert_allclose(k, [np.exp(3) - 4, np.exp(-3) + 2], rtol=1e-15)
    assert k[0] > 7 * k[1]


def test_batch_of_sequences_keeps_shape_and_is_elementwise():
    rng = np.random.default_rng(0)
    logp = np.log(rng.uniform(0.01, 1, size=(4, 7)))          # (N, T)
    ref_logp = np.log(rng.uniform(0.01, 1, size=(4, 7)))      # (N, T)
    d = logp - ref_logp
    for fn, expected in [(gl.kl_k1, d), (gl.kl_k2, d * d / 2), (gl.kl_k3, np.exp(-d) + d - 1)]:
        out = fn(logp, ref_logp)
        assert out.shape == (4, 7) and out.dtype == np.float64
        np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-16)
        np.testing.assert_array_equal(fn(logp[2], ref_logp[2]), out[2])
    three_d = gl.kl_k3(logp.reshape(2, 2, 7), ref_logp.reshape(2, 2, 7))
    np.testing.assert_array_equal(three_d, gl.kl_k3(logp, ref_logp).reshape(2, 2, 7))


def test_inputs_are_not_modified():
    logp = np.array([[-1.0, -2.0]], dtype=np.float32)
    ref_logp = np.array([[-2.0, -1.0]], dtype=np.float32)
    before = logp.copy(), ref_logp.copy()
    for fn in ESTIMATORS:
        fn(logp, ref_logp, clamp=0.5)
    np.testing.assert_array_equal(logp, before[0])
    np.testing.assert_array_equal(ref_logp, before[1])


# --- dtypes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", LOW_AND_FULL)
@pytest.mark.parametrize("fn", ESTIMATORS)
def test_float_dtype_is_kept_and_value_is_float64_rounded_once(fn, dtype):
    logp = np.array([-0.1, -2.5, -7.0, -0.3], dtype=dtype)
    ref_logp = np.array([-0.2, -0.5, -6.0, -0.3], dtype=dtype)
    out = fn(logp, ref_logp)
    assert out.dtype == np.dtype(dtype)
    exact = fn(logp.astype(np.float64), ref_logp.astype(np.float64))
    np.testing.assert_array_equal(out, exact.astype(dtype))   # one rounding, at the end


def test_ints_give_float64_and_mixed_floats_give_the_wider():
    assert gl.kl_k3([0, -1], [-1, 0]).dtype == np.float64
    bf16 = np.array([-1.0], dtype=ml_dtypes.bfloat16)
    assert gl.kl_k3(bf16, np.array([0.0], np.float32)).dtype == np.float32
    assert gl.kl_k3(np.array([0.0], np.float32), np.array([-1.0])).dtype == np.float64
    # bfloat16 and float16 have no NumPy common type: float32 holds both exactly
    assert gl.kl_k3(bf16, np.array([0.0], np.float16)).dtype == np.float32


# --- numerics -------------------------------------------------------------------------------

@pytest.mark.parametrize("r", [1e-12, -1e-12, 3e-9, -7e-6, 1e-3, -0.04, 0.0999999, 0.1,
                               -0.1, 0.1000001, 0.5, -2.0, 30.0, -300.0, 700.0])
def test_k3_is_accurate_to_a_few_ulp_at_every_gap(r):
    got = gl.kl_k3([0.0], [r])[0]
    assert got == pytest.approx(k3_exact(r), rel=8 * np.finfo(float).eps, abs=0)


def test_k3_of_tiny_gap_is_not_cancelled_to_zero():
    # exp(r) - r - 1 in float64 gives 0 (all digits cancel) for r = 1e-9; the answer is 5e-19
    naive = np.exp(1e-9) - 1e-9 - 1
    assert abs(naive - 5e-19) > 0.5 * 5e-19
    assert gl.kl_k3([0.0], [1e-9])[0] == pytest.approx(5e-19, rel=1e-8)


def test_large_gaps_do_not_overflow_silently():
    # pi_theta far more likely than pi_ref: k3 = -r - 1 grows only linearly
    assert gl.kl_k3([0.0], [-1000.0])[0] == pytest.approx(999.0, rel=1e-15)
    # pi_ref far more likely: e^700 still fits float64 ...
    assert np.isfinite(gl.kl_k3([-700.0], [0.0])[0])
    # ... e^800 does not: an error that says what to do, not an inf
    with pytest.raises(ValueError, match=r"k3 estimate that fits in float64.*clamp"):
        gl.kl_k3([-800.0], [0.0])
    # float32 log-probs: e^100 fits the float64 working precision but not float32
    with pytest.raises(ValueError, match=r"fits in float32, got 2.688e\+43 at index \(0, 1\)"):
        gl.kl_k3(np.float32([[0.0, -100.0]]), np.float32([[0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"k2 estimate that fits in float16"):
        gl.kl_k2(np.float16([-60000.0]), np.float16([0.0]))


def test_clamp_clips_like_verl_and_removes_the_overflow():
    out = gl.kl_k3(np.float32([[0.0, -100.0, -0.5]]), np.float32([[0.0, 0.0, 0.0]]),
                   clamp=10.0)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[0, :2], [0.0, 10.0])
    assert out[0, 2] == np.float32(np.exp(0.5) - 1.5)          # in range: untouched
    np.testing.assert_array_equal(gl.kl_k3([-1e308], [1e308], clamp=10), [10.0])   # r = inf
    np.testing.assert_array_equal(gl.kl_k1([-3.0, 3.0, 0.5], [0.0, 0.0, 0.0], clamp=1),
                                  [-1.0, 1.0, 0.5])             # k1 is clipped both ways
    np.testing.assert_array_equal(gl.kl_k2([-3.0, 0.5], [0.0, 0.0], clamp=1), [1.0, 0.125])


def test_clamp_leaves_values_in_range_bit_identical():
    rng = np.random.default_rng(1)
    logp, ref_logp = rng.normal(size=(3, 50)), rng.normal(size=(3, 50))
    for fn in ESTIMATORS:
        free = fn(logp, ref_logp)
        clipped = fn(logp, ref_logp, clamp=float(np.abs(free).max()) + 1)
        np.testing.assert_array_equal(clipped, free)


# --- properties (hypothesis, >= 200 examples each: tests/conftest.py) -----------------------

log_probs = st.floats(-60.0, 0.0, allow_nan=False, width=64)
shapes = st.tuples(st.integers(1, 4), st.integers(1, 12))


@st.composite
def logp_pairs(draw, dtype=np.float64):
    shape = draw(shapes)
    logp = draw(arrays(dtype, shape, elements=log_probs))
    ref_logp = draw(arrays(dtype, shape, elements=log_probs))
    return logp, ref_logp


@given(logp_pairs())
def test_k2_and_k3_are_never_negative(pair):
    logp, ref_logp = pair
    assert np.all(gl.kl_k2(logp, ref_logp) >= 0)
    assert np.all(gl.kl_k3(logp, ref_logp) >= 0)


@given(logp_pairs(np.float32))
def test_k2_and_k3_are_never_negative_in_float32(pair):
    logp, ref_logp = pair
    assert np.all(gl.kl_k2(logp, ref_logp, clamp=1e30) >= 0)
    assert np.all(gl.kl_k3(logp, ref_logp, clamp=1e30) >= 0)


@given(logp_pairs())
def test_all_three_are_zero_exactly_where_logp_equals_ref_logp(pair):
    logp, ref_logp = pair
    ref_logp = ref_logp.copy()
    ref_logp[..., ::2] = logp[..., ::2]            # every other token: the two policies agree
    same = logp == ref_logp
    for fn in ESTIMATORS:
        out = fn(logp, ref_logp)
        np.testing.assert_array_equal(out[same], 0.0)
        if fn is not gl.kl_k1:
            # zero only there (f(r) = 0 only at r = 0), unless d^2/2 underflows float64
            squares = np.abs(logp - ref_logp) > 1e-150
            assert np.all(out[~same & squares] > 0)


@given(logp_pairs())
def test_k1_is_antisymmetric_and_k2_symmetric(pair):
    logp, ref_logp = pair
    np.testing.assert_array_equal(gl.kl_k1(logp, ref_logp), -gl.kl_k1(ref_logp, logp))
    np.testing.assert_array_equal(gl.kl_k2(logp, ref_logp), gl.kl_k2(ref_logp, logp))


@given(logp_pairs())
def test_k3_is_at_least_k2_where_the_reference_is_likelier(pair):
    # e^r - r - 1 >= r^2/2 for r >= 0 (every term of the series is >= 0), <= for r <= 0
    logp, ref_logp = pair
    r = ref_logp - logp
    k2, k3 = gl.kl_k2(logp, ref_logp), gl.kl_k3(logp, ref_logp)
    assert np.all(k3[r >= 0] >= k2[r >= 0] * (1 - 1e-15))
    assert np.all(k3[r <= 0] <= k2[r <= 0] * (1 + 1e-15))


# --- unbiasedness ---------------------------------------------------------------------------

def softmax_pair(seed, V=6, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * rng.normal(size=V), scale * rng.normal(size=V)


@pytest.mark.parametrize("seed", range(5))
def test_k1_and_k3_are_unbiased_k2_is_not(seed):
    logits, ref_logits = softmax_pair(seed)
    logp, ref_logp = gl.log_softmax(logits), gl.log_softmax(ref_logits)   # (V,), every token
    p = np.exp(logp)
    kl = gl.kl_theory.kl_categorical(logits, ref_logits)
    assert p @ gl.kl_k1(logp, ref_logp) == pytest.approx(kl, rel=1e-12)
    assert p @ gl.kl_k3(logp, ref_logp) == pytest.approx(kl, rel=1e-12)
    assert abs(p @ gl.kl_k2(logp, ref_logp) - kl) > 1e-3 * kl


@pytest.mark.parametrize("mu", [0.1, 1.0])
def test_monte_carlo_matches_the_gaussian_closed_form(mu):
    rng = np.random.default_rng(0)
    n = 400_000
    x = rng.standard_normal(n)                    # x ~ pi_theta = N(0, 1)
    logp, ref_logp = -0.5 * x ** 2, -0.5 * (x - mu) ** 2    # constants cancel in the ratio
    exact = gl.kl_theory.gaussian_estimator_moments(mu)
    for name, fn in zip(("k1", "k2", "k3"), ESTIMATORS):
        k = fn(logp, ref_logp)
        se = exact[name]["std"] / np.sqrt(n)
        assert abs(k.mean() - exact[name]["mean"]) < 5 * se, name
        assert k.std() == pytest.approx(exact[name]["std"], rel=0.03), name


# --- the gradient claims --------------------------------------------------------------------

@given(st.integers(0, 2 ** 32 - 1), st.integers(2, 8), st.floats(0.1, 3.0))
def test_what_each_estimator_follows_as_a_loss_term(seed, V, scale):
    logits, ref_logits = softmax_pair(seed, V, scale)
    p = np.exp(gl.log_softmax(logits))                          # sampling weights, frozen
    reverse = gl.kl_theory.kl_categorical_grad(logits, ref_logits, direction="reverse")
    forward = gl.kl_theory.kl_categorical_grad(logits, ref_logits, direction="forward")
    g1, g2, g3 = (gl.kl_theory.estimator_grad_table(fn, logits, ref_logits) @ p for fn in ESTIMATORS)
    np.testing.assert_allclose(g1, 0.0, atol=1e-8)              # k1: zero in expectation
    np.testing.assert_allclose(g2, reverse, atol=1e-8)          # k2: grad KL(pi || pi_ref)
    np.testing.assert_allclose(g3, forward, atol=1e-8)          # k3: grad KL(pi_ref || pi)


def test_k3_gradient_is_not_the_reverse_kl_gradient():
    logits, ref_logits = np.array([2.0, 0.0, -1.0]), np.array([-1.0, 0.0, 2.0])
    p = np.exp(gl.log_softmax(logits))
    g3 = gl.kl_theory.estimator_grad_table(gl.kl_k3, logits, ref_logits) @ p
    reverse = gl.kl_theory.kl_categorical_grad(logits, ref_logits)
    assert np.linalg.norm(g3 - reverse) > 0.3 * np.linalg.norm(reverse)


def test_k1_in_the_reward_gives_the_reverse_kl_gradient():
    # REINFORCE with reward -k1 (detached): E[k1(x) grad log pi(x)] = grad KL(pi || pi_ref)
    logits, ref_logits = softmax_pair(7)
    logp, ref_logp = gl.log_softmax(logits), gl.log_softmax(ref_logits)
    p = np.exp(logp)
    score = gl.kl_theory.estimator_grad_table(gl.kl_k1, logits, ref_logits)   # (V, V): grad log pi(x)
    np.testing.assert_allclose(score @ (p * gl.kl_k1(logp, ref_logp)),
                               gl.kl_theory.kl_categorical_grad(logits, ref_logits), atol=1e-8)


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("logp, ref_logp, exc, message", [
    ([-1.0, -2.0], [-1.0, -2.0, -3.0], ValueError,
     "ref_logp: expected the shape of logp, (2,) (no broadcasting), got shape (3,)"),
    (np.zeros((2, 3)), np.zeros((1, 3)), ValueError,
     "ref_logp: expected the shape of logp, (2, 3) (no broadcasting), got shape (1, 3)"),
    (np.zeros((2, 3)), np.zeros(3), ValueError,
     "ref_logp: expected the shape of logp, (2, 3) (no broadcasting), got shape (3,)"),
    (-0.5, -0.5, ValueError, "logp: expected an array with at least 1 dimension"),
    ([], [], ValueError, "logp: expected a non-empty array"),
    (None, [0.0], TypeError, "logp: expected a numeric array"),
    ([0.0], "x", TypeError, "ref_logp: expected a numeric array"),
    ([0.0], [1j], TypeError, "ref_logp: expected a real numeric dtype"),
    ([0.0, np.nan], [0.0, 0.0], ValueError, "logp: expected finite values, got nan at index (1,)"),
    ([0.0], [-np.inf], ValueError, "ref_logp: expected finite values, got -inf at index (0,)"),
])
def test_bad_arrays_are_refused_with_a_message(fn, logp, ref_logp, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        fn(logp, ref_logp)


@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("clamp, exc, message", [
    (0.0, ValueError, "clamp: expected a number > 0.0, got 0.0"),
    (-10, ValueError, "clamp: expected a number > 0.0, got -10.0"),
    (np.inf, ValueError, "clamp: expected a finite number, got inf"),
    (True, TypeError, "clamp: expected a real number, got bool True"),
    ("10", TypeError, "clamp: expected a real number, got str '10'"),
    (np.array([10.0]), TypeError,
     "clamp: expected a real number, got a 1-D float64 array of shape (1,)"),
])
def test_bad_clamp_is_refused_with_a_message(fn, clamp, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        fn([0.0], [-1.0], clamp=clamp)


# --- chapter 8: k3+, each estimator's gradient, verl's KL in the reward ----------------------------

def test_k3_plus_has_the_value_of_k3():
    lp, ref = np.log([0.5, 0.25, 0.9]), np.log([0.25, 0.5, 0.1])
    np.testing.assert_array_equal(gl.kl_k3_plus(lp, ref), gl.kl_k3(lp, ref))
    np.testing.assert_array_equal(gl.kl_k3_plus(lp, ref, clamp=0.5), gl.kl_k3(lp, ref, clamp=0.5))


@pytest.mark.parametrize("kl, fn", [("k1", gl.kl_k1), ("k2", gl.kl_k2), ("k3", gl.kl_k3)])
def test_kl_grad_logp_is_the_derivative_of_each_estimator(kl, fn):
    # central differences in float64: d = 0.693 (log 2), -1.0, 0.05
    lp, ref, h = np.array([np.log(0.5), -2.0, -0.95]), np.array([np.log(0.25), -1.0, -1.0]), 1e-6
    numeric = (fn(lp + h, ref) - fn(lp - h, ref)) / (2 * h)
    np.testing.assert_allclose(gl.kl_grad_logp(lp, ref, kl), numeric, rtol=1e-7, atol=1e-9)


def test_kl_grad_logp_by_hand():
    d = np.log(2.0)                                            # logp - ref_logp = log 2
    lp, ref = np.array([np.log(0.5)]), np.array([np.log(0.25)])
    assert gl.kl_grad_logp(lp, ref, "k1")[0] == 1.0
    assert gl.kl_grad_logp(lp, ref, "k2")[0] == pytest.approx(d, rel=1e-15)
    assert gl.kl_grad_logp(lp, ref, "k3")[0] == pytest.approx(1 - 0.5, rel=1e-15)  # 1 - e^-d
    assert gl.kl_grad_logp(lp, ref, "k3+")[0] == pytest.approx(d, rel=1e-15)       # k2's


def test_a_clipped_estimate_has_no_gradient_but_k3_plus_keeps_k2s():
    lp, ref = np.array([-20.0, -1.0]), np.array([0.0, -1.5])   # k3 of the first: e^20 - 21
    assert gl.kl_grad_logp(lp, ref, "k3", clamp=10.0).tolist() == [0.0, pytest.approx(1 - np.exp(-0.5))]
    assert gl.kl_grad_logp(lp, ref, "k3+", clamp=10.0).tolist() == [-20.0, 0.5]


def test_kl_grad_logp_refuses_an_unknown_estimator():
    with pytest.raises(ValueError, match=re.escape("kl: expected one of 'k1', 'k2', 'k3', 'k3+'")):
        gl.kl_grad_logp([0.0], [0.0], "k4")


def test_kl_shaped_rewards_by_hand():
    # Two completions of one prompt; k1 per token, summed over each completion's real tokens.
    old = np.log([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    ref = np.log([[0.25, 0.5, 0.125], [0.5, 0.25, 0.9]])
    mask = [[1, 1, 0], [1, 1, 1]]
    # row 0: log 2 + 0 (the third token is padding); row 1: 0 + log 2 + log(0.5/0.9)
    summed = np.array([np.log(2), np.log(2) + np.log(0.5 / 0.9)])
    shaped = gl.kl_shaped_rewards([[1.0, 0.0]], old, ref, mask, beta=0.1)
    np.testing.assert_allclose(shaped, [[1.0, 0.0]] - 0.1 * summed[None, :], rtol=1e-15)
    k3 = gl.kl_shaped_rewards([[1.0, 0.0]], old, ref, mask, beta=0.1, kl="k3")
    np.testing.assert_allclose(k3[0], [1.0, 0.0] - 0.1 * np.where(mask, gl.kl_k3(old, ref), 0)
                               .sum(axis=1), rtol=1e-15)
    f32 = gl.kl_shaped_rewards(np.float32([[1, 0]]), old.astype(np.float32),
                               ref.astype(np.float32), mask, beta=0.1)
    assert f32.dtype == np.float32                                  # the inputs' dtype


def test_kl_in_the_reward_before_normalising_is_scaled_by_the_group_std():
    """verl's order: the KL joins the score, so group_advantages divides it by the std."""
    rng = np.random.default_rng(3)
    old = rng.normal(-1, 0.1, (4, 5)); ref = old + rng.normal(0, 0.1, (4, 5))
    rewards = np.array([[1.0, 0.0, 1.0, 0.0]])
    shaped = gl.kl_shaped_rewards(rewards, old, ref, np.ones((4, 5)), beta=1e-3)
    assert np.all(shaped != rewards)
    adv = gl.group_advantages(shaped)
    np.testing.assert_allclose(adv.sum(), 0.0, atol=1e-12)          # still zero mean per group


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(rewards=[1.0, 0.0]), ValueError, "rewards: expected a 2-D array of shape (B, G)"),
    (dict(old_logp=np.zeros((3, 2))), ValueError,
     "old_logp: expected shape (B*G, T) = (2, T), one row per reward"),
    (dict(old_logp=[[0.0, np.nan], [0.0, 0.0]]), ValueError, "old_logp: expected finite values"),
    (dict(ref_logp=np.zeros((2, 3))), ValueError,
     "ref_logp: expected shape (2, 2) (the shape of old_logp"),
    (dict(clamp=0.0), ValueError, "clamp: expected a number > 0.0, got 0.0"),
    (dict(mask=np.ones((2, 3))), ValueError, "mask: expected"),
    (dict(beta=-1.0), ValueError, "beta: expected a number >= 0.0"),
    (dict(kl="k3+"), ValueError, "kl: expected one of 'k1', 'k2', 'k3', got 'k3+'"),
])
def test_kl_shaped_rewards_bad_input(kwargs, exc, message):
    args = dict(rewards=[[1.0, 0.0]], old_logp=np.zeros((2, 2)), ref_logp=np.zeros((2, 2)),
                mask=np.ones((2, 2)), beta=0.1)
    args.update(kwargs)
    with pytest.raises(exc, match=re.escape(message)):
        gl.kl_shaped_rewards(args.pop("rewards"), args.pop("old_logp"), args.pop("ref_logp"),
                             args.pop("mask"), **args)
