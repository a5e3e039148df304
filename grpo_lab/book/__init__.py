"""What the book's pages need besides the math: each chapter's figures and sliders, the slider
mechanism, and ``show_source``.

=========================  ========================================================================
``gl.book.ch01``           chapter 1: the advantage explorer (G, reward spread, reward distribution)
``gl.book.ch02``           chapter 2: GAE, the clipped objective (and its explorer), the length
                           bias of loss aggregation, PPO vs GRPO learning curves
``gl.book.ch03``           chapter 3: the KL estimators' noise and the beta explorer
``gl.book.ch04``           chapter 4: cancellation, long log-prob sums, training/inference mismatch
``gl.book.ch06``           chapter 6: a training run's curves (``python -m grpo_lab.train`` saves them)
``gl.book.ch06c``          chapter 6c: the clinic's dashboards (sick beside healed), healthy ranges
``gl.book.ch07``           chapter 7: time against a memory copy, and the roofline
``gl.book.ch08``           chapter 8: the systems' defaults side by side, process vs outcome
``gl.book.sliders``        the slider mechanism: live ipywidgets in Jupyter (``explorer``), the
                           choice between live and static
``gl.book.frames``         its static half: frames over a grid of slider values and the HTML
                           that plays them (the template ``slider_frames.html`` and
                           ``slider_player.js``, shipped with the package)
``gl.book.source``         ``show_source`` (also ``gl.show_source``): the package's real code on
                           the page
=========================  ========================================================================

One convention for every chapter module: a figure is ``name_figure(..., *, fig=None) ->
Figure``, drawn into ``fig`` (cleared first) or into a new figure when ``fig`` is None, with
labelled axes and a title that states what it measured; an explorer ``name_explorer(...)``
wraps one figure function in sliders (:func:`grpo_lab.book.sliders.explorer`). The chapter
modules are imported on first use (``gl.book.ch04``), so ``import grpo_lab`` loads no
matplotlib.
"""

import importlib

_CHAPTERS = ("ch01", "ch02", "ch03", "ch04", "ch06", "ch06c", "ch07", "ch08")
_MODULES = _CHAPTERS + ("sliders", "frames", "source")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_MODULES))
