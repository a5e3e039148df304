"""grpo_lab.torch: the same results as the NumPy reference, gradients that check out in
float64, CPU/CUDA, and the same errors for bad input."""

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# float32 results are the float64 result rounded once (both sides work in float64), so they
# agree to a couple of ulp; bfloat16 inputs are exact in float64 and the results are rounded
# to bfloat16 on both sides: they may differ by one bfloat16 ulp (2**-8 relative).
TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-6, atol=1e-6),
       torch.bfloat16: dict(rtol=2 ** -7, atol=2 ** -7)}
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


# --- parity with the NumPy reference -----------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(5))
def test_group_advantages_parity(seed, dtype, device):
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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["kl_k1", "kl_k2", "kl_k3"])
def test_kl_parity(name, dtype, device):
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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(3))
def test_clipped_surrogate_and_sequence_ratio_parity(seed, dtype, device):
    logp, old, _, adv, mask = batch(seed, dtype=dtype, device=device)
    for kwargs in [{}, dict(eps_high=0.28), dict(eps_low=0.1, dual_clip=3.0)]:
        for a in (adv, adv[:, None].expand(logp.shape).contiguous()):
            out = glt.clipped_surrogate_loss(logp, old, a, **kwargs)
            close(out, gl.clipped_surrogate_loss(as_np(logp), as_np(old), as_np(a), **kwargs),
                  dtype)
    close(glt.sequence_ratio(logp, old, mask),
          gl.sequence_ratio(as_np(logp), as_np(old), mask.cpu().numpy()), dtype)


@pytest.mark.parametrize("mode", gl.AGGREGATIONS)
def test_aggregation_parity(mode):
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
def test_grpo_loss_parity(seed, dtype, device):
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
                assert diag[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_grpo_loss_agrees_with_chapter_7s_eager_torch_loss():
    loss_fused = pytest.importorskip("grpo_lab.perf.loss_fused")
    logp, old, ref, adv, mask = batch(7, dtype=torch.float64)
    for agg in gl.AGGREGATIONS:
        ours, _ = glt.grpo_loss(logp, old, ref, adv, mask, agg=agg)
        theirs = loss_fused.grpo_loss_eager(logp, old, ref, adv, mask, agg=agg)
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)


# --- gradients -----------------------------------------------------------------------------------

def _grad_inputs(seed):
    logp, old, ref, adv, mask = batch(seed, N=5, T=4, dtype=torch.float64)
    return logp.requires_grad_(), old, ref.requires_grad_(), adv.requires_grad_(), mask


@pytest.mark.parametrize("seed", range(3))
def test_gradcheck_losses_in_float64(seed):
    logp, old, ref, adv, mask = _grad_inputs(seed)
    for kwargs in [dict(kl="k3"), dict(kl="k1", agg="dapo"), dict(kl="k2", agg="dr_grpo"),
                   dict(level="sequence", eps_low=0.05)]:
        assert torch.autograd.gradcheck(
            lambda lp, r, a: glt.grpo_loss(lp, old, r, a, mask, **kwargs)[0], (logp, ref, adv))
    assert torch.autograd.gradcheck(
        lambda lp, a: glt.clipped_surrogate_loss(lp, old, a, dual_clip=2.0), (logp, adv))
    assert torch.autograd.gradcheck(lambda lp: glt.sequence_ratio(lp, old, mask), (logp,))
    for name in ("kl_k1", "kl_k2", "kl_k3"):
        assert torch.autograd.gradcheck(lambda lp, r: getattr(glt, name)(lp, r), (logp, ref))
    assert torch.autograd.gradcheck(lambda x: glt.aggregate_loss(x, mask, "grpo"), (logp,))


@pytest.mark.parametrize("kwargs", [{}, dict(ddof=1), dict(scale="batch"), dict(scale="none"),
                                    dict(baseline="leave_one_out")])
def test_gradcheck_group_advantages(kwargs):
    rewards = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.autograd.gradcheck(lambda r: glt.group_advantages(r, **kwargs),
                                    (rewards.requires_grad_(),))


def test_gradients_stay_finite_where_the_formulas_have_traps():
    # an all-equal group (0/0 guarded by where), a clamped k3 far out (expm1 of a capped r)
    rewards = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
    glt.group_advantages(rewards, eps=0.0).sum().backward()
    assert torch.isfinite(rewards.grad).all()
    logp = torch.tensor([-900.0, -1e-6, 3.0], dtype=torch.float64, requires_grad=True)
    out = glt.kl_k3(logp, torch.zeros(3, dtype=torch.float64), clamp=10.0)
    out.sum().backward()
    assert out[0].item() == 10.0 and logp.grad[0].item() == 0.0
    assert torch.isfinite(logp.grad).all()


def test_the_gradient_is_the_policy_gradient_at_ratio_one():
    """At logp == old_logp and beta = 0, d loss / d logp = -w * A (the REINFORCE direction)."""
    logp, _, _, adv, mask = batch(4, dtype=torch.float64)
    logp = logp.clone().requires_grad_()
    loss, _ = glt.grpo_loss(logp, logp.detach(), None, adv, mask, beta=0.0)
    loss.backward()
    w = glt.aggregation_weights(mask, "grpo")
    torch.testing.assert_close(logp.grad, -w * adv[:, None], rtol=1e-12, atol=1e-15)


# --- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, words", [
    (lambda: glt.group_advantages(np.ones((2, 4))), TypeError,
     "rewards: expected a torch.Tensor of shape (B, G)"),
    (lambda: glt.group_advantages(torch.ones(4)), ValueError, "rewards: expected a 2-D tensor"),
    (lambda: glt.group_advantages(torch.ones(3, 1)), ValueError, "G >= 2"),
    (lambda: glt.group_advantages(torch.tensor([[1.0, float("nan")]])), ValueError,
     "rewards: expected finite values"),
    (lambda: glt.group_advantages(torch.ones(2, 2, dtype=torch.complex64)), TypeError,
     "rewards: expected a real dtype"),
    (lambda: glt.group_advantages(torch.ones(2, 3), scale="rows"), ValueError,
     "scale: expected one of 'group', 'batch', 'none'"),
    (lambda: glt.group_advantages(torch.ones(2, 3), ddof=3), ValueError, "ddof:"),
    (lambda: glt.kl_k3(torch.zeros(2, 3), torch.zeros(3, 2)), ValueError,
     "ref_logp: expected shape (2, 3)"),
    (lambda: glt.kl_k3(torch.tensor([-800.0]), torch.tensor([0.0])), ValueError,
     "expected a k3 estimate that fits in torch.float32"),
    (lambda: glt.kl_k1(torch.zeros(3), torch.zeros(3), clamp=-1.0), ValueError, "clamp:"),
    (lambda: glt.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), None, torch.zeros(2),
                           torch.ones(2, 3)), ValueError, "ref_logp: expected an (N, T) tensor"),
    (lambda: glt.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3),
                           torch.zeros(3), torch.ones(2, 3)), ValueError,
     "adv: expected shape (2,) (one advantage per sequence) or (2, 3)"),
    (lambda: glt.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3),
                           torch.zeros(2), torch.full((2, 3), 0.5)), ValueError,
     "mask: expected only 0 and 1"),
    (lambda: glt.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3),
                           torch.zeros(2), torch.tensor([[1, 1, 1], [0, 0, 0]])), ValueError,
     "mask: expected at least one valid token in every sequence"),
    (lambda: glt.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3),
                           torch.zeros(2), torch.ones(2, 3), agg="mean"), ValueError,
     "agg: expected one of 'grpo', 'bnpo', 'dapo', 'dr_grpo'"),
    (lambda: glt.grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3),
                           torch.zeros(2), torch.ones(2, 3), eps_low=1.5), ValueError, "eps_low:"),
    (lambda: glt.aggregate_loss(torch.zeros(2, 3), torch.ones(2, 3), "grpo", max_len=5),
     ValueError, "max_len: expected None with mode 'grpo'"),
    (lambda: glt.aggregate_loss(torch.zeros(2, 3), torch.ones(2, 3), "dr_grpo", max_len=2),
     ValueError, "max_len: expected an integer in [3, inf]"),
    (lambda: glt.clipped_surrogate_loss(torch.zeros(2, 3), [[0.0] * 3] * 2, torch.zeros(2)),
     TypeError, "old_logp: expected a torch.Tensor"),
    (lambda: glt.clipped_surrogate_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2),
                                        dual_clip=1.0), ValueError, "dual_clip:"),
])
def test_bad_input_names_the_problem(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tensors_on_two_devices_are_refused():
    with pytest.raises(ValueError, match="ref_logp: expected a tensor on cpu"):
        glt.kl_k3(torch.zeros(3), torch.zeros(3, device="cuda"))


def test_import_grpo_lab_does_not_import_torch():
    code = ("import sys, grpo_lab, grpo_lab.rl.rewards, grpo_lab.rl.task; "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
