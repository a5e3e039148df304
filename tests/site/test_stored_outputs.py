"""The test run's site is built from the chapters' stored outputs (tests/conftest.py), so each
chapter must store what only the book build's kernel used to draw: every static slider's
frames and every figure's alt text (scripts/execute_chapters.py writes both). nbval proves
them current in the same run (tests/nbval_strict.py, whose check is tested here too)."""

import json
from pathlib import Path

import pytest

from tests import nbval_strict

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
RERUN = "re-execute it with python scripts/execute_chapters.py"


def code_cells(path):
    return [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def is_slider(cell) -> bool:
    source = "".join(cell["source"])
    return "gl.book." in source and "_explorer(" in source


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_stores_its_slider_frames_and_its_figures_alt_text(path):
    cells = code_cells(path)
    no_frames = [i for i, c in enumerate(cells)
                 if is_slider(c) and nbval_strict.stored_frame_alt(c.get("outputs", [])) is None]
    no_alt = [i for i, c in enumerate(cells)
              if not all(nbval_strict.figure_alts(c.get("outputs", [])))]
    assert not no_frames, f"{path.name}: code cells {no_frames} (sliders) store no frames; {RERUN}"
    assert not no_alt, f"{path.name}: code cells {no_alt} store a figure without alt text; {RERUN}"


def test_the_book_has_sliders_to_check():
    assert sum(is_slider(c) for path in CHAPTERS for c in code_cells(path)) >= 5


def png(alt=None):
    out = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "fig"},
           "metadata": {}}
    if alt:
        out["metadata"]["image/png"] = {"alt": alt}
    return out


def slider(alt):
    page = f'<div class="gl-frames"><img class="gl-frames-figure" src="x" alt="{alt}"></div>'
    return {"source": "gl.book.ch01.advantage_explorer(G=8)", "outputs": [
        {"output_type": "display_data", "metadata": {},
         "data": {"text/html": page, "text/plain": "VBox()"}}]}


def test_nbval_strict_finds_stale_frames_and_alt_texts():
    """The check nbval_strict adds to each chapter cell nbval runs, on cells made to fail it:
    a slider whose stored start frame is not what the chapter draws now, a slider cell stored
    without frames, a checked cell whose figure's alt text changed."""
    stale = nbval_strict.stale_site_outputs
    fresh_live = [png("G=8: advantages span [-1.29, 2.65]")]
    assert stale(slider("G=8: advantages span [-1.29, 2.65] (G=8, spread=1)"), fresh_live,
                 checked=False) == []
    assert "start frame" in stale(slider("G=8: advantages span [-1.30, 2.65] (G=8)"),
                                  fresh_live, checked=False)[0]
    bare = {"source": "gl.book.ch01.advantage_explorer(G=8)", "outputs": []}
    assert "no static frames" in stale(bare, fresh_live, checked=False)[0]
    figure = {"source": "plt.plot(x)", "outputs": [png("loss falls to 0.12")]}
    assert stale(figure, [png("loss falls to 0.12")], checked=True) == []
    assert "alt texts" in stale(figure, [png("loss falls to 0.31")], checked=True)[0]
    assert stale(figure, [png("loss falls to 0.31")], checked=False) == []  # not nbval-checked
    assert stale(figure, [png()], checked=True) == []   # a kernel that describes nothing
