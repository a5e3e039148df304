"""THE MATRIX: TRL 1.16.0's GRPOTrainer option by option, equal to the book through the mapping.

For every option of gl.hf.trl_matrix.OPTIONS (every loss_type, both IS levels, the three reward
scalings, the KL with and without its bias correction, the clip's epsilons and delta, the
entropy and truncation masks, two reward functions normalised then summed, accumulation over
micro-batches of different token counts, steps_per_generation, the four vLLM IS modes and the
off-policy mask), TRL's real trainer trains a fresh one-layer in-code model (no warm start: the
rewards are a deterministic hash of the decoded text, so they vary across each group) for one
optimizer step, or two where the option needs ratios off 1; each micro-batch's loss and
gradient (before the clip) and each generation's advantages are recomputed from
gl.hf.trl_knobs(trainer.args) with gl.hf.trl_loss and gl.hf.trl_advantages: loss to 1e-6,
gradient to 1e-6 relative to its largest entry where that exceeds 1, advantages to 1e-5. Each
row must also show that its option acted (trl_matrix.needs: a non-zero KL term, ratios off 1,
a truncated completion, masked entries, ragged micro-batches, ratios outside the clip).

Chapter 8's "TRL, option by option" shows the record these runs reproduce, and says that each
run exercised its option: that is the ``needs`` check here.
"""

import functools
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl = pytest.importorskip("trl")

from grpo_lab.hf import trl_matrix as M  # noqa: E402


@pytest.fixture(scope="module")
def prepared():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)             # a 1-layer model: one thread, the other core is free
    yield M.setup(0)                     # tokenizer, task and model, built once for the module
    torch.set_num_threads(threads)


@functools.lru_cache(maxsize=None)
def _row(name):
    return M.run_option(name, M.setup(0))


@pytest.mark.parametrize("name", list(M.OPTIONS))
def test_trl_option_equals_the_books_functions(name, prepared):
    row = _row(name)
    print(f"{name}: loss {row['loss']:.1e} grad {row['grad']:.1e} adv {row['adv']:.1e}")
    assert row["calls"] == row["steps"] * row["accumulation"], row   # every micro-batch seen
    assert row["grad_max"] > 1e-3, row                         # a gradient worth checking
    assert row["rewards_distinct"] > 1, row                    # rewards vary: advantages != 0
    assert row["loss"] < M.TOL and row["adv"] < M.ADV_TOL, row
    assert row["grad"] < M.TOL * max(1.0, row["grad_max"]), row    # relative above |g| = 1
    assert M.passes(row)
    assert M.unexercised(row) == [], row                       # the option really acted


def test_gspo_is_run_at_the_sequence_level_with_its_clip_acting(prepared, tmp_path):
    import grpo_lab.hf as glh

    name = "level=sequence (GSPO)"
    fields = M.OPTIONS[name][0]
    row = _row(name)
    assert fields["importance_sampling_level"] == "sequence" and fields["loss_type"] == "grpo"
    assert M.passes(row) and row["steps"] == 2
    assert row["ratio_dev"] > 1e-3          # the second step's ratios are off 1 ...
    assert row["clipped"] > 0               # ... and some s_i leave [1 - 3e-4, 1 + 4e-4]
    from trl import GRPOConfig
    knobs = glh.trl_knobs(GRPOConfig(output_dir=str(tmp_path), report_to="none",
                                          use_cpu=True, **fields))
    assert (knobs.level, knobs.eps_low, knobs.eps_high) == ("sequence", 3e-4, 4e-4)


def test_needs_names_what_each_option_must_show(prepared):
    import grpo_lab.hf as glh

    k = glh.TRLKnobs(beta=0.04, num_iterations=2, mask_truncated=True, entropy_quantile=0.2,
                     is_mode="token_mask", off_policy_threshold=0.1, accumulation=2)
    assert set(M.needs(k)) == {"kl", "ratio_dev", "truncated", "kept", "entropy_dropped",
                               "is_zeroed", "off_policy_dropped", "ragged_micro"}
    assert M.needs(glh.TRLKnobs()) == ()
    assert M.unexercised(dict(needs=["kl", "clipped"], kl=0.3, clipped=0)) == ["clipped"]


def test_the_record_holds_every_option_within_tolerance(prepared):
    if not M.RECORD.exists():       # written by: python -m grpo_lab.hf.trl_matrix --write
        pytest.skip("trl_matrix.json not written yet")
    record = json.loads(M.RECORD.read_text())
    assert record["trl_version"] == trl.__version__
    assert [r["option"] for r in record["rows"]] == list(M.OPTIONS)
    for row in record["rows"]:
        assert M.passes(row) and M.unexercised(row) == [], row
        assert row["where"].startswith("grpo_trainer.py:") and row["book"] and row["trl"]
        assert row["loss"] < record["tolerance"]["loss"] and row["adv"] < record["tolerance"]["adv"]
