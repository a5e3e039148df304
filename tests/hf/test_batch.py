"""The tokenizer, the model, left padding, sampling and the completion mask (gl.hf, chapter 6b)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab.hf as glh  # noqa: E402
from grpo_lab.rl.parsing import ANSWER, THINK  # noqa: E402


# --- the tokenizer -----------------------------------------------------------------------------

def test_tags_are_one_token_and_survive_skip_special_tokens(tok):
    text = "<think></think><answer>12</answer>"
    ids = tok(text)["input_ids"]
    assert [tok.convert_ids_to_tokens(i) for i in ids] == [*THINK, ANSWER[0], "1", "2", ANSWER[1]]
    # TRL decodes completions with skip_special_tokens=True: the tags must not be special
    assert tok.decode(ids + [glh.EOS, glh.PAD], skip_special_tokens=True) == text
    assert tok.pad_token_id == glh.PAD and tok.eos_token_id == glh.EOS


def test_every_character_of_the_r1_zero_template_is_in_the_vocabulary(tok):
    text = glh.R1_ZERO_SYSTEM + "\nUser: 1+2=\nAssistant: "
    assert tok.decode(tok(text)["input_ids"]) == text


def test_chat_template_renders_system_user_and_generation_prompt(tok):
    msgs = glh.prompt_messages((2, 4, 1, 3), system="Add.")
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
        "Add.\nUser: 2+4+1+3=\nAssistant: "
    assert tok.apply_chat_template(msgs, tokenize=False) == "Add.\nUser: 2+4+1+3=\n"


def test_an_unknown_character_is_refused_not_mapped_to_unk(tok):
    with pytest.raises(Exception, match="UNK"):
        tok("2+3=\u00e9")


@pytest.mark.parametrize("kwargs, name", [(dict(chat_template=""), "chat_template"),
                                          (dict(model_max_length=1), "model_max_length")])
def test_build_tokenizer_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.build_tokenizer(**kwargs)


@pytest.mark.parametrize("terms, system, name", [("2+3", None, "terms"), ((), None, "terms"),
                                                 ((1, -2), None, "terms"), ((1, 2), 3, "system")])
def test_prompt_messages_bad_arguments_name_themselves(terms, system, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.prompt_messages(terms, system=system)


# --- the model -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", sorted(glh.ARCHITECTURES))
def test_build_model_is_a_function_of_the_seed(tok, arch):
    a, b, c = (glh.build_model(tok, arch=arch, seed=s) for s in (3, 3, 4))
    sa, sb, sc = (m.state_dict() for m in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert a.config.vocab_size == len(glh.VOCAB)
    assert a.generation_config.eos_token_id == glh.EOS


def test_build_model_leaves_the_callers_random_state_alone(tok):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    glh.build_model(tok, seed=0)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("kwargs, name", [
    (dict(arch="gpt2"), "arch"), (dict(hidden_size=64, n_head=3), "n_head"),
    (dict(hidden_size=12, n_head=4), "n_head"),          # head size 3 is odd: no rotary pairs
    (dict(n_layer=0), "n_layer"), (dict(max_positions=1), "max_positions"),
    (dict(seed=-1), "seed"), (dict(hidden_size=2.5), "hidden_size")])
def test_build_model_bad_arguments_name_themselves(tok, kwargs, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.build_model(tok, **kwargs)


def test_build_model_refuses_something_that_is_not_a_tokenizer():
    with pytest.raises(TypeError, match="^tokenizer:"):
        glh.build_model(object())


def test_save_local_writes_a_folder_from_pretrained_loads_back(tok, model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = glh.save_local(model, tok, tmp_path / "m")
    assert model.config._name_or_path == str(folder)
    again = AutoModelForCausalLM.from_pretrained(folder)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in model.state_dict().items())
    tok2 = AutoTokenizer.from_pretrained(folder)
    assert tok2.padding_side == "left" and tok2.chat_template == glh.CHAT_TEMPLATE
    with pytest.raises(TypeError, match="^folder:"):
        glh.save_local(model, tok, 3)


# --- left padding --------------------------------------------------------------------------------

def test_left_pad_by_hand_and_equal_to_the_plain_face():
    rows = [[5, 6, 7], [8], [9, 9]]
    ids, mask = glh.left_pad(rows, pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    plain_ids, plain_mask = glh.left_pad_plain(rows, 0)
    assert torch.equal(ids, plain_ids) and torch.equal(mask, plain_mask)


@pytest.mark.parametrize("rows, pad, name", [([], 0, "rows"), ([[1], []], 0, "rows"),
                                             ("abc", 0, "rows"), ([[1]], -1, "pad_id"),
                                             ([[1, -3]], 0, "rows")])
def test_left_pad_bad_arguments_name_themselves(rows, pad, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.left_pad(rows, pad)


def test_encode_prompts_pads_left_and_repeats_each_prompt_for_its_group(tok):
    ids, mask = glh.encode_prompts(tok, ["1+2=", "10+20+3="], repeat=3)
    assert ids.shape == (6, 8)
    assert mask.sum(dim=1).tolist() == [4, 4, 4, 8, 8, 8]
    assert tok.decode(ids[0][mask[0].bool()]) == "1+2=" and int(ids[0, 0]) == glh.PAD
    assert torch.equal(ids[3], ids[5])


@pytest.mark.parametrize("prompts, repeat, name", [("1+2=", 1, "prompts"), ([], 1, "prompts"),
                                                   ([3], 1, "prompts"), (["1="], 0, "repeat")])
def test_encode_prompts_bad_arguments_name_themselves(tok, prompts, repeat, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.encode_prompts(tok, prompts, repeat=repeat)


# --- the completion mask -------------------------------------------------------------------------

def test_completion_mask_by_hand():
    # EOS = 1. Row 0 stops at t = 1 (EOS scored, padding after); row 1 never stops (truncated:
    # all scored); row 2 stops at once; row 3 has a second EOS after the first: still masked.
    ids = torch.tensor([[7, 1, 0, 0], [7, 8, 9, 6], [1, 5, 1, 0], [4, 1, 1, 4]])
    assert glh.completion_mask(ids, eos_id=1).tolist() == [
        [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]


def test_completion_mask_equals_the_plain_face_and_trls_formula():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 4, (64, 9), generator=g)                # EOS = 1 is frequent
    got = glh.completion_mask(ids, 1)
    assert torch.equal(got, glh.completion_mask_plain(ids, 1))
    # TRL 1.16.0, GRPOTrainer._generate_single_turn: sequence_indices <= eos_idx
    is_eos = ids == 1
    eos_idx = torch.full((ids.shape[0],), ids.shape[1], dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    trl = (torch.arange(ids.shape[1]).expand(ids.shape[0], -1) <= eos_idx[:, None]).int()
    assert torch.equal(got, trl.long())


@pytest.mark.parametrize("ids, eos, name", [(torch.ones(2, 3), 1, "completion_ids"),
                                            (torch.ones(3, dtype=torch.long), 1, "completion_ids"),
                                            (torch.ones(2, 3, dtype=torch.long), -1, "eos_id"),
                                            ([[1, 2]], 1, "completion_ids")])
def test_completion_mask_bad_arguments_name_themselves(ids, eos, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.completion_mask(ids, eos)


# --- sampling ------------------------------------------------------------------------------------

def test_sample_is_repeatable_with_a_seed_and_masks_after_eos(tok, model):
    ids, mask = glh.encode_prompts(tok, ["1+2=", "3+4+5="], repeat=8)
    a = glh.sample(model, ids, mask, max_new_tokens=12, seed=1)
    b = glh.sample(model, ids, mask, max_new_tokens=12, seed=1)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert a.completion_ids.shape[1] <= 12
    assert torch.equal(a.completion_mask, glh.completion_mask(a.completion_ids, glh.EOS))
    after = a.completion_mask == 0
    assert bool((a.completion_ids[after] == glh.PAD).all())
    assert bool((a.sampler_logp[after] == 0).all()) and bool((a.sampler_logp[~after] < 0).all())
    has_eos = (a.completion_ids == glh.EOS).any(dim=1)
    assert torch.equal(a.truncated, ~has_eos)
    L = ids.shape[1] + a.completion_ids.shape[1]
    assert a.input_ids.shape == a.attention_mask.shape == (16, L)


def test_sample_stops_rows_at_eos(tok):
    # a model whose output bias makes EOS almost certain: every row is one EOS, not truncated
    m = glh.build_model(tok, seed=0).eval()
    with torch.no_grad():
        m.lm_head.weight.zero_()           # tied: zeroes the input embedding too, fine here
        m.model.norm.weight.zero_()
    m.lm_head.bias = torch.nn.Parameter(torch.zeros(len(glh.VOCAB)))
    with torch.no_grad():
        m.lm_head.bias[glh.EOS] = 30.0
    ids, mask = glh.encode_prompts(tok, ["1+2="], repeat=4)
    out = glh.sample(m, ids, mask, max_new_tokens=6, seed=0)
    assert out.completion_ids.tolist() == [[glh.EOS]] * 4 and not bool(out.truncated.any())


def test_greedy_sampling_takes_the_argmax_of_the_full_forward(tok, model):
    ids, mask = glh.encode_prompts(tok, ["1+2=", "10+3="])
    out = glh.sample(model, ids, mask, max_new_tokens=5, temperature=0.0)
    with torch.no_grad():
        logits = model(input_ids=out.input_ids, attention_mask=out.attention_mask).logits
    T = out.completion_ids.shape[1]
    argmax = logits[:, -T - 1:-1].argmax(-1)                       # the shift: p scores p + 1
    m = out.completion_mask.bool()
    assert torch.equal(argmax[m], out.completion_ids[m])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logp_is_the_tempered_distribution_the_trainer_recomputes(tok, model, temperature):
    ids, mask = glh.encode_prompts(tok, ["1+2=", "3+4+5="], repeat=4)
    out = glh.sample(model, ids, mask, max_new_tokens=8, temperature=temperature, seed=2)
    with torch.no_grad():
        logp = glh.completion_logprobs(model, out.input_ids, out.attention_mask,
                                       out.completion_ids.shape[1], temperature=temperature)
    # the KV-cached sampler and the full forward add in different orders: float32 rounding
    assert float((logp - out.sampler_logp).abs().max()) < 1e-5
    if temperature != 1.0:                 # and the temperature-1 numbers are not these
        with torch.no_grad():
            raw = glh.completion_logprobs(model, out.input_ids, out.attention_mask,
                                          out.completion_ids.shape[1])
        assert float((raw - out.sampler_logp).abs().max()) > 1e-2


@pytest.mark.parametrize("kwargs, name", [(dict(max_new_tokens=0), "max_new_tokens"),
                                          (dict(max_new_tokens=4, temperature=-1.0), "temperature"),
                                          (dict(max_new_tokens=4, seed=-2), "seed")])
def test_sample_bad_arguments_name_themselves(tok, model, kwargs, name):
    ids, mask = glh.encode_prompts(tok, ["1+2="])
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        glh.sample(model, ids, mask, **kwargs)


def test_sample_refuses_a_mask_of_another_shape_and_a_non_model(tok, model):
    ids, mask = glh.encode_prompts(tok, ["1+2="])
    with pytest.raises(ValueError, match="^prompt_mask:"):
        glh.sample(model, ids, mask[:, 1:], max_new_tokens=2)
    with pytest.raises(TypeError, match="^model:"):
        glh.sample(object(), ids, mask, max_new_tokens=2)
