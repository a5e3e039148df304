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
``gl.training_memory``          chapter 2, what PPO and GRPO hold in memory, in bytes
``gl.hidden_string``            chapter 2, the PPO vs GRPO training comparison (a toy task)
``gl.kl_k1/kl_k2/kl_k3``        chapter 3, per-token KL estimators
``gl.kl_theory``                chapter 3, closed forms and exact gradients to check them by
``gl.widgets_kl``               chapter 3's sliders: estimator distributions, beta
``gl.round_trip``               chapter 4, what storing in float16 / bfloat16 does to a number
``gl.rounded_matmul``           chapter 4, two kernels, one product: training/inference mismatch
``gl.log_softmax``              chapter 4, a log-softmax that survives low precision
``gl.token_logprobs``           chapter 4, per-token logp from logits, float32 or wider
``gl.sequence_logprob_sum``     chapter 4, log-probs summed over T up to 32k (and ``_mean``)
``gl.error_table``              chapter 4, a function's error per dtype against float64
``gl.accuracy_reward``          chapter 5, rule-based verifier of the <answer> tag
``gl.format_reward``            chapter 5, the R1 <think>/<answer> format
``gl.overlong_penalty``         chapter 5, DAPO's soft overlong punishment
``gl.weighted_sum``             chapter 5, combining rewards by a weighted sum
``gl.normalise_then_sum``       chapter 5, combining rewards after group normalisation
``gl.rewards``                  chapter 5, the module (extract_answer, parse_number, ...)
``gl.torch``                    the torch path (``import grpo_lab.torch as glt``): the same
                                names and signatures on tensors, CPU or CUDA, autograd
``gl.task``                     chapter 6, the addition task (training and held-out prompts)
``gl.tiny_policy``              chapter 6, the tokenizer and the tiny transformer policy
``gl.train``                    chapter 6, the GRPO loop; ``python -m grpo_lab.train``
``gl.group_advantages_fast``    chapter 7, the blocked fast path, equal to the reference
``gl.bench``                    chapter 7, ``python -m grpo_lab.bench``: each vs a memory copy
``gl.roofline``                 chapter 7, the roofline, bytes moved, GPU arithmetic, figures
``gl.loss_fused``               chapter 7, the torch GRPO loss: eager composition and fused
``gl.presets``                  chapter 8, TRL / verl / OpenRLHF defaults as grpo_lab options
``gl.process_advantages``       chapter 8, DeepSeekMath's process-supervision advantages
``gl.steps_to_tokens``          chapter 8, per-step values spread over each step's tokens
``gl.show_source``              every chapter: shows the package's real code
``gl.widgets``                  the chapters' sliders (figure functions and explorers)
``gl.sliders``                  the slider mechanism: live ipywidgets in Jupyter, precomputed
                                frames on the static site (its docstring says how a chapter
                                adds sliders)
``gl.drills``                   every drill's checker (chapters 1-5, collected in chapter 9),
                                and ``gl.drills.catalogue``, the wrong answers that prove them
``gl.drills_kl``                chapter 3's name for its checkers (an alias of ``gl.drills``)
``gl.drills_precision``         chapter 4's name for its checkers (an alias of ``gl.drills``)
``gl.drills_production``        chapter 8's name for its checker (an alias of ``gl.drills``)
``gl.widgets_production``       chapter 8's figures (advantages per system, process vs outcome)
==============================  ==========================================================
"""

from __future__ import annotations

import importlib

from . import group_stats, kl_theory, presets, rewards
from .advantages import BASELINES, SCALES, group_advantages
from .advantages_fast import group_advantages_fast
from .aggregation import AGGREGATIONS, aggregate_loss, aggregation_weights
from .gae import gae
from .kl import kl_k1, kl_k2, kl_k3
from .logprobs import log_softmax, sequence_logprob_mean, sequence_logprob_sum, token_logprobs
from .losses import LEVELS, MAX_LOG_RATIO, clipped_surrogate_loss, grpo_loss, sequence_ratio
from .memory import training_memory
from .precision import (DTYPES, ErrorRow, ErrorTable, as_dtype, error_table, round_trip,
                        rounded_matmul, unit_roundoff)
from .rewards import (accuracy_reward, format_reward, normalise_then_sum, overlong_penalty,
                      weighted_sum)
from .process import process_advantages, steps_to_tokens
from .source import show_source

__version__ = "0.1.0"

# One line per chapter, so that a new chapter adds a line rather than editing one.
__all__ = [
    "show_source",
    "BASELINES", "SCALES", "group_advantages", "group_stats",                        # ch. 1
    "AGGREGATIONS", "LEVELS", "MAX_LOG_RATIO", "aggregate_loss", "aggregation_weights",
    "clipped_surrogate_loss", "gae", "grpo_loss", "sequence_ratio", "training_memory",  # ch. 2
    "kl_k1", "kl_k2", "kl_k3", "kl_theory",                                          # ch. 3
    "DTYPES", "ErrorRow", "ErrorTable", "as_dtype", "error_table", "log_softmax", "round_trip",
    "rounded_matmul", "sequence_logprob_mean", "sequence_logprob_sum", "token_logprobs",
    "unit_roundoff",                                                                 # ch. 4
    "accuracy_reward", "format_reward", "normalise_then_sum", "overlong_penalty", "rewards",
    "weighted_sum",                                                                  # ch. 5
    "group_advantages_fast",                                                         # ch. 7
    "presets", "process_advantages", "steps_to_tokens",                             # ch. 8
]

# Imported on first use, so that `import grpo_lab` stays light: the drills, sliders and
# widgets need matplotlib / ipywidgets; hidden_string is training code; loss_fused, torch,
# tiny_policy and train need torch (never imported by `import grpo_lab`).
_LAZY = (
    "drills", "sliders", "widgets",
    "hidden_string",                                                                 # ch. 2
    "drills_kl", "widgets_kl",                                                       # ch. 3
    "drills_precision",                                                              # ch. 4
    "task", "tiny_policy", "torch", "train",                       # ch. 6 (all but task: torch)
    "bench", "loss_fused", "roofline",                                # ch. 7 (loss_fused: torch)
    "drills_production", "widgets_production",                                       # ch. 8
)
__all__ += list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")
