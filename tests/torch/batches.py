"""Shared inputs and comparisons of the torch tests: seeded batches, NumPy copies, tolerances."""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# How far a torch result may be from the NumPy reference (float64 inside, rounded once).
# float64: the mirror works in float64 too: agreement to rounding, 1e-12.
# float32: the mirror works in float32 (working_dtype). A loss or an advantage is an O(1) value
#   carrying a handful of float32 roundings (the log-ratio, one exp, a product, the masked sum,
#   each <= 2**-24 relative): |error| <= 8 * 2**-24 ~ 5e-7 of the values' scale, under the
#   1e-6 allowed (measured over 200 seeds of `batch`: at most 1.2e-7).
# bfloat16: exact in float32, worked in float32 and rounded to bfloat16 on both sides: one
#   bfloat16 ulp (2**-8 relative) apart at most.
TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-6, atol=1e-6),
       torch.bfloat16: dict(rtol=2 ** -7, atol=2 ** -7)}

# The diagnostics are Python floats (not rounded to the input dtype). float64: 1e-9 relative.
# float32 and bfloat16 inputs: means of per-token values worked in float32, each with <= 4
# roundings, so |error| <= 8 * 2**-24 * mean(|value| + |log-ratio|) < 1e-6 on these batches
# (k3 as expm1(r) - r is accurate to ulp(r), not ulp(k3), hence the log-ratio; k1's mean can
# cancel to near 0, hence an absolute bound). Measured over 200 seeds: at most 1.6e-7.
DIAG_TOL = {torch.float64: dict(rel=1e-9, abs=1e-12), torch.float32: dict(rel=2e-6, abs=1e-6),
            torch.bfloat16: dict(rel=2e-6, abs=1e-6)}

NP_DTYPE = {torch.float64: np.float64, torch.float32: np.float32,
            torch.bfloat16: ml_dtypes.bfloat16}


def as_np(t):
    """A tensor as a NumPy array of the same dtype (bfloat16 via float32, exactly)."""
    dtype = NP_DTYPE[t.dtype]
    return t.detach().cpu().to(torch.float32 if t.dtype == torch.bfloat16 else t.dtype) \
        .numpy().astype(dtype)


def close(t, ref, dtype):
    np.testing.assert_allclose(t.detach().cpu().double().numpy(),
                               np.asarray(ref).astype(np.float64), **TOL[dtype])


def batch(seed, N=12, T=7, dtype=torch.float32, device="cpu"):
    """Random logp, old_logp, ref_logp near each other, advantages, and a ragged mask."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(N, T, generator=g, dtype=torch.float64) * 3
    old = logp + 0.3 * torch.randn(N, T, generator=g, dtype=torch.float64)
    ref = logp + 0.5 * torch.randn(N, T, generator=g, dtype=torch.float64)
    adv = torch.randn(N, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return [x.to(dtype).to(device) for x in (logp, old, ref, adv)] + [mask.to(device)]
