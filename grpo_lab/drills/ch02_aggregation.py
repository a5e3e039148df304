"""Drill checker for chapter 2's loss aggregation: ``fn(per_token_loss, mask, mode,
max_len=None) -> scalar``.

The modes, per_token_loss (N, T), mask (N, T) bools (True on a completion's tokens):
``grpo`` is the mean over sequences of (masked sum over the sequence / its length L_i);
``dapo`` the masked sum over the batch / its number of valid tokens; ``dr_grpo`` the masked sum
over the batch / (N * max_len), max_len = T when not given. The padded positions hold garbage
(99 in the worked example), as they do in a real batch.

The statement fixes no dtype (a float32 answer is graded to float32's precision) and no guard
in the denominators: a count is at least 1, and a guard eps up to 1e-8 beside it (verl's
``masked_mean``) changes the loss by 1e-8 of itself at most, which the checker allows.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.drills.cases import Case, Mistake
from grpo_lab.drills.grading import check_cases
from grpo_lab.drills.harness import verdict

__all__ = ["AGGREGATION_CASES", "check_aggregate_loss"]

_MODES = ("grpo", "dapo", "dr_grpo")
_AXIS_HINT = (" (per-sequence quantities have shape (N,), per-token ones (N, T): was a sum "
              "taken over the wrong axis? A sequence's length is mask.sum(axis=-1))")
_GUARD = 2e-8        # relative: a guard eps of 1e-8 beside a count of at least 1, with room


def _aggregation_cases():
    worked = (np.array([[1.0, 3.0, 99.0, 99.0], [0.5, 0.5, 0.5, 0.5]]),      # (N=2, T=4)
              np.array([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=bool))
    short = (np.array([[2.0, 1.0, 99.0, 99.0, 99.0], [4.0, 99.0, 99.0, 99.0, 99.0]]),
             np.array([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=bool))    # longest 2 < T = 5
    rng = np.random.default_rng(11)

    def ragged(n, t, lengths=None):
        lengths = rng.integers(1, t + 1, size=n) if lengths is None else np.asarray(lengths)
        mask = np.arange(t) < lengths[:, None]                          # (N, T) bool
        return np.where(mask, rng.normal(size=(n, t)), rng.uniform(50, 99, size=(n, t))), mask

    return (("the worked example (lengths 2 and 4, T = 4)", *worked, None),
            ("a batch whose longest answer (2) is shorter than T = 5", *short, None),
            ("the worked example with max_len=8", *worked, 8),
            ("a 3 x 3 batch (N == T)", *ragged(3, 3, [3, 1, 2]), None),
            ("a random (5, 7) batch", *ragged(5, 7), None),
            ("a random (4, 9) batch with max_len=12", *ragged(4, 9), 12),
            ("one sequence of 6 tokens, 2 real", *ragged(1, 6, [2]), None))


#: (name, per_token_loss, mask, max_len) of check_aggregate_loss, the worked example first.
AGGREGATION_CASES = _aggregation_cases()


def _case(name, loss, mask, mode, max_len):
    m = mask.astype(np.float64)
    N, T = loss.shape
    denominator = {"grpo": None, "dapo": m.sum(), "dr_grpo": N * (max_len or T)}[mode]
    scale = (np.abs(loss * m).sum(-1) / m.sum(-1)).mean() if mode == "grpo" else (
        np.abs(loss * m).sum() / denominator)
    # max_len goes by position in one case and by keyword in another: both are the signature
    args, kwargs = (loss, mask, mode), {}
    if max_len == 8:
        args += (max_len,)
    elif max_len is not None:
        kwargs = {"max_len": max_len}
    return Case(f"{name} with mode={mode!r}", args,
                aggregate_loss(loss, mask, mode, max_len=max_len), kwargs=kwargs,
                inputs={"loss": loss, "mask": mask, "mode": mode, "max_len": max_len},
                scale=scale, perturb=(0,),
                reference=lambda x, mask=mask, mode=mode, k=max_len: aggregate_loss(
                    x, mask, mode, max_len=k),
                show=lambda i, mask=mask: f"lengths L_i = {mask.sum(-1).tolist()}, T = "
                                          f"{mask.shape[1]}")


def _mistakes():
    """The usual wrong answers, each for the modes it is about (None for the others)."""
    def m(hint, modes, f):
        def value(c):
            x, mask, mode, max_len = (c.inputs[k] for k in ("loss", "mask", "mode", "max_len"))
            if mode not in modes:
                return None
            m_ = mask.astype(np.float64)
            N, T = x.shape
            return f(x * m_, m_, N, T, T if max_len is None else max_len, x, mode)
        return Mistake(hint, value)

    every = _MODES
    return [
        m("the padded tokens were counted (their values, 99 in the worked example, entered "
          "the loss): multiply by the mask before you sum, and count only valid tokens", every,
          lambda xm, m_, N, T, b, x, mode: None if b != T else aggregate_loss(  # masking only
              x, np.ones(x.shape, bool), mode)),
        m("the padded positions entered the sum, though the lengths are right: multiply the "
          "loss by the mask before summing", ("grpo",),
          lambda xm, m_, N, T, b, x, mode: (x.sum(-1) / m_.sum(-1)).mean()),
        m("the padded positions entered the sum, though the count is right: multiply the "
          "loss by the mask before summing", ("dapo",),
          lambda xm, m_, N, T, b, x, mode: x.sum() / m_.sum()),
        m("that is the token-level mean (DAPO's); 'grpo' first averages each sequence over "
          "its own L_i tokens, then averages the sequences", ("grpo",),
          lambda xm, m_, N, T, b, x, mode: xm.sum() / m_.sum()),
        m("each sequence was divided by T, the padded length (Dr. GRPO's constant); 'grpo' "
          "divides each by its own length L_i = mask.sum(axis=-1)", ("grpo",),
          lambda xm, m_, N, T, b, x, mode: xm.sum() / (N * T)),
        m("the lengths were counted over axis 0 (across sequences); L_i = mask.sum(axis=-1), "
          "the valid tokens of sequence i", ("grpo",),
          lambda xm, m_, N, T, b, x, mode: (xm.sum(-1) / m_.sum(0)).mean() if N == T else None),
        m("that is GRPO's mean of per-sequence means; 'dapo' divides the batch's masked sum "
          "by its number of valid tokens, so every token weighs the same", ("dapo",),
          lambda xm, m_, N, T, b, x, mode: (xm.sum(-1) / m_.sum(-1)).mean()),
        m("divided by the number of sequences N; 'dapo' divides by the number of valid "
          "tokens, mask.sum()", ("dapo",), lambda xm, m_, N, T, b, x, mode: xm.sum() / N),
        m("max_len was ignored: when it is given, the divisor is N * max_len, not N * T",
          ("dr_grpo",), lambda xm, m_, N, T, b, x, mode: None if b == T else xm.sum() / (N * T)),
        m("divided by the number of valid tokens (that is DAPO's); Dr. GRPO divides by the "
          "constant N * max_len, which does not depend on how long the answers are",
          ("dr_grpo",), lambda xm, m_, N, T, b, x, mode: xm.sum() / m_.sum()),
        m("divided by the longest completion of this batch; max_len is a constant, the "
          "generation budget (TRL's max_completion_length; T when not given)", ("dr_grpo",),
          lambda xm, m_, N, T, b, x, mode: (None if b != T                # max_len given
                                            else xm.sum() / (N * m_.sum(-1).max()))),
        m("divided by max_len only; Dr. GRPO divides by N * max_len (N sequences)",
          ("dr_grpo",), lambda xm, m_, N, T, b, x, mode: xm.sum() / b),
    ]


def check_aggregate_loss(fn, *, verbose=True) -> bool:
    """Check ``fn(per_token_loss, mask, mode, max_len=None) -> scalar`` for the three modes.

    Compared with ``gl.aggregate_loss`` on every case of :data:`AGGREGATION_CASES` in each
    mode (and in ``dr_grpo`` where max_len is given); a wrong value is matched against the
    usual mistakes (padding counted, the other modes' normalisers, a batch-dependent Dr. GRPO
    divisor, the lengths over the wrong axis) so the verdict can name it.
    """
    say = verdict(verbose, fn)
    cases = [_case(name, loss, mask, mode, max_len)
             for name, loss, mask, max_len in AGGREGATION_CASES
             for mode in (("dr_grpo",) if max_len is not None else _MODES)]
    return check_cases(fn, cases, say, mistakes=_mistakes(), slack=_GUARD, dtype=None,
                       shape_hint="; the loss is one number: reduce over both sequences and "
                                  "tokens", returns="the loss (one number)",
                       broadcast_hint=_AXIS_HINT,
                       signature="my_aggregate_loss(per_token_loss, mask, mode, max_len=None)",
                       passed="grpo, dapo and dr_grpo on the worked example, short answers, "
                              "max_len by position and by keyword, N == T, random ragged "
                              "batches and a single sequence are all right")
