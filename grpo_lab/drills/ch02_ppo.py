"""Drill checkers for chapter 2, from PPO to GRPO: GAE and the clipped surrogate.

==============================  ==================================================================
``check_gae(fn)``               ``fn(rewards, values, gamma, lam) -> adv``: rewards (T,) or (N, T),
                                values one step longer (the bootstrap value last), by the backward
                                recursion A_t = delta_t + gamma * lam * A_{t+1}
``check_clipped_surrogate(fn)`` ``fn(logp, old_logp, adv, eps=0.2) -> -min(r A, clip(r, 1 - eps,
                                1 + eps) A)``, r = exp(logp - old_logp), per token, (N, T)
==============================  ==================================================================

Neither statement fixes a dtype: a float32 answer is graded to float32's precision. The loss
aggregation of the same chapter is :mod:`grpo_lab.drills.ch02_aggregation`.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.gae import gae
from grpo_lab.core.surrogate import clipped_surrogate_loss, surrogate_from_ratio
from grpo_lab.drills.cases import Case, Mistake
from grpo_lab.drills.grading import check_cases
from grpo_lab.drills.harness import verdict

__all__ = ["check_clipped_surrogate", "check_gae"]


# --- GAE ----------------------------------------------------------------------------------------

def _discounted(delta, k, *, backwards=True):
    """sum_l k^l delta_{t+l}, by the recursion A_t = delta_t + k A_{t+1} (or forwards in t)."""
    out, running = np.zeros_like(delta), np.zeros_like(delta[..., 0])
    T = delta.shape[-1]
    for t in (reversed(range(T)) if backwards else range(T)):
        running = delta[..., t] + k * running
        out[..., t] = running
    return out


def _gae_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(*(c.inputs[k] for k in ("rewards", "values", "gamma",
                                                                  "lam"))))

    def delta(r, v, g):
        return r + g * v[..., 1:] - v[..., :-1]                     # (N, T) TD errors

    return [
        m("lambda only (gamma missing from the decay)",
          lambda r, v, g, l: _discounted(delta(r, v, g), l)),
        m("gamma only (lambda missing from the decay)",
          lambda r, v, g, l: _discounted(delta(r, v, g), g)),
        m("the TD error alone (no sum over later steps)", lambda r, v, g, l: delta(r, v, g)),
        m("accumulated forwards in time (from t = 0), not backwards from the end",
          lambda r, v, g, l: _discounted(delta(r, v, g), g * l, backwards=False)),
        m("values shifted by one (V(s_t) and V(s_{t+1}) swapped)",
          lambda r, v, g, l: _discounted(r + g * v[..., :-1] - v[..., 1:], g * l)),
        m("the bootstrap value V(s_T) dropped (taken as 0), though values give it last",
          lambda r, v, g, l: _discounted(delta(r, np.concatenate(
              [v[..., :-1], 0 * v[..., -1:]], -1), g), g * l)),
        m("the returns A_t + V(s_t), the critic's regression target, not the advantages",
          lambda r, v, g, l: _discounted(delta(r, v, g), g * l) + v[..., :-1]),
        m("gamma and lam swapped in the signature (fn(rewards, values, lam, gamma))",
          lambda r, v, g, l: None if g == l else gae(r, v, gamma=l, lam=g)[0]),
    ]


def _gae_cases():
    rng = np.random.default_rng(7)
    r2, v2 = rng.normal(size=(3, 6)), rng.normal(size=(3, 7))
    rows = [("the worked example", [1.0, 0.0, 2.0], [0.5, 1.0, 0.5, 0.25], 0.9, 0.5),
            ("lambda = 0 (should be the one-step TD error)", r2, v2, 0.95, 0.0),
            ("lambda = 1 (should be the return minus V(s_t))", r2, v2, 0.95, 1.0),
            ("a batch of 3 sequences, gamma 0.99, lambda 0.95", r2, v2, 0.99, 0.95),
            ("one step (T = 1)", [0.7], [0.2, -0.4], 0.9, 0.8),
            ("a 4 x 4 batch (N == T)", rng.normal(size=(4, 4)), rng.normal(size=(4, 5)), 0.9, 0.7),
            ("an LLM's rewards (0 until the last token), gamma = lambda = 1",
             np.eye(12)[[11, 11, 11, 11, 11]] * rng.integers(0, 2, (5, 1)),
             rng.uniform(0, 1, size=(5, 13)), 1.0, 1.0),
            ("40 steps, gamma 0.97, lambda 0.9", rng.normal(size=(2, 40)),
             rng.normal(size=(2, 41)), 0.97, 0.9)]
    for where, r, v, gamma, lam in rows:
        r, v = np.asarray(r, dtype=np.float64), np.asarray(v, dtype=np.float64)
        terms = np.abs(r) + gamma * np.abs(v[..., 1:]) + np.abs(v[..., :-1])   # |delta|'s parts
        yield Case(where, (r, v, gamma, lam), gae(r, v, gamma=gamma, lam=lam)[0],
                   inputs={"rewards": r, "values": v, "gamma": gamma, "lam": lam},
                   scale=_discounted(terms, gamma * lam),
                   reference=lambda r, v, g=gamma, l=lam: gae(r, v, gamma=g, lam=l)[0],
                   perturb=(0, 1), show=lambda i, r=r, g=gamma, l=lam: (
                       f"rewards{list(i)} = {float(r[i])!r}, gamma = {g}, lam = {l}"))


def check_gae(fn, *, verbose=True) -> bool:
    """Check ``fn(rewards, values, gamma, lam) -> advantages`` against GAE-lambda.

    rewards (T,) or (N, T), values with one more step (the bootstrap value last); returns the
    advantages only, of the rewards' shape.
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_gae_cases()), say, mistakes=_gae_mistakes(),
                       shape_hint=" (the rewards' shape)", returns="the advantages array",
                       signature="my_gae(rewards, values, gamma, lam)",
                       passed="the worked example, both lambda limits, one step, N == T, an "
                              "LLM's sparse rewards and 40 steps are all right")


# --- the clipped surrogate ----------------------------------------------------------------------

def _surrogate_mistakes():
    def m(hint, f):
        def value(c):
            lp, old, a, eps = (c.inputs[k] for k in ("logp", "old_logp", "adv", "eps"))
            if np.abs(lp - old).max() > 20:        # where clamping conventions differ: no claim
                return None
            return f(np.exp(lp - old), a, eps, lp - old)
        return Mistake(hint, value)

    def clip(r, eps):
        return np.clip(r, 1 - eps, 1 + eps)

    return [
        m("the sign is flipped: that is the objective to maximise; return the loss to "
          "minimise, -min(r A, clip(r) A)", lambda r, a, e, d: np.minimum(r * a, clip(r, e) * a)),
        m("optimistic: you took the larger of r A and clip(r) A (or the min of the two "
          "losses); PPO takes the smaller objective, a pessimistic bound",
          lambda r, a, e, d: -np.maximum(r * a, clip(r, e) * a)),
        m("only the clipped term: without the min with r A, a token the policy has made "
          "LESS likely (r < 1 - eps, A > 0) would stop getting a gradient",
          lambda r, a, e, d: -clip(r, e) * a),
        m("no clipping at all: -r A is the plain importance-sampled loss",
          lambda r, a, e, d: -r * a),
        m("only the upper clip (1 + eps): a token with A < 0 must also have its ratio "
          "clipped below, at 1 - eps, or its penalty keeps pushing past the trust region",
          lambda r, a, e, d: -np.minimum(r * a, np.minimum(r, 1 + e) * a)),
        m("only the lower clip (1 - eps): with A > 0 the ratio must also be clipped above, "
          "at 1 + eps, or the gain keeps growing past the trust region",
          lambda r, a, e, d: -np.minimum(r * a, np.maximum(r, 1 - e) * a)),
        m("the ratio is logp - old_logp; it is exp(logp - old_logp)",
          lambda r, a, e, d: -np.minimum(d * a, clip(d, e) * a)),
        m("that is verl's dual-clip (c = 3): a token with A < 0 and a ratio above 3 has its "
          "loss capped at -3 A; the drill is PPO's plain clipped surrogate, without the cap",
          lambda r, a, e, d: surrogate_from_ratio(r, a, eps_low=e, dual_clip=3.0)),
        m("the eps argument is ignored (0.2 is used whatever is passed): use eps",
          lambda r, a, e, d: None if e == 0.2 else surrogate_from_ratio(r, a, eps_low=0.2)),
    ]


def _surrogate_cases():
    rng = np.random.default_rng(3)

    def batch(shape, spread=0.4):
        old = rng.uniform(-5, -0.1, size=shape)
        return old + rng.normal(0, spread, size=shape), old, rng.normal(size=shape)

    ratio = np.array([[1.0, 1.5, 0.5, 0.5, 1.5]])
    dual = np.array([[3.5, 5.0, 10.0, 0.5, 4.0, 1.1]])              # A < 0, ratios past 3
    rows = [("the worked example", np.log(ratio) - 1.0, np.full(ratio.shape, -1.0),
             np.array([[1.0, 1.0, 1.0, -1.0, -1.0]]), None),
            ("a (4, 6) batch", *batch((4, 6)), None),
            ("a (3, 7) batch with eps=0.1", *batch((3, 7)), 0.1),
            ("a (2, 5) batch with eps=0.3", *batch((2, 5), 0.6), 0.3),
            ("a 5 x 5 batch", *batch((5, 5)), None),
            ("A < 0 with ratios far above 1 + eps", np.log(dual), np.zeros(dual.shape),
             np.array([[-1.0, -1.0, -2.0, -1.0, 1.0, -0.5]]), None),
            ("a log-ratio of 800 (a stale old_logp)", np.zeros((1, 3)),
             np.array([[-800.0, -800.0, 800.0]]), np.array([[0.0, 1.0, -1.0]]), None)]
    for where, logp, old, adv, eps in rows:
        e = 0.2 if eps is None else eps
        ratio = np.exp(np.clip(logp - old, -20, 20))
        yield Case(where, (logp, old, adv), clipped_surrogate_loss(logp, old, adv, eps_low=e),
                   kwargs={} if eps is None else {"eps": eps},
                   inputs={"logp": logp, "old_logp": old, "adv": adv, "eps": e},
                   scale=np.abs(ratio * adv) + np.abs(adv) * (1 + e),
                   reference=lambda lp, o, a, e=e: clipped_surrogate_loss(lp, o, a, eps_low=e),
                   perturb=(0, 1, 2), show=lambda i, r=ratio, a=adv, e=e: (
                       f"ratio = exp(logp - old_logp) = {float(r[i])!r}, adv = "
                       f"{float(a[i])!r}, eps = {e}"))


def _finite(case, answer):
    """A non-finite loss entry, and what that entry's inputs show of where it came from: exp
    of the log-ratio overflowing only where the log-ratio is beyond exp's range in the answer's
    dtype; inf times A = 0 only where A is 0 there and the entry is NaN; else neither."""
    bad = ~np.isfinite(answer.values)
    if not bad.any():
        return None
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    value = answer.values[i]
    d = float(case.inputs["logp"][i] - case.inputs["old_logp"][i])
    a = float(case.inputs["adv"][i])
    text = (f"on {case.where} entry {list(i)} is {value} for logp - old_logp = {d!r} and "
            f"A = {a!r}")
    name = "float32" if answer.dtype == "float32" else "float64"
    limit = float(np.log(np.finfo(name).max))
    if abs(d) <= limit:
        return text + (f": exp of that log-ratio is finite in {name}, so look for a 0 / 0, "
                       "an inf - inf or a log of 0 in the formula")
    said = (f": exp({d:.0f}) is beyond the largest {name} (exp({limit:.1f})), so the ratio "
            "overflowed to " + ("inf" if d > 0 else "0"))
    if np.isnan(value) and a == 0 and d > 0:
        said += ", and inf * A with A = 0 is NaN"
    return text + said + ". Clamp the log-ratio before exp (verl clamps it to [-20, 20])"


def check_clipped_surrogate(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, old_logp, adv, eps=0.2) -> per-token loss`` against PPO's clipped
    surrogate, ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` with ``r = exp(logp - old_logp)``;
    eps = 0.1 and 0.3 are passed by keyword.
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_surrogate_cases()), say, mistakes=_surrogate_mistakes(),
                       extra=_finite, returns="the per-token loss array",
                       shape_hint="; the loss is per token, of the inputs' shape",
                       signature="my_clipped_surrogate(logp, old_logp, adv, eps=0.2)",
                       passed="both clip sides, eps by keyword, A < 0 far past the clip, "
                              "batches and a ratio that would overflow are all right")
