"""What a GRPO training run is set up with (:class:`TrainConfig`), what it logs
(:data:`METRICS`) and how the log is written (:func:`write_csv`).

Taught in chapter 6 (``chapters/06_training_loop.ipynb``); the loop that uses them is
:mod:`grpo_lab.rl.train`, and every field is an option of ``python -m grpo_lab.train``
(:mod:`grpo_lab.rl.cli`).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from grpo_lab import torch as glt
from grpo_lab.core.surrogate import check_clip_range
from grpo_lab.numerics.validate import check_choice, check_int, check_real
from grpo_lab.rl.task import check_task_arguments
from grpo_lab.rl.tiny_policy import FORMAT_TOKENS, check_policy_arguments

__all__ = ["METRICS", "REWARD_KINDS", "TrainConfig", "check_device", "write_csv"]

REWARD_KINDS = ("accuracy", "contains")


@dataclass
class TrainConfig:
    """Every setting of a run. The defaults are the command line's full run, which chapter 6
    makes too."""

    seed: int = 0
    # task: n_terms numbers from 0 to max_term; held_out of all prompts are never trained on
    n_terms: int = 4
    max_term: int = 4
    held_out: float = 0.2
    balanced: bool = True             # draw training prompts so every sum is equally likely
    # policy: a one-layer causal transformer, about 60k parameters
    d_model: int = 64
    n_layer: int = 1
    n_head: int = 4
    positions: bool = False           # no position embeddings: a sum ignores order anyway
    # format warm-up: supervised on the format with *random* answers (no pretraining here)
    warmup_steps: int = 60
    warmup_batch: int = 64
    warmup_lr: float = 3e-3
    # GRPO: the command line's full run, and chapter 6's.
    steps: int = 450
    prompts_per_step: int = 32        # B
    group_size: int = 16              # G: completions per prompt
    inner_iters: int = 4              # mu: updates per batch; > 1 makes the ratio matter
    lr: float = 2e-3                  # Adam; 3e-2 collapses (chapter 6 shows it)
    max_grad_norm: float = 1.0        # global gradient-norm clip (TRL's default)
    eps_low: float = 0.2
    eps_high: float | None = 0.28     # DAPO's clip-higher; None: PPO's symmetric clip
    # KL weight: DeepSeekMath used 0.04. Here the reference is the warm-up policy, which guesses
    # every sum alike, so its pull keeps the policy trying answers it has not found yet. Chosen
    # on 300-step runs (one thread): with 0.4, seeds 0-7 all ended at 91% held-out or more;
    # with 0, no seed of 0-3 passed 65%, and the entropy fell to ~0.02 nats.
    beta: float = 0.4
    entropy_coef: float = 0.0         # entropy bonus alpha: loss - alpha * mean token entropy
    kl: str = "k3"
    agg: str = "grpo"                 # grpo | bnpo | dapo | dr_grpo
    temperature: float = 1.0
    max_new_tokens: int = 8           # <think></think><answer>N</answer><eos> is 6 tokens
    reward: str = "accuracy"          # "contains" is chapter 5's deliberately weak verifier
    format_weight: float = 0.5        # reward = verifier + format_weight * format
    # bookkeeping
    eval_every: int = 25
    device: str = "cpu"
    # torch CPU threads. One is faster for this ~100k-parameter model: 30 steps took 12.2 s on
    # one thread and 16.8 s on two on a quiet 2-core machine, and 139 s on two beside a busy
    # process (one waiting thread holds up every parallel region); one leaves a core free.
    threads: int = 1

    def __post_init__(self):
        self.validate()                  # a bad setting is refused where it is written

    def validate(self) -> "TrainConfig":
        """Check every field, and every combination a run would trip on later (the task's
        prompts, the policy's heads, the format's length, the device), before any work;
        raise ValueError / TypeError naming the field. Returns self."""
        check_int("seed", self.seed, minimum=0)
        ints = dict(warmup_steps=0, warmup_batch=1, steps=0, prompts_per_step=1, group_size=2,
                    inner_iters=1, eval_every=1, threads=1)
        for name, minimum in ints.items():
            check_int(name, getattr(self, name), minimum=minimum)
        check_task_arguments(self.n_terms, self.max_term, self.held_out, self.seed)
        check_int("max_new_tokens", self.max_new_tokens, minimum=FORMAT_TOKENS,
                  why=" (the shortest well-formed completion, <think></think><answer>N"
                      "</answer> and EOS, is 6 tokens)")
        check_policy_arguments(self.d_model, self.n_layer, self.n_head,
                               2 * self.n_terms + self.max_new_tokens)
        check_clip_range(self.eps_low, self.eps_high)
        for name in ("beta", "entropy_coef", "format_weight", "max_grad_norm"):
            check_real(name, getattr(self, name), minimum=0.0)
        for name in ("lr", "warmup_lr", "temperature"):
            check_real(name, getattr(self, name), minimum=0.0, allow_equal=False)
        for name in ("balanced", "positions"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected True or False, got {getattr(self, name)!r}")
        check_choice("kl", self.kl, tuple(glt.KL_ESTIMATORS))
        check_choice("agg", self.agg, glt.AGGREGATIONS)
        check_choice("reward", self.reward, REWARD_KINDS)
        check_device(self.device)
        return self


def check_device(device) -> str:
    """'cpu', 'cuda' or 'cuda:N' for a device torch can see; ValueError naming ``device``."""
    if not isinstance(device, str):
        raise TypeError(f"device: expected a str such as 'cpu' or 'cuda', got {device!r}")
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (kind == "cpu" and index) or \
            (index and not index.isdigit()):
        raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device: expected 'cpu' on this machine (torch sees no CUDA "
                             f"device), got {device!r}")
        if index and int(index) >= count:
            raise ValueError(f"device: expected 'cuda:0' to 'cuda:{count - 1}' (torch sees "
                             f"{count} CUDA device(s)), got {device!r}")
    return device


#: Every logged metric, with its definition (chapter 6 prints this glossary).
METRICS = {
    "step": "GRPO step (0 = after the format warm-up, before any GRPO update)",
    "reward": "mean reward of the step's B*G samples: accuracy + format_weight * format",
    "train_accuracy": "share of the step's samples (training prompts, temperature 1) that are right",
    "verifier": "mean of the verifier the run trains on (accuracy, or chapter 5's weak one)",
    "format": "share of samples in the <think>...</think><answer>...</answer> format",
    "length": "mean completion length in tokens, EOS included",
    "entropy": "mean entropy (nats) of the sampling distribution over the step's completion "
               "tokens: how unsure the policy still is",
    "zero_spread": "share of groups whose G rewards are all equal: no advantage, no gradient",
    "clip_frac": "share of tokens whose ratio was clipped on the last inner iteration",
    "kl": "mean per-token KL estimate (config.kl) of the policy against the frozen reference",
    "kl_max": "the largest per-token KL estimate of the step: one rare token the policy has "
              "left but the reference liked can make the mean spike",
    "approx_kl": "k3 estimate of KL(pi_old || pi_theta) on the last inner iteration: how far "
                 "the updates on this batch moved the policy",
    "loss": "the GRPO loss on the last inner iteration",
    "held_out_accuracy": "greedy accuracy on every held-out prompt (never trained on)",
    "held_out_format": "greedy format rate on the held-out prompts",
    "seconds": "wall-clock seconds since the start of the run (not seeded: never compare it)",
}


def write_csv(history, path) -> Path:
    """One row per step, one column per metric (NaN where a metric was not measured)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(METRICS))
        writer.writeheader()
        for row in history:
            writer.writerow({k: row.get(k, math.nan) for k in METRICS})
    os.replace(partial, path)        # atomic: a Ctrl-C mid-write never leaves half a log
    return path
