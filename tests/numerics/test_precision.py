"""precision: each low-precision pitfall fails naively and passes with the package, per dtype.

Every pitfall test is parametrized over float16, bfloat16, float32 and float64. The naive
computation is written the way it usually is, entirely in the input's dtype; where a pitfall
cannot occur in a dtype (float32 sums 32k log-probs fine), the test asserts that too, so each test measures what the dtype does rather than assuming it.
"""

import math

import ml_dtypes
import numpy as np
import pytest

import grpo_lab as gl

BF16 = np.dtype(ml_dtypes.bfloat16)
ALL = ["float16", "bfloat16", "float32", "float64"]
LOW = {"float16", "bfloat16"}


def dt(name):
    return gl.as_dtype(name)


def finfo(name):
    return ml_dtypes.finfo(dt(name))


def rel_err(out, ref):
    """Normwise relative error, inf if the output has a NaN or inf where ref is finite."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.isfinite(out).all():
        return math.inf
    return float(np.abs(out - ref).max() / np.abs(ref).max())


# --- the naive computations, in the input's dtype throughout --------------------------------

def naive_advantages(r, eps=1e-8):
    eps = np.asarray(eps, dtype=r.dtype)                      # eps in the rewards' dtype
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + eps)


def naive_log_softmax(z):
    return z - np.log(np.exp(z).sum(-1, keepdims=True))      # no max shift


def naive_ratio_loss(logp, old_logp, adv, eps=0.2):
    ratio = np.exp(logp - old_logp)
    return -np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)


# --- pitfall 1: eps underflows, and an all-equal group ---------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_eps_underflows_only_in_float16(name):
    assert (np.asarray(1e-8, dtype=dt(name)) == 0) == (name == "float16")
    assert gl.round_trip([1e-8], name)[0] == (0.0 if name == "float16" else pytest.approx(1e-8, rel=4e-3))


@pytest.mark.parametrize("name", ALL)
def test_all_equal_group_naive_is_nan_or_noise_package_is_zero(name):
    d = dt(name)
    if name == "float16":
        group = np.full((1, 4), 0.7, dtype=d)                  # std 0, eps 0: 0/0
        with np.errstate(invalid="ignore"):
            naive = naive_advantages(group).astype(np.float64)
        assert np.isnan(naive).all()
    else:
        # a value whose mean over three copies is not itself in this dtype: the naive
        # deviations are rounding noise, and noise / (noise + eps) is not small
        rng = np.random.default_rng(0)
        scale = 1e9 if name == "float64" else 1e3
        for x in rng.uniform(1, scale, size=20_000):
            group = np.full((1, 3), x).astype(d)
            with np.errstate(all="ignore"):
                naive = naive_advantages(group).astype(np.float64)
            if np.abs(naive).max() > 1e-3:
                break
        else:
            pytest.fail(f"no all-equal {name} group with a rounded mean was found")
        assert np.isfinite(naive).all() and np.abs(naive).max() > 1e-3
    out = gl.group_advantages(group)
    assert out.dtype == d
    assert np.all(out.astype(np.float64) == 0.0)


# --- pitfall 2: squares that overflow, and a small spread around a large mean ----------------

@pytest.mark.parametrize("name", ALL)
def test_overflowing_squares(name):
    d = dt(name)
    big = 4 * math.sqrt(float(finfo(name).max))   # 1e3 in float16, 7e19 in float32, 5e154
    r = (big * np.array([[1.0, -0.5, 0.25, 0.0]])).astype(d)
    assert np.isfinite(r.astype(np.float64)).all()
    with np.errstate(over="ignore", invalid="ignore"):
        naive = naive_advantages(r).astype(np.float64)
        assert np.isinf(np.square(r.astype(d))).any()          # the squares do not fit
    assert np.all(naive == 0), "the naive std is inf, every advantage silently 0"
    ref = naive_advantages(r.astype(np.float64) / big, eps=0.0)  # exact rescale, float64
    out = gl.group_advantages(r)
    assert rel_err(out, ref) <= 2 * gl.unit_roundoff(name)


@pytest.mark.parametrize("name", ALL)
def test_small_spread_around_large_mean(name):
    d, u = dt(name), gl.unit_roundoff(name)
    base = 1024.0
    spacing = 2 * u * base                            # the dtype's spacing at 1024
    k = np.array([[0, 1, 1, 3, 6, 7, 2, 5]], dtype=np.float64)
    r64 = base + spacing * k                          # every value exact in the dtype
    r = r64.astype(d)
    assert np.array_equal(r.astype(np.float64), r64)
    ref = naive_advantages(k, eps=0.0)                # the same rewards shifted by 1024: exact
    with np.errstate(all="ignore"):
        naive = naive_advantages(r)
    assert rel_err(naive, ref) > 1e-2, "the rounded mean should cost the naive formula > 1%"
    assert rel_err(gl.group_advantages(r, eps=0.0), ref) <= 2 * u


# --- pitfall 3: summing log-probs over long sequences ----------------------------------------

def long_logp(T, name, seed=0):
    """T log-probs near -2.5 (an exponential draw), stored in the dtype; (1, T)."""
    rng = np.random.default_rng(seed)
    return (-rng.exponential(2.5, size=(1, T))).astype(dt(name))


@pytest.mark.parametrize("name", ALL)
def test_sum_over_32k_tokens(name):
    T = 32_768
    logp = long_logp(T, name)
    exact = math.fsum(logp.astype(np.float64).ravel())         # about -82000
    with np.errstate(over="ignore"):
        naive = float(logp.sum(axis=-1)[0])
    naive_fails = not np.isfinite(naive) or abs(naive - exact) > 1.0  # more than 1 nat off
    # float16 overflows (the sum is beyond -65504); bfloat16's running sum stops growing;
    # float32 and float64 are fine: the pitfall is the 16-bit accumulator
    assert naive_fails == (name in LOW), (name, naive, exact)
    if name == "float16":
        assert naive == -math.inf
    if name == "bfloat16":
        assert abs(naive) < abs(exact) / 4                     # stagnated far from the sum
    out = gl.sequence_logprob_sum(logp, np.ones((1, T), dtype=bool))
    assert out.dtype == (np.float64 if name == "float64" else np.float32)
    assert abs(float(out[0]) - exact) <= abs(exact) * 2.0 ** -24   # one float32 rounding


@pytest.mark.parametrize("name", ALL)
def test_mean_over_32k_tokens(name):
    T = 32_768
    logp = long_logp(T, name, seed=1)
    exact = math.fsum(logp.astype(np.float64).ravel()) / T    # about -2.5
    with np.errstate(over="ignore"):
        naive = float(logp.mean(axis=-1)[0])
    naive_fails = not np.isfinite(naive) or abs(naive - exact) > 0.01
    # NumPy accumulates a float16 mean in float32 and a bfloat16 mean in bfloat16
    assert naive_fails == (name == "bfloat16"), (name, naive, exact)
    out = gl.sequence_logprob_mean(logp, np.ones((1, T)))
    assert abs(float(out[0]) - exact) <= abs(exact) * 2.0 ** -24


def test_bfloat16_rounding_of_a_perfect_sum_is_still_over_a_nat():
    """Even a float32-accumulated sum (torch's bf16 sum on CPU) loses precision when the
    result is stored in bfloat16: the spacing there is 512 at 82000."""
    logp = long_logp(32_768, "bfloat16")
    exact = math.fsum(logp.astype(np.float64).ravel())
    stored = gl.round_trip([exact], "bfloat16")[0]
    assert abs(stored - exact) > 1.0
    assert abs(float(gl.sequence_logprob_sum(logp, np.ones(logp.shape))[0]) - exact) < 0.01


def test_padding_never_enters_the_sum():
    logp = np.array([[-1.0, -2.0, -60000.0], [-0.5, -0.25, -0.25]], dtype=np.float16)
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(gl.sequence_logprob_sum(logp, mask), [-3.0, -1.0])
    np.testing.assert_array_equal(gl.sequence_logprob_mean(logp, mask),
                                  np.array([-1.5, -1.0 / 3], dtype=np.float32))


# --- pitfall 4: exp of the log-ratio, and the log-softmax ------------------------------------

def overflow_exponent(name):
    """The smallest log-ratio whose exp overflows the dtype, plus one."""
    return math.log(float(finfo(name).max)) + 1.0   # 12.1, 89.7, 89.7, 710.8


@pytest.mark.parametrize("name", ALL)
def test_ratio_of_a_large_log_ratio(name):
    d = dt(name)
    logp = np.array([[0.0, -0.1, -1.0]], dtype=d)
    old_logp = np.array([[-overflow_exponent(name), -0.1, -0.9]]).astype(d)
    # the overflowing token is in an all-equal group (A = 0): inf * 0 is NaN
    adv = np.array([[0.0, 1.0, -1.0]], dtype=d)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = naive_ratio_loss(logp, old_logp, adv).astype(np.float64)
        assert np.isinf(np.exp(logp - old_logp).astype(np.float64)[0, 0])
    assert np.isnan(naive[0, 0]) and np.isfinite(naive[0, 1:]).all()
    out = gl.clipped_surrogate_loss(logp, old_logp, adv)
    ref = gl.clipped_surrogate_loss(logp.astype(np.float64), old_logp.astype(np.float64),
                                    adv.astype(np.float64))
    assert np.isfinite(out.astype(np.float64)).all()
    assert out[0, 0] == 0                                       # no signal, no NaN
    assert rel_err(out, ref) <= 2 * gl.unit_roundoff(name)


@pytest.mark.parametrize("name", ALL)
def test_ratio_as_a_quotient_of_probabilities_is_zero_over_zero(name):
    """exp(logp) / exp(old_logp) underflows to 0 / 0 for rare tokens; exp(logp - old_logp)
    does not."""
    d = dt(name)
    tiny = math.log(float(finfo(name).smallest_subnormal)) - 2.0   # -19, -94, -106, -747
    logp = np.array([[tiny, tiny + 0.05]]).astype(d)
    old_logp = np.array([[tiny, tiny]]).astype(d)
    with np.errstate(all="ignore"):
        naive = (np.exp(logp) / np.exp(old_logp)).astype(np.float64)
    assert np.isnan(naive).all()
    loss = gl.clipped_surrogate_loss(logp, old_logp, np.ones((1, 2), dtype=d))
    want = -np.exp(logp.astype(np.float64) - old_logp.astype(np.float64))
    assert rel_err(loss, want) <= 2 * gl.unit_roundoff(name)


@pytest.mark.parametrize("name", ALL)
def test_log_softmax_without_the_max_shift_overflows(name):
    d = dt(name)
    z = np.array([[0.0, 3.0, overflow_exponent(name)]]).astype(d)   # (1, V=3)
    with np.errstate(all="ignore"):
        naive = naive_log_softmax(z).astype(np.float64)
    assert not np.isfinite(naive).all()
    out = gl.log_softmax(z)
    z64 = z.astype(np.float64)
    ref = z64 - np.logaddexp.reduce(z64, axis=-1, keepdims=True)
    assert np.isfinite(out).all()
    assert out.dtype == (np.float64 if name == "float64" else np.float32)
    assert np.abs(out - ref).max() <= 4 * np.finfo(out.dtype).eps * np.abs(ref).max()


@pytest.mark.parametrize("name", ALL)
def test_log_softmax_over_a_large_vocabulary(name):
    """With the max shift but a sum kept in the dtype, a flat distribution over 32k tokens
    gets its normaliser wrong in bfloat16 (the running sum stops at 256); float16 holds."""
    d = dt(name)
    rng = np.random.default_rng(3)
    z = rng.normal(scale=0.5, size=(1, 32_000)).astype(d)
    z64 = z.astype(np.float64)
    ref = z64 - np.logaddexp.reduce(z64, axis=-1, keepdims=True)
    m = z.max(-1, keepdims=True)
    naive = (z - m) - np.log(np.exp(z - m).sum(-1, keepdims=True))
    err = np.abs(naive.astype(np.float64) - ref).max()
    assert (err > 0.5) == (name == "bfloat16"), (name, err)
    out = gl.log_softmax(z)
    assert np.abs(out - ref).max() <= 8 * np.finfo(out.dtype).eps * np.abs(ref).max()


@pytest.mark.parametrize("name", ALL)
def test_token_logprobs_match_log_softmax_and_come_back_wide(name):
    rng = np.random.default_rng(4)
    logits = (4 * rng.normal(size=(3, 5, 50))).astype(dt(name))     # (N, T, V)
    tokens = rng.integers(0, 50, size=(3, 5))
    lp = gl.token_logprobs(logits, tokens)
    full = gl.log_softmax(logits)
    np.testing.assert_array_equal(lp, np.take_along_axis(full, tokens[..., None], -1)[..., 0])
    assert lp.dtype == (np.float64 if name == "float64" else np.float32)
    assert (lp <= 0).all()


# --- pitfall 5: the training/inference mismatch ----------------------------------------------

def mismatch(name, seed=0):
    """Per-token log-ratio between two kernels (splits=1 vs 2) computing the same logits."""
    rng = np.random.default_rng(seed)
    N, K, V = 256, 128, 512
    h = rng.normal(size=(N, K))
    W = rng.normal(scale=4 / math.sqrt(K), size=(K, V))           # logits of std about 4
    tokens = (h @ W + rng.gumbel(size=(N, V))).argmax(-1)[:, None]  # (N, 1) sampled
    lp = [gl.token_logprobs(gl.rounded_matmul(h, W, name, splits=s)[:, None, :], tokens)
          for s in (1, 2)]
    return lp[1].astype(np.float64) - lp[0].astype(np.float64)      # (N, 1)


def test_mismatch_bfloat16_is_several_times_float16():
    d = {name: np.abs(mismatch(name)).mean() for name in ALL}
    assert d["bfloat16"] > 4 * d["float16"] > 0                   # 8x fewer bits of mantissa
    assert d["float16"] > 50 * d["float32"]
    assert d["float32"] > 0 and d["float64"] < 1e-12
    assert d["bfloat16"] > 1e-3                                     # ratios off by > 0.1% on average


@pytest.mark.parametrize("name", ALL)
def test_rounded_matmul_kernels_agree_to_a_few_roundings(name):
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(20, 16)), rng.normal(size=(16, 30))
    one = gl.rounded_matmul(a, b, name)
    a_r, b_r = gl.round_trip(a, name), gl.round_trip(b, name)
    np.testing.assert_array_equal(one, gl.round_trip(a_r @ b_r, name))  # correctly rounded
    for splits in (2, 4, 16):
        other = gl.rounded_matmul(a, b, name, splits=splits)
        bound = (splits + 1) * gl.unit_roundoff(name) * (np.abs(a_r) @ np.abs(b_r))
        assert np.all(np.abs(other - one) <= bound)


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: gl.as_dtype("float8"), ValueError,
     r"dtype: expected one of float16, bfloat16, float32, float64, got 'float8'"),
    (lambda: gl.as_dtype(np.int32), ValueError, r"dtype: expected one of .*, got int32"),
    (lambda: gl.as_dtype(3.5), TypeError, r"dtype: expected one of .* got float 3.5"),
    (lambda: gl.round_trip("abc", "float16"), TypeError, r"x: expected a numeric array, got str"),
    (lambda: gl.round_trip([1.0, np.nan], "float16"), ValueError,
     r"x: expected finite values, got nan at index \(1,\)"),
    (lambda: gl.log_softmax(np.float32(1.0)), ValueError,
     r"logits: expected an array with at least 1 dimension of shape \(\.\.\., V\), got a 0-D"),
    (lambda: gl.log_softmax([["a"]]), TypeError, r"logits: expected a real numeric dtype"),
    (lambda: gl.log_softmax([[1.0, np.inf]]), ValueError, r"logits: expected finite values"),
    (lambda: gl.token_logprobs(np.zeros(4), [0]), ValueError,
     r"logits: expected an array with at least 2 dimensions of shape \(\.\.\., T, V\), got a 1-D"),
    (lambda: gl.token_logprobs(np.zeros((2, 4)), [0.0, 1.0]), TypeError,
     r"tokens: expected integer token ids of shape \(\.\.\., T\), got dtype float64"),
    (lambda: gl.token_logprobs(np.zeros((2, 4)), None), TypeError,
     r"tokens: expected integer token ids .* got NoneType"),
    (lambda: gl.token_logprobs(np.zeros((2, 4)), [0, 1, 2]), ValueError,
     r"tokens: expected shape \(2,\) .* got a 1-D int64 array of shape \(3,\)"),
    (lambda: gl.token_logprobs(np.zeros((2, 4)), [0, 4]), ValueError,
     r"tokens: expected ids in \[0, 4\) for a vocabulary of V = 4, got 4 at index \(1,\)"),
    (lambda: gl.token_logprobs(np.zeros((2, 4)), [-1, 0]), ValueError,
     r"tokens: expected ids in \[0, 4\) .* got -1 at index \(0,\)"),
    (lambda: gl.sequence_logprob_sum([[-1.0, -2.0]], [[1, 0.5]]), ValueError,
     r"mask: expected only 0 and 1 \(or bools\), got 0.5 at index \(0, 1\)"),
    (lambda: gl.sequence_logprob_sum([[-1.0, -2.0]], [1, 1]), ValueError,
     r"mask: expected shape \(1, 2\) \(the shape of logp\), got a 1-D"),
    (lambda: gl.sequence_logprob_sum(-1.0, 1), ValueError,
     r"logp: expected an array with at least 1 dimension of shape \(\.\.\., T\)"),
    (lambda: gl.sequence_logprob_sum([[-1.0]], "1"), TypeError, r"mask: expected a mask"),
    (lambda: gl.sequence_logprob_mean([[-1.0, -2.0], [-1.0, -1.0]], [[1, 1], [0, 0]]),
     ValueError, r"mask: expected at least one real token per sequence .* got none in "
                 r"sequence \(1,\)"),
    (lambda: gl.rounded_matmul(np.ones((2, 3)), np.ones((4, 5)), "float16"), ValueError,
     r"b: expected shape \(3, M\) to match a's inner dimension K = 3, got a 2-D"),
    (lambda: gl.rounded_matmul(np.ones(3), np.ones((3, 5)), "float16"), ValueError,
     r"a: expected a 2-D array of shape \(N, K\), got a 1-D"),
    (lambda: gl.rounded_matmul(np.ones((2, 3)), np.ones((3, 5)), "float16", splits=4),
     ValueError, r"splits: expected an integer in \[1, 3\] \(at most K chunks\), got 4"),
    (lambda: gl.rounded_matmul(np.ones((2, 3)), np.ones((3, 5)), "float16", splits=1.0),
     TypeError, r"splits: expected an integer, got float"),
    (lambda: gl.rounded_matmul(np.full((1, 1), 1e5), np.ones((1, 1)), "float16"), ValueError,
     r"a, b: expected values that fit in float16, got some beyond its largest finite "
     r"value 65504"),
])
def test_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_inputs_are_not_modified():
    logits = np.array([[[1.0, 2.0, 3.0]]], dtype=np.float32)
    logp = np.array([[-1.0, -2.0]], dtype=BF16)
    before = (logits.copy(), logp.copy())
    gl.log_softmax(logits); gl.token_logprobs(logits, [[2]])
    gl.sequence_logprob_sum(logp, [[1, 1]]); gl.sequence_logprob_mean(logp, [[1, 0]])
    np.testing.assert_array_equal(logits, before[0])
    np.testing.assert_array_equal(logp.astype(np.float64), before[1].astype(np.float64))
