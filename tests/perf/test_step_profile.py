"""Where a GRPO step's time goes: every stage of the tiny policy's step is timed, and the 7B
arithmetic works out by hand (bytes / bandwidth, flops / achieved flop/s)."""

import pytest

torch = pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402
from grpo_lab.perf import roofline, step_profile  # noqa: E402


def test_every_stage_of_a_small_step_is_timed_and_the_optimizer_steps():
    run = gl.train.make_run(gl.train.TrainConfig(prompts_per_step=2, group_size=4, threads=1))
    times, shapes = step_profile.time_grpo_step(run, repeats=1)
    assert list(times) == list(step_profile.STAGES)
    assert all(t > 0 for t in times.values())
    assert shapes["N"] == 8 and shapes["V"] == run.policy.head.out_features
    assert shapes["params"] == sum(p.numel() for p in run.policy.parameters())
    first = next(run.policy.parameters())
    assert int(run.optimizer.state[first]["step"]) == 1              # one real update ran


def test_7b_arithmetic_by_hand():
    model, gpu = step_profile.QWEN_7B, roofline.H100_SXM
    est = step_profile.step_arithmetic(model, gpu, prompts=2, G=4, T=10, prompt_len=6,
                                       bf16_flops=1e15, mfu=0.5)
    N, tokens = 8, 8 * 16
    seconds, held = est["logits (N, T, V) float32"]
    assert held == N * 10 * model.vocab * 4                          # N T V float32
    assert seconds == pytest.approx(2 * held / gpu.hbm_bytes_per_s)  # written and read
    assert est["policy forward + backward"][0] == pytest.approx(6 * model.params * tokens / 5e14)
    assert est["ref forward"][0] == pytest.approx(2 * model.params * tokens / 5e14)
    decode = 10 * (2 * model.params + N * (6 + 5) * model.kv_bytes_per_token)
    assert est["generation"][0] == pytest.approx(decode / gpu.hbm_bytes_per_s)
    assert model.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2         # K and V, bf16


def test_the_h200_speeds_up_the_memory_bound_stages_only():
    h100 = step_profile.step_arithmetic(step_profile.QWEN_7B, roofline.H100_SXM)
    h200 = step_profile.step_arithmetic(step_profile.QWEN_7B, roofline.H200_SXM)
    for stage in ("generation", "logits (N, T, V) float32", "loss (eager floor)"):
        assert h100[stage][0] / h200[stage][0] == pytest.approx(4.8 / 3.35)
    for stage in ("ref forward", "policy forward + backward"):
        assert h100[stage][0] == h200[stage][0]
