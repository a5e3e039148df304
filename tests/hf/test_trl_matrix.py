"""THE MATRIX: TRL 1.16.0's GRPOTrainer option by option, equal to the book through the mapping.

For every option of gl.hf.trl_matrix.OPTIONS (every loss_type, both IS levels, the three reward
scalings, the KL with and without its bias correction, the clip's epsilons and delta, the
entropy and truncation masks, two reward functions normalised then summed, accumulation over
micro-batches of different token counts, steps_per_generation, the four vLLM IS modes and the
off-policy mask), TRL's real trainer trains the chapter's in-code model for two optimizer steps;
each micro-batch's loss and gradient (before the clip) and each generation's advantages are
recomputed from gl.hf.trl_knobs(trainer.args) with gl.hf.trl_loss and gl.hf.trl_advantages:
loss and gradient to 1e-6, advantages to 1e-5.
"""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl = pytest.importorskip("trl")

from grpo_lab.hf import trl_matrix as M  # noqa: E402


@pytest.fixture(scope="module")
def prepared():
    return M.setup(0)


@pytest.mark.parametrize("name", list(M.OPTIONS))
def test_trl_option_equals_the_books_functions(name, prepared):
    row = M.run_option(name, prepared)
    print(f"{name}: loss {row['loss']:.1e} grad {row['grad']:.1e} adv {row['adv']:.1e}")
    assert row["calls"] >= 2                                   # two optimizer steps recorded
    assert row["grad_max"] > 1e-3                              # a gradient worth checking
    assert row["loss"] < M.TOL and row["adv"] < M.ADV_TOL, row
    assert row["grad"] < M.TOL * max(1.0, row["grad_max"]), row    # relative above |g| = 1
    assert M.passes(row)


def test_the_record_holds_every_option_within_tolerance():
    if not M.RECORD.exists():       # written by: python -m grpo_lab.hf.trl_matrix --write
        pytest.skip("trl_matrix.json not written yet")
    record = json.loads(M.RECORD.read_text())
    assert record["trl_version"] == trl.__version__
    assert [r["option"] for r in record["rows"]] == list(M.OPTIONS)
    for row in record["rows"]:
        assert M.passes(row), row
        assert row["where"].startswith("grpo_trainer.py:") and row["book"]
