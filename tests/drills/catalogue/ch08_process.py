"""Chapter 8: process supervision, ``fn(step_rewards, step_mask) -> adv``, (G, K)."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.process import process_advantages

from .entry import Drill, Wrong


def _to_go(norm, m):
    return np.where(m, np.flip(np.cumsum(np.flip(np.where(m, norm, 0.0), 1), 1), 1), 0.0)


# --- right answers ------------------------------------------------------------------------------

def _proc_right(r, m):
    valid = r[m]                                                  # every valid step of the group
    norm = np.where(m, (r - valid.mean()) / (valid.std() + 1e-8), 0.0)       # (G, K)
    return np.where(m, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)     # sum of later steps


def _proc_loops(r, m):
    valid = [x for row, keep in zip(r, m) for x, k in zip(row, keep) if k]
    mean = sum(valid) / len(valid)
    std = (sum((x - mean) ** 2 for x in valid) / len(valid)) ** 0.5
    out = np.zeros(r.shape)
    for g in range(r.shape[0]):
        running = 0.0
        for j in reversed(range(r.shape[1])):                     # from the last step back
            if m[g, j]:
                running += (r[g, j] - mean) / (std + 1e-8)
                out[g, j] = running
    return out


def _proc_torch(r, m):
    import torch
    x, keep = torch.as_tensor(r), torch.as_tensor(m)
    valid = x[keep]
    norm = torch.where(keep, (x - valid.mean()) / (valid.std(unbiased=False) + 1e-8), 0.0)
    return torch.where(keep, norm.flip(1).cumsum(1).flip(1), 0.0)


def _proc_float32(r, m):
    x = r.astype(np.float32)
    valid = x[m] - x[m][0]                                        # shift: exact zeros
    norm = (x - x[m][0] - valid.mean()) / (valid.std() + np.float32(1e-8))
    return _to_go(norm, m).astype(np.float32)


def _proc_total_minus_before(r, m):
    """Suffix sums as the row total minus the sum before each step."""
    valid = r[m]
    norm = np.where(m, (r - valid.mean()) / (valid.std() + 1e-8), 0.0)
    before = np.cumsum(norm, 1) - norm
    return np.where(m, norm.sum(1, keepdims=True) - before, 0.0)


# --- wrong answers ------------------------------------------------------------------------------

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


def _proc_hard_k(r, m):
    norm = _proc_only_normalised(r, m)
    out = np.zeros_like(r)
    for j in range(3):                                            # K = 3 hard-coded
        if j < r.shape[1]:
            out[:, j] = norm[:, j:3].sum(1)
    return np.where(m, out, 0.0)


def _proc_second_moment(r, m):
    valid = r[m]
    std = np.sqrt((valid ** 2).mean() - valid.mean() ** 2)
    return _to_go((r - valid.mean()) / (std + 1e-8), m)


_PROCESS = Drill("check_process_advantages", 8, rights=(
    _proc_right, _proc_loops, _proc_torch, _proc_float32, _proc_total_minus_before,
    lambda r, m: process_advantages(r[None], m[None])[0],
), wrongs=(
    Wrong("returns the normalised rewards, not their sums", _proc_only_normalised,
          "those are the normalised rewards"),
    Wrong("sums the earlier steps instead of the later ones", _proc_forward_sum,
          "credits a step with the steps at or AFTER it"),
    Wrong("normalises each completion on its own", _proc_per_completion,
          "normalises each completion on its own"),
    Wrong("counts padded steps in the mean and std", _proc_padding_included,
          "the padded steps entered the mean"),
    Wrong("no eps: an all-equal group divides 0 by 0", _proc_no_eps, "eps is missing"),
    Wrong("changes the caller's rewards in place", _proc_in_place, "modified its input"),
    Wrong("computes but returns nothing", lambda r, m: None, "returned None"),
    Wrong("returns one row", lambda r, m: r[:1], "returned shape (1, 3)"),
    Wrong("K = 3 hard-coded (right on the worked example)", _proc_hard_k, "a ragged (4, 5) group"),
    Wrong("Bessel's std", lambda r, m: _to_go((r - r[m].mean()) / (r[m].std(ddof=1) + 1e-8), m),
          "Bessel's std"),
    Wrong("eps inside the square root",
          lambda r, m: _to_go((r - r[m].mean()) / np.sqrt(r[m].var() + 1e-8), m),
          "inside the square root"),
    Wrong("the variance as E[x^2] - mean^2", _proc_second_moment, "E[x^2] - mean^2"),
    Wrong("float32 returned as float64", lambda r, m: _proc_float32(r, m).astype(np.float64),
          "float32 rounding"),
))


DRILLS = (_PROCESS,)
