"""Chapter 8: process supervision, ``fn(step_rewards, step_mask) -> adv``, (G, K)."""

from __future__ import annotations

import numpy as np

from tests.drills.catalogue.entry import Drill, Wrong


# --- chapter 8: process supervision, fn(step_rewards, step_mask) -> adv, (G, K) -------------

def _proc_right(r, m):
    valid = r[m]                                                  # every valid step of the group
    norm = np.where(m, (r - valid.mean()) / (valid.std() + 1e-8), 0.0)       # (G, K)
    return np.where(m, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)     # sum of later steps


def _proc_only_normalised(r, m):
    valid = r[m]
    return np.where(m, (r - valid.mean()) / (valid.std() + 1e-8), 0.0)


def _proc_forward_sum(r, m):
    return np.where(m, np.cumsum(_proc_only_normalised(r, m), axis=1), 0.0)


def _proc_per_completion(r, m):
    norm = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-8)
    return np.flip(np.cumsum(np.flip(norm, 1), 1), 1)


def _proc_padding_included(r, m):
    norm = (r - r.mean()) / (r.std() + 1e-8)
    return np.where(m, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)


def _proc_no_eps(r, m):
    valid = r[m]
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.where(m, (r - valid.mean()) / valid.std(), 0.0)
    return np.where(m, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)


def _proc_in_place(r, m):
    r -= r.mean()
    return _proc_right(r, m)


_PROCESS = Drill("check_process_advantages", 8, rights=(_proc_right,), wrongs=(
    Wrong("returns the normalised rewards, not their sums", _proc_only_normalised,
          "those are the normalised rewards"),
    Wrong("sums the earlier steps instead of the later ones", _proc_forward_sum,
          "credits a step with the steps at or AFTER it"),
    Wrong("normalises each completion on its own", _proc_per_completion,
          "normalises each completion on its own"),
    Wrong("counts padded steps in the mean and std", _proc_padding_included,
          "are padded steps left out of the mean and the std?"),
    Wrong("no eps: an all-equal group divides 0 by 0", _proc_no_eps,
          "an all-equal group must give 0 everywhere"),
    Wrong("changes the caller's rewards in place", _proc_in_place, "modified its input"),
    Wrong("computes but returns nothing", lambda r, m: None, "returned None"),
    Wrong("returns one row", lambda r, m: r[:1], "returned shape (1, 3)"),
))


DRILLS = (_PROCESS,)
