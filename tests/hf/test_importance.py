"""Importance-sampling corrections: TIS, MIS, sequence-level, TRL's default mask (chapter 6b)."""

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab.hf as glh  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402


def _pair(N=6, T=5, seed=0, spread=0.8):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(N, T, generator=g, dtype=torch.float64) * 3 - 0.05
    smp = (old + torch.randn(N, T, generator=g, dtype=torch.float64) * spread).clamp(max=-1e-3)
    mask = torch.ones(N, T, dtype=torch.float64)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    return old, smp, mask


def _trl(old, smp, mask, mode, clip_min, clip_max):
    """TRL 1.16.0's lines, GRPOTrainer._generate_and_score_completions (the vLLM branch)."""
    diff = torch.nan_to_num((old - smp) * mask, nan=0.0)
    if mode in ("sequence_mask", "sequence_truncate"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode in ("sequence_truncate", "token_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    lo = clip_min if clip_min is not None else -math.inf
    hi = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < lo) | (ratio > hi), value=0.0)


def test_the_four_modes_by_hand():
    # token ratios: row 0: 0.5/0.5 = 1, 0.5/0.25 = 2; row 1: 0.9/0.2 = 4.5 twice
    old = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.9]], dtype=torch.float64))
    smp = torch.log(torch.tensor([[0.5, 0.25], [0.2, 0.2]], dtype=torch.float64))
    m = torch.ones(2, 2)
    w = {mode: glh.is_weights(old, smp, m, mode=mode) for mode in glh.IS_MODES}
    assert torch.allclose(w["token_truncate"], torch.tensor([[1.0, 2.0], [3.0, 3.0]],
                                                            dtype=torch.float64))
    assert torch.allclose(w["token_mask"], torch.tensor([[1.0, 2.0], [0.0, 0.0]],
                                                        dtype=torch.float64))
    # sequences: 1 * 2 = 2; 4.5 * 4.5 = 20.25
    assert torch.allclose(w["sequence_truncate"], torch.tensor([[2.0], [3.0]], dtype=torch.float64))
    assert torch.allclose(w["sequence_mask"], torch.tensor([[2.0], [0.0]], dtype=torch.float64))
    # a lower bound: 1 is below C_min = 1.5 -> truncated up to 1.5, masked to 0
    lo = glh.is_weights(old, smp, m, mode="token_truncate", clip_min=1.5)
    assert torch.allclose(lo[0], torch.tensor([1.5, 2.0], dtype=torch.float64))
    lo = glh.is_weights(old, smp, m, mode="token_mask", clip_min=1.5, clip_max=None)
    assert torch.allclose(lo, torch.tensor([[0.0, 2.0], [4.5, 4.5]], dtype=torch.float64))


@pytest.mark.parametrize("mode", glh.IS_MODES)
@pytest.mark.parametrize("clip_min, clip_max", [(None, 3.0), (0.5, 2.0), (0.2, None)])
def test_is_weights_equal_trls_lines(mode, clip_min, clip_max):
    old, smp, mask = _pair()
    got = glh.is_weights(old, smp, mask, mode=mode, clip_min=clip_min, clip_max=clip_max)
    expected = _trl(old, smp, mask, mode, clip_min, clip_max)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, rtol=1e-12, atol=0)


def test_is_weights_equal_the_plain_faces():
    old, smp, mask = _pair(seed=1)
    m = mask.bool()                        # the plain face has no mask: compare real tokens
    assert torch.allclose(glh.is_weights(old, smp, mask, mode="token_truncate", clip_max=2.0)[m],
                          glh.token_truncated_is_plain(old, smp, 2.0)[m], rtol=1e-12)
    assert torch.allclose(glh.is_weights(old, smp, mask), glh.sequence_masked_is_plain(
        old, smp, mask, 3.0), rtol=1e-12)


def test_a_token_the_engine_did_not_score_counts_as_agreement():
    old = torch.full((1, 3), -1.0)
    smp = torch.tensor([[-1.0, float("nan"), -2.0]])
    w = glh.is_weights(old, smp, torch.ones(1, 3), mode="token_truncate")
    assert torch.allclose(w, torch.tensor([[1.0, 1.0, math.e]]))
    seq = glh.is_weights(old, smp, torch.ones(1, 3), mode="sequence_truncate")
    assert torch.allclose(seq, torch.tensor([[math.e]]))


def test_masked_tokens_do_not_count_in_the_sequence_ratio():
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    smp = torch.tensor([[-1.5, -30.0, -40.0]])          # the last two are padding
    w = glh.is_weights(old, smp, torch.tensor([[1, 0, 0]]), mode="sequence_truncate")
    assert torch.allclose(w, torch.tensor([[math.exp(0.5)]]))


def test_a_long_disagreeing_sequence_gives_the_cap_or_zero_never_inf():
    old = torch.full((2, 200), -0.1)                     # float32: e^200 overflows
    smp = torch.full((2, 200), -1.1)
    m = torch.ones(2, 200)
    assert torch.equal(glh.is_weights(old, smp, m, mode="sequence_truncate"),
                       torch.full((2, 1), 3.0))
    assert torch.equal(glh.is_weights(old, smp, m, mode="sequence_mask"), torch.zeros(2, 1))
    uncapped = glh.is_weights(old, smp, m, mode="sequence_truncate", clip_max=None)
    assert bool(torch.isfinite(uncapped).all())
    assert torch.allclose(uncapped, torch.full((2, 1), math.exp(20.0)))


def test_the_weights_carry_no_gradient():
    old, smp, mask = _pair()
    w = glh.is_weights(old.requires_grad_(), smp, mask, mode="token_truncate")
    assert not w.requires_grad


def test_weighted_advantages_are_trls_weighted_per_token_loss():
    # TRL: per_token_loss = -min(r A, clip(r) A) * w + beta * kl, then dapo's token sum / count
    old, smp, mask = _pair(seed=2)
    g = torch.Generator().manual_seed(3)
    logp = (old + torch.randn(old.shape, generator=g, dtype=torch.float64) * 0.3).clamp(max=-1e-3)
    ref = old - 0.1
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0], dtype=torch.float64)
    beta = 0.04
    for mode in ("token_truncate", "sequence_mask"):
        w = glh.is_weights(old, smp, mask, mode=mode, clip_max=2.0)
        loss, _ = glt.grpo_loss(logp, old, ref, glh.weighted_advantages(adv, w), mask, beta=beta,
                                agg="dapo")
        r = torch.exp(logp - old)
        a = adv[:, None]
        per_token = -torch.min(r * a, torch.clamp(r, 0.8, 1.2) * a) * w
        per_token = per_token + beta * (torch.exp(ref - logp) - (ref - logp) - 1)
        trl = (per_token * mask).sum() / mask.sum()
        assert abs(float(loss) - float(trl)) < 1e-12


def test_weighted_advantages_shapes_and_bad_weights():
    adv = torch.tensor([1.0, -2.0])
    assert glh.weighted_advantages(adv, torch.ones(2, 1)).shape == (2,)
    assert glh.weighted_advantages(adv, torch.ones(2, 4)).shape == (2, 4)
    with pytest.raises(ValueError, match="^weights:"):
        glh.weighted_advantages(adv, -torch.ones(2, 1))
    with pytest.raises(ValueError, match="^weights:"):
        glh.weighted_advantages(adv, torch.ones(3, 1))
    with pytest.raises(ValueError, match="^adv:"):
        glh.weighted_advantages(torch.ones(2, 2), torch.ones(2, 1))


@pytest.mark.parametrize("change, name", [
    (dict(old_logp=[[-1.0]]), "old_logp"),
    (dict(old_logp=torch.tensor([[-1.0, float("nan")]])), "old_logp"),
    (dict(sampler_logp=torch.zeros(1, 3)), "sampler_logp"),
    (dict(sampler_logp=torch.tensor([[-1.0, 0.5]])), "sampler_logp"),
    (dict(mask=torch.tensor([[1.0, 0.5]])), "mask"),
    (dict(mask=torch.ones(1, 3)), "mask"),
    (dict(mode="token"), "mode"),
    (dict(clip_max=0.0), "clip_max"),
    (dict(clip_min=-1.0), "clip_min"),
    (dict(clip_min=3.0, clip_max=2.0), "clip_min")])
def test_is_weights_bad_arguments_name_themselves(change, name):
    args = dict(old_logp=torch.tensor([[-1.0, -2.0]]), sampler_logp=torch.tensor([[-1.0, -2.5]]),
                mask=torch.ones(1, 2))
    args.update(change)
    kwargs = {k: args.pop(k) for k in ("mode", "clip_min", "clip_max") if k in args}
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.is_weights(args["old_logp"], args["sampler_logp"], args["mask"], **kwargs)
