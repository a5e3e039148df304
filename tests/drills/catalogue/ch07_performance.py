"""Chapter 7: blocked advantages, and the surrogate's gradient."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.surrogate import surrogate_grad_logp
from tests.drills.catalogue.entry import Drill, Wrong


# --- chapter 7: blocked advantages fn(rewards, block_rows), surrogate gradient ----------------

def _blocked(rewards, block_rows, *, ddof=0, eps=1e-8, out_dtype=None, in_place=False):
    out = np.empty(rewards.shape, dtype=out_dtype or rewards.dtype)
    for r0 in range(0, rewards.shape[0], block_rows):
        rows = slice(r0, r0 + block_rows)
        x = rewards[rows].astype(np.float64)                      # (b, G), one block in float64
        x -= x[:, :1]
        dev = x - x.mean(axis=1, keepdims=True)
        std = np.sqrt((dev * dev).sum(axis=1, keepdims=True) / (x.shape[1] - ddof))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[rows] = dev / (std + eps)
        if in_place:
            rewards[rows] = 0                                     # "frees" the caller's block
    return out


def _blocked_right(rewards, block_rows):
    return _blocked(rewards, block_rows)


_BLOCKED = Drill("check_blocked_advantages", 7, rights=(_blocked_right,), wrongs=(
    Wrong("the whole array at once (temporaries the size of the input)",
          lambda r, b: group_advantages(r), "peak memory"),
    Wrong("a float64 result for float32 rewards",
          lambda r, b: _blocked(r, b, out_dtype=np.float64), "float32 rewards give float32"),
    Wrong("Bessel's std", lambda r, b: _blocked(r, b, ddof=1), "differs from gl.group_advantages"),
    Wrong("no eps: the all-equal group is 0 / 0", lambda r, b: _blocked(r, b, eps=0.0),
          "is not exactly 0"),
    Wrong("overwrites the caller's rewards block by block",
          lambda r, b: _blocked(r, b, in_place=True), "modified its input"),
    Wrong("returns a list", lambda r, b: _blocked(r, b).tolist(), "expected a NumPy array"),
))


def _grad_right(ratio, adv, eps_low, eps_high):
    # the chapter's solution, written by hand as the reader does
    clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return np.where(clipped, 0.0, -adv * ratio)                  # d(-r A)/d logp = -A r


def _grad_package(ratio, adv, eps_low, eps_high):
    """gl.surrogate_grad_logp for the drill's signature: ratio, adv (T,) -> (T,)."""
    logp, old = np.log(ratio)[None], np.zeros((1, np.size(ratio)))   # (1, T), r = exp(logp)
    return surrogate_grad_logp(logp, old, np.asarray(adv)[None], eps_low=eps_low,
                               eps_high=eps_high)[0]


def _grad_one_side(ratio, adv, eps_low, eps_high):
    return np.where((adv > 0) & (ratio > 1 + eps_high), 0.0, -adv * ratio)


def _grad_in_place(ratio, adv, eps_low, eps_high):
    ratio *= 1.0                                                   # harmless...
    adv *= -1.0                                                    # ...but this is not
    return -_grad_package(ratio, adv, eps_low, eps_high)


_SURROGATE_GRAD = Drill("check_surrogate_grad", 7, rights=(_grad_right, _grad_package), wrongs=(
    Wrong("no clipping at all", lambda r, a, lo, hi: -a * r, "no clipping"),
    Wrong("sign error", lambda r, a, lo, hi: -_grad_package(r, a, lo, hi), "sign is flipped"),
    Wrong("the gradient with respect to the ratio, not logp",
          lambda r, a, lo, hi: np.where(_grad_package(r, a, lo, hi) != 0, -a, 0.0),
          "with respect to the ratio"),
    Wrong("a missing clip side (A < 0 never clipped)", _grad_one_side, "on ratios"),
    Wrong("eps_low used for both bounds", lambda r, a, lo, hi: _grad_package(r, a, lo, lo),
          "on ratios"),
    Wrong("changes the caller's advantages in place", _grad_in_place, "modified its input"),
    Wrong("computes but returns nothing", lambda r, a, lo, hi: None, "returned None"),
))


DRILLS = (_BLOCKED, _SURROGATE_GRAD)
