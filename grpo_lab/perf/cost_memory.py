r"""The memory half of chapter 7's cost model: the KV cache, the 16 bytes per parameter of
training, activations, and the split of one GPU between an inference engine and a trainer.

Taught in chapter 7 (``chapters/07_performance.ipynb``); the time half is
:mod:`grpo_lab.perf.cost_model`. Arithmetic on datasheet capacities, not measurement.

Mixed-precision Adam keeps, per parameter: the bf16 weight (2 bytes), its bf16 gradient (2),
an fp32 master copy (4) and the two fp32 moments (4 + 4): 16 bytes. ZeRO (Rajbhandari et al.,
2020) and FSDP shard them over the data-parallel GPUs: stage 1 the optimizer state (12 bytes),
stage 2 also the gradients, stage 3 (FSDP's full sharding) also the weights.
"""

from __future__ import annotations

from grpo_lab.perf.cost_checks import check_cost_arguments, finite_result
from grpo_lab.perf.cost_model import _kv_bytes_per_token, _param_counts

__all__ = ["BYTES_PER_PARAM", "GATHERED_UNITS", "activation_bytes",
           "activation_bytes_per_token_layer", "kv_cache_bytes", "kv_capacity_tokens",
           "padding_waste", "trainer_bytes_per_gpu", "training_bytes_per_gpu"]

#: Mixed-precision Adam: bf16 weight, bf16 gradient, fp32 master, fp32 m, fp32 v.
BYTES_PER_PARAM = {"weights": 2, "gradients": 2, "master": 4, "adam m": 4, "adam v": 4}

#: ZeRO-3 / FSDP gather a module's full bf16 weights before using it and free them after; with
#: the next one prefetched, two of the largest units are whole at once (the LM head or the
#: embedding, V x d, is the largest for Qwen2.5). An assumption: DeepSpeed bounds it with
#: ``stage3_max_live_parameters``, FSDP with its wrapping and prefetch settings.
GATHERED_UNITS = 2


def kv_cache_bytes(model, sequences, tokens):
    """The KV cache of ``sequences`` sequences of ``tokens`` tokens each, bf16."""
    model, sequences, tokens = check_cost_arguments(model=model, sequences=sequences, tokens=tokens)
    return sequences * tokens * _kv_bytes_per_token(model)


def _training_bytes_per_gpu(model, gpus, zero_stage):
    P = _param_counts(model)["total"]
    sharded = {1: ("master", "adam m", "adam v"), 2: ("master", "adam m", "adam v",
               "gradients"), 3: tuple(BYTES_PER_PARAM)}.get(zero_stage, ())
    return {part: P * size / (gpus if part in sharded else 1)
            for part, size in BYTES_PER_PARAM.items()}


def training_bytes_per_gpu(model, gpus=1, zero_stage=0):
    """``{part: bytes}`` one GPU holds of :data:`BYTES_PER_PARAM` under ZeRO ``zero_stage``:
    stage 3 over 8 GPUs leaves an eighth of each part on each."""
    model, gpus, zero_stage = check_cost_arguments(model=model, gpus=gpus, zero_stage=zero_stage)
    return _training_bytes_per_gpu(model, gpus, zero_stage)


def _activation_bytes_per_token_layer(model):
    d, I = model.hidden, model.intermediate
    d_kv = model.kv_heads * model.head_dim
    attention = 2 * d + 2 * d + 2 * d + 2 * 2 * d_kv + 2 * d   # norm in, q/k/v in, q, k and v, out
    mlp = 2 * d + 2 * d + 4 * 2 * I                            # norm in, gate/up in, 4 (b, I)
    return attention + mlp


def activation_bytes_per_token_layer(model):
    r"""Bytes one token keeps for the backward pass in one decoder layer, bf16, counted for a
    Llama / Qwen2.5 layer: RMSNorm, grouped-query attention, SwiGLU, no dropout, a fused
    (flash) attention that keeps no scores.

    Korthikanti et al. (2022) count ``34 d`` for GPT's layer: a 4d GeLU MLP (its input, the GeLU
    input and output, 2 + 8 + 8 d) with dropout masks (1 byte each: 3 d), LayerNorm inputs (4 d)
    and attention's q, k, v, output and input (11 d, less the scores). For Qwen2.5's layer, 2
    bytes a number, with ``d_kv = kv_heads x head_dim`` and ``I`` the MLP's width:

    ==========================  =========================  =============================
    tensor kept                  bytes                      why
    ==========================  =========================  =============================
    attention's RMSNorm input    2 d                        the norm's backward
    q/k/v projections' input     2 d                        their weight gradients
    q; k and v (after RoPE)      2 d; 2 x 2 d_kv            flash attention's backward
    attention output             2 d                        flash's backward, o_proj's input
    MLP's RMSNorm input          2 d                        the norm's backward
    gate / up projections' input 2 d                        their weight gradients
    gate, silu(gate), up, h      4 x 2 I                    silu's and the product's
                                                            backward, down_proj's input
    ==========================  =========================  =============================

    ``12 d + 4 d_kv + 8 I``; for Qwen2.5-7B (d 3584, d_kv 512, I 18944 = 5.29 d) that is
    196,608 bytes, 54.9 d, not 34 d: the SwiGLU MLP's four (I)-wide tensors are most of it;
    grouped-query attention (4 of 28 KV heads) and no dropout take a little off.
    (Flash attention's per-head logsumexp, 4 bytes a head, is left out: under 0.04 d.)
    """
    return _activation_bytes_per_token_layer(check_cost_arguments(model=model))


def _activation_bytes(model, tokens, checkpointing):
    per_layer = _activation_bytes_per_token_layer(model) * tokens
    if checkpointing:
        return 2 * model.hidden * tokens * model.layers + per_layer
    return per_layer * model.layers


def activation_bytes(model, tokens, checkpointing=False):
    """Activations the backward pass needs, bf16, for ``tokens`` tokens in flight.

    Without checkpointing :func:`activation_bytes_per_token_layer` per token per layer (about
    55 d for Qwen2.5-7B); with it, the layer inputs only, 2 d bytes per token per layer, plus
    one layer's activations recomputed at a time. The logits are not in it
    (:func:`trainer_bytes_per_gpu` adds them).
    """
    model, tokens, checkpointing = check_cost_arguments(model=model, tokens=tokens,
                                                        checkpointing=checkpointing)
    return _activation_bytes(model, tokens, checkpointing)


def trainer_bytes_per_gpu(model, gpus, micro_tokens, *, zero_stage=3, checkpointing=True,
                          reference=True, fp32_logits=True, chunked_logits=False):
    """``{part: bytes}`` a trainer rank holds at its peak, one micro-batch of ``micro_tokens``
    tokens in flight, bf16 compute:

    - ``training state``: :func:`training_bytes_per_gpu` under ``zero_stage``;
    - ``reference weights``: the frozen reference's bf16 weights (``reference``), sharded like
      the policy's weights (ZeRO-3: 1/gpus);
    - ``ZeRO-3 gather``: :data:`GATHERED_UNITS` of the largest module's bf16 weights, whole
      (stage 3 only);
    - ``activations``: :func:`activation_bytes`;
    - ``logits``: the micro-batch's (tokens, V) logits in bf16, and ``logits fp32`` their fp32
      upcast for the log-softmax (``fp32_logits``; what TRL's ``cast_lm_head_to_fp32`` or a
      ``.float()`` before ``log_softmax`` makes); both 0 with ``chunked_logits`` (a fused LM
      head and loss, TRL's or this book's, holds one chunk).
    """
    model, gpus, micro_tokens, zero_stage = check_cost_arguments(
        model=model, gpus=gpus, micro_tokens=micro_tokens, zero_stage=zero_stage)
    checkpointing, reference, fp32_logits, chunked_logits = check_cost_arguments(
        checkpointing=checkpointing, reference=reference, fp32_logits=fp32_logits,
        chunked_logits=chunked_logits)
    counts = _param_counts(model)
    largest = max(model.vocab * model.hidden,                        # the LM head / embedding
                  (counts["layers"] - model.hidden) // model.layers)  # one decoder layer
    logits = 0 if chunked_logits else micro_tokens * model.vocab * 2
    return finite_result({
        "training state": sum(_training_bytes_per_gpu(model, gpus, zero_stage).values()),
        "reference weights": (2 * counts["total"] / (gpus if zero_stage == 3 else 1)
                              if reference else 0.0),
        "ZeRO-3 gather": 2.0 * GATHERED_UNITS * largest if zero_stage == 3 else 0.0,
        "activations": float(_activation_bytes(model, micro_tokens, checkpointing)),
        "logits": float(logits),
        "logits fp32": float(2 * logits if fp32_logits else 0),
    }, "micro_tokens")


def kv_capacity_tokens(model, gpu, memory_fraction=0.9, other_bytes=0.0):
    """Tokens of KV cache an engine can hold: ``memory_fraction`` of the card (vLLM's
    gpu_memory_utilization) less its bf16 weights and ``other_bytes`` (e.g. what a colocated
    trainer keeps resident), over :func:`kv_bytes_per_token`. 0 if nothing is left."""
    model, gpu, memory_fraction, other_bytes = check_cost_arguments(
        model=model, gpu=gpu, memory_fraction=memory_fraction, other_bytes=other_bytes)
    free = (memory_fraction * gpu.hbm_capacity_bytes - 2 * _param_counts(model)["total"]
            - other_bytes)
    return max(0, int(free // _kv_bytes_per_token(model)))


def padding_waste(lengths, pad_to=None):
    """The share of a padded batch's tokens that are padding: 1 - sum(lengths) / (n x pad_to),
    ``pad_to`` the longest by default. Packing sequences end to end removes it. ``lengths``:
    integers >= 0 (a list or a 1-D array), at least one."""
    lengths, pad_to = check_cost_arguments(token_counts=lengths, pad_to=pad_to)
    longest = int(lengths.max())
    if pad_to is not None and pad_to < longest:
        raise ValueError(f"pad_to: expected at least the longest length, {longest}, "
                         f"got {pad_to}")
    pad_to = longest if pad_to is None else pad_to
    return 1.0 - float(lengths.sum()) / (lengths.size * pad_to) if pad_to else 0.0
