"""Drill checkers for chapter 2, from PPO to GRPO: GAE, the clipped surrogate, the aggregation.

==============================  ==================================================================
``check_gae(fn)``               ``fn(rewards, values, gamma, lam) -> adv``: rewards (T,) or (N, T),
                                values one step longer (the bootstrap value last), by the backward
                                recursion A_t = delta_t + gamma * lam * A_{t+1}
``check_clipped_surrogate(fn)`` ``fn(logp, old_logp, adv, eps=0.2) -> -min(r A, clip(r, 1 - eps,
                                1 + eps) A)``, r = exp(logp - old_logp), per token, both clip
                                sides, the log-ratio clamped before ``exp``
``check_aggregate_loss(fn)``    ``fn(per_token_loss, mask, mode, max_len=None) -> scalar``
==============================  ==================================================================

The aggregation modes, per_token_loss (N, T), mask (N, T) bools (True on a completion's tokens):
``grpo`` is the mean over sequences of (masked sum over the sequence / its length L_i);
``dapo`` the masked sum over the batch / its number of valid tokens; ``dr_grpo`` the masked sum
over the batch / (N * max_len), max_len = T when not given. The padded positions hold garbage
(99 in the worked example), as they do in a real batch.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.core.gae import gae
from grpo_lab.core.surrogate import clipped_surrogate_loss
from grpo_lab.drills.harness import call, named_mistake, verdict

__all__ = ["AGGREGATION_CASES", "check_aggregate_loss", "check_clipped_surrogate", "check_gae"]


# --- GAE ----------------------------------------------------------------------------------------

def _discounted(delta, k, *, backwards=True):
    """sum_l k^l delta_{t+l}, by the recursion A_t = delta_t + k A_{t+1} (or forwards in t)."""
    out, running = np.zeros_like(delta), np.zeros_like(delta[..., 0])
    T = delta.shape[-1]
    for t in (reversed(range(T)) if backwards else range(T)):
        running = delta[..., t] + k * running
        out[..., t] = running
    return out


def _gae_mistakes(r, v, gamma, lam):
    """The usual wrong versions of GAE, for naming the reader's mistake."""
    T = r.shape[-1]
    delta = r + gamma * v[..., 1:] - v[..., :-1]                       # (N, T) TD errors
    return {
        "lambda only (gamma missing from the decay)": _discounted(delta, lam),
        "gamma only (lambda missing from the decay)": _discounted(delta, gamma),
        "the TD error alone (no sum over later steps)": delta,
        "accumulated forwards in time (from t = 0), not backwards from the end":
            _discounted(delta, gamma * lam, backwards=False),
        "values shifted by one (V(s_t) and V(s_{t+1}) swapped)":
            _discounted(r + gamma * v[..., :-1] - v[..., 1:], gamma * lam),
        "the bootstrap value V(s_T) dropped (taken as 0), though values give it last":
            _discounted(delta - gamma * v[..., -1:] * (np.arange(T) == T - 1), gamma * lam),
        "the returns A_t + V(s_t), the critic's regression target, not the advantages":
            _discounted(delta, gamma * lam) + v[..., :-1],
    }


def check_gae(fn, *, verbose=True) -> bool:
    """Check ``fn(rewards, values, gamma, lam) -> advantages`` against GAE-lambda.

    rewards (T,) or (N, T), values with one more step (the bootstrap value last); returns the
    advantages only, of the rewards' shape.
    """
    say = verdict(verbose, fn)
    cases = [([1.0, 0.0, 2.0], [0.5, 1.0, 0.5, 0.25], 0.9, 0.5, "the worked example")]
    rng = np.random.default_rng(7)
    r2, v2 = rng.normal(size=(3, 6)), rng.normal(size=(3, 7))
    cases += [(r2, v2, 0.95, 0.0, "lambda = 0 (should be the one-step TD error)"),
              (r2, v2, 0.95, 1.0, "lambda = 1 (should be the return minus V(s_t))"),
              (r2, v2, 0.99, 0.95, "a batch of 3 sequences, gamma 0.99, lambda 0.95")]
    for rewards, values, gamma, lam, name in cases:
        r, v = np.asarray(rewards, dtype=float), np.asarray(values, dtype=float)
        expected, _ = gae(r, v, gamma=gamma, lam=lam)
        out, problem = call(fn, r, v, gamma, lam, where=name, shape=expected.shape,
                            shape_hint=" (the rewards' shape)", returns="the advantages array")
        if problem:
            return say(False, problem)
        if not np.allclose(out, expected, rtol=1e-9, atol=1e-12):
            what = named_mistake(out, _gae_mistakes(r, v, gamma, lam), rtol=1e-9, atol=1e-12)
            if what:
                return say(False, f"on {name} the result matches {what}: "
                                  "A_t = delta_t + gamma * lam * A_{t+1}, from the end")
            return say(False, f"on {name} you gave {np.round(out, 4).tolist()}, expected "
                              f"{np.round(expected, 4).tolist()}")
    return say(True, "the worked example, both lambda limits and a batch are all right")


# --- the clipped surrogate ----------------------------------------------------------------------

_PER_TOKEN = dict(returns="the per-token loss array",
                  shape_hint="; the loss is per token, of the inputs' shape")


def check_clipped_surrogate(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, old_logp, adv, eps=0.2) -> per-token loss`` against PPO's clipped
    surrogate, ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` with ``r = exp(logp - old_logp)``.
    """
    say = verdict(verbose, fn)
    ratio = np.array([[1.0, 1.5, 0.5, 0.5, 1.5]])
    adv = np.array([[1.0, 1.0, 1.0, -1.0, -1.0]])
    logp, old = np.log(ratio) - 1.0, np.full(ratio.shape, -1.0)
    expected = clipped_surrogate_loss(logp, old, adv)               # [-1, -1.2, -0.5, 0.8, 1.5]
    out, problem = call(fn, logp, old, adv, where="the worked example", shape=ratio.shape,
                        **_PER_TOKEN)
    if problem:
        return say(False, problem)
    if not np.allclose(out, expected, rtol=1e-9):
        clip, log_ratio = np.clip(ratio, 0.8, 1.2), np.log(ratio)
        hint = named_mistake(out, {
            "the sign is flipped: that is the objective to maximise; return the loss to "
            "minimise, -min(r A, clip(r) A)": -expected,
            "optimistic: you took the larger of r A and clip(r) A (or the min of the two "
            "losses); PPO takes the smaller objective, a pessimistic bound":
                np.minimum(-ratio * adv, -clip * adv),
            "only the clipped term: without the min with r A, a token the policy has made "
            "LESS likely (r < 0.8, A > 0) would stop getting a gradient": -clip * adv,
            "no clipping at all: -r A is the plain importance-sampled loss": -ratio * adv,
            "only the upper clip (1 + eps): a token with A < 0 must also have its ratio "
            "clipped below, at 1 - eps, or its penalty keeps pushing past the trust region":
                -np.minimum(ratio * adv, np.minimum(ratio, 1.2) * adv),
            "only the lower clip (1 - eps): with A > 0 the ratio must also be clipped above, "
            "at 1 + eps, or the gain keeps growing past the trust region":
                -np.minimum(ratio * adv, np.maximum(ratio, 0.8) * adv),
            "the ratio is logp - old_logp; it is exp(logp - old_logp)":
                -np.minimum(log_ratio * adv, np.clip(log_ratio, 0.8, 1.2) * adv),
        }, rtol=1e-9, atol=1e-8)
        if hint:
            return say(False, f"on the worked example: {hint}")
        return say(False, f"on ratios {ratio[0].tolist()} with A = {adv[0].tolist()} you "
                          f"gave {np.round(out, 4).tolist()}, expected "
                          f"{np.round(expected, 4).tolist()}")

    # a batch with per-token advantages: elementwise, nothing reduced
    rng = np.random.default_rng(3)
    old_b = rng.uniform(-5, -0.1, size=(4, 6))
    logp_b = old_b + rng.normal(0, 0.4, size=(4, 6))
    adv_b = rng.normal(size=(4, 6))
    out, problem = call(fn, logp_b, old_b, adv_b, where="a (4, 6) batch", **_PER_TOKEN)
    if problem:
        return say(False, problem)
    if out.shape != (4, 6) or not np.allclose(out, clipped_surrogate_loss(logp_b, old_b, adv_b)):
        return say(False, "the worked example is right but a (4, 6) batch is not: keep it "
                          "elementwise (no mean, no sum) and use eps for both bounds")

    # a ratio that overflows: exp(800) is inf, and inf * 0 is NaN
    out, problem = call(fn, np.array([[0.0, 0.0]]), np.array([[-800.0, -800.0]]),
                        np.array([[0.0, 1.0]]), where="a log-ratio of 800", **_PER_TOKEN)
    if problem:
        return say(False, problem)
    if not np.all(np.isfinite(out)):
        return say(False, "on a log-ratio of 800 (a stale old_logp) you gave "
                          f"{out.tolist()}: exp(800) is inf, and inf * A with A = 0 is NaN. "
                          "Clamp the log-ratio before exp (verl clamps it to [-20, 20])")
    if out.shape != (1, 2) or not np.allclose(out, [[0.0, -1.2]]):
        return say(False, f"on a log-ratio of 800 you gave {out.tolist()}, expected "
                          "[[0, -1.2]]")
    return say(True, "both clip sides, a batch, and a ratio that would overflow are all right")


# --- loss aggregation ---------------------------------------------------------------------------

_MODES = ("grpo", "dapo", "dr_grpo")
_AXIS_HINT = (" (per-sequence quantities have shape (N,), per-token ones (N, T): was a sum "
              "taken over the wrong axis? A sequence's length is mask.sum(axis=-1))")


def _aggregation_mistakes(loss, mask, mode, max_len):
    """The usual wrong answers for one case: ``{hint: the value it gives}``."""
    m = mask.astype(np.float64)
    N, T = loss.shape
    masked = loss * m                                              # (N, T), padding zeroed
    lengths = m.sum(-1)                                            # (N,) valid tokens
    budget = T if max_len is None else max_len
    mistakes = {"the padded tokens were counted (their values, 99 in the worked example, "
                "entered the loss): multiply by the mask before you sum, and count only valid "
                "tokens": aggregate_loss(loss, np.ones_like(mask), mode,
                                         max_len=max_len if mode == "dr_grpo" else None)}
    if mode == "grpo":
        mistakes.update({
            "the padded positions entered the sum, though the lengths are right: multiply "
            "the loss by the mask before summing": (loss.sum(-1) / lengths).mean(),
            "that is the token-level mean (DAPO's); 'grpo' first averages each sequence "
            "over its own L_i tokens, then averages the sequences": masked.sum() / lengths.sum(),
            "each sequence was divided by T, the padded length (Dr. GRPO's constant); "
            "'grpo' divides each by its own length L_i = mask.sum(axis=-1)":
                masked.sum() / (N * T)})
        if N == T:
            mistakes["the lengths were counted over axis 0 (across sequences); L_i = "
                     "mask.sum(axis=-1), the valid tokens of sequence i"] = (
                         masked.sum(-1) / m.sum(0)).mean()
    elif mode == "dapo":
        mistakes.update({
            "the padded positions entered the sum, though the count is right: multiply the "
            "loss by the mask before summing": loss.sum() / lengths.sum(),
            "that is GRPO's mean of per-sequence means; 'dapo' divides the batch's masked "
            "sum by its number of valid tokens, so every token weighs the same":
                (masked.sum(-1) / lengths).mean(),
            "divided by the number of sequences N; 'dapo' divides by the number of valid "
            "tokens, mask.sum()": masked.sum() / N})
    else:  # dr_grpo
        if max_len is not None:
            mistakes[f"max_len={max_len} was ignored: when it is given, the divisor is "
                     "N * max_len, not N * T"] = masked.sum() / (N * T)
        mistakes.update({
            "divided by the number of valid tokens (that is DAPO's); Dr. GRPO divides by the "
            "constant N * max_len, which does not depend on how long the answers are":
                masked.sum() / lengths.sum(),
            "divided by the longest completion of this batch; max_len is a constant, the "
            "generation budget (TRL's max_completion_length; T when not given)":
                masked.sum() / (N * lengths.max()),
            "divided by max_len only; Dr. GRPO divides by N * max_len (N sequences)":
                masked.sum() / budget})
    return mistakes


def _aggregation_cases():
    worked = (np.array([[1.0, 3.0, 99.0, 99.0], [0.5, 0.5, 0.5, 0.5]]),      # (N=2, T=4)
              np.array([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=bool))
    short = (np.array([[2.0, 1.0, 99.0, 99.0, 99.0], [4.0, 99.0, 99.0, 99.0, 99.0]]),
             np.array([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=bool))    # longest 2 < T = 5
    rng = np.random.default_rng(11)
    square_mask = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=bool)    # N = T = 3
    square_loss = np.where(square_mask, rng.normal(size=(3, 3)),            # padding: garbage
                           rng.uniform(50, 99, size=(3, 3)))
    return (("the worked example (lengths 2 and 4, T = 4)", *worked, None),
            ("a batch whose longest answer (2) is shorter than T = 5", *short, None),
            ("the worked example with max_len=8", *worked, 8),
            ("a 3 x 3 batch (N == T)", square_loss, square_mask, None))


#: (name, per_token_loss, mask, max_len) of check_aggregate_loss, the worked example first.
AGGREGATION_CASES = _aggregation_cases()


def check_aggregate_loss(fn, *, verbose=True) -> bool:
    """Check ``fn(per_token_loss, mask, mode, max_len=None) -> scalar`` for the three modes.

    Compared with ``gl.aggregate_loss``; a wrong value is matched against the usual mistakes
    (padding counted, the other modes' normalisers, a batch-dependent Dr. GRPO divisor, the
    lengths over the wrong axis) so the verdict can name it.
    """
    say = verdict(verbose, fn)
    for name, loss, mask, max_len in AGGREGATION_CASES:
        for mode in (("dr_grpo",) if max_len is not None else _MODES):
            args = (loss, mask, mode) if max_len is None else (loss, mask, mode, max_len)
            where = f"{name} with mode={mode!r}"
            out, problem = call(fn, *args, where=where, shape=(), dtype=None,
                                shape_hint="; the loss is one number: reduce over both "
                                           "sequences and tokens",
                                returns="the loss (one number)", broadcast_hint=_AXIS_HINT)
            if problem:
                return say(False, problem)
            got = float(out)
            expected = float(aggregate_loss(loss, mask, mode, max_len=max_len))
            if np.isclose(got, expected, rtol=1e-9, atol=1e-12):
                continue
            hint = named_mistake(got, _aggregation_mistakes(loss, mask, mode, max_len),
                                 rtol=1e-9, atol=1e-12)
            return say(False, f"on {where} you gave {got:.6g}, expected {expected:.6g}"
                              + (f": {hint}" if hint else ""))
    return say(True, "grpo, dapo and dr_grpo on the worked example, short answers, an explicit "
                     "max_len and an N == T batch are all right")
