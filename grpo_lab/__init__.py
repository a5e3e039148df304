"""GRPO Lab: the package behind the book.

Chapters use one alias, ``import grpo_lab as gl``, and the public names live flat here.
NumPy is the reference implementation; ``import grpo_lab`` never imports torch.

Where each name is taught:

==========================  =============================================================
``gl.group_advantages``     chapter 1, group-relative advantages
``gl.group_stats``          chapter 1, why G matters (noise of group statistics)
``gl.kl_k1/kl_k2/kl_k3``    chapter 3, per-token KL estimators
``gl.kl_theory``            chapter 3, closed forms and exact gradients to check them by
``gl.show_source``          every chapter: shows the package's real code
``gl.widgets``              sliders (ipywidgets) used by the chapters
``gl.widgets_kl``           chapter 3's sliders: estimator distributions, beta
``gl.drills``               checkers for the implement-it drills
``gl.drills_kl``            chapter 3's drill checkers
==========================  =============================================================
"""

from __future__ import annotations

import importlib

from . import group_stats, kl_theory
from .advantages import BASELINES, SCALES, group_advantages
from .kl import kl_k1, kl_k2, kl_k3
from .source import show_source

__version__ = "0.1.0"

__all__ = ["BASELINES", "SCALES", "group_advantages", "group_stats", "kl_k1", "kl_k2", "kl_k3",
           "kl_theory", "show_source", "drills", "widgets", "drills_kl", "widgets_kl"]

# need matplotlib / ipywidgets: imported on first use
_LAZY = ("drills", "widgets", "drills_kl", "widgets_kl")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")
