"""gl.sliders: live ipywidgets in Jupyter, precomputed frames for the static site.

The JavaScript player (slider_player.js) is exercised in a real browser by
tests/site/test_browser.py.
"""

import base64
import io
import json
import re

import ipywidgets as w
import matplotlib
import pytest
from PIL import Image

import grpo_lab as gl
from grpo_lab.book import sliders

matplotlib.use("Agg")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def tiny_figure(a=1, b="up", c=0.5, *, fig=None):
    """Draws ``a`` and ``b``; ignores ``c``, so frames that differ only in ``c`` coincide."""
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(2, 1))
    fig.clear()
    ax = fig.subplots()
    ax.plot([0, 1], [0, a if b == "up" else -a])
    ax.set_title(f"a={a}")
    return fig


def tiny_controls(a=2, b="up", c=0.5):
    return {"a": w.IntSlider(value=a, min=1, max=9, description="a"),
            "b": w.Dropdown(options=["up", "down"], value=b, description="direction"),
            "c": w.FloatSlider(value=c, min=0, max=1, description="c")}


def decode(png: bytes) -> Image.Image:
    return Image.open(io.BytesIO(png))


def test_render_frames_covers_the_grid_in_c_order_and_keeps_identical_frames_once():
    grid = {"a": [1, 2, 3], "b": ["up", "down"], "c": [0.0, 0.5, 1.0]}
    frames = sliders.render_frames(tiny_figure, grid, {"a": 2, "b": "up", "c": 0.5})
    assert frames.names == ("a", "b", "c")
    assert frames.start == (1, 0, 1)
    assert len(frames.index) == 3 * 2 * 3
    assert len(frames.images) == 3 * 2          # c changes nothing: one frame per (a, b)
    # C order: the last parameter varies fastest, so c's three settings share one frame
    assert frames.index[:3] == (0, 0, 0) and frames.index[3] != frames.index[0]
    assert frames.frame(a=3, b="down", c=1.0) == frames.images[frames.index[-1]]
    assert frames.frame(a=1, b="up", c=0.0) != frames.frame(a=2, b="up", c=0.0)


def test_frames_are_small_palette_pngs_of_the_figure():
    frames = sliders.render_frames(tiny_figure, {"a": [1, 2]}, {"a": 1}, dpi=50, colors=8)
    image = decode(frames.images[0])
    assert image.format == "PNG" and image.mode == "P"
    assert len(image.getcolors()) <= 8
    assert image.size == (2 * 50, 1 * 50)                   # figsize (2, 1) inches at 50 dpi


def test_frames_html_is_self_contained_and_starts_at_the_start_frame():
    frames = sliders.render_frames(tiny_figure, {"a": [1, 2, 3], "b": ["up", "down"]},
                                   {"a": 2, "b": "down", "c": 0.5})
    page = sliders.frames_html(frames, labels={"b": "direction </script>"}, title="tiny")
    assert not re.search(r"(src|href)=\"(https?:)?//", page)   # loads nothing from elsewhere
    first = re.search(r'<img class="gl-frames-figure" src="data:image/png;base64,([^"]+)"',
                      page).group(1)
    assert base64.b64decode(first) == frames.frame(a=2, b="down")
    assert re.search(r'<input type="range"[^>]*max="2" step="1" value="1"', page)  # a
    assert re.search(r'<option value="1" selected>down</option>', page)           # b
    assert "c=0.5" in page                          # the fixed setting is named on the page
    payload = re.search(r'class="gl-frames-data">(.*?)</script>', page, re.S).group(1)
    assert "</script>" not in payload               # a label cannot close the script early
    data = json.loads(payload)
    assert data["values"] == [["1", "2", "3"], ["up", "down"]]
    assert len(data["index"]) == 6 and len(data["images"]) == len(frames.images)


def test_explorer_is_live_in_jupyter_and_carries_frames_only_when_asked(monkeypatch):
    monkeypatch.delenv(sliders.STATIC_ENV, raising=False)
    grid = {"a": [1, 2, 3]}
    live = sliders.explorer(tiny_figure, tiny_controls(), grid)
    assert live.frames is None
    assert set(live._repr_mimebundle_()) == {"text/plain", WIDGET_VIEW}
    live.controls["a"].value = 7                    # live: any value, not only the grid's
    assert live.figure.axes[0].get_title() == "a=7"

    monkeypatch.setenv(sliders.STATIC_ENV, "1")     # what _ext/grpo_site.py does in the build
    built = sliders.explorer(tiny_figure, tiny_controls(), grid)
    bundle = built._repr_mimebundle_()
    assert set(bundle) == {"text/plain", WIDGET_VIEW, "text/html"}
    assert 'class="gl-frames"' in bundle["text/html"]
    assert len(built.frames.index) == 3
    assert sliders.explorer(tiny_figure, tiny_controls(), grid, static=False).frames is None


def test_before_draw_runs_before_each_live_redraw():
    seen = []
    box = sliders.explorer(tiny_figure, tiny_controls(), {"a": [2]}, static=False,
                           before_draw=lambda controls: seen.append(controls["a"].value))
    box.controls["a"].value = 5
    assert seen == [2, 5]


@pytest.mark.parametrize("grid, exc, pattern", [
    ({"a": [1, 3]}, ValueError, r"grid\['a'\]: expected a list containing the start value 2"),
    ({"d": [1]}, ValueError, r"grid: expected names of the controls \('a', 'b', 'c'\), got 'd'"),
    ({"a": []}, ValueError, r"grid\['a'\]: expected a non-empty list of values"),
    ({"a": [2, 2]}, ValueError, r"grid\['a'\]: expected distinct values"),
    ({"a": list(range(1, 10)), "b": ["up", "down"], "c": [0.0, 0.5, 1.0, 0.25]}, ValueError,
     r"grid: expected at most max_frames=64 combinations, got 9 x 2 x 4 = 72"),
    ([("a", [2])], TypeError, r"grid: expected a non-empty dict"),
])
def test_bad_grids_are_rejected_by_name(grid, exc, pattern):
    with pytest.raises(exc, match=pattern):
        sliders.explorer(tiny_figure, tiny_controls(), grid, static=False)


def test_bad_figure_or_controls_are_rejected_by_name():
    with pytest.raises(TypeError, match="figure: expected a function"):
        sliders.explorer("tiny_figure", tiny_controls(), {"a": [2]})
    with pytest.raises(TypeError, match="controls: expected a dict of name -> ipywidgets"):
        sliders.explorer(tiny_figure, {"a": 2}, {"a": [2]})


def test_the_static_players_alt_text_says_what_the_frame_shows_and_its_settings():
    """Each frame's alt text is the figure's own title (what it shows), then the settings it
    was drawn at; never a file path or the name of the function that drew it (issue 31)."""
    controls = {"beta": w.FloatSlider(value=0.1, min=0.0, max=1.0, description="beta")}
    box = sliders.explorer(gl.book.ch03.kl_beta_figure, controls, {"beta": [0.1]}, static=True)
    alts = re.findall(r'alt="([^"]*)"', box.static_html)
    assert len(alts) == 1, alts
    assert alts[0].startswith("Beta = 0.1: zero-reward answers keep") and \
        alts[0].endswith("(beta=0.1)"), alts
    assert "kl_beta_figure" not in alts[0] and ".png" not in alts[0] and "gl." not in alts[0]


def test_the_page_is_filled_from_the_template_files_that_ship_with_the_package():
    import tomllib
    from fnmatch import fnmatch
    from importlib import resources
    from pathlib import Path

    frames = sliders.render_frames(tiny_figure, {"a": [1, 2], "b": ["up", "down"]},
                                   {"a": 1, "b": "up"})
    page = sliders.frames_html(frames, title="tiny")
    assert not re.search(r"\$\w", page) and "<!--" not in page     # every $name filled in
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    player = (resources.files("grpo_lab.book") / "slider_player.js").read_text()
    assert script.strip() in player and "//" not in script         # the file, less its header
    assert len(re.findall(r'<label for="gl-\w+-\d"', page)) == 2    # one label per parameter

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"].get("package-data", {}).get("grpo_lab.book", [])
    for name in ("slider_frames.html", "slider_player.js"):
        assert (root / "grpo_lab" / "book" / name).is_file()
        assert any(fnmatch(name, p) for p in patterns), f"pyproject.toml ships no {name}"
