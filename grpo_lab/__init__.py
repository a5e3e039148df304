"""GRPO Lab: the package behind the book.

Chapters use one alias, ``import grpo_lab as gl``, and the public names live flat here.
NumPy is the reference implementation; ``import grpo_lab`` never imports torch.

The folders show the layers; each imports only from the ones above it in this list:

===============  ==============================================================================
``numerics/``    the one validation layer (arrays and tensors), the careful numerics, precision
``core/``        the math of the papers: advantages, GAE, surrogate, aggregation, KL, the loss
``torch/``       the same math on tensors (``import grpo_lab.torch as glt``), CPU or CUDA
``theory/``      group statistics, the memory model, KL theory
``rl/``          rewards, the addition task, the tiny policy, the training loop, a toy task
``perf/``        the fast advantages, the fused loss, the bench, the roofline
``production/``  the trainers' defaults (TRL, verl, OpenRLHF) as grpo_lab options
``book/``        ``show_source``, the slider mechanism, each chapter's figures
``drills/``      each chapter's drill checkers and the harness they share
===============  ==============================================================================

Where each name is taught:

==============================  ==========================================================
``gl.paper``                    every chapter: each formula as the paper writes it, plain
                                NumPy in the paper's notation, <= 10 lines, no guard, shown
                                before the hardened function (``gl.paper.group_advantages``,
                                ``.gae``, ``.clipped_surrogate_loss``, ``.aggregate_grpo``,
                                ``.grpo_loss``, ``.kl_k3``, ``.log_softmax``, ...)
``gl.group_advantages``         chapter 1, group-relative advantages
``gl.centred_deviations``       chapter 1, r - mean(r) about the first reward: exact 0s
``gl.std_from_deviations``      chapter 1, the std from deviations (population or Bessel)
``gl.power_of_two_rescale``     chapter 1, divide by 2**k exactly so no square overflows
                                (``gl.scale_by_power_of_two`` undoes it)
``gl.divide_or_zero``           chapter 1, 0 / 0 as 0: an all-equal group has no signal
``gl.group_stats``              chapter 1, why G matters (noise of group statistics)
``gl.gae``                      chapter 2, PPO's advantages from a critic (GAE-lambda)
``gl.surrogate_from_ratio``     chapter 2, PPO's clipped objective term by term, from the ratio
``gl.clipped_surrogate_loss``   chapter 2, PPO's clipped objective, clip-higher, dual-clip
``gl.surrogate_grad_logp``      chapter 2 and 7, its gradient with respect to logp, per token
``gl.aggregation_weights``      chapter 2, each token's weight under grpo, dapo, dr_grpo
``gl.aggregate_loss``           chapter 2, loss aggregation and its length bias
``gl.sequence_ratio``           chapter 2, GSPO's sequence-level ratio
``gl.grpo_loss``                chapter 2, the whole GRPO loss and its diagnostics
``gl.grpo_diagnostics``         chapter 2, the clip fractions, mean ratio and KLs a trainer logs
``gl.masked_mean``              chapter 2 and 4, a mean over the real tokens only
``gl.training_memory``          chapter 2, what PPO and GRPO hold in memory, in bytes
``gl.hidden_string``            chapter 2, the PPO vs GRPO training comparison (a toy task)
``gl.kl_k1/kl_k2/kl_k3``        chapter 3, per-token KL estimators
``gl.k3_from_log_ratio``        chapter 3, k3 without cancellation (``expm1``, series near 0)
``gl.k3_series``                chapter 3, k3's Taylor series in Horner form, for small |d|
``gl.kl_theory``                chapter 3, closed forms and exact gradients to check them by
``gl.round_trip``               chapter 4, what storing in float16 / bfloat16 does to a number
``gl.rounded_matmul``           chapter 4, two kernels, one product: training/inference mismatch
``gl.log_ratio``                chapter 4, logp - old_logp in float64, clamped before exp
``gl.log_softmax``              chapter 4, a log-softmax that survives low precision
``gl.logsumexp``                chapter 4, log sum exp shifted by the max: no overflow
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
``gl.sweep``                    chapter 6, the default run over seeds, threads and CPU code
                                paths, each in a fresh process; ``python -m grpo_lab.sweep``
``gl.hf``                       chapter 6b, the GRPO step on a Hugging Face causal LM (built in
                                code: shift, completion mask, entropy, reference, IS
                                corrections, micro-batches) and TRL's GRPOTrainer cross-checked
                                against it; ``python -m grpo_lab.hf``
``gl.math_verifier``            chapter 6b, a math-verify reward (``\\boxed{}``, equivalence)
                                beside chapter 5's strict verifier
``gl.group_advantages_fast``    chapter 7, the blocked fast path, equal to the reference
``gl.bench``                    chapter 7, ``python -m grpo_lab.bench``: each vs a memory copy
``gl.roofline``                 chapter 7, the roofline, bytes moved, GPU arithmetic
``gl.cost_model``, ``gl.cost_memory``  chapter 7, the cost model of a GRPO step (time, memory)
``gl.hf_profile``               chapter 7, chapter 6b's Hugging Face step timed stage by stage
``gl.loss_fused``               chapter 7, the fused torch GRPO loss (one sweep, one gradient)
``gl.presets``                  chapter 8, TRL / verl / OpenRLHF defaults as grpo_lab options
``gl.clinic``, ``gl.doctor``    chapter 6c, failures staged in TRL's trainer, and the doctor
                                that reads a run's log (``python -m grpo_lab.doctor``)
``gl.engines``                  chapter 6b, the verl command the book prints, as data its tests
                                hand to verl's own ``validate_config``
``gl.kl_k3_plus``               chapter 8, verl's straight-through k3+ (k3's value, k2's gradient)
``gl.kl_grad_logp``             chapter 8, each KL estimator's gradient with respect to logp
``gl.kl_shaped_rewards``        chapter 8, verl's KL in the reward, before group normalisation
``gl.process_advantages``       chapter 8, DeepSeekMath's process-supervision advantages
``gl.neighbours``               chapter 8, GRPO's neighbours one line away (REINFORCE++, ReMax,
                                RLOO, CISPO, SAPO, GSPO) and ``gl.neighbours.table()``
``gl.steps_to_tokens``          chapter 8, per-step values spread over each step's tokens
``gl.show_source``              every chapter: shows the package's real code
``gl.book``                     each chapter's figures and sliders (``gl.book.ch01`` ...)
``gl.sliders``                  the slider mechanism: live ipywidgets in Jupyter, precomputed
                                frames on the static site
``gl.drills``                   every drill's checker (chapters 1-8, collected in chapter 9)
==============================  ==========================================================
"""

from __future__ import annotations

import importlib

from grpo_lab.book.source import show_source
from grpo_lab.core.advantages import BASELINES, SCALES, group_advantages
from grpo_lab.core.aggregation import AGGREGATIONS, aggregate_loss, aggregation_weights
from grpo_lab.core.gae import gae
from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.core.kl_production import kl_grad_logp, kl_k3_plus, kl_shaped_rewards
from grpo_lab.core.loss import grpo_diagnostics, grpo_loss
from grpo_lab.core.process import process_advantages, steps_to_tokens
from grpo_lab.core.paper import neighbours as _paper_neighbours  # noqa: F401 (gl.paper.neighbours)
from grpo_lab.core.surrogate import (LEVELS, MAX_LOG_RATIO, clipped_surrogate_loss, sequence_ratio,
                                     surrogate_from_ratio, surrogate_grad_logp)
from grpo_lab.numerics.error_table import ErrorRow, ErrorTable, error_table
from grpo_lab.numerics.logprobs import (log_softmax, sequence_logprob_mean, sequence_logprob_sum,
                                        token_logprobs)
from grpo_lab.numerics.precision import DTYPES, as_dtype, round_trip, rounded_matmul, unit_roundoff
from grpo_lab.numerics.logspace import k3_from_log_ratio, k3_series, log_ratio, logsumexp
from grpo_lab.numerics.stable import (centred_deviations, divide_or_zero, masked_mean,
                                      power_of_two_rescale, scale_by_power_of_two,
                                      std_from_deviations)
from grpo_lab.perf.advantages_fast import group_advantages_fast
from grpo_lab.rl.rewards import (accuracy_reward, format_reward, normalise_then_sum,
                                 overlong_penalty, weighted_sum)
from grpo_lab.theory.memory import training_memory

__version__ = "0.1.0"

# One line per chapter, so that a new chapter adds a line rather than editing one.
__all__ = [
    "show_source",
    "BASELINES", "SCALES", "centred_deviations", "divide_or_zero", "group_advantages",
    "group_stats", "power_of_two_rescale", "scale_by_power_of_two",
    "std_from_deviations",                                                           # ch. 1
    "AGGREGATIONS", "LEVELS", "MAX_LOG_RATIO", "aggregate_loss", "aggregation_weights",
    "clipped_surrogate_loss", "gae", "grpo_diagnostics", "grpo_loss", "masked_mean",
    "sequence_ratio", "surrogate_from_ratio", "surrogate_grad_logp", "training_memory",  # ch. 2
    "k3_from_log_ratio", "k3_series", "kl_k1", "kl_k2", "kl_k3", "kl_theory",        # ch. 3
    "DTYPES", "ErrorRow", "ErrorTable", "as_dtype", "error_table", "log_ratio", "log_softmax",
    "logsumexp", "round_trip", "rounded_matmul", "sequence_logprob_mean",
    "sequence_logprob_sum", "token_logprobs", "unit_roundoff",                       # ch. 4
    "accuracy_reward", "format_reward", "normalise_then_sum", "overlong_penalty", "rewards",
    "weighted_sum",                                                                  # ch. 5
    "group_advantages_fast",                                                         # ch. 7
    "kl_grad_logp", "kl_k3_plus", "kl_shaped_rewards", "presets", "process_advantages",
    "steps_to_tokens",                                                               # ch. 8
]

# The modules a chapter reaches as ``gl.<name>``, imported on first use so that
# `import grpo_lab` stays light (book and drills need matplotlib / ipywidgets; torch, train,
# tiny_policy and loss_fused need torch, which `import grpo_lab` never imports).
_MODULES = {
    "group_stats": "grpo_lab.theory.group_stats",
    "kl_theory": "grpo_lab.theory.kl_theory",
    "rewards": "grpo_lab.rl.rewards",
    "presets": "grpo_lab.production.presets",
    "engines": "grpo_lab.production.engines",
    "clinic": "grpo_lab.clinic",
    "doctor": "grpo_lab.doctor",
    "hidden_string": "grpo_lab.rl.hidden_string",
    "task": "grpo_lab.rl.task",
    "tiny_policy": "grpo_lab.rl.tiny_policy",
    "train": "grpo_lab.rl.train",
    "sweep": "grpo_lab.rl.sweep",
    "bench": "grpo_lab.perf.bench",
    "roofline": "grpo_lab.perf.roofline",
    "step_profile": "grpo_lab.perf.step_profile",
    "cost_model": "grpo_lab.perf.cost_model",
    "cost_memory": "grpo_lab.perf.cost_memory",
    "hf_profile": "grpo_lab.perf.hf_profile",
    "bench_linear": "grpo_lab.perf.bench_linear",
    "measure": "grpo_lab.perf.measure",
    "triton_kernels": "grpo_lab.torch.triton_kernels",
    "loss_fused": "grpo_lab.perf.loss_fused",
    "sliders": "grpo_lab.book.sliders",
    "book": "grpo_lab.book",
    "drills": "grpo_lab.drills",
    "deck": "grpo_lab.deck",
    "torch": "grpo_lab.torch",
    "paper": "grpo_lab.core.paper",
    "hf": "grpo_lab.hf",
    "math_verifier": "grpo_lab.rl.math_verifier",
    "neighbours": "grpo_lab.core.neighbours",
}
__all__ += [name for name in _MODULES if name not in __all__]

def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")

# Every chapter past the light install: gl.needs("torch", ...) stops with one line, not a traceback.
from grpo_lab.book.needs import needs  # noqa: E402
__all__ += ["needs"]

# Chapter 4, pitfalls 6 and 7: float32 master weights and loss scaling (gl.master_weights).
_MODULES["master_weights"] = "grpo_lab.numerics.master_weights"
__all__ += ["master_weights"]
