"""group_advantages: worked numbers, low precision, variants and every bad input."""

import ml_dtypes
import numpy as np
import pytest

import grpo_lab as gl

LOW_AND_FULL = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def reference(rewards, eps=1e-8, ddof=0):
    """The plain formula in float64, straight from DeepSeekMath."""
    r = np.asarray(rewards, dtype=np.float64)
    mean = r.mean(axis=-1, keepdims=True)
    std = r.std(axis=-1, keepdims=True, ddof=ddof)
    return (r - mean) / (std + eps)


# --- worked numbers -------------------------------------------------------------------------

def test_two_right_two_wrong():
    adv = gl.group_advantages([[1, 0, 1, 0]])
    assert adv.shape == (1, 4)
    assert adv.mean() == pytest.approx(0.0, abs=1e-15)
    assert adv[0, 0] > 0
    assert adv[0, 0] == -adv[0, 1]
    # std 0.5 (population), so +-0.5 / (0.5 + 1e-8)
    np.testing.assert_allclose(adv, [[1, -1, 1, -1]], rtol=1e-7)
    np.testing.assert_allclose(adv, 0.5 / (0.5 + 1e-8) * np.array([[1, -1, 1, -1]]), rtol=1e-15)


def test_bessel_std_gives_sqrt_three_quarters():
    adv = gl.group_advantages([[1, 0, 1, 0]], eps=0.0, ddof=1)
    # sample std = sqrt(4 * 0.25 / 3) = sqrt(1/3); 0.5 / sqrt(1/3) = sqrt(3)/2
    np.testing.assert_allclose(adv, np.sqrt(3) / 2 * np.array([[1, -1, 1, -1]]), rtol=1e-15)


def test_one_right_out_of_eight():
    adv = gl.group_advantages([[1, 0, 0, 0, 0, 0, 0, 0]], eps=0.0)
    # mean 1/8, std sqrt(7)/8: the right one gets (7/8)/(sqrt(7)/8) = sqrt(7)
    assert adv[0, 0] == pytest.approx(np.sqrt(7), rel=1e-14)
    assert adv[0, 1] == pytest.approx(-1 / np.sqrt(7), rel=1e-14)


def test_rows_are_independent_groups():
    r = np.array([[1.0, 2.0, 3.0], [10.0, 10.0, 40.0]])
    adv = gl.group_advantages(r)
    np.testing.assert_allclose(adv, reference(r), rtol=1e-12)
    np.testing.assert_allclose(adv[0], gl.group_advantages(r[:1])[0], rtol=0, atol=0)


def test_batch_scale_divides_by_the_std_of_all_rewards():
    r = np.array([[1.0, 0.0, 1.0, 0.0], [5.0, 3.0, 4.0, 4.0]])
    adv = gl.group_advantages(r, eps=0.0, scale="batch")
    expected = (r - r.mean(axis=1, keepdims=True)) / r.std()
    np.testing.assert_allclose(adv, expected, rtol=1e-14)
    adv1 = gl.group_advantages(r, eps=0.0, scale="batch", ddof=1)
    np.testing.assert_allclose(adv1, (r - r.mean(1, keepdims=True)) / r.std(ddof=1), rtol=1e-14)


def test_scale_none_only_centres():
    r = np.array([[2.0, 4.0, 9.0]])
    np.testing.assert_allclose(gl.group_advantages(r, scale="none"), [[-3.0, -1.0, 4.0]],
                               rtol=1e-15)


def test_leave_one_out_baseline():
    r = np.array([[1.0, 0.0, 1.0, 0.0]])
    adv = gl.group_advantages(r, scale="none", baseline="leave_one_out")
    # 1 - mean(0, 1, 0) = 2/3 ; 0 - mean(1, 1, 0) = -2/3
    np.testing.assert_allclose(adv, [[2 / 3, -2 / 3, 2 / 3, -2 / 3]], rtol=1e-15)
    rng = np.random.default_rng(0)
    r = rng.normal(size=(5, 7))
    loo = np.stack([[r[b, i] - np.delete(r[b], i).mean() for i in range(7)] for b in range(5)])
    np.testing.assert_allclose(gl.group_advantages(r, scale="none", baseline="leave_one_out"),
                               loo, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        gl.group_advantages(r, eps=0.0, baseline="leave_one_out"),
        loo / r.std(axis=1, keepdims=True), rtol=1e-12)


def test_eps_zero_with_spread_matches_formula_and_all_equal_gives_zero():
    r = np.array([[3.0, 3.0, 3.0], [1.0, 2.0, 4.0]])
    adv = gl.group_advantages(r, eps=0.0)
    np.testing.assert_array_equal(adv[0], 0.0)
    np.testing.assert_allclose(adv[1], reference(r[1:], eps=0.0)[0], rtol=1e-14)


def test_eps_is_added_to_the_std():
    r = np.array([[0.0, 2e-8]])  # std 1e-8: eps = 1e-8 halves the advantage
    np.testing.assert_allclose(gl.group_advantages(r, eps=1e-8), [[-0.5, 0.5]], rtol=1e-12)


# --- dtypes and low precision ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", LOW_AND_FULL)
@pytest.mark.parametrize("value", [0.0, 0.1, 1.0, -3.7, 1e4])
def test_all_equal_group_is_exactly_zero(dtype, value):
    r = np.full((3, 6), value, dtype=np.float64).astype(dtype)
    for scale in gl.SCALES:
        for baseline in gl.BASELINES:
            for ddof in (0, 1):
                adv = gl.group_advantages(r, scale=scale, baseline=baseline, ddof=ddof)
                assert adv.dtype == np.dtype(dtype)
                assert np.all(adv.astype(np.float64) == 0.0), (scale, baseline, ddof)


@pytest.mark.parametrize("dtype", LOW_AND_FULL)
def test_naive_formula_gives_nan_in_float16_but_package_does_not(dtype):
    r = np.full((1, 4), 0.5, dtype=dtype)
    adv = gl.group_advantages(r)
    assert not np.isnan(adv.astype(np.float64)).any()
    if dtype is np.float16:
        # the failure the package guards against: eps = 1e-8 is 0 in float16, so 0 / 0
        with np.errstate(invalid="ignore"):
            naive = (r - r.mean()) / (r.std() + np.float16(1e-8))
        assert np.isnan(naive).all()


@pytest.mark.parametrize("dtype", LOW_AND_FULL)
def test_output_keeps_float_dtype_and_matches_float64_reference(dtype):
    rng = np.random.default_rng(1)
    r = rng.normal(size=(16, 8)).astype(dtype)
    adv = gl.group_advantages(r)
    assert adv.dtype == np.dtype(dtype)
    ref = reference(r.astype(np.float64))
    tol = {np.float16: 2e-3, ml_dtypes.bfloat16: 1.6e-2, np.float32: 1e-6, np.float64: 1e-12}
    np.testing.assert_allclose(adv.astype(np.float64), ref, rtol=tol[dtype], atol=tol[dtype])


def test_huge_float32_rewards_do_not_overflow():
    r = np.array([[1e20, -3e20, 2e20, 5e19], [3e38, -3e38, 1e38, 0.0]], dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = (r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, keepdims=True) + 1e-8)
    # the plain float32 formula overflows: the squares are inf, so the std is inf and
    # every advantage silently collapses to 0
    with np.errstate(over="ignore"):
        assert np.isinf(r.std(axis=1)).all()
    assert np.all(naive == 0)
    adv = gl.group_advantages(r)
    np.testing.assert_allclose(adv, reference(r.astype(np.float64)).astype(np.float32),
                               rtol=1e-6)


def test_huge_float64_rewards_do_not_overflow():
    r = np.array([[1e300, -1.5e300, 1.7e308, -1.7e308]])
    adv = gl.group_advantages(r, ddof=1)
    assert np.isfinite(adv).all()
    scaled = r / 1e300
    np.testing.assert_allclose(adv, reference(scaled, eps=0.0, ddof=1), rtol=1e-12, atol=1e-15)


def test_small_spread_around_large_mean_float32():
    rng = np.random.default_rng(2)
    r = (1e3 + 1e-3 * rng.normal(size=(64, 16))).astype(np.float32)
    adv = gl.group_advantages(r)
    ref = reference(r.astype(np.float64))  # same float32 input values, in float64
    np.testing.assert_allclose(adv, ref.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_ints_and_bools_give_float64():
    for r in ([[1, 0, 1, 0]], np.array([[True, False, True, False]])):
        adv = gl.group_advantages(r)
        assert adv.dtype == np.float64
        np.testing.assert_allclose(adv, [[1, -1, 1, -1]], rtol=1e-7)


def test_float16_result_that_does_not_fit_is_an_error():
    r = np.array([[65000, -65000, -65000, -65000]], dtype=np.float16)
    with pytest.raises(ValueError, match=r"rewards: the advantages do not fit in float16"):
        gl.group_advantages(r, scale="none")


def test_input_is_never_modified():
    r = np.array([[1.0, 5.0, 2.0], [0.0, 0.0, 3.0]], dtype=np.float32)
    before = r.copy()
    for scale in gl.SCALES:
        for baseline in gl.BASELINES:
            gl.group_advantages(r, scale=scale, baseline=baseline)
    np.testing.assert_array_equal(r, before)
    assert r.flags.writeable


# --- bad input: each error names the argument, what was expected and what came --------------

@pytest.mark.parametrize("rewards, exc, pattern", [
    ([1.0, 0.0, 1.0], ValueError, r"rewards: expected a 2-D array of shape \(B, G\), got a 1-D"),
    (np.zeros((2, 3, 4)), ValueError, r"rewards: expected a 2-D array .* got a 3-D .*\(2, 3, 4\)"),
    (np.zeros((3, 1)), ValueError, r"rewards: expected a group size G >= 2 .* got shape \(3, 1\)"),
    (np.zeros((0, 4)), ValueError, r"rewards: expected a non-empty array .* shape \(0, 4\)"),
    (np.zeros((4, 0)), ValueError, r"rewards: expected a non-empty array .* shape \(4, 0\)"),
    ([[1.0, np.nan]], ValueError, r"rewards: expected finite values, got nan at index \(0, 1\)"),
    ([[np.inf, 1.0]], ValueError, r"rewards: expected finite values, got inf at index \(0, 0\)"),
    ([["a", "b"]], TypeError, r"rewards: expected a real numeric dtype .* got dtype <U1"),
    ([[1 + 2j, 0]], TypeError, r"rewards: expected a real numeric dtype .* got dtype complex128"),
    (np.array([[1, 2]], dtype=object), TypeError, r"rewards: .* got dtype object"),
    ("1, 0", TypeError, r"rewards: expected a numeric array"),
    (None, TypeError, r"rewards: expected a numeric array .* got NoneType"),
])
def test_bad_rewards(rewards, exc, pattern):
    with pytest.raises(exc, match=pattern):
        gl.group_advantages(rewards)


def test_float16_nan_is_reported():
    with pytest.raises(ValueError, match=r"rewards: expected finite values"):
        gl.group_advantages(np.array([[1, np.nan]], dtype=np.float16))
    with pytest.raises(ValueError, match=r"rewards: expected finite values"):
        gl.group_advantages(np.array([[1, np.inf]], dtype=ml_dtypes.bfloat16))


@pytest.mark.parametrize("kwargs, exc, pattern", [
    ({"eps": -1e-8}, ValueError, r"eps: expected a number >= 0.0, got -1e-08"),
    ({"eps": float("nan")}, ValueError, r"eps: expected a finite number, got nan"),
    ({"eps": "1e-8"}, TypeError, r"eps: expected a real number, got str"),
    ({"eps": np.array([1e-8, 1e-8])}, TypeError, r"eps: expected a real number, got a 1-D float64 array of shape \(2,\)"),
    ({"eps": True}, TypeError, r"eps: expected a real number, got bool"),
    ({"scale": "std"}, ValueError, r"scale: expected one of 'group', 'batch', 'none', got 'std'"),
    ({"scale": None}, ValueError, r"scale: expected one of .* got None"),
    ({"baseline": "median"}, ValueError,
     r"baseline: expected one of 'mean', 'leave_one_out', got 'median'"),
    ({"ddof": 4}, ValueError, r"ddof: expected an integer in \[0, 3\] so that G - ddof > 0, got 4"),
    ({"ddof": -1}, ValueError, r"ddof: expected an integer in \[0, 3\]"),
    ({"ddof": 1.0}, TypeError, r"ddof: expected an integer, got float"),
])
def test_bad_options(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        gl.group_advantages(np.ones((2, 4)), **kwargs)


def test_ddof_bound_for_batch_scale_counts_all_rewards():
    gl.group_advantages(np.arange(4.0).reshape(2, 2), scale="batch", ddof=3)  # 4 - 3 > 0
    with pytest.raises(ValueError, match=r"ddof: .* so that B\*G - ddof > 0, got 4"):
        gl.group_advantages(np.arange(4.0).reshape(2, 2), scale="batch", ddof=4)


def test_no_positional_options():
    with pytest.raises(TypeError):
        gl.group_advantages([[1, 0]], 1e-8, "batch")
