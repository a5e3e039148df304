"""Give the stored figures of chapters their alt text, without changing anything else.

The site is built from the chapters' stored outputs. A figure drawn after ``gl.book.chNN`` was
imported carries its alt text (``gl.book.frames.figure_alt``: its title, panels and axes) in
its output metadata, and ``_ext/grpo_site.py`` puts that on the page. A chapter stored before
that, or a figure drawn before the import, has none: this script executes a copy of each
chapter named (in a kernel that describes every figure from the start, through IPython's
``PYTHONSTARTUP``), then copies each figure's alt text into the stored chapter's output
metadata, figure by figure in order within each cell whose source is unchanged. Sources,
outputs and numbers stay as they were; only ``metadata["image/png"]["alt"]`` is written.

    python scripts/figure_alt_text.py chapters/05_rewards.ipynb [more chapters ...]

Re-executing a chapter with ``python scripts/execute_chapters.py`` stores every figure's alt
text (and the sliders' frames) as it runs; this script is for a chapter stored without them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

STARTUP = ('__import__("grpo_lab.book.frames", fromlist=["describe_figures"])'
           '.describe_figures()\n')


def figure_alts(notebook) -> dict:
    """cell index -> the alt texts of its PNG outputs, in order."""
    alts = {}
    for i, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                alt = output.get("metadata", {}).get("image/png", {}).get("alt")
                alts.setdefault(i, []).append(alt)
    return alts


def executed_copy(path: Path, timeout: int = 600):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as folder:
        startup = Path(folder) / "startup.py"
        startup.write_text(STARTUP, encoding="utf-8")
        before = os.environ.get("PYTHONSTARTUP")
        os.environ["PYTHONSTARTUP"] = str(startup)
        try:
            NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            if before is None:
                os.environ.pop("PYTHONSTARTUP", None)
            else:
                os.environ["PYTHONSTARTUP"] = before
    return notebook


def add_alt_text(path: Path) -> int:
    """Write the alt text of each stored figure of ``path``; return how many were written."""
    import nbformat

    stored = nbformat.read(path, as_version=4)
    fresh = executed_copy(path)
    alts = figure_alts(fresh)
    written = 0
    for i, cell in enumerate(stored.cells):
        if cell.cell_type != "code" or i >= len(fresh.cells):
            continue
        if fresh.cells[i].source != cell.source:
            raise ValueError(f"{path}: cell {i} differs after execution")
        pngs = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        found = alts.get(i, [])
        if len(found) != len(pngs):
            print(f"{path}: cell {i} stores {len(pngs)} figures, shows {len(found)} now: "
                  "skipped (re-execute the chapter)", file=sys.stderr)
            continue
        for output, alt in zip(pngs, found):
            if alt:
                output.setdefault("metadata", {}).setdefault("image/png", {})["alt"] = alt
                written += 1
    nbformat.write(stored, path)
    return written


def main(argv) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        path = Path(name)
        if path.suffix != ".ipynb" or not path.is_file():
            print(f"{name}: expected a chapter notebook (.ipynb)", file=sys.stderr)
            return 2
        print(f"{path}: {add_alt_text(path)} figures described")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
