"""KL theory: Schulman's closed forms, exact KL gradients of softmaxes, the finite-difference
gradient table, and the policies a KL-regularised objective converges to.

They back two claims of chapter 3: the exact gradients of both KLs that "What gradient does
each estimator give?" compares the estimators with agree with finite differences of the exact
KL (test_exact_kl_gradients_match_finite_differences), and each policy of the table in "What
beta does" zeroes its objective's gradient
(test_regularised_policy_is_a_stationary_point_of_its_objective)."""

import re

import numpy as np
import pytest

import grpo_lab as gl


def softmax_pair(seed, V=6, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * rng.normal(size=V), scale * rng.normal(size=V)


# --- two unit Gaussians: the closed forms --------------------------------------------------------

@pytest.mark.parametrize("mu, table", [
    # Schulman, "Approximating KL Divergence": (bias/true, stdev/true) for k1, k2, k3
    (0.1, [(0, 20), (0.002, 1.42), (0, 1.42)]),
    (1.0, [(0, 2), (0.25, 1.73), (0, 1.7)]),
])
def test_closed_form_reproduces_schulmans_table(mu, table):
    m = gl.kl_theory.gaussian_estimator_moments(mu)
    for name, (bias, std) in zip(("k1", "k2", "k3"), table):
        assert (m[name]["mean"] - m["kl"]) / m["kl"] == pytest.approx(bias, abs=6e-4)
        assert m[name]["std"] / m["kl"] == pytest.approx(std, abs=6e-3)


# --- one softmax: exact gradients, the gradient table, the regularised optimum -------------------

@pytest.mark.parametrize("seed", range(5))
def test_exact_kl_gradients_match_finite_differences(seed):
    logits, ref_logits = softmax_pair(seed)
    h = 1e-6
    for direction, kl in [("reverse", gl.kl_theory.kl_categorical),
                          ("forward", lambda a, b: gl.kl_theory.kl_categorical(b, a))]:
        fd = np.array([(kl(logits + h * e, ref_logits) - kl(logits - h * e, ref_logits)) / (2 * h)
                       for e in np.eye(logits.size)])
        np.testing.assert_allclose(gl.kl_theory.kl_categorical_grad(logits, ref_logits, direction=direction),
                                   fd, atol=1e-8)


def test_grad_table_of_k1_is_the_score_function():
    logits = np.array([0.5, -1.0, 2.0])
    p = np.exp(gl.log_softmax(logits))
    J = gl.kl_theory.estimator_grad_table(gl.kl_k1, logits, np.zeros(3))
    np.testing.assert_allclose(J, np.eye(3) - p[:, None], atol=1e-9)    # [x == j] - pi_j


@pytest.mark.parametrize("beta", [0.02, 0.04, 0.3, 1.0, 10.0])
@pytest.mark.parametrize("direction", ["reverse", "forward"])
def test_regularised_policy_is_a_stationary_point_of_its_objective(beta, direction):
    # d/d logits [pi . r - beta KL] = pi * (r - pi . r) - beta * grad KL: zero at the optimum
    rewards, ref_logits = softmax_pair(3)
    pi = gl.kl_theory.kl_regularised_policy(rewards, ref_logits, beta, direction=direction)
    assert pi.sum() == pytest.approx(1.0, abs=1e-14) and np.all(pi > 0)
    logits = np.log(pi)
    grad = pi * (rewards - pi @ rewards) - beta * gl.kl_theory.kl_categorical_grad(
        logits, ref_logits, direction=direction)
    np.testing.assert_allclose(grad, 0.0, atol=1e-12)


def test_forward_kl_keeps_more_mass_on_what_the_reference_likes():
    # reverse KL tilts by e^{r/beta} and starves low-reward tokens; forward keeps beta*ref/(lam-r)
    rewards, ref_logits = np.array([1.0, 0.0, 0.0]), np.zeros(3)
    rev = gl.kl_theory.kl_regularised_policy(rewards, ref_logits, 0.1)
    fwd = gl.kl_theory.kl_regularised_policy(rewards, ref_logits, 0.1, direction="forward")
    assert rev[1] == pytest.approx(1 / (np.exp(10) + 2), rel=1e-12)
    assert fwd[1] > 50 * rev[1]


def test_log_softmax_is_the_numerics_one_and_is_not_re_exported():
    assert "log_softmax" not in gl.kl_theory.__all__
    logits, ref_logits = softmax_pair(4)
    logp, ref_logp = gl.log_softmax(logits), gl.log_softmax(ref_logits)
    assert gl.kl_theory.kl_categorical(logits, ref_logits) == pytest.approx(
        np.exp(logp) @ (logp - ref_logp), rel=1e-15)


def test_gaussian_log_probs_are_seeded_and_give_the_log_ratio_mu_x_minus_mu2_over_2():
    logp, ref_logp = gl.kl_theory.gaussian_log_probs(1.0, 3, seed=0)
    x = np.random.default_rng(0).standard_normal(3)
    np.testing.assert_allclose(ref_logp - logp, x - 0.5, rtol=1e-15)
    np.testing.assert_array_equal(gl.kl_theory.gaussian_log_probs(1.0, 3, seed=0)[0], logp)


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, message", [
    (lambda: gl.kl_theory.estimator_grad_table("k3", [0.0, 1.0], [1.0, 0.0]), TypeError,
     "estimator: expected a function such as gl.kl_k3, got str"),
    (lambda: gl.kl_theory.estimator_grad_table(gl.kl_k3, [0.0, 1.0], [1.0, 0.0], h=0), ValueError,
     "h: expected a number > 0.0, got 0.0"),
    (lambda: gl.kl_theory.kl_categorical([[0.0, 1.0]], [[1.0, 0.0]]), ValueError,
     "logits: expected a 1-D array of one value per token, shape (V,), got a 2-D float64 array"),
    (lambda: gl.kl_theory.kl_categorical([0.0, 1.0], [1.0, 0.0, 2.0]), ValueError,
     "ref_logits: expected the shape of logits, (2,), got shape (3,)"),
    (lambda: gl.kl_theory.kl_categorical([0.0], [1.0]), ValueError,
     "logits: expected V >= 2 tokens, got shape (1,)"),
    (lambda: gl.kl_theory.kl_categorical_grad([0.0, 1.0], [1.0, 0.0], direction="backward"), ValueError,
     "direction: expected one of 'reverse', 'forward', got 'backward'"),
    (lambda: gl.kl_theory.gaussian_estimator_moments(30.0), ValueError, "mu: expected |mu| <= 26.5"),
    (lambda: gl.kl_theory.gaussian_estimator_moments("1"), TypeError, "mu: expected a real number"),
    (lambda: gl.log_softmax("abc"), TypeError, "logits: expected a numeric array"),
    (lambda: gl.kl_theory.kl_regularised_policy([[1.0, 0.0]], [0.0, 0.0], 0.1), ValueError,
     "rewards: expected a 1-D array"),
    (lambda: gl.kl_theory.kl_regularised_policy([1.0, 0.0], [0.0, 0.0], 0.0), ValueError,
     "beta: expected a number > 0.0, got 0.0"),
    (lambda: gl.kl_theory.kl_regularised_policy([1.0, 0.0], [0.0], 0.1), ValueError,
     "ref_logits: expected the shape of rewards, (2,), got shape (1,)"),
    (lambda: gl.kl_theory.gaussian_log_probs(1.0, 0), ValueError, "n: expected an integer in [1, inf]"),
    (lambda: gl.kl_theory.kl_regularised_policy([1.0, 0.0], [0.0, 0.0], 0.1, direction="up"),
     ValueError, "direction: expected one of 'reverse', 'forward', got 'up'"),
])
def test_theory_helpers_refuse_bad_input(call, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        call()
