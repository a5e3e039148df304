"""Chapter 8's "TRL, option by option": the table is the matrix's record, the knob map's TRL
cells name what the runs set and agree with the record, the TRL preset is what the public
mapping reads from TRL's defaults, and the CISPO, GSPO and bnpo statements say what the runs
showed. These read the notebook as committed (its stored outputs): a section edited and not
re-executed, or a record rewritten and not re-rendered, fails here."""

import json
from pathlib import Path

import nbformat
import pytest

import grpo_lab as gl
from grpo_lab.book import ch08

CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "08_production_knobs.ipynb"
HEADING = "## TRL, option by option"


@pytest.fixture(scope="module")
def cells():
    return nbformat.read(CHAPTER, as_version=4).cells


@pytest.fixture(scope="module")
def record():
    return ch08.trl_matrix_record()


def section(cells):
    start = next(i for i, c in enumerate(cells) if c.source.startswith(HEADING))
    end = next(i for i in range(start + 1, len(cells)) if cells[i].source.startswith("## "))
    return cells[start:end]


def outputs(cell):
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", "") if o.output_type == "stream"
                   else o.get("data", {}).get("text/markdown", ""))
    return "".join(out)


def test_the_record_covers_every_option_within_tolerance(record):
    tol = record["tolerance"]
    assert tol == dict(loss=1e-6, grad=1e-6, adv=1e-5)
    assert len(record["rows"]) == 27 and len({r["option"] for r in record["rows"]}) == 27
    for r in record["rows"]:
        assert r["loss"] < tol["loss"] and r["adv"] < tol["adv"], r
        assert r["grad"] < tol["grad"] * max(1.0, r["grad_max"]), r
        assert r["where"].startswith("grpo_trainer.py:") and r["trl"] and r["book"], r


def test_the_chapter_shows_the_record_as_its_table(cells, record):
    shown = "".join(outputs(c) for c in section(cells))
    assert ch08.trl_matrix_markdown(record) in shown, \
        "re-execute chapter 8: its table is not the record's"
    for r in record["rows"]:
        assert f"`{r['option']}`" in shown


def test_trl_matrix_markdown_has_one_row_per_option(record):
    table = ch08.trl_matrix_markdown(record).splitlines()
    assert len(table) == 2 + len(record["rows"])
    assert all(line.count(" | ") == 4 for line in table[2:])
    worse = dict(record, rows=[dict(record["rows"][0], loss=3e-3)])
    assert "3e-03 /" in ch08.trl_matrix_markdown(worse)


def test_every_backed_map_row_exists_and_its_trl_cell_names_the_field(record):
    rows = {row.concept: row for row in gl.presets.KNOB_MAP}
    options = {r["option"] for r in record["rows"]}
    # what a TRL cell backed by an option names: the option's field, or its formula's constant
    field = {"scale_rewards": ("scale_rewards", "1e-4"),
             "normalize": ("multi_objective_aggregation",), "epsilon": ("epsilon",),
             "delta": ("delta",), "beta": ("use_bias_correction_kl", "k3", "beta"),
             "loss_type": ("loss_type", "`dapo`"), "gradient_accumulation_steps": ("dapo",),
             "steps_per_generation": ("steps_per_generation", "generation batch"),
             "level": ("importance_sampling_level",), "vllm": ("vllm_importance_sampling",),
             "mask_truncated": ("mask_truncated_completions",)}
    for concept, backing in ch08.TRL_MAP_OPTIONS.items():
        assert concept in rows, concept
        trl_text = rows[concept].cells()[1][0]
        for option in backing:
            assert option in options, option
            names = [n for key, f in field.items() if option.startswith(key) for n in f]
            assert names and any(n in trl_text for n in names), (concept, option, trl_text)


def test_the_backing_verdict_reads_the_tolerances(record):
    concepts = list(ch08.TRL_MAP_OPTIONS) + ["Group size G"]
    verdicts = {c: v for c, _, v in ch08.trl_map_backing(record, concepts)}
    assert verdicts["Group size G"] == "read, not run"
    assert set(verdicts.values()) == {"run, equal", "read, not run"}
    off = dict(record, rows=[dict(r, adv=1.0) if r["option"] == "scale_rewards=batch" else r
                             for r in record["rows"]])
    assert dict((c, v) for c, _, v in ch08.trl_map_backing(off, concepts))[
        "Group vs batch std"] == "run, DIFFERS"


def test_the_map_states_cispo_gspo_and_bnpo_as_the_runs_did():
    rows = {row.concept: row.cells()[1][0] for row in gl.presets.KNOB_MAP}
    assert "`epsilon_high=5.0`" in rows["Loss aggregation"] and "itself" in rows["Loss aggregation"]
    gspo = rows["Sequence-level ratio (GSPO)"]
    assert '`loss_type="grpo"`' in gspo and "3e-4" in gspo and "more than one" in gspo
    assert "not `dapo`" in rows["Which tokens a token mean counts"]


def test_the_trl_preset_is_what_the_mapping_reads_from_trls_defaults():
    glh = pytest.importorskip("grpo_lab.hf")
    k = glh.trl_knobs(ch08.trl_config())
    p = gl.presets.PRESETS["trl"]
    assert (k.eps_low, k.eps_high, k.dual_clip, k.beta) == (p.eps_low, p.eps_high, p.dual_clip,
                                                            p.beta)
    assert (k.agg, k.level, k.num_iterations, k.mask_truncated, k.group_size) == \
        (p.agg, p.level, p.num_iterations, p.mask_truncated, p.group_size)
    assert k.kl_bias_correction == p.kl_bias_correction
    assert {**k.advantages, "baseline": "mean"} == p.advantages


def test_the_chapter_restates_cispo_gspo_and_bnpo(cells):
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    cispo = next(c.source for c in cells if c.source.startswith("### CISPO"))
    gspo = next(c.source for c in cells if c.source.startswith("### GSPO"))
    assert 'epsilon_high=5.0' in cispo and "3110" in cispo and "0.2" in cispo
    assert 'loss_type="grpo"' in gspo and "3e-4" in gspo and "more than one" in gspo
    assert "3158-3162" in text and "micro_mean_weights" in text
    assert "python -m grpo_lab.hf.trl_matrix --report" in text
    demo = "".join(outputs(c) for c in section(cells))
    assert "refused: epsilon_high" in demo and "clip/grpo, level sequence" in demo
    assert "TRL's bnpo weighs them 0.500 / 0.500" in demo


def test_the_record_file_is_the_one_trl_matrix_writes():
    assert ch08.TRL_RECORD == Path(gl.__file__).parent / "hf" / "trl_matrix.json"
    assert json.loads(ch08.TRL_RECORD.read_text())["trl_version"] == "1.16.0"
