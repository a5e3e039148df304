"""Keep the chapters' hidden solutions collapsed in JupyterLab and Colab too, not only on the site.

The site hides a code cell's input when the cell carries the ``hide-input`` tag (Jupyter Book's
convention). A notebook opened in Jupyter or Colab ignores that tag, so the same cell also needs
what those front ends read when they open a notebook:

- JupyterLab (and Notebook 7, which is built on it): ``metadata.jupyter.source_hidden: true``,
  nbformat's field for a collapsed input (``ICodeCellJupyterMetadata.source_hidden`` in
  JupyterLab's ``@jupyterlab/nbformat``; honoured on load since JupyterLab 4.0, jupyterlab#13611).
  The input shows as a collapsed bar; a click on it opens the code.
- Colab: ``metadata.cellView: "form"``, Colab's form view, which hides the code behind a
  "Show code" button. A form is titled by a ``# @title`` first line, so the cell also starts with
  ``# @title Solution (click to show)`` (chapter 9's deck cells: ``# @title The cards ...``):
  the title says what is folded there.

Every code cell tagged ``hide-input`` gets all three; nothing else is touched (sources,
outputs, execution counts and cell ids stay), so a chapter stored as one run stays one. The
title line is a comment: it changes no output, so nbval and the site see the same cell.

    python scripts/collapse_solutions.py                   # every chapter
    python scripts/collapse_solutions.py chapters/06_training_loop.ipynb [...]
    python scripts/collapse_solutions.py --check [...]     # exit 1 and list the cells missing it

Running it twice changes nothing the second time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAG = "hide-input"
TITLE = "# @title Solution (click to show)"
#: chapter 9's deck cells hide only the call that shows the cards, not a solution
DECK_TITLE = "# @title The cards (click to show the code that shows them)"
#: chapter 6b's hints: a first draft with one usual mistake, after each blank drill stub
HINT_TITLE = "# @title Hint: a first draft with one usual mistake (click to show)"


def title_for(cell) -> str:
    """The '# @title' line a hidden cell gets: what is folded there."""
    if source_text(cell).lstrip("\n").startswith(HINT_TITLE):
        return HINT_TITLE
    return DECK_TITLE if "gl.deck.show(" in source_text(cell) else TITLE


def source_text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def hidden_cells(notebook):
    """(index, cell) of every code cell tagged ``hide-input``."""
    return [(i, c) for i, c in enumerate(notebook["cells"])
            if c["cell_type"] == "code" and TAG in c.get("metadata", {}).get("tags", [])]


def has_title(cell) -> bool:
    first = source_text(cell).lstrip("\n").split("\n", 1)[0].replace(" ", "")
    return first.startswith("#@title")


def missing(cell) -> list[str]:
    """What the cell lacks of the collapse metadata, by name; empty when it has it all."""
    meta = cell.get("metadata", {})
    gaps = []
    if meta.get("jupyter", {}).get("source_hidden") is not True:
        gaps.append("metadata.jupyter.source_hidden")
    if meta.get("cellView") != "form":
        gaps.append('metadata.cellView == "form"')
    if not has_title(cell):
        gaps.append("a '# @title' first line")
    return gaps


def collapse(cell) -> list[str]:
    """Give one cell the collapse metadata; return what was added (empty if nothing)."""
    gaps = missing(cell)
    meta = cell.setdefault("metadata", {})
    if "metadata.jupyter.source_hidden" in gaps:
        meta.setdefault("jupyter", {})["source_hidden"] = True
    if 'metadata.cellView == "form"' in gaps:
        meta["cellView"] = "form"
    if "a '# @title' first line" in gaps:
        src, title = cell.get("source", ""), title_for(cell)
        if isinstance(src, list):
            cell["source"] = [title + "\n", *src]
        else:
            cell["source"] = title + "\n" + src
    return gaps


def check(paths) -> list[str]:
    """One line per hidden cell that lacks the metadata: 'chapter: cell N (id): what'."""
    lines = []
    for path in paths:
        notebook = json.loads(Path(path).read_text(encoding="utf-8"))
        for i, cell in hidden_cells(notebook):
            gaps = missing(cell)
            if gaps:
                lines.append(f"{Path(path).name}: cell {i} ({cell.get('id')}) lacks "
                             + ", ".join(gaps))
    return lines


def apply(paths) -> list[str]:
    """Collapse every hidden cell of ``paths`` in place; one line per cell changed."""
    lines = []
    for path in paths:
        path = Path(path)
        notebook = json.loads(path.read_text(encoding="utf-8"))
        changed = []
        for i, cell in hidden_cells(notebook):
            added = collapse(cell)
            if added:
                changed.append(f"{path.name}: cell {i} ({cell.get('id')}): added "
                               + ", ".join(added))
        if changed:           # nbformat's layout: indent 1, sorted keys, non-ASCII kept
            text = json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False)
            path.write_text(text + "\n", encoding="utf-8")
        lines += changed
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="chapters to treat (default: every chapters/*.ipynb)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 and list the hidden cells that lack it")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    for path in paths:
        if not Path(path).is_file():
            parser.error(f"notebooks: expected .ipynb files, got {str(path)!r} (no such file)")
    if args.check:
        lines = check(paths)
        print("\n".join(lines) if lines else
              f"every {TAG} cell of {len(paths)} notebook(s) is collapsed in JupyterLab and Colab")
        return 1 if lines else 0
    lines = apply(paths)
    print("\n".join(lines) if lines else "nothing to change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
