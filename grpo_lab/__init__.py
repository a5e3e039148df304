"""GRPO Lab: the package behind the book.

Chapters use one alias, ``import grpo_lab as gl``, and the public names live flat here.
NumPy is the reference implementation; ``import grpo_lab`` never imports torch.

Where each name is taught:

==============================  ==========================================================
``gl.group_advantages``         chapter 1, group-relative advantages
``gl.group_advantages_fast``    chapter 7, the same advantages with fewer passes over memory
``gl.group_stats``              chapter 1, why G matters (noise of group statistics)
``gl.gae``                      chapter 2, PPO's advantages from a critic (GAE-lambda)
``gl.clipped_surrogate_loss``   chapter 2, PPO's clipped objective, clip-higher, dual-clip
``gl.aggregation_weights``      chapter 2, each token's weight under grpo, dapo, dr_grpo
``gl.aggregate_loss``           chapter 2, loss aggregation and its length bias
``gl.sequence_ratio``           chapter 2, GSPO's sequence-level ratio
``gl.grpo_loss``                chapter 2, the whole GRPO loss and its diagnostics
``gl.training_memory``         chapter 2, what PPO and GRPO hold in memory, in bytes
``gl.hidden_string``           chapter 2, the PPO vs GRPO training comparison (a toy task)
``gl.kl_k1/kl_k2/kl_k3``        chapter 3, per-token KL estimators
``gl.bench``                     chapter 7, ``python -m grpo_lab.bench``: each implementation vs a copy
``gl.roofline``                  chapter 7, the roofline, bytes moved, GPU arithmetic, figures
``gl.loss_fused``                chapter 7, the torch GRPO loss: eager composition and fused
``gl.show_source``              every chapter: shows the package's real code
``gl.widgets``                  sliders (ipywidgets) used by the chapters
``gl.drills``                   checkers for the implement-it drills
==============================  ==========================================================
"""

from __future__ import annotations

import importlib

from . import group_stats
from .advantages import BASELINES, SCALES, group_advantages
from .advantages_fast import group_advantages_fast
from .aggregation import AGGREGATIONS, aggregate_loss, aggregation_weights
from .gae import gae
from .kl import kl_k1, kl_k2, kl_k3
from .losses import LEVELS, MAX_LOG_RATIO, clipped_surrogate_loss, grpo_loss, sequence_ratio
from .memory import training_memory
from .source import show_source

__version__ = "0.1.0"

__all__ = ["AGGREGATIONS", "BASELINES", "LEVELS", "MAX_LOG_RATIO", "SCALES", "aggregate_loss",
           "aggregation_weights", "clipped_surrogate_loss", "gae", "group_advantages",
           "group_advantages_fast",
           "group_stats", "grpo_loss", "kl_k1", "kl_k2", "kl_k3", "sequence_ratio", "show_source",
           "training_memory", "bench", "drills", "hidden_string", "loss_fused", "roofline",
           "widgets"]

# drills, widgets: need matplotlib / ipywidgets; hidden_string: the training code; loss_fused:
# torch; bench, roofline: chapter 7's tools. Imported on first use, so that `import grpo_lab`
# stays light (and never imports torch).
_LAZY = ("bench", "drills", "hidden_string", "loss_fused", "roofline", "widgets")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")
