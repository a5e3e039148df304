"""The torch twins of GRPO's neighbours (``glt.neighbours``): equal to the NumPy reference,
and autograd gives each method's gradient (CISPO's stop gradient, SAPO's soft gate)."""

import numpy as np
import pytest

import grpo_lab as gl

torch = pytest.importorskip("torch")
import grpo_lab.torch as glt  # noqa: E402

N, T = gl.neighbours, glt.neighbours
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def batch(seed, n=6, t=5):
    rng = np.random.default_rng(seed)
    logp = np.log(rng.uniform(0.05, 1.0, size=(n, t)))
    old = logp + rng.normal(0, 0.6, size=(n, t))                          # some clipped
    adv = rng.normal(size=n)
    adv[0] = 0.0                                                          # A = 0 takes tau_neg
    mask = np.arange(t)[None, :] < rng.integers(1, t + 1, size=n)[:, None]
    rewards = rng.choice([0.0, 0.5, 1.0], size=(2, n // 2))
    return logp, old, adv, mask, rewards


LOSSES = {
    "cispo_weight": lambda f, lp, old, adv: f.cispo_weight(lp, old, eps_low=0.2, eps_high=0.28),
    "cispo_loss": lambda f, lp, old, adv: f.cispo_loss(lp, old, adv, eps_high=0.5),
    "cispo_loss_low": lambda f, lp, old, adv: f.cispo_loss(lp, old, adv, eps_low=0.2, eps_high=0.2),
    "sapo_gate": lambda f, lp, old, adv: f.sapo_gate(lp, old, adv, tau_pos=0.7, tau_neg=1.3),
    "sapo_loss": lambda f, lp, old, adv: f.sapo_loss(lp, old, adv),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("seed", range(4))
def test_losses_match_numpy(name, seed, device):
    logp, old, adv, _, _ = batch(seed)
    ref = LOSSES[name](N, logp, old, adv)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        t = [torch.tensor(x, dtype=dtype, device=device) for x in (logp, old, adv)]
        got = LOSSES[name](T, *t)
        assert got.dtype == dtype and got.device.type == device
        np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", range(4))
def test_advantages_match_numpy(seed):
    _, _, _, mask, rewards = batch(seed)
    tr, tm = torch.from_numpy(rewards), torch.from_numpy(mask)
    for kwargs in (dict(), dict(baseline="group_mean"), dict(ddof=0, eps=1e-4)):
        np.testing.assert_allclose(T.reinforce_pp_advantages(tr, tm, **kwargs).numpy(),
                                   N.reinforce_pp_advantages(rewards, mask, **kwargs),
                                   rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(T.reinforce_pp_advantages(tr, **kwargs).numpy(),
                                   N.reinforce_pp_advantages(rewards, **kwargs),
                                   rtol=1e-13, atol=1e-14)
    greedy = rewards[:, 0]
    np.testing.assert_array_equal(T.remax_advantages(tr, torch.from_numpy(greedy)).numpy(),
                                  N.remax_advantages(rewards, greedy))
    f32 = T.reinforce_pp_advantages(tr.float(), tm)
    assert f32.dtype == torch.float32


def test_reinforce_pp_ties_give_exact_zeros_and_big_rewards_do_not_overflow():
    ties = torch.tensor([[0.7, 0.7], [0.7, 0.7]], dtype=torch.float32)
    assert (T.reinforce_pp_advantages(ties) == 0).all()
    big = T.reinforce_pp_advantages(torch.tensor([[3e38, -3e38]]), ddof=0)
    torch.testing.assert_close(big, torch.tensor([[1.0, -1.0]]))


@pytest.mark.parametrize("seed", range(4))
def test_cispo_gradient_is_the_stop_gradient_one(seed):
    """d loss / d logp = -r_hat A on every token: the weight is a constant, and a clipped
    token keeps its gradient (GRPO's surrogate gives it 0)."""
    logp, old, adv, _, _ = batch(seed)
    lp = torch.tensor(logp, requires_grad=True)
    T.cispo_loss(lp, torch.from_numpy(old), torch.from_numpy(adv), eps_high=0.28).sum().backward()
    w = N.cispo_weight(logp, old, eps_high=0.28)
    np.testing.assert_allclose(lp.grad.numpy(), -w * adv[:, None], rtol=1e-12, atol=1e-14)
    grpo = gl.surrogate_grad_logp(logp, old, adv, eps_low=0.2, eps_high=0.28)
    clipped = (grpo == 0) & (adv[:, None] != 0)
    assert clipped.any() and (lp.grad.numpy()[clipped] != 0).all()
    # The weight carries no graph: nothing flows back through the ratio.
    assert not T.cispo_weight(lp, torch.from_numpy(old)).requires_grad


@pytest.mark.parametrize("seed", range(4))
def test_sapo_gradient_is_the_soft_gates(seed):
    logp, old, adv, _, _ = batch(seed)
    lp = torch.tensor(logp, requires_grad=True)
    T.sapo_loss(lp, torch.from_numpy(old), torch.from_numpy(adv)).sum().backward()
    r = np.exp(logp - old)
    tau = np.where(adv[:, None] > 0, 1.0, 1.05)
    sigma = 1 / (1 + np.exp(-tau * (r - 1)))
    expected = -4 * sigma * (1 - sigma) * r * adv[:, None]               # d(-f(r) A)/d logp
    np.testing.assert_allclose(lp.grad.numpy(), expected, rtol=1e-12, atol=1e-14)


def test_at_ratio_one_sapo_and_cispo_give_grpos_gradient():
    """On the first update (logp == old_logp) all three gradients are -A per token."""
    logp, _, adv, _, _ = batch(0)
    a = torch.from_numpy(adv)
    for loss in (lambda lp: T.sapo_loss(lp, lp.detach(), a),
                 lambda lp: T.cispo_loss(lp, lp.detach(), a),
                 lambda lp: glt.clipped_surrogate_loss(lp, lp.detach(), a)):
        lp = torch.tensor(logp, requires_grad=True)
        loss(lp).sum().backward()
        np.testing.assert_allclose(lp.grad.numpy(), -np.broadcast_to(adv[:, None], logp.shape),
                                   rtol=1e-12, atol=1e-14)


def test_low_precision_and_inference_mode():
    logp, old, adv, mask, rewards = batch(1)
    bf = [torch.tensor(x, dtype=torch.bfloat16) for x in (logp, old, adv)]
    for name in LOSSES:
        out = LOSSES[name](T, *bf)
        assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    with torch.inference_mode():
        t = [torch.from_numpy(x) for x in (logp, old, adv)]
        for name in LOSSES:
            np.testing.assert_allclose(LOSSES[name](T, *t).numpy(), LOSSES[name](N, logp, old, adv),
                                       rtol=1e-12, atol=1e-14)
        assert T.reinforce_pp_advantages(torch.from_numpy(rewards), torch.from_numpy(mask)).shape \
            == rewards.shape


@pytest.mark.parametrize("call, match", [
    (lambda: T.cispo_loss(np.zeros((1, 2)), torch.zeros(1, 2), torch.ones(1)),
     r"^logp: expected a torch.Tensor"),
    (lambda: T.sapo_loss(torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1)),
     r"^old_logp: expected shape"),
    (lambda: T.sapo_gate(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(3)),
     r"^adv: expected shape \(1,\)"),
    (lambda: T.sapo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), tau_neg=0.0),
     r"^tau_neg: expected a number > 0"),
    (lambda: T.cispo_weight(torch.zeros(1, 2), torch.zeros(1, 2), eps_high=-1.0),
     r"^eps_high: expected a number >= 0"),
    (lambda: T.cispo_loss(torch.zeros(1, 2), torch.zeros(1, 2), None),
     r"^adv: expected a torch.Tensor"),
    (lambda: T.reinforce_pp_advantages(torch.ones(2)), r"^rewards: expected a 2-D tensor"),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), torch.ones(3, 2)),
     r"^mask: expected shape \(B\*G, T\)"),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), np.ones((2, 2))),
     r"^mask: expected a torch.Tensor"),
    (lambda: T.remax_advantages(torch.ones(2, 2), torch.ones(3)),
     r"^greedy_rewards: expected shape \(2,\)"),
    (lambda: T.remax_advantages(torch.ones(1, 2), torch.tensor([float("nan")])),
     r"^greedy_rewards: "),
])
def test_bad_input_is_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# --- issue 37: a mask in any 0/1 dtype, and every argument of every neighbour named -------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int64,
                                   torch.uint8, torch.bool])
def test_reinforce_pp_takes_a_mask_of_any_01_dtype(dtype):
    rewards = torch.tensor([[1.0, 0.0], [0.5, 0.5]])                  # B = 2, G = 2
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])  # (B*G, T)
    got = T.reinforce_pp_advantages(rewards, mask.to(dtype))
    expected = gl.neighbours.reinforce_pp_advantages(rewards.numpy(), mask.numpy())
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), torch.full((2, 3), 0.5, dtype=torch.bfloat16)),
     ValueError, r"^mask: expected only 0 and 1"),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), torch.zeros(2, 3, dtype=torch.complex64)),
     TypeError, r"^mask: expected a mask of 0/1"),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), torch.ones(2, 3, device="meta")),
     ValueError, r"^mask: expected a tensor with values"),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), torch.zeros(2, 3)),
     ValueError, r"^mask: expected at least one valid token in every sequence"),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), baseline="mean"), ValueError,
     r"^baseline: expected one of 'none', 'group_mean'"),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), eps=-1.0), ValueError, r"^eps: "),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), ddof=2), ValueError, r"^ddof: "),
    (lambda: T.reinforce_pp_advantages(torch.ones(1, 2), ddof=1.0), TypeError, r"^ddof: "),
    (lambda: T.reinforce_pp_advantages("r"), TypeError, r"^rewards: expected a torch.Tensor"),
    (lambda: T.remax_advantages(torch.ones(1, 2), None), TypeError, r"^greedy_rewards: "),
    (lambda: T.sapo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), tau_pos=None),
     TypeError, r"^tau_pos: "),
    (lambda: T.cispo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), eps_low=2.0),
     ValueError, r"^eps_low: "),
    (lambda: T.cispo_weight(torch.zeros(1, 2), torch.zeros(1, 2), eps_high="4"), TypeError,
     r"^eps_high: "),
    (lambda: gl.neighbours.reinforce_pp_advantages([[1.0, 2.0]], [[1, 1], [1, 1]], ddof=4),
     ValueError, r"^ddof: expected an integer in \[0, 3\] so that the tokens"),
    (lambda: gl.neighbours.remax_advantages([[1.0]], "x"), TypeError, r"^greedy_rewards: "),
    (lambda: gl.neighbours.cispo_loss([[0.0]], [[0.0]], [1.0], eps_high=float("inf")),
     ValueError, r"^eps_high: "),
    (lambda: gl.neighbours.sapo_gate([[0.0]], [[0.0]], [1.0], tau_neg=10**400), ValueError,
     r"^tau_neg: "),
])
def test_every_neighbour_argument_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
