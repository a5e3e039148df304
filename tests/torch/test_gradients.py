"""grpo_lab.torch's gradients: they check out against finite differences in float64, stay
finite where the formulas have traps, and the clip written as one clamp differentiates
exactly like PPO's two-term max."""

import pytest

torch = pytest.importorskip("torch")

import grpo_lab.torch as glt  # noqa: E402
from tests.torch.batches import batch  # noqa: E402


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


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradients_stay_finite_where_the_formulas_have_traps(dtype):
    # an all-equal group (0/0 guarded by where, in float32 too), a clamped k3 far out
    for scale in ("group", "batch"):
        rewards = torch.ones(2, 4, dtype=dtype, requires_grad=True)
        glt.group_advantages(rewards, eps=0.0, scale=scale).sum().backward()
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


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_the_one_clamp_equals_ppos_two_term_max_in_value_and_gradient(dual_clip):
    """-A clamp(r, lo, hi) against CleanRL's max(-r A, -clip(r) A) (and dual-clip's min with
    -c A for A < 0), on ratios that hit every branch, ties at the clip edges included."""
    ratio = torch.tensor([0.5, 0.8, 0.9, 1.0, 1.2, 1.3, 5.0], dtype=torch.float64)
    ratio = ratio.repeat(3, 1)                                        # (3, 7)
    adv = torch.tensor([[1.5], [-0.7], [0.0]], dtype=torch.float64)   # A > 0, A < 0, A = 0

    def two_term_max(r):
        pg = torch.maximum(-adv * r, -adv * torch.clamp(r, 0.8, 1.2))
        if dual_clip is not None:
            pg = torch.where(adv < 0, torch.minimum(pg, -adv * dual_clip), pg)
        return pg

    def one_clamp(r):
        lo, hi = glt.clip_bounds(adv, 0.2, 0.2, dual_clip)
        return -adv * torch.clamp(r, lo, hi)

    grads = []
    for fn in (two_term_max, one_clamp):
        r = ratio.clone().requires_grad_()
        value = fn(r)
        value.sum().backward()
        grads.append((value.detach(), r.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=0)
    torch.testing.assert_close(grads[0][1][:2], grads[1][1][:2], rtol=0, atol=0)   # A != 0
