"""Drill checker for chapter 2: GAE-lambda, the advantages PPO gets from its critic.

The drill: ``my_gae(rewards, values, gamma, lam)``, rewards (T,) or (N, T), values one step
longer (the bootstrap value last) -> the advantages, of the rewards' shape, by the backward
recursion A_t = delta_t + gamma * lam * A_{t+1}.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.gae import gae
from grpo_lab.drills._harness import call, verdict as _verdict

__all__ = ["check_gae"]


def _gae_variants(r, v, gamma, lam):
    """Common wrong versions of GAE, for naming the reader's mistake."""
    T = r.shape[-1]
    delta = r + gamma * v[..., 1:] - v[..., :-1]

    def backward(d, k):
        out, run = np.zeros_like(d), np.zeros_like(d[..., 0])
        for t in range(T - 1, -1, -1):
            run = d[..., t] + k * run
            out[..., t] = run
        return out

    forward = np.zeros_like(delta)
    run = np.zeros_like(delta[..., 0])
    for t in range(T):
        run = delta[..., t] + gamma * lam * run
        forward[..., t] = run
    return {
        "lambda only (gamma missing from the decay)": backward(delta, lam),
        "gamma only (lambda missing from the decay)": backward(delta, gamma),
        "the TD error alone (no sum over later steps)": delta,
        "accumulated forwards in time (from t = 0), not backwards from the end": forward,
        "values shifted by one (V(s_t) and V(s_{t+1}) swapped)":
            backward(r + gamma * v[..., :-1] - v[..., 1:], gamma * lam),
        "the bootstrap value V(s_T) dropped (taken as 0), though values give it last":
            backward(delta - gamma * v[..., -1:] * (np.arange(T) == T - 1), gamma * lam),
        "the returns A_t + V(s_t), the critic's regression target, not the advantages":
            backward(delta, gamma * lam) + v[..., :-1],
    }


def check_gae(fn, *, verbose=True) -> bool:
    """Check ``fn(rewards, values, gamma, lam) -> advantages`` against GAE-lambda.

    rewards (T,) or (N, T), values with one more step (the bootstrap value last); returns the
    advantages only, of the rewards' shape.
    """
    verdict = _verdict(verbose, fn)
    cases = [([1.0, 0.0, 2.0], [0.5, 1.0, 0.5, 0.25], 0.9, 0.5, "the worked example")]
    rng = np.random.default_rng(7)
    r2, v2 = rng.normal(size=(3, 6)), rng.normal(size=(3, 7))
    cases += [(r2, v2, 0.95, 0.0, "lambda = 0 (should be the one-step TD error)"),
              (r2, v2, 0.95, 1.0, "lambda = 1 (should be the return minus V(s_t))"),
              (r2, v2, 0.99, 0.95, "a batch of 3 sequences, gamma 0.99, lambda 0.95")]
    for rewards, values, gamma, lam, name in cases:
        r, v = np.asarray(rewards, dtype=float), np.asarray(values, dtype=float)
        expected, _ = gae(r, v, gamma=gamma, lam=lam)
        out, problem = call(fn, r, v, gamma, lam, returns="the advantages array")
        if problem:
            return verdict(False, f"on {name} your function {problem}")
        if out.shape != expected.shape:
            return verdict(False, f"on {name} it returned shape {out.shape}, expected "
                                  f"{expected.shape} (the rewards' shape)")
        if not np.allclose(out, expected, rtol=1e-9, atol=1e-12):
            for what, wrong in _gae_variants(r, v, gamma, lam).items():
                if np.allclose(out, wrong, rtol=1e-9, atol=1e-12):
                    return verdict(False, f"on {name} the result matches {what}: "
                                          "A_t = delta_t + gamma * lam * A_{t+1}, from the end")
            return verdict(False, f"on {name} you gave {np.round(out, 4).tolist()}, expected "
                                  f"{np.round(expected, 4).tolist()}")
    return verdict(True, "the worked example, both lambda limits and a batch are all right")
