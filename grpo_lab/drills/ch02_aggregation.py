"""Drill checker for chapter 2: loss aggregation, from per-token losses to one number.

The drill: ``my_aggregate_loss(per_token_loss, mask, mode, max_len=None)``, per_token_loss
(N, T), mask (N, T) bools (True on a completion's tokens), mode ``"grpo"``, ``"dapo"`` or
``"dr_grpo"``; returns a scalar:

==========  =============================================================================
mode        the loss
==========  =============================================================================
grpo        mean over sequences of (masked sum over the sequence / its length L_i)
dapo        masked sum over the batch / number of valid tokens in the batch
dr_grpo     masked sum over the batch / (N * max_len), max_len = T when not given
==========  =============================================================================

The padded positions hold garbage (99 in the worked example), as they do in a real batch.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.drills._harness import call, verdict as _verdict

__all__ = ["check_aggregate_loss"]

_MODES = ("grpo", "dapo", "dr_grpo")
_BROADCAST_HINT = (" (per-sequence quantities have shape (N,), per-token ones (N, T): was a "
                   "sum taken over the wrong axis? A sequence's length is mask.sum(axis=-1))")


def _mistakes(loss, mask, mode, max_len):
    """The usual wrong answers for one case, each with the hint that names it."""
    m = mask.astype(np.float64)
    N, T = loss.shape
    masked = loss * m                                              # (N, T), padding zeroed
    lengths = m.sum(-1)                                            # (N,) valid tokens
    budget = T if max_len is None else max_len
    pad = ("the padded tokens were counted (their values, 99 in the worked example, entered "
           "the loss): multiply by the mask before you sum, and count only valid tokens")
    mistakes = [(pad, aggregate_loss(loss, np.ones_like(mask), mode,
                                     max_len=max_len if mode == "dr_grpo" else None))]
    if mode == "grpo":
        mistakes += [
            ("the padded positions entered the sum, though the lengths are right: multiply "
             "the loss by the mask before summing", (loss.sum(-1) / lengths).mean()),
            ("that is the token-level mean (DAPO's); 'grpo' first averages each sequence "
             "over its own L_i tokens, then averages the sequences",
             masked.sum() / lengths.sum()),
            ("each sequence was divided by T, the padded length (Dr. GRPO's constant); "
             "'grpo' divides each by its own length L_i = mask.sum(axis=-1)",
             masked.sum() / (N * T)),
        ]
        if N == T:
            mistakes.append(("the lengths were counted over axis 0 (across sequences); "
                             "L_i = mask.sum(axis=-1), the valid tokens of sequence i",
                             (masked.sum(-1) / m.sum(0)).mean()))
    elif mode == "dapo":
        mistakes += [
            ("the padded positions entered the sum, though the count is right: multiply the "
             "loss by the mask before summing", loss.sum() / lengths.sum()),
            ("that is GRPO's mean of per-sequence means; 'dapo' divides the batch's masked "
             "sum by its number of valid tokens, so every token weighs the same",
             (masked.sum(-1) / lengths).mean()),
            ("divided by the number of sequences N; 'dapo' divides by the number of valid "
             "tokens, mask.sum()", masked.sum() / N),
        ]
    else:  # dr_grpo
        if max_len is not None:
            mistakes.append((f"max_len={max_len} was ignored: when it is given, the divisor "
                             "is N * max_len, not N * T", masked.sum() / (N * T)))
        mistakes += [
            ("divided by the number of valid tokens (that is DAPO's); Dr. GRPO divides by the "
             "constant N * max_len, which does not depend on how long the answers are",
             masked.sum() / lengths.sum()),
            ("divided by the longest completion of this batch; max_len is a constant, the "
             "generation budget (TRL's max_completion_length; T when not given)",
             masked.sum() / (N * lengths.max())),
            ("divided by max_len only; Dr. GRPO divides by N * max_len (N sequences)",
             masked.sum() / budget),
        ]
    return mistakes


def _cases():
    """(name, per_token_loss, mask, max_len): the worked example first."""
    worked = (np.array([[1.0, 3.0, 99.0, 99.0], [0.5, 0.5, 0.5, 0.5]]),      # (N=2, T=4)
              np.array([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=bool))
    short = (np.array([[2.0, 1.0, 99.0, 99.0, 99.0], [4.0, 99.0, 99.0, 99.0, 99.0]]),
             np.array([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=bool))    # longest 2 < T = 5
    rng = np.random.default_rng(11)
    square_mask = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=bool)    # N = T = 3
    square_loss = np.where(square_mask, rng.normal(size=(3, 3)),            # padding: garbage
                           rng.uniform(50, 99, size=(3, 3)))
    square = (square_loss, square_mask)
    return [("the worked example (lengths 2 and 4, T = 4)", *worked, None),
            ("a batch whose longest answer (2) is shorter than T = 5", *short, None),
            ("the worked example with max_len=8", *worked, 8),
            ("a 3 x 3 batch (N == T)", *square, None)]


def check_aggregate_loss(fn, *, verbose=True) -> bool:
    """Check ``fn(per_token_loss, mask, mode, max_len=None) -> scalar`` for the three modes.

    Compared with ``gl.aggregate_loss``; a wrong value is matched against the usual mistakes
    (padding counted, the other modes' normalisers, a batch-dependent Dr. GRPO divisor, the
    lengths over the wrong axis) so the verdict can name it.
    """
    say = _verdict(verbose, fn)
    for name, loss, mask, max_len in _cases():
        modes = ("dr_grpo",) if max_len is not None else _MODES
        for mode in modes:
            args = (loss, mask, mode) if max_len is None else (loss, mask, mode, max_len)
            where = f"on {name} with mode={mode!r}"
            out, problem = call(fn, *args, dtype=None, returns="the loss (one number)",
                                broadcast_hint=_BROADCAST_HINT)
            if problem:
                return say(False, f"{where} your function {problem}")
            if out.size != 1:
                return say(False, f"{where} it returned shape {out.shape}; the loss is one "
                                  "number: reduce over both sequences and tokens")
            got = float(out.reshape(()))
            expected = float(aggregate_loss(loss, mask, mode, max_len=max_len))
            if np.isclose(got, expected, rtol=1e-9, atol=1e-12):
                continue
            for hint, wrong in _mistakes(loss, mask, mode, max_len):
                if np.isclose(got, wrong, rtol=1e-9, atol=1e-12):
                    return say(False, f"{where} you gave {got:.6g}, expected "
                                      f"{expected:.6g}: {hint}")
            return say(False, f"{where} you gave {got:.6g}, expected {expected:.6g}")
    return say(True, "grpo, dapo and dr_grpo on the worked example, short answers, an explicit "
                     "max_len and an N == T batch are all right")
