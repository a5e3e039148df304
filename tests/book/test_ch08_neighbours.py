"""Chapter 8's "The neighbouring methods": the section is there, before "Process supervision",
its table is ``gl.neighbours.table()`` as stored output, and each method's computation ran.

These read the notebook as committed (its stored outputs), so a section that was edited and
not re-executed fails here.
"""

from pathlib import Path

import nbformat
import pytest

import grpo_lab as gl

CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "08_production_knobs.ipynb"
HEADING = "## The neighbouring methods"
METHODS = [row.method for row in gl.neighbours.table()]
# each method's subsection starts with "### <name>"; VC-PPO / VAPO's is the critic's
SUBSECTIONS = {"REINFORCE++": "### REINFORCE++", "ReMax": "### ReMax", "RLOO": "### RLOO",
               "CISPO": "### CISPO", "SAPO": "### SAPO", "GSPO": "### GSPO",
               "critic": "### When does a critic win?"}


@pytest.fixture(scope="module")
def cells():
    return nbformat.read(CHAPTER, as_version=4).cells


def heading_index(cells, heading):
    found = [i for i, c in enumerate(cells)
             if c.cell_type == "markdown" and c.source.lstrip().startswith(heading)]
    assert len(found) == 1, (heading, found)
    return found[0]


def section(cells):
    """The cells from the section's heading to the next ``## `` heading."""
    start = heading_index(cells, HEADING)
    end = next(i for i in range(start + 1, len(cells))
               if cells[i].cell_type == "markdown" and cells[i].source.lstrip().startswith("## "))
    return start, end


def output_text(cell):
    """Everything a code cell's stored outputs say: streams, text/plain and text/markdown."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        for key in ("text/markdown", "text/plain"):
            parts.append(out.get("data", {}).get(key, ""))
    return "\n".join(parts)


def test_the_section_comes_right_before_process_supervision(cells):
    start, end = section(cells)
    assert cells[end].source.lstrip().startswith("## Process supervision")
    assert start < heading_index(cells, "## Process supervision")
    assert "*Depth: skip on a first reading.*" in cells[start].source


def test_every_method_has_a_subsection_in_table_order(cells):
    start, end = section(cells)
    assert set(METHODS) <= set(SUBSECTIONS), set(METHODS) - set(SUBSECTIONS)
    at = [heading_index(cells, SUBSECTIONS[m]) for m in METHODS] + [
        heading_index(cells, SUBSECTIONS["critic"])]
    assert at == sorted(at) and start < at[0] and at[-1] < end, at


def test_every_row_of_the_table_is_in_the_stored_table(cells):
    start, end = section(cells)
    tables = [c for c in cells[start:end] if c.cell_type == "code"
              and "gl.neighbours.table()" in c.source]
    assert len(tables) == 1
    stored = [out["data"]["text/markdown"] for out in tables[0].outputs
              if "text/markdown" in out.get("data", {})]
    assert len(stored) == 1, "the table cell has no stored Markdown output: execute the chapter"
    # two tables (so that each fits the page): what changes, then the code and its users
    blocks = [b.splitlines() for b in stored[0].split("\n\n")]
    assert len(blocks) == 2 and all(len(b) == 2 + len(METHODS) for b in blocks)  # header, rule, rows
    for row in gl.neighbours.table():
        what, code = (next((t for t in b if f"**{row.method}**" in t), None) for b in blocks)
        assert what is not None and code is not None, row.method
        for field in (row.arxiv, row.changes, row.grpo_lab):
            assert field in what, (row.method, field)
        assert row.line.replace("|", "\\|") in code, row.method
        for release, _where, setting in row.users:
            assert f"{release}: `{setting}`" in code, (row.method, release, setting)


@pytest.mark.parametrize("name", METHODS + ["critic"])
def test_each_method_has_its_source_and_a_computation_with_stored_output(cells, name):
    start, end = section(cells)
    headings = sorted(heading_index(cells, h) for h in SUBSECTIONS.values())
    first = heading_index(cells, SUBSECTIONS[name])
    last = next((h for h in headings if h > first), end)
    code = [c for c in cells[first:last] if c.cell_type == "code"]
    computations = [c for c in code if "show_source(" not in c.source]
    assert computations, f"{name}: no computation cell"
    for c in computations:
        assert c.get("execution_count") is not None, f"{name}: not executed"
        assert output_text(c).strip(), f"{name}: the computation has no stored output"
        assert "error" not in {out.get("output_type") for out in c.outputs}, name
    if name != "critic":                                          # each shows its plain face
        shown = [c for c in code if "show_source(" in c.source]
        assert len(shown) == 1 and output_text(shown[0]).lstrip().startswith("def "), name
