"""Sliders that work twice: live ipywidgets in Jupyter, precomputed frames on the static site.

Why frames
----------
Most readers meet the book as a static web page: no kernel to call back into, and (by design)
no network. A slider there can only show what was computed before. The options were:

* the ipywidgets state Jupyter saves: the sliders render, but the figure is drawn by Python,
  so moving one changes nothing;
* Python in the browser (Pyodide / JupyterLite): tens of megabytes of runtime to vendor, and
  seconds to start before the first figure;
* frames: when the book builds, draw the figure once for each point of a small grid of slider
  values, and let a few lines of JavaScript show the frame that matches the sliders.

We use frames. The figure on the page is the very figure the package draws in Jupyter, by the
same function, with every number on it computed when the book was built. Each frame is a PNG
reduced to a 16-colour palette (flat-coloured plots lose nothing visible; about 8 kB a frame
at 72 dpi) and identical frames are stored once: with ``scale="group"`` the reward spread
divides out, so those frames coincide, which the page then shows as it is.

How a chapter uses it
---------------------
Write the figure as a plain function of the slider values that can redraw into a given
figure, in the chapter's package module (see ``gl.book.ch01.advantage_explorer_figure``)::

    def my_figure(G=8, beta=0.04, *, fig=None):   # returns a matplotlib Figure
        ...

then pick live ipywidgets and a small static grid (at most ``max_frames`` combinations;
every start value must be on the grid)::

    import ipywidgets as w
    from grpo_lab import sliders

    def my_explorer(G=8, beta=0.04):
        controls = {"G": w.IntSlider(value=G, min=2, max=64, description="G"),
                    "beta": w.FloatSlider(value=beta, min=0, max=0.2, description="beta")}
        return sliders.explorer(my_figure, controls,
                                grid={"G": [2, 4, 8, 16, 32, 64], "beta": [0.0, 0.04, 0.1]})

and end a chapter cell with ``gl.book.ch01.my_explorer()``. In Jupyter it is a live widget. When
the book builds, the Sphinx extension ``_ext/grpo_site.py`` sets ``GRPO_LAB_STATIC_FRAMES=1``
for the kernel that executes the chapters, so the same cell also renders the frames into the
cell's ``text/html`` output, and the site prefers that output (``nb_mime_priority_overrides`` in
``_config.yml``). Outside the build, no frames are drawn, so a reader running the cell does
not wait for them; ``static=True`` or ``False`` forces the choice.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import math
import os
from dataclasses import dataclass
from numbers import Real

import ipywidgets as w

__all__ = ["STATIC_ENV", "Explorer", "Frames", "explorer", "frames_html", "render_frames"]

STATIC_ENV = "GRPO_LAB_STATIC_FRAMES"  # set to 1 by the book build: draw the static frames


@dataclass(frozen=True)
class Frames:
    """Precomputed figures over a grid of slider values.

    =========  ==========================  ================================================
    Field      Shape                       Meaning
    =========  ==========================  ================================================
    names      (P,)                        the grid's parameters, in slider order
    values     P lists                     the values each parameter takes on the grid
    start      (P,)                        index of the start value of each parameter
    index      (prod of the value counts,) frame shown for each combination, C order
    images     (F,) PNG bytes              the distinct frames, F <= len(index)
    fixed      dict                        the other arguments, the same in every frame
    =========  ==========================  ================================================
    """

    names: tuple
    values: tuple
    start: tuple
    index: tuple
    images: tuple
    fixed: dict

    def frame(self, **values) -> bytes:
        """The PNG shown for one combination of grid values: ``frames.frame(G=8, spread=1.0)``."""
        flat = 0
        for name, options in zip(self.names, self.values):
            flat = flat * len(options) + _position(name, options, values[name])  # C order
        return self.images[self.index[flat]]


def _position(name, options, value) -> int:
    """Index of ``value`` in ``options``; floats match to rounding (a log slider's 1.0)."""
    for i, option in enumerate(options):
        if option == value or (isinstance(option, Real) and isinstance(value, Real)
                               and not isinstance(option, bool)
                               and math.isclose(option, value, rel_tol=1e-9)):
            return i
    raise ValueError(f"grid[{name!r}]: expected a list containing the start value {value!r}, "
                     f"got {list(options)!r}")


def _check_grid(grid, start_values, max_frames):
    if not isinstance(grid, dict) or not grid:
        raise TypeError(f"grid: expected a non-empty dict of name -> list of values, "
                        f"got {type(grid).__name__}")
    for name, options in grid.items():
        if name not in start_values:
            known = ", ".join(repr(n) for n in start_values)
            raise ValueError(f"grid: expected names of the controls ({known}), got {name!r}")
        if not isinstance(options, (list, tuple)) or not options:
            raise ValueError(f"grid[{name!r}]: expected a non-empty list of values, "
                             f"got {options!r}")
        if len(set(map(repr, options))) != len(options):
            raise ValueError(f"grid[{name!r}]: expected distinct values, got {list(options)!r}")
    n_frames = math.prod(len(options) for options in grid.values())
    if n_frames > max_frames:
        sizes = " x ".join(str(len(options)) for options in grid.values())
        raise ValueError(f"grid: expected at most max_frames={max_frames} combinations, "
                         f"got {sizes} = {n_frames}")


def _png(fig, dpi, colors) -> bytes:
    """The figure as a palette PNG: ``colors`` colours, no dithering (flat plots stay crisp)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    image = image.quantize(colors=colors, method=Image.Quantize.MEDIANCUT,
                           dither=Image.Dither.NONE)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def render_frames(figure, grid, start, *, dpi=72, colors=16, max_frames=64) -> Frames:
    """Draw ``figure(**values, fig=fig)`` for every combination of the ``grid`` values.

    ``start`` holds every argument's start value: the grid's parameters start there (each
    must be on its grid), the others stay there in every frame. Identical frames are kept once.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> import grpo_lab as gl
    >>> frames = render_frames(gl.book.ch01.advantage_explorer_figure,
    ...                        {"G": [4, 8], "spread": [1.0, 10.0]},
    ...                        {"G": 8, "spread": 1.0, "scale": "group", "n_groups": 200})
    >>> len(frames.index), frames.start
    (4, (1, 0))
    >>> frames.frame(G=4, spread=1.0) == frames.frame(G=8, spread=1.0)   # G changes the figure
    False
    """
    import matplotlib.pyplot as plt

    _check_grid(grid, start, max_frames)
    names = tuple(grid)
    values = tuple(tuple(grid[n]) for n in names)
    first = tuple(_position(n, grid[n], start[n]) for n in names)
    fixed = {k: v for k, v in start.items() if k not in grid}

    fig = None
    images, seen, index = [], {}, []
    for combo in itertools.product(*values):  # C order: the last parameter varies fastest
        fig = figure(**fixed, **dict(zip(names, combo)), fig=fig)
        png = _png(fig, dpi, colors)
        if png not in seen:
            seen[png] = len(images)
            images.append(png)
        index.append(seen[png])
    plt.close(fig)
    return Frames(names, values, first, tuple(index), tuple(images), fixed)


def _label(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# The player: one range input (or select) per parameter; on every change it computes the
# combination's position in C order and shows that frame. Kept inline so that the cell output
# stands alone (on the site, in nbviewer, in a trusted notebook) and loads nothing.
_PLAYER_JS = """
(function () {
  var root = document.currentScript.parentElement;
  var data = JSON.parse(root.querySelector("script.gl-frames-data").textContent);
  var img = root.querySelector("img.gl-frames-figure");
  var inputs = root.querySelectorAll("[data-gl-param]");
  function show() {
    var flat = 0, parts = [];
    inputs.forEach(function (el) {
      var k = Number(el.dataset.glParam), i = Number(el.value);
      flat = flat * data.values[k].length + i;
      var readout = root.querySelector('[data-gl-readout="' + k + '"]');
      if (readout) { readout.textContent = data.values[k][i]; }
      parts.push(data.names[k] + "=" + data.values[k][i]);
    });
    var frame = data.index[flat];
    img.src = "data:image/png;base64," + data.images[frame];
    img.alt = data.alt + " (" + parts.join(", ") + ")";
    root.dataset.glFrame = frame;
  }
  inputs.forEach(function (el) {
    el.addEventListener("input", show);
    el.addEventListener("change", show);
  });
})();
"""


def frames_html(frames: Frames, *, labels=None, title="") -> str:
    """A self-contained HTML widget (inputs, one image, a small inline script) for ``frames``.

    ``labels`` maps a parameter name to the text shown beside its slider; ``title`` is the
    image's alt text. Numeric grids become range sliders, others a drop-down list.
    """
    labels = labels or {}
    encoded = [base64.b64encode(png).decode("ascii") for png in frames.images]
    data = {"names": [labels.get(n, n) for n in frames.names],
            "values": [[_label(v) for v in options] for options in frames.values],
            "index": list(frames.index), "images": encoded,
            "alt": title or "figure"}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    uid = hashlib.sha1(payload.encode()).hexdigest()[:12]  # stable across builds

    controls = []
    for k, (name, options) in enumerate(zip(frames.names, frames.values)):
        text = html.escape(labels.get(name, name))
        start = frames.start[k]
        if all(isinstance(v, Real) and not isinstance(v, bool) for v in options):
            control = (f'<input type="range" id="gl-{uid}-{k}" data-gl-param="{k}" min="0" '
                       f'max="{len(options) - 1}" step="1" value="{start}" '
                       f'style="vertical-align:middle">'
                       f'<output data-gl-readout="{k}" style="display:inline-block;'
                       f'min-width:3em;margin-left:0.4em">{html.escape(_label(options[start]))}'
                       f'</output>')
        else:
            opts = "".join(f'<option value="{i}"{" selected" if i == start else ""}>'
                           f'{html.escape(_label(v))}</option>' for i, v in enumerate(options))
            control = f'<select id="gl-{uid}-{k}" data-gl-param="{k}">{opts}</select>'
        controls.append(f'<label for="gl-{uid}-{k}" style="margin-right:1.5em;'
                        f'white-space:nowrap">{text} {control}</label>')

    fixed = ", ".join(f"{html.escape(labels.get(k, k))}={html.escape(_label(v))}"
                      for k, v in frames.fixed.items())
    kb = sum(len(s) for s in encoded) / 1000
    start_parts = ", ".join(f"{labels.get(n, n)}={_label(o[i])}"
                            for n, o, i in zip(frames.names, frames.values, frames.start))
    alt = html.escape(f"{title or 'figure'} ({start_parts})")
    first = encoded[frames.index[_flat(frames, frames.start)]]
    return (
        f'<div class="gl-frames" id="gl-frames-{uid}" data-gl-frame="'
        f'{frames.index[_flat(frames, frames.start)]}">'
        f'<div class="gl-frames-controls" style="display:flex;flex-wrap:wrap;'
        f'align-items:center;margin-bottom:0.3em">{"".join(controls)}</div>'
        f'<img class="gl-frames-figure" src="data:image/png;base64,{first}" alt="{alt}" '
        f'style="max-width:100%;height:auto">'
        f'<p class="gl-frames-note" style="font-size:0.85em;color:#555;margin-top:0.2em">'
        f'Precomputed when this page was built: {len(frames.index)} slider settings, '
        f'{len(frames.images)} distinct frames, {kb:.0f} kB. Fixed here: {fixed or "nothing"}. '
        f'Run the notebook for live sliders over every value.</p>'
        f'<script type="application/json" class="gl-frames-data">{payload}</script>'
        f'<script>{_PLAYER_JS}</script>'
        f'</div>'
    )


def _flat(frames: Frames, positions) -> int:
    flat = 0
    for options, i in zip(frames.values, positions):
        flat = flat * len(options) + i
    return flat


class Explorer(w.VBox):
    """Live sliders (a VBox of ipywidgets) that also carry their static frames.

    In Jupyter the ``application/vnd.jupyter.widget-view+json`` output is the live widget;
    the ``text/html`` output beside it (only when ``static``) is the frame player the site
    shows. ``controls``, ``figure`` and ``redraw()`` are there for tests and curious readers.
    """

    frames = None       # the Frames, when static
    static_html = None  # their player, when static

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if self.static_html is not None:
            bundle["text/html"] = self.static_html
        return bundle


def _static_default() -> bool:
    return os.environ.get(STATIC_ENV, "") not in ("", "0")


def explorer(figure, controls, grid, *, static=None, before_draw=None, dpi=72, colors=16,
             max_frames=64) -> Explorer:
    """Live ipywidgets ``controls`` that redraw ``figure``, plus frames over ``grid`` for the site.

    ==========  ===================================================================
    Argument    Meaning
    ==========  ===================================================================
    figure      ``figure(**values, fig=None) -> matplotlib Figure``; redraws into
                ``fig`` when given. ``values`` has one entry per control.
    controls    dict name -> ipywidgets value widget; the names are ``figure``'s
                arguments and the widgets' values are the start values
    grid        dict name -> the values the static page offers for that control
                (a few each; at most ``max_frames`` combinations in all)
    static      draw the frames: True, False, or None for "when the book builds"
                (the ``GRPO_LAB_STATIC_FRAMES`` environment variable)
    before_draw ``before_draw(controls)`` runs before each live redraw (e.g. to
                disable a control that the others make irrelevant)
    ==========  ===================================================================
    """
    import matplotlib.pyplot as plt
    from IPython.display import display

    if not callable(figure):
        raise TypeError(f"figure: expected a function that returns a Figure, "
                        f"got {type(figure).__name__}")
    if not isinstance(controls, dict) or not all(isinstance(c, w.ValueWidget)
                                                 for c in controls.values()):
        raise TypeError("controls: expected a dict of name -> ipywidgets value widget, "
                        f"got {type(controls).__name__}")
    start = {name: c.value for name, c in controls.items()}
    _check_grid(grid, start, max_frames)
    for name, options in grid.items():
        _position(name, options, start[name])  # every start value must be on the grid
    static = _static_default() if static is None else bool(static)

    out = w.Output()
    fig = figure(**start)
    plt.close(fig)  # shown inside `out` on each change, not by the inline backend

    def redraw(_change=None):
        if before_draw is not None:
            before_draw(controls)
        figure(**{name: c.value for name, c in controls.items()}, fig=fig)
        with out:
            out.clear_output(wait=True)
            display(fig)

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()

    rows = list(controls.values())
    box = Explorer([w.HBox(rows[i:i + 3]) for i in range(0, len(rows), 3)] + [out])
    box.controls = controls
    box.figure = fig
    box.redraw = redraw
    if static:
        box.frames = render_frames(figure, grid, start, dpi=dpi, colors=colors,
                                   max_frames=max_frames)
        labels = {name: c.description or name for name, c in controls.items()}
        where = f"gl.{figure.__module__.rsplit('.', 1)[-1]}.{figure.__name__}"
        box.static_html = frames_html(box.frames, labels=labels, title=f"figure by {where}")
    return box
