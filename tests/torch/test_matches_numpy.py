"""grpo_lab.torch gives the NumPy reference's results, on CPU and CUDA, in float64, float32 and
bfloat16, within the error bounds stated in tests/torch/batches.py.

Chapter 6 ("3. Advantages") computes chapter 1's advantages with ``gl.torch.group_advantages``
and says that ``gl.torch`` mirrors the NumPy functions name for name, with the same results:
test_group_advantages_match and the tests after it back that claim, function by function."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402
from tests.torch.batches import DEVICES, DIAG_TOL, as_np, batch, close  # noqa: E402


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(5))
def test_group_advantages_match(seed, dtype, device):
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.randn(6, 8, generator=g, dtype=torch.float64) * 3).to(dtype).to(device)
    for kwargs in [{}, dict(ddof=1), dict(scale="batch"), dict(scale="none"),
                   dict(baseline="leave_one_out"), dict(eps=0.0)]:
        out = glt.group_advantages(rewards, **kwargs)
        assert out.dtype == dtype and out.device.type == device and out.shape == rewards.shape
        close(out, gl.group_advantages(as_np(rewards), **kwargs).astype(np.float64), dtype)


def test_group_advantages_int_bool_and_all_equal():
    out = glt.group_advantages(torch.tensor([[1, 0, 1, 0], [1, 1, 1, 1]]))
    assert out.dtype == torch.float64
    np.testing.assert_array_equal(out.numpy(), gl.group_advantages([[1, 0, 1, 0], [1, 1, 1, 1]]))
    assert torch.equal(out[1], torch.zeros(4, dtype=torch.float64))
    same = torch.full((1, 3), 699051.00118143, dtype=torch.float64)    # chapter 1's bad group
    assert torch.equal(glt.group_advantages(same), torch.zeros(1, 3, dtype=torch.float64))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("rewards", [
    [[1e30, -2e30, 3e30, 0.0], [0.1, 0.1, 0.1, 0.1]],        # squares past float32's 3.4e38
    [[1e20, -2e20, 3e20, 0.0], [0.1, 0.1, 0.1, 0.1], [1e-5, 3e-5, -2e-5, 0.0]],   # 2**-84 apart
], ids=["huge", "wide-range"])
def test_float32_advantages_keep_the_reference_safeguards(scale, rewards):
    """Worked in float32: rewards of 1e30 do not overflow a square, an all-equal group of
    0.1s gives exact zeros, and a group 1e-5 small next to one of 1e20 (a spread 2**-84 of the
    largest reward, inside the documented 2**-105) matches the float64 reference."""
    rewards = torch.tensor(rewards, dtype=torch.float32)
    out = glt.group_advantages(rewards, eps=0.0, scale=scale)
    assert torch.isfinite(out).all()
    if scale != "batch":
        assert torch.equal(out[1], torch.zeros(4))
    np.testing.assert_allclose(out.numpy(), gl.group_advantages(rewards.numpy(), eps=0.0,
                                                                scale=scale), rtol=1e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["kl_k1", "kl_k2", "kl_k3"])
def test_kl_estimators_match(name, dtype, device):
    logp, _, ref, _, _ = batch(1, dtype=dtype, device=device)
    for clamp in (None, 0.5):
        out = getattr(glt, name)(logp, ref, clamp=clamp)
        assert out.dtype == dtype and out.shape == logp.shape
        close(out, getattr(gl, name)(as_np(logp), as_np(ref), clamp=clamp), dtype)


def test_k3_is_accurate_where_exp_minus_one_cancels():
    logp = torch.tensor([-1e-9, -1e-4, 0.05], dtype=torch.float64)
    out = glt.kl_k3(logp, torch.zeros(3, dtype=torch.float64))
    np.testing.assert_allclose(out.numpy(), gl.kl_k3(logp.numpy(), np.zeros(3)), rtol=1e-15)
    assert out[0].item() == pytest.approx(5e-19, rel=1e-8)


def test_the_loss_k3_is_accurate_to_the_ulp_of_the_log_ratio():
    """The loss's k3, expm1(r) - r: off by at most a few ulp(r) (TRL's exp(r) - r - 1 is off
    by ulp(1)); float32, against the float64 series of the reference."""
    r = torch.tensor([1e-6, -3e-4, 0.02, -0.09, 0.5, -3.0], dtype=torch.float32)
    ours = glt.k3_expm1(r).double()
    exact = torch.from_numpy(gl.kl_k3(np.zeros(6), r.double().numpy()))
    ulp_r = torch.abs(r.double()) * 2.0 ** -23
    assert torch.all(torch.abs(ours - exact) <= 2 * ulp_r + exact * 2.0 ** -23)
    trl = (torch.exp(r) - r - 1).double()
    assert torch.abs(trl - exact)[0] > 1e3 * torch.abs(ours - exact)[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(3))
def test_clipped_surrogate_and_sequence_ratio_match(seed, dtype, device):
    logp, old, _, adv, mask = batch(seed, dtype=dtype, device=device)
    for kwargs in [{}, dict(eps_high=0.28), dict(eps_low=0.1, dual_clip=3.0)]:
        for a in (adv, adv[:, None].expand(logp.shape).contiguous()):
            out = glt.clipped_surrogate_loss(logp, old, a, **kwargs)
            close(out, gl.clipped_surrogate_loss(as_np(logp), as_np(old), as_np(a), **kwargs),
                  dtype)
    close(glt.sequence_ratio(logp, old, mask),
          gl.sequence_ratio(as_np(logp), as_np(old), mask.cpu().numpy()), dtype)


@pytest.mark.parametrize("mode", gl.AGGREGATIONS)
def test_aggregation_matches(mode):
    logp, _, _, _, mask = batch(3, dtype=torch.float64)
    np.testing.assert_allclose(glt.aggregation_weights(mask, mode).numpy(),
                               gl.aggregation_weights(mask.numpy(), mode), rtol=1e-15)
    assert glt.aggregate_loss(logp, mask, mode).item() == pytest.approx(
        float(gl.aggregate_loss(logp.numpy(), mask.numpy(), mode)), rel=1e-14)
    if mode == "dr_grpo":
        assert glt.aggregate_loss(logp, mask, mode, max_len=20).item() == pytest.approx(
            float(gl.aggregate_loss(logp.numpy(), mask.numpy(), mode, max_len=20)), rel=1e-14)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(3))
def test_grpo_loss_and_diagnostics_match(seed, dtype, device):
    logp, old, ref, adv, mask = batch(seed, dtype=dtype, device=device)
    settings = [{}, dict(agg="dapo", kl="k1"), dict(agg="dr_grpo", kl="k2", eps_high=0.28),
                dict(agg="bnpo", level="sequence", eps_low=3e-4, eps_high=4e-4),
                dict(beta=0.0, agg="grpo")]
    for kwargs in settings:
        ref_t = None if kwargs.get("beta") == 0.0 else ref
        loss, diag = glt.grpo_loss(logp, old, ref_t, adv, mask, **kwargs)
        ref_loss, ref_diag = gl.grpo_loss(as_np(logp), as_np(old),
                                          None if ref_t is None else as_np(ref), as_np(adv),
                                          mask.cpu().numpy(), **kwargs)
        assert loss.dtype == dtype and loss.dim() == 0
        close(loss, float(ref_loss), dtype)
        assert diag.keys() == ref_diag.keys()
        for key, value in ref_diag.items():
            if value is None:
                assert diag[key] is None
            else:
                assert diag[key] == pytest.approx(value, **DIAG_TOL[dtype]), key


def test_grpo_loss_agrees_with_chapter_7s_torch_losses():
    """The fused loss for every aggregation, and the TRL-style eager loss (k3, grpo)."""
    loss_fused = pytest.importorskip("grpo_lab.perf.loss_fused")
    from grpo_lab.perf.baselines import trl_style_loss
    logp, old, ref, adv, mask = batch(7, dtype=torch.float64)
    for agg in gl.AGGREGATIONS:
        ours, _ = glt.grpo_loss(logp, old, ref, adv, mask, agg=agg)
        theirs, _ = loss_fused.grpo_loss_fused(logp, old, ref, adv, mask, agg=agg)
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    ours, diag = glt.grpo_loss(logp, old, ref, adv, mask)
    trl, metrics = trl_style_loss(logp, old, ref, adv, mask)
    assert ours.item() == pytest.approx(trl.item(), rel=1e-12)
    for key, value in metrics.items():
        assert diag[key] == pytest.approx(value, rel=2 ** -24), key   # TRL divides in float32
