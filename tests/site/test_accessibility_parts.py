"""The parts of issue 31 that need no browser: each figure's alt text (gl.book.frames), the
slider's aria-valuetext, and what _ext/grpo_site.py does to a page (checklist boxes named,
slider frames moved to files, alt text read from the executed notebook)."""

import base64
import hashlib
import importlib.util
import json
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grpo_lab.book import frames  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ext():
    spec = importlib.util.spec_from_file_location("grpo_site", ROOT / "_ext" / "grpo_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_figure(a=1, *, fig=None):
    fig = fig or plt.figure(figsize=(2, 1))
    fig.clear()
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, a])
    ax.set(title=f"slope {a}: steeper with $\\alpha$", xlabel="x", ylabel="y")
    return fig


def test_alt_text_is_what_the_figure_states():
    fig, (left, right) = plt.subplots(1, 2)
    fig.suptitle("Finding: $\\beta$ matters")
    left.set(title="left panel", xlabel="step", ylabel="reward")
    right.set_ylabel("KL")
    assert frames.figure_alt(fig) == ("Finding: beta matters. 2 panels: (1) left panel, reward "
                                      "against step; (2) KL.")
    plt.close(fig)
    bare = plt.figure()
    assert frames.figure_alt(bare) == "A figure without a title."
    plt.close(bare)


def test_each_slider_frame_has_its_own_alt_text_and_the_slider_its_value():
    grid = frames.render_frames(tiny_figure, {"a": [1, 2]}, {"a": 2})
    assert grid.alts == ("Slope 1: steeper with alpha, y against x.",
                         "Slope 2: steeper with alpha, y against x.")
    page = frames.frames_html(grid)
    assert 'alt="Slope 2: steeper with alpha, y against x. (a=2)"' in page
    assert re.search(r'<input type="range"[^>]*aria-valuetext="2"', page)
    data = json.loads(re.search(r'class="gl-frames-data">(.*?)</script>', page, re.S).group(1))
    assert data["alts"] == list(grid.alts) and "figure by" not in page


def test_describe_figures_gives_a_shown_figure_its_alt_text_as_metadata():
    IPython = pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    from IPython.core.pylabtools import select_figure_formats

    shell = InteractiveShell.instance()
    select_figure_formats(shell, {"png"})  # as the inline backend does in a kernel
    assert frames.describe_figures(shell)
    fig = tiny_figure(3)
    data, metadata = shell.display_formatter.format(fig)
    plt.close(fig)
    assert "image/png" in data and metadata["image/png"]["alt"].startswith("Slope 3")
    assert IPython  # (the import is the skip condition)


def test_the_build_names_checklist_boxes_and_moves_frames_to_files(ext, tmp_path):
    page = ('<li class="task-list-item"><p><input class="task-list-item-checkbox" '
            'disabled="disabled" type="checkbox"> Statistics along <code>axis=-1</code> '
            '\\(G\\)</p></li>')
    named = ext.TASK_BOX.sub(ext.name_task_box, page)
    assert 'aria-label="to check: Statistics along axis=-1 G"' in named
    assert ext.TASK_BOX.sub(ext.name_task_box, named) == named      # once only

    grid = frames.render_frames(tiny_figure, {"a": [1, 2]}, {"a": 2})
    (tmp_path / "chapters").mkdir()
    page = tmp_path / "chapters" / "x.html"
    html = ext.frames_to_files(frames.frames_html(grid), tmp_path, page)
    assert 'src="data:' not in html
    data = json.loads(re.search(r'class="gl-frames-data">(.*?)</script>', html, re.S).group(1))
    assert len(data["files"]) == 2 and "images" not in data
    for file, png in zip(data["files"], grid.images):
        assert file.startswith("../_images/gl-frames/")
        assert (tmp_path / "chapters" / file).resolve().read_bytes() == png
    shown = re.search(r'<img class="gl-frames-figure" src="([^"]+)"', html).group(1)
    assert shown == data["files"][grid.shown(grid.start)]


def test_the_build_reads_alt_text_from_the_executed_notebook(ext, tmp_path):
    png = b"\x89PNG not really"
    notebook = {"cells": [{"cell_type": "code", "outputs": [
        {"data": {"image/png": base64.b64encode(png).decode()},
         "metadata": {"image/png": {"alt": "Bigger G: fewer ties."}}},
        {"data": {"image/png": base64.b64encode(b"other").decode()}, "metadata": {}}]}]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(notebook))
    alts = ext.notebook_alt_texts(path)
    assert alts == {hashlib.sha256(png).hexdigest(): "Bigger G: fewer ties."}
    assert ext.notebook_alt_texts(tmp_path / "missing.ipynb") == {}
