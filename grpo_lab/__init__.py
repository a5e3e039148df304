"""GRPO Lab: the package behind the book.

Chapters use one alias, ``import grpo_lab as gl``, and the public names live flat here.
NumPy is the reference implementation; ``import grpo_lab`` never imports torch.

Where each name is taught:

=============================  ============================================
``gl.group_advantages``        chapter 1, group-relative advantages
``gl.group_stats``             chapter 1, why G matters (noise of group statistics)
``gl.round_trip``              chapter 4, what storing in float16 / bfloat16 does to a number
``gl.rounded_matmul``          chapter 4, two kernels, one product: the training/inference mismatch
``gl.log_softmax``             chapter 4, log-softmax that survives low precision
``gl.token_logprobs``          chapter 4, per-token logp from logits, float32 or wider
``gl.sequence_logprob_sum``    chapter 4, summing log-probs over T up to 32k tokens (and ``_mean``)
``gl.error_table``             chapter 4, a function's error per dtype against float64
``gl.show_source``             every chapter: shows the package's real code
``gl.widgets``                 sliders (ipywidgets) used by the chapters
``gl.drills``                  checkers for the implement-it drills
=============================  ============================================
"""

from __future__ import annotations

import importlib

from . import group_stats
from .advantages import BASELINES, SCALES, group_advantages
from .precision import (DTYPES, ErrorRow, ErrorTable, as_dtype, error_table, log_softmax,
                        round_trip, rounded_matmul, sequence_logprob_mean,
                        sequence_logprob_sum, token_logprobs, unit_roundoff)
from .source import show_source

__version__ = "0.1.0"

__all__ = ["BASELINES", "SCALES", "group_advantages", "group_stats", "show_source", "drills",
           "widgets",
           # chapter 4, low precision
           "DTYPES", "ErrorRow", "ErrorTable", "as_dtype", "error_table", "log_softmax",
           "round_trip", "rounded_matmul", "sequence_logprob_mean", "sequence_logprob_sum",
           "token_logprobs", "unit_roundoff"]

_LAZY = ("drills", "widgets")  # need matplotlib / ipywidgets: imported on first use


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")
