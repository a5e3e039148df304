"""Chapter 2: the loss aggregation, ``fn(per_token_loss, mask, mode, max_len=None) -> scalar``."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.aggregation import aggregate_loss

from .entry import Drill, Wrong


# --- chapter 2: loss aggregation, fn(per_token_loss, mask, mode, max_len=None) -> scalar -------

def _agg_parts(loss, mask, max_len):
    m = mask.astype(np.float64)                                   # (N, T) 1.0 on real tokens
    N, T = loss.shape
    return loss * m, m, N, T, (T if max_len is None else max_len)


def _agg_right(loss, mask, mode, max_len=None):
    masked, m, N, T, budget = _agg_parts(loss, mask, max_len)
    if mode == "grpo":
        return (masked.sum(-1) / m.sum(-1)).mean()                # mean of per-sequence means
    if mode == "dapo":
        return masked.sum() / m.sum()                             # every valid token alike
    return masked.sum() / (N * budget)                            # dr_grpo: a constant


def _agg_mode(**wrong_modes):
    """The right aggregation except for the modes given, which are computed as given."""
    def fn(loss, mask, mode, max_len=None):
        if mode in wrong_modes:
            return wrong_modes[mode](*_agg_parts(loss, mask, max_len), loss)
        return _agg_right(loss, mask, mode, max_len)
    return fn


def _agg_in_place(loss, mask, mode, max_len=None):
    loss *= mask                                                  # zero the padding, in place
    return _agg_right(loss, mask, mode, max_len)


def _agg_verl(loss, mask, mode, max_len=None):
    """verl's masked_mean: a guard 1e-8 beside every count."""
    m = mask.astype(np.float64)
    if mode == "grpo":
        return ((loss * m).sum(-1) / (m.sum(-1) + 1e-8)).mean()
    if mode == "dapo":
        return (loss * m).sum() / (m.sum() + 1e-8)
    return (loss * m).sum() / (loss.shape[0] * (max_len or loss.shape[1]))


def _agg_torch(loss, mask, mode, max_len=None):
    import torch
    x, m = torch.as_tensor(loss), torch.as_tensor(mask)
    masked = torch.where(m, x, torch.zeros_like(x))
    if mode == "grpo":
        return (masked.sum(-1) / m.sum(-1)).mean()
    if mode == "dapo":
        return masked.sum() / m.sum()
    return masked.sum() / (x.shape[0] * (x.shape[1] if max_len is None else max_len))


def _agg_float32(loss, mask, mode, max_len=None):
    return np.float32(_agg_right(np.asarray(loss, np.float32), mask, mode, max_len))


def _agg_loops(loss, mask, mode, max_len=None):
    sums = [sum(x for x, k in zip(row, keep) if k) for row, keep in zip(loss, mask)]
    lengths = [int(sum(keep)) for keep in mask]
    if mode == "grpo":
        return sum(s / n for s, n in zip(sums, lengths)) / len(sums)
    if mode == "dapo":
        return sum(sums) / sum(lengths)
    return sum(sums) / (len(sums) * (max_len or len(mask[0])))


def _agg_n_squared(loss, mask, mode, max_len=None):
    if mode == "dr_grpo":
        return (loss * mask).sum() / loss.shape[0] ** 2           # N * N, by a slip
    return _agg_right(loss, mask, mode, max_len)


_AGGREGATION = Drill("check_aggregate_loss", 2, rights=(
    _agg_right, _agg_verl, _agg_torch, _agg_float32, _agg_loops,
    lambda loss, mask, mode, max_len=None: aggregate_loss(loss, mask, mode, max_len=max_len),
), wrongs=(
    Wrong("plain means over the padded arrays (padding counted)",
          lambda loss, mask, mode, max_len=None: (
              loss.mean(-1).mean() if mode == "grpo" else loss.mean() if mode == "dapo"
              else loss.sum() / (loss.shape[0] * (max_len or loss.shape[1]))),
          "the padded tokens were counted"),
    Wrong("masked lengths but an unmasked sum",
          _agg_mode(grpo=lambda masked, m, N, T, budget, loss: (loss.sum(-1) / m.sum(-1)).mean()),
          "the padded positions entered the sum"),
    Wrong("every mode computed as the token mean",
          lambda loss, mask, mode, max_len=None: _agg_right(loss, mask, "dapo"),
          "that is the token-level mean (DAPO's)"),
    Wrong("every mode computed as the mean of sequence means",
          lambda loss, mask, mode, max_len=None: _agg_right(loss, mask, "grpo"),
          "that is GRPO's mean of per-sequence means"),
    Wrong("grpo divides each sequence by T",
          _agg_mode(grpo=lambda masked, m, N, T, budget, loss: (masked.sum(-1) / T).mean()),
          "each sequence was divided by T"),
    Wrong("grpo counts lengths over axis 0",
          _agg_mode(grpo=lambda masked, m, N, T, budget, loss: (masked.sum(-1) / m.sum(0)).mean()),
          "over the wrong axis"),
    Wrong("dapo divides by the number of sequences",
          _agg_mode(dapo=lambda masked, m, N, T, budget, loss: masked.sum() / N),
          "divided by the number of sequences N"),
    Wrong("dr_grpo divides by the valid-token count",
          _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss: masked.sum() / m.sum()),
          "divided by the number of valid tokens (that is DAPO's)"),
    Wrong("dr_grpo divides by the batch's longest answer",
          _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss:
                    masked.sum() / (N * (budget if budget != T else m.sum(-1).max()))),
          "divided by the longest completion of this batch"),
    Wrong("dr_grpo forgets N", _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss:
                                         masked.sum() / budget),
          "divided by max_len only"),
    Wrong("dr_grpo ignores max_len", _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss:
                                               masked.sum() / (N * T)),
          "max_len was ignored"),
    Wrong("dr_grpo divides by N * N (equal to T in the worked example)", _agg_n_squared,
          "mode='dr_grpo' the value is"),
    Wrong("returns the per-sequence losses",
          lambda loss, mask, mode, max_len=None: _agg_parts(loss, mask, max_len)[0].sum(-1)
          / mask.sum(-1), "the loss is one number"),
    Wrong("zeroes the padding in the caller's array", _agg_in_place, "modified its input"),
    Wrong("max_len not taken as a keyword",
          lambda loss, mask, mode, maxlen=None: _agg_right(loss, mask, mode, maxlen),
          "the drill's signature is my_aggregate_loss"),
    Wrong("dr_grpo's per-sequence budgets as np.full(2, ...), N = 2 hard-coded",
          _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss:
                    (masked.sum(-1) / np.full(2, budget)).mean()),
          "include 2, which no input has"),
))


DRILLS = (_AGGREGATION,)
