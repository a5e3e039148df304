"""The references the checkers grade against say what the chapters say they do."""

import numpy as np

import grpo_lab as gl
from grpo_lab.drills.ch03_kl import k3_expected_gradient
from grpo_lab.theory.kl_theory import estimator_grad_table


def test_the_k3_gradient_reference_is_the_finite_difference_gradient_of_kl_k3():
    """Chapter 3 says the checker compares with the finite-difference gradient of gl.kl_k3:
    the chain-rule expectation it uses agrees with it to the differences' own error."""
    rng = np.random.default_rng(0)
    for V in (2, 3, 6):
        z, zr = rng.normal(size=V), rng.normal(size=V)
        p = np.exp(gl.log_softmax(z))
        by_differences = estimator_grad_table(gl.kl_k3, z, zr) @ p          # (V,)
        assert np.allclose(k3_expected_gradient(z, zr), by_differences, atol=1e-9, rtol=0)
        assert np.allclose(k3_expected_gradient(z, zr), p - np.exp(gl.log_softmax(zr)),
                           atol=1e-15, rtol=0)                              # the closed form


def test_a_float32_running_sum_of_32768_log_probs_is_within_the_checkers_allowance():
    """The sequence-sum drill allows 8 sqrt(n) u32 sum|x|: a float32 loop is well inside it,
    a bfloat16 running sum far outside."""
    rng = np.random.default_rng(0)
    x = -rng.exponential(2.5, size=32_768).astype(np.float32)
    exact = np.sum(x, dtype=np.float64)
    total = np.float32(0.0)
    for v in x:
        total = np.float32(total + v)
    allowance = 8 * np.sqrt(x.size) * 2.0**-24 * np.abs(x.astype(np.float64)).sum()
    assert abs(float(total) - exact) < allowance / 10
    low = np.zeros((), gl.as_dtype("bfloat16"))
    for v in x[:4096]:
        low = (low + v).astype(low.dtype)
    assert abs(float(low) - np.sum(x[:4096], dtype=np.float64)) > 100 * allowance
