"""Drill checker for chapter 1: group-relative advantages.

The drill: ``my_group_advantages(rewards, eps=1e-8)``, rewards (B, G) -> (r - group mean) /
(group std + eps), statistics along the last axis with keepdims, the population std (ddof=0),
an all-equal group giving 0, the caller's array left alone.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.drills._harness import call, verdict as _verdict

__all__ = ["check_group_advantages"]


def _run(fn, rewards):
    return call(fn, rewards, returns="the advantages array", broadcast_hint=(
        " (a group statistic of shape (B,) does not broadcast against (B, G): keep it (B, 1) "
        "with keepdims=True)"))


def check_group_advantages(fn, *, eps=1e-8, verbose=True) -> bool:
    """Check ``fn(rewards) -> advantages`` against GRPO's formula with the population std.

    The drill: rewards (B, G) -> (r - group mean) / (group std + eps), statistics along the
    last axis, ddof=0, an all-equal group giving 0.
    """
    verdict = _verdict(verbose, fn)

    # 1. the worked example
    out, problem = _run(fn, [[1.0, 0.0, 1.0, 0.0]])
    if problem:
        return verdict(False, f"on [[1, 0, 1, 0]] your function {problem}")
    if out.shape != (1, 4):
        return verdict(False, f"on rewards of shape (1, 4) it returned shape {out.shape}; "
                              "advantages have the rewards' shape (B, G)")
    if np.allclose(out, [[1.0, -1.0, 1.0, -1.0]], rtol=1e-6):
        pass
    elif np.allclose(out, np.sqrt(3) / 2 * np.array([[1.0, -1.0, 1.0, -1.0]]), rtol=1e-6):
        return verdict(False, "on [[1, 0, 1, 0]] you gave +-0.866, expected +-1: that is "
                              "Bessel's std (ddof=1, torch.std's default); this drill uses "
                              "the population std (ddof=0)")
    elif np.allclose(out, [[0.5, -0.5, 0.5, -0.5]]):
        return verdict(False, "on [[1, 0, 1, 0]] you gave +-0.5, expected +-1: the "
                              "mean is subtracted but the std is not divided out")
    elif np.allclose(out, 0.0):
        return verdict(False, "on [[1, 0, 1, 0]] you gave all zeros, expected +-1: were the "
                              "mean and std taken over axis 0? Each row is a group, so "
                              "take them along the last axis (axis=-1)")
    elif np.allclose(out, -np.array([[1.0, -1.0, 1.0, -1.0]]), rtol=1e-6):
        return verdict(False, "on [[1, 0, 1, 0]] the signs are flipped: a right answer "
                              "(reward above the group mean) must get a positive advantage")
    else:
        return verdict(False, f"on [[1, 0, 1, 0]] you gave {np.round(out, 4).tolist()}, "
                              "expected about [[1, -1, 1, -1]]")

    # 2. several groups: statistics must be per group, along the last axis
    rewards = np.array([[1.0, 2.0, 3.0, 6.0], [10.0, 10.0, 40.0, 20.0],
                        [0.0, 1.0, 0.0, 0.0]])                      # (B=3, G=4)
    expected = group_advantages(rewards, eps)
    out, problem = _run(fn, rewards)
    if problem:
        return verdict(False, f"on a batch of 3 groups your function {problem}")
    if out.shape != rewards.shape:
        return verdict(False, f"on rewards of shape {rewards.shape} it returned shape "
                              f"{out.shape}; expected {rewards.shape}")
    if not np.allclose(out, expected, rtol=1e-6, atol=1e-9):
        axis0 = (rewards - rewards.mean(0)) / (rewards.std(0) + eps)
        whole = (rewards - rewards.mean()) / (rewards.std() + eps)
        if np.allclose(out, axis0, rtol=1e-6):
            hint = ("the statistics were taken over axis 0 (across prompts); take them over "
                    "the last axis, within each group")
        elif np.allclose(out, whole, rtol=1e-6):
            hint = ("the mean and std were taken over the whole batch; each prompt's group "
                    "needs its own (axis=-1, keepdims=True)")
        else:
            hint = "row 0 should be " + str(np.round(expected[0], 4).tolist())
        return verdict(False, f"on a batch of 3 groups the advantages are wrong: {hint}")

    # 3. square batch (B == G): a missing keepdims broadcasts silently along the wrong axis
    square = np.array([[1.0, 0.0, 0.0], [5.0, 6.0, 9.0], [2.0, 2.0, 3.0]])   # (3, 3)
    out, problem = _run(fn, square)
    if problem:
        return verdict(False, f"on a 3x3 batch your function {problem}")
    if not np.allclose(out, group_advantages(square, eps), rtol=1e-6, atol=1e-9):
        return verdict(False, "on a batch with B == G the result is wrong, though B != G "
                              "worked: a mean of shape (B,) broadcasts along the last axis; "
                              "keep it (B, 1) with keepdims=True")

    # 4. the all-equal group
    out, problem = _run(fn, [[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 1.0]])
    if problem:
        return verdict(False, f"on an all-equal group your function {problem}")
    if np.isnan(out).any() or np.isinf(out).any():
        return verdict(False, "an all-equal group gave NaN or inf, expected 0: is the std "
                              "guarded with eps?")
    if not np.allclose(out[0], 0.0, atol=1e-6):
        return verdict(False, f"an all-equal group gave {np.round(out[0], 4).tolist()}, "
                              "expected 0: no spread, no signal")

    return verdict(True, "worked example, per-group statistics, B == G and the all-equal "
                         "group are all right")
