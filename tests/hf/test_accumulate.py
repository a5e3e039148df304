"""Micro-batches and gradient accumulation with the global token normaliser (chapter 6b)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab.hf as glh  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    """A float64 model and a batch of 8 completions of very different lengths (EOS placed)."""
    tok = glh.build_tokenizer()
    model = glh.build_model(tok, seed=0).double()
    prompt_ids, prompt_mask = glh.encode_prompts(tok, ["1+2=", "3+4+4="], repeat=4)   # (8, P)
    g = torch.Generator().manual_seed(0)
    completion_ids = torch.randint(2, len(glh.VOCAB), (8, 9), generator=g)
    for row, stop in enumerate([0, 8, 1, 7, 2, 8, 0, 5]):   # rows 0-3 and 4-7: 20 vs 19 tokens
        completion_ids[row, stop] = glh.EOS
    completion_mask = glh.completion_mask(completion_ids, glh.EOS)
    completion_ids = completion_ids.masked_fill(completion_mask == 0, glh.PAD)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    mask = torch.cat([prompt_mask, completion_mask], 1)
    with torch.no_grad():
        old = glh.completion_logprobs(model, ids, mask, 9)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 0.2, -0.2], dtype=torch.float64)
    return model, ids, mask, completion_mask.double(), old, adv


def _grad(model, loss_of, slices, weights):
    model.zero_grad()
    total = glh.accumulate(loss_of, slices, weights)
    return total, torch.cat([p.grad.flatten() for p in model.parameters()])


def _loss_of(setup, agg):
    model, ids, mask, cmask, old, adv = setup

    def loss_of(rows):
        logp = glh.completion_logprobs(model, ids[rows], mask[rows], 9)
        # a second update's numbers: old_logp shifted, so ratios differ from 1 and some clip
        loss, _ = glt.grpo_loss(logp, old[rows] + 0.1, old[rows], adv[rows], cmask[rows],
                                beta=0.04, agg=agg)
        return loss
    return loss_of


@pytest.mark.parametrize("agg, micro_sizes", [("dapo", (1, 3)), ("bnpo", (3,)),
                                               ("grpo", (3,)), ("dr_grpo", (3,))])
def test_accumulated_gradient_equals_the_full_batchs(setup, agg, micro_sizes):
    model, _, _, cmask, _, _ = setup
    loss_of = _loss_of(setup, agg)
    full_loss, full = _grad(model, loss_of, [slice(0, 8)], [1.0])
    for micro_size in micro_sizes:          # 3 leaves a last micro-batch of 2 rows
        slices = glh.micro_batches(8, micro_size)
        loss, acc = _grad(model, loss_of, slices, glh.micro_weights(cmask, slices, agg))
        assert abs(loss - full_loss) < 1e-6
        assert float((acc - full).abs().max()) < 1e-6 * max(1.0, float(full.abs().max()))


def test_the_per_micro_batch_mean_gives_another_gradient(setup):
    # micro-batches of 2 rows hold 10, 10, 12 and 7 tokens; each gets the weight 1/4 instead
    # of n_k / 39, so the tokens of the short micro-batch count more than the others
    model, _, _, cmask, _, _ = setup
    loss_of = _loss_of(setup, "dapo")
    _, full = _grad(model, loss_of, [slice(0, 8)], [1.0])
    slices = glh.micro_batches(8, 2)
    assert glh.micro_weights(cmask, slices) != glh.micro_mean_weights(slices)
    _, bug = _grad(model, loss_of, slices, glh.micro_mean_weights(slices))
    assert float((bug - full).norm() / full.norm()) > 1e-3


def test_micro_batches_and_weights_by_hand():
    assert glh.micro_batches(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert glh.micro_batches(3, 8) == [slice(0, 3)]
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    assert glh.micro_weights(mask, glh.micro_batches(4, 2)) == pytest.approx([5 / 9, 4 / 9])
    assert glh.micro_weights(mask, glh.micro_batches(4, 1), agg="bnpo") == \
        pytest.approx([4 / 9, 1 / 9, 3 / 9, 1 / 9])
    assert glh.micro_weights(mask, glh.micro_batches(4, 3), agg="grpo") == \
        pytest.approx([3 / 4, 1 / 4])
    assert glh.micro_mean_weights(glh.micro_batches(4, 3)) == [0.5, 0.5]


@pytest.mark.parametrize("call, name", [
    (lambda: glh.micro_batches(0, 2), "n_rows"),
    (lambda: glh.micro_batches(4, 0), "micro_size"),
    (lambda: glh.micro_weights(torch.ones(4, 2), [slice(0, 2)]), "slices"),       # rows 2, 3
    (lambda: glh.micro_weights(torch.ones(4, 2), [slice(0, 3), slice(2, 4)]), "slices"),
    (lambda: glh.micro_weights(torch.ones(4, 2), "all"), "slices"),
    (lambda: glh.micro_weights(torch.ones(4), [slice(0, 4)]), "mask"),
    (lambda: glh.micro_weights(torch.full((4, 2), 0.5), [slice(0, 4)]), "mask"),
    (lambda: glh.micro_weights(torch.zeros(4, 2), [slice(0, 4)]), "mask"),
    (lambda: glh.micro_weights(torch.ones(4, 2), [slice(0, 4)], agg="mean"), "agg"),
    (lambda: glh.micro_mean_weights([]), "slices"),
    (lambda: glh.accumulate(3, [slice(0, 1)], [1.0]), "loss_of"),
    (lambda: glh.accumulate(lambda r: torch.ones(2), [slice(0, 1)], [1.0]), "loss_of"),
    (lambda: glh.accumulate(lambda r: torch.ones(()), [slice(0, 1)], [1.0, 2.0]), "weights")])
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        call()
