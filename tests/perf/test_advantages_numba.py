"""The one-pass compiled kernel behind group_advantages_fast: within 4 ulp of the reference for
float32 and float64, exact zeros on all-equal groups, the reference's errors, and the blocked
NumPy path (said once) where Numba is missing."""

import warnings

import numpy as np
import pytest

import grpo_lab as gl
import grpo_lab.perf.advantages_fast as fast_module
import grpo_lab.perf.advantages_numba as numba_module

pytest.importorskip("numba")

OPTIONS = [dict(scale=s, baseline=b, ddof=d) for s in ("group", "none") for b in gl.BASELINES
           for d in (0, 1)]


def ulps_apart(a, b):
    """Float steps between a and b, elementwise (float32 or float64)."""
    as_int = {4: np.int32, 8: np.int64}[a.dtype.itemsize]

    def ordered(x):
        i = x.view(as_int).astype(object if as_int is np.int64 else np.int64)
        return np.where(i < 0, int(np.iinfo(as_int).min) - i, i)
    return np.abs(ordered(a) - ordered(b)).astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 2), (5, 3), (300, 8), (100, 64), (3, 1000)])
def test_kernel_within_4_ulp_of_the_reference(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    r = (5 * rng.normal(size=shape) + 2).astype(dtype)
    for options in OPTIONS:
        ref = gl.group_advantages(r, **options)
        out = np.empty_like(ref)
        G = shape[1]
        c = G / (G - 1) if options["baseline"] == "leave_one_out" else 1.0
        got = numba_module.advantages_one_pass(r, out, 1e-8, options["scale"], options["ddof"], c)
        assert got is out
        # ulps are counted at each row's largest |A|: near 0 an ulp means nothing
        row_size = np.abs(ref).max(axis=1, keepdims=True)
        ulp = np.spacing(row_size.astype(dtype)).astype(np.float64)
        assert (np.abs(got.astype(np.float64) - ref) / ulp).max() <= 4, options
        if dtype == np.float32:                      # both round once from float64
            assert ulps_apart(got, ref).max() <= 4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_equal_rows_are_exact_zeros_and_nan_goes_to_the_reference(dtype):
    r = np.full((6, 5), 0.1, dtype=dtype)
    r[::2] = np.arange(5)
    for eps in (1e-8, 0.0):
        adv = numba_module.advantages_one_pass(r, np.empty_like(r), eps, "group", 0, 1.0)
        assert np.all(adv[1::2] == 0.0) and np.isfinite(adv).all()
    r[3, 2] = np.nan
    assert numba_module.advantages_one_pass(r, np.empty_like(r), 1e-8, "group", 0, 1.0) is None
    with pytest.raises(ValueError, match=r"^rewards: .*index \(3, 2\)"):
        gl.group_advantages_fast(r)


def test_without_numba_the_blocked_path_runs_and_says_so_once(monkeypatch):
    monkeypatch.setattr(numba_module, "_KERNEL", [None])
    monkeypatch.setattr(fast_module, "_NOTICE", [])
    r = np.random.default_rng(1).normal(size=(50, 8)).astype(np.float32)
    with pytest.warns(fast_module.NumbaMissingWarning, match="numba is not installed"):
        first = gl.group_advantages_fast(r)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = gl.group_advantages_fast(r)                 # said once, not twice
    np.testing.assert_array_equal(first, second)
    assert np.abs(first - gl.group_advantages(r)).max() < 1e-6


def test_the_kernel_is_what_the_fast_path_calls(monkeypatch):
    calls = []
    real = numba_module.advantages_one_pass
    monkeypatch.setattr(fast_module, "advantages_one_pass",
                        lambda *a: calls.append(a[0].dtype) or real(*a))
    gl.group_advantages_fast(np.ones((2, 4), np.float32))
    gl.group_advantages_fast(np.ones((2, 4), np.float16))    # not float32/64: blocked path
    gl.group_advantages_fast(np.ones((2, 4)), scale="batch")  # batch: blocked path
    assert calls == [np.float32]


@pytest.mark.parametrize("G", [2, 3, 8, 64, 1000, 4096, 4097])
def test_float32_one_loop_variance_stays_within_one_ulp_where_it_cancels_most(G):
    """float32_rows takes the variance as sum d^2 - mean * sum d: worst when the shift (the
    row's first value) is far from the mean, and when the mean is large next to the spread."""
    rng = np.random.default_rng(G)
    rows = [1000 + 1e-3 * rng.normal(size=G),               # mean 1e6 spreads
            rng.normal(size=G),
            np.r_[1e4, np.zeros(G - 1)],                      # the shift is the outlier
            np.r_[-3e4, 1e-2 * rng.normal(size=G - 1)],
            rng.choice([0.0, 1.0], size=G)]
    r = np.array(rows).astype(np.float32)
    for ddof, baseline in ((0, "mean"), (1, "leave_one_out")):
        ref = gl.group_advantages(r, ddof=ddof, baseline=baseline)
        got = gl.group_advantages_fast(r, ddof=ddof, baseline=baseline)
        assert ulps_apart(got, ref).max() <= 1, (G, ddof)


def test_float32_rows_hand_a_tiny_eps_on_a_flat_row_to_the_reference():
    r = np.float32([[2.5, 2.5, 2.5], [1, 2, 3]])
    for eps in (1e-320, 5e-324):                             # c / eps is inf in float64
        np.testing.assert_array_equal(gl.group_advantages_fast(r, eps),
                                      gl.group_advantages(r, eps))
    assert np.all(gl.group_advantages_fast(r, 1e-320)[0] == 0)


def test_the_kernel_choice_follows_dtype_scale_and_group_size(monkeypatch):
    calls = []
    one_pass, float32 = numba_module.kernel_or_none()
    monkeypatch.setattr(numba_module, "_KERNEL", [(
        lambda *a, **kw: calls.append("one_pass_rows") or one_pass(*a, **kw),
        lambda *a, **kw: calls.append("float32_rows") or float32(*a, **kw))])
    cases = [((4, 8), np.float32, "group", "float32_rows"),
             ((2, 4097), np.float32, "group", "one_pass_rows"),
             ((4, 8), np.float32, "none", "one_pass_rows"),
             ((4, 8), np.float64, "group", "one_pass_rows")]
    for shape, dtype, scale, expected in cases:
        calls.clear()
        r = np.random.default_rng(0).normal(size=shape).astype(dtype)
        gl.group_advantages_fast(r, scale=scale)
        assert calls == [expected], (shape, dtype, scale)


@pytest.mark.parametrize("shape", [(31, 8), (32, 8), (33, 8), (95, 2), (64, 128), (65, 129),
                                   (40, 64)])
def test_float32_blocks_and_the_rows_after_them_match_the_reference(shape):
    """float32_rows does 32 rows at a time for G <= 128 and the last B % 32 rows (and every row
    past G = 128) one at a time: both within 1 ulp, all-equal rows exactly 0 in both."""
    assert numba_module.ROWS == 32 and numba_module.BLOCKED_MAX_G == 128
    B, G = shape
    rng = np.random.default_rng(B * G)
    r = (3 * rng.normal(size=shape) + 1).astype(np.float32)
    r[5::11, 0] += 1e4                                       # the shift far from the mean
    r[::7] = r[::7, :1]                                      # all-equal rows, in blocks and tail
    for ddof, baseline in ((0, "mean"), (1, "leave_one_out")):
        ref = gl.group_advantages(r, ddof=ddof, baseline=baseline)
        got = gl.group_advantages_fast(r, ddof=ddof, baseline=baseline)
        assert ulps_apart(got, ref).max() <= 1, (shape, ddof)
        assert np.all(got[::7] == 0.0)


@pytest.mark.parametrize("row", [0, 31, 40, 64, 66])
@pytest.mark.parametrize("bad", [np.nan, np.inf, "flat"])
def test_a_bad_row_in_a_block_or_after_the_blocks_goes_to_the_reference(row, bad):
    """Rows 0-63 are in blocks, 64-66 after them: a NaN or inf reward, or a flat row whose
    c / eps is inf, makes the kernel hand the whole call to the reference."""
    r = np.random.default_rng(row).normal(size=(67, 8)).astype(np.float32)
    eps = 1e-8
    if bad == "flat":
        r[row] = 2.5
        eps = 1e-320                                         # c / eps is inf in float64
    else:
        r[row, 3] = bad
    assert numba_module.advantages_one_pass(r, np.empty_like(r), eps, "group", 0, 1.0) is None
    if bad == "flat":
        got = gl.group_advantages_fast(r, eps)
        np.testing.assert_array_equal(got, gl.group_advantages(r, eps))
        assert np.all(got[row] == 0)
    else:
        with pytest.raises(ValueError, match=rf"^rewards: .*index \({row}, 3\)"):
            gl.group_advantages_fast(r)
