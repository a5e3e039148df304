"""Drill checker for chapter 1: group-relative advantages.

The drill: ``my_group_advantages(rewards, eps=1e-8)``, rewards (B, G) -> (r - group mean) /
(group std + eps), statistics along the last axis with keepdims, the population std (ddof=0),
an all-equal group giving 0, the caller's array left alone.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.drills.harness import call, named_mistake, verdict

__all__ = ["check_group_advantages"]

_KEEPDIMS = (" (a group statistic of shape (B,) does not broadcast against (B, G): keep it "
             "(B, 1) with keepdims=True)")


def _call(fn, rewards, where, shape):
    return call(fn, rewards, where=where, shape=shape, returns="the advantages array",
                shape_hint="; advantages have the rewards' shape (B, G)",
                broadcast_hint=_KEEPDIMS)


def check_group_advantages(fn, *, eps=1e-8, verbose=True) -> bool:
    """Check ``fn(rewards) -> advantages`` against GRPO's formula with the population std.

    The drill: rewards (B, G) -> (r - group mean) / (group std + eps), statistics along the
    last axis, ddof=0, an all-equal group giving 0.
    """
    say = verdict(verbose, fn)

    # 1. the worked example, with the usual slips named
    right = np.array([[1.0, -1.0, 1.0, -1.0]])                     # (B=1, G=4)
    out, problem = _call(fn, [[1.0, 0.0, 1.0, 0.0]], "[[1, 0, 1, 0]]", (1, 4))
    if problem:
        return say(False, problem)
    if not np.allclose(out, right, rtol=1e-6):
        hint = named_mistake(out, {
            "you gave +-0.866, expected +-1: that is Bessel's std (ddof=1, torch.std's "
            "default); this drill uses the population std (ddof=0)": np.sqrt(3) / 2 * right,
            "you gave +-0.5, expected +-1: the mean is subtracted but the std is not divided "
            "out": right / 2,
            "you gave all zeros, expected +-1: were the mean and std taken over axis 0? Each "
            "row is a group, so take them along the last axis (axis=-1)": 0.0,
            "the signs are flipped: a right answer (reward above the group mean) must get a "
            "positive advantage": -right,
        })
        hint = hint or f"you gave {np.round(out, 4).tolist()}, expected about [[1, -1, 1, -1]]"
        return say(False, f"on [[1, 0, 1, 0]] {hint}")

    # 2. several groups: statistics must be per group, along the last axis
    rewards = np.array([[1.0, 2.0, 3.0, 6.0], [10.0, 10.0, 40.0, 20.0],
                        [0.0, 1.0, 0.0, 0.0]])                      # (B=3, G=4)
    expected = group_advantages(rewards, eps)
    out, problem = _call(fn, rewards, "a batch of 3 groups", rewards.shape)
    if problem:
        return say(False, problem)
    if not np.allclose(out, expected, rtol=1e-6, atol=1e-9):
        hint = named_mistake(out, {
            "the statistics were taken over axis 0 (across prompts); take them over the last "
            "axis, within each group": (rewards - rewards.mean(0)) / (rewards.std(0) + eps),
            "the mean and std were taken over the whole batch; each prompt's group needs its "
            "own (axis=-1, keepdims=True)": (rewards - rewards.mean()) / (rewards.std() + eps),
        })
        hint = hint or f"row 0 should be {np.round(expected[0], 4).tolist()}"
        return say(False, f"on a batch of 3 groups the advantages are wrong: {hint}")

    # 3. square batch (B == G): a missing keepdims broadcasts silently along the wrong axis
    square = np.array([[1.0, 0.0, 0.0], [5.0, 6.0, 9.0], [2.0, 2.0, 3.0]])   # (3, 3)
    out, problem = _call(fn, square, "a 3x3 batch", square.shape)
    if problem:
        return say(False, problem)
    if not np.allclose(out, group_advantages(square, eps), rtol=1e-6, atol=1e-9):
        return say(False, "on a batch with B == G the result is wrong, though B != G worked: "
                          "a mean of shape (B,) broadcasts along the last axis; keep it "
                          "(B, 1) with keepdims=True")

    # 4. the all-equal group
    out, problem = _call(fn, [[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 1.0]],
                         "an all-equal group", (2, 4))
    if problem:
        return say(False, problem)
    if not np.isfinite(out).all():
        return say(False, "an all-equal group gave NaN or inf, expected 0: is the std "
                          "guarded with eps?")
    if not np.allclose(out[0], 0.0, atol=1e-6):
        return say(False, f"an all-equal group gave {np.round(out[0], 4).tolist()}, "
                          "expected 0: no spread, no signal")

    return say(True, "worked example, per-group statistics, B == G and the all-equal group "
                     "are all right")
