r"""A cost model of one GRPO step on a GPU: arithmetic on datasheet figures, not measurement.

Taught in chapter 7 (``chapters/07_performance.ipynb``, "The cost of a real GRPO step"); its
figure is ``gl.book.ch07.decode_figure``, its memory half :mod:`grpo_lab.perf.cost_memory`.

Every kernel is costed by the roofline (Williams et al., 2009), per kernel class:

.. math::

    t = \max\Big(\frac{\text{bytes}}{e_{mem} W},\ \frac{\text{flops}}{e_{mm} P}\Big)

with ``W`` the HBM bandwidth, ``P`` the dense bf16 peak, and the fractions of each that a kernel
class reaches, ``e_mem`` and ``e_mm``, stated as assumptions once (:data:`EFFICIENCY`: 60% and
80%). The same fractions price generation, training and the crossover batch, so the three are
comparable; ``eff=None`` (the datasheet peaks) exists only to show what the assumption moves.

A decode step of ``b`` sequences multiplies a (b, d) activation by every weight matrix: 2 flops
per weight per sequence against 2 bytes per bf16 weight read once, an arithmetic intensity of
``b`` flop/byte. Below the ridge ``e_mm P / (e_mem W)`` (221 flop/byte on an H100 SXM, 155 on an H200;
295 and 206 at the datasheet peaks) the step waits on memory; above it, on the tensor cores. Attention over the KV cache reads each
sequence's own cache: 2 flops per cached number per query head sharing it, an intensity of
(query heads / KV heads) flop/byte (7 for Qwen2.5-7B), memory-bound at any batch.

Symbols: ``N = prompts * G`` sequences, ``P`` prompt tokens, ``T`` the longest completion (the
number of decode steps), ``lengths`` the completions' lengths.

Every public function checks its arguments once, at the door
(:func:`grpo_lab.perf.cost_checks.check_cost_arguments`), then runs the arithmetic below on
checked values: sizes are integers, flags bools, rates positive, and what comes out is finite
and non-negative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.numerics.validate import check_int, check_real, describe
from grpo_lab.perf.cost_checks import MAX_SEQUENCES, check_cost_arguments, finite_result

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

    def __post_init__(self):     # checked once, here: every function then trusts the shape
        if not isinstance(self.name, str):
            raise TypeError(f"name: expected a str, got {describe(self.name)}")
        for field in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
            check_int(field, getattr(self, field), minimum=1, maximum=2 ** 24,
                      why=" (a transformer's size)")
        if self.hidden % self.heads:
            raise ValueError(f"heads: expected a divisor of hidden = {self.hidden}, got {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads: expected a divisor of heads = {self.heads}, "
                             f"got {self.kv_heads}")
        if not isinstance(self.tied_embeddings, (bool, np.bool_)):
            raise TypeError(f"tied_embeddings: expected True or False, got "
                            f"{describe(self.tied_embeddings)}")

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
    KV-cache read of paged attention, the optimizer), of the HBM bandwidth (0.8). Each in
    (0, 1].
    """
    matmul: float = 0.6
    memory: float = 0.8

    def __post_init__(self):
        for field in ("matmul", "memory"):
            check_real(field, getattr(self, field), minimum=0.0, allow_equal=False, maximum=1.0)


#: The chapter's one set of assumptions: every stage, and the crossover, is priced with it.
EFFICIENCY = Efficiency()


def _rates(gpu, eff):
    """``(P', W')``: the bf16 peak and the HBM bandwidth as reached (datasheet for None)."""
    if eff is None:
        return gpu.bf16_flops, gpu.hbm_bytes_per_s
    return eff.matmul * gpu.bf16_flops, eff.memory * gpu.hbm_bytes_per_s


def _kernel_time(flops, nbytes, gpu, eff):
    P, W = _rates(gpu, eff)
    return np.maximum(nbytes / W, flops / P)


def kernel_time(flops, nbytes, gpu, eff=EFFICIENCY):
    """The roofline time of one kernel class: ``max(bytes / (e_mem W), flops / (e_mm P))``.

    ``flops`` and ``nbytes``: finite reals or arrays >= 0 (broadcast against each other as
    NumPy does: a scalar with an array). Seconds, float or array.
    """
    flops, nbytes, gpu, eff = check_cost_arguments(flops=flops, nbytes=nbytes, gpu=gpu, eff=eff)
    if np.ndim(flops) and np.ndim(nbytes) and np.shape(flops) != np.shape(nbytes):
        raise ValueError(f"nbytes: expected the shape of flops {np.shape(flops)} or a scalar, "
                         f"got shape {np.shape(nbytes)}")
    return finite_result(_kernel_time(flops, nbytes, gpu, eff), "flops, nbytes")


def ridge_point(gpu, eff=None):
    """``P / W`` in flop/byte: bf16 dense peak over HBM bandwidth (with ``eff``: as reached,
    ``e_mm P / (e_mem W)``, the ridge the chapter uses)."""
    gpu, eff = check_cost_arguments(gpu=gpu, eff_or_none=eff)
    P, W = _rates(gpu, eff)
    return P / W


def _param_counts(model):
    d, kv = model.hidden, model.kv_heads * model.head_dim
    attn = 2 * d * d + 2 * d * kv + (d + 2 * kv)                  # q, o; k, v; biases
    mlp = 3 * d * model.intermediate
    layers = model.layers * (attn + mlp + 2 * d) + d               # + the final norm
    embedding = model.vocab * d
    head = 0 if model.tied_embeddings else embedding
    return {"layers": layers, "embedding": embedding, "head": head,
            "matmul": layers + embedding, "total": layers + embedding + head}


def param_counts(model):
    """``{"layers", "embedding", "head", "matmul", "total"}``: the parameters, counted.

    Per layer: q and o (d x d each), k and v (d x kv_heads*head_dim each, with Qwen's q/k/v
    biases), the SwiGLU MLP (3 x d x intermediate) and two RMSNorm weights. ``matmul`` is what
    a token's forward multiplies: every layer's matrices and the LM head (the embedding is a
    lookup).
    """
    return _param_counts(check_cost_arguments(model=model))


def _kv_bytes_per_token(model, itemsize=2):
    return 2 * model.layers * model.kv_heads * model.head_dim * itemsize


def kv_bytes_per_token(model, itemsize=2):
    """The KV cache one token keeps, all layers: 2 (K and V) x L x kv_heads x head_dim x itemsize."""
    model, itemsize = check_cost_arguments(model=model, itemsize=itemsize)
    return _kv_bytes_per_token(model, itemsize)


def _attention_flops_per_context(model):
    """Attention's flops per token per token of context: scores and weighted sum, 4 L h hd."""
    return 4 * model.layers * model.heads * model.head_dim


def _forward_flops_per_token(model, context):
    return 2 * _param_counts(model)["matmul"] + _attention_flops_per_context(model) * context


def forward_flops_per_token(model, context):
    """Flops of one token's forward at ``context`` tokens before it (a real or an array >= 0):
    2 per matmul weight, and attention's scores and weighted sum, 4 x L x context x heads x
    head_dim."""
    model, context = check_cost_arguments(model=model, context=context)
    return finite_result(_forward_flops_per_token(model, context), "context")


def decode_intensity(batch, itemsize=2):
    """Flop/byte of a decode step's weight GEMMs at ``batch`` sequences (an integer or integer
    array >= 1): 2 b flops per weight over ``itemsize`` bytes per weight (b for bf16). The
    KV-cache read is not in it."""
    batch, itemsize = check_cost_arguments(batch=batch, itemsize=itemsize)
    return 2 * batch.astype(np.float64) / itemsize


def crossover_batch(model, gpu, context=0, eff=None):
    """The batch above which a decode step spends more time on compute than on memory, priced
    on the terms :func:`decode_cost` prices; ``inf`` if it never does.

    A step of ``b`` sequences at ``context`` cached tokens each: compute is ``b (2M + a c)``
    flops (the weight GEMMs, 2 per weight; attention, ``a = 4 L heads head_dim`` per cached
    token), memory is ``2M + b c k`` bytes (the bf16 weights read once; each sequence's KV
    cache, ``k`` bytes a token). Setting the two times equal at the rates ``P'``, ``W'`` (the
    peaks times ``eff``; the datasheet's for None):

    ``b = (2M / W') / ((2M + a c) / P' - c k / W')``.

    At ``context`` 0 this is the ridge. :func:`decode_cost` runs the weight GEMMs and attention
    one after the other, each on its own roofline: there the GEMMs turn compute-bound at the
    ridge and the KV read never does; this batch is where the two kernels' compute, summed,
    overtakes their memory traffic, summed. The chapter passes :data:`EFFICIENCY`.
    """
    model, gpu, context, eff = check_cost_arguments(model=model, gpu=gpu, context=context,
                                                    eff_or_none=eff)
    if np.ndim(context):
        raise TypeError(f"context: expected one number of tokens, got {describe(context)}")
    M, k = _param_counts(model)["matmul"], _kv_bytes_per_token(model)
    P, W = _rates(gpu, eff)
    per_sequence = (2 * M + _attention_flops_per_context(model) * context) / P - context * k / W
    return float("inf") if per_sequence <= 0 else float((2 * M / W) / per_sequence)


def _completion_lengths(N, T, shortest, skew):
    x = np.linspace(0.0, 1.0, N)                                             # (N,)
    return np.maximum(1, np.round(T * (shortest + (1 - shortest) * x ** skew))).astype(np.int64)


def completion_lengths(N, T, shortest=0.25, skew=1.0):
    """N completion lengths from ``shortest * T`` to ``T`` (the longest, which sets the decode
    steps): ``shortest T + (1 - shortest) T x**skew`` for x evenly spaced in [0, 1]. ``skew`` 1
    spreads them evenly (mean (1 + shortest) T / 2); a larger ``skew`` makes most completions
    short and a few long, the long tail of reasoning runs (mean shortest T + (1 - shortest) T /
    (skew + 1)). A stand-in for a measured length distribution."""
    N, T, shortest, skew = check_cost_arguments(N=N, T=T, shortest=shortest, skew=skew)
    return _completion_lengths(N, T, shortest, skew)


def _decode_cost(model, gpu, lengths, prompt_len, eff):
    M = _param_counts(model)["matmul"]
    t = np.arange(lengths.max())                                             # (steps,)
    running = lengths.size - np.searchsorted(np.sort(lengths), t, side="right")  # (steps,) > t
    context = prompt_len + t                                                 # (steps,)
    gemm = _kernel_time(2.0 * M * running, 2.0 * M, gpu, eff)                # (steps,)
    kv_read = running * context * float(_kv_bytes_per_token(model))          # (steps,) bytes
    attn_flops = running * context * float(_attention_flops_per_context(model))
    attn = _kernel_time(attn_flops, kv_read, gpu, eff)                       # (steps,)
    return {"weights": float(gemm.sum()), "kv": float(attn.sum()), "steps": int(t.size),
            "intensity_first": float(running[0])}            # b flop/byte, bf16


def decode_cost(model, gpu, lengths, prompt_len, eff=EFFICIENCY):
    """Seconds of decoding ``lengths`` (one per sequence) after ``prompt_len`` prompt tokens,
    in one engine's batch: ``{"weights", "kv", "steps", "intensity_first"}``.

    Step t runs the sequences still going (``lengths > t``): the weight GEMMs, costed with
    :func:`kernel_time` on their flops and the weights read once; attention, on its flops and
    the KV cache of each running sequence, ``prompt_len + t`` tokens. The longest completion
    sets the number of steps; as sequences finish the batch thins, and the weight read stays.
    ``lengths``: a 1-D integer array, each >= 1.
    """
    model, gpu, lengths, prompt_len, eff = check_cost_arguments(
        model=model, gpu=gpu, lengths=lengths, prompt_len=prompt_len, eff=eff)
    return finite_result(_decode_cost(model, gpu, lengths, prompt_len, eff), "gpu, lengths")


def _forward_time(model, gpu, lengths, eff, passes=1.0):
    """``passes`` forwards (3 for forward + backward) over every sequence's tokens, costed as
    GEMMs: flops from :func:`forward_flops_per_token` at the mean context of a causal sequence
    (half its length), the weights read once per pass; compute-bound at training batch sizes."""
    lengths = np.asarray(lengths, dtype=np.float64)                          # (n,)
    flops = float((_forward_flops_per_token(model, lengths / 2) * lengths).sum())
    return float(_kernel_time(passes * flops, passes * 2 * _param_counts(model)["total"], gpu, eff))


def _weight_sync(model, gpu, gpus, eff, sync_bytes_per_s):
    """Seconds to put the trainer's new bf16 weights (2 bytes a parameter) in the engines.

    Colocated (``sync_bytes_per_s`` None): under ZeRO-3 / FSDP each GPU holds 1/gpus of the
    weights, so the sync is an all-gather: each GPU receives the other (gpus - 1)/gpus over
    NVLink, at its one-direction rate (a ring all-gather's time), then the engine copies the
    full weights into its own buffers (read and write, HBM). Disaggregated: the full weights
    cross the given link once.
    """
    weights = 2.0 * _param_counts(model)["total"]                           # bytes, bf16
    if sync_bytes_per_s is not None:
        return weights / sync_bytes_per_s
    gather = weights * (gpus - 1) / gpus / gpu.nvlink_bytes_per_s
    return gather + float(_kernel_time(0.0, 2 * weights, gpu, eff))


STEP_STAGES = ("weight sync", "prefill", "decode: weights", "decode: KV cache",
               "reference forward", "old-logp forward", "policy forward + backward",
               "optimizer")


def _check_step(model, gpu, prompts, G, prompt_len, T, shortest, skew, gpus):
    """The arguments a step and its MFU share, checked once; ``n``, sequences per GPU."""
    model, gpu, prompts, G, prompt_len, T, shortest, skew, gpus = check_cost_arguments(
        model=model, gpu=gpu, prompts=prompts, G=G, prompt_len=prompt_len, T=T,
        shortest=shortest, skew=skew, gpus=gpus)
    N = prompts * G
    if N > MAX_SEQUENCES:
        raise ValueError(f"prompts: expected prompts * G at most {MAX_SEQUENCES:,} sequences, "
                         f"got {prompts} x {G} = {N:,}")
    if N % gpus:
        raise ValueError(f"gpus: expected a divisor of N = prompts * G = {N}, got {gpus}")
    return model, gpu, prompts, G, prompt_len, T, shortest, skew, gpus, N // gpus


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
    old_logp            a forward of the policy for ``old_logp`` before the update. Whether a
                        trainer runs it depends on its settings: verl 0.9.1 does unless its
                        rollout correction's ``bypass_mode`` reuses the sampler's log-probs;
                        TRL 1.16.0 only when the batch is reused for more than one update or
                        vLLM's importance-sampling correction is on (chapter 7 cites both)
    packed              sequences packed without padding; False pads each to P + T
    checkpointing       activation checkpointing: one more forward in the backward pass
    prefix_sharing      the G samples of a prompt share its prefill (vLLM's prefix cache)
    sync_bytes_per_s    weight-sync link for disaggregated engines (e.g. 50e9 for 400 Gb/s);
                        None: colocated, an all-gather over NVLink (:func:`_weight_sync`)
    ==================  ======================================================================

    Each GPU runs one inference engine over N / gpus sequences and one data-parallel trainer
    rank over the same share; the optimizer is ZeRO-sharded (each GPU updates 1/gpus of the
    parameters, about 16 bytes read and written per parameter in Adam's fp32 state). Whether
    the step fits in memory is :mod:`grpo_lab.perf.cost_memory`'s question, not this one's.
    """
    model, gpu, prompts, G, prompt_len, T, shortest, skew, gpus, n = _check_step(
        model, gpu, prompts, G, prompt_len, T, shortest, skew, gpus)
    eff, reference, old_logp, packed, checkpointing, prefix_sharing, sync_bytes_per_s = \
        check_cost_arguments(eff=eff, reference=reference, old_logp=old_logp, packed=packed,
                             checkpointing=checkpointing, prefix_sharing=prefix_sharing,
                             sync_bytes_per_s=sync_bytes_per_s)
    lengths = _completion_lengths(n, T, shortest, skew)                     # (n,)
    seqs = prompt_len + (lengths if packed else np.full(n, T))              # (n,) trained lengths
    decode = _decode_cost(model, gpu, lengths, prompt_len, eff)
    prefills = max(1, n // G) if prefix_sharing else n
    forward = _forward_time(model, gpu, seqs, eff)
    cost = {
        "weight sync": _weight_sync(model, gpu, gpus, eff, sync_bytes_per_s),
        "prefill": _forward_time(model, gpu, np.full(prefills, prompt_len), eff),
        "decode: weights": decode["weights"],
        "decode: KV cache": decode["kv"],
        "reference forward": forward if reference else 0.0,
        "old-logp forward": forward if old_logp else 0.0,
        "policy forward + backward": _forward_time(model, gpu, seqs, eff,
                                                   passes=4.0 if checkpointing else 3.0),
        "optimizer": float(_kernel_time(0.0, 32.0 * _param_counts(model)["total"] / gpus, gpu,
                                        eff)),
    }
    return finite_result(cost, "gpu, sync_bytes_per_s")


def step_mfu(model, gpu, cost, *, prompts=64, G=8, prompt_len=256, T=1024, shortest=0.25,
             skew=1.0, gpus=1):
    """Model flops utilisation of a step: the training flops the step needs (6 per parameter
    per trained token, :func:`forward_flops_per_token` x 3) over its time x the peak of its
    GPUs. Generation's flops are not counted: they do not train the model. The batch
    arguments are checked as :func:`grpo_step_cost` checks them (a GPU count that does not
    divide N is refused, not floored)."""
    model, gpu, prompts, G, prompt_len, T, shortest, skew, gpus, n = _check_step(
        model, gpu, prompts, G, prompt_len, T, shortest, skew, gpus)
    cost = check_cost_arguments(cost=cost)
    lengths = prompt_len + _completion_lengths(n, T, shortest, skew)
    flops = 3 * (_forward_flops_per_token(model, lengths / 2) * lengths).sum()
    return finite_result(float(flops / (sum(cost.values()) * gpu.bf16_flops)), "cost")
