"""Chapter 7's profile of chapter 6b's Hugging Face GRPO step, stage by stage."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab as gl  # noqa: E402
from grpo_lab.perf.hf_profile import HF_STAGES, time_hf_step  # noqa: E402


def test_every_stage_is_timed_and_the_model_is_trained():
    torch.manual_seed(0)
    tok = gl.hf.build_tokenizer()
    model = gl.hf.build_model(tok, seed=0)
    ref = gl.hf.frozen_copy(model)
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)
    cfg = gl.hf.StepConfig.from_preset("trl", beta=0.04, group_size=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    times, shapes = time_hf_step(model, opt, tok, task, cfg, ref, B=2, repeats=2)
    assert tuple(times) == HF_STAGES and all(t > 0 for t in times.values())
    assert shapes["N"] == 8 and shapes["V"] == model.config.vocab_size
    assert shapes["params"] == sum(p.numel() for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(before, ref.parameters()))   # frozen


def test_bad_arguments_are_named():
    tok = gl.hf.build_tokenizer()
    model = gl.hf.build_model(tok, seed=0)
    with pytest.raises(TypeError, match="config: expected a gl.hf.StepConfig"):
        time_hf_step(model, None, tok, None, {"group_size": 4}, None)
    with pytest.raises(ValueError, match="repeats"):
        time_hf_step(model, None, tok, None, gl.hf.StepConfig(), None, repeats=0)
