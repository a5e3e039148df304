r"""Chapter 6b's GRPO step on a Hugging Face model, timed stage by stage.

Taught in chapter 7 (``chapters/07_performance.ipynb``), beside chapter 6's tiny policy
(:func:`grpo_lab.perf.step_profile.time_grpo_step`) and the 7B cost model
(:func:`grpo_lab.perf.cost_model.grpo_step_cost`). The stages are those of
:func:`grpo_lab.hf.grpo_step`, cut where they meet, with the old-logp forward always run (as
verl and OpenRLHF do, and TRL with vLLM):

=============================  ===============================================================
``generation``                 the prompts, and ``model.generate`` (prefill and decode)
``rewards + advantages``       decode the text, chapter 5's verifiers, group advantages
``reference forward``          the frozen reference's log-probs (beta > 0)
``old-logp forward``           the policy's log-probs before the update, no gradient
``policy forward + backward``  log-probs with gradient, the GRPO loss, and its backward
``optimizer``                  the gradient clip and AdamW's step
=============================  ===============================================================
"""

from __future__ import annotations

import statistics
import time

__all__ = ["HF_STAGES", "time_hf_step"]

HF_STAGES = ("generation", "rewards + advantages", "reference forward", "old-logp forward",
             "policy forward + backward", "optimizer")


def time_hf_step(model, optimizer, tokenizer, task, config, ref_model, *, B=2, repeats=3,
                 seed=0):
    """``({stage: median seconds}, shapes)`` over ``repeats`` steps of B prompts x G samples.

    ``task`` is chapter 6's task (``task.batch(B, rng)`` gives the prompts' terms), ``config`` a
    :class:`grpo_lab.hf.StepConfig`, ``ref_model`` :func:`grpo_lab.hf.frozen_copy` of the policy.
    The model is updated, as in training. ``shapes`` is ``{"N", "P", "T", "V", "params"}``.
    """
    import numpy as np
    import torch

    import grpo_lab.hf as glh
    import grpo_lab.torch as glt
    from grpo_lab.numerics.validate import check_int
    B, repeats = check_int("B", B, minimum=1), check_int("repeats", repeats, minimum=1)
    if not isinstance(config, glh.StepConfig):
        raise TypeError(f"config: expected a gl.hf.StepConfig, got {type(config).__name__}")
    rng, cfg, G = np.random.default_rng(seed), config, config.group_size
    times = {stage: [] for stage in HF_STAGES}

    def timed(stage, fn):
        start = time.perf_counter()
        out = fn()
        times[stage].append(time.perf_counter() - start)
        return out

    for r in range(repeats):
        terms = task.batch(B, rng)

        def generate():
            ids, pmask = glh.encode_prompts(tokenizer, [glh.prompt_messages(t) for t in terms],
                                            repeat=G)                               # (N, P)
            model.eval()
            return glh.sample(model, ids, pmask, max_new_tokens=cfg.max_new_tokens,
                              temperature=cfg.temperature, seed=seed + r)
        batch = timed("generation", generate)
        mask = batch.completion_mask                                                 # (N, T)

        def score():
            texts = tokenizer.batch_decode(batch.completion_ids, skip_special_tokens=True)
            answers = [sum(t) for t in terms for _ in range(G)]
            rewards = torch.tensor(glh.addition_rewards(texts, answers,
                                                        format_weight=cfg.format_weight),
                                   dtype=torch.float32).view(B, G)                   # (B, G)
            return glt.group_advantages(rewards, **cfg.advantages).reshape(-1)       # (N,)
        adv = timed("rewards + advantages", score)
        ref = timed("reference forward", lambda: glh.reference_logprobs(
            ref_model, batch, temperature=cfg.temperature))                          # (N, T)
        old = timed("old-logp forward", lambda: glh.old_logprobs(
            model, batch, temperature=cfg.temperature))                              # (N, T)

        def train():
            model.train()
            optimizer.zero_grad()
            logp = glh.completion_logprobs(model, batch.input_ids, batch.attention_mask,
                                           mask.shape[1], temperature=cfg.temperature)
            loss, _ = glt.grpo_loss(logp, old, ref, adv, mask, eps_low=cfg.eps_low,
                                    eps_high=cfg.eps_high, beta=cfg.beta, kl=cfg.kl,
                                    agg=cfg.agg)
            loss.backward()
        timed("policy forward + backward", train)
        timed("optimizer", lambda: (torch.nn.utils.clip_grad_norm_(
            model.parameters(), cfg.max_grad_norm), optimizer.step()))
    model.eval()
    shapes = {"N": int(mask.shape[0]), "P": int(batch.prompt_ids.shape[1]),
              "T": int(mask.shape[1]), "V": int(model.config.vocab_size),
              "params": sum(p.numel() for p in model.parameters())}
    return {stage: statistics.median(ts) for stage, ts in times.items()}, shapes
