"""Drill checker for chapter 8: the reader writes DeepSeekMath's process advantages.

``check_process_advantages(fn)`` prints a short verdict and returns True or False.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.process import process_advantages
from grpo_lab.drills.harness import call, named_mistake, verdict

__all__ = ["check_process_advantages"]


def _call(fn, rewards, mask, where):
    """Run the reader's function on copies (float64 rewards, bool mask) through the harness."""
    rewards, mask = np.array(rewards, dtype=np.float64), np.array(mask, dtype=bool)
    return call(fn, rewards, mask, where=where, shape=rewards.shape, dtype=None,
                shape_hint=": one advantage per step", returns="the (G, K) array")


def _expected(rewards, mask):
    return process_advantages(np.asarray(rewards, dtype=np.float64)[None],
                              np.asarray(mask)[None])[0]


def check_process_advantages(fn, *, verbose=True) -> bool:
    """Check ``fn(step_rewards, step_mask) -> adv`` for ONE group, shapes (G, K) -> (G, K).

    Normalise the rewards of all real steps of the group together (population std, eps 1e-8);
    each step's advantage is the sum of its own and the later steps' normalised rewards; padded
    steps get 0.
    """
    say = verdict(verbose, fn)
    rewards = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    full = np.ones((2, 3), dtype=bool)
    out, problem = _call(fn, rewards, full, "the worked example (a (2, 3) group)")
    if problem:
        return say(False, problem)
    expected = _expected(rewards, full)
    if not np.allclose(out, expected, atol=1e-6):
        r = np.asarray(rewards)
        norm = (r - r.mean()) / (r.std() + 1e-8)
        per_row = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-8)
        hint = named_mistake(out, {
            "those are the normalised rewards; the advantage of step j also adds the later "
            "steps' (a reversed cumulative sum along K)": norm,
            "that sums the earlier steps; DeepSeekMath credits a step with the steps at or "
            "AFTER it": np.cumsum(norm, axis=1),
            "that normalises each completion on its own; mean and std run over all steps of "
            "the group": np.flip(np.cumsum(np.flip(per_row, 1), 1), 1),
        }, rtol=1e-5, atol=1e-6)
        if hint:
            return say(False, f"on the worked example: {hint}")
        return say(False, f"on the worked example you gave {np.round(out, 4).tolist()}, "
                          f"expected {np.round(expected, 4).tolist()}")

    ragged = [[0.9, 0.2, 5.0], [0.4, 7.0, 7.0]]
    mask = np.array([[1, 1, 0], [1, 0, 0]], dtype=bool)
    out, problem = _call(fn, ragged, mask, "a group with ragged steps")
    if problem:
        return say(False, problem)
    if np.any(out[~mask] != 0):
        return say(False, "padded steps must get exactly 0")
    if not np.allclose(out, _expected(ragged, mask), atol=1e-6):
        return say(False, "with ragged steps the values are wrong: are padded steps left out "
                          "of the mean and the std?")

    same = np.full((3, 2), 0.7)
    out, problem = _call(fn, same, np.ones((3, 2), dtype=bool), "an all-equal group")
    if problem:
        return say(False, problem)
    if not np.all(np.isfinite(out)) or np.any(np.abs(out) > 1e-6):
        return say(False, "an all-equal group must give 0 everywhere (no NaN): add eps to "
                          "the std")
    return say(True, "worked example, ragged steps and an all-equal group")
