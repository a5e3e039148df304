"""The Numba route of the fused loss (grpo_lab.perf.loss_numba) equals the eager torch loss:
loss, gradient and every diagnostic, on every option it takes; where it does not apply (or
Numba is missing) the torch route gives the same result."""

import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
numba = pytest.importorskip("numba")

import grpo_lab.perf.loss_fused as lf  # noqa: E402
import grpo_lab.perf.loss_numba as ln  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402
from grpo_lab.torch.surrogate import MAX_LOG_RATIO  # noqa: E402
from tests.perf.test_loss_fused import assert_same, inputs, loss_and_grad  # noqa: E402

TOLERANCE = {torch.float64: dict(rtol=1e-12, atol=1e-14), torch.float32: dict(rtol=2e-5, atol=1e-7)}


@pytest.fixture
def kernel_calls(monkeypatch):
    """The results of every call of the kernel's driver: None where it gave up."""
    calls, run = [], ln.loss_one_pass

    def spy(*args):
        calls.append(run(*args))
        return calls[-1]
    monkeypatch.setattr(ln, "loss_one_pass", spy)
    return calls


def no_numba(monkeypatch):
    monkeypatch.setattr(ln, "kernel_or_none", lambda: None)


# --- the kernel == the eager loss ------------------------------------------------------------

KLS = ("k1", "k2", "k3", None)                 # None: no reference model (beta = 0)
OPTIONS = [dict(kl=kl, agg=agg, eps_high=eh, beta=beta)
           for kl, agg, eh, beta in itertools.product(KLS, glt.AGGREGATIONS, (None, 0.28),
                                                       (0.0, 0.04))
           if kl is not None or beta == 0]


def run_both(x, options, kernel_calls):
    logp, old, ref, adv, mask = x
    options = dict(options)
    if options["kl"] is None:
        ref, options["kl"] = None, "k3"
    eager = loss_and_grad(glt.grpo_loss, logp, old, ref, adv, mask, **options)
    fused = loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask, **options)
    assert len(kernel_calls) == 1 and kernel_calls[0] is not None     # the kernel's result
    return eager, fused


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("per_token_adv", [False, True], ids=["adv_row", "adv_token"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_kernel_equals_eager(options, per_token_adv, dtype, kernel_calls):
    x = inputs(12, 9, dtype, seed=0, per_token_adv=per_token_adv, ragged="holes")
    eager, fused = run_both(x, options, kernel_calls)
    assert_same(eager, fused, **TOLERANCE[dtype])
    if options["kl"] is None:
        assert fused[2]["mean_kl"] is None


SHAPES = [(1, 1), (1, 7), (2, 1), (3, 5), (13, 9), (5, 33), (7, 257), (64, 300)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("ragged", ["prefix", "holes", "full"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_kernel_equals_eager_on_many_shapes(shape, ragged, dtype, kernel_calls):
    seed = sum(shape) + len(ragged)
    x = inputs(*shape, dtype, seed=seed, per_token_adv=seed % 2 == 1, ragged=ragged)
    options = dict(kl=("k1", "k2", "k3")[seed % 3], agg=glt.AGGREGATIONS[seed % 4],
                   eps_high=0.28, beta=0.04)
    assert_same(*run_both(x, options, kernel_calls), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("kl", ["k1", "k2", "k3"])
def test_log_ratios_beyond_the_clamp(kl, dtype, kernel_calls):
    """Log-ratios past +-MAX_LOG_RATIO (clamped ratio, no gradient) and in (-21, -20), where
    approx_kl is just above 20 and the ratio is clamped, all through the kernel."""
    logp, old, ref, adv, mask = inputs(6, 40, dtype, seed=3, per_token_adv=True, ragged="holes")
    shifts = torch.tensor([25.0, -25.0, 20.5, -20.5, 20.0, -20.0, 21.0, -21.0, 700.0, -700.0])
    old[:, :10] = logp[:, :10] + shifts.to(dtype)               # log-ratio = -shift
    old[0, 10:] = logp[0, 10:] - MAX_LOG_RATIO - 1e-3           # just past the clamp
    for beta in (0.04, 0.0):
        kernel_calls.clear()
        eager, fused = run_both((logp, old, ref, adv, mask), dict(kl=kl, beta=beta),
                                kernel_calls)
        assert_same(eager, fused, **TOLERANCE[dtype])
    assert torch.all(fused[1][:, [0, 1, 2, 3, 8, 9]] == 0)      # clamped: no gradient
    assert fused[2]["approx_kl"] > 1.0


def test_the_clip_edge_is_the_eager_float32_edge(kernel_calls):
    """float32 ratios on the clip bounds themselves: clipped or not exactly as eager."""
    N, T = 4, 64
    logp = torch.full((N, T), -1.0)
    ratios = torch.linspace(0.75, 1.35, T)
    ratios[:8] = torch.tensor([0.8, 1.2, 1.28, 0.8]).repeat(2)
    old = logp - torch.log(ratios)[None, :]
    adv = torch.tensor([1.0, -1.0, 2.0, -0.5])
    x = (logp, old, logp + 0.1, adv, torch.ones(N, T))
    for eps_high in (None, 0.28):
        kernel_calls.clear()
        eager, fused = run_both(x, dict(kl="k3", eps_high=eps_high), kernel_calls)
        assert torch.equal(eager[1] == 0, fused[1] == 0)          # the same tokens clipped
        for key in ("clip_frac_low", "clip_frac_high", "clip_frac"):
            assert fused[2][key] == eager[2][key], key
        assert_same(eager, fused, **TOLERANCE[torch.float32])


# --- where the kernel does not apply: the torch route, the same result ------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_a_wild_k3_argument_takes_the_torch_route(dtype, kernel_calls):
    logp, old, ref, adv, mask = inputs(5, 11, dtype, seed=4)
    ref[2, 3] = logp[2, 3] + 30.0            # ref - logp beyond EXP_LIMIT: the kernel stops
    ref[4, 0] = logp[4, 0] - 40.0
    eager = loss_and_grad(glt.grpo_loss, logp, old, ref, adv, mask)
    fused = loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask)
    assert kernel_calls == [None]
    assert_same(eager, fused, **TOLERANCE[dtype])
    kernel_calls.clear()                     # k1 and k2 need no exp: the kernel takes them
    for kl in ("k1", "k2"):
        assert_same(loss_and_grad(glt.grpo_loss, logp, old, ref, adv, mask, kl=kl),
                    loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask, kl=kl),
                    **TOLERANCE[dtype])
    assert len(kernel_calls) == 2 and all(c is not None for c in kernel_calls)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("options", OPTIONS[::3], ids=lambda o: "-".join(map(str, o.values())))
def test_without_numba_the_torch_route_gives_the_same_result(options, dtype, monkeypatch):
    logp, old, ref, adv, mask = inputs(9, 17, dtype, seed=5, per_token_adv=True,
                                       ragged="holes")
    options = dict(options)
    if options["kl"] is None:
        ref, options["kl"] = None, "k3"
    kernel = loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask, **options)
    no_numba(monkeypatch)
    torch_route = loss_and_grad(lf.grpo_loss_fused, logp, old, ref, adv, mask, **options)
    assert_same(kernel, torch_route, **TOLERANCE[dtype])
    assert_same(loss_and_grad(glt.grpo_loss, logp, old, ref, adv, mask, **options),
                torch_route, **TOLERANCE[dtype])


def test_mixed_and_narrow_dtypes_take_the_torch_route(kernel_calls):
    logp, old, ref, adv, mask = inputs(4, 6, torch.float32, seed=6)
    for args in [(logp.half(), old, ref, adv, mask), (logp, old, ref.double(), adv, mask),
                 (logp.bfloat16(), old.bfloat16(), ref.bfloat16(), adv.bfloat16(), mask)]:
        eager, fused = (loss_and_grad(fn, *args) for fn in (glt.grpo_loss, lf.grpo_loss_fused))
        assert_same(eager, fused, rtol=1e-2, atol=1e-3)
        assert fused[1].dtype == args[0].dtype
    assert kernel_calls == []


def test_non_contiguous_inputs(kernel_calls):
    logp, old, ref, adv, mask = inputs(9, 7, torch.float64, seed=7, ragged="holes")
    t = [x.T.contiguous().T for x in (logp, old, ref)] + [adv, mask.T.contiguous().T]
    assert not t[0].is_contiguous()
    eager, fused = (loss_and_grad(fn, *t) for fn in (glt.grpo_loss, lf.grpo_loss_fused))
    assert_same(eager, fused, **TOLERANCE[torch.float64])
    assert len(kernel_calls) == 1 and kernel_calls[0] is not None


def test_an_empty_row_is_the_same_error_on_both_routes(monkeypatch):
    logp, old, ref, adv, mask = inputs(4, 6, torch.float32, seed=8)
    mask[2] = False
    errors = []
    for patch in (False, True):
        if patch:
            no_numba(monkeypatch)
        for fn in (glt.grpo_loss, lf.grpo_loss_fused):
            with pytest.raises(ValueError) as info:
                fn(logp.clone().requires_grad_(), old, ref, adv, mask)
            errors.append(str(info.value))
    assert len(set(errors)) == 1 and "row 2" in errors[0]


# --- the kernel's exp ------------------------------------------------------------------------

def test_exp_expm1_is_good_to_a_few_ulp():
    ln.kernel_or_none()                                        # registers the helpers

    @numba.njit(fastmath=ln.FASTMATH)
    def run(x, e, em1):
        for i in range(x.size):
            e[i], em1[i] = ln.exp_expm1(x[i])
    tiny = np.geomspace(1e-300, 1.0, 2001)
    x = np.concatenate([np.linspace(-ln.EXP_LIMIT, ln.EXP_LIMIT, 100000), tiny, -tiny])
    e, em1 = np.empty_like(x), np.empty_like(x)
    run(x, e, em1)
    ulp = np.finfo(np.float64).eps
    assert np.max(np.abs(e / np.exp(x) - 1)) < 3 * ulp            # 2 ulp measured
    assert np.max(np.abs(em1 / np.expm1(x) - 1)) < 3 * ulp         # relative, even near 0
    for x0 in (-21.0, -20.830215, 0.5, 20.096895, 21.0):           # plain Python (no FMA) too
        assert math.isclose(ln.exp_expm1(x0)[0], math.exp(x0), rel_tol=3 * ulp)
