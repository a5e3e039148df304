"""Chapter 7: blocked advantages, and the surrogate's gradient."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.surrogate import surrogate_grad_logp
from .entry import Drill, Wrong, endless_loop


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


def _blocked_torch(rewards, block_rows):
    import torch
    out = np.empty_like(rewards)
    into, source = torch.from_numpy(out), torch.from_numpy(rewards)   # no copies
    for r0 in range(0, rewards.shape[0], block_rows):
        x = source[r0:r0 + block_rows].double()                  # (b, G) float64 block
        dev = x - x.mean(1, keepdim=True)
        into[r0:r0 + block_rows] = dev / (dev.pow(2).mean(1, keepdim=True).sqrt() + 1e-8)
    return out


def _blocked_package(rewards, block_rows):
    out = np.empty_like(rewards)
    for r0 in range(0, rewards.shape[0], block_rows):
        out[r0:r0 + block_rows] = group_advantages(rewards[r0:r0 + block_rows].astype(np.float64))
    return out


def _blocked_rows(rewards, block_rows):
    """A block's rows one by one, float64 scalars."""
    out = np.empty_like(rewards)
    for r0 in range(0, rewards.shape[0], block_rows):
        for b, row in enumerate(rewards[r0:r0 + block_rows].astype(np.float64), r0):
            dev = row - row.mean()
            out[b] = dev / (np.sqrt((dev * dev).mean()) + 1e-8)
    return out


def _blocked_no_shift(rewards, block_rows):
    out = np.empty(rewards.shape, np.float32)
    for r0 in range(0, rewards.shape[0], block_rows):
        x = rewards[r0:r0 + block_rows].astype(np.float64)
        out[r0:r0 + block_rows] = (x - x.mean(1, keepdims=True)) / (x.std(1, keepdims=True) + 1e-8)
    return out


def _blocked_float32_inside(rewards, block_rows):
    out = np.empty_like(rewards)
    for r0 in range(0, rewards.shape[0], block_rows):
        x = rewards[r0:r0 + block_rows]
        x = x - x[:, :1]                                          # exact zeros, but float32
        dev = x - x.mean(1, keepdims=True)
        out[r0:r0 + block_rows] = dev / (np.sqrt((dev * dev).mean(1, keepdims=True))
                                         + np.float32(1e-8))
    return out


def _blocked_torch_whole(rewards, block_rows):
    import torch
    x = torch.from_numpy(rewards).double()                        # the whole input, float64
    dev = x - x.mean(1, keepdim=True)
    return (dev / (dev.pow(2).mean(1, keepdim=True).sqrt() + 1e-8)).float().numpy()


def _blocked_hangs(rewards, block_rows):
    r0 = 0
    while r0 < rewards.shape[0]:                                  # r0 never moves
        pass


def _blocked_fast(rewards, block_rows):
    """The package's Numba kernel on each float64 block (compiled once, before the timing)."""
    import grpo_lab as gl
    out = np.empty_like(rewards)
    for r0 in range(0, rewards.shape[0], block_rows):
        out[r0:r0 + block_rows] = gl.group_advantages_fast(
            rewards[r0:r0 + block_rows].astype(np.float64))
    return out


def _blocked_concatenated(rewards, block_rows, dtype=np.float32):
    """Right values, each block kept in a list and concatenated: a second full-size copy."""
    blocks = [_blocked(rewards[r0:r0 + block_rows], block_rows).astype(dtype)
              for r0 in range(0, rewards.shape[0], block_rows)]
    return np.concatenate(blocks).astype(np.float32, copy=False)


def _blocked_last_block_dropped(rewards, block_rows):
    """range(0, B - block_rows + 1, ...): a last block shorter than block_rows is skipped."""
    out = np.zeros_like(rewards)
    for r0 in range(0, rewards.shape[0] - block_rows + 1, block_rows):
        out[r0:r0 + block_rows] = _blocked(rewards[r0:r0 + block_rows], block_rows)
    return out


def _blocked_loo_baseline(rewards, block_rows):
    """Float64 blocks, but the leave-one-out (RLOO) baseline instead of the group mean."""
    out = np.empty_like(rewards)
    G = rewards.shape[1]
    for r0 in range(0, rewards.shape[0], block_rows):
        x = rewards[r0:r0 + block_rows].astype(np.float64)       # (b, G)
        base = (x.sum(1, keepdims=True) - x) / (G - 1)            # (b, G) the others' mean
        out[r0:r0 + block_rows] = (x - base) / (x.std(1, keepdims=True) + 1e-8)
    return out


_BLOCKED = Drill("check_blocked_advantages", 7, rights=(
    _blocked_right, _blocked_torch, _blocked_package, _blocked_rows, _blocked_no_shift,
    _blocked_fast), wrongs=(
    Wrong("a list of float32 blocks, concatenated (2x the output)", _blocked_concatenated,
          "peak memory was 2."),
    Wrong("a list of float64 blocks, concatenated",
          lambda r, b: _blocked_concatenated(r, b, np.float64), "peak memory"),
    Wrong("the last, shorter block skipped", _blocked_last_block_dropped,
          "never written into an np.zeros output"),
    Wrong("the leave-one-out baseline", _blocked_loo_baseline, "a difference in the formula"),
    Wrong("the whole array at once (temporaries the size of the input)",
          lambda r, b: group_advantages(r), "peak memory"),
    Wrong("the whole array at once, in torch (invisible to tracemalloc)", _blocked_torch_whole,
          "torch"),
    Wrong("float32 arithmetic inside the blocks", _blocked_float32_inside,
          "the block arithmetic ran in float32"),
    Wrong("the first block only", lambda r, b: np.concatenate(
        [_blocked(r[:b], b), np.zeros_like(r[b:])]), "rows are exactly 0"),
    Wrong("block_rows ignored: blocks of 256", lambda r, b: _blocked(r, 256) if r.shape[0] > 256
          else _blocked(r, b)[:-1], "returned shape"),
    endless_loop(_blocked_hangs),
    Wrong("a float64 result for float32 rewards",
          lambda r, b: _blocked(r, b, out_dtype=np.float64), "float32 rewards give float32"),
    Wrong("Bessel's std", lambda r, b: _blocked(r, b, ddof=1), "Bessel's std"),
    Wrong("no eps: the all-equal group is 0 / 0", lambda r, b: _blocked(r, b, eps=0.0),
          "not exactly 0"),
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


def _grad_float32(ratio, adv, eps_low, eps_high):
    r, a = np.asarray(ratio, np.float32), np.asarray(adv, np.float32)
    return _grad_right(r, a, np.float32(eps_low), np.float32(eps_high))


def _grad_torch(ratio, adv, eps_low, eps_high):
    """Autograd of the loss at logp = log(ratio), old_logp = 0."""
    import torch
    logp = torch.tensor(np.log(ratio), requires_grad=True)
    r, a = logp.exp(), torch.as_tensor(adv)
    loss = torch.maximum(-a * r, -a * r.clamp(1 - eps_low, 1 + eps_high))
    loss.sum().backward()
    return logp.grad


def _grad_by_sign(ratio, adv, eps_low, eps_high):
    unclipped = np.where(adv >= 0, ratio <= 1 + eps_high, ratio >= 1 - eps_low)
    return -adv * ratio * unclipped


def _grad_min_form(ratio, adv, eps_low, eps_high):
    """Where r A is the smaller objective the gradient flows; else it is 0."""
    clipped = np.clip(ratio, 1 - eps_low, 1 + eps_high)
    return np.where(ratio * adv <= clipped * adv, -adv * ratio, 0.0)


_SURROGATE_GRAD = Drill("check_surrogate_grad", 7, rights=(
    _grad_right, _grad_package, _grad_float32, _grad_torch, _grad_by_sign, _grad_min_form),
    wrongs=(
    Wrong("no clipping at all", lambda r, a, lo, hi: -a * r, "no clipping"),
    Wrong("sign error", lambda r, a, lo, hi: -_grad_package(r, a, lo, hi), "sign is flipped"),
    Wrong("the gradient with respect to the ratio, not logp",
          lambda r, a, lo, hi: np.where(_grad_package(r, a, lo, hi) != 0, -a, 0.0),
          "with respect to the ratio"),
    Wrong("a missing clip side (A < 0 never clipped)", _grad_one_side, "only A > 0 is clipped"),
    Wrong("eps_low used for both bounds", lambda r, a, lo, hi: _grad_package(r, a, lo, lo),
          "eps_low was used for both bounds"),
    Wrong("eps_high used for both bounds", lambda r, a, lo, hi: _grad_package(r, a, hi, hi),
          "eps_high was used for both bounds"),
    Wrong("eps_low and eps_high swapped", lambda r, a, lo, hi: _grad_package(r, a, hi, lo),
          "swapped"),
    Wrong("the worked example hard-coded", lambda r, a, lo, hi: _grad_package(
        np.array([1.0, 1.1, 1.5, 0.5, 0.9, 0.5, 1.5, 1.25]),
        np.array([1.0, 2.0, 1.0, 1.0, -1.0, -1.0, -1.0, 1.0]), 0.2, 0.28),
        "returned shape (8,)"),
    Wrong("float32 returned as float64",
          lambda r, a, lo, hi: _grad_float32(r, a, lo, hi).astype(np.float64), "float32 rounding"),
    Wrong("changes the caller's advantages in place", _grad_in_place, "modified its input"),
    Wrong("computes but returns nothing", lambda r, a, lo, hi: None, "returned None"),
))


DRILLS = (_BLOCKED, _SURROGATE_GRAD)
