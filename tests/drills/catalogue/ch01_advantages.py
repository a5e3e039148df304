"""Chapter 1: group advantages, ``fn(rewards) -> adv``."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from tests.drills.catalogue.entry import Drill, Wrong


# --- chapter 1: group advantages, fn(rewards) -> adv -------------------------------------------

def _adv_right(rewards, eps=1e-8):
    r = np.asarray(rewards, dtype=np.float64)                     # (B, G)
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + eps)


def _adv_mutates(r, eps=1e-8):
    r -= r.mean(-1, keepdims=True)                                # changes the caller's array
    return r / (r.std(-1, keepdims=True) + eps)


def _adv_no_eps(r):
    return (r - r.mean(-1, keepdims=True)) / r.std(-1, keepdims=True)


def _adv_no_return(r):
    adv = _adv_right(r)                                           # computed, never returned


def _adv_square_only(r):
    mean = r.mean(-1)                                             # (B,): keepdims forgotten,
    mean = mean[:, None] if r.shape[0] != r.shape[1] else mean    # "fixed" only when B != G
    return (r - mean) / (r.std(-1, keepdims=True) + 1e-8)


_ADVANTAGES = Drill("check_group_advantages", 1, rights=(
    _adv_right,
    lambda r: group_advantages(r),
), wrongs=(
    Wrong("Bessel's std (ddof=1, torch.std's default) where the drill asks for ddof=0",
          lambda r: (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True, ddof=1) + 1e-8),
          "Bessel's std"),
    Wrong("mean and std without keepdims (shape (B,))",
          lambda r: (r - r.mean(-1)) / (r.std(-1) + 1e-8), "keepdims=True"),
    Wrong("statistics over axis 0 (across prompts)",
          lambda r: (r - r.mean(0)) / (r.std(0) + 1e-8), "axis 0"),
    Wrong("statistics over the whole batch",
          lambda r: (r - r.mean()) / (r.std() + 1e-8), "whole batch"),
    Wrong("no eps: an all-equal group divides 0 by 0", _adv_no_eps, "guarded with eps"),
    Wrong("centred but not divided by the std",
          lambda r: r - r.mean(-1, keepdims=True), "std is not divided out"),
    Wrong("sign error", lambda r: -_adv_right(r), "signs are flipped"),
    Wrong("subtracts the mean in place", _adv_mutates, "modified its input"),
    Wrong("forgets to return", _adv_no_return, "returned None"),
    Wrong("keepdims missing, hidden when B != G", _adv_square_only, "B == G"),
    Wrong("returns (adv, std)",
          lambda r: (_adv_right(r), r.std(-1)), "returned a tuple of 2"),
))


DRILLS = (_ADVANTAGES,)
