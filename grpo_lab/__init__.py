"""GRPO Lab: the package behind the book.

Chapters use one alias, ``import grpo_lab as gl``, and the public names live flat here.
NumPy is the reference implementation; ``import grpo_lab`` never imports torch.

Where each name is taught:

__all__ = ["AGGREGATIONS", "BASELINES", "LEVELS", "MAX_LOG_RATIO", "SCALES", "aggregate_loss",
           "aggregation_weights", "clipped_surrogate_loss", "gae", "group_advantages",
           "group_stats", "grpo_loss", "kl_k1", "kl_k2", "kl_k3", "kl_theory", "sequence_ratio",
           "show_source", "training_memory", "drills", "drills_kl", "hidden_string", "sliders",
           "widgets", "widgets_kl"]

# drills, sliders, widgets: need matplotlib / ipywidgets; hidden_string: the training code.
# Imported on first use, so that `import grpo_lab` stays light.
_LAZY = ("drills", "drills_kl", "hidden_string", "sliders", "widgets", "widgets_kl")
"""

from __future__ import annotations

import importlib

from . import group_stats, kl_theory
from .advantages import BASELINES, SCALES, group_advantages
from .aggregation import AGGREGATIONS, aggregate_loss, aggregation_weights
from .gae import gae
from .kl import kl_k1, kl_k2, kl_k3
from .losses import LEVELS, MAX_LOG_RATIO, clipped_surrogate_loss, grpo_loss, sequence_ratio
from .memory import training_memory
from .source import show_source

__version__ = "0.1.0"

__all__ = ["AGGREGATIONS", "BASELINES", "LEVELS", "MAX_LOG_RATIO", "SCALES", "aggregate_loss",
           "aggregation_weights", "clipped_surrogate_loss", "gae", "group_advantages",
           "group_stats", "grpo_loss", "kl_k1", "kl_k2", "kl_k3", "kl_theory", "sequence_ratio",
           "show_source", "training_memory", "drills", "drills_kl", "hidden_string", "sliders",
           "widgets", "widgets_kl"]

# drills, sliders, widgets: need matplotlib / ipywidgets; hidden_string: the training code.
# Imported on first use, so that `import grpo_lab` stays light.
_LAZY = ("drills", "drills_kl", "hidden_string", "sliders", "widgets", "widgets_kl")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")
