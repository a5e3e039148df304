"""Log-probs from logits: the shifted log-softmax, the sampled tokens' log-probs, the dtypes
they come back in. (Each low-precision pitfall, per dtype, is in test_precision.py.)"""

import mpmath
import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.numerics.logprobs import at_least_float32


def exact_log_softmax(z):
    with mpmath.workdps(60):
        lse = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in z))
        return np.array([float(mpmath.mpf(float(v)) - lse) for v in z])


def test_log_softmax_by_hand():
    np.testing.assert_allclose(gl.log_softmax(np.array([0.0, np.log(3.0)])),
                               [np.log(0.25), np.log(0.75)], rtol=1e-15)


def test_the_likeliest_of_large_logits_keeps_its_small_log_prob():
    # z - (m + log S) rounds m + log S at the scale of m (1e4): the top log-prob, -1e-5, would
    # lose 7 digits. (z - m) - log S is 0 - log S: accurate to the last bit.
    z = np.array([1e4, 1e4 - 12.0, 1e4 - 13.0])
    out = gl.log_softmax(z)
    assert out[0] == pytest.approx(exact_log_softmax(z)[0], rel=1e-14)
    lse = gl.logsumexp(z[None])[0, 0]
    assert abs((z[0] - lse) - exact_log_softmax(z)[0]) > 1e-9 * abs(exact_log_softmax(z)[0])


def test_token_logprobs_pick_exactly_the_log_softmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=30.0, size=(2, 4, 7))
    tokens = rng.integers(0, 7, size=(2, 4))
    picked = np.take_along_axis(gl.log_softmax(logits), tokens[..., None], -1)[..., 0]
    np.testing.assert_array_equal(gl.token_logprobs(logits, tokens), picked)


@pytest.mark.parametrize("dtype, expected", [(np.float16, np.float32), (np.float32, np.float32),
                                             (np.float64, np.float64), (np.int64, np.float32)])
def test_results_come_back_in_float32_or_wider(dtype, expected):
    assert at_least_float32(dtype) == expected


def test_sequence_mean_is_the_sum_over_the_count_of_real_tokens():
    logp = np.array([[-1.0, -2.0, -99.0], [-0.5, -0.5, -0.5]])
    mask = [[1, 1, 0], [1, 1, 1]]
    np.testing.assert_array_equal(gl.sequence_logprob_mean(logp, mask),
                                  gl.sequence_logprob_sum(logp, mask) / np.array([2, 3]))


@pytest.mark.parametrize("call, exc, message", [
    (lambda: gl.log_softmax("abc"), TypeError, "logits: expected a numeric array"),
    (lambda: gl.log_softmax(np.zeros((2, 0))), ValueError, "logits: expected a non-empty array"),
])
def test_bad_logits(call, exc, message):
    with pytest.raises(exc, match=message):
        call()
