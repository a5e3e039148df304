r"""A cost model of one GRPO step on a GPU: arithmetic on datasheet figures, not measurement.

Taught in chapter 7 (``chapters/07_performance.ipynb``, "The cost of a real GRPO step"); its
figure is ``gl.book.ch07.decode_figure``, its memory half :mod:`grpo_lab.perf.cost_memory`.

Every kernel is costed by the roofline (Williams et al., 2009), per kernel class:

.. math::

    t = \max\Big(\frac{\text{bytes}}{e_{mem} W},\ \frac{\text{flops}}{e_{mm} P}\Big)

with ``W`` the HBM bandwidth, ``P`` the dense bf16 peak, and the fractions of each that a kernel
class reaches, ``e_mem`` and ``e_mm``, stated as assumptions (:class:`Efficiency`). The same
fractions price generation and training, so the two are comparable.

A decode step of ``b`` sequences multiplies a (b, d) activation by every weight matrix: 2 flops
per weight per sequence against 2 bytes per bf16 weight read once, an arithmetic intensity of
``b`` flop/byte. Below the ridge ``P / W`` (295 flop/byte on an H100 SXM, 206 on an H200) the
step waits on memory; above it, on the tensor cores. Attention over the KV cache reads each
sequence's own cache: 2 flops per cached number per query head sharing it, an intensity of
(query heads / KV heads) flop/byte (7 for Qwen2.5-7B), memory-bound at any batch.

Symbols: ``N = prompts * G`` sequences, ``P`` prompt tokens, ``T`` the longest completion (the
number of decode steps), ``lengths`` the completions' lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.numerics.validate import check_int, check_real

__all__ = ["EFFICIENCY", "Efficiency", "ModelConfig", "QWEN25_0_5B", "QWEN25_7B",
           "STEP_STAGES", "crossover_batch", "decode_cost", "decode_intensity",
           "forward_flops_per_token", "grpo_step_cost", "kernel_time", "kv_bytes_per_token",
           "completion_lengths", "param_counts", "ridge_point", "step_mfu"]


@dataclass(frozen=True)
class ModelConfig:
    """A decoder's shape, as its Hugging Face ``config.json`` gives it (nothing downloaded)."""
    name: str
    hidden: int                  # hidden_size, d
    layers: int                  # num_hidden_layers, L
    heads: int                   # num_attention_heads
    kv_heads: int                # num_key_value_heads (grouped-query attention)
    intermediate: int            # intermediate_size of the SwiGLU MLP
    vocab: int                   # vocab_size
    tied_embeddings: bool        # tie_word_embeddings: the LM head is the input embedding

    @property
    def head_dim(self):
        return self.hidden // self.heads


#: Qwen2.5-7B's config.json: hidden 3584, 28 layers, 28 heads, 4 KV heads, intermediate 18944,
#: vocabulary 152064, untied embeddings: 7.62 billion parameters (:func:`param_counts`).
QWEN25_7B = ModelConfig("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, False)
#: Qwen2.5-0.5B's config.json: hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864,
#: vocabulary 151936, tied embeddings: 0.49 billion parameters.
QWEN25_0_5B = ModelConfig("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, True)


@dataclass(frozen=True)
class Efficiency:
    """Assumptions, not datasheet figures: the fraction of the peak each kernel class reaches.

    ``matmul``: a large bf16 GEMM, of the dense tensor-core peak (0.6: well-tuned GEMMs in
    training and in an inference engine reach 60-75%; a whole training step's MFU is lower
    because of everything else in it). ``memory``: a streaming kernel (a weight read, the
    KV-cache read of paged attention, the optimizer), of the HBM bandwidth (0.8).
    """
    matmul: float = 0.6
    memory: float = 0.8


EFFICIENCY = Efficiency()


def kernel_time(flops, nbytes, gpu, eff=EFFICIENCY):
    """The roofline time of one kernel class: ``max(bytes / (e_mem W), flops / (e_mm P))``."""
    return np.maximum(nbytes / (eff.memory * gpu.hbm_bytes_per_s),
                      flops / (eff.matmul * gpu.bf16_flops))


def ridge_point(gpu, eff=None):
    """``P / W`` in flop/byte: bf16 dense peak over HBM bandwidth (with ``eff``: as reached)."""
    if eff is None:
        return gpu.bf16_flops / gpu.hbm_bytes_per_s
    return eff.matmul * gpu.bf16_flops / (eff.memory * gpu.hbm_bytes_per_s)


def param_counts(model):
    """``{"layers", "embedding", "head", "matmul", "total"}``: the parameters, counted.

    Per layer: q and o (d x d each), k and v (d x kv_heads*head_dim each, with Qwen's q/k/v
    biases), the SwiGLU MLP (3 x d x intermediate) and two RMSNorm weights. ``matmul`` is what
    a token's forward multiplies: every layer's matrices and the LM head (the embedding is a
    lookup).
    """
    d, kv = model.hidden, model.kv_heads * model.head_dim
    attn = 2 * d * d + 2 * d * kv + (d + 2 * kv)                  # q, o; k, v; biases
    mlp = 3 * d * model.intermediate
    layers = model.layers * (attn + mlp + 2 * d) + d               # + the final norm
    embedding = model.vocab * d
    head = 0 if model.tied_embeddings else embedding
    return {"layers": layers, "embedding": embedding, "head": head,
            "matmul": layers + embedding, "total": layers + embedding + head}


def kv_bytes_per_token(model, itemsize=2):
    """The KV cache one token keeps, all layers: 2 (K and V) x L x kv_heads x head_dim x itemsize."""
    return 2 * model.layers * model.kv_heads * model.head_dim * itemsize


def forward_flops_per_token(model, context):
    """Flops of one token's forward at ``context`` tokens before it: 2 per matmul weight, and
    attention's scores and weighted sum, 4 x L x context x heads x head_dim."""
    return (2 * param_counts(model)["matmul"]
            + 4 * model.layers * context * model.heads * model.head_dim)


def decode_intensity(batch, itemsize=2):
    """Flop/byte of a decode step's weight GEMMs at ``batch`` sequences: 2 b flops per weight
    over ``itemsize`` bytes per weight (b for bf16). The KV-cache read is not in it."""
    return 2 * np.asarray(batch, dtype=np.float64) / itemsize


def crossover_batch(model, gpu, context=0, eff=None):
    """The batch above which a decode step is compute-bound; ``inf`` if it never is.

    The weights (2 M bytes, M the matmul weights) are read once per step; each sequence adds
    its KV cache, ``context`` tokens of :func:`kv_bytes_per_token`. Compute is 2 M flops per
    sequence. Setting compute time equal to memory time:
    ``b = (2M / W') / (2M / P' - context * kv / W')``, with ``P'``, ``W'`` the peak and
    bandwidth (times ``eff`` if given). At ``context`` 0 this is the ridge point.
    """
    context = check_real("context", context, minimum=0.0)
    M = param_counts(model)["matmul"]
    P = gpu.bf16_flops * (1.0 if eff is None else eff.matmul)
    W = gpu.hbm_bytes_per_s * (1.0 if eff is None else eff.memory)
    per_sequence = 2 * M / P - context * kv_bytes_per_token(model) / W    # seconds saved by...
    return float("inf") if per_sequence <= 0 else (2 * M / W) / per_sequence


def completion_lengths(N, T, shortest=0.25, skew=1.0):
    """N completion lengths from ``shortest * T`` to ``T`` (the longest, which sets the decode
    steps): ``shortest T + (1 - shortest) T x**skew`` for x evenly spaced in [0, 1]. ``skew`` 1
    spreads them evenly (mean (1 + shortest) T / 2); a larger ``skew`` makes most completions
    short and a few long, the long tail of reasoning runs (mean shortest T + (1 - shortest) T /
    (skew + 1)). A stand-in for a measured length distribution."""
    N, T = check_int("N", N, minimum=1), check_int("T", T, minimum=1)
    shortest = check_real("shortest", shortest, minimum=0.0, maximum=1.0)
    skew = check_real("skew", skew, minimum=0.0, allow_equal=False)
    x = np.linspace(0.0, 1.0, N)                                             # (N,)
    return np.maximum(1, np.round(T * (shortest + (1 - shortest) * x ** skew))).astype(np.int64)


def decode_cost(model, gpu, lengths, prompt_len, eff=EFFICIENCY):
    """Seconds of decoding ``lengths`` (one per sequence) after ``prompt_len`` prompt tokens,
    in one engine's batch: ``{"weights", "kv", "steps", "intensity_first"}``.

    Step t runs the sequences still going (``lengths > t``): the weight GEMMs, costed with
    :func:`kernel_time` on their flops and the weights read once; attention, on its flops and
    the KV cache of each running sequence, ``prompt_len + t`` tokens. The longest completion
    sets the number of steps; as sequences finish the batch thins, and the weight read stays.
    """
    lengths = np.asarray(lengths)
    M = param_counts(model)["matmul"]
    t = np.arange(lengths.max())                                             # (steps,)
    running = lengths.size - np.searchsorted(np.sort(lengths), t, side="right")  # (steps,) > t
    context = prompt_len + t                                                 # (steps,)
    gemm = kernel_time(2 * M * running, 2 * M, gpu, eff)                     # (steps,)
    kv_read = running * context * kv_bytes_per_token(model)                  # bytes
    attn_flops = running * 4 * model.layers * context * model.heads * model.head_dim
    attn = kernel_time(attn_flops, kv_read, gpu, eff)                        # (steps,)
    return {"weights": float(gemm.sum()), "kv": float(attn.sum()), "steps": int(t.size),
            "intensity_first": float(decode_intensity(running[0]))}


def _forward_time(model, gpu, lengths, eff, passes=1.0):
    """``passes`` forwards (3 for forward + backward) over every sequence's tokens, costed as
    GEMMs: flops from :func:`forward_flops_per_token` at the mean context of a causal sequence
    (half its length), the weights read once per pass; compute-bound at training batch sizes."""
    lengths = np.asarray(lengths, dtype=np.float64)                          # (n,)
    flops = float((forward_flops_per_token(model, lengths / 2) * lengths).sum())
    return float(kernel_time(passes * flops, passes * 2 * param_counts(model)["total"], gpu, eff))


STEP_STAGES = ("weight sync", "prefill", "decode: weights", "decode: KV cache",
               "reference forward", "old-logp forward", "policy forward + backward",
               "optimizer")


def grpo_step_cost(model, gpu, *, prompts=64, G=8, prompt_len=256, T=1024, shortest=0.25,
                   skew=1.0, gpus=1, eff=EFFICIENCY, reference=True, old_logp=True, packed=True,
                   checkpointing=False, prefix_sharing=True, sync_bytes_per_s=None):
    """Seconds per stage of one GRPO step (arithmetic, not measurement), on ``gpus`` GPUs.

    ==================  ======================================================================
    Argument            Meaning
    ==================  ======================================================================
    prompts, G          N = prompts * G sequences, split evenly over ``gpus`` engines / ranks
    prompt_len, T       prompt tokens; the longest completion (the decode steps)
    shortest, skew      the shortest completion as a fraction of T, and the length
                        distribution's skew (:func:`completion_lengths`)
    reference           a KL term: the frozen reference's forward (beta > 0)
    old_logp            the trainer recomputes old_logp (verl, OpenRLHF; TRL with vLLM)
    packed              sequences packed without padding; False pads each to P + T
    checkpointing       activation checkpointing: one more forward in the backward pass
    prefix_sharing      the G samples of a prompt share its prefill (vLLM's prefix cache)
    sync_bytes_per_s    weight-sync link (default NVLink: colocated); e.g. 50e9 for a
                        400 Gb/s network to separate inference GPUs
    ==================  ======================================================================

    Each GPU runs one inference engine over N / gpus sequences and one data-parallel trainer
    rank over the same share; the optimizer is ZeRO-sharded (each GPU updates 1/gpus of the
    parameters, about 16 bytes read and written per parameter in Adam's fp32 state).
    """
    prompts, G = check_int("prompts", prompts, minimum=1), check_int("G", G, minimum=1)
    prompt_len = check_int("prompt_len", prompt_len, minimum=1)
    T, gpus = check_int("T", T, minimum=1), check_int("gpus", gpus, minimum=1)
    N = prompts * G
    if N % gpus:
        raise ValueError(f"gpus: expected a divisor of N = prompts * G = {N}, got {gpus}")
    n = N // gpus                                                   # sequences per GPU
    lengths = completion_lengths(n, T, shortest, skew)              # (n,)
    seqs = prompt_len + (lengths if packed else np.full(n, T))      # (n,) trained lengths
    decode = decode_cost(model, gpu, lengths, prompt_len, eff)
    prefills = max(1, n // G) if prefix_sharing else n
    sync = 2 * param_counts(model)["total"] / (sync_bytes_per_s or gpu.nvlink_bytes_per_s)
    return {
        "weight sync": sync,
        "prefill": _forward_time(model, gpu, np.full(prefills, prompt_len), eff),
        "decode: weights": decode["weights"],
        "decode: KV cache": decode["kv"],
        "reference forward": _forward_time(model, gpu, seqs, eff) if reference else 0.0,
        "old-logp forward": _forward_time(model, gpu, seqs, eff) if old_logp else 0.0,
        "policy forward + backward": _forward_time(model, gpu, seqs, eff,
                                                   passes=4.0 if checkpointing else 3.0),
        "optimizer": float(kernel_time(0.0, 32 * param_counts(model)["total"] / gpus, gpu,
                                       eff)),
    }


def step_mfu(model, gpu, cost, *, prompts=64, G=8, prompt_len=256, T=1024, shortest=0.25,
             skew=1.0, gpus=1):
    """Model flops utilisation of a step: the training flops the step needs (6 per parameter
    per trained token, :func:`forward_flops_per_token` x 3) over its time x the peak of its
    GPUs. Generation's flops are not counted: they do not train the model."""
    n = prompts * G // gpus
    lengths = prompt_len + completion_lengths(n, T, shortest, skew)
    flops = 3 * (forward_flops_per_token(model, lengths / 2) * lengths).sum()
    return float(flops / (sum(cost.values()) * gpu.bf16_flops))
