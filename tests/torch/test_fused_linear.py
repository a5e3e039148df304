"""fused_linear_grpo_loss: the GRPO loss from hidden states equals the eager loss on the full
logits (float64, to rounding), a TRL-style eager loss and Liger's LigerFusedLinearGRPOLoss
(float32, 1e-5), for every loss_type; its gradients reach hidden and weight; it never holds
the (N, T, V) logits; bad arguments are named.

Backs chapter 7's statement that the four implementations of the loss from hidden states (this
one, Liger's, TRL's fused head and eager) give the same loss and both gradients to 1e-5; TRL's
fused head is compared with eager in tests/perf/test_bench.py."""

import pytest

torch = pytest.importorskip("torch")

import grpo_lab.torch as glt  # noqa: E402
from grpo_lab.perf.bench_linear import eager_linear_grpo_loss, linear_inputs  # noqa: E402
from grpo_lab.perf.measure import peak_bytes_torch  # noqa: E402
from grpo_lab.torch.fused_linear import LOSS_TYPES, fused_linear_grpo_loss  # noqa: E402


def batch(N=4, T=9, H=16, V=50, dtype=torch.float64, seed=0):
    """Seeded inputs with a ragged mask, and old/ref log-probs near the policy's."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, T, H, generator=gen, dtype=dtype).requires_grad_()
    weight = (0.3 * torch.randn(V, H, generator=gen, dtype=dtype)).requires_grad_()
    ids = torch.randint(0, V, (N, T), generator=gen)
    lengths = torch.randint(1, T + 1, (N,), generator=gen)
    mask = torch.arange(T)[None, :] < lengths[:, None]               # ragged prefixes
    adv = torch.randn(N, generator=gen, dtype=dtype)
    with torch.no_grad():
        lp = torch.log_softmax(hidden @ weight.T, -1).gather(-1, ids[..., None]).squeeze(-1)
    old = lp + 0.2 * torch.randn(N, T, generator=gen, dtype=dtype)    # some ratios clip
    ref = lp + 0.1 * torch.randn(N, T, generator=gen, dtype=dtype)
    return hidden, weight, ids, adv, mask, old, ref


def eager(hidden, weight, ids, adv, mask, old, ref, beta, loss_type):
    """The eager loss on the full logits: log_softmax, gather, gl.torch.grpo_loss."""
    logp = torch.log_softmax(hidden @ weight.T, -1).gather(-1, ids[..., None]).squeeze(-1)
    loss, diag = glt.grpo_loss(logp, logp.detach() if old is None else old, ref, adv, mask,
                               beta=beta, kl="k3", agg=loss_type)
    return loss, diag, logp


def grads(loss, *tensors):
    return torch.autograd.grad(loss, tensors)


SETTINGS = [(False, 0.0), (True, 0.0), (True, 0.04)]     # (old and ref given, beta)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("given, beta", SETTINGS)
@pytest.mark.parametrize("chunk_size", [1, 5, 1000])
def test_equals_the_eager_loss_on_the_full_logits(loss_type, given, beta, chunk_size):
    hidden, weight, ids, adv, mask, old, ref = batch()
    old, ref = (old, ref) if given else (None, None)
    want, diag, logp = eager(hidden, weight, ids, adv, mask, old, ref, beta, loss_type)
    got, stats = fused_linear_grpo_loss(hidden, weight, ids, adv, mask, old_logp=old,
                                        ref_logp=ref, beta=beta, loss_type=loss_type,
                                        chunk_size=chunk_size)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    for g, w in zip(grads(got, hidden, weight), grads(want, hidden, weight)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(stats["logp"], logp.detach() * mask)  # 0 on padding
    for key, value in diag.items():
        assert stats[key] == pytest.approx(value, rel=1e-10, abs=1e-14) if value is not None \
            else stats[key] is None
    if given:
        assert stats["clip_frac"] > 0                               # the clip was exercised


def test_equals_the_trl_style_eager_baseline_in_float32():
    hidden, weight, ids, adv, mask = linear_inputs((3, 20, 8, 100), seed=2)
    want, _ = eager_linear_grpo_loss(hidden, weight, ids, adv, mask, loss_type="grpo")
    got, _ = fused_linear_grpo_loss(hidden, weight, ids, adv, mask, loss_type="grpo")
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for g, w in zip(grads(got, hidden, weight), grads(want, hidden, weight)):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-5)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("given, beta", SETTINGS)
def test_equals_liger_fused_linear_grpo_loss(loss_type, given, beta):
    liger = pytest.importorskip("liger_kernel.chunked_loss")
    hidden, weight, ids, adv, mask, old, ref = batch(dtype=torch.float32, seed=3)
    old, ref = (old, ref) if given else (None, None)
    T = ids.shape[1]
    theirs = liger.LigerFusedLinearGRPOLoss(
        beta=beta, compiled=False, use_ref_model=ref is not None, epsilon_low=0.2,
        epsilon_high=0.2, loss_type=loss_type, max_completion_length=T)
    want, metrics = theirs(hidden, weight, ids, mask.long(), adv, ref_per_token_logps=ref,
                           old_per_token_logps=old)
    got, stats = fused_linear_grpo_loss(hidden, weight, ids, adv, mask, old_logp=old,
                                        ref_logp=ref, beta=beta, loss_type=loss_type)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for g, w in zip(grads(got, hidden, weight), grads(want, hidden, weight)):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-5)
    assert stats["clip_frac"] == pytest.approx(float(metrics[-1]), abs=1e-6)   # Liger's last
    if beta:
        assert stats["mean_kl"] == pytest.approx(float(metrics[0]), abs=1e-6)


def test_a_scaled_loss_scales_the_gradients_and_a_frozen_head_gets_none():
    hidden, weight, ids, adv, mask, _, _ = batch()
    loss, _ = fused_linear_grpo_loss(hidden, weight, ids, adv, mask)
    g1 = grads(loss, hidden, weight)
    loss, _ = fused_linear_grpo_loss(hidden, weight, ids, adv, mask)
    g3 = grads(3 * loss, hidden, weight)
    for a, b in zip(g1, g3):
        torch.testing.assert_close(3 * a, b)
    frozen = weight.detach()
    loss, _ = fused_linear_grpo_loss(hidden, frozen, ids, adv, mask)
    loss.backward()
    assert frozen.grad is None and hidden.grad is not None
    assert torch.all(hidden.grad[~mask] == 0)                       # padding gets nothing


def test_never_holds_the_logits():
    N, T, H, V = 4, 64, 16, 4000                                    # logits: 4 MB in float32
    hidden, weight, ids, adv, mask = linear_inputs((N, T, H, V))
    logits_bytes = N * T * V * 4

    def step(fn):
        def run():
            hidden.grad = weight.grad = None
            fn()[0].backward()
        return run
    fused = peak_bytes_torch(step(lambda: fused_linear_grpo_loss(hidden, weight, ids, adv, mask,
                                                                 chunk_size=32)))
    eager_peak = peak_bytes_torch(step(lambda: eager_linear_grpo_loss(hidden, weight, ids, adv,
                                                                      mask)))
    assert fused < logits_bytes / 2 < eager_peak                   # chunk 32 x V, not N T x V


@pytest.mark.parametrize("change, error, message", [
    (dict(hidden=torch.zeros(4, 9)), ValueError, "^hidden: expected"),
    (dict(weight=torch.zeros(50, 15)), ValueError, r"^weight: expected shape \(V, 16\)"),
    (dict(ids=torch.zeros(4, 9)), TypeError, "^ids: expected an integer tensor"),
    (dict(ids=torch.full((4, 9), 50)), ValueError, r"^ids: expected token ids in \[0, 50\)"),
    (dict(adv=torch.zeros(5)), ValueError, "^adv: "),
    (dict(mask=torch.zeros(4, 8)), ValueError, "^mask: "),
    (dict(old_logp=torch.full((4, 9), -float("inf"))), ValueError, "^old_logp: expected finite"),
    (dict(ref_logp=torch.zeros(4, 8)), ValueError, "^ref_logp: "),
    (dict(beta=0.1), ValueError, "ref_logp"),
    (dict(loss_type="luspo"), ValueError, "^loss_type: expected one of"),
    (dict(chunk_size=0), ValueError, "^chunk_size: "),
    (dict(eps_low=-0.1), ValueError, "^eps_low: "),
])
def test_bad_arguments_are_named(change, error, message):
    hidden, weight, ids, adv, mask, _, _ = batch(dtype=torch.float32)
    args = dict(hidden=hidden, weight=weight, ids=ids, adv=adv, mask=mask)
    kwargs = {k: v for k, v in change.items() if k not in args}
    args.update({k: v for k, v in change.items() if k in args})
    with pytest.raises(error, match=message):
        fused_linear_grpo_loss(*args.values(), **kwargs)


# --- issue 24: inference mode, narrow ids, data tensors that require grad -----------------------

@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_without_autograd_gives_the_same_loss_and_log_probs(mode):
    hidden, weight, ids, adv, mask, old, ref = batch()
    want, want_stats = fused_linear_grpo_loss(hidden, weight, ids, adv, mask, old_logp=old,
                                              ref_logp=ref, beta=0.04, chunk_size=5)
    with mode():                          # inference_mode used to fail inside autograd.grad
        got, stats = fused_linear_grpo_loss(hidden, weight, ids, adv, mask, old_logp=old,
                                            ref_logp=ref, beta=0.04, chunk_size=5)
    assert not got.requires_grad
    torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(stats["logp"], want_stats["logp"])
    assert stats["clip_frac"] == want_stats["clip_frac"] > 0


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_narrow_integer_ids_are_read_as_the_same_token_ids(dtype):
    hidden, weight, ids, adv, mask, old, ref = batch(V=50)          # ids < 50 fit every dtype
    want, _ = fused_linear_grpo_loss(hidden, weight, ids, adv, mask, old_logp=old)
    got, _ = fused_linear_grpo_loss(hidden, weight, ids.to(dtype), adv, mask, old_logp=old)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for g, w in zip(grads(got, hidden, weight), grads(want, hidden, weight)):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint16, torch.uint32, torch.uint64])
def test_ids_of_other_dtypes_are_refused_by_name(dtype):
    hidden, weight, ids, adv, mask, _, _ = batch()
    with pytest.raises(TypeError, match=r"^ids: expected an integer tensor .*torch\.int64\), "
                                        rf"got .*{dtype}"):
        fused_linear_grpo_loss(hidden, weight, ids.to(dtype), adv, mask)


@pytest.mark.parametrize("name", ["old_logp", "ref_logp", "adv", "mask"])
def test_a_data_tensor_that_requires_grad_is_refused_by_name(name):
    """The loss writes the gradients of hidden and weight only; another input that requires
    grad would get none in silence (grpo_loss_fused refuses it the same way)."""
    hidden, weight, ids, adv, mask, old, ref = batch()
    args = dict(adv=adv, mask=mask.double(), old_logp=old, ref_logp=ref)
    args[name] = args[name].clone().requires_grad_()
    with pytest.raises(ValueError, match=f"^{name}: expected a tensor that does not require "
                                         "grad"):
        fused_linear_grpo_loss(hidden, weight, ids, args["adv"], args["mask"],
                               old_logp=args["old_logp"], ref_logp=args["ref_logp"], beta=0.04)


def test_eager_keeps_one_n_t_v_tensor_for_its_backward_not_two():
    # chapter 7: the logits are not saved (the product's backward needs h and W); log_softmax's
    # output is, and gather saves a second reference to that same tensor, not a second tensor
    size = (2, 8, 4, 50)
    hidden, weight, ids, adv, mask = linear_inputs(size, seed=0)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append((tuple(t.shape), t.untyped_storage().data_ptr())) or t,
            lambda t: t):
        eager_linear_grpo_loss(hidden, weight, ids, adv, mask)
    big = [ptr for shape, ptr in saved if shape == size[:2] + size[3:]]
    assert len(set(big)) == 1 and len(big) >= 1
