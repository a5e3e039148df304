"""gl.sliders: live ipywidgets in Jupyter, precomputed frames for the static site.

The JavaScript player itself is exercised in a real browser by tests/test_browser.py.
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


def test_chapter_one_grid_moves_the_figure_with_G_and_with_spread_when_unscaled():
    frames = sliders.render_frames(gl.book.ch01.advantage_explorer_figure,
                                   {"G": [4, 16], "spread": [1.0, 10.0],
                                    "scale": ["group", "none"]},
                                   {"G": 4, "spread": 1.0, "scale": "group", "n_groups": 300})
    assert frames.frame(G=4, spread=1.0, scale="group") != frames.frame(G=16, spread=1.0,
                                                                       scale="group")
    assert frames.frame(G=4, spread=1.0, scale="none") != frames.frame(G=4, spread=10.0,
                                                                      scale="none")
    # the std divides the spread out: the chapter's claim, visible as one shared frame
    assert frames.frame(G=4, spread=1.0, scale="group") == frames.frame(G=4, spread=10.0,
                                                                       scale="group")


def test_chapter_one_explorer_offers_its_grid_on_the_site():
    box = gl.book.ch01.advantage_explorer(static=False)
    assert set(gl.book.ch01.ADVANTAGE_GRID) <= set(box.controls)
    for name, options in gl.book.ch01.ADVANTAGE_GRID.items():
        assert box.controls[name].value in options, name
