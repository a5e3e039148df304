"""Drill checker for chapter 8: the reader writes DeepSeekMath's process advantages.

``check_process_advantages(fn)`` prints a short verdict and returns True or False. The
statement fixes the population std and eps = 1e-8 beside it (near-tied steps tell eps inside
the square root apart); the dtype is open (a float32 answer is graded to float32's precision),
and an all-equal group must give 0 in any dtype.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.process import process_advantages
from grpo_lab.drills.cases import Case, Mistake, full
from grpo_lab.drills.ch01_advantages import equal_group_note
from grpo_lab.drills.grading import check_cases
from grpo_lab.drills.harness import verdict

__all__ = ["check_process_advantages"]

_EXACT_ZERO = 1e-6


def _expected(rewards, mask):
    return process_advantages(np.asarray(rewards, dtype=np.float64)[None],
                              np.asarray(mask)[None])[0]


def _to_go(norm, mask):
    """Each step's sum of its own and the later steps' normalised rewards; padding 0."""
    norm = np.where(mask, norm, 0.0)
    return np.where(mask, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)


def _cases():
    rng = np.random.default_rng(8)

    def ragged(g, k):
        mask = np.arange(k) < rng.integers(1, k + 1, size=(g, 1))   # (G, K), a step per row
        return np.where(mask, rng.uniform(0, 1, size=(g, k)), rng.uniform(5, 9, (g, k))), mask

    near = 0.5 + 1e-6 * np.array([[1.0, -1.0, 0.5], [-0.5, 0.2, 0.0]])
    rows = [("the worked example (a (2, 3) group)", [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]],
             np.ones((2, 3), bool)),
            ("a group with ragged steps", [[0.9, 0.2, 5.0], [0.4, 7.0, 7.0]],
             [[1, 1, 0], [1, 0, 0]]),
            ("an all-equal group", np.full((3, 2), 0.7), np.ones((3, 2), bool)),
            ("a ragged (4, 5) group", *ragged(4, 5)),
            ("a ragged 3 x 3 group (G == K)", *ragged(3, 3)),
            ("a (5, 1) group, one step each", rng.uniform(0, 1, (5, 1)), np.ones((5, 1), bool)),
            ("a ragged (3, 7) group", *ragged(3, 7)),
            ("three real steps of 0.1", [[0.1, 0.1], [0.1, 9.0]], [[1, 1], [1, 0]]),
            ("near-tied steps", near, np.ones((2, 3), bool))]
    for where, r, m in rows:
        r, m = np.asarray(r, dtype=np.float64), np.asarray(m, dtype=bool)
        equal = np.all(r[m] == r[m][0])                   # "all-equal gives 0": 1e-6 allowed
        yield Case(where, (r, m), _expected(r, m), inputs={"rewards": r, "mask": m},
                   atol=_EXACT_ZERO if equal else 0.0,
                   reference=lambda x, m=m: _expected(x, m), perturb=(0,),
                   scale=np.abs(_expected(r, m)) + m.sum(1, keepdims=True),
                   show=lambda i, r=r, m=m: (f"step_rewards[{i[0]}] = "
                                             f"{[full(v) for v in r[i[0]][m[i[0]]]]} (real steps)"))


def _mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["rewards"], c.inputs["mask"]))

    def stats(r, mask, ddof=0):
        real = r[mask]
        return real.mean(), real.std(ddof=ddof), real.var()

    def norm_by(f):
        return lambda r, mask: _to_go((r - stats(r, mask)[0]) / f(*stats(r, mask)), mask)

    return [
        m("those are the normalised rewards; the advantage of step j also adds the later "
          "steps' (a reversed cumulative sum along K)", lambda r, mask: np.where(
              mask, (r - stats(r, mask)[0]) / (stats(r, mask)[1] + 1e-8), 0.0)),
        m("that sums the earlier steps; DeepSeekMath credits a step with the steps at or "
          "AFTER it", lambda r, mask: np.where(mask, np.cumsum(np.where(
              mask, (r - stats(r, mask)[0]) / (stats(r, mask)[1] + 1e-8), 0.0), 1), 0.0)),
        m("that normalises each completion on its own; mean and std run over all steps of "
          "the group", lambda r, mask: _to_go(
              (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-8), mask)),
        m("the padded steps entered the mean and the std; use only the real steps, "
          "step_rewards[step_mask]", lambda r, mask: None if mask.all() else _to_go(
              (r - r.mean()) / (r.std() + 1e-8), mask)),
        m("the padded steps entered the mean, the std and the sums; use only the real steps, "
          "step_rewards[step_mask], and set the padded ones to 0 before summing",
          lambda r, mask: None if mask.all() else np.where(mask, np.flip(np.cumsum(np.flip(
              (r - r.mean()) / (r.std() + 1e-8), 1), 1), 1), 0.0)),
        m("that normalises each completion on its own; mean and std run over all steps of "
          "the group", lambda r, mask: np.flip(np.cumsum(np.flip(
              (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-8), 1), 1), 1)),
        m("that is Bessel's std (ddof=1); the drill uses the population std (ddof=0)",
          lambda r, mask: None if mask.sum() < 2 else _to_go(
              (r - r[mask].mean()) / (r[mask].std(ddof=1) + 1e-8), mask)),
        m("eps is inside the square root, sqrt(var + eps); the drill adds it to the std",
          norm_by(lambda mean, std, var: np.sqrt(var + 1e-8))),
        m("eps is missing: an all-equal group divides 0 by 0; add eps = 1e-8 to the std",
          norm_by(lambda mean, std, var: std)),
    ]


def _all_equal_gives_zero(case, answer):
    mask = case.inputs["mask"]
    real = case.inputs["rewards"][mask]
    if np.all(real == real[0]) and not np.all(np.abs(answer.values) <= _EXACT_ZERO):
        return (f"on {case.where} every real step's reward is {full(real[0])}, and you gave "
                f"{[full(v, answer.dtype) for v in answer.values.ravel()[:6]]}, expected 0 "
                "everywhere (no spread, no signal)"
                + equal_group_note(answer.values[mask], float(real[0]), real.size, 1e-8,
                                   answer.dtype, terms=mask.shape[1]))
    return None


def check_process_advantages(fn, *, verbose=True) -> bool:
    """Check ``fn(step_rewards, step_mask) -> adv`` for ONE group, shapes (G, K) -> (G, K).

    Normalise the rewards of all real steps of the group together (population std, eps 1e-8);
    each step's advantage is the sum of its own and the later steps' normalised rewards; padded
    steps get 0.
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_cases()), say, mistakes=_mistakes(), dtype=None,
                       extra=_all_equal_gives_zero, shape_hint=": one advantage per step",
                       returns="the (G, K) array",
                       signature="my_process_advantages(step_rewards, step_mask)",
                       passed="worked example, ragged steps, G == K, one step each, an "
                              "all-equal group, equal steps of 0.1 and near-tied steps")
