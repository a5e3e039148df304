"""The Triton kernels equal their references: group_advantages_triton and grpo_loss_triton,
at several shapes with ragged masks. Without a GPU they run under Triton's interpreter (what CI
does, TRITON_INTERPRET=1); the shapes stay small so that it stays fast.

Backs chapter 7's element-wise loss section, which runs grpo_loss_triton the same way, under
the interpreter on CPU tensors, and compares its loss, gradient and clip fraction with the
eager loss."""

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import grpo_lab.torch as glt  # noqa: E402
from grpo_lab.torch import triton_kernels as tk  # noqa: E402

#: Where the kernels run: the GPU when there is one (compiled), else the CPU (interpreted).
DEVICE = "cpu" if tk.interpreted() else "cuda"


def test_without_a_gpu_the_kernels_run_under_the_interpreter():
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU is present: the kernels are compiled for it")
    from triton.runtime.interpreter import InterpretedFunction
    assert tk.interpreted()
    assert all(isinstance(k, InterpretedFunction) for k in tk.kernels().values())


@pytest.mark.parametrize("shape", [(1, 2), (3, 5), (37, 8), (9, 64), (2, 100)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_advantages_equal_the_torch_mirror(shape, dtype):
    gen = torch.Generator().manual_seed(sum(shape))
    r = (3 * torch.randn(shape, generator=gen, dtype=torch.float64) + 1).to(dtype).to(DEVICE)
    r[0] = r[0, 0]                                                   # an all-equal group
    for baseline in ("mean", "leave_one_out"):
        for ddof in (0, 1):
            want = glt.group_advantages(r, baseline=baseline, ddof=ddof)
            got = tk.group_advantages_triton(r, baseline=baseline, ddof=ddof)
            assert got.dtype == want.dtype and torch.all(got[0] == 0)
            tol = 2e-6 if dtype == torch.float32 else 1e-12
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_advantages_refuse_what_the_mirror_refuses():
    with pytest.raises(ValueError, match="^rewards: expected a group size G >= 2"):
        tk.group_advantages_triton(torch.zeros(3, 1, device=DEVICE))
    with pytest.raises(ValueError, match="^rewards: expected finite"):
        tk.group_advantages_triton(torch.tensor([[1.0, float("nan")]], device=DEVICE))
    with pytest.raises(ValueError, match="^scale: expected one of 'group'"):
        tk.group_advantages_triton(torch.zeros(3, 4, device=DEVICE), scale="batch")


def loss_batch(N, T, dtype, per_token_adv, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lp = (-2 + 0.3 * torch.randn(N, T, generator=gen, dtype=dtype)).requires_grad_()
    old = lp.detach() + 0.2 * torch.randn(N, T, generator=gen, dtype=dtype)   # some clip
    ref = lp.detach() + 0.1 * torch.randn(N, T, generator=gen, dtype=dtype)
    adv = torch.randn((N, T) if per_token_adv else (N,), generator=gen, dtype=dtype)
    lengths = torch.randint(1, T + 1, (N,), generator=gen)
    mask = torch.arange(T)[None, :] < lengths[:, None]                         # ragged
    lp = lp.detach().to(DEVICE).requires_grad_()
    return [lp] + [t.to(DEVICE) for t in (old, ref, adv, mask)]


@pytest.mark.parametrize("N, T, agg, with_ref", [
    (1, 1, "grpo", True), (3, 7, "grpo", False), (3, 7, "dapo", True), (3, 7, "dr_grpo", True),
    (9, 130, "grpo", True), (4, 300, "dapo", False),          # 300 x 4: programs cross rows
])
def test_loss_gradient_and_diagnostics_equal_the_eager_loss(N, T, agg, with_ref):
    for dtype, per_token in ((torch.float32, False), (torch.float64, True)):
        lp, old, ref, adv, mask = loss_batch(N, T, dtype, per_token, seed=N * T)
        ref = ref if with_ref else None
        beta = 0.04 if with_ref else 0.0
        want, diag = glt.grpo_loss(lp, old, ref, adv, mask, beta=beta, agg=agg)
        got, stats = tk.grpo_loss_triton(lp, old, ref, adv, mask, beta=beta, agg=agg)
        tol = 1e-6 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        (g_want,) = torch.autograd.grad(want, lp)
        (g_got,) = torch.autograd.grad(got, lp)
        torch.testing.assert_close(g_got, g_want, rtol=tol, atol=tol)
        assert torch.all(g_got[~mask] == 0)                          # padding gets nothing
        for key, value in diag.items():
            if value is None:
                assert stats[key] is None
            else:
                assert stats[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key


def test_loss_refuses_a_non_finite_old_logp_and_an_old_logp_that_needs_grad():
    lp, old, ref, adv, mask = loss_batch(2, 3, torch.float32, False)
    old[0, 2] = -float("inf")
    with pytest.raises(ValueError, match="^old_logp: expected finite values"):
        tk.grpo_loss_triton(lp, old, ref, adv, mask)
    with pytest.raises(ValueError, match="^ref_logp: expected a tensor that does not require"):
        tk.grpo_loss_triton(lp, lp.detach(), ref.requires_grad_(), adv, mask)
