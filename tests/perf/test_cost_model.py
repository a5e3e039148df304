"""Chapter 7's cost model: hand-worked cases, the ridge crossovers, monotonicity in batch and
length, and the memory arithmetic (grpo_lab.perf.cost_model, grpo_lab.perf.cost_memory).

Backs chapter 7's cost-model and memory sections, which price a 7B step with these plain
functions: each is worked here by hand on a toy chip and model with round numbers, and the
Qwen2.5 shapes count to their published sizes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lab.perf import cost_memory as mem
from grpo_lab.perf import cost_model as cm
from grpo_lab.perf.roofline import GPU, H100_SXM, H200_SXM

# A toy chip with round numbers: 100 flop/s, 10 byte/s, ridge 10 flop/byte.
TOY = GPU("toy", 10.0, 1.0, 0.0, 0.0, bf16_flops=100.0, hbm_capacity_bytes=1e3,
          nvlink_bytes_per_s=5.0)
FULL = cm.Efficiency(matmul=1.0, memory=1.0)
# A toy model: d 4, 1 layer, 2 heads of 2, 1 KV head, MLP 8, vocabulary 10, untied.
TINY = cm.ModelConfig("tiny", 4, 1, 2, 1, 8, 10, False)


def test_qwen_shapes_count_to_their_published_sizes():
    # Qwen2.5-7B: 7.61 B parameters (the model card), 6.53 B of them outside the embeddings
    p7 = cm.param_counts(cm.QWEN25_7B)
    assert p7["total"] == pytest.approx(7.62e9, rel=2e-3)
    assert p7["layers"] == pytest.approx(6.53e9, rel=2e-3)
    # Qwen2.5-0.5B: 0.49 B, tied embeddings, 0.36 B outside them
    p05 = cm.param_counts(cm.QWEN25_0_5B)
    assert p05["total"] == pytest.approx(0.494e9, rel=2e-3) and p05["head"] == 0
    assert round(p05["layers"] / 1e9, 2) == 0.36
    # KV cache per token: 2 x 28 layers x 4 heads x 128 x 2 bytes = 57344
    assert cm.kv_bytes_per_token(cm.QWEN25_7B) == 2 * 28 * 4 * 128 * 2 == 57344


def test_tiny_model_counted_by_hand():
    # q, o: 2 x 16; k, v: 2 x 4 x 2; biases 4 + 2 + 2; MLP 3 x 4 x 8 = 96; norms 8; final 4
    p = cm.param_counts(TINY)
    assert p["layers"] == 32 + 16 + 8 + 96 + 8 + 4 == 164
    assert p["embedding"] == p["head"] == 40 and p["matmul"] == 204 and p["total"] == 244
    # forward flops at context 3: 2 x 204 + 4 x 1 layer x 3 x 2 heads x 2 = 408 + 48
    assert cm.forward_flops_per_token(TINY, 3) == 456


def test_kernel_time_is_the_larger_of_the_two_bounds():
    assert cm.kernel_time(100.0, 5.0, TOY, FULL) == 1.0         # compute: 100 / 100
    assert cm.kernel_time(100.0, 50.0, TOY, FULL) == 5.0        # memory: 50 / 10
    half = cm.Efficiency(matmul=0.5, memory=0.5)
    assert cm.kernel_time(100.0, 5.0, TOY, half) == 2.0


def test_ridge_points_of_the_datasheets():
    assert cm.ridge_point(H100_SXM) == pytest.approx(989 / 3.35)      # 295 flop/byte
    assert cm.ridge_point(H200_SXM) == pytest.approx(989 / 4.8)       # 206 flop/byte
    assert round(cm.ridge_point(H100_SXM)) == 295 and round(cm.ridge_point(H200_SXM)) == 206
    eff = cm.Efficiency(matmul=0.6, memory=0.8)
    assert cm.ridge_point(H100_SXM, eff) == pytest.approx(0.75 * 989 / 3.35)


def test_decode_intensity_is_the_batch_in_bf16():
    np.testing.assert_allclose(cm.decode_intensity([1, 64, 512]), [1.0, 64.0, 512.0])
    assert cm.decode_intensity(512, itemsize=4) == 256.0


@pytest.mark.parametrize("gpu", [H100_SXM, H200_SXM, TOY])
def test_crossover_without_kv_is_the_ridge_and_decode_turns_there(gpu):
    b = cm.crossover_batch(cm.QWEN25_7B, gpu)
    assert b == pytest.approx(cm.ridge_point(gpu))
    M = cm.param_counts(cm.QWEN25_7B)["matmul"]
    for batch, bound in ((0.9 * b, "memory"), (1.1 * b, "compute")):
        memory, compute = 2 * M / gpu.hbm_bytes_per_s, 2 * M * batch / gpu.bf16_flops
        assert (compute > memory) == (bound == "compute")


def test_the_kv_cache_pushes_the_crossover_up_and_past_infinity():
    # by hand: b = (2M/W) / ((2M + a c)/P - c kv / W), a = 4 L heads head_dim = 4 x 28 x 3584
    # attention flops per cached token; infinite once c kv / W >= (2M + a c) / P
    M, kv = cm.param_counts(cm.QWEN25_7B)["matmul"], cm.kv_bytes_per_token(cm.QWEN25_7B)
    P, W = H100_SXM.bf16_flops, H100_SXM.hbm_bytes_per_s
    a, c = 4 * 28 * 3584, 768
    assert cm.crossover_batch(cm.QWEN25_7B, H100_SXM, c) == pytest.approx(
        (2 * M / W) / ((2 * M + a * c) / P - c * kv / W))
    never = 2 * M / P / (kv / W - a / P)                              # the context where it ends
    assert math.isinf(cm.crossover_batch(cm.QWEN25_7B, H100_SXM, never * 1.001))
    assert cm.crossover_batch(cm.QWEN25_7B, H100_SXM, never * 0.5) > cm.ridge_point(H100_SXM)


def test_decode_cost_by_hand_on_the_toy():
    # TINY on TOY: M = 204 weights. One sequence of 2 tokens after a 1-token prompt.
    out = cm.decode_cost(TINY, TOY, [2], 1, FULL)
    # weights, each step: max(408 bytes / 10, 408 flops / 100) = 40.8 s, two steps
    assert out["weights"] == pytest.approx(2 * 40.8) and out["steps"] == 2
    # KV: 8 bytes per token (2 x 1 x 1 x 2 x 2); contexts 1 and 2: 8 / 10 + 16 / 10 bytes-bound
    assert out["kv"] == pytest.approx(0.8 + 1.6)
    # a finished sequence costs no flops, but the weights are read while any sequence runs
    two = cm.decode_cost(TINY, TOY, [1, 2], 1, FULL)
    assert two["weights"] == pytest.approx(2 * 40.8) and two["steps"] == 2


def test_issue_figures_decode_at_512_sequences_is_compute_bound():
    # 512 sequences x 1024 steps of the 7B's matmuls: about 8 s at peak on either card
    M = cm.param_counts(cm.QWEN25_7B)["matmul"]
    at_peak = 2 * M * 512 * 1024 / H100_SXM.bf16_flops
    assert 7 < at_peak < 8
    out = cm.decode_cost(cm.QWEN25_7B, H100_SXM, np.full(512, 1024), 0, FULL)
    assert out["weights"] == pytest.approx(at_peak)                  # compute-bound each step
    assert out["intensity_first"] == 512.0


def test_completion_lengths():
    lengths = cm.completion_lengths(5, 100, shortest=0.2)
    np.testing.assert_array_equal(lengths, [20, 40, 60, 80, 100])
    skewed = cm.completion_lengths(1001, 1000, shortest=0.0, skew=3)
    assert skewed.max() == 1000 and skewed.mean() == pytest.approx(250, rel=0.01)
    with pytest.raises(ValueError, match="shortest"):
        cm.completion_lengths(4, 10, shortest=1.5)
    with pytest.raises(ValueError, match="skew"):
        cm.completion_lengths(4, 10, skew=0)


def test_step_cost_stages_and_switches():
    cost = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=8, G=8, T=128, gpus=8)
    assert tuple(cost) == cm.STEP_STAGES and all(v >= 0 for v in cost.values())
    off = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=8, G=8, T=128, gpus=8,
                            reference=False, old_logp=False)
    assert off["reference forward"] == off["old-logp forward"] == 0.0
    # the reference and old-logp forwards are one forward each: a third of forward + backward
    assert cost["reference forward"] == pytest.approx(cost["policy forward + backward"] / 3)
    ckpt = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=8, G=8, T=128, gpus=8,
                             checkpointing=True)
    assert ckpt["policy forward + backward"] == pytest.approx(
        4 / 3 * cost["policy forward + backward"])
    padded = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=8, G=8, T=128, gpus=8,
                               packed=False)
    assert padded["policy forward + backward"] > cost["policy forward + backward"]
    # weight sync, colocated under ZeRO-3: an all-gather of the bf16 weights, each GPU receiving
    # 7/8 of 2 bytes x 7.6156e9 at NVLink's 450 GB/s one way, then the engine's copy (read and
    # write, 4 bytes a parameter, at 80% of 3.35 TB/s)
    P = 7.6156e9
    assert cost["weight sync"] == pytest.approx(2 * P * 7 / 8 / 450e9 + 4 * P / (0.8 * 3.35e12),
                                                rel=1e-4)
    slow = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=8, G=8, T=128, gpus=8,
                             sync_bytes_per_s=50e9)
    assert slow["weight sync"] == pytest.approx(2 * P / 50e9, rel=1e-4)    # all of it, once
    one = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=8, G=8, T=128, gpus=1)
    assert one["weight sync"] == pytest.approx(4 * P / (0.8 * 3.35e12), rel=1e-4)  # no gather
    with pytest.raises(ValueError, match="gpus: expected a divisor of N"):
        cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=3, G=3, gpus=2)
    with pytest.raises(ValueError, match="prompts"):
        cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, prompts=0)


def test_only_the_memory_bound_part_scales_with_bandwidth():
    kw = dict(prompts=64, G=8, T=1024, gpus=1)
    h100 = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, **kw)
    h200 = cm.grpo_step_cost(cm.QWEN25_7B, H200_SXM, **kw)
    ratio = H200_SXM.hbm_bytes_per_s / H100_SXM.hbm_bytes_per_s
    assert h200["decode: KV cache"] == pytest.approx(h100["decode: KV cache"] / ratio)
    assert h200["policy forward + backward"] == h100["policy forward + backward"]
    # the weight GEMMs: compute-bound while many run, memory-bound in the tail: less than 1.43x
    assert 1.0 < h100["decode: weights"] / h200["decode: weights"] < ratio


@settings(max_examples=30, deadline=None)
@given(prompts=st.integers(1, 64), extra=st.integers(1, 64), T=st.integers(1, 512))
def test_every_stage_grows_with_the_batch(prompts, extra, T):
    small = cm.grpo_step_cost(cm.QWEN25_0_5B, H100_SXM, prompts=prompts, G=4, T=T)
    large = cm.grpo_step_cost(cm.QWEN25_0_5B, H100_SXM, prompts=prompts + extra, G=4, T=T)
    for stage in cm.STEP_STAGES:
        assert large[stage] >= small[stage] * (1 - 1e-12), stage


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 512), extra=st.integers(1, 512), prompts=st.integers(1, 16))
def test_every_stage_grows_with_the_length(T, extra, prompts):
    short = cm.grpo_step_cost(cm.QWEN25_0_5B, H200_SXM, prompts=prompts, G=4, T=T)
    long = cm.grpo_step_cost(cm.QWEN25_0_5B, H200_SXM, prompts=prompts, G=4, T=T + extra)
    for stage in cm.STEP_STAGES:
        assert long[stage] >= short[stage] * (1 - 1e-12), stage


@settings(max_examples=30, deadline=None)
@given(b=st.integers(1, 4096), context=st.integers(0, 4096))
def test_intensity_and_crossover_agree(b, context):
    # above the crossover a decode step's compute time (decode_cost's GEMM and attention
    # flops) exceeds its memory time (the weights and the KV cache), below it the reverse, at
    # the chapter's efficiencies
    model, gpu, eff = cm.QWEN25_7B, H200_SXM, cm.EFFICIENCY
    M, kv = cm.param_counts(model)["matmul"], cm.kv_bytes_per_token(model)
    a = 4 * model.layers * model.heads * model.head_dim
    compute = b * (2 * M + a * context) / (eff.matmul * gpu.bf16_flops)
    memory = (2 * M + b * context * kv) / (eff.memory * gpu.hbm_bytes_per_s)
    cross = cm.crossover_batch(model, gpu, context, eff)
    if b > cross * (1 + 1e-9):
        assert compute >= memory
    elif b < cross * (1 - 1e-9):
        assert compute <= memory


def test_mfu_of_a_compute_bound_step_is_the_matmul_efficiency():
    # no generation, no sync, no optimizer: what is left is training at e_mm
    kw = dict(prompts=8, G=8, T=256, gpus=1)
    cost = cm.grpo_step_cost(cm.QWEN25_7B, H100_SXM, reference=False, old_logp=False, **kw)
    train_only = {"policy forward + backward": cost["policy forward + backward"]}
    assert cm.step_mfu(cm.QWEN25_7B, H100_SXM, train_only, **kw) == pytest.approx(
        cm.EFFICIENCY.matmul, rel=1e-3)
    assert cm.step_mfu(cm.QWEN25_7B, H100_SXM, cost, **kw) < cm.EFFICIENCY.matmul


def test_training_memory_16_bytes_and_zero_stages():
    P = cm.param_counts(cm.QWEN25_7B)["total"]
    assert sum(mem.training_bytes_per_gpu(cm.QWEN25_7B).values()) == 16 * P
    assert sum(mem.training_bytes_per_gpu(cm.QWEN25_7B, 8, 1).values()) == pytest.approx(
        (4 + 12 / 8) * P)
    assert sum(mem.training_bytes_per_gpu(cm.QWEN25_7B, 8, 2).values()) == pytest.approx(
        (2 + 14 / 8) * P)
    assert sum(mem.training_bytes_per_gpu(cm.QWEN25_7B, 8, 3).values()) == pytest.approx(2 * P)
    with pytest.raises(ValueError, match="zero_stage"):
        mem.training_bytes_per_gpu(cm.QWEN25_7B, 8, 4)


def test_kv_cache_activations_capacity_and_padding():
    assert mem.kv_cache_bytes(cm.QWEN25_7B, 512, 1280) == 512 * 1280 * 57344
    d, L, d_kv, I = 3584, 28, 4 * 128, 18944
    per = 12 * d + 4 * d_kv + 8 * I                        # 196,608 bytes: 54.9 d, not 34 d
    assert mem.activation_bytes_per_token_layer(cm.QWEN25_7B) == per == 196608
    assert round(per / d, 1) == 54.9
    assert mem.activation_bytes(cm.QWEN25_7B, 10) == per * 10 * L
    assert mem.activation_bytes(cm.QWEN25_7B, 10, checkpointing=True) == 2 * d * 10 * L + per * 10
    P = cm.param_counts(cm.QWEN25_7B)["total"]
    want = int((0.9 * 80e9 - 2 * P) // 57344)
    assert mem.kv_capacity_tokens(cm.QWEN25_7B, H100_SXM) == want
    assert mem.kv_capacity_tokens(cm.QWEN25_7B, H100_SXM, other_bytes=1e12) == 0
    assert mem.padding_waste([1, 2, 3, 4]) == pytest.approx(1 - 10 / 16)
    assert mem.padding_waste([4, 4]) == 0.0
    with pytest.raises(ValueError, match="lengths"):
        mem.padding_waste([])
    with pytest.raises(ValueError, match="pad_to"):
        mem.padding_waste([5], pad_to=3)


def test_a_trainer_rank_holds_more_than_its_state_counted_by_hand():
    # Qwen2.5-7B, ZeRO-3 over 8 GPUs, a micro-batch of 16 x 1280 tokens, checkpointing
    model, micro = cm.QWEN25_7B, 16 * 1280
    P, V, d = cm.param_counts(model)["total"], 152064, 3584
    parts = mem.trainer_bytes_per_gpu(model, 8, micro)
    assert parts["training state"] == pytest.approx(16 * P / 8)          # an eighth: 15.2 GB
    assert parts["reference weights"] == pytest.approx(2 * P / 8)        # bf16, sharded
    assert parts["ZeRO-3 gather"] == 2 * 2 * V * d                       # two LM-head-sized units
    assert parts["logits"] == micro * V * 2 == pytest.approx(6.23e9, rel=1e-3)
    assert parts["logits fp32"] == 2 * parts["logits"] == pytest.approx(12.46e9, rel=1e-3)
    assert parts["activations"] == mem.activation_bytes(model, micro, checkpointing=True)
    # the chapter's conclusion: beside an engine given half the card, the full logits do not
    # fit on an H100 (46.1 GB > 40 GB) and do on an H200; a chunked LM head fits on both
    full = sum(parts.values())
    chunked = sum(mem.trainer_bytes_per_gpu(model, 8, micro, chunked_logits=True).values())
    assert 0.5 * H100_SXM.hbm_capacity_bytes < full < 0.5 * H200_SXM.hbm_capacity_bytes
    assert chunked < 0.5 * H100_SXM.hbm_capacity_bytes
    assert chunked == pytest.approx(full - parts["logits"] - parts["logits fp32"])
    # no reference, no ZeRO-3: those parts are 0 and the weights are whole
    z0 = mem.trainer_bytes_per_gpu(model, 8, micro, zero_stage=0, reference=False)
    assert z0["reference weights"] == z0["ZeRO-3 gather"] == 0.0
    assert z0["training state"] == 16 * P


def test_the_one_gpu_case_cannot_train_on_one_gpu():
    # the chapter prices 512 sequences on one GPU for its decode regime only: 16 bytes a
    # parameter (122 GB) is more than an H100 holds; with the reference and a micro-batch's
    # activations, even with a chunked LM head and no engine beside it, more than an H200
    state = sum(mem.training_bytes_per_gpu(cm.QWEN25_7B, 1, 0).values())
    assert H100_SXM.hbm_capacity_bytes < state < H200_SXM.hbm_capacity_bytes
    rank = mem.trainer_bytes_per_gpu(cm.QWEN25_7B, 1, 16 * 1280, zero_stage=0, chunked_logits=True)
    assert sum(rank.values()) > H200_SXM.hbm_capacity_bytes


def test_the_decode_figure_is_the_tables_lengths_not_t_steps_for_everyone():
    # 512 lengths from 256 to 1024 (mean 640): 2 M x 327,680 tokens at the peak is 4.7 s,
    # where every sequence running 1024 steps would be 7.5 s
    M = cm.param_counts(cm.QWEN25_7B)["matmul"]
    lengths = cm.completion_lengths(512, 1024)
    assert lengths.sum() == 327680
    assert round(2 * M * lengths.sum() / H100_SXM.bf16_flops, 1) == 4.7
    assert round(2 * M * 512 * 1024 / H100_SXM.bf16_flops, 1) == 7.5
