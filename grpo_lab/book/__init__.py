"""What the book's pages need besides the math: ``show_source``, the slider mechanism, and
each chapter's figures and sliders, one module per chapter (``gl.book.ch01`` ...).

Every figure function takes ``fig=None`` (a new figure when None) and returns the figure;
every ``*_explorer`` wraps one figure function in sliders (:func:`grpo_lab.book.sliders.explorer`).
"""

import importlib

_CHAPTERS = ("ch01", "ch02", "ch03", "ch04", "ch06", "ch07", "ch08")


def __getattr__(name):
    if name in _CHAPTERS or name in ("sliders", "source"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
