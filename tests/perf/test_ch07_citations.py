"""Every file:line chapter 7 and the perf modules cite in a pinned release says what the page
says it does (issue 36): TRL 1.16.0 and Liger-Kernel 0.8.5 as installed, verl 0.9.1 from its
wheel (tests/reference/wheels.py; skipped offline unless CI asks for it). A release that moves
or rewrites a cited line fails here, by name, before the page goes stale.
"""

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _installed(package, relative):
    spec = importlib.util.find_spec(package)
    if spec is None:
        pytest.skip(f"{package} is not installed")
    return (Path(spec.origin).parent / relative).read_text(encoding="utf-8").splitlines()


def _lines(text_lines, first, last=None):
    return "\n".join(text_lines[first - 1:(last or first)])


def _chapter_text():
    nb = json.loads((ROOT / "chapters" / "07_performance.ipynb").read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"])


def test_trl_grpo_config_has_no_padding_free_and_the_chapter_says_so():
    trl = pytest.importorskip("trl")
    assert trl.__version__ == "1.16.0"
    from trl import GRPOConfig, SFTConfig
    assert "padding_free" not in {f.name for f in dataclasses.fields(GRPOConfig)}
    assert "padding_free" in {f.name for f in dataclasses.fields(SFTConfig)}
    text = _chapter_text()
    assert "`GRPOConfig` has no `padding_free` field" in text
    assert "TRL's `padding_free`" not in text


def test_trl_recomputes_old_logp_only_when_the_cited_lines_say():
    src = _installed("trl", "trainer/grpo_trainer.py")
    block = _lines(src, 2642, 2657)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in block
    assert "self.args.gradient_accumulation_steps % generate_every != 0" in block
    assert "self.use_vllm and self.vllm_importance_sampling_correction" in block
    assert "old_per_token_logps = None" in block
    assert "per_token_logps.detach() if old_per_token_logps is None" in _lines(src, 3065, 3066)
    # the advantages with NaN handling the bench's baseline leaves out
    adv = _lines(src, 2765, 2810)
    for name in ("torch.nanmean", "nanstd(", "torch.isclose", "torch.nan_to_num"):
        assert name in adv, name
    assert "grpo_trainer.py:2642-2657" in _chapter_text()


def test_trl_fused_head_tiles_and_its_two_paths():
    kernel = _installed("trl", "kernels/chunked_logprob.py")
    assert _lines(kernel, 31) == "TOKEN_CHUNK_SIZE = 4096"
    assert _lines(kernel, 48).startswith("def _use_triton(")
    utils = _installed("trl", "trainer/utils.py")
    assert _lines(utils, 1506) == "_CHUNKED_LOGPROB_CHUNK_SIZE = 32768"
    block = _lines(utils, 1640, 1659)
    assert "compact = _use_triton(hidden_states.device)" in block
    assert "hidden_states[mask] if compact" in block
    from grpo_lab.perf.bench_linear import TRL_CHUNK
    assert TRL_CHUNK == 32768


def test_liger_tiles_recompute_in_the_backward_and_grad_per_chunk():
    liger = _installed("liger_kernel", "chunked_loss/fused_linear_ppo.py")
    assert _lines(liger, 9) == "_SELECTIVE_LOGPROB_VOCAB_CHUNK_SIZE = 4096"
    assert _lines(liger, 10) == "_SELECTIVE_LOGPROB_SEQ_CHUNK_SIZE = 2048"
    assert _lines(liger, 136).startswith("class _ChunkedSelectiveLogProbFunction(")
    assert "grads = torch.autograd.grad(chunk_loss, grad_targets)" in _lines(liger, 334)
    assert "for seq_start in range(0, n_rows, seq_chunk_size):" in _lines(liger, 35)
    backward = _lines(liger, 103, 129)
    assert "logits_chunk = (hidden_chunk @ weight_chunk" in backward   # the logits, made again
    assert "grad_and_value" not in "\n".join(liger)
    assert "grad_and_value" not in _chapter_text()


def test_verl_packs_by_default_and_bypass_mode_reuses_the_sampler_logprobs():
    from tests.reference import wheels
    hf_model = wheels.read("verl", "verl/trainer/config/model/hf_model.yaml").splitlines()
    assert _lines(hf_model, 40) == "use_remove_padding: True"
    model = wheels.read("verl", "verl/workers/config/model.py").splitlines()
    assert _lines(model, 120).strip() == "use_remove_padding: bool = True"
    algorithm = wheels.read("verl", "verl/trainer/config/algorithm.py").splitlines()
    assert "reuse rollout_log_prob as old_log_prob" in _lines(algorithm, 127, 131)
    assert _lines(algorithm, 184).strip() == "bypass_mode: bool = False"
    trainer = wheels.read("verl", "verl/trainer/ppo/ray_trainer.py").splitlines()
    assert 'get("bypass_mode", False)' in _lines(trainer, 1575, 1579)
    text = _chapter_text()
    for cite in ("hf_model.yaml:40", "verl/workers/config/model.py:120",
                 "verl/trainer/config/algorithm.py:127-131", "ray_trainer.py:1575-1579"):
        assert cite in text, cite
