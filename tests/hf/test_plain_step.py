"""The plain GRPO step (gl.hf.grpo_step_plain, chapter 6b) equals the hardened gl.hf.grpo_step.

Both run on copies of one warmed-up model with the same seed: the same samples, rewards and
advantages, and after one optimizer step the same weights (to float32 rounding), with ragged
completions, two micro-batches and the gradient-norm clip active. A changed line in either
(a KL sign, a per-micro-batch normaliser, a missing shift) breaks the equality.

Chapter 6b ("The whole step, written plainly") runs the two steps once on the page (beta 0.04,
one micro-batch of 8); the cases below repeat it with other micro-batch sizes (8, 5, 12), the
gradient-norm clip active (0.05) and beta = 0."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab as gl  # noqa: E402
import grpo_lab.hf as glh  # noqa: E402


@pytest.fixture(scope="module")
def warm(tok):
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)
    model = glh.build_model(tok, seed=0)
    glh.warm_start(model, tok, task, steps=40, batch_size=32, lr=1e-2, seed=0)
    return model, task


def _both(warm, tok, *, beta, micro_size, max_grad_norm, seed, ddof=1):
    model, task = warm
    terms = task.batch(3, np.random.default_rng(seed))                     # B = 3 prompts
    plain, hard = copy.deepcopy(model), copy.deepcopy(model)
    ref = glh.frozen_copy(model)
    opt_p = torch.optim.SGD(plain.parameters(), lr=0.1)   # the update is lr x gradient
    opt_h = torch.optim.SGD(hard.parameters(), lr=0.1)
    cfg = glh.StepConfig.from_preset("trl", beta=beta, group_size=4, micro_size=micro_size,
                                     max_grad_norm=max_grad_norm, kl_bias_correction=False,
                                     advantages=dict(eps=1e-4, ddof=ddof))
    out = glh.grpo_step(hard, opt_h, tok, terms, cfg, ref_model=ref, seed=seed)
    glh.grpo_step_plain(plain, ref, opt_p, tok, [glh.prompt_messages(t) for t in terms],
                        [sum(t) for t in terms], glh.addition_rewards, G=4, beta=beta,
                        eps=cfg.eps_low, tau=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                        micro_size=micro_size, max_grad_norm=max_grad_norm,
                        std_eps=cfg.advantages["eps"], seed=seed)
    moved = torch.cat([(h.detach() - m.detach()).flatten()
                       for h, m in zip(hard.parameters(), model.parameters())])
    gap = torch.cat([(h.detach() - p.detach()).flatten()
                     for h, p in zip(hard.parameters(), plain.parameters())])
    return out, moved, gap


@pytest.mark.parametrize("beta, micro_size, max_grad_norm, seed",
                         [(0.04, 8, 1.0, 0), (0.04, 5, 0.05, 1), (0.0, 12, 1.0, 2)])
def test_the_plain_step_equals_the_hardened_one(warm, tok, beta, micro_size, max_grad_norm, seed):
    out, moved, gap = _both(warm, tok, beta=beta, micro_size=micro_size,
                            max_grad_norm=max_grad_norm, seed=seed)
    assert out.metrics["frac_reward_zero_std"] < 1.0, "no group with spread: nothing to compare"
    assert float(moved.abs().max()) > 1e-4                  # the step moved the weights
    assert float(gap.abs().max()) <= 1e-6 * max(1.0, float(moved.abs().max())) + 1e-7


def test_the_comparison_can_fail(warm, tok):
    """The hardened step with the population std (ddof 0) moves the weights elsewhere than the
    plain step's Bessel std (torch's default): the equality above is not vacuous."""
    out, moved, gap = _both(warm, tok, beta=0.04, micro_size=8, max_grad_norm=0.0, seed=0,
                            ddof=0)
    assert float(gap.abs().max()) > 1e-5
