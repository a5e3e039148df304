"""Hostile input across gl.hf (issue 37): a clear error naming the argument, or a right answer.

The sweep feeds a table of hostile values to every argument of every public gl.hf function
of the step's plumbing, one argument at a time, the others valid (the pattern of
tests/test_hostile_inputs.py). Each call must raise a ``ValueError`` or ``TypeError`` whose
message starts with that argument's name, unless the value is one the function documents as
valid (listed in ``VALID``), in which case it must return. The issue's cases follow, one test
each, with the right answer worked by hand where there is one.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab as gl  # noqa: E402
import grpo_lab.hf as glh  # noqa: E402

HOSTILE = {
    "None": None, "str": "x", "nan": float("nan"), "inf": float("inf"), "neg": -1,
    "bool": True, "float": 1.5, "object": object(), "empty list": [],
    "float tensor": torch.tensor([[1.5]]), "huge": 10**400,
}


#: A (1, 1) tensor in place of an argument with a partner of its shape: the mismatch may be
#: reported on the partner ("labels: expected shape ... (the logits' shape without V)").
PARTNER = {"logits": ("labels", "input_ids"), "old_logp": ("sampler_logp",)}


@pytest.fixture(scope="module")
def parts(tok, tmp_path_factory):
    model = glh.build_model(tok, seed=0).eval()
    ids, mask = glh.encode_prompts(tok, ["1+2="], repeat=2)
    batch = glh.sample(model, ids, mask, max_new_tokens=3, seed=0)
    logits = torch.randn(2, 3, 5)
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.3, 0.3, 0.4]]))
    return dict(tok=tok, model=model, ids=ids, mask=mask, batch=batch, logits=logits, logp=logp,
                folder=tmp_path_factory.mktemp("saved"))


def _api(p):
    """name: (function, valid keyword arguments, {argument: hostile values that are valid})."""
    tok, model, batch, logp = p["tok"], p["model"], p["batch"], p["logp"]
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)
    cfg = glh.StepConfig(group_size=2, max_new_tokens=2, beta=0.0)
    m23 = torch.tensor([[1, 1, 0], [1, 1, 1]])
    return {
        "build_tokenizer": (glh.build_tokenizer, dict(chat_template=glh.CHAT_TEMPLATE,
                                                      model_max_length=64),
                            {"chat_template": {"str"}}),          # "x" is a template: it renders
        "prompt_messages": (glh.prompt_messages, dict(terms=(1, 2), system=None),
                            {"system": {"None", "str"}}),
        "stop_ids": (glh.stop_ids, dict(tokenizer=tok), {}),
        "build_model": (glh.build_model, dict(tokenizer=tok, n_layer=1, seed=0,
                                              eos_token_id=None), {"eos_token_id": {"None"}}),
        "left_pad": (glh.left_pad, dict(rows=[[5, 6], [7]], pad_id=0), {}),
        "encode_prompts": (glh.encode_prompts, dict(tokenizer=tok, prompts=["1+2="], repeat=1),
                           {}),
        "sample": (glh.sample, dict(model=model, prompt_ids=p["ids"], prompt_mask=p["mask"],
                                    max_new_tokens=2, temperature=1.0, seed=0, eos_id=None),
                   {"seed": {"None"}, "eos_id": {"None"}, "temperature": {"float"}}),
        "completion_mask": (glh.completion_mask, dict(completion_ids=torch.tensor([[3, 1, 0]]),
                                                      eos_id=1), {}),
        "token_logprobs": (glh.token_logprobs, dict(logits=p["logits"],
                                                    labels=torch.zeros(2, 3, dtype=torch.long),
                                                    temperature=0.7),
                           {"temperature": {"float"}}),
        "next_token_logprobs": (glh.next_token_logprobs,
                                dict(logits=p["logits"], input_ids=torch.zeros(2, 3,
                                                                               dtype=torch.long),
                                     temperature=1.0), {"temperature": {"float"}}),
        "token_entropy": (glh.token_entropy, dict(logits=p["logits"], temperature=1.0),
                          {"logits": {"float tensor"}, "temperature": {"float"}}),
        "completion_logprobs": (glh.completion_logprobs,
                                dict(model=model, input_ids=batch.input_ids,
                                     attention_mask=batch.attention_mask, n_completion=3,
                                     temperature=1.0, entropy=False),
                                {"temperature": {"float"}, "entropy": {"bool"}}),
        "frozen_copy": (glh.frozen_copy, dict(model=model), {}),
        "old_logprobs": (glh.old_logprobs, dict(model=model, batch=batch, temperature=1.0),
                         {"temperature": {"float"}}),
        "reference_logprobs": (glh.reference_logprobs, dict(ref_model=model, batch=batch,
                                                            temperature=1.0),
                               {"temperature": {"float"}}),
        "logp_mismatch": (glh.logp_mismatch, dict(old_logp=logp, sampler_logp=logp - 0.1,
                                                  mask=m23), {}),
        "is_weights": (glh.is_weights, dict(old_logp=logp, sampler_logp=logp - 0.1, mask=m23,
                                            mode="token_truncate", clip_min=0.5, clip_max=3.0),
                       {"clip_min": {"None", "float"}, "clip_max": {"None", "float"}}),
        "weighted_advantages": (glh.weighted_advantages, dict(adv=torch.tensor([1.0, -1.0]),
                                                              weights=torch.ones(2, 1)), {}),
        "micro_batches": (glh.micro_batches, dict(n_rows=4, micro_size=2), {}),
        "micro_weights": (glh.micro_weights, dict(mask=m23, slices=[slice(0, 1), slice(1, 2)],
                                                  agg="dapo"), {}),
        "micro_mean_weights": (glh.micro_mean_weights, dict(slices=[slice(0, 1)]), {}),
        "accumulate": (glh.accumulate, dict(loss_of=lambda rows: torch.tensor(1.0,
                                                                              requires_grad=True),
                                            slices=[slice(0, 1)], weights=[1.0]), {}),
        "format_text": (glh.format_text, dict(answer=12), {"answer": {"neg", "huge"}}),
        "save_local": (glh.save_local, dict(model=model, tokenizer=tok, folder=p["folder"]), {}),
        "warm_start": (glh.warm_start, dict(model=glh.build_model(tok, n_layer=1), tokenizer=tok,
                                            task=task, steps=1, batch_size=2, lr=1e-3,
                                            answers="random", seed=0), {"lr": {"float"}}),
        "grpo_step": (glh.grpo_step, dict(model=glh.build_model(tok, n_layer=1),
                                          optimizer=torch.optim.SGD(model.parameters(), lr=0.0),
                                          tokenizer=tok, terms=[(1, 2)], config=cfg,
                                          ref_model=None, seed=0),
                      {"ref_model": {"None"}, "seed": {"None"}}),
        "saved_logit_tensors": (glh.saved_logit_tensors,
                                dict(fn=glh.token_logprobs_plain,
                                     logits=torch.randn(2, 3, requires_grad=True)), {}),
        "logprob_memory_table": (glh.logprob_memory_table, dict(N=1, L=2, V=3, seed=0), {}),
    }


def _cases():
    # the argument names, without building anything (the fixtures are built once, in _api)
    return [
        ("build_tokenizer", ["chat_template", "model_max_length"]),
        ("prompt_messages", ["terms", "system"]),
        ("stop_ids", ["tokenizer"]),
        ("build_model", ["tokenizer", "n_layer", "seed", "eos_token_id"]),
        ("left_pad", ["rows", "pad_id"]),
        ("encode_prompts", ["tokenizer", "prompts", "repeat"]),
        ("sample", ["model", "prompt_ids", "prompt_mask", "max_new_tokens", "temperature",
                    "seed", "eos_id"]),
        ("completion_mask", ["completion_ids", "eos_id"]),
        ("token_logprobs", ["logits", "labels", "temperature"]),
        ("next_token_logprobs", ["logits", "input_ids", "temperature"]),
        ("token_entropy", ["logits", "temperature"]),
        ("completion_logprobs", ["model", "input_ids", "attention_mask", "n_completion",
                                 "temperature", "entropy"]),
        ("frozen_copy", ["model"]),
        ("old_logprobs", ["model", "batch", "temperature"]),
        ("reference_logprobs", ["ref_model", "batch", "temperature"]),
        ("logp_mismatch", ["old_logp", "sampler_logp", "mask"]),
        ("is_weights", ["old_logp", "sampler_logp", "mask", "mode", "clip_min", "clip_max"]),
        ("weighted_advantages", ["adv", "weights"]),
        ("micro_batches", ["n_rows", "micro_size"]),
        ("micro_weights", ["mask", "slices", "agg"]),
        ("micro_mean_weights", ["slices"]),
        ("accumulate", ["loss_of", "slices", "weights"]),
        ("format_text", ["answer"]),
        ("save_local", ["model", "tokenizer"]),      # folder: its own test (a str is a path)
        ("warm_start", ["model", "tokenizer", "task", "steps", "batch_size", "lr", "answers",
                        "seed"]),
        ("grpo_step", ["model", "optimizer", "tokenizer", "terms", "config", "ref_model",
                       "seed"]),
        ("saved_logit_tensors", ["fn", "logits"]),
        ("logprob_memory_table", ["N", "L", "V", "seed"]),
    ]


@pytest.fixture(scope="module")
def api(parts):
    return _api(parts)


@pytest.mark.parametrize("fn_name, arg", [(f, a) for f, args in _cases() for a in args])
def test_hostile_values_are_named_or_documented(api, fn_name, arg):
    fn, valid, ok = api[fn_name]
    assert arg in valid
    for label, value in HOSTILE.items():
        kwargs = {**valid, arg: value}
        try:
            fn(**kwargs)
        except (TypeError, ValueError) as err:
            named = str(err).split(":")[0]
            assert named == arg or (label == "float tensor" and named in PARTNER.get(arg, ())), \
                f"{fn_name}({arg}={label}): {err}"
        else:
            assert label in ok.get(arg, set()), f"{fn_name}({arg}={label}) was accepted"


def test_every_public_function_of_the_plumbing_is_swept(api):
    swept = {name for name, _ in _cases()}
    plumbing = {f"grpo_lab.hf.{m}" for m in ("accumulate", "batch", "importance", "logprobs",
                                              "memory", "model", "reference", "step",
                                              "tokenizer", "warmstart")}
    public = {n for n in glh.__all__ if callable(getattr(glh, n)) and not n[0].isupper()
              and not n.endswith("_plain") and getattr(glh, n).__module__ in plumbing}
    assert len(public) > 25 and public - swept == set()


# --- silent wrong answers ------------------------------------------------------------------------

@pytest.mark.parametrize("rows, what", [([[1.5, 2]], "float"), ([[True, 2]], "bool"),
                                        ([[[1, 2], 3]], "nested"), ([[np.float64(1.0)]], "float"),
                                        ([torch.tensor([1.0, 2.0])], "float tensor")])
def test_left_pad_refuses_ids_that_are_not_integers(rows, what):
    with pytest.raises(TypeError, match="^rows: expected"):
        glh.left_pad(rows, pad_id=0)


def test_left_pad_reads_numpy_and_tensor_integers():
    ids, mask = glh.left_pad([np.array([5, 6]), torch.tensor([7])], pad_id=np.int64(0))
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]


@pytest.mark.parametrize("answer", [None, 1.5, "12", True])
def test_format_text_refuses_what_is_not_an_integer(answer):
    with pytest.raises(TypeError, match="^answer:"):
        glh.format_text(answer)


def test_format_text_reads_a_numpy_integer():
    assert glh.format_text(np.int64(7)) == "<think></think><answer>7</answer>"


def test_truncated_is_never_lets_a_weight_below_clip_min():
    # exp(log 0.3) rounds below 0.3 in float32; the bound is applied to the weight itself
    old = torch.full((1, 4), -5.0)
    smp = torch.tensor([[-0.1, -0.2, -1.0, -2.0]])                 # ratios e^-4.9 ... e^-3
    for c in (0.3, 0.7, 0.1, 1.0 / 3.0):
        w = glh.is_weights(old, smp, torch.ones(1, 4), mode="token_truncate", clip_min=c,
                           clip_max=3.0)
        c32 = torch.tensor(c, dtype=w.dtype)
        assert torch.all(w == c32) and bool(w.min() >= c32)       # every ratio was below c


@pytest.mark.parametrize("arg", ["old_logp", "sampler_logp"])
def test_positive_log_probs_are_refused_on_both_sides(arg):
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    kwargs = dict(old_logp=logp, sampler_logp=logp, mask=torch.ones(1, 2))
    kwargs[arg] = torch.tensor([[0.1, -0.2]])
    with pytest.raises(ValueError, match=f"^{arg}: expected log-probabilities"):
        glh.is_weights(**kwargs)


@pytest.mark.parametrize("slices", [[slice(0, 4, 2), slice(1, 4, 2)],        # strided
                                    [slice(-4, -2), slice(2, 4)],             # negative
                                    [slice(0, 2), slice(2, 9)],               # past the end
                                    [slice(0, 2), slice(1, 4)]])              # overlapping
def test_micro_weights_refuses_slices_that_are_not_contiguous_covering_rows(slices):
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 0]])
    with pytest.raises(ValueError, match="^slices: expected"):
        glh.micro_weights(mask, slices)


def test_micro_weights_reads_an_open_ended_slice():
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 0]])          # 2 + 1 | 2 + 1 of 6 tokens
    assert glh.micro_weights(mask, [slice(None, 2), slice(2, None)]) == [0.5, 0.5]
    assert glh.micro_weights(mask, [slice(0, 1), slice(1, None)], agg="grpo") == [0.25, 0.75]


@pytest.mark.parametrize("w", [float("nan"), float("inf"), -0.5])
def test_accumulate_refuses_a_weight_that_is_not_a_finite_share(w):
    p = torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="^weights"):
        glh.accumulate(lambda rows: (p * 2).sum(), [slice(0, 1)], [w])
    assert p.grad is None                                          # nothing was added


def test_accumulate_refuses_a_non_finite_loss_before_its_backward():
    p = torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="^loss_of: expected a finite loss"):
        glh.accumulate(lambda rows: (p * float("nan")).sum(), [slice(0, 1)], [1.0])
    assert p.grad is None


# --- NaN or inf from finite input -----------------------------------------------------------------

@pytest.mark.parametrize("tau", [0.5, 0.1])
def test_logprobs_and_entropy_at_huge_logits_and_low_temperature(tau):
    # z / tau overflows float32 (3e38 / 0.5 = inf) unless the max is subtracted first
    z = torch.tensor([[3e38, 0.0, -3e38], [3e38, 3e38, 0.0]])
    logp = glh.token_logprobs(z, torch.tensor([0, 1]), temperature=tau)
    h = glh.token_entropy(z, temperature=tau)
    assert torch.isfinite(logp).all() and torch.isfinite(h).all()
    assert logp.tolist() == [0.0, pytest.approx(-math.log(2))]       # certain; a coin between two
    assert h.tolist() == [0.0, pytest.approx(math.log(2))]


def test_shifted_logprobs_equal_the_plain_face_on_ordinary_logits():
    gen = torch.Generator().manual_seed(0)
    z, y = torch.randn(3, 4, 7, generator=gen) * 4, torch.randint(0, 7, (3, 4), generator=gen)
    for tau in (1.0, 0.7, 1.3):
        assert torch.allclose(glh.token_logprobs(z, y, temperature=tau),
                              glh.token_logprobs_plain(z / tau, y), atol=1e-6)


def test_weighted_advantages_in_float16_does_not_overflow_in_its_product_path():
    adv = torch.tensor([300.0, -2.0], dtype=torch.float16)
    w = torch.tensor([[100.0], [0.5]], dtype=torch.float16)
    with pytest.raises(ValueError, match="adv and weights"):              # 300 * 300 > 65504
        glh.weighted_advantages(adv, torch.tensor([[300.0], [0.5]], dtype=torch.float16))
    out = glh.weighted_advantages(adv, w)                                 # 30000 fits float16
    assert out.dtype == torch.float16 and out.tolist() == [30000.0, -1.0]


# --- exception types and messages; valid input refused; bad input accepted -----------------------

def test_encode_prompts_names_a_character_outside_the_vocabulary(tok):
    with pytest.raises(ValueError, match="^prompts: expected text the tokenizer can encode"):
        glh.encode_prompts(tok, ["2+3=\u00e9"])


def test_encode_prompts_names_a_message_without_content(tok):
    with pytest.raises(ValueError, match="^prompts: expected each message to have"):
        glh.encode_prompts(tok, [[{"role": "user"}]])


def test_ids_past_the_vocabulary_are_named(model, tok):
    ids, mask = glh.encode_prompts(tok, ["1+2="])
    V = model.config.vocab_size
    with pytest.raises(ValueError, match="^prompt_ids: expected token ids below"):
        glh.sample(model, ids + V, mask, max_new_tokens=2)
    bad = torch.cat([ids, torch.tensor([[V]])], dim=1)
    with pytest.raises(ValueError, match="^input_ids: expected token ids below"):
        glh.completion_logprobs(model, bad, torch.ones_like(bad), 1)


def test_numpy_integers_are_read():
    assert glh.prompt_messages(np.array([2, 3]))[0]["content"] == "2+3="
    assert glh.build_tokenizer(model_max_length=np.int64(16)).model_max_length == 16


@pytest.mark.parametrize("template", ["{% for m in messages %}{{ m['content'] }}",   # no endfor
                                      "{{ messages[0]['content'] | nosuchfilter }}",
                                      "{{ raise_exception('no') }}"])
def test_build_tokenizer_refuses_a_broken_template(template):
    with pytest.raises(ValueError, match="^chat_template: expected a Jinja template"):
        glh.build_tokenizer(chat_template=template)


@pytest.mark.parametrize("fields, name", [(dict(advantages={"epsilon": 1e-4}), "advantages"),
                                          (dict(advantages={"scale": "nope"}), "advantages"),
                                          (dict(is_clip_min=3.0, is_clip_max=2.0), "is_clip_min"),
                                          (dict(is_clip_max=0.0), "is_clip_max")])
def test_step_config_refuses_before_any_sampling(fields, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        glh.StepConfig(**fields)
    cfg = glh.StepConfig()
    for k, v in fields.items():
        setattr(cfg, k, v)                                    # changed after it was made
    with pytest.raises(ValueError, match=f"^{name}"):
        glh.grpo_step(None, None, None, [(1, 2)], cfg)        # refused before the model is read


def test_save_local_refuses_an_empty_folder_name_and_a_file(tmp_path, model, tok):
    with pytest.raises(ValueError, match="^folder: expected a folder path"):
        glh.save_local(model, tok, "")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="^folder: expected a folder, got"):
        glh.save_local(model, tok, tmp_path / "f")
    with pytest.raises(ValueError, match="^folder: expected a folder that can be made"):
        glh.save_local(model, tok, tmp_path / "f" / "sub")
