"""Log-probs with the one-position shift, and the entropy from logits (gl.hf, chapter 6b)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab.hf as glh  # noqa: E402


def _logits(shape, seed=0, scale=3.0, dtype=torch.float32):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64) * scale).to(dtype)


# --- the shift, worked by hand ------------------------------------------------------------------

def test_the_shift_by_hand():
    # L = 3 tokens x = (0, 1, 1), V = 2. The model's output at p is its distribution for p + 1:
    #   p = 0: (0.5, 0.5) scores x1 = 1 -> log 0.5
    #   p = 1: (0.9, 0.1) scores x2 = 1 -> log 0.1
    #   p = 2: (0.2, 0.8) scores nothing (there is no x3); x0 is scored by nothing.
    z = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]], dtype=torch.float64))
    x = torch.tensor([[0, 1, 1]])
    got = glh.next_token_logprobs(z, x)
    assert got.shape == (1, 2)
    assert torch.allclose(got, torch.log(torch.tensor([[0.5, 0.1]], dtype=torch.float64)))
    # without the shift the same call would score x1 with p = 1's 0.1 and x2 with p = 2's 0.8
    unshifted = glh.token_logprobs(z[:, 1:], x[:, 1:])
    assert torch.allclose(unshifted.exp(), torch.tensor([[0.1, 0.8]], dtype=torch.float64))


def test_next_token_logprobs_equals_its_plain_face():
    z = _logits((3, 7, 11))
    x = torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(glh.next_token_logprobs(z, x), glh.next_token_logprobs_plain(z, x),
                          atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_token_logprobs_equals_its_plain_face_and_float64_by_hand(dtype):
    z = _logits((4, 5, 13), dtype=dtype)
    y = torch.randint(0, 13, (4, 5), generator=torch.Generator().manual_seed(2))
    got = glh.token_logprobs(z, y)
    assert got.dtype == dtype
    assert torch.allclose(got, glh.token_logprobs_plain(z, y), atol=1e-6)
    z64 = z.double().numpy()
    direct = np.take_along_axis(z64, y.numpy()[..., None], -1)[..., 0] - \
        np.log(np.exp(z64).sum(-1))
    assert np.allclose(got.double().numpy(), direct, atol=1e-6)


def test_token_logprobs_widens_bfloat16_and_divides_by_the_temperature():
    z = _logits((2, 3, 9))
    y = torch.randint(0, 9, (2, 3), generator=torch.Generator().manual_seed(3))
    got = glh.token_logprobs(z.bfloat16(), y, temperature=0.5)
    assert got.dtype == torch.float32
    expected = glh.token_logprobs_plain(z.bfloat16().float() / 0.5, y)
    assert torch.allclose(got, expected, atol=1e-6)


def test_token_logprobs_gradient_equals_the_plain_faces():
    z = _logits((3, 4, 6), dtype=torch.float64).requires_grad_()
    y = torch.randint(0, 6, (3, 4), generator=torch.Generator().manual_seed(4))
    (g,) = torch.autograd.grad(glh.token_logprobs(z, y).sum(), z)
    (g_plain,) = torch.autograd.grad(glh.token_logprobs_plain(z, y).sum(), z)
    assert torch.allclose(g, g_plain, atol=1e-12)
    # d log pi(y) / dz = onehot(y) - softmax(z): each row sums to 0
    assert torch.allclose(g.sum(-1), torch.zeros(3, 4, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("logits, labels, kwargs, name", [
    ([[1.0, 2.0]], torch.tensor([0]), {}, "logits"),
    (torch.ones(3, dtype=torch.long), torch.tensor([0]), {}, "logits"),
    (torch.ones(3), torch.tensor(0), {}, "logits"),                              # 1-D
    (torch.tensor([[1.0, float("nan")]]), torch.tensor([0]), {}, "logits"),
    (torch.tensor([[1.0, -float("inf")]]), torch.tensor([0]), {}, "logits"),
    (torch.ones(2, 3), torch.tensor([0, 3]), {}, "labels"),                      # id >= V
    (torch.ones(2, 3), torch.tensor([0, -1]), {}, "labels"),
    (torch.ones(2, 3), torch.tensor([0, 1, 2]), {}, "labels"),                   # shape
    (torch.ones(2, 3), torch.tensor([0.0, 1.0]), {}, "labels"),                  # floats
    (torch.ones(2, 3), torch.tensor([0, 1]), dict(temperature=0.0), "temperature")])
def test_token_logprobs_bad_arguments_name_themselves(logits, labels, kwargs, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.token_logprobs(logits, labels, **kwargs)


_LONG = dict(dtype=torch.long)


@pytest.mark.parametrize("logits, ids, name", [
    (torch.ones(2, 3), torch.ones(2, 3, **_LONG), "logits"),           # no vocabulary axis
    (torch.ones(1, 1, 3), torch.ones(1, 1, **_LONG), "logits"),        # one position
    (torch.ones(1, 4, 3), torch.ones(1, 3, **_LONG), "input_ids")])
def test_next_token_logprobs_bad_arguments_name_themselves(logits, ids, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.next_token_logprobs(logits, ids)


# --- entropy ------------------------------------------------------------------------------------

def test_entropy_against_the_direct_formula_in_float64():
    z = _logits((5, 4, 17))
    p = torch.softmax(z.double(), -1).numpy()
    direct = -(p * np.log(p)).sum(-1)
    got = glh.token_entropy(z)
    assert got.dtype == torch.float32
    assert np.allclose(got.numpy(), direct, atol=1e-6)
    assert torch.allclose(got, glh.token_entropy_plain(z), atol=1e-6)


def test_entropy_by_hand_uniform_and_one_hot():
    z = torch.tensor([[0.0] * 8, [50.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    got = glh.token_entropy(z)
    assert abs(float(got[0]) - math.log(8)) < 1e-6
    # p0 = 1 / (1 + 7 e^-50): H ~ 7 * 50 e^-50, below 1e-18
    assert 0.0 <= float(got[1]) < 1e-12


def test_entropy_with_minus_inf_logits_where_the_plain_face_gives_nan():
    z = torch.tensor([[0.0, 0.0, -float("inf"), -float("inf")]], requires_grad=True)
    got = glh.token_entropy(z)
    assert abs(float(got.detach()) - math.log(2)) < 1e-6
    assert bool(torch.isnan(glh.token_entropy_plain(z.detach())).all())   # 0 * -inf
    (g,) = torch.autograd.grad(got.sum(), z)
    assert bool(torch.isfinite(g).all())


def test_entropy_at_large_logits_matches_float64():
    # logits near 1e4 (float32 spacing 1e-3 there): the shift by the max keeps both terms small
    z = (_logits((3, 6, 11), scale=2.0) + 1e4).float()
    truth = glh.token_entropy_plain(z.double())
    assert float((glh.token_entropy(z).double() - truth).abs().max()) < 1e-5


def test_entropy_temperature_is_the_entropy_of_the_tempered_distribution():
    z = _logits((2, 3, 7))
    assert torch.allclose(glh.token_entropy(z, temperature=0.7), glh.token_entropy_plain(z / 0.7),
                          atol=1e-6)


@pytest.mark.parametrize("logits, kwargs, name", [
    (torch.tensor([[-float("inf"), -float("inf")]]), {}, "logits"),     # no finite logit
    (torch.tensor([[float("inf"), 0.0]]), {}, "logits"),
    (torch.tensor([[float("nan"), 0.0]]), {}, "logits"),
    (torch.tensor([1.0, 2.0]), {}, "logits"),
    (torch.ones(2, 2), dict(temperature=-1.0), "temperature")])
def test_token_entropy_bad_arguments_name_themselves(logits, kwargs, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.token_entropy(logits, **kwargs)


# --- on the model --------------------------------------------------------------------------------

def test_completion_logprobs_is_the_shifted_full_forward_zero_after_eos(tok, model):
    ids, mask = glh.encode_prompts(tok, ["1+2=", "3+4+5="], repeat=3)
    out = glh.sample(model, ids, mask, max_new_tokens=10, seed=0)
    T = out.completion_ids.shape[1]
    logp, h = glh.completion_logprobs(model, out.input_ids, out.attention_mask, T, entropy=True)
    assert logp.shape == h.shape == (6, T) and logp.requires_grad
    with torch.no_grad():
        full = model(input_ids=out.input_ids, attention_mask=out.attention_mask).logits
    shifted = glh.next_token_logprobs_plain(full, out.input_ids)[:, -T:]    # (N, T)
    m = out.completion_mask.bool()
    assert torch.allclose(logp.detach()[m], shifted[m], atol=1e-5)
    assert bool((logp.detach()[~m] == 0).all()) and bool((h.detach()[~m] == 0).all())
    assert torch.allclose(h.detach()[m], glh.token_entropy_plain(full[:, -T - 1:-1])[m], atol=1e-5)


def test_completion_logprobs_carries_the_gradient_to_the_weights(tok, model):
    ids, mask = glh.encode_prompts(tok, ["1+2="])
    out = glh.sample(model, ids, mask, max_new_tokens=3, seed=0)
    logp = glh.completion_logprobs(model, out.input_ids, out.attention_mask, 3)
    logp.sum().backward()
    grad = model.lm_head.weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0
    model.zero_grad()


@pytest.mark.parametrize("n, name", [(0, "n_completion"), (99, "n_completion"),
                                     (2.0, "n_completion")])
def test_completion_logprobs_bad_arguments_name_themselves(tok, model, n, name):
    ids, mask = glh.encode_prompts(tok, ["1+2="])
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.completion_logprobs(model, ids, mask, n)
    with pytest.raises(ValueError, match="^attention_mask:"):
        glh.completion_logprobs(model, ids, mask[:, 1:], 2)
