"""The fast path's two kernels called directly: they write the reference into ``out``, leave a
NaN reward to the reference (None), and name a bad argument."""

import numpy as np
import pytest

import grpo_lab as gl
import grpo_lab.perf.advantages_fast as fast_module

OPTIONS = [dict(scale=s, baseline=b, ddof=d) for s in gl.SCALES for b in gl.BASELINES
           for d in (0, 1)]


@pytest.mark.parametrize("kernel, dtype", [
    (fast_module.blocked_advantages_narrow, np.float32),
    (fast_module.blocked_advantages_narrow, np.bool_),
    (fast_module.blocked_advantages_wide, np.float64),
    (fast_module.blocked_advantages_wide, np.int64),
], ids=lambda x: getattr(x, "__name__", str(x)))
def test_kernels_write_the_reference_into_out(kernel, dtype):
    rng = np.random.default_rng(8)
    r = (rng.normal(size=(300, 8)) * 5).astype(dtype)
    for options in OPTIONS:
        G = r.shape[1]
        c = G / (G - 1) if options["baseline"] == "leave_one_out" else 1.0
        ref = gl.group_advantages(r, scale=options["scale"], ddof=options["ddof"],
                                  baseline=options["baseline"])
        out = np.empty(r.shape, ref.dtype)
        got = kernel(r, out, 1e-8, options["scale"], options["ddof"], c)
        assert got is out
        np.testing.assert_allclose(got, ref, rtol=1e-6 if ref.dtype == np.float32 else 1e-12,
                                   atol=1e-6)


@pytest.mark.parametrize("kernel, dtype", [(fast_module.blocked_advantages_narrow, np.float32),
                                           (fast_module.blocked_advantages_wide, np.float64)])
@pytest.mark.parametrize("scale", gl.SCALES)
def test_kernels_leave_a_nan_reward_to_the_reference(kernel, dtype, scale):
    r = np.zeros((50, 4), dtype=dtype)
    r[17, 2] = np.nan
    with np.errstate(invalid="ignore"):
        assert kernel(r, np.empty_like(r), 1e-8, scale, 0, 1.0) is None


def test_a_kernel_names_a_bad_argument():
    narrow, wide = fast_module.blocked_advantages_narrow, fast_module.blocked_advantages_wide
    r = np.zeros((3, 4), dtype=np.float32)
    with pytest.raises(TypeError, match="^rewards: expected dtype float64 or integer"):
        wide(r, np.empty_like(r))
    with pytest.raises(TypeError, match="^rewards: expected dtype float16, bfloat16, float32"):
        narrow(r.astype(np.float64), np.empty((3, 4)))
    with pytest.raises(ValueError, match=r"^out: expected shape \(3, 4\)"):
        narrow(r, np.empty((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"^rewards: expected a 2-D array of shape \(B, G\)"):
        narrow(r[:, :1], np.empty((3, 1), np.float32))
