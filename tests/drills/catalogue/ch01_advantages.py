"""Chapter 1: group advantages, ``fn(rewards, eps=1e-8) -> adv``."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages

from .entry import Drill, Wrong, endless_loop


# --- right answers, written the ways people write them -----------------------------------------

def _adv_right(rewards, eps=1e-8):
    r = np.asarray(rewards, dtype=np.float64)                     # (B, G)
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + eps)


def _adv_loops(rewards, eps=1e-8):
    out = []
    for row in rewards:                                           # one group at a time
        mean = sum(row) / len(row)
        std = (sum((x - mean) ** 2 for x in row) / len(row)) ** 0.5
        out.append([(x - mean) / (std + eps) for x in row])
    return out                                                    # a list of lists


def _adv_torch(rewards, eps=1e-8):
    import torch
    t = torch.as_tensor(rewards)                                  # float64, shares memory
    return (t - t.mean(-1, keepdim=True)) / (t.std(-1, keepdim=True, unbiased=False) + eps)


def _adv_float32(rewards, eps=1e-8):
    r = np.asarray(rewards, dtype=np.float32)
    r = r - r[:, :1]                                              # exact zeros for equal groups
    dev = r - r.mean(-1, keepdims=True)
    return dev / (np.sqrt((dev * dev).mean(-1, keepdims=True)) + np.float32(eps))


def _adv_welford(rewards, eps=1e-8):
    out = np.empty_like(rewards)
    for b, row in enumerate(rewards):                             # one pass: Welford's update
        mean = m2 = 0.0
        for n, x in enumerate(row, 1):
            delta = x - mean
            mean += delta / n
            m2 += delta * (x - mean)
        out[b] = (row - mean) / ((m2 / len(row)) ** 0.5 + eps)
    return out


def _adv_grad_tensor(rewards, eps=1e-8):
    return _adv_torch(rewards, eps).requires_grad_(True)          # a tensor that requires grad


# --- wrong answers ------------------------------------------------------------------------------

def _adv_mutates(r, eps=1e-8):
    r -= r.mean(-1, keepdims=True)                                # changes the caller's array
    return r / (r.std(-1, keepdims=True) + eps)


def _adv_no_return(r, eps=1e-8):
    adv = _adv_right(r, eps)                                      # noqa: F841 never returned


def _adv_square_only(r, eps=1e-8):
    mean = r.mean(-1)                                             # (B,): keepdims forgotten,
    mean = mean[:, None] if r.shape[0] != r.shape[1] else mean    # "fixed" only when B != G
    return (r - mean) / (r.std(-1, keepdims=True) + eps)


def _adv_hangs(r, eps=1e-8):
    while True:                                                   # an endless loop
        pass


def _adv_second_moment(r, eps=1e-8):
    var = (r ** 2).mean(-1, keepdims=True) - r.mean(-1, keepdims=True) ** 2
    return (r - r.mean(-1, keepdims=True)) / (np.sqrt(var) + eps)


def _adv_no_eps_guarded(r, eps=1e-8):
    """No eps beside the std, a zero std replaced by eps: off by about 2e-8 on the worked
    example, the size of a float32 rounding, yet nothing ran in float32."""
    r = np.asarray(r, np.float64)
    std = r.std(-1, keepdims=True)
    return (r - r.mean(-1, keepdims=True)) / np.where(std > 0, std, eps)


def _adv_float64_eps(r, eps):
    r = np.asarray(r, np.float64)
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + eps)


_ADVANTAGES = Drill("check_group_advantages", 1, rights=(
    _adv_right, _adv_loops, _adv_torch, _adv_float32, _adv_welford, _adv_grad_tensor,
    lambda r, eps=1e-8: group_advantages(r, eps),
), wrongs=(
    Wrong("eps left out, a zero std guarded (float64, float32-sized error)", _adv_no_eps_guarded,
          "so float32 does not explain it"),
    Wrong("eps hard-coded as 1e-7 (float64, float32-sized error)",
          lambda r, eps=1e-8: _adv_float64_eps(r, 1e-7), "so float32 does not explain it"),
    Wrong("Bessel's std (ddof=1, torch.std's default) where the drill asks for ddof=0",
          lambda r, eps=1e-8: (r - r.mean(-1, keepdims=True))
          / (r.std(-1, keepdims=True, ddof=1) + eps), "Bessel's std"),
    Wrong("mean and std without keepdims (shape (B,))",
          lambda r, eps=1e-8: (r - r.mean(-1)) / (r.std(-1) + eps), "keepdims=True"),
    Wrong("statistics over axis 0 (across prompts)",
          lambda r, eps=1e-8: (r - r.mean(0)) / (r.std(0) + eps), "axis 0"),
    Wrong("statistics over the whole batch",
          lambda r, eps=1e-8: (r - r.mean()) / (r.std() + eps), "whole batch"),
    Wrong("no eps: an all-equal group divides 0 by 0",
          lambda r, eps=1e-8: (r - r.mean(-1, keepdims=True)) / r.std(-1, keepdims=True),
          "eps is missing"),
    Wrong("centred but not divided by the std",
          lambda r, eps=1e-8: r - r.mean(-1, keepdims=True), "std is not divided out"),
    Wrong("sign error", lambda r, eps=1e-8: -_adv_right(r, eps), "signs are flipped"),
    Wrong("subtracts the mean in place", _adv_mutates, "modified its input"),
    Wrong("forgets to return", _adv_no_return, "returned None"),
    Wrong("keepdims missing, hidden when B != G", _adv_square_only, "B == G"),
    Wrong("returns (adv, std)", lambda r, eps=1e-8: (_adv_right(r, eps), r.std(-1)),
          "returned a tuple of 2"),
    Wrong("eps inside the square root (passes on well-spread groups)",
          lambda r, eps=1e-8: (r - r.mean(-1, keepdims=True))
          / np.sqrt(r.var(-1, keepdims=True) + eps), "inside the square root"),
    Wrong("the variance as E[x^2] - mean^2 (NaN on equal groups of 0.1)", _adv_second_moment,
          "E[x^2] - mean^2"),
    Wrong("the eps argument ignored", lambda r, eps=1e-8: _adv_right(r), "eps argument is ignored"),
    Wrong("eps as a floor, max(std, eps)",
          lambda r, eps=1e-8: (r - r.mean(-1, keepdims=True))
          / np.maximum(r.std(-1, keepdims=True), eps), "floor"),
    Wrong("no eps parameter at all", lambda r: _adv_right(r),
          "the drill's signature is my_group_advantages"),
    Wrong("float32 arithmetic without the shift (garbage on equal groups)",
          lambda r, eps=1e-8: (lambda x: (x - x.mean(-1, keepdims=True))
                               / (x.std(-1, keepdims=True) + np.float32(eps)))(
              np.asarray(r, np.float32)), "a rounding away from the rewards"),
    Wrong("float32 arithmetic returned as float64",
          lambda r, eps=1e-8: _adv_float32(r, eps).astype(np.float64), "float32 rounding"),
    endless_loop(_adv_hangs),
    Wrong("the mean tiled over G = 4 columns, hard-coded from the worked example",
          lambda r, eps=1e-8: (r - np.repeat(r.mean(-1, keepdims=True), 4, axis=-1))
          / (r.std(-1, keepdims=True) + eps), "include 4, which no input has"),
))


DRILLS = (_ADVANTAGES,)
