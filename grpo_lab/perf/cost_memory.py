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

from grpo_lab.numerics.validate import check_int, check_real
from grpo_lab.perf.cost_model import kv_bytes_per_token, param_counts

__all__ = ["BYTES_PER_PARAM", "activation_bytes", "kv_cache_bytes", "kv_capacity_tokens",
           "padding_waste", "training_bytes_per_gpu"]

#: Mixed-precision Adam: bf16 weight, bf16 gradient, fp32 master, fp32 m, fp32 v.
BYTES_PER_PARAM = {"weights": 2, "gradients": 2, "master": 4, "adam m": 4, "adam v": 4}


def kv_cache_bytes(model, sequences, tokens):
    """The KV cache of ``sequences`` sequences of ``tokens`` tokens each, bf16."""
    return sequences * tokens * kv_bytes_per_token(model)


def training_bytes_per_gpu(model, gpus=1, zero_stage=0):
    """``{part: bytes}`` one GPU holds of :data:`BYTES_PER_PARAM` under ZeRO ``zero_stage``."""
    gpus = check_int("gpus", gpus, minimum=1)
    zero_stage = check_int("zero_stage", zero_stage, minimum=0, maximum=3)
    P = param_counts(model)["total"]
    sharded = {1: ("master", "adam m", "adam v"), 2: ("master", "adam m", "adam v",
               "gradients"), 3: tuple(BYTES_PER_PARAM)}.get(zero_stage, ())
    return {part: P * size / (gpus if part in sharded else 1)
            for part, size in BYTES_PER_PARAM.items()}


def activation_bytes(model, tokens, checkpointing=False):
    """Activations the backward pass needs, bf16, for ``tokens`` tokens in flight.

    Without checkpointing about 34 d bytes per token per layer (Korthikanti et al., 2022, with
    a fused attention that keeps no scores); with it, the layer inputs only, 2 d bytes per token
    per layer, plus one layer's 34 d recomputed at a time.
    """
    tokens = check_int("tokens", tokens, minimum=0)
    per_layer = 34 * model.hidden * tokens
    if checkpointing:
        return 2 * model.hidden * tokens * model.layers + per_layer
    return per_layer * model.layers


def kv_capacity_tokens(model, gpu, memory_fraction=0.9, other_bytes=0.0):
    """Tokens of KV cache an engine can hold: ``memory_fraction`` of the card (vLLM's
    gpu_memory_utilization) less its bf16 weights and ``other_bytes`` (e.g. what a colocated
    trainer keeps resident), over :func:`kv_bytes_per_token`. 0 if nothing is left."""
    memory_fraction = check_real("memory_fraction", memory_fraction, minimum=0.0, maximum=1.0)
    free = (memory_fraction * gpu.hbm_capacity_bytes - 2 * param_counts(model)["total"]
            - other_bytes)
    return max(0, int(free // kv_bytes_per_token(model)))


def padding_waste(lengths, pad_to=None):
    """The share of a padded batch's tokens that are padding: 1 - sum(lengths) / (n x pad_to),
    ``pad_to`` the longest by default. Packing sequences end to end removes it."""
    lengths = [check_int("lengths", n, minimum=0) for n in lengths]
    if not lengths:
        raise ValueError("lengths: expected at least one length, got none")
    pad_to = max(lengths) if pad_to is None else check_int("pad_to", pad_to, minimum=max(lengths))
    return 1.0 - sum(lengths) / (len(lengths) * pad_to) if pad_to else 0.0
