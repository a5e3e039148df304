r"""Where the time of one GRPO step goes, measured on chapter 6's tiny policy.

Taught in chapter 7 (``chapters/07_performance.ipynb``). A GRPO step (chapter 6,
:func:`grpo_lab.rl.train.grpo_step`) has these stages; :func:`time_grpo_step` times each:

=================  =========================================================================
``generation``     sample G completions per prompt, one token at a time (:func:`rollout`)
``rewards``        score them (:func:`score`)
``advantages``     :func:`grpo_lab.torch.group_advantages`
``ref forward``    the frozen reference's log-probs, no gradient
``policy forward``  the policy's logits (N, T, V) and their log-softmax, with gradient
``loss``           :func:`grpo_lab.torch.grpo_loss`, forward and backward, on the log-probs
``policy backward``  the backward pass through the head and the transformer
``optimizer``      the gradient clip and Adam's step
=================  =========================================================================

The same step on a Hugging Face model is :func:`grpo_lab.perf.hf_profile.time_hf_step`; at 7B
scale on a GPU, by arithmetic, :func:`grpo_lab.perf.cost_model.grpo_step_cost`.
"""

from __future__ import annotations

import copy
import statistics
import time

__all__ = ["STAGES", "time_grpo_step"]

STAGES = ("generation", "rewards", "advantages", "ref forward", "policy forward", "loss",
          "policy backward", "optimizer")


def time_grpo_step(run, repeats=3):
    """``{stage: median seconds}`` over ``repeats`` GRPO steps of ``run`` (gl.train.make_run).

    The steps are chapter 6's ``grpo_step`` with ``inner_iters`` = 1, cut where the stages
    meet; the policy is updated, as in training. ``run.reference`` is set to a frozen copy of
    the policy if it has none. Also returns the shapes: ``{"N", "T", "V", "params"}``.
    """
    import torch

    import grpo_lab.torch as glt
    from grpo_lab.rl import train
    from grpo_lab.rl.tiny_policy import completion_logp
    if run.reference is None:
        run.reference = copy.deepcopy(run.policy).eval().requires_grad_(False)
    cfg = run.config
    times = {stage: [] for stage in STAGES}

    def timed(stage, fn):
        start = time.perf_counter()
        out = fn()
        times[stage].append(time.perf_counter() - start)
        return out

    for _ in range(repeats):
        batch = timed("generation", lambda: train.rollout(run))
        scores = timed("rewards", lambda: train.score(run, batch))
        rewards = torch.tensor(scores["reward"])                              # (B, G)
        adv = timed("advantages", lambda: glt.group_advantages(rewards).reshape(-1))   # (N,)
        with torch.no_grad():
            ref = timed("ref forward", lambda: completion_logp(
                run.reference, batch.prompts, batch.tokens, batch.mask))          # (N, T)
        logp = timed("policy forward", lambda: completion_logp(
            run.policy, batch.prompts, batch.tokens, batch.mask))                 # (N, T)
        leaf = logp.detach().requires_grad_()                                     # cut here

        def loss_step():
            loss, _ = glt.grpo_loss(leaf, batch.old_logp, ref, adv, batch.mask,
                                    beta=cfg.beta, agg=cfg.agg)
            loss.backward()
        timed("loss", loss_step)
        run.optimizer.zero_grad()
        timed("policy backward", lambda: logp.backward(leaf.grad))               # the rest
        timed("optimizer", lambda: (torch.nn.utils.clip_grad_norm_(
            run.policy.parameters(), cfg.max_grad_norm), run.optimizer.step()))
    N, T = batch.tokens.shape
    shapes = {"N": N, "T": T, "V": run.policy.head.out_features,
              "params": sum(p.numel() for p in run.policy.parameters())}
    return {stage: statistics.median(ts) for stage, ts in times.items()}, shapes


def __getattr__(name):
    if name in ("step_arithmetic", "ModelShape", "QWEN_7B"):
        raise AttributeError(f"grpo_lab.perf.step_profile.{name} was replaced by the cost model "
                             f"in grpo_lab.perf.cost_model (gl.cost_model.grpo_step_cost, "
                             f"gl.cost_model.QWEN25_7B): it costed generation at full bandwidth "
                             f"with no compute term and training at 40% of peak")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
