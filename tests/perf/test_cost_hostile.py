"""Hostile input across chapter 7's cost model (issue 37): every public function of
grpo_lab.perf.cost_model, grpo_lab.perf.cost_memory and the arithmetic of grpo_lab.perf.roofline,
each argument in turn given a hostile value while the others stay valid, must raise a
ValueError or TypeError whose message starts with that argument's name. Valid calls, including
sizes at the documented bounds, give finite, non-negative results. The pattern is
tests/test_hostile_inputs.py's.
"""

import inspect
import math

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.perf import cost_checks
from grpo_lab.perf import cost_memory as mem
from grpo_lab.perf import cost_model as cm
from grpo_lab.perf import roofline as rl

M7, H100 = cm.QWEN25_7B, rl.H100_SXM
STEP = dict(prompts=4, G=2, T=16, prompt_len=8, gpus=2)

# name: (function, valid keyword arguments, {argument: kind})
API = {
    "kernel_time": (cm.kernel_time, dict(flops=1e12, nbytes=1e9, gpu=H100, eff=cm.EFFICIENCY),
                    {"flops": "real", "nbytes": "real", "gpu": "gpu", "eff": "eff"}),
    "ridge_point": (cm.ridge_point, dict(gpu=H100, eff=None), {"gpu": "gpu", "eff": "eff_none"}),
    "param_counts": (cm.param_counts, dict(model=M7), {"model": "model"}),
    "kv_bytes_per_token": (cm.kv_bytes_per_token, dict(model=M7, itemsize=2),
                           {"model": "model", "itemsize": "itemsize"}),
    "forward_flops_per_token": (cm.forward_flops_per_token, dict(model=M7, context=100),
                                {"model": "model", "context": "real"}),
    "decode_intensity": (cm.decode_intensity, dict(batch=64, itemsize=2),
                         {"batch": "counts", "itemsize": "itemsize"}),
    "crossover_batch": (cm.crossover_batch, dict(model=M7, gpu=H100, context=512, eff=None),
                        {"model": "model", "gpu": "gpu", "context": "real", "eff": "eff_none"}),
    "completion_lengths": (cm.completion_lengths, dict(N=8, T=64, shortest=0.25, skew=1.0),
                           {"N": "count", "T": "count", "shortest": "fraction",
                            "skew": "positive"}),
    "decode_cost": (cm.decode_cost, dict(model=M7, gpu=H100, lengths=[3, 5], prompt_len=4,
                                         eff=cm.EFFICIENCY),
                    {"model": "model", "gpu": "gpu", "lengths": "lengths",
                     "prompt_len": "size", "eff": "eff"}),
    "grpo_step_cost": (cm.grpo_step_cost, dict(model=M7, gpu=H100, **STEP, shortest=0.25,
                                               skew=1.0, eff=cm.EFFICIENCY, reference=True,
                                               old_logp=True, packed=True, checkpointing=False,
                                               prefix_sharing=True, sync_bytes_per_s=None),
                       {"model": "model", "gpu": "gpu", "prompts": "count", "G": "count",
                        "T": "count", "prompt_len": "size", "gpus": "count",
                        "shortest": "fraction", "skew": "positive", "eff": "eff",
                        "reference": "flag", "old_logp": "flag", "packed": "flag",
                        "checkpointing": "flag", "prefix_sharing": "flag",
                        "sync_bytes_per_s": "rate_none"}),
    "step_mfu": (cm.step_mfu, dict(model=M7, gpu=H100, cost={"decode": 1.0}, **STEP,
                                   shortest=0.25, skew=1.0),
                 {"model": "model", "gpu": "gpu", "cost": "cost", "prompts": "count",
                  "G": "count", "T": "count", "prompt_len": "size", "gpus": "count",
                  "shortest": "fraction", "skew": "positive"}),
    "kv_cache_bytes": (mem.kv_cache_bytes, dict(model=M7, sequences=4, tokens=100),
                       {"model": "model", "sequences": "size", "tokens": "size"}),
    "training_bytes_per_gpu": (mem.training_bytes_per_gpu, dict(model=M7, gpus=8, zero_stage=3),
                               {"model": "model", "gpus": "count", "zero_stage": "stage"}),
    "activation_bytes_per_token_layer": (mem.activation_bytes_per_token_layer, dict(model=M7),
                                         {"model": "model"}),
    "activation_bytes": (mem.activation_bytes, dict(model=M7, tokens=100, checkpointing=False),
                         {"model": "model", "tokens": "size", "checkpointing": "flag"}),
    "trainer_bytes_per_gpu": (mem.trainer_bytes_per_gpu,
                              dict(model=M7, gpus=8, micro_tokens=1280, zero_stage=3,
                                   checkpointing=True, reference=True, fp32_logits=True,
                                   chunked_logits=False),
                              {"model": "model", "gpus": "count", "micro_tokens": "count",
                               "zero_stage": "stage", "checkpointing": "flag",
                               "reference": "flag", "fp32_logits": "flag",
                               "chunked_logits": "flag"}),
    "kv_capacity_tokens": (mem.kv_capacity_tokens, dict(model=M7, gpu=H100, memory_fraction=0.5,
                                                        other_bytes=0.0),
                           {"model": "model", "gpu": "gpu", "memory_fraction": "fraction",
                            "other_bytes": "real_scalar"}),
    "padding_waste": (mem.padding_waste, dict(lengths=[3, 5], pad_to=8),
                      {"lengths": "lengths0", "pad_to": "size_none"}),
    "attainable": (rl.attainable, dict(intensity=[1.0, 500.0], peak_flops=1e15, bandwidth=3e12),
                   {"intensity": "real", "peak_flops": "positive", "bandwidth": "positive"}),
    "advantages_min_bytes": (rl.advantages_min_bytes, dict(B=4, G=8, itemsize=4),
                             {"B": "count", "G": "count", "itemsize": "itemsize"}),
    "loss_min_bytes": (rl.loss_min_bytes, dict(N=4, T=8, itemsize=4, per_sequence_adv=True),
                       {"N": "count", "T": "count", "itemsize": "itemsize",
                        "per_sequence_adv": "flag"}),
    "trace_torch_traffic": (rl.trace_torch_traffic, dict(fn=lambda: None, full_size=0),
                            {"fn": "callable", "full_size": "size"}),
    "measure_matmul_flops": (rl.measure_matmul_flops, dict(n=16, repeats=1, dtype=np.float32),
                             {"n": "count16", "repeats": "count", "dtype": "dtype"}),
}

_COMMON = [None, "2", b"2", [1, 2], {"a": 1}, 1 + 2j]
HOSTILE = {
    "count": _COMMON + [0, -1, 1.5, 2.0, True, math.nan, math.inf, 2 ** 70, np.float64(3.0)],
    "counts": [None, "2", b"2", {"a": 1}, 1 + 2j, 0, -1, 1.5, True, math.nan, math.inf, 2 ** 70,
               [1, 0], [1.0, 2.0], [], np.array([True])],
    "count16": _COMMON + [0, 15, 1.5, True, math.nan, 2 ** 70],
    "size": _COMMON + [-1, 1.5, 2.0, True, math.nan, math.inf, 2 ** 70],
    "size_none": ["2", -1, 1.5, True, math.nan, 2 ** 70],
    "stage": _COMMON + [-1, 4, 1.5, True, math.nan],
    "itemsize": _COMMON + [0, -2, 3, 2.0, "2", True, math.nan],
    "real": [None, "1", b"1", {"a": 1}, 1 + 2j, -1.0, -1e-300, math.nan, math.inf, -math.inf,
             True, 10 ** 400, [1.0, -1.0], [1.0, math.nan], np.array([True])],
    "real_scalar": [None, "1", -1.0, math.nan, math.inf, True, [1.0], 10 ** 400],
    "positive": [None, "1", 0.0, -1.0, math.nan, math.inf, True, [1.0]],
    "fraction": [None, "0.5", -0.1, 1.1, math.nan, math.inf, True, [0.5]],
    "rate_none": ["50e9", 0, 0.0, -1.0, math.nan, math.inf, True, [1.0]],
    "flag": ["no", "yes", 0, 1, None, 1.0, np.array([True]), [True]],
    "model": [None, "Qwen2.5-7B", 7, H100, {"hidden": 1}],
    "gpu": [None, "H100", 3.35e12, M7],
    "eff": [None, 0.6, "0.6", (0.6, 0.8), H100],
    "eff_none": [0.6, "0.6", (0.6, 0.8), H100],
    "lengths": [None, "35", [], [1.5, 2.0], [0, 3], [-1, 3], [[1, 2]], [True, False],
                np.array([1.0, 2.0]), [2 ** 70], 5, [cost_checks.MAX_TOKENS + 1]],
    "lengths0": [None, "35", [], [1.5, 2.0], [-1, 3], [[1, 2]], [True, False],
                 np.array([1.0, 2.0]), [2 ** 70], 5],
    "cost": [None, "1 s", [], {}, {"decode": -1.0}, {"decode": math.nan}, {"decode": math.inf},
             {"decode": "1"}, {1: 1.0}, {"decode": 0.0}, {"decode": True}],
    "callable": [None, "f", 3],
    "dtype": [None, "int64", np.int32, np.float16, 4],
}

CASES = [(name, arg, i) for name, (_, _, kinds) in API.items() for arg, kind in kinds.items()
         for i in range(len(HOSTILE[kind]))]


@pytest.mark.parametrize("name, arg, i", CASES)
def test_every_hostile_argument_is_refused_by_name(name, arg, i):
    fn, valid, kinds = API[name]
    value = HOSTILE[kinds[arg]][i]
    with pytest.raises((TypeError, ValueError)) as info:
        fn(**{**valid, arg: value})
    message = str(info.value)          # a dict's entry is named inside it: cost['decode']: ...
    assert message.startswith((f"{arg}: expected", f"{arg}[")), (name, arg, value, message)


def test_the_sweep_covers_every_public_cost_function_and_argument():
    public = {n for mod in (cm, mem) for n in mod.__all__
              if inspect.isfunction(getattr(mod, n))}
    public |= {n for n in rl.__all__ if inspect.isfunction(getattr(rl, n))}
    assert public == set(API)
    for name, (fn, valid, kinds) in API.items():
        params = set(inspect.signature(fn).parameters)
        assert params == set(valid) == set(kinds), name


@pytest.mark.parametrize("name", sorted(set(API) - {"trace_torch_traffic", "measure_matmul_flops"}))
def test_valid_calls_give_finite_non_negative_results(name):
    fn, valid, _ = API[name]
    out = fn(**valid)
    values = out.values() if isinstance(out, dict) else [out]
    for v in values:
        arr = np.asarray(v, dtype=np.float64)
        assert np.isfinite(arr).all() or name == "crossover_batch" and arr == np.inf
        assert (arr >= 0).all()


def test_the_issue_cases_one_by_one():
    # an itemsize string used to return a 28,672-character string
    with pytest.raises(TypeError, match=r"^itemsize: expected an integer"):
        cm.kv_bytes_per_token(M7, "2")
    # sync_bytes_per_s=0 used to fall back to NVLink silently
    with pytest.raises(ValueError, match=r"^sync_bytes_per_s: expected a number > 0"):
        cm.grpo_step_cost(M7, H100, sync_bytes_per_s=0)
    # reference="no" used to be taken as True
    with pytest.raises(TypeError, match=r"^reference: expected True or False, got .*str"):
        cm.grpo_step_cost(M7, H100, reference="no")
    # mfu used to floor a GPU count that grpo_step_cost refuses
    cost = cm.grpo_step_cost(M7, H100, prompts=4, G=2, T=16, gpus=2)
    with pytest.raises(ValueError, match=r"^gpus: expected a divisor of N = prompts \* G = 8"):
        cm.step_mfu(M7, H100, cost, prompts=4, G=2, T=16, gpus=3)
    with pytest.raises(ValueError, match=r"^gpus: expected a divisor"):
        cm.grpo_step_cost(M7, H100, prompts=4, G=2, T=16, gpus=3)
    # negative flops, hidden sizes, contexts; NaN contexts; fractional sizes
    with pytest.raises(ValueError, match=r"^flops: expected flops >= 0"):
        cm.kernel_time(-1.0, 1.0, H100)
    with pytest.raises(ValueError, match=r"^context: expected finite values"):
        cm.crossover_batch(M7, H100, math.nan)
    with pytest.raises(TypeError, match=r"^batch: expected integer counts"):
        cm.decode_intensity(0.5)
    with pytest.raises(TypeError, match=r"^tokens: expected an integer"):
        mem.activation_bytes(M7, 10.5)
    # a batch past the bound is named, not a MemoryError minutes later
    with pytest.raises(ValueError, match=r"^prompts: expected prompts \* G at most"):
        cm.grpo_step_cost(M7, H100, prompts=2 ** 23, G=4)


@pytest.mark.parametrize("make, field", [
    (lambda: cm.ModelConfig("m", -4, 1, 2, 1, 8, 10, False), "hidden"),
    (lambda: cm.ModelConfig("m", 4.0, 1, 2, 1, 8, 10, False), "hidden"),
    (lambda: cm.ModelConfig("m", 4, 1, 3, 1, 8, 10, False), "heads"),
    (lambda: cm.ModelConfig("m", 4, 1, 2, 3, 8, 10, False), "kv_heads"),
    (lambda: cm.ModelConfig("m", 4, 1, 2, 1, 8, "10", False), "vocab"),
    (lambda: cm.ModelConfig("m", 4, 1, 2, 1, 8, 10, "no"), "tied_embeddings"),
    (lambda: cm.ModelConfig(None, 4, 1, 2, 1, 8, 10, False), "name"),
    (lambda: cm.Efficiency(matmul=0.0), "matmul"),
    (lambda: cm.Efficiency(memory=1.5), "memory"),
    (lambda: cm.Efficiency(matmul=math.nan), "matmul"),
    (lambda: rl.GPU("g", 0.0, 1.0, 0.0, 0.0), "hbm_bytes_per_s"),
    (lambda: rl.GPU("g", 1.0, 1.0, 0.0, -1.0), "launch_s"),
    (lambda: rl.GPU("g", 1.0, 1.0, 0.0, 0.0, bf16_flops=math.inf), "bf16_flops"),
    (lambda: rl.GPU("g", 1.0, 1.0, 0.0, 0.0, nvlink_bytes_per_s="900e9"), "nvlink_bytes_per_s"),
])
def test_the_shapes_and_assumptions_are_checked_when_made(make, field):
    with pytest.raises((TypeError, ValueError), match=rf"^{field}: expected"):
        make()


def test_an_overflowing_result_is_refused_by_name_not_inf():
    slow = rl.GPU("slow", 1e-300, 1.0, 0.0, 0.0, bf16_flops=1e-300)
    with pytest.raises(ValueError, match=r"^flops, nbytes: expected sizes whose cost fits"):
        cm.kernel_time(1e300, 1e300, slow)
    with pytest.raises(ValueError, match=r"^context: expected sizes whose cost fits"):
        cm.forward_flops_per_token(M7, 1e306)


def test_the_cost_model_is_reached_through_gl():
    assert gl.cost_model.grpo_step_cost is cm.grpo_step_cost
    assert gl.cost_memory.trainer_bytes_per_gpu is mem.trainer_bytes_per_gpu
    assert gl.roofline.attainable is rl.attainable
