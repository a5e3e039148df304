"""The reference, old_logp, the reward, the warm start and one GRPO step (gl.hf, chapter 6b)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab as gl  # noqa: E402
import grpo_lab.hf as glh  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402


@pytest.fixture(scope="module")
def task():
    return gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)


@pytest.fixture(scope="module")
def warm(tok, task):
    """A model warm-started for a few steps (the format, roughly), and its losses."""
    model = glh.build_model(tok, seed=0)
    losses = glh.warm_start(model, tok, task, steps=40, batch_size=32, lr=1e-2, seed=0)
    return model, losses


# --- the reference and old_logp ------------------------------------------------------------------

def test_frozen_copy_is_independent_of_the_policy(tok):
    policy = glh.build_model(tok, seed=1)
    ref = glh.frozen_copy(policy)
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    before = {k: v.clone() for k, v in ref.state_dict().items()}
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    ids, mask = glh.encode_prompts(tok, ["1+2="])
    policy(input_ids=ids, attention_mask=mask).logits.sum().backward()
    opt.step()
    assert all(torch.equal(before[k], v) for k, v in ref.state_dict().items())
    assert not torch.equal(policy.lm_head.weight, ref.lm_head.weight)


def test_old_and_reference_logprobs_are_the_no_grad_forward(tok):
    policy = glh.build_model(tok, seed=2)
    ref = glh.frozen_copy(policy)
    batch = glh.sample(policy, *glh.encode_prompts(tok, ["1+2=", "4+4="], repeat=3),
                       max_new_tokens=6, seed=0)
    old = glh.old_logprobs(policy, batch, temperature=0.9)
    assert not old.requires_grad
    expected = glh.completion_logprobs(policy, batch.input_ids, batch.attention_mask,
                                       batch.completion_ids.shape[1], temperature=0.9)
    assert torch.allclose(old, expected.detach())
    assert torch.allclose(glh.reference_logprobs(ref, batch, temperature=0.9), old)
    gap = glh.logp_mismatch(glh.old_logprobs(policy, batch), batch.sampler_logp,
                            batch.completion_mask)
    assert 0.0 <= gap["mean"] <= gap["max"] < 1e-5          # KV cache vs full forward
    with pytest.raises(TypeError, match="^batch:"):
        glh.old_logprobs(policy, batch.input_ids)
    with pytest.raises(TypeError, match="^model:"):
        glh.frozen_copy(torch.nn.Linear(2, 2))


def test_logp_mismatch_by_hand_and_bad_arguments():
    old = torch.tensor([[-1.0, -2.0, -3.0]])
    smp = torch.tensor([[-1.5, -2.0, -9.0]])
    assert glh.logp_mismatch(old, smp, torch.tensor([[1, 1, 0]])) == {"mean": 0.25, "max": 0.5}
    with pytest.raises(ValueError, match="^mask:"):
        glh.logp_mismatch(old, smp, torch.zeros(1, 3))
    with pytest.raises(ValueError, match="^sampler_logp:"):
        glh.logp_mismatch(old, smp[:, :2], torch.ones(1, 2))


# --- the reward and the warm start ---------------------------------------------------------------

def test_addition_rewards_by_hand_and_as_trls_reward_function():
    texts = ["<think></think><answer>5</answer>", "<answer>5</answer>",
             "<think></think><answer>6</answer>", "5"]
    assert glh.addition_rewards(texts, [5, 5, 5, 5]).tolist() == [1.5, 1.0, 0.5, 0.0]
    record = []
    f = glh.trl_reward_function(record=record)
    conversational = [[{"role": "assistant", "content": t}] for t in texts]
    assert f(prompts=None, completions=conversational, answer=[5, 5, 5, 5]) == [1.5, 1.0, 0.5, 0.0]
    assert f(prompts=None, completions=texts, answer=[6] * 4) == [0.5, 0.0, 1.5, 0.0]
    assert record[0][0] == texts and record[1][1].tolist() == [0.5, 0.0, 1.5, 0.0]
    with pytest.raises(ValueError, match="^answers:"):
        glh.addition_rewards(texts, [5])
    with pytest.raises(TypeError, match="^texts:"):
        glh.addition_rewards("5", [5])
    with pytest.raises(ValueError, match="^format_weight:"):
        glh.trl_reward_function(format_weight=-1.0)


def test_warm_start_lowers_the_loss_and_teaches_the_format(tok, task, warm):
    model, losses = warm
    assert len(losses) == 40 and losses[-1] < 0.5 * losses[0]
    assert not model.training
    ids, mask = glh.encode_prompts(tok, [glh.prompt_messages((1, 2))], repeat=8)
    out = glh.sample(model, ids, mask, max_new_tokens=8, temperature=0.0)
    text = tok.decode(out.completion_ids[0], skip_special_tokens=True)
    assert gl.format_reward(text) == 1.0       # 40 steps teach the format (not the sum)


@pytest.mark.parametrize("kwargs, name", [
    (dict(steps=-1), "steps"), (dict(batch_size=0), "batch_size"), (dict(lr=0.0), "lr"),
    (dict(answers="right"), "answers"), (dict(seed=-1), "seed")])
def test_warm_start_bad_arguments_name_themselves(tok, task, kwargs, name):
    model = glh.build_model(tok, seed=0)
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.warm_start(model, tok, task, **kwargs)
    with pytest.raises(TypeError, match="^task:"):
        glh.warm_start(model, tok, "addition")


# --- StepConfig -------------------------------------------------------------------------------

def test_step_config_from_the_trl_preset():
    p = gl.presets.PRESETS["trl"]
    cfg = glh.StepConfig.from_preset("trl")
    assert (cfg.agg, cfg.eps_low, cfg.eps_high, cfg.kl, cfg.kl_bias_correction) == \
        (p.agg, p.eps_low, p.eps_high, p.kl, p.kl_bias_correction)
    assert cfg.beta == p.beta == 0.0 and cfg.group_size == p.group_size == 8
    assert cfg.advantages == {"eps": 1e-4, "ddof": 1}
    assert glh.StepConfig.from_preset("trl", beta=0.04, group_size=4).beta == 0.04


@pytest.mark.parametrize("kwargs, name", [
    (dict(group_size=1), "group_size"), (dict(agg="mean"), "agg"), (dict(eps_low=-0.1), "eps_low"),
    (dict(beta=-1.0), "beta"), (dict(is_mode="tis"), "is_mode"), (dict(kl="k4"), "kl"),
    (dict(micro_size=0), "micro_size"), (dict(temperature=0.0), "temperature"),
    (dict(kl_bias_correction=1), "kl_bias_correction")])
def test_step_config_bad_fields_name_themselves(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.StepConfig(**kwargs)


def test_step_config_from_preset_refuses_unknown_names():
    with pytest.raises(ValueError, match="^name:"):
        glh.StepConfig.from_preset("deepspeed")
    with pytest.raises(TypeError, match="^overrides:"):
        glh.StepConfig.from_preset("trl", learning_rate=1e-3)


# --- one GRPO step ----------------------------------------------------------------------------

def _step(warm, tok, task, cfg, seed=0, lr=0.05):
    model = glh.frozen_copy(warm[0]).requires_grad_(True)     # a fresh trainable copy
    ref = glh.frozen_copy(warm[0])
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    terms = task.batch(4, np.random.default_rng(seed))
    out = glh.grpo_step(model, opt, tok, terms, cfg, ref_model=ref, seed=seed)
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    return out, delta


def test_grpo_step_composes_the_books_functions(warm, tok, task):
    cfg = glh.StepConfig.from_preset("trl", beta=0.04, group_size=4, max_grad_norm=0.0)
    out, delta = _step(warm, tok, task, cfg)
    assert out.rewards.shape == (4, 4) and out.adv.shape == (16,)
    assert torch.allclose(out.adv, glt.group_advantages(out.rewards, eps=1e-4, ddof=1).reshape(-1))
    texts = tok.batch_decode(out.batch.completion_ids, skip_special_tokens=True)
    assert out.rewards.reshape(-1).tolist() == glh.addition_rewards(
        texts, [sum(t) for t in task.batch(4, np.random.default_rng(0)) for _ in range(4)]).tolist()
    m = out.metrics
    for key in ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
                "completions/clipped_ratio", "entropy", "kl", "clip_ratio/region_mean", "loss",
                "grad_norm"):
        assert np.isfinite(m[key]), key
    assert m["reward"] == pytest.approx(float(out.rewards.mean()))
    assert m["clip_ratio/region_mean"] == 0.0      # one update: every ratio is exactly 1
    assert m["kl"] == pytest.approx(0.0, abs=1e-9)  # the policy is still the reference
    if m["frac_reward_zero_std"] < 1.0:
        assert float(delta.abs().max()) > 0


def test_micro_batches_do_not_change_the_step(warm, tok, task):
    cfg = dict(beta=0.04, group_size=4, max_grad_norm=0.0)
    _, full = _step(warm, tok, task, glh.StepConfig.from_preset("trl", **cfg))
    _, micro = _step(warm, tok, task, glh.StepConfig.from_preset("trl", micro_size=3, **cfg))
    assert float(full.abs().max()) > 0
    assert float((full - micro).abs().max()) < 1e-6         # SGD: the update is lr * gradient


def test_several_updates_and_an_is_correction_log_the_sampler_gap(warm, tok, task):
    cfg = glh.StepConfig.from_preset("trl", beta=0.04, group_size=4, num_iterations=2,
                                     is_mode="token_truncate", eps_high=0.28)
    out, _ = _step(warm, tok, task, cfg)
    gap = out.metrics["sampling/sampling_logp_difference/max"]
    assert 0.0 <= out.metrics["sampling/sampling_logp_difference/mean"] <= gap < 1e-5


def test_grpo_step_bad_arguments_name_themselves(warm, tok, task):
    model = warm[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    cfg = glh.StepConfig(group_size=2)
    with pytest.raises(ValueError, match="^ref_model:"):
        glh.grpo_step(model, opt, tok, [(1, 2)], cfg)
    with pytest.raises(TypeError, match="^config:"):
        glh.grpo_step(model, opt, tok, [(1, 2)], {"beta": 0.0})
    with pytest.raises(TypeError, match="^terms:"):
        glh.grpo_step(model, opt, tok, [], glh.StepConfig(group_size=2, beta=0.0))
    with pytest.raises(TypeError, match="^optimizer:"):
        glh.grpo_step(model, None, tok, [(1, 2)], glh.StepConfig(group_size=2, beta=0.0))
