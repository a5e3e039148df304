"""The fast path's building blocks: exact centring, pooled moments, the guarded denominator,
and the overflow check of the store (grpo_lab.perf.blocks)."""

import ml_dtypes
import numpy as np
import pytest

from grpo_lab.perf import blocks


@pytest.mark.parametrize("short", [False, True])
def test_centre_gives_exact_zeros_for_equal_rows_and_the_deviations_otherwise(short):
    r = np.array([[0.1, 0.1, 0.1], [1.0, 2.0, 6.0]], dtype=np.float32)
    buf = blocks.BlockBuffers(4, 3, short=short)
    dev, unit = buf.centre(r)
    assert unit == (3 if short else 1)
    assert np.all(dev[0] == 0.0)                              # exact, no shift needed
    np.testing.assert_allclose(dev[1] / unit, [-2.0, -1.0, 3.0], rtol=1e-15)


def test_centre_rescaled_is_the_deviations_times_two_to_the_minus_k():
    r = np.array([[1e300, -1.5e300, 1.7e308, -1.7e308], [3.0, 3.0, 3.0, 3.0]])
    buf = blocks.BlockBuffers(2, 4)
    dev, row_mean = buf.centre_rescaled(r, 1024)
    x = np.ldexp(r[0], -1024)                                 # exact: |x| < 1
    np.testing.assert_allclose(dev[0], x - x.mean(), rtol=0, atol=1e-15)   # |x| ~ 1
    assert np.all(dev[1] == 0.0) and row_mean[1] == np.ldexp(3.0, -1024)


@pytest.mark.parametrize("G", [3, 8, 40])
def test_sum_of_squares_short_and_long_rows(G):
    dev = np.random.default_rng(G).normal(size=(5, G))
    buf = blocks.BlockBuffers(5, G)
    np.testing.assert_allclose(buf.sum_of_squares(dev), (dev * dev).sum(axis=1), rtol=1e-14)


def test_pooled_moments_equal_numpy_over_ragged_blocks():
    rng = np.random.default_rng(1)
    x = 1e3 + rng.normal(size=(37, 6))                        # a large mean, a small spread
    summaries = []
    for r0, r1 in blocks.row_blocks(37, 10):                  # 10, 10, 10, 7 rows
        rows = x[r0:r1]
        mean = rows.mean(axis=1)
        summaries.append((mean, ((rows - mean[:, None]) ** 2).sum(axis=1)))
    count, mean, m2 = blocks.pooled_moments(summaries, G=6)
    assert count == x.size
    assert mean == pytest.approx(x.mean(), rel=1e-15)
    assert m2 == pytest.approx(((x - x.mean()) ** 2).sum(), rel=1e-12)


def test_inverse_denominator_is_finite_for_a_row_with_no_spread():
    ss = np.array([8.0, 0.0])
    got = blocks.inverse_denominator(ss, 2, 0.0, 3.0)         # std 2 -> 3 / 2; std 0, eps 0
    assert got[0] == 1.5 and np.isfinite(got[1]) and got is ss


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_store_block_reports_a_value_that_does_not_fit(dtype):
    big = 2 * blocks.largest_finite(dtype)
    out = np.empty((1, 2), dtype=dtype)
    with np.errstate(over="ignore"):
        assert not blocks.store_block(out, np.array([[1.0, big]]), bound=big)
    assert blocks.store_block(out, np.array([[1.0, -2.0]]), bound=2.0)
    np.testing.assert_array_equal(out.astype(np.float64), [[1.0, -2.0]])


def test_a_small_bound_skips_the_check_and_a_large_one_does_not():
    out = np.empty((1, 1), dtype=np.float16)
    # a wrong, small bound: the store trusts it (the kernels derive it from the math)
    assert blocks.store_block(out, np.array([[1e6]]), bound=1.0)
    assert not blocks.store_block(out, np.array([[1e6]]), bound=1e6)


def test_centring_matrix_times_a_row_is_g_times_its_deviations_exactly():
    row = np.array([1.0, 2.0, 6.0, 7.0])
    assert np.array_equal(row @ blocks.centring_matrix(4), 4 * row - row.sum())


def test_narrow_dtypes():
    assert [blocks.is_narrow_dtype(d) for d in (np.float16, ml_dtypes.bfloat16, np.float32,
                                                  np.bool_, np.float64, np.int8)] == \
        [True, True, True, True, False, False]
