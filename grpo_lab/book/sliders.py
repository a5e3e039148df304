"""Sliders that work twice: live ipywidgets in Jupyter, precomputed frames on the static site.

Why frames
----------
Most readers meet the book as a static web page: no kernel to call back into and, by design,
no network, so a slider there can only show what was computed before. Saved ipywidgets state
renders sliders that move nothing (the figure is drawn by Python); Python in the browser
(Pyodide / JupyterLite) costs tens of megabytes and seconds before the first figure. So when
the book builds, the figure is drawn once for each point of a small grid of slider values,
and a few lines of JavaScript (``slider_player.js``) show the frame that matches the sliders:
the very figure the package draws in Jupyter, by the same function. Each frame is a PNG
reduced to a 16-colour palette (flat plots lose nothing visible; about 8 kB at 72 dpi) and
identical frames are stored once: with ``scale="group"`` the reward spread divides out, so
those frames coincide, which the page then shows as it is. The frames and their HTML (the
template ``slider_frames.html``) are :mod:`grpo_lab.book.frames`; this module is the live half
and the choice between the two.

How a chapter uses it
---------------------
Write the figure in the chapter's module (``grpo_lab/book/chNN.py``) as a plain function of
the slider values that redraws into a given figure (see
``gl.book.ch01.advantage_explorer_figure``), then pick live ipywidgets and a small static grid
(at most ``max_frames`` combinations; every start value must be on the grid)::

    def my_figure(G=8, beta=0.04, *, fig=None):   # returns a matplotlib Figure
        ...

    def my_explorer(G=8, beta=0.04):
        controls = {"G": w.IntSlider(value=G, min=2, max=64, description="G"),
                    "beta": w.FloatSlider(value=beta, min=0, max=0.2, description="beta")}
        return explorer(my_figure, controls,
                        grid={"G": [2, 4, 8, 16, 32, 64], "beta": [0.0, 0.04, 0.1]})

A chapter cell ending in ``gl.book.chNN.my_explorer()`` is a live widget in Jupyter. When the
book builds, ``_ext/grpo_site.py`` sets ``GRPO_LAB_STATIC_FRAMES=1`` for the kernel that runs
the chapters, so the same cell also renders the frames into its ``text/html`` output, which
the site prefers (``nb_mime_priority_overrides`` in ``_config.yml``). Elsewhere no frames are
drawn, so a reader does not wait for them; ``static=True`` or ``False`` forces the choice.
"""

from __future__ import annotations

import os

import ipywidgets as w

from grpo_lab.book.frames import Frames, check_grid, frames_html, grid_position, render_frames

__all__ = ["STATIC_ENV", "Explorer", "Frames", "explorer", "frames_html", "render_frames"]

STATIC_ENV = "GRPO_LAB_STATIC_FRAMES"  # set to 1 by the book build: draw the static frames


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
    check_grid(grid, start, max_frames)
    for name, options in grid.items():
        grid_position(name, options, start[name])  # every start value must be on the grid
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
        # each frame's alt text is what that frame's own titles state (frames.figure_alt)
        box.static_html = frames_html(box.frames, labels=labels)
    return box
