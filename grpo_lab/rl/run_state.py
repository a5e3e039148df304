"""The state of a GRPO run and its start: :class:`Run`, :class:`Rollout`, :func:`make_run`,
the supervised :func:`format_warmup` and the held-out :func:`evaluate`.

Taught in chapter 6 (``chapters/06_training_loop.ipynb``) as ``gl.train.make_run``,
``gl.train.format_warmup`` and ``gl.train.evaluate``: :mod:`grpo_lab.rl.train`, the loop,
re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from grpo_lab.rl import rewards as R
from grpo_lab.rl.task import AdditionTask
from grpo_lab.rl.tiny_policy import EOS, TinyGPT, Tokenizer, completion_logp, sample
from grpo_lab.rl.train_config import TrainConfig

__all__ = ["Rollout", "Run", "encode_prompts", "evaluate", "format_warmup", "make_run"]


@dataclass
class Run:
    """The state of a run: the task, the policy being trained, its frozen reference, the RNGs."""

    config: TrainConfig
    task: AdditionTask
    tokenizer: Tokenizer
    policy: TinyGPT
    reference: TinyGPT | None
    optimizer: torch.optim.Optimizer
    rng: np.random.Generator          # which prompts
    generator: torch.Generator        # which tokens
    history: list = field(default_factory=list)

    @property
    def device(self):
        return torch.device(self.config.device)


@dataclass
class Rollout:
    """One batch of B prompts x G completions, flattened to N = B*G rows."""

    terms: list                       # B prompts' terms
    prompts: torch.Tensor             # (N, P) each prompt repeated G times
    tokens: torch.Tensor              # (N, T) sampled completion ids
    mask: torch.Tensor                # (N, T) True up to and including EOS
    old_logp: torch.Tensor            # (N, T) log pi_old of the sampled tokens
    texts: list                       # N decoded completions
    entropy: torch.Tensor | None = None   # (N, T) entropy of each sampling distribution


def make_run(config: TrainConfig) -> Run:
    """Build the task, tokenizer, policy and optimizer of ``config``, all seeded."""
    config.validate()
    torch.manual_seed(config.seed)
    if config.device == "cpu":
        torch.set_num_threads(config.threads)
    task = AdditionTask(n_terms=config.n_terms, max_term=config.max_term,
                        held_out=config.held_out, seed=config.seed)
    max_len = task.prompt_len + config.max_new_tokens
    policy = TinyGPT(d_model=config.d_model, n_layer=config.n_layer, n_head=config.n_head,
                 max_len=max_len, positions=config.positions).to(config.device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    generator = torch.Generator(device=config.device).manual_seed(config.seed)
    return Run(config, task, Tokenizer(), policy, None, optimizer,
               np.random.default_rng(config.seed), generator)


def encode_prompts(run: Run, terms, repeat: int = 1) -> torch.Tensor:
    """The prompts of ``terms`` as token ids, (B, P), each repeated ``repeat`` times in a row."""
    ids = [run.tokenizer.encode(run.task.prompt(t)) for t in terms]
    prompts = torch.tensor(ids, dtype=torch.long, device=run.device)     # (B, P)
    return prompts.repeat_interleave(repeat, dim=0)                      # (B*repeat, P)


def format_warmup(run: Run, stop=None) -> list[float]:
    """Supervised steps on ``<think></think><answer>N</answer>`` with a *random* N.

    It teaches the format and nothing about sums: each N is drawn uniformly from the possible
    answers, independently of the prompt. Returns the loss of each step. ``stop``, a callable,
    is asked before each step; True raises KeyboardInterrupt (a Ctrl-C that a library lost).
    """
    cfg = run.config
    optimizer = torch.optim.Adam(run.policy.parameters(), lr=cfg.warmup_lr)
    losses = []
    for _ in range(cfg.warmup_steps):
        if stop is not None and stop():
            raise KeyboardInterrupt
        terms = run.task.batch(cfg.warmup_batch, run.rng)
        guesses = run.rng.integers(0, run.task.max_answer + 1, size=len(terms))
        targets = [run.tokenizer.encode(f"{R.THINK[0]}{R.THINK[1]}{R.ANSWER[0]}{g}{R.ANSWER[1]}")
                   + [EOS] for g in guesses]
        T = max(len(t) for t in targets)
        tokens = torch.tensor([t + [0] * (T - len(t)) for t in targets], device=run.device)
        mask = torch.tensor([[1] * len(t) + [0] * (T - len(t)) for t in targets],
                            dtype=torch.bool, device=run.device)          # (N, T)
        logp = completion_logp(run.policy, encode_prompts(run, terms), tokens, mask)
        loss = -(logp.sum() / mask.sum())                                 # token-mean NLL
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def evaluate(run: Run, split: str = "held_out", *, greedy: bool = True) -> dict:
    """Accuracy and format rate on every prompt of ``split``, greedy by default."""
    pool = run.task.held_out if split == "held_out" else run.task.train
    tokens, _, _ = sample(run.policy, encode_prompts(run, pool), run.config.max_new_tokens,
                          temperature=0.0 if greedy else 1.0, generator=run.generator)
    texts = [run.tokenizer.decode(row) for row in tokens.tolist()]
    acc = [R.accuracy_reward(s, run.task.answer(t)) for s, t in zip(texts, pool)]
    fmt = [R.format_reward(s) for s in texts]
    return {"accuracy": float(np.mean(acc)), "format": float(np.mean(fmt)), "texts": texts}
