"""Every chapter's stored ``show_source`` output is the package's code as it stands.

A chapter shows the package's real source (``gl.show_source``) so that the page and the code
cannot drift apart. The site re-executes the chapters, but the notebook a reader downloads or
opens on Colab carries the outputs stored in the repository; when a function changes and its
chapter is not re-executed, that listing is stale. This test reads every chapter, recomputes
each ``show_source`` cell and compares it with the stored output, so a stale listing fails here
and names the chapter, the cell and the first differing line.
"""

import ast
import difflib
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

import grpo_lab as gl
from grpo_lab.book.source import show_source

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))


def show_source_cells():
    """(chapter, cell index, source, stored text/plain) for every code cell calling show_source."""
    for path in CHAPTERS:
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or "show_source(" not in cell.source:
                continue
            stored = [out["data"]["text/plain"] for out in cell.outputs
                      if out.get("output_type") == "execute_result"
                      and "text/plain" in out.get("data", {})]
            yield pytest.param(path.name, index, cell.source, stored,
                               id=f"{path.stem}-cell{index}")


CELLS = list(show_source_cells())


def test_every_chapter_is_read_and_the_listings_are_found():
    """The collection itself cannot silently find nothing: all nine chapters are read, and
    the chapters that teach code (1 to 8) each show some of it."""
    assert len(CHAPTERS) >= 9, [p.name for p in CHAPTERS]
    shown = {param.values[0][:2] for param in CELLS}
    assert {f"{n:02d}" for n in range(1, 9)} <= shown, sorted(shown)


def evaluate(source):
    """Run a show_source cell (imports, then one expression) and return what it displays as
    text (the text/plain that Jupyter stores for it)."""
    from IPython.core.formatters import format_display_data

    tree = ast.parse(source.strip(), mode="exec")
    *imports, last = tree.body
    assert isinstance(last, ast.Expr) and all(
        isinstance(node, (ast.Import, ast.ImportFrom)) for node in imports), (
        "a show_source cell should be imports and then one expression, so this test can "
        f"recompute it: {source!r}")
    namespace = {"gl": gl, "show_source": show_source}
    exec(compile(ast.Module(body=imports, type_ignores=[]), "<cell>", "exec"), namespace)
    value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
    data, _ = format_display_data(value)
    return data["text/plain"]


@pytest.mark.parametrize("chapter, index, source, stored", CELLS)
def test_stored_show_source_output_matches_the_code(chapter, index, source, stored):
    if "torch" in source or "loss_fused" in source or "gl.train." in source \
            or "tiny_policy" in source:
        if importlib.util.find_spec("torch") is None:
            pytest.skip("this listing is of a torch module; torch is not installed")
    assert len(stored) == 1, (
        f"{chapter} cell {index}: expected one stored output, found {len(stored)}; "
        "re-execute the chapter")
    now = evaluate(source)
    if stored[0] != now:
        diff = "".join(difflib.unified_diff(stored[0].splitlines(True), now.splitlines(True),
                                            "stored in the notebook", "the code now", n=1))
        pytest.fail(f"{chapter} cell {index} ({source.strip()}): the stored listing is "
                    f"stale; re-execute the chapter.\n{diff}")


PRIVATE = re.compile(r"(?<![\w.])_[A-Za-z]\w*|(?<=\.)_[A-Za-z]\w*")   # _name or x._name


@pytest.mark.parametrize("chapter, index, source, stored", CELLS)
def test_no_listing_shows_a_private_name(chapter, index, source, stored):
    """DESIGN: a chapter never shows a private name. A listing that calls a helper with a
    leading underscore sends the reader to a name the package does not offer; the helper gets
    a public name and a docstring instead."""
    found = sorted({m.group(0) for text in stored for m in PRIVATE.finditer(text)})
    assert not found, f"{chapter}, cell {index}: {found}"
