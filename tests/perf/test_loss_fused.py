"""The fused GRPO loss, on both its routes (the Numba kernel, the torch blocks), equals the
torch mirror's eager loss (loss, gradient, diagnostics, errors), the eager loss equals NumPy, and
the fused one needs a fraction of the memory."""

import itertools
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402
import grpo_lab.perf.loss_fused as lf  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402
from grpo_lab.perf.baselines import trl_style_loss  # noqa: E402
from grpo_lab.perf.measure import forward_backward, peak_bytes_torch  # noqa: E402

EAGER = glt.grpo_loss          # the one eager torch loss: the mirror


def inputs(N=12, T=9, dtype=torch.float64, seed=0, per_token_adv=False, spread=0.3,
           ragged="prefix"):
    """Seeded (logp, old, ref, adv, mask); ``ragged``: "prefix" (valid prefixes), "holes"
    (0/1 anywhere, a valid token in every row) or "full"."""
    gen = torch.Generator().manual_seed(seed)
    logp = -2.0 + 0.5 * torch.randn(N, T, generator=gen, dtype=torch.float64)
    old = logp + spread * torch.randn(N, T, generator=gen, dtype=torch.float64)
    ref = logp + 0.2 * torch.randn(N, T, generator=gen, dtype=torch.float64)
    adv = torch.randn((N, T) if per_token_adv else (N,), generator=gen, dtype=torch.float64)
    if ragged == "prefix":
        lengths = torch.randint(1, T + 1, (N,), generator=gen)
        mask = torch.arange(T)[None, :] < lengths[:, None]
    elif ragged == "holes":
        mask = torch.rand(N, T, generator=gen) < 0.6
        mask[torch.arange(N), torch.randint(0, T, (N,), generator=gen)] = True
    else:
        mask = torch.ones(N, T, dtype=torch.bool)
    return [t.to(dtype) for t in (logp, old, ref, adv)] + [mask]


def loss_and_grad(fn, logp, old, ref, adv, mask, **options):
    leaf = logp.detach().clone().requires_grad_()
    loss, diagnostics = fn(leaf, old, ref, adv, mask, **options)
    loss.backward()
    return loss.detach(), leaf.grad, diagnostics


OPTIONS = [dict(kl=kl, agg=agg, eps_high=eh, beta=beta)
           for kl, agg, eh, beta in itertools.product(("k1", "k2", "k3"), gl.AGGREGATIONS,
                                                       (None, 0.28), (0.0, 0.04))]


def assert_same(a, b, rtol, atol):
    (la, ga, da), (lb, gb, db) = a, b
    torch.testing.assert_close(la, lb, rtol=rtol, atol=atol)
    torch.testing.assert_close(ga, gb, rtol=rtol, atol=atol)
    assert da.keys() == db.keys()
    for key in da:
        if da[key] is None:
            assert db[key] is None, key
        else:
            assert db[key] == pytest.approx(da[key], rel=rtol, abs=atol), key


# --- fused == eager ---------------------------------------------------------------------------

@pytest.fixture(params=["numba", "torch"])
def route(request, monkeypatch):
    """Each test twice: the Numba kernel's route (where Numba is installed), the torch route;
    afterwards, that the route named is the one every call took."""
    if request.param == "torch":
        monkeypatch.setattr(lf.loss_numba, "kernel_or_none", lambda: None)
    elif lf.loss_numba.kernel_or_none() is None:
        pytest.skip("numba is not installed")
    taken, one_pass = [], lf.one_pass

    def record(*args):
        result = one_pass(*args)
        taken.append(result is not None)                 # True: the kernel computed the call
        return result
    monkeypatch.setattr(lf, "one_pass", record)
    yield request.param
    assert taken, "the fused loss was never called"
    assert all(taken) if request.param == "numba" else not any(taken), (request.param, taken)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
@pytest.mark.parametrize("per_token_adv", [False, True])
def test_fused_equals_eager_float64(options, per_token_adv, route):
    x = inputs(per_token_adv=per_token_adv)
    assert_same(loss_and_grad(EAGER, *x, **options),
                loss_and_grad(lf.grpo_loss_fused, *x, **options), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("options", OPTIONS[::5], ids=lambda o: "-".join(map(str, o.values())))
def test_fused_equals_eager_float32(options, route):
    x = inputs(N=64, T=300, dtype=torch.float32, seed=1)
    assert_same(loss_and_grad(EAGER, *x, **options),
                loss_and_grad(lf.grpo_loss_fused, *x, **options), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("block_tokens", [1, 9, 20, 1 << 16])
def test_blocks_do_not_change_the_result(block_tokens, monkeypatch):
    x = inputs(N=13, T=9, seed=2)       # 13 rows: a ragged last block for most sizes
    expected = loss_and_grad(EAGER, *x)
    monkeypatch.setattr(lf.loss_numba, "kernel_or_none", lambda: None)    # the torch route
    monkeypatch.setattr(lf, "BLOCK_TOKENS", block_tokens)
    assert_same(expected, loss_and_grad(lf.grpo_loss_fused, *x), rtol=1e-12, atol=1e-14)


def test_no_reference_model(route):
    logp, old, _, adv, mask = inputs(seed=3)
    eager = loss_and_grad(EAGER, logp, old, None, adv, mask, beta=0.0)
    fused = loss_and_grad(lf.grpo_loss_fused, logp, old, None, adv, mask, beta=0.0)
    assert_same(eager, fused, rtol=1e-12, atol=1e-14)
    assert fused[2]["mean_kl"] is None


def test_clipped_and_clamped_tokens_pass_no_gradient(route):
    logp, old, ref, adv, mask = inputs(N=4, T=6, seed=4)
    mask[:] = True
    old = logp.clone()
    old[0, :3] = logp[0, :3] - 0.5       # ratio e^0.5 = 1.65
    old[1, :3] = logp[1, :3] + 0.5       # ratio e^-0.5 = 0.61
    old[2, :2] = logp[2, :2] - 25.0      # log-ratio clamped at 20
    old[3, :2] = logp[3, :2] + 25.0      # clamped at -20
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    for fn in (EAGER, lf.grpo_loss_fused):
        _, grad, diagnostics = loss_and_grad(fn, logp, old, ref, adv, mask, beta=0.0)
        assert torch.all(grad[0, :3] == 0) and torch.all(grad[1, :3] == 0)   # clipped
        assert torch.all(grad[2, :2] == 0) and torch.all(grad[3, :2] == 0)   # clamped
        assert torch.all(grad[:, 3:] != 0)                                   # ratio 1
        assert diagnostics["clip_frac_high"] == pytest.approx(3 / 24)
        assert diagnostics["clip_frac_low"] == pytest.approx(3 / 24)
    assert_same(loss_and_grad(EAGER, logp, old, ref, adv, mask),
                loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask), 1e-12, 1e-14)


def test_sequence_level_is_the_eager_gspo():
    x = inputs(seed=5)
    options = dict(level="sequence", eps_low=3e-4, eps_high=4e-4)
    assert_same(loss_and_grad(EAGER, *x, **options),
                loss_and_grad(lf.grpo_loss_fused, *x, **options), rtol=0, atol=0)


def test_backward_scales_with_the_incoming_gradient():
    logp, old, ref, adv, mask = inputs(seed=6)
    leaf = logp.clone().requires_grad_()
    loss, _ = lf.grpo_loss_fused(leaf, old, ref, adv, mask)
    (3.0 * loss).backward()
    _, grad, _ = loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask)
    torch.testing.assert_close(leaf.grad, 3.0 * grad)


def test_gradcheck_against_finite_differences(route):
    logp, old, ref, adv, mask = inputs(N=4, T=5, seed=7, spread=0.05)   # no ratio near a clip
    leaf = logp.clone().requires_grad_()
    for options in ({"kl": "k3"}, {"kl": "k2", "agg": "dapo"}, {"kl": "k1", "agg": "dr_grpo"}):
        assert torch.autograd.gradcheck(
            lambda x: lf.grpo_loss_fused(x, old, ref, adv, mask, **options)[0], (leaf,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_work_in_float32(dtype):
    x = inputs(N=16, T=64, dtype=dtype, seed=8)
    eager, fused = (loss_and_grad(fn, *x) for fn in (EAGER, lf.grpo_loss_fused))
    assert fused[0].dtype == dtype and fused[1].dtype == dtype
    assert_same(eager, fused, rtol=1e-2, atol=1e-3)


# --- eager == the NumPy reference ------------------------------------------------------------

@pytest.mark.parametrize("options", OPTIONS[::3] + [dict(level="sequence")],
                         ids=lambda o: "-".join(map(str, o.values())))
def test_eager_equals_numpy_grpo_loss(options):
    logp, old, ref, adv, mask = inputs(seed=9)
    loss, _, diagnostics = loss_and_grad(EAGER, logp, old, ref, adv, mask, **options)
    np_loss, np_diag = gl.grpo_loss(logp.numpy(), old.numpy(), ref.numpy(), adv.numpy(),
                                    mask.numpy(), **options)
    assert float(loss) == pytest.approx(float(np_loss), rel=1e-12, abs=1e-14)
    for key, value in np_diag.items():
        assert diagnostics[key] == pytest.approx(value, rel=1e-12, abs=1e-14), key


def test_gradient_matches_finite_differences_of_the_numpy_loss():
    logp, old, ref, adv, mask = inputs(N=3, T=4, seed=10, spread=0.05)
    _, grad, _ = loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask)
    x, h = logp.numpy(), 1e-6
    for i, t in [(0, 0), (1, 2), (2, 3)]:
        up, down = x.copy(), x.copy()
        up[i, t] += h
        down[i, t] -= h
        fd = (float(gl.grpo_loss(up, old.numpy(), ref.numpy(), adv.numpy(), mask.numpy())[0])
              - float(gl.grpo_loss(down, old.numpy(), ref.numpy(), adv.numpy(),
                                   mask.numpy())[0])) / (2 * h)
        assert float(grad[i, t]) == pytest.approx(fd, rel=1e-6, abs=1e-10)


# --- bad input: the same errors from both ----------------------------------------------------

def error_of(fn, *args, **kwargs):
    with pytest.raises((ValueError, TypeError)) as info:
        fn(*args, **kwargs)
    return type(info.value), str(info.value)


def bad_cases():
    logp, old, ref, adv, mask = inputs(N=3, T=4, seed=11)
    empty = mask.clone()
    empty[1] = False
    nan = logp.clone()
    nan[2, 1] = float("nan")
    return [
        ((logp.numpy(), old, ref, adv, mask), {}, r"logp: expected a torch.Tensor"),
        ((logp[0], old, ref, adv, mask), {}, r"logp: expected a 2-D tensor"),
        ((logp, old[:, :3], ref, adv, mask), {}, r"old_logp: expected shape \(3, 4\)"),
        ((logp, old, ref, adv[:2], mask), {}, r"adv: expected shape \(3,\)"),
        ((logp, old, ref, adv, mask.T), {}, r"mask: expected shape \(3, 4\)"),
        ((logp, old, ref, adv, empty), {}, r"mask: expected at least one valid token .* row 1"),
        ((logp, old, ref, adv, mask * 0.5), {}, r"mask: expected only 0 and 1"),
        ((logp, old, None, adv, mask), {}, r"ref_logp: expected an \(N, T\) tensor .* beta"),
        ((logp, old, ref, adv, mask), {"kl": "k4"}, r"kl: expected one of"),
        ((logp, old, ref, adv, mask), {"agg": "mean"}, r"agg: expected one of"),
        ((logp, old, ref, adv, mask), {"eps_low": 1.5}, r"eps_low: expected a number <= 1.0"),
        ((logp, old, ref, adv, mask), {"beta": -1.0}, r"beta: expected a number >= 0.0"),
        ((logp.to(torch.complex64), old, ref, adv, mask), {},
         r"logp: expected a real numeric dtype \(float, int or bool\)"),
        ((nan, old, ref, adv, mask), {},
         r"logp: expected finite values, got nan at index \(2, 1\) \(1 non-finite"),
        # issue 15: non-finite values are refused in padding too, with the argument's name
        ((logp, with_value(old, mask, -math.inf), ref, adv, mask), {},
         r"^old_logp: expected finite values, got -inf at index"),
        ((with_value(logp, mask, math.inf), old, ref, adv, mask), {},
         r"^logp: expected finite values, got inf at index"),
    ]


def with_value(x, mask, value):
    """A copy of x with ``value`` at its first padded position (the mask must have one)."""
    x = x.clone()
    i, t = (~mask.bool()).nonzero()[0].tolist()
    x[i, t] = value
    return x


@pytest.mark.parametrize("case", range(len(bad_cases())))
def test_bad_input_gives_the_same_error_from_both(case):
    args, kwargs, pattern = bad_cases()[case]
    eager = error_of(EAGER, *args, **kwargs)
    fused = error_of(lf.grpo_loss_fused, *args, **kwargs)
    assert eager == fused
    assert re.search(pattern, eager[1]), eager


def test_fused_refuses_a_gradient_it_would_not_compute():
    logp, old, ref, adv, mask = inputs(seed=12)
    with pytest.raises(ValueError, match=r"old_logp: expected a tensor that does not require"):
        lf.grpo_loss_fused(logp.requires_grad_(), old.requires_grad_(), ref, adv, mask)


# --- memory ------------------------------------------------------------------------------------

def test_fused_peak_memory_is_under_a_third_of_eager(route):
    logp, old, ref, adv, mask = inputs(N=128, T=2048, dtype=torch.float32, seed=13)
    leaf = logp.clone().requires_grad_()

    def step(fn):
        return forward_backward(fn, leaf, old, ref, adv, mask)
    trl = peak_bytes_torch(step(trl_style_loss), "cpu")
    eager = peak_bytes_torch(step(EAGER), "cpu")
    fused = peak_bytes_torch(step(lf.grpo_loss_fused), "cpu")
    per_token = logp.numel() * 4
    assert trl > 6 * per_token           # autograd keeps many (N, T) tensors: can fail
    assert fused < trl / 3, (fused / per_token, trl / per_token)
    assert fused < eager / 2, (fused / per_token, eager / per_token)   # the lean mirror too


# --- issue 24: the production knobs of chapter 8, as grpo_lab.torch.grpo_loss takes them -------

def test_max_len_is_fused_on_both_routes(route):
    """dr_grpo divides by max_len instead of T. Fused: the kernel or the blocks computed the
    call (the route fixture checks which)."""
    x = inputs(seed=13)
    eager = loss_and_grad(EAGER, *x, agg="dr_grpo", max_len=20)
    assert_same(eager, loss_and_grad(lf.grpo_loss_fused, *x, agg="dr_grpo", max_len=20),
                rtol=1e-12, atol=1e-14)
    plain = loss_and_grad(EAGER, *x, agg="dr_grpo")       # T = 9 -> 20: scaled by 9 / 20
    torch.testing.assert_close(eager[0], plain[0] * 9 / 20)


@pytest.mark.parametrize("knobs", [dict(dual_clip=1.5), dict(kl_clamp=0.01),
                                   dict(kl_bias_correction=True),
                                   dict(dual_clip=1.2, kl_clamp=0.02, kl_bias_correction=True,
                                        max_len=12, agg="dr_grpo")],
                         ids=lambda k: "-".join(k))
@pytest.mark.parametrize("kl", ["k1", "k2", "k3"])
def test_the_other_knobs_give_the_eager_loss(knobs, kl):
    x = inputs(seed=14, spread=0.6)      # ratios past 1.5 and KL values past the clamps
    eager = loss_and_grad(EAGER, *x, kl=kl, **knobs)
    assert_same(eager, loss_and_grad(lf.grpo_loss_fused, *x, kl=kl, **knobs), rtol=0, atol=0)
    plain = loss_and_grad(EAGER, *x, kl=kl)
    assert not torch.equal(eager[1], plain[1])           # each knob changes the gradient here


@pytest.mark.parametrize("knob, value, pattern", [
    ("dual_clip", 0.5, "^dual_clip: "), ("max_len", 20, "^max_len: expected None with mode"),
    ("kl_clamp", -1.0, "^kl_clamp: "), ("kl_bias_correction", "yes", "^kl_bias_correction: ")])
def test_bad_knobs_give_the_same_error_from_both(knob, value, pattern):
    x = inputs(seed=15)
    eager = error_of(EAGER, *x, **{knob: value})
    assert eager == error_of(lf.grpo_loss_fused, *x, **{knob: value})
    assert re.search(pattern, eager[1]), eager
