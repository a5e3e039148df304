"""Chapter 4's pitfalls 6 and 7 (a bfloat16 update that rounds to nothing; float16 gradients
that underflow, and loss scaling): the two sections are there, in order, before the checklist;
each runs the ``gl.master_weights`` functions it teaches; and every number its prose quotes is
in the chapter's stored outputs, printed by the cell that glues it.

Read from the notebook's JSON (nbformat), so this needs no kernel: it checks what a reader
downloads, and fails when the chapter was edited without being re-executed.
"""

import re
from pathlib import Path

import nbformat
import pytest

CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "04_low_precision.ipynb"
PITFALL_6 = "## Pitfall 6: a bfloat16 update that rounds to nothing"
PITFALL_7 = "## Pitfall 7: float16 gradients that underflow, and loss scaling"
CHECKLIST = "## Pitfalls checklist"

# The functions each section must call in one of its code cells.
CALLS = {
    PITFALL_6: ("update_in", "lost_update_fraction", "adam_steps", "master_weight_run",
                "master_weight_figure"),
    PITFALL_7: ("flushed_fraction", "scaled_gradient", "dynamic_loss_scaling",
                "loss_scale_figure"),
}
# ... and the source each section lists (gl.show_source)
SHOWN = {PITFALL_6: "update_math", PITFALL_7: "scaled_math"}
USED = re.compile(r"\{glue:text\}`(\w+)(?::([^`]*))?`")
GLUED = re.compile(r"""\bglue\(\s*["'](\w+)["']""")
RECORD = "application/papermill.record/text/plain"


@pytest.fixture(scope="module")
def nb():
    return nbformat.read(CHAPTER, as_version=4)


def heading_index(nb, heading):
    found = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "markdown" and c.source.splitlines()[:1] == [heading]]
    assert len(found) == 1, f"{CHAPTER.name}: expected one cell opening with {heading!r}, found {found}"
    return found[0]


def section(nb, heading):
    """The cells from ``heading`` up to the next ## heading (its ### subsections included)."""
    start = heading_index(nb, heading)
    end = next((i for i in range(start + 1, len(nb.cells))
                if nb.cells[i].cell_type == "markdown"
                and re.match(r"## (?!#)", nb.cells[i].source)), len(nb.cells))
    return nb.cells[start:end]


def stream_text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def records(cell):
    """``{name: stored text}`` of the values ``cell`` glued, as its outputs hold them."""
    out = {}
    for o in cell.outputs:
        if o.get("output_type") == "display_data" and RECORD in o.get("data", {}):
            out[o["metadata"]["scrapbook"]["name"]] = o["data"][RECORD]
    return out


def glued_values(nb):
    """``{name: (value, cell)}`` for every value a code cell of the chapter glued."""
    values = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        stored = records(cell)
        for name in GLUED.findall(cell.source):
            assert name in stored, (f"{CHAPTER.name}: {name} is glued but the stored outputs do "
                                    f"not hold it; re-execute the chapter")
            text = stored[name]
            values[name] = (int(text) if re.fullmatch(r"-?\d+", text) else float(text), cell)
    return values


def test_the_two_sections_come_after_pitfall_5_and_before_the_checklist(nb):
    p5 = heading_index(nb, "## Pitfall 5: the training/inference mismatch")
    p6, p7, checklist = (heading_index(nb, h) for h in (PITFALL_6, PITFALL_7, CHECKLIST))
    assert p5 < p6 < p7 < checklist
    # nothing but pitfall 5's own ### subsections between it and pitfall 6
    between = [c.source.splitlines()[0] for c in nb.cells[p5 + 1:p6]
               if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert between == [], between


@pytest.mark.parametrize("heading", [PITFALL_6, PITFALL_7])
def test_each_section_runs_the_functions_it_teaches(nb, heading):
    code = "\n".join(c.source for c in section(nb, heading) if c.cell_type == "code")
    missing = [name for name in CALLS[heading] if not re.search(rf"\b{name}\(", code)]
    assert not missing, f"{heading}: no code cell calls {missing}"
    assert f"show_source(gl.master_weights.{SHOWN[heading]}," in code, SHOWN[heading]
    # and each section draws its figure from a run it computed, with the figure stored
    figures = [c for c in section(nb, heading) if c.cell_type == "code" and "_figure(" in c.source]
    assert figures and all(any("image/png" in o.get("data", {}) for o in c.outputs) for c in figures)


@pytest.mark.parametrize("heading", [PITFALL_6, PITFALL_7])
def test_every_number_the_prose_quotes_is_printed_by_the_cell_that_glues_it(nb, heading):
    values = glued_values(nb)
    quoted = [m for c in section(nb, heading) if c.cell_type == "markdown"
              for m in USED.findall(c.source)]
    assert len(quoted) >= 10, f"{heading}: only {len(quoted)} glued numbers in its prose"
    for name, spec in quoted:
        assert name in values, f"{heading}: the prose quotes {name}, which no cell glues"
        value, cell = values[name]
        assert "nbval-check-output" in cell.metadata.get("tags", []), (
            f"{name} is glued by a cell whose output nbval does not compare")
        shown = format(value, spec or "")
        assert shown in stream_text(cell), (
            f"{heading}: the prose shows {name} as {shown!r}, which its cell does not print "
            f"(a reader without the site's glue, on Colab, sees only the printed numbers)")


def test_the_glued_numbers_say_what_the_prose_says_of_them(nb):
    v = {name: value for name, (value, _) in glued_values(nb).items()}
    # pitfall 6: "the step vanishes" in bfloat16 (half a spacing > the step), and is never
    # lost in float32; float16's 3 more bits do not rescue it; the master copy moves fully
    assert v["p6_half_over_step"] > 1
    assert 0.95 < v["p6_lost_bf16"] < 1 and v["p6_lost_f32"] == 0.0
    assert v["p6_lost_bf16"] > v["p6_lost_f16"] > 0.5
    assert v["p6_moved_low"] < 0.05 and v["p6_moved_f16"] < 0.5
    assert abs(v["p6_moved_master"] - 1) < 1e-3
    assert v["p6_rms_copy"] < v["p6_rms_low"] / 5                # "only its own rounding"
    assert v["p6_rms_low"] == pytest.approx(v["p6_rms_full"], rel=0.05)   # "about the whole"
    assert v["p6_bytes"] == 16 and v["p6_gb_7b"] == 112
    # pitfall 7: float16 flushes, bfloat16 does not; scaling trades flushing for overflow;
    # the dynamic scaler skips some steps and keeps almost every gradient
    assert v["p7_flushed_f16"] > 0.1 and v["p7_flushed_bf16"] == 0.0
    assert v["p7_flushed_s16"] < v["p7_flushed_f16"] / 100
    assert 0 < v["p7_inf_s16"] < v["p7_inf_s28"]
    assert v["p7_rel_s16"] < v["p7_rel_bf16"] < v["p7_rel_s0"]   # float16 scaled: finest
    assert v["p7_skipped"] > 0 and v["p7_log2_min"] < v["p7_log2_max"] == 16
    assert v["p7_dyn_flushed"] < v["p7_dyn_plain"] / 100


def test_printed_constants_that_the_prose_states(nb):
    """Numbers the prose writes out (not glued) are printed by the chapter's cells."""
    printed = "\n".join(stream_text(c) for c in nb.cells if c.cell_type == "code")
    for text in ("= 16 bytes a parameter", "bfloat16 weights 2", "float32 master 4",
                 "Adam m, v (float32) 8", "bfloat16 gradients 2", "largest 65504",
                 "smallest normal 2^-14 = 6.10e-05", "smallest subnormal 2^-24 = 5.96e-08",
                 "init_scale=65536", "growth_factor=2", "backoff_factor=0.5",
                 "growth_interval=2000", "1000 Adam steps of lr 1e-6", "log10|g| ~ N(-6, 1.5)"):
        assert text in printed, f"{CHAPTER.name}: no cell prints {text!r}"


def test_the_checklist_and_the_summary_carry_both_pitfalls(nb):
    checklist = nb.cells[heading_index(nb, CHECKLIST)].source
    items = re.findall(r"^- \[ \] (.*(?:\n {6}.*)*)", checklist, re.M)
    assert any("master weights" in i for i in items), items
    assert any("loss scaler" in i and "bfloat16 needs no scaler" in i for i in items), items
    summary = nb.cells[0].source
    assert "master weights" in summary and "loss scaling" in summary


def test_the_chapter_uses_no_retired_symbol_for_rounding_error_or_the_std_guard(nb):
    """Cells 4 and 9 once wrote the rounding error as a bare \\delta and the std guard as
    std + \\varepsilon; now they are e and \\epsilon_{\\text{std}} (intro.md's notation)."""
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert not re.search(r"\\delta(?![_a-zA-Z])", prose)
    assert not re.search(r"(?:\\operatorname\{std\}\([^)$]*\)|\\sigma|\bstd\b)\s*\+\s*\\varepsilon", prose)
    for old in ("$\\varepsilon$ is all", "$\\varepsilon$ survives", "adds $\\varepsilon$ there"):
        assert old not in prose, old
    assert r"\operatorname{std}(\mathbf r) + \epsilon_{\text{std}}" in prose

