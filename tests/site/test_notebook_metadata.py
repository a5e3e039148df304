"""Hidden solutions stay collapsed where a reader opens the notebook, not only on the site.

The site hides a cell's input by its ``hide-input`` tag; JupyterLab reads
``metadata.jupyter.source_hidden`` and Colab ``metadata.cellView == "form"`` (titled by a
``# @title`` first line). ``scripts/collapse_solutions.py`` writes all three; these tests
check that every chapter's hidden cells carry them, and that the check fails on a notebook
without them.
"""

import copy
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))

# Chapters whose hidden cells are not collapsed yet (their authors are editing them): the
# script is applied to them at the end, and this set is emptied then. Listed, never skipped
# silently: the test below prints them.
NOT_YET_COLLAPSED: set = set()      # empty: every chapter's hidden cells are collapsed


def load_script():
    spec = importlib.util.spec_from_file_location("collapse_solutions",
                                                  ROOT / "scripts" / "collapse_solutions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = load_script()


def test_the_not_yet_collapsed_chapters_exist():
    names = {p.name for p in CHAPTERS}
    assert NOT_YET_COLLAPSED <= names, NOT_YET_COLLAPSED - names
    print(f"not yet collapsed (the script is applied to them at the end): "
          f"{sorted(NOT_YET_COLLAPSED) or 'none'}")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_hidden_cell_is_collapsed_in_jupyterlab_and_colab(path):
    cells = script.hidden_cells(json.loads(path.read_text(encoding="utf-8")))
    if path.name in NOT_YET_COLLAPSED:
        assert script.check([path]), (f"{path.name} is collapsed now: take it out of "
                                      "NOT_YET_COLLAPSED, so that it stays checked")
        print(f"{path.name}: listed in NOT_YET_COLLAPSED, {len(cells)} hidden cell(s) unchecked")
        pytest.skip(f"{path.name} is listed in NOT_YET_COLLAPSED")
    assert cells, f"{path.name}: no code cell tagged hide-input (no hidden solution?)"
    for i, cell in cells:
        meta = cell["metadata"]
        assert meta.get("jupyter", {}).get("source_hidden") is True, (path.name, i, meta)
        assert meta.get("cellView") == "form", (path.name, i, meta)
        first = "".join(cell["source"]).split("\n", 1)[0]
        assert first == script.title_for(cell), (path.name, i, first)
    assert script.check([path]) == []


def bare_copy(tmp_path, name="06_training_loop.ipynb"):
    """A copy of a chapter whose hidden cells have none of the collapse metadata."""
    notebook = json.loads((ROOT / "chapters" / name).read_text(encoding="utf-8"))
    for _, cell in script.hidden_cells(notebook):
        cell["metadata"].pop("jupyter", None)
        cell["metadata"].pop("cellView", None)
        lines = "".join(cell["source"]).split("\n")
        if lines[0].replace(" ", "").startswith("#@title"):
            lines = lines[1:]
        cell["source"] = "\n".join(lines)
    path = tmp_path / name
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path, notebook


def test_the_check_fails_on_a_notebook_without_the_metadata(tmp_path, capsys):
    path, notebook = bare_copy(tmp_path)
    hidden = script.hidden_cells(notebook)
    assert hidden
    assert script.main(["--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.count("lacks") == len(hidden), out
    assert "metadata.jupyter.source_hidden" in out and "cellView" in out and "@title" in out
    # One piece missing is enough to fail: each in turn.
    for drop in ("jupyter", "cellView"):
        one = tmp_path / f"one_{drop}.ipynb"
        shutil.copy(path, one)
        script.main([str(one)])
        fixed = json.loads(one.read_text(encoding="utf-8"))
        for _, cell in script.hidden_cells(fixed):
            cell["metadata"].pop(drop)
        one.write_text(json.dumps(fixed), encoding="utf-8")
        assert script.check([one]), drop


def test_the_script_collapses_each_hidden_cell_once_and_nothing_else(tmp_path, capsys):
    path, before = bare_copy(tmp_path)
    assert script.main([str(path)]) == 0
    changed = capsys.readouterr().out
    assert changed.count("added") == len(script.hidden_cells(before)), changed
    after = json.loads(path.read_text(encoding="utf-8"))
    assert script.check([path]) == []
    # Only the hidden cells changed, and in them only the metadata and the title line.
    for old, new in zip(before["cells"], after["cells"]):
        if old["cell_type"] == "code" and "hide-input" in old["metadata"].get("tags", []):
            expect = copy.deepcopy(old)
            expect["metadata"]["jupyter"] = {"source_hidden": True}
            expect["metadata"]["cellView"] = "form"
            assert "".join(new["source"]) == script.TITLE + "\n" + "".join(old["source"])
            expect["source"], new = None, {**new, "source": None}
            assert new == expect
        else:
            assert new == old
    # Idempotent: a second run changes nothing, byte for byte.
    text = path.read_text(encoding="utf-8")
    assert script.main([str(path)]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == text


def test_the_script_names_a_missing_notebook(tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main([str(tmp_path / "nope.ipynb")])
    assert "notebooks: expected .ipynb files" in capsys.readouterr().err
