"""GRPO Lab: the package behind the book.

Chapters use one alias, ``import grpo_lab as gl``, and the public names live flat here.
NumPy is the reference implementation; ``import grpo_lab`` never imports torch.

Where each name is taught:

==========================  ============================================
``gl.group_advantages``     chapter 1, group-relative advantages
``gl.group_stats``          chapter 1, why G matters (noise of group statistics)
``gl.show_source``          every chapter: shows the package's real code
``gl.widgets``              the chapters' sliders (figure functions and explorers)
``gl.sliders``              the slider mechanism: live ipywidgets in Jupyter, precomputed
                            frames on the static site (its docstring says how a chapter
                            adds sliders)
``gl.drills``               checkers for the implement-it drills
==========================  ============================================
"""

from __future__ import annotations

import importlib

from . import group_stats
from .advantages import BASELINES, SCALES, group_advantages
from .source import show_source

__version__ = "0.1.0"

__all__ = ["BASELINES", "SCALES", "group_advantages", "group_stats", "show_source", "drills",
           "sliders", "widgets"]

_LAZY = ("drills", "sliders", "widgets")  # need matplotlib / ipywidgets: imported on first use


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")
