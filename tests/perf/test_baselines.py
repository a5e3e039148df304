"""The bench's baselines compute what they claim: the plain formula, and TRL-style torch code
equal to the package's own functions (NumPy reference and torch mirror)."""

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.perf import baselines


def ragged_batch(seed=7, N=6, T=9, dtype="float64"):
    """Log-probs spread enough to clip on both sides, and rows of 1 to T valid tokens."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, dtype)
    logp = -1.5 + 0.5 * torch.randn(N, T, generator=gen, dtype=dtype)
    old = logp + 0.3 * torch.randn(N, T, generator=gen, dtype=dtype)
    ref = logp + 0.3 * torch.randn(N, T, generator=gen, dtype=dtype)
    adv = torch.randn(N, generator=gen, dtype=dtype)
    lengths = torch.tensor([1, T, 4, 7, 2, 5])[:N]
    mask = torch.arange(T)[None, :] < lengths[:, None]                 # (N, T) valid prefixes
    return logp, old, ref, adv, mask


# --- group advantages ---------------------------------------------------------------------------

def test_plain_formula_is_group_advantages_where_groups_have_a_spread():
    r = np.random.default_rng(0).normal(size=(50, 8))
    np.testing.assert_allclose(gl.bench.plain_advantages(r), gl.group_advantages(r), rtol=1e-12)


def test_trl_style_is_bessel_std_with_eps_1e4():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(1).normal(size=(40, 6))
    got = gl.bench.trl_style_advantages(torch.from_numpy(r.reshape(-1)), 6).numpy().reshape(40, 6)
    np.testing.assert_allclose(got, gl.group_advantages(r, eps=1e-4, ddof=1), rtol=1e-12)


def test_trl_style_advantages_equal_the_torch_mirror_with_ddof_1_and_eps_1e4():
    torch = pytest.importorskip("torch")
    import grpo_lab.torch as glt
    r = torch.from_numpy(np.random.default_rng(2).normal(size=(30, 8)))
    r[3] = 0.5                                                         # an all-equal group
    got = baselines.trl_style_advantages(r.reshape(-1), 8).reshape(30, 8)
    mirror = glt.group_advantages(r, baselines.TRL_EPS, ddof=1)
    torch.testing.assert_close(got, mirror, rtol=1e-12, atol=1e-15)
    assert torch.all(got[3] == 0)


@pytest.mark.parametrize("shape, G, message", [
    ((10,), 4, "rewards: expected a flat (B*G,) tensor of whole groups of G = 4, got shape (10,)"),
    ((2, 4), 4,
     "rewards: expected a flat (B*G,) tensor of whole groups of G = 4, got shape (2, 4)"),
    ((8,), 1, "G: expected an integer in [2, inf], got 1"),
], ids=repr)
def test_trl_style_advantages_refuse_rewards_that_are_not_whole_groups(shape, G, message):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError) as info:
        baselines.trl_style_advantages(torch.zeros(shape), G)
    assert str(info.value) == message


# --- the loss -----------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [dict(), dict(eps_low=0.1, eps_high=0.28, beta=0.1),
                                     dict(beta=0.0)], ids=repr)
def test_trl_style_loss_equals_the_torch_mirror_grpo_k3(options):
    torch = pytest.importorskip("torch")
    import grpo_lab.torch as glt
    logp, old, ref, adv, mask = ragged_batch()
    results = {}
    for name, fn in [("trl", baselines.trl_style_loss),
                     ("mirror", lambda *x, **o: glt.grpo_loss(*x, **o, kl="k3", agg="grpo"))]:
        leaf = logp.clone().requires_grad_()
        loss, metrics = fn(leaf, old, ref, adv, mask, **options)
        loss.backward()
        results[name] = loss.detach(), leaf.grad, metrics
    (loss_t, grad_t, m_t), (loss_m, grad_m, m_m) = results["trl"], results["mirror"]
    torch.testing.assert_close(loss_t, loss_m, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(grad_t, grad_m, rtol=1e-12, atol=1e-15)
    assert torch.all(grad_t[~mask] == 0)                               # padding has no gradient
    assert 0 < m_t["clip_frac_low"] and 0 < m_t["clip_frac_high"]     # both sides clip here
    for key in ("clip_frac_low", "clip_frac_high", "clip_frac", "mean_kl"):
        assert m_t[key] == pytest.approx(m_m[key], rel=1e-6), key


def test_trl_style_loss_worked_by_hand():
    torch = pytest.importorskip("torch")
    # one row, two valid tokens of three; ratio e^0.5 = 1.65 > 1.2 with A = 1: clipped at 1.2
    logp = torch.tensor([[0.5, 0.0, 9.0]], dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(1, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    loss, metrics = baselines.trl_style_loss(logp, zeros, logp.detach(),
                                             torch.tensor([1.0], dtype=torch.float64), mask)
    # per token: -min(1.65, 1.2) = -1.2 and -min(1, 1) = -1; KL 0 (ref = logp); mean of 2
    assert float(loss.detach()) == pytest.approx(-1.1)
    assert metrics == pytest.approx({"clip_frac_low": 0.0, "clip_frac_high": 0.5,
                                     "clip_frac": 0.5, "mean_kl": 0.0})


@pytest.mark.parametrize("change, message", [
    (dict(old_logp="short"),
     "old_logp: expected shape (3, 4) (logp is (N, T) = (3, 4)), got (3, 3)"),
    (dict(mask="short"), "mask: expected shape (3, 4) (logp is (N, T) = (3, 4)), got (3, 3)"),
    (dict(adv="long"), "adv: expected shape (3,) (logp is (N, T) = (3, 4)), got (4,)"),
    (dict(logp="long"), "logp: expected an (N, T) tensor, got shape (4,)"),
    (dict(eps_low=-0.1), "eps_low: expected a number >= 0.0, got -0.1"),
    (dict(eps_high=float("nan")), "eps_high: expected a finite number, got nan"),
    (dict(beta=-1), "beta: expected a number >= 0.0, got -1.0"),
], ids=repr)
def test_trl_style_loss_names_the_bad_argument(change, message):
    torch = pytest.importorskip("torch")
    args = dict(logp=torch.zeros(3, 4), old_logp=torch.zeros(3, 4), ref_logp=torch.zeros(3, 4),
                adv=torch.zeros(3), mask=torch.ones(3, 4))
    options = {k: v for k, v in change.items() if k in ("eps_low", "eps_high", "beta")}
    for k, v in change.items():
        if v == "short":
            args[k] = torch.zeros(3, 3)
        elif v == "long":
            args[k] = torch.zeros(4)
    with pytest.raises(ValueError) as info:
        baselines.trl_style_loss(*args.values(), **options)
    assert str(info.value) == message


def test_trl_style_loss_refuses_arrays():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="^old_logp: expected a torch.Tensor, got ndarray$"):
        baselines.trl_style_loss(torch.zeros(2, 3), np.zeros((2, 3)), torch.zeros(2, 3),
                                 torch.zeros(2), torch.ones(2, 3))


# --- the inputs ---------------------------------------------------------------------------------

def test_loss_inputs_are_seeded_padded_prefixes():
    torch = pytest.importorskip("torch")
    logp, old, ref, adv, mask = baselines.loss_inputs((32, 40), seed=3)
    again = baselines.loss_inputs((32, 40), seed=3)
    assert all(torch.equal(a, b) for a, b in zip((logp, old, ref, adv, mask), again))
    assert not torch.equal(logp, baselines.loss_inputs((32, 40), seed=4)[0])
    lengths = mask.sum(-1)
    assert torch.equal(mask, torch.arange(40)[None, :] < lengths[:, None])   # prefixes
    assert lengths.min() >= 10 and lengths.max() <= 40                      # T/4 .. T
    assert (old - logp).abs().max() < 0.5 and adv.shape == (32,)


@pytest.mark.parametrize("shape, message", [
    ((0, 4), "N: expected an integer in [1, inf], got 0"),
    ((4, 0), "T: expected an integer in [1, inf], got 0"),
    ((4, 2.5), "T: expected an integer, got float 2.5"),
    ((4,), "shape: expected (N, T), two positive integers, got (4,)"),
], ids=repr)
def test_loss_inputs_refuse_a_bad_shape(shape, message):
    pytest.importorskip("torch")
    with pytest.raises((ValueError, TypeError)) as info:
        baselines.loss_inputs(shape)
    assert str(info.value) == message
