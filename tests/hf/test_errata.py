"""Issue 36's errata in gl.hf, measured: what a log-prob's backward keeps, the entropy metric
kept out of autograd, and one validation per argument through a whole grpo_step (issue 37)."""

import collections
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab.hf as glh  # noqa: E402
from grpo_lab.hf import checks  # noqa: E402
from grpo_lab.numerics import validate  # noqa: E402


def test_the_backward_keeps_one_vocabulary_sized_tensor_in_every_form():
    rows = {(r["form"], r["dtype"], r["tau"]): r for r in glh.logprob_memory_table(2, 3, 50)}
    assert all(r["saved"] == 1 for r in rows.values())             # never two, never three
    assert rows["plain", "float32", 1.0]["new"] == 1                # its log-softmax
    assert rows["hardened", "float32", 1.0]["new"] == 0             # the logits themselves
    assert rows["hardened", "float32", 0.7]["new"] == 1             # (z - max) / tau
    bf16 = rows["hardened", "bfloat16", 1.0]
    assert bf16["new_bytes"] == 2 * bf16["logits_bytes"]           # a float32 copy


def test_the_entropy_metric_keeps_nothing_for_the_backward(tok, model):
    from grpo_lab.hf.step import micro_loss
    ids, mask = glh.encode_prompts(tok, ["1+2="], repeat=2)
    batch = glh.sample(model, ids, mask, max_new_tokens=3, seed=0)
    cfg = glh.StepConfig(group_size=2, max_new_tokens=3, beta=0.0)
    V = model.config.vocab_size
    saved = glh.saved_logit_tensors(
        lambda z: micro_loss(model, batch, slice(0, 2), None, None, torch.ones(2), cfg),
        torch.zeros(1, V, requires_grad=True))
    activations = [t for t in saved if len(t["shape"]) == 3]       # (n, T, V); the rest: weights
    assert len(activations) == 1           # token_logprobs' logits; the entropy's: none


def _conversions(fn, *args, **kwargs):
    layer = {validate.__file__, checks.__file__}
    count = collections.Counter()

    def profile(frame, event, _):
        if event != "call" or frame.f_code.co_filename not in layer:
            return
        if frame.f_back is not None and frame.f_back.f_code.co_filename in layer:
            return
        name = frame.f_locals.get("name")
        if isinstance(name, str) and frame.f_code.co_name.startswith(("check_", "as_")):
            count[name] += 1

    sys.setprofile(profile)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return count


def test_grpo_step_checks_its_model_once(tok):
    model = glh.build_model(tok, seed=0)
    cfg = glh.StepConfig(group_size=2, max_new_tokens=3, beta=0.04, num_iterations=2,
                         micro_size=1, is_mode="token_truncate")
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    count = _conversions(glh.grpo_step, model, opt, tok, [(1, 2)], cfg,
                         ref_model=glh.frozen_copy(model), seed=0)
    assert count["model"] == 1 and count["ref_model"] == 1 and count["tokenizer"] == 1
    assert count["slices"] == 0 and count["prompt_ids"] == 0 and count["input_ids"] == 0
