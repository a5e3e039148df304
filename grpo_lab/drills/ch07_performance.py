"""Drill checkers for chapter 7: a blocked group_advantages, and the surrogate's gradient.

``check_blocked_advantages(fn)`` and ``check_surrogate_grad(fn)`` print a short verdict and
return True or False.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.surrogate import surrogate_grad_logp
from grpo_lab.drills.harness import call, named_mistake, verdict

__all__ = ["check_blocked_advantages", "check_surrogate_grad"]


def check_blocked_advantages(fn, *, verbose=True) -> bool:
    """Check ``fn(rewards, block_rows) -> advantages`` (float32 in, float32 out), done in blocks.

    The drill (chapter 7): the formula of :func:`group_advantages` on a (B, G) float32 array,
    a block of ``block_rows`` rows at a time, float64 inside the block, the result written
    into one float32 array, so that no temporary is larger than a block.
    """
    say = verdict(verbose, fn)
    rng = np.random.default_rng(7)
    rewards = rng.normal(size=(3000, 16)).astype(np.float32)       # (B, G)
    rewards[5] = 0.1                                                 # an all-equal group
    expected = group_advantages(rewards)
    given = rewards.copy()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(given, 256)
        peak = tracemalloc.get_traced_memory()[1] - base
    except Exception as exc:  # the reader's bug, reported rather than raised
        return say(False, f"on (3000, 16) float32 rewards with block_rows=256 your function "
                          f"raised {type(exc).__name__}: {exc}")
    finally:
        tracemalloc.stop()
    if not np.array_equal(given, rewards):
        return say(False, "it modified its input: work on a copy of each block")
    if not isinstance(out, np.ndarray):
        return say(False, f"it returned {type(out).__name__}, expected a NumPy array")
    if out.shape != rewards.shape:
        return say(False, f"it returned shape {out.shape}, expected {rewards.shape}")
    if out.dtype != np.float32:
        return say(False, f"it returned {out.dtype}; float32 rewards give float32 advantages "
                          "(allocate the output with np.empty_like(rewards))")
    if not np.all(out[5] == 0):
        return say(False, "the all-equal group (row 5, every reward 0.1) is not exactly 0: "
                          "subtract the row's first reward before the mean, or compute the "
                          "mean in float64 where G copies of a float32 sum exactly")
    close = np.abs(out.astype(np.float64) - expected) <= 4 * np.spacing(np.abs(expected)) + 1e-7
    if not close.all():
        row = int(np.argwhere(~close)[0, 0])
        return say(False, f"row {row} differs from gl.group_advantages: "
                          f"{np.round(out[row, :4], 6).tolist()} vs "
                          f"{np.round(expected[row, :4], 6).tolist()} (population std, "
                          "eps = 1e-8 added to the std)")
    block_bytes = 256 * 16 * 8                                       # one float64 block
    if peak > out.nbytes + 8 * block_bytes:
        return say(False, f"right values, but the peak memory was over "
                          f"{int(peak // out.nbytes)}x the output: some temporary is the size "
                          "of the whole input. Only the output may be; keep the rest to a block")
    return say(True, f"equal to gl.group_advantages, exact zeros, and a peak of "
                     f"{peak / out.nbytes:.1f}x the output")


def check_surrogate_grad(fn, *, verbose=True) -> bool:
    """Check ``fn(ratio, adv, eps_low, eps_high) -> d loss / d logp`` of PPO's clipped loss.

    The drill (chapter 7): the per-token gradient the fused loss computes in its forward pass,
    for the loss ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` with ``r = exp(logp -
    old_logp)``; compared with the package's :func:`grpo_lab.surrogate_grad_logp`.
    """
    say = verdict(verbose, fn)
    ratio = np.array([1.0, 1.1, 1.5, 0.5, 0.9, 0.5, 1.5, 1.25])   # 1.25: inside 1 + eps_high only
    adv = np.array([1.0, 2.0, 1.0, 1.0, -1.0, -1.0, -1.0, 1.0])
    out, problem = call(fn, ratio, adv, 0.2, 0.28, where="the worked example", shape=ratio.shape,
                        shape_hint=": one gradient per token", returns="the (T,) gradient")
    if problem:
        return say(False, problem)
    logp, old = np.log(ratio)[None], np.zeros((1, ratio.size))      # (1, T): r = exp(logp - old)
    expected = surrogate_grad_logp(logp, old, adv[None], eps_low=0.2, eps_high=0.28)[0]   # (T,)
    if not np.allclose(out, expected, atol=1e-6):
        hint = named_mistake(out, {
            "the gradient with respect to the ratio, -A: the loss is differentiated with "
            "respect to logp, and d r / d logp = r": np.where(expected != 0, -adv, 0.0),
            "no clipping: where the clipped term wins, the gradient is 0": -adv * ratio,
            "the sign is flipped: the loss is minus the objective": -expected,
        }, rtol=1e-5, atol=1e-6)
        return say(False, hint or f"on ratios {ratio.tolist()} with A = {adv.tolist()} you "
                                  f"gave {np.round(out, 4).tolist()}, expected "
                                  f"{np.round(expected, 4).tolist()}")
    return say(True, "-A r where the unclipped term wins, 0 where the clip holds, both sides, "
                     "asymmetric range")
