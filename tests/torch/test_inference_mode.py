"""Every public torch entry point (grpo_lab.torch, grpo_lab.perf.loss_fused) works under
``torch.inference_mode()`` and ``torch.no_grad()`` and gives what it gives with autograd on
(issue 24: the fused linear loss failed under inference_mode, where no_grad worked).

An evaluation loop runs under one of the two: inference mode makes every new tensor an
inference tensor, which autograd cannot record and an in-place op outside the mode cannot
touch, so code that calls autograd inside (the fused losses) or saves tensors for backward
breaks there and not under no_grad. The inputs are made outside the mode, as a trainer makes
them (the policy's log-probs require grad), and each function is called on fresh copies.
"""

import inspect

import pytest

torch = pytest.importorskip("torch")

import grpo_lab.perf.loss_fused as lf  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402
from grpo_lab.numerics.validate import valid_lengths  # noqa: E402

N, T, H, V = 4, 5, 6, 7
F = torch.float64


def batch(seed=0):
    """Fresh (logp requiring grad, old, ref, adv, mask) in float64, some ratios clipped."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-1.5 + 0.5 * torch.randn(N, T, generator=gen, dtype=F)).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(N, T, generator=gen, dtype=F)
    ref = logp.detach() + 0.2 * torch.randn(N, T, generator=gen, dtype=F)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=F)
    mask = torch.arange(T)[None, :] < torch.tensor([5, 3, 1, 4])[:, None]
    return logp, old, ref, adv, mask


def loss_pieces():
    """The checked arguments and per-token pieces the building blocks take."""
    logp, old, ref, adv, mask = batch()
    m = mask.to(F)
    lengths = valid_lengths(m)
    log_ratio = logp - old
    ratio = glt.probability_ratio(log_ratio)
    lo, hi = glt.clip_bounds(adv[:, None], 0.2, 0.28)
    return dict(logp=logp, old=old, ref=ref, adv=adv, mask=mask, m=m, lengths=lengths,
                log_ratio=log_ratio, ratio=ratio, lo=lo, hi=hi,
                kl=glt.kl_k3(logp, ref), w=glt.row_weights(lengths, "grpo", T))


def _fused_block(lp, old, ref, a, m, w, grad):
    ws = lf.Workspace(N, T, F, "cpu")
    return lf.fused_block(lp, old, ref, a, m, w, grad, ws.view(N), 0.2, 0.28, 0.04, "k3"), grad


def _centred_deviations_(x):
    return glt.centred_deviations_(x), x                            # in place: x is the result


def linear_inputs():
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(N, T, H, generator=gen, dtype=F).requires_grad_()
    weight = (0.3 * torch.randn(V, H, generator=gen, dtype=F)).requires_grad_()
    ids = torch.randint(0, V, (N, T), generator=gen)
    _, old, ref, adv, mask = batch()
    return (hidden, weight, ids, adv, mask), dict(old_logp=old, ref_logp=ref, beta=0.04,
                                                  loss_type="grpo", chunk_size=3)


def _pieces(*keys):
    p = loss_pieces()
    return tuple(p[k] for k in keys)


DIAG = ("ratio", "lo", "hi", "kl", "log_ratio", "m")


def _detached(*keys):
    """The pieces the diagnostics take: detached, as its docstring asks (it writes out=)."""
    return tuple(t.detach() for t in _pieces(*keys))


# name: () -> (function, args, kwargs), fresh inputs made outside the mode (one per function)
CALLS = {
    "aggregate": lambda: (glt.aggregate, _pieces("kl", "m", "w"), {}),
    "aggregate_loss": lambda: (glt.aggregate_loss, _pieces("kl", "mask") + ("dapo",), {}),
    "masked_normalize": lambda: (glt.masked_normalize, _pieces("logp", "m") + (7.0,),
                                 dict(dim=-1)),
    "aggregation_weights": lambda: (glt.aggregation_weights, (batch()[4], "dr_grpo"),
                                    dict(max_len=8)),
    "centred_deviations_": lambda: (_centred_deviations_, (batch()[1].reshape(2, 10),), {}),
    "check_loss_arguments": lambda: (lambda *a: tuple(glt.check_loss_arguments(*a)), batch(),
                                     {}),
    "clip_bounds": lambda: (glt.clip_bounds, (batch()[3][:, None], 0.2, 0.28, 3.0), {}),
    "clipped_surrogate_loss": lambda: (glt.clipped_surrogate_loss,
                                       _pieces("logp", "old", "adv"), {}),
    "diagnostic_means": lambda: (
        lambda *a: glt.diagnostic_means(glt.diagnostic_sums(*a[:-1]), a[-1]),
        _detached(*DIAG) + (torch.empty(N, T, dtype=F),) + _pieces("lengths"), {}),
    "diagnostic_sums": lambda: (glt.diagnostic_sums,
                                _detached(*DIAG) + (torch.empty(N, T, dtype=F),), {}),
    "divide_or_zero": lambda: (glt.divide_or_zero, (batch()[0], torch.tensor(
        [[2.0], [0.0], [1.0], [4.0]], dtype=F)), {}),
    "fused_linear_grpo_loss": lambda: (glt.fused_linear_grpo_loss, *linear_inputs()),
    "group_advantages": lambda: (glt.group_advantages, (batch()[0].reshape(2, 10),),
                                 dict(ddof=1)),
    "grpo_loss": lambda: (glt.grpo_loss, batch(), dict(eps_high=0.28, agg="dapo")),
    "k3_expm1": lambda: (glt.k3_expm1, _pieces("log_ratio"), {}),
    "k3_series": lambda: (glt.k3_series, (1e-3 * loss_pieces()["log_ratio"],), {}),
    "kl_k1": lambda: (glt.kl_k1, _pieces("logp", "ref"), {}),
    "kl_k2": lambda: (glt.kl_k2, _pieces("logp", "ref"), dict(clamp=0.01)),
    "kl_k3": lambda: (glt.kl_k3, _pieces("logp", "ref"), {}),
    "kl_k3_plus": lambda: (glt.kl_k3_plus, _pieces("logp", "ref"), {}),
    "power_of_two_rescale": lambda: (glt.power_of_two_rescale, (1e300 * batch()[0], F), {}),
    "probability_ratio": lambda: (glt.probability_ratio, _pieces("log_ratio"), {}),
    "row_weights": lambda: (glt.row_weights, _pieces("lengths") + ("grpo", T), {}),
    "sequence_ratio": lambda: (glt.sequence_ratio, _pieces("logp", "old", "mask"), {}),
    "std_from_deviations": lambda: (glt.std_from_deviations, (batch()[0],), dict(ddof=1)),
    "lf.fused_block": lambda: (_fused_block, (
        loss_pieces()["logp"].detach(), *_pieces("old", "ref"), batch()[3][:, None],
        *_pieces("m"), loss_pieces()["w"][:, None], torch.empty(N, T, dtype=F)), {}),
    "lf.grpo_loss_fused": lambda: (lf.grpo_loss_fused, batch(), dict(eps_high=0.28)),
    "lf.grpo_loss_fused (dual_clip: the eager route)": lambda: (lf.grpo_loss_fused, batch(),
                                                                 dict(dual_clip=2.0)),
    "lf.one_pass": lambda: (lf.one_pass, (loss_pieces()["logp"].detach(),
                                          *_pieces("old", "ref"), batch()[3][:, None],
                                          *_pieces("m", "w"), 0.2, 0.28, 0.04, "k3"), {}),
}


def public_functions():
    names = {n for n in glt.__all__ if inspect.isfunction(getattr(glt, n))}
    return names | {f"lf.{n}" for n in lf.__all__ if inspect.isfunction(getattr(lf, n))}


def test_every_public_torch_function_has_a_call_here():
    """The sweep stays a sweep: a new public function fails here until it has a call."""
    missing = public_functions() - {name.split(" ")[0] for name in CALLS}
    assert not missing, sorted(missing)


def same(a, b) -> bool:
    """Equal values, dtypes and structure (tensors compared detached, NaN equal to NaN)."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.detach().nan_to_num(7.0), b.detach().nan_to_num(7.0)))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad])
@pytest.mark.parametrize("name", list(CALLS))
def test_works_without_autograd_and_gives_the_same_result(name, mode):
    fn, args, kwargs = CALLS[name]()
    want = fn(*args, **kwargs)                                  # autograd on
    fn, args, kwargs = CALLS[name]()                            # fresh inputs, made outside
    with mode():
        got = fn(*args, **kwargs)
    assert same(got, want), name
