"""GRPO end to end: a tiny policy learns addition from rule-based rewards alone.

Taught in chapter 6 (``chapters/06_training_loop.ipynb``). Run it from a shell::

    python -m grpo_lab.train                       # the full run, about 2 minutes on 2 cores
    python -m grpo_lab.train --steps 50 --agg dapo --out runs/dapo
    python -m grpo_lab.train --help

One GRPO step (:func:`grpo_step`) is the whole algorithm:

1. **sample** G completions for each of B prompts from the current policy, which is also
   pi_old for this batch (:func:`rollout`);
2. **score** them with the rule-based rewards (:func:`score`): accuracy + weighted format;
3. **advantages** per group: ``glt.group_advantages(rewards)``, (B, G) -> (B*G,);
4. for ``inner_iters`` passes over the batch: **logp** under the current policy, **ratio**
   against ``old_logp``, **KL** against the frozen reference, **loss** = ``glt.grpo_loss``,
   and an optimizer **update** (:func:`update`).

Before GRPO, a short supervised **format warm-up** (like R1's cold start, but teaching only the
format: the answers in it are random numbers) teaches ``<think></think><answer>N</answer>``.
The policy then writes well-formed but wrong answers; :func:`train` measures that start.
The math lives in :mod:`grpo_lab.torch`; this module only wires it to a model and a task.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from grpo_lab.rl import rewards as R
from grpo_lab import torch as glt
from grpo_lab.numerics.validate import check_choice, check_int, check_real
from grpo_lab.rl.task import AdditionTask
from grpo_lab.rl.tiny_policy import EOS, TinyGPT, Tokenizer, completion_logp, sample

__all__ = ["TrainConfig", "Run", "Rollout", "make_run", "prepare", "format_warmup", "evaluate", "rollout",
           "score", "update", "grpo_step", "train", "main", "METRICS"]

REWARD_KINDS = ("accuracy", "contains")


@dataclass
class TrainConfig:
    """Every setting of a run. The defaults are the full run of chapter 6 and the CLI."""

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
    # format warm-up: supervised on the format with *random* answers (R1's cold start, format only)
    warmup_steps: int = 60
    warmup_batch: int = 64
    warmup_lr: float = 3e-3
    # GRPO
    steps: int = 400
    prompts_per_step: int = 32        # B
    group_size: int = 16              # G: completions per prompt
    inner_iters: int = 4              # mu: updates per batch; > 1 makes the ratio matter
    lr: float = 2e-3                  # Adam; 3e-3 learns faster, then collapses at step ~150
    max_grad_norm: float = 1.0        # global gradient-norm clip (TRL's default)
    eps_low: float = 0.2
    eps_high: float | None = None     # None: symmetric clip; DAPO's clip-higher uses 0.28
    beta: float = 0.04                # KL weight (DeepSeekMath: 0.04)
    kl: str = "k3"
    agg: str = "grpo"                 # grpo | bnpo | dapo | dr_grpo
    temperature: float = 1.0
    max_new_tokens: int = 8           # <think></think><answer>N</answer><eos> is 6 tokens
    reward: str = "accuracy"          # "contains" is chapter 5's deliberately weak verifier
    format_weight: float = 0.5        # reward = verifier + format_weight * format
    # bookkeeping
    eval_every: int = 25
    device: str = "cpu"
    threads: int = 2                  # torch CPU threads; the book's budget is 2 cores

    def validate(self) -> "TrainConfig":
        """Check every field; raise ValueError / TypeError naming it. Returns self."""
        ints = dict(seed=0, n_terms=2, max_term=1, d_model=8, n_layer=1, n_head=1,
                    warmup_steps=0, warmup_batch=1, steps=0, prompts_per_step=1, group_size=2,
                    inner_iters=1, max_new_tokens=1, eval_every=1, threads=1)
        for name, minimum in ints.items():
            check_int(name, getattr(self, name), minimum=minimum)
        for name in ("held_out", "warmup_lr", "lr", "eps_low", "beta", "temperature",
                     "format_weight", "max_grad_norm"):
            check_real(name, getattr(self, name), minimum=0.0)
        for name in ("lr", "warmup_lr", "temperature"):
            check_real(name, getattr(self, name), minimum=0.0, allow_equal=False)
        if self.eps_high is not None:
            check_real("eps_high", self.eps_high, minimum=0.0)
        check_choice("kl", self.kl, tuple(glt.KL_ESTIMATORS))
        check_choice("agg", self.agg, glt.AGGREGATIONS)
        check_choice("reward", self.reward, REWARD_KINDS)
        if not isinstance(self.device, str):
            raise TypeError(f"device: expected a str such as 'cpu' or 'cuda', got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device: expected 'cpu' on this machine (torch sees no CUDA "
                             f"device), got {self.device!r}")
        try:
            torch.device(self.device)
        except RuntimeError as exc:
            raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got "
                             f"{self.device!r}") from exc
        return self


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


def _encode_prompts(run: Run, terms, repeat: int = 1) -> torch.Tensor:
    ids = [run.tokenizer.encode(run.task.prompt(t)) for t in terms]
    prompts = torch.tensor(ids, dtype=torch.long, device=run.device)     # (B, P)
    return prompts.repeat_interleave(repeat, dim=0)                      # (B*repeat, P)


def format_warmup(run: Run) -> list[float]:
    """Supervised steps on ``<think></think><answer>N</answer>`` with a *random* N.

    It teaches the format and nothing about sums: each N is drawn uniformly from the possible
    answers, independently of the prompt. Returns the loss of each step.
    """
    cfg = run.config
    optimizer = torch.optim.Adam(run.policy.parameters(), lr=cfg.warmup_lr)
    losses = []
    for _ in range(cfg.warmup_steps):
        terms = run.task.batch(cfg.warmup_batch, run.rng)
        guesses = run.rng.integers(0, run.task.max_answer + 1, size=len(terms))
        targets = [run.tokenizer.encode(f"{R.THINK[0]}{R.THINK[1]}{R.ANSWER[0]}{g}{R.ANSWER[1]}")
                   + [EOS] for g in guesses]
        T = max(len(t) for t in targets)
        tokens = torch.tensor([t + [0] * (T - len(t)) for t in targets], device=run.device)
        mask = torch.tensor([[1] * len(t) + [0] * (T - len(t)) for t in targets],
                            dtype=torch.bool, device=run.device)          # (N, T)
        logp = completion_logp(run.policy, _encode_prompts(run, terms), tokens, mask)
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
    tokens, _, _ = sample(run.policy, _encode_prompts(run, pool), run.config.max_new_tokens,
                          temperature=0.0 if greedy else 1.0, generator=run.generator)
    texts = [run.tokenizer.decode(row) for row in tokens.tolist()]
    acc = [R.accuracy_reward(s, run.task.answer(t)) for s, t in zip(texts, pool)]
    fmt = [R.format_reward(s) for s in texts]
    return {"accuracy": float(np.mean(acc)), "format": float(np.mean(fmt)), "texts": texts}


@torch.no_grad()
def rollout(run: Run) -> Rollout:
    """Step 1: B prompts from the training split, G samples each from the current policy."""
    cfg = run.config
    terms = run.task.batch(cfg.prompts_per_step, run.rng, balanced=cfg.balanced)   # B
    prompts = _encode_prompts(run, terms, repeat=cfg.group_size)               # (N, P)
    tokens, mask, old_logp = sample(run.policy, prompts, cfg.max_new_tokens,
                                    temperature=cfg.temperature, generator=run.generator)
    texts = [run.tokenizer.decode(row) for row in tokens.tolist()]
    return Rollout(terms, prompts, tokens, mask, old_logp, texts)


def score(run: Run, batch: Rollout) -> dict:
    """Step 2: rule-based rewards, each (B, G), and their sum ``reward``."""
    cfg = run.config
    B, G = len(batch.terms), cfg.group_size
    answers = [run.task.answer(t) for t in batch.terms for _ in range(G)]       # (N,)
    verifier = R.accuracy_reward if cfg.reward == "accuracy" else R.contains_reward
    correct = np.array([verifier(s, a) for s, a in zip(batch.texts, answers)]).reshape(B, G)
    accuracy = np.array([R.accuracy_reward(s, a) for s, a in zip(batch.texts, answers)])
    fmt = np.array([R.format_reward(s) for s in batch.texts]).reshape(B, G)
    reward = R.weighted_sum([correct, fmt], [1.0, cfg.format_weight])           # (B, G)
    return {"reward": reward, "verifier": correct, "format": fmt,
            "accuracy": accuracy.reshape(B, G)}


def update(run: Run, batch: Rollout, adv: torch.Tensor) -> dict:
    """Step 4: ``inner_iters`` optimizer steps on the GRPO loss; returns the last diagnostics."""
    cfg = run.config
    ref_logp = None
    if cfg.beta > 0:                     # the reference is frozen: one forward pass per batch
        with torch.no_grad():
            ref_logp = completion_logp(run.reference, batch.prompts, batch.tokens,
                                       batch.mask)                                    # (N, T)
    for _ in range(cfg.inner_iters):
        logp = completion_logp(run.policy, batch.prompts, batch.tokens, batch.mask)   # (N, T)
        loss, diag = glt.grpo_loss(logp, batch.old_logp, ref_logp, adv, batch.mask,
                                   eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta,
                                   kl=cfg.kl, agg=cfg.agg)
        run.optimizer.zero_grad()
        loss.backward()
        # Clip the gradient's global norm (TRL's max_grad_norm = 1.0): one batch with a few
        # huge advantages must not throw the policy off its track.
        torch.nn.utils.clip_grad_norm_(run.policy.parameters(), cfg.max_grad_norm)
        run.optimizer.step()
        diag["loss"] = loss.item()
    return diag


def grpo_step(run: Run) -> dict:
    """One GRPO step (sample, score, advantages, update); returns its metrics."""
    batch = rollout(run)
    scores = score(run, batch)
    rewards = torch.tensor(scores["reward"], device=run.device)               # (B, G)
    adv = glt.group_advantages(rewards).reshape(-1)                           # (B*G,)
    diag = update(run, batch, adv)
    spread = np.ptp(scores["reward"], axis=1)                                 # (B,)
    return {
        "reward": float(scores["reward"].mean()),
        "train_accuracy": float(scores["accuracy"].mean()),
        "verifier": float(scores["verifier"].mean()),
        "format": float(scores["format"].mean()),
        "length": float(batch.mask.sum(dim=1).float().mean()),
        "zero_spread": float(np.mean(spread == 0)),
        "clip_frac": diag["clip_frac"],
        "kl": diag["mean_kl"] if diag["mean_kl"] is not None else 0.0,
        "approx_kl": diag["approx_kl"],
        "loss": diag["loss"],
    }


#: Every logged metric, with its definition (chapter 6 prints this glossary).
METRICS = {
    "step": "GRPO step (0 = after the format warm-up, before any GRPO update)",
    "reward": "mean reward of the step's B*G samples: accuracy + format_weight * format",
    "train_accuracy": "share of the step's samples (training prompts, temperature 1) that are right",
    "verifier": "mean of the verifier the run trains on (accuracy, or chapter 5's weak one)",
    "format": "share of samples in the <think>...</think><answer>...</answer> format",
    "length": "mean completion length in tokens, EOS included",
    "zero_spread": "share of groups whose G rewards are all equal: no advantage, no gradient",
    "clip_frac": "share of tokens whose ratio was clipped on the last inner iteration",
    "kl": "mean per-token KL estimate (config.kl) of the policy against the frozen reference",
    "approx_kl": "k3 estimate of KL(pi_old || pi_theta) on the last inner iteration: how far "
                 "the updates on this batch moved the policy",
    "loss": "the GRPO loss on the last inner iteration",
    "held_out_accuracy": "greedy accuracy on every held-out prompt (never trained on)",
    "held_out_format": "greedy format rate on the held-out prompts",
    "seconds": "wall-clock seconds since the start of the run (not seeded: never compare it)",
}


def prepare(config: TrainConfig) -> Run:
    """A run ready for GRPO: built, format-warmed-up, its reference frozen, its start measured.

    ``run.warmup_losses`` holds the warm-up's losses and ``run.start`` the held-out accuracy
    and format rate (:func:`evaluate`) that GRPO starts from.
    """
    run = make_run(config)
    run.warmup_losses = format_warmup(run)
    run.reference = copy.deepcopy(run.policy).eval().requires_grad_(False)   # pi_ref, frozen
    run.start = evaluate(run)
    return run


def train(config: TrainConfig, *, progress: bool = True, log_path=None) -> Run:
    """Warm up, then run ``config.steps`` GRPO steps; ``run.history`` holds one dict per step.

    Ctrl-C (KeyboardInterrupt) stops after the current step and keeps everything so far; the
    run is returned either way and ``run.interrupted`` says which. With ``log_path`` the
    history is also written as CSV after every evaluation.
    """
    start = time.perf_counter()
    run = prepare(config)
    run.interrupted = False
    bar = _progress_bar(config.steps, progress)
    held = {"held_out_accuracy": run.start["accuracy"], "held_out_format": run.start["format"]}
    run.history.append({"step": 0, **{k: math.nan for k in METRICS if k not in
                                      ("step", "seconds")}, **held,
                        "seconds": time.perf_counter() - start})
    try:
        for step in range(1, config.steps + 1):
            row = {"step": step, **grpo_step(run)}
            if step % config.eval_every == 0 or step == config.steps:
                ev = evaluate(run)
                held = {"held_out_accuracy": ev["accuracy"], "held_out_format": ev["format"]}
            else:
                held = {"held_out_accuracy": math.nan, "held_out_format": math.nan}
            row.update(held, seconds=time.perf_counter() - start)
            run.history.append(row)
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward']:.2f}",
                            held_out=f"{run.history[-1]['held_out_accuracy']:.2f}"
                            if not math.isnan(row["held_out_accuracy"]) else "-")
            if log_path is not None and not math.isnan(row["held_out_accuracy"]):
                write_csv(run.history, log_path)
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        bar.close()
    run.final = evaluate(run)
    run.seconds = time.perf_counter() - start
    return run


def _progress_bar(total, enabled):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="GRPO", unit="step", disable=not enabled, leave=True)


def write_csv(history, path) -> Path:
    """One row per step, one column per metric (NaN where a metric was not measured)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(METRICS))
        writer.writeheader()
        for row in history:
            writer.writerow({k: row.get(k, math.nan) for k in METRICS})
    return path


def plot_history(history, *, fig=None, title=None):
    """The six curves of chapter 6 on one figure (returns the matplotlib Figure)."""
    import matplotlib.pyplot as plt

    steps = np.array([h["step"] for h in history])
    col = {k: np.array([h.get(k, math.nan) for h in history], dtype=float) for k in METRICS}
    fig = fig or plt.figure(figsize=(12, 6.5))
    fig.clear()
    axes = fig.subplots(2, 3).ravel()
    held = ~np.isnan(col["held_out_accuracy"])
    panels = [
        ("accuracy", [("train (sampled)", col["train_accuracy"], "-"),
                      ("held-out (greedy)", col["held_out_accuracy"], "o-")], (0, 1.02)),
        ("reward", [("reward", col["reward"], "-"), ("format", col["format"], "-")], None),
        ("completion length (tokens)", [("length", col["length"], "-")], None),
        ("clip fraction", [("clip_frac", col["clip_frac"], "-")], None),
        ("KL to reference", [("kl", col["kl"], "-")], None),
        ("groups with zero spread", [("zero_spread", col["zero_spread"], "-")], (0, 1.02)),
    ]
    for ax, (label, series, ylim) in zip(axes, panels):
        for name, y, style in series:
            mask = held if style == "o-" else ~np.isnan(y)
            ax.plot(steps[mask], y[mask], style, ms=3, label=name)
        ax.set(xlabel="GRPO step", ylabel=label)
        if ylim:
            ax.set_ylim(*ylim)
        if len(series) > 1:
            ax.legend(fontsize=8)
    final = col["held_out_accuracy"][held][-1] if held.any() else math.nan
    fig.suptitle(title or f"GRPO on addition: held-out accuracy {col['held_out_accuracy'][0]:.0%}"
                 f" -> {final:.0%}")
    fig.tight_layout()
    return fig


# --- command line -----------------------------------------------------------------------------

def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _optional_float(text: str):
    return None if text.lower() == "none" else float(text)


_ARG_TYPES = {"int": int, "float": float, "str": str, "bool": _bool,
              "float | None": _optional_float}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_lab.train",
        usage="python -m grpo_lab.train [--OPTION VALUE ...] [--out DIR] [--quiet]",
        description="Train GRPO Lab's tiny policy on addition with GRPO (chapter 6). Writes "
                    "history.csv, summary.json and curves.png to --out. Ctrl-C stops after the "
                    "current step and still writes them.")
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        default = getattr(defaults, f.name)
        p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=_ARG_TYPES[f.type],
                       default=default, metavar=f.type.split(" ")[0].upper(),
                       help=f"default: {default}")
    p.add_argument("--out", default="runs/grpo", help="output folder (default: runs/grpo)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def summary(run: Run) -> dict:
    """The numbers a run ends with (what the CLI prints and saves as summary.json)."""
    return {
        "start_held_out_accuracy": run.start["accuracy"],
        "start_held_out_format": run.start["format"],
        "final_held_out_accuracy": run.final["accuracy"],
        "final_held_out_format": run.final["format"],
        "steps_done": run.history[-1]["step"],
        "interrupted": run.interrupted,
        "seconds": round(run.seconds, 1),
        "config": dataclasses.asdict(run.config),
    }


def main(argv=None) -> int:
    parser = _parser()
    args = vars(parser.parse_args(argv))
    out, quiet = Path(args.pop("out")), args.pop("quiet")
    config = TrainConfig(**args)
    try:
        config.validate()
    except (TypeError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")        # status 2, as argparse does
    out.mkdir(parents=True, exist_ok=True)
    print(f"GRPO Lab: training on {config.device} with {config.threads} thread(s); "
          f"log in {out}/", file=sys.stderr)
    run = train(config, progress=not quiet, log_path=out / "history.csv")
    write_csv(run.history, out / "history.csv")
    info = summary(run)
    (out / "summary.json").write_text(json.dumps(info, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    plot_history(run.history).savefig(out / "curves.png", dpi=120)
    state = "interrupted (Ctrl-C) after" if run.interrupted else "finished"
    print(f"\n{state} {info['steps_done']} GRPO steps in {info['seconds']} s\n"
          f"  held-out accuracy: {info['start_held_out_accuracy']:.1%} after the format warm-up"
          f" -> {info['final_held_out_accuracy']:.1%}\n"
          f"  held-out format:   {info['start_held_out_format']:.1%} -> "
          f"{info['final_held_out_format']:.1%}\n"
          f"  wrote {out / 'history.csv'}, {out / 'summary.json'}, {out / 'curves.png'}")
    return 130 if run.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
