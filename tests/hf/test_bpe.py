"""The byte-level BPE tokenizer (issue 36 item 1): what changes against the character one, and
the step, the rewards, the warm start and the TRL run working with it and its EOS list.

Chapter 6b ("A tokenizer shaped like a real one") keeps the character tokenizer for readable
samples and says that the sampling, the mask, the rewards, ``grpo_step`` and TRL's run have also
been run with the BPE one: these tests are that run."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab as gl  # noqa: E402
import grpo_lab.hf as glh  # noqa: E402


@pytest.fixture(scope="module")
def bpe():
    return glh.build_bpe_tokenizer()


@pytest.fixture(scope="module")
def bpe_model(bpe):
    return glh.build_model(bpe, seed=0).eval()


def test_built_in_code_and_seeded(bpe):
    again = glh.build_bpe_tokenizer()
    assert len(bpe) == 320 and bpe.get_vocab() == again.get_vocab()
    assert glh.build_bpe_tokenizer(vocab_size=300).get_vocab() != bpe.get_vocab()


def test_tags_are_several_pieces_in_bpe_and_one_in_the_character_tokenizer(bpe, tok):
    for tag in ("<think>", "</think>", "<answer>", "</answer>"):
        assert len(glh.tag_pieces(bpe, tag)) >= 2 and glh.tag_pieces(tok, tag) == [tag]


def test_decode_then_encode_is_not_the_identity_on_ids(bpe):
    r = glh.retokenized(bpe, "<answer>")
    assert r["same_text"] and not r["same_ids"] and len(r["sampled"]) == 8
    assert bpe.decode(r["re_encoded"]) == "<answer>"
    with pytest.raises(ValueError, match="^tokenizer: expected a byte-level BPE"):
        glh.retokenized(glh.build_tokenizer())


def test_the_template_and_the_tokenizer_each_add_a_bos(bpe, tok):
    assert glh.bos_count(bpe, glh.prompt_messages((1, 2))) == {"apply_chat_template": 1,
                                                                "tokenizer(text)": 2}
    with pytest.raises(ValueError, match="^tokenizer: expected a tokenizer with a BOS"):
        glh.bos_count(tok, glh.prompt_messages((1, 2)))


def test_two_stop_ids_reach_the_model_generation_config(bpe, bpe_model):
    stops = glh.stop_ids(bpe)
    assert stops == (bpe.convert_tokens_to_ids("<|im_end|>"),
                     bpe.convert_tokens_to_ids("<|endoftext|>"))
    assert bpe_model.generation_config.eos_token_id == list(stops)


def test_completion_mask_with_an_eos_list_equals_the_plain_face():
    ids = torch.tensor([[5, 2, 0, 0], [5, 6, 0, 7], [5, 6, 7, 8], [2, 0, 2, 0]])
    want = [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]      # stops: 2 or 0
    assert glh.completion_mask(ids, [2, 0]).tolist() == want
    assert glh.completion_mask_plain(ids, [2, 0]).tolist() == want
    assert glh.completion_mask(ids, torch.tensor([2, 0])).tolist() == want
    assert glh.completion_mask(ids, 2).tolist() == [[1, 1, 0, 0], [1] * 4, [1] * 4, [1, 0, 0, 0]]


@pytest.mark.parametrize("eos", [[1.5], [], [2, -1], "2"])
def test_a_bad_eos_list_is_named(eos):
    with pytest.raises((TypeError, ValueError), match="^eos_id:"):
        glh.completion_mask(torch.tensor([[1, 2]]), eos)


def test_sample_stops_at_any_of_the_stop_ids(bpe, bpe_model):
    ids, mask = glh.encode_prompts(bpe, [glh.prompt_messages((1, 2))], repeat=2)
    greedy = glh.sample(bpe_model, ids, mask, max_new_tokens=4, temperature=0.0)
    first, second = (int(greedy.completion_ids[0, t]) for t in (0, 1))
    for stops in ([7, first], [first, 7]):                      # the greedy first token stops it
        out = glh.sample(bpe_model, ids, mask, max_new_tokens=4, temperature=0.0, eos_id=stops)
        assert out.completion_mask.tolist() == [[1, 0, 0, 0]] * 2 or \
            out.completion_ids.shape[1] == 1
        assert not out.truncated.any()
    if second != first:
        out = glh.sample(bpe_model, ids, mask, max_new_tokens=4, temperature=0.0,
                         eos_id=[second])
        assert out.completion_mask[0, :2].tolist() == [1, 1]


def test_rewards_read_decoded_bpe_completions(bpe):
    ids = bpe(glh.format_text(3), add_special_tokens=False)["input_ids"] + \
        [bpe.eos_token_id, bpe.pad_token_id]
    text = bpe.decode(ids, skip_special_tokens=True)
    assert text == "<think></think><answer>3</answer>"
    assert glh.addition_rewards([text], [3]).tolist() == [1.5]


def test_warm_start_and_a_grpo_step_run_with_the_bpe_tokenizer(bpe):
    torch.manual_seed(0)
    model = glh.build_model(bpe, seed=0)
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)
    losses = glh.warm_start(model, bpe, task, steps=30, batch_size=16, lr=1e-2, seed=0)
    assert losses[-1] < losses[0] / 2
    cfg = glh.StepConfig(group_size=4, max_new_tokens=12, beta=0.04, num_iterations=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = glh.grpo_step(model, opt, bpe, [(1, 2), (3, 1)], cfg, ref_model=glh.frozen_copy(model),
                        seed=0)
    assert out.rewards.shape == (2, 4) and all(map(lambda v: v == v, out.metrics.values()))
    assert out.metrics["reward"] > 0                       # the format is learned: 0.5 at least


def test_the_trl_run_works_with_the_bpe_tokenizer(bpe, tmp_path):
    pytest.importorskip("trl")
    model = glh.build_model(bpe, seed=0)
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)
    glh.warm_start(model, bpe, task, steps=20, batch_size=16, lr=1e-2, seed=0)
    cfg = glh.StepConfig.from_preset("trl", beta=0.04, group_size=4, max_new_tokens=12)
    run = glh.run_trl(model, bpe, task, cfg, max_steps=1, prompts_per_step=2, folder=tmp_path)
    assert len(run.history) == 1 and run.history[0]["reward"] == run.history[0]["reward"]
    texts, rewards = run.rewards[0]
    assert len(texts) == 8 and any("<answer>" in t for t in texts)
