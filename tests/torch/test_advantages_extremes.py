"""grpo_lab.torch.group_advantages agrees with the NumPy reference at the ends of the float
range: subnormal rewards, rewards near the largest float, and an eps from 1e-320 to 1e300
(issue 15: a scale factor or ``eps * 2**s`` that overflowed gave zeros or a false "does not
fit" error).

The worked case: rewards [5e-324, 0, 1e-323, 2e-323] (multiples of the smallest subnormal)
have mean 8.75e-324 and std 7.4e-324, both far below eps = 1e-8, so A = (r - mean) / 1e-8 is
about [-3.7e-316, -8.6e-316, 1.2e-316, 1.1e-315]: tiny, but not 0.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402


def test_subnormal_rewards_by_hand():
    r = np.array([[5e-324, 0.0, 1e-323, 2e-323]])
    tiny = np.finfo(np.float64).smallest_subnormal                 # 2**-1074
    assert (r / tiny).tolist() == [[1.0, 0.0, 2.0, 4.0]]           # mean 1.75, std 1.48 tiny
    dev = np.array([[-0.75, -1.75, 0.25, 2.25]])                   # (r - mean) / tiny, exact
    expected = dev * (tiny / (np.sqrt((dev ** 2).mean()) * tiny + 1e-8))   # std + eps = 1e-8
    assert np.allclose(expected, [[-3.7055e-316, -8.6461e-316, 1.2352e-316, 1.1116e-315]], rtol=1e-4)
    for got in (gl.group_advantages(r), glt.group_advantages(torch.tensor(r)).numpy()):
        np.testing.assert_allclose(got, expected, rtol=1e-6)       # 1e-316: 8 digits left


def _agree(a, b, dtype):
    floor = 1e-320 if dtype == np.float64 else float(np.finfo(np.float32).tiny)
    return np.allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(a).max() + floor)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device here"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_torch_matches_numpy_from_subnormal_to_huge_rewards_and_any_eps(dtype, device):
    """A seeded sweep over 10**-323 .. 10**307 rewards (float32: its own range), eps from
    1e-320 to 1e300 or 0, every scale and baseline; float32 may flush an advantage below its
    smallest normal number (1.2e-38) to 0, as the module says."""
    rng = np.random.default_rng(15)
    lo, hi = (-323, 307) if dtype == np.float64 else (-44, 37)
    for trial in range(1500):
        B, G = int(rng.integers(1, 3)), int(rng.integers(2, 6))
        r = (rng.integers(-5, 6, size=(B, G)) * 10.0 ** rng.uniform(lo, hi)).astype(dtype)
        if rng.random() < 0.3:
            r[0] = r[0, 0]                                         # an all-equal group
        eps = float(10.0 ** rng.uniform(-320, 300)) if rng.random() < 0.8 else 0.0
        kw = dict(eps=eps, scale=("group", "batch", "none")[trial % 3], ddof=trial % 2,
                  baseline=("mean", "leave_one_out")[trial % 5 == 0])
        try:
            ref = gl.group_advantages(r, **kw)
        except ValueError as err:                                  # e.g. does not fit: both say so
            with pytest.raises(ValueError, match="rewards: the advantages do not fit"):
                glt.group_advantages(torch.tensor(r, device=device), **kw)
            assert "do not fit" in str(err)
            continue
        got = glt.group_advantages(torch.tensor(r, device=device), **kw).cpu().numpy()
        assert _agree(ref, got, dtype), (r.tolist(), kw, ref, got)


def test_the_scale_is_a_finite_power_of_two_whatever_eps():
    for eps in (0.0, 5e-324, 1e-8, 1e300):
        for x in (torch.tensor([[5e-324, 0.0]], dtype=torch.float64),
                  torch.tensor([[1e308, -1e308]], dtype=torch.float64),
                  torch.tensor([[1e-45, 0.0]], dtype=torch.float32)):
            scaled, up = glt.power_of_two_rescale(x, x.dtype, eps=eps)
            assert torch.isfinite(up) and up > 0 and torch.frexp(up).mantissa == 0.5
            assert torch.isfinite(scaled).all()
