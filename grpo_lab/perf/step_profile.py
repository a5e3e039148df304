r"""Where the time and memory of one GRPO step go: measured on chapter 6's tiny policy, and by
arithmetic at 7B scale.

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

:func:`step_arithmetic` does the same bookkeeping for a 7B model on a GPU's datasheet figures:
estimates from the byte and flop counts, labelled as such, not measurements.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass

__all__ = ["STAGES", "ModelShape", "QWEN_7B", "step_arithmetic", "time_grpo_step"]

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


@dataclass(frozen=True)
class ModelShape:
    """The sizes that set a GRPO step's cost: parameters, layers, width and vocabulary."""
    name: str
    params: float
    n_layer: int
    d_model: int
    vocab: int
    kv_bytes_per_token: float       # the KV cache one token keeps (all layers), bf16


#: A 7B model shaped like Qwen2.5-7B (28 layers, width 3584, 4 KV heads of 128, vocabulary
#: 152064): its KV cache per token is 2 (K, V) x 28 x 4 x 128 x 2 bytes = 57 KB.
QWEN_7B = ModelShape("7B (Qwen2.5-7B shape)", 7.6e9, 28, 3584, 152064, 2 * 28 * 4 * 128 * 2)


def step_arithmetic(model, gpu, *, prompts=64, G=8, T=1024, prompt_len=256, bf16_flops=989e12,
                    mfu=0.4):
    """Arithmetic, not measurement: the time and memory of one GRPO step's stages at this scale.

    ``gpu`` is a :class:`grpo_lab.perf.roofline.GPU` (datasheet bandwidth); ``bf16_flops`` its
    dense bf16 tensor-core peak (989 TFLOP/s on the H100 and H200 SXM datasheets) and ``mfu``
    the fraction of it a well-tuned training step reaches (an assumption). N = prompts * G.

    * generation: T decode steps, each reading the bf16 weights and the KV cache of all N
      sequences once (memory-bound: bytes / bandwidth);
    * policy forward + backward: 6 flops per parameter per token (2 forward, 4 backward), at
      ``mfu`` of the peak; the reference's forward: 2 per parameter per token;
    * the logits: N T V float32 values, if held at once (eager code holds them, and their
      log-softmax, until the backward pass);
    * the loss: :func:`grpo_lab.perf.roofline.loss_min_bytes` at the bandwidth.

    Returns ``{stage: (seconds, bytes held)}``; bytes held is None where it is not the point.
    """
    from grpo_lab.perf.roofline import loss_min_bytes
    N = prompts * G
    weights = 2 * model.params                                        # bf16
    mean_context = prompt_len + T / 2
    decode_bytes = T * (weights + N * mean_context * model.kv_bytes_per_token)
    tokens = N * (prompt_len + T)
    achieved = mfu * bf16_flops
    logits_bytes = N * T * model.vocab * 4
    return {
        "generation": (decode_bytes / gpu.hbm_bytes_per_s, N * (prompt_len + T)
                       * model.kv_bytes_per_token),
        "ref forward": (2 * model.params * tokens / achieved, None),
        "policy forward + backward": (6 * model.params * tokens / achieved, None),
        "logits (N, T, V) float32": (2 * logits_bytes / gpu.hbm_bytes_per_s, logits_bytes),
        "loss (eager floor)": (loss_min_bytes(N, T) / gpu.hbm_bytes_per_s, None),
    }
