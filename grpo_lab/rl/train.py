"""GRPO end to end: a tiny policy learns addition from rule-based rewards alone.

Taught in chapter 6 (``chapters/06_training_loop.ipynb``). Run it from a shell::

    python -m grpo_lab.train                       # the full run; prints its wall time
    python -m grpo_lab.train --steps 50 --agg dapo --out runs/dapo
    python -m grpo_lab.train --help

(the command line is :mod:`grpo_lab.rl.cli`; the settings, the metrics and the CSV log are
:mod:`grpo_lab.rl.train_config`; the curves are drawn by ``gl.book.ch06``).

One GRPO step (:func:`grpo_step`) is the whole algorithm:

1. **sample** G completions for each of B prompts from the current policy, which is also
   pi_old for this batch (:func:`rollout`);
2. **score** them with the rule-based rewards (:func:`score`): accuracy + weighted format;
3. **advantages** per group: ``glt.group_advantages(rewards)``, (B, G) -> (B*G,);
4. for ``inner_iters`` passes over the batch: **logp** under the current policy, **ratio**
   against ``old_logp``, **KL** against the frozen reference, **loss** = ``glt.grpo_loss``
   (minus ``entropy_coef`` times the mean token entropy, when set), and an optimizer
   **update** (:func:`update`).

Two costs are cut the way real trainers cut them: sampling keeps a KV cache (each token is
read once), and the update computes each group's shared prompt once (``prompt_repeats``).

Before GRPO, a short supervised **format warm-up** teaches ``<think></think><answer>N</answer>``
with random answers (R1-Zero needed none: it started from a pretrained model; this policy has
no pretraining). The policy then writes well-formed but wrong answers; :func:`train` measures
that start. The run's state, the warm-up and the evaluation are :mod:`grpo_lab.rl.run_state`;
the math lives in :mod:`grpo_lab.torch`; this module only wires it to a model and a task.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time

import numpy as np
import torch

from grpo_lab import torch as glt
from grpo_lab.numerics.validate import check_choice
from grpo_lab.rl import rewards as R
from grpo_lab.rl.run_state import (Rollout, Run, encode_prompts, evaluate, format_warmup,
                                   make_run)
from grpo_lab.rl.tiny_policy import completion_logp, sample
from grpo_lab.rl.train_config import METRICS, REWARD_KINDS, TrainConfig, write_csv

__all__ = ["METRICS", "REWARD_KINDS", "Rollout", "Run", "TrainConfig", "TrainingInterrupted",
           "encode_prompts", "evaluate",
           "format_warmup", "grpo_step", "main", "make_run", "prepare", "rollout", "score",
           "summary", "train", "update", "write_csv"]


@torch.no_grad()
def rollout(run: Run) -> Rollout:
    """Step 1: B prompts from the training split, G samples each from the current policy."""
    cfg = run.config
    terms = run.task.batch(cfg.prompts_per_step, run.rng, balanced=cfg.balanced)   # B
    prompts = encode_prompts(run, terms, repeat=cfg.group_size)               # (N, P)
    # Four (N, T) tensors: ids padded with PAD after EOS, the mask (True up to and including
    # EOS), log pi_old of each sampled token and each sampling distribution's entropy.
    tokens, mask, old_logp, entropy = sample(run.policy, prompts, cfg.max_new_tokens,
                                             temperature=cfg.temperature,
                                             generator=run.generator, entropy=True)
    texts = [run.tokenizer.decode(row) for row in tokens.tolist()]          # N strings
    return Rollout(terms, prompts, tokens, mask, old_logp, texts, entropy)


def score(run: Run, batch: Rollout) -> dict:
    """Step 2: rule-based rewards, each (B, G), and their sum ``reward``."""
    cfg = run.config
    B, G = len(batch.terms), cfg.group_size
    answers = [run.task.answer(t) for t in batch.terms for _ in range(G)]       # (N,)
    verifier = R.accuracy_reward if cfg.reward == "accuracy" else R.contains_reward
    pairs = list(zip(batch.texts, answers))                                      # (N,)
    # A group's G samples often repeat: score each distinct (text, answer) once.
    memo = {p: (verifier(*p), R.accuracy_reward(*p), R.format_reward(p[0])) for p in set(pairs)}
    correct, accuracy, fmt = (np.array([memo[p][k] for p in pairs]).reshape(B, G)
                              for k in range(3))                                 # 3 x (B, G)
    reward = R.weighted_sum([correct, fmt], [1.0, cfg.format_weight])           # (B, G)
    return {"reward": reward, "verifier": correct, "format": fmt, "accuracy": accuracy}


def update(run: Run, batch: Rollout, adv: torch.Tensor) -> dict:
    """Step 4: ``inner_iters`` optimizer steps on the GRPO loss; returns the last diagnostics."""
    cfg = run.config
    G = batch.prompts.shape[0] // len(batch.terms)
    shared = dict(temperature=cfg.temperature, prompt_repeats=G)   # one prompt per group
    prompts = batch.prompts[::G]                                   # (B, P)
    ref_logp = None
    if cfg.beta > 0:                     # the reference is frozen: one forward pass per batch
        with torch.no_grad():
            ref_logp = completion_logp(run.reference, prompts, batch.tokens, batch.mask,
                                       **shared)                                     # (N, T)
    bonus = cfg.entropy_coef > 0         # the entropy costs a pass over (N, T, V): only if used
    for _ in range(cfg.inner_iters):
        logp = completion_logp(run.policy, prompts, batch.tokens, batch.mask, entropy=bonus,
                               **shared)                                              # (N, T)
        if bonus:
            logp, entropy = logp
        loss, diag = glt.grpo_loss(logp, batch.old_logp, ref_logp, adv, batch.mask,
                                   eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta,
                                   kl=cfg.kl, agg=cfg.agg)
        if bonus:                        # the entropy bonus: - alpha * mean token entropy
            loss = loss - cfg.entropy_coef * entropy[batch.mask].mean()
        run.optimizer.zero_grad()
        loss.backward()
        # Clip the gradient's global norm (TRL's max_grad_norm = 1.0): one batch with a few
        # huge advantages must not throw the policy off its track.
        torch.nn.utils.clip_grad_norm_(run.policy.parameters(), cfg.max_grad_norm)
        run.optimizer.step()
        diag["loss"] = loss.item()
    if ref_logp is not None:             # one token's KL estimate can dwarf the mean: log it
        per_token = glt.KL_ESTIMATORS[cfg.kl](logp.detach(), ref_logp)       # (N, T)
        diag["kl_max"] = float(per_token[batch.mask].max())
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
        "entropy": float(batch.entropy[batch.mask].mean()),
        "zero_spread": float(np.mean(spread == 0)),
        "clip_frac": diag["clip_frac"],
        "kl": diag["mean_kl"] if diag["mean_kl"] is not None else 0.0,
        "kl_max": diag.get("kl_max", 0.0),
        "approx_kl": diag["approx_kl"],
        "loss": diag["loss"],
    }


def prepare(config: TrainConfig, stop=None) -> Run:
    """A run ready for GRPO: built, format-warmed-up, its reference frozen, its start measured.

    ``run.warmup_losses`` holds the warm-up's losses and ``run.start`` the held-out accuracy
    and format rate (:func:`evaluate`) that GRPO starts from; ``stop`` as in :func:`train`.
    """
    run = make_run(config)
    run.warmup_losses = format_warmup(run, stop)
    run.reference = copy.deepcopy(run.policy).eval().requires_grad_(False)   # pi_ref, frozen
    run.start = evaluate(run)
    return run


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a cell timeout) stopped :func:`train`; ``.run`` is the partial run.

    A KeyboardInterrupt, so whatever interrupted the run still sees its interrupt: a script
    exits, nbval and the book build fail the cell instead of printing a partial result.
    """

    def __init__(self, run: Run):
        super().__init__(f"training interrupted after {run.history[-1]['step']} GRPO steps; "
                         f"the partial run is this exception's .run")
        self.run = run


def train(config: TrainConfig, *, progress: bool = True, log_path=None,
          on_interrupt: str = "raise", stop=None) -> Run:
    """Warm up, then run ``config.steps`` GRPO steps; ``run.history`` holds one dict per step.

    Ctrl-C (KeyboardInterrupt) stops after the current step and measures the policy where it
    stopped (``run.final``, ``run.interrupted = True``). Then, by default, it raises
    :class:`TrainingInterrupted` (a KeyboardInterrupt carrying ``.run``), so that a script,
    a timed-out notebook cell or a CI job never mistakes a partial run for a result;
    ``on_interrupt="return"`` returns the partial run instead (an interactive session that
    wants it). With ``log_path`` the history is written as CSV after every evaluation.
    ``stop``, a callable asked before every step, turns True into the same interrupt: the
    command line's Ctrl-C flag, for a KeyboardInterrupt that a library swallowed.
    """
    check_choice("on_interrupt", on_interrupt, ("raise", "return"))
    start = time.perf_counter()
    run = prepare(config, stop)
    run.interrupted = False
    bar = _progress_bar(config.steps, progress)
    held = {"held_out_accuracy": run.start["accuracy"], "held_out_format": run.start["format"]}
    run.history.append({"step": 0, **{k: math.nan for k in METRICS if k not in
                                      ("step", "seconds")}, **held,
                        "seconds": time.perf_counter() - start})
    try:
        for step in range(1, config.steps + 1):
            if stop is not None and stop():
                raise KeyboardInterrupt
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
                            held_out=f"{row['held_out_accuracy']:.2f}"
                            if not math.isnan(row["held_out_accuracy"]) else "-")
            if log_path is not None and not math.isnan(row["held_out_accuracy"]):
                write_csv(run.history, log_path)
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        bar.close()
    run.final = evaluate(run)
    run.seconds = time.perf_counter() - start
    if run.interrupted and on_interrupt == "raise":
        raise TrainingInterrupted(run)
    return run


def _progress_bar(total, enabled):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="GRPO", unit="step", disable=not enabled, leave=True)


def summary(run: Run) -> dict:
    """The numbers a run ends with (what the CLI prints and saves as summary.json)."""
    return {
        "start_held_out_accuracy": run.start["accuracy"],
        "start_held_out_format": run.start["format"],
        "final_held_out_accuracy": run.final["accuracy"],
        "final_held_out_format": run.final["format"],
        "steps_done": run.history[-1]["step"],
        "interrupted": run.interrupted,
        "seconds": round(run.seconds, 3),     # ms: a tiny run can take < 0.05 s
        "config": dataclasses.asdict(run.config),
    }


def main(argv=None) -> int:
    """``python -m grpo_lab.train``: parse ``argv``, train, write the log, the summary and the
    curves; returns the exit status (see :func:`grpo_lab.rl.cli.main`)."""
    from grpo_lab.rl.cli import main as cli_main   # the CLI imports this module, not back

    return cli_main(argv)


def __getattr__(name):
    if name == "plot_history":
        raise AttributeError("grpo_lab.rl.train.plot_history moved to the book's chapter 6 "
                             "module: gl.book.ch06.training_curves_figure(history)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
