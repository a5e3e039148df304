"""precision: properties that hold for every input (hypothesis, >= 200 examples each)."""

import math

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl

DTYPES = st.sampled_from(gl.DTYPES)
FINITE = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=64)


def logits_arrays(max_v=40):
    shape = st.tuples(st.integers(1, 4), st.integers(1, max_v))
    return hnp.arrays(np.float64, shape, elements=st.floats(-300, 300, width=64))


@given(hnp.arrays(np.float64, st.integers(1, 30), elements=FINITE), DTYPES)
def test_round_trip_is_idempotent_and_within_one_rounding(x, name):
    once = gl.round_trip(x, name)
    np.testing.assert_array_equal(gl.round_trip(once, name), once)
    u = gl.unit_roundoff(name)
    fin = np.isfinite(once)
    assert fin.all() or name == "float16"                      # only float16 overflows 1e4
    tiny = float(ml_dtypes.finfo(gl.as_dtype(name)).smallest_normal)
    normal = fin & (np.abs(x) >= tiny)
    assert np.all(np.abs(once[normal] - x[normal]) <= u * np.abs(x[normal]))


@given(hnp.arrays(np.float64, st.integers(1, 30), elements=FINITE), DTYPES)
def test_round_trip_is_monotone(x, name):
    order = np.argsort(x, kind="stable")
    assert np.all(np.diff(gl.round_trip(x[order], name)) >= 0)


@given(logits_arrays(), DTYPES)
def test_log_softmax_normalises_and_matches_a_float64_reference(z, name):
    z = z.astype(gl.as_dtype(name))
    out = gl.log_softmax(z).astype(np.float64)
    z64 = z.astype(np.float64)
    ref = z64 - np.logaddexp.reduce(z64, axis=-1, keepdims=True)
    out_eps = 2.0 ** -52 if name == "float64" else 2.0 ** -23
    assert np.all(out <= 0)
    # both sides round |z| once or twice: the error is relative to the logits' size
    size = 1 + np.abs(z64).max()
    np.testing.assert_allclose(out, ref, rtol=2 * out_eps, atol=8 * out_eps * size)
    lse = np.logaddexp.reduce(out, axis=-1)                     # log sum p = 0
    assert np.all(np.abs(lse) <= 8 * out_eps * (z.shape[-1] + size))


@given(logits_arrays(max_v=20), st.floats(-1e3, 1e3, width=64))
def test_log_softmax_is_shift_invariant(z, c):
    c = math.ldexp(round(c), 0)                                 # an integer shift: exact in float64
    np.testing.assert_allclose(gl.log_softmax(z + c), gl.log_softmax(z), rtol=1e-12,
                               atol=1e-12 * (1 + abs(c) + np.abs(z).max()))


@given(st.data(), DTYPES)
def test_token_logprobs_pick_the_log_softmax(data, name):
    z = data.draw(logits_arrays(max_v=12)).astype(gl.as_dtype(name))          # (T, V)
    tokens = data.draw(hnp.arrays(np.int64, z.shape[:1], elements=st.integers(0, z.shape[1] - 1)))
    lp = gl.token_logprobs(z[None], tokens[None])[0]                            # (T,)
    np.testing.assert_array_equal(lp, gl.log_softmax(z)[np.arange(len(tokens)), tokens])


@given(st.data(), DTYPES)
def test_sequence_sum_is_accurate_and_ignores_padding(data, name):
    T = data.draw(st.integers(1, 200))
    logp = data.draw(hnp.arrays(np.float64, (2, T), elements=st.floats(-50, 0, width=64)))
    mask = data.draw(hnp.arrays(np.bool_, (2, T)))
    mask[:, 0] = True
    logp = logp.astype(gl.as_dtype(name))
    out = gl.sequence_logprob_sum(logp, mask)
    out_dtype = np.float64 if name == "float64" else np.float32
    for n in range(2):
        kept = logp[n].astype(np.float64)[mask[n]]
        exact = math.fsum(kept)
        # one rounding to the output dtype, plus float64 pairwise summation's own error
        # (at most log2(T) + 1 roundings of 2**-53 each, relative to sum |logp|)
        wide = (math.log2(T) + 2) * 2.0 ** -53 * float(np.abs(kept).sum())
        one = abs(exact) * 2.0 ** -24 if name != "float64" else 0.0
        assert abs(float(out[n]) - exact) <= one + wide
    padded = np.where(mask, logp.astype(np.float64), -1e4).astype(gl.as_dtype(name))
    np.testing.assert_array_equal(gl.sequence_logprob_sum(padded, mask), out)
    mean = gl.sequence_logprob_mean(logp, mask).astype(np.float64)
    # a subnormal mean (float32 sums near 1e-44) is rounded to a multiple of the smallest
    # subnormal, so it may be off by one of those, whatever its relative error
    np.testing.assert_allclose(mean, out.astype(np.float64) / mask.sum(-1),
                               rtol=4 * np.finfo(out_dtype).eps,
                               atol=float(np.finfo(out_dtype).smallest_subnormal))


@given(st.data(), DTYPES, st.integers(1, 6))
def test_rounded_matmul_is_within_splits_roundings_of_the_exact_product(data, name, splits):
    K = data.draw(st.integers(splits, 12))
    a = data.draw(hnp.arrays(np.float64, (3, K), elements=st.floats(-8, 8, width=64)))
    b = data.draw(hnp.arrays(np.float64, (K, 4), elements=st.floats(-8, 8, width=64)))
    a_r, b_r = gl.round_trip(a, name), gl.round_trip(b, name)
    out = gl.rounded_matmul(a, b, name, splits=splits)
    u = gl.unit_roundoff(name)
    # each chunk is rounded once and each of splits-1 additions once: at most splits + 1
    # roundings, each relative to a partial sum bounded by |a| @ |b|; plus the float64
    # matmuls' own error (K roundings of 2**-53), which is all there is for float64
    bound = ((1 + u) ** (splits + 1) - 1 + (K + 2) * 2.0 ** -52) * (np.abs(a_r) @ np.abs(b_r))
    # below the smallest normal a rounding is absolute: half the smallest subnormal
    subnormal = float(ml_dtypes.finfo(gl.as_dtype(name)).smallest_subnormal)
    assert np.all(np.abs(out - a_r @ b_r) <= bound + (splits + 1) * subnormal)
    np.testing.assert_array_equal(out, gl.round_trip(out, name))   # representable
