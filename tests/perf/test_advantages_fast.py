"""group_advantages_fast: equal to the reference (values, dtypes, errors), and lean in memory."""

import contextlib
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import grpo_lab as gl
import grpo_lab.perf.advantages_fast as fast_module

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int64, np.int8, np.bool_]
OPTIONS = [dict(scale=s, baseline=b, ddof=d) for s in gl.SCALES for b in gl.BASELINES
           for d in (0, 1)]


def ulps_apart(a, b):
    """How many float32 (or float16) steps separate a and b, elementwise."""
    assert a.dtype == b.dtype
    as_int = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]

    def ordered(x):  # map floats to integers that are ordered like the floats
        i = x.view(as_int).astype(np.int64)
        return np.where(i < 0, np.iinfo(as_int).min - i, i)
    return np.abs(ordered(a) - ordered(b))


def assert_same_as_reference(r, max_ulps=1, **options):
    """Same dtype, values within max_ulps (float16/32) or 1e-13 (float64); or the same error."""
    try:
        ref = gl.group_advantages(r, **options)
    except ValueError as error:                  # e.g. a result too large for the dtype
        assert error_of(gl.group_advantages_fast, r, **options) == (ValueError, str(error))
        return None
    got = gl.group_advantages_fast(r, **options)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if ref.dtype in (np.float16, np.float32):
        # both round once from float64: at most a tie apart
        assert ulps_apart(got, ref).max() <= max_ulps, (options, got, ref)
    elif ref.dtype == ml_dtypes.bfloat16:
        assert ulps_apart(got.view(np.int16).view(np.float16), ref.view(np.int16)
                          .view(np.float16)).max() <= max_ulps
    else:
        scale = np.abs(ref).max(axis=1, keepdims=True) + 1e-300
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-14 * scale.max())
    return got


@contextlib.contextmanager
def block_elements(n):
    """Run the fast path with blocks of n rewards, to cross block boundaries on small arrays."""
    old = fast_module.BLOCK_ELEMENTS
    fast_module.BLOCK_ELEMENTS = n
    try:
        yield
    finally:
        fast_module.BLOCK_ELEMENTS = old


# --- equal to the reference -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1, 2), (3, 5), (1000, 8), (700, 64), (2, 40000)])
def test_equals_reference_for_every_dtype_option_and_shape(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    if dtype is np.bool_:
        r = rng.random(shape) < 0.3
    elif np.dtype(dtype).kind == "i":
        r = rng.integers(-100, 100, size=shape).astype(dtype)
    else:
        r = (3 * rng.normal(size=shape)).astype(dtype)
    for options in OPTIONS:
        assert_same_as_reference(r, **options)


@pytest.mark.parametrize("block", [2, 7, 64, 1 << 15])
def test_block_size_does_not_change_the_result(block):
    rng = np.random.default_rng(3)
    r = rng.normal(size=(257, 8)).astype(np.float32)   # 257 rows: a ragged last block
    with block_elements(block):
        for options in OPTIONS:
            assert_same_as_reference(r, **options)


def test_goal_shapes_agree_with_the_reference():
    rng = np.random.default_rng(4)
    for shape in [(4096, 64), (16384, 8)]:
        r = rng.normal(size=shape).astype(np.float32)
        got = assert_same_as_reference(r)
        np.testing.assert_allclose(got.mean(axis=1), 0.0, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("value", [0, 1, 3, -7, 100])
def test_all_equal_groups_are_exactly_zero(dtype, value):
    r = np.full((9, 6), value).astype(dtype)
    r[::2] = (np.arange(6) % 2).astype(dtype)           # some rows with a spread, for contrast
    for options in OPTIONS:
        for eps in (1e-8, 0.0, 5e-324):                 # zero and subnormal eps: still no NaN
            adv = gl.group_advantages_fast(r, eps, **options)
            equal_rows = adv[1::2].astype(np.float64)
            if options["scale"] == "batch" and not np.all(r == r.flat[0]):
                assert np.all(equal_rows == 0.0)
            else:
                assert np.all(equal_rows == 0.0), (options, eps)
            assert np.isfinite(adv.astype(np.float64)).all()


def test_all_equal_float_rows_are_exactly_zero_for_awkward_values():
    # 0.1 is not a binary fraction: a plain mean of three copies is 0.1 + 1 ulp
    for dtype in (np.float32, np.float64):
        r = np.full((4, 3), 0.1, dtype=dtype)
        for options in OPTIONS:
            assert np.all(gl.group_advantages_fast(r, **options) == 0.0)


def test_huge_float32_rewards_do_not_overflow():
    r = np.array([[1e20, -3e20, 2e20, 5e19], [3e38, -3e38, 1e38, 0.0]], dtype=np.float32)
    for options in OPTIONS:
        got = assert_same_as_reference(r, **options)
        assert got is None or np.isfinite(got).all()   # None: too large for float32 (none)


def test_huge_and_tiny_float64_rewards():
    r = np.array([[1e300, -1.5e300, 1.7e308, -1.7e308], [1e-300, 2e-300, 0.0, 5e-324]])
    for options in OPTIONS:
        assert_same_as_reference(r, **options)


def test_small_spread_around_large_mean_float32():
    rng = np.random.default_rng(2)
    r = (1e3 + 1e-3 * rng.normal(size=(64, 16))).astype(np.float32)
    for options in OPTIONS:
        assert_same_as_reference(r, **options)


def test_rows_one_ulp_apart():
    # the hardest case for a mean without the shift: a spread of one float32 step
    one, nxt = np.float32(1000), np.nextafter(np.float32(1000), np.float32(2000))
    rng = np.random.default_rng(5)
    r = np.where(rng.random((500, 8)) < 0.5, one, nxt).astype(np.float32)
    for options in OPTIONS:
        assert_same_as_reference(r, **options)


def test_input_is_never_modified_and_the_result_is_a_new_array():
    r = np.array([[1.0, 5.0, 2.0], [0.0, 0.0, 3.0]], dtype=np.float32)
    before = r.copy()
    for options in OPTIONS:
        adv = gl.group_advantages_fast(r, **options)
        assert not np.shares_memory(adv, r)
    np.testing.assert_array_equal(r, before)


def test_non_contiguous_input():
    rng = np.random.default_rng(6)
    r = rng.normal(size=(40, 16)).astype(np.float32)
    for view in (r[::2], r[:, ::2], r.T[:8].T, np.asfortranarray(r)):
        assert_same_as_reference(view)


# --- the same errors as the reference -------------------------------------------------------

def error_of(fn, *args, **kwargs):
    with pytest.raises((ValueError, TypeError)) as info:
        fn(*args, **kwargs)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("rewards", [
    [1.0, 0.0, 1.0], np.zeros((2, 3, 4)), np.zeros((3, 1)), np.zeros((0, 4)), np.zeros((4, 0)),
    [[1.0, np.nan]], [[np.inf, 1.0]], [["a", "b"]], [[1 + 2j, 0]],
    np.array([[1, 2]], dtype=object), "1, 0", None,
    np.array([[1, np.nan]], dtype=np.float16), np.array([[1, np.inf]], dtype=ml_dtypes.bfloat16),
], ids=repr)
def test_bad_rewards_give_the_reference_error(rewards):
    assert error_of(gl.group_advantages_fast, rewards) == error_of(gl.group_advantages, rewards)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_reward_in_a_later_block_names_its_index(dtype, bad):
    r = np.zeros((5000, 8), dtype=dtype)
    r[4321, 5] = bad
    r[4999, 0] = bad
    kind, message = error_of(gl.group_advantages_fast, r)
    assert (kind, message) == error_of(gl.group_advantages, r)
    assert "index (4321, 5)" in message and "2 non-finite" in message


@pytest.mark.parametrize("kwargs", [
    {"eps": -1e-8}, {"eps": float("nan")}, {"eps": "1e-8"}, {"eps": np.array([1e-8, 1e-8])},
    {"eps": True}, {"scale": "std"}, {"scale": None}, {"baseline": "median"}, {"ddof": 4},
    {"ddof": -1}, {"ddof": 1.0},
], ids=repr)
def test_bad_options_give_the_reference_error(kwargs):
    r = np.ones((2, 4), dtype=np.float32)
    assert error_of(gl.group_advantages_fast, r, **kwargs) == error_of(gl.group_advantages, r,
                                                                       **kwargs)


def test_result_that_does_not_fit_gives_the_reference_error():
    for dtype, big in [(np.float16, 65000), (np.float32, 3e38)]:
        r = np.array([[big, -big, -big, -big]], dtype=dtype)
        kind, message = error_of(gl.group_advantages_fast, r, scale="none")
        assert (kind, message) == error_of(gl.group_advantages, r, scale="none")
        assert f"do not fit in {np.dtype(dtype).name}" in message


def test_no_positional_options():
    with pytest.raises(TypeError):
        gl.group_advantages_fast([[1, 0]], 1e-8, "batch")


# --- memory ---------------------------------------------------------------------------------

def peak_bytes(fn, *args):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = fn(*args)
        return tracemalloc.get_traced_memory()[1] - before, result
    finally:
        tracemalloc.stop()


def test_peak_memory_is_the_output_plus_two_small_buffers():
    r = np.random.default_rng(7).normal(size=(65536, 64)).astype(np.float32)   # 16 MiB
    gl.group_advantages_fast(r[:2])              # load the compiled kernel outside the count
    peak_fast, adv = peak_bytes(gl.group_advantages_fast, r)
    peak_ref, _ = peak_bytes(gl.group_advantages, r)
    assert peak_fast <= 1.1 * adv.nbytes, peak_fast / adv.nbytes
    assert peak_ref > 3 * adv.nbytes      # the reference's float64 temporaries, for contrast


# --- properties (hypothesis, >= 200 examples) -----------------------------------------------

shapes = st.tuples(st.integers(1, 12), st.integers(2, 12))
float32s = st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False)
wild32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(shapes.flatmap(lambda s: arrays(np.float32, s, elements=float32s)),
       st.sampled_from(OPTIONS), st.integers(1, 40))
def test_property_float32_equals_reference(r, options, block):
    with block_elements(block):
        assert_same_as_reference(r, **options)


@given(shapes.flatmap(lambda s: arrays(np.float32, s, elements=wild32)),
       st.sampled_from([o for o in OPTIONS if o["scale"] != "none"]))
def test_property_any_float32_magnitude_equals_reference(r, options):
    assert_same_as_reference(r, **options)


@given(shapes.flatmap(lambda s: arrays(np.float64, s, elements=st.floats(
    -1e300, 1e300, allow_nan=False, allow_infinity=False))), st.sampled_from(OPTIONS))
def test_property_float64_equals_reference(r, options):
    ref = gl.group_advantages(r, **options)
    got = gl.group_advantages_fast(r, **options)
    size = np.abs(ref).max() + 1e-300
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * size)


@given(shapes, st.floats(-1e4, 1e4, width=32), st.sampled_from(OPTIONS),
       st.sampled_from([np.float16, np.float32, np.float64]))
def test_property_all_equal_groups_give_exact_zero(shape, value, options, dtype):
    r = np.full(shape, value).astype(dtype)
    if not np.isfinite(r).all():
        return
    assert np.all(gl.group_advantages_fast(r, **options).astype(np.float64) == 0.0)


# --- out=: write into a buffer the caller already has -------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [dict(), dict(scale="batch"), dict(scale="none"),
                                     dict(baseline="leave_one_out", ddof=1)])
def test_out_receives_the_same_result_and_is_returned(dtype, options):
    r = (np.random.default_rng(3).normal(size=(37, 6)) * 3).astype(dtype)
    want = gl.group_advantages_fast(r, **options)
    out = np.full(r.shape, np.nan, dtype=want.dtype)
    got = gl.group_advantages_fast(r, out=out, **options)
    assert got is out
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))   # bit for bit


def test_out_where_the_reference_decides_same_error_and_longdouble_filled():
    big = np.array([[3e38, -3e38]], np.float32)        # c (r - mean) = 6e38: no float32
    options = dict(scale="none", baseline="leave_one_out")
    with pytest.raises(ValueError) as a:
        gl.group_advantages(big, **options)
    with pytest.raises(ValueError) as b:
        gl.group_advantages_fast(big, out=np.empty((1, 2), np.float32), **options)
    assert str(a.value) == str(b.value)
    ld = np.array([[1, 2, 4, 8]], np.longdouble)      # longdouble: the reference's own path
    out_ld = np.empty((1, 4), np.longdouble)
    assert gl.group_advantages_fast(ld, out=out_ld) is out_ld
    np.testing.assert_array_equal(out_ld, gl.group_advantages(ld))


@pytest.mark.parametrize("out, kind, words", [
    ([[0.0] * 4] * 3, TypeError, "out: expected a NumPy array"),
    (np.ma.zeros((3, 4), np.float32), TypeError, "got MaskedArray"),
    (np.empty((3, 5), np.float32), ValueError, "out: expected an array of shape (3, 4)"),
    (np.empty((3, 4), np.float64), ValueError, "dtype float32"),
])
def test_bad_out_is_refused_by_name(out, kind, words):
    r = np.ones((3, 4), np.float32)
    with pytest.raises(kind) as error:
        gl.group_advantages_fast(r, out=out)
    assert words in str(error.value)


def test_read_only_or_overlapping_out_is_refused():
    r = np.arange(12, dtype=np.float32).reshape(3, 4)
    frozen = np.empty((3, 4), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out: expected a writeable array"):
        gl.group_advantages_fast(r, out=frozen)
    with pytest.raises(ValueError, match="out: expected an array that does not overlap"):
        gl.group_advantages_fast(r, out=r)
    both = np.zeros((3, 8), np.float32)                    # interleaved views, no overlap
    both[:, 0::2] = r
    got = gl.group_advantages_fast(both[:, 0::2], out=both[:, 1::2])
    np.testing.assert_array_equal(got, gl.group_advantages_fast(r))


def test_non_contiguous_out_gets_the_same_values():
    r = np.random.default_rng(5).normal(size=(9, 8)).astype(np.float32)
    big = np.zeros((9, 16), np.float32)
    got = gl.group_advantages_fast(r, out=big[:, ::2])
    np.testing.assert_array_equal(got, gl.group_advantages_fast(r))
    assert np.all(big[:, 1::2] == 0)                       # nothing written between
