"""Drill checker for chapter 2: PPO's clipped surrogate, as a per-token loss.

The drill: ``my_clipped_surrogate(logp, old_logp, adv, eps=0.2)`` -> ``-min(r A, clip(r,
1 - eps, 1 + eps) A)`` with ``r = exp(logp - old_logp)``, elementwise, both clip sides, and a
log-ratio clamped before ``exp``.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.losses import clipped_surrogate_loss
from grpo_lab.drills._harness import call, verdict as _verdict

__all__ = ["check_clipped_surrogate"]

_RETURNS = "the per-token loss array"


def check_clipped_surrogate(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, old_logp, adv, eps=0.2) -> per-token loss`` against PPO's clipped
    surrogate, ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` with ``r = exp(logp - old_logp)``.
    """
    verdict = _verdict(verbose, fn)
    ratio = np.array([[1.0, 1.5, 0.5, 0.5, 1.5]])
    adv = np.array([[1.0, 1.0, 1.0, -1.0, -1.0]])
    logp, old = np.log(ratio) - 1.0, np.full(ratio.shape, -1.0)
    expected = clipped_surrogate_loss(logp, old, adv)               # [-1, -1.2, -0.5, 0.8, 1.5]
    out, problem = call(fn, logp, old, adv, returns=_RETURNS)
    if problem:
        return verdict(False, f"on the worked example your function {problem}")
    if out.shape != ratio.shape:
        return verdict(False, f"on inputs of shape {ratio.shape} it returned shape {out.shape}; "
                              "the loss is per token, of the same shape")
    if not np.allclose(out, expected, rtol=1e-9):
        clip = np.clip(ratio, 0.8, 1.2)
        hints = {
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
                -np.minimum(np.log(ratio) * adv, np.clip(np.log(ratio), 0.8, 1.2) * adv),
        }
        for hint, wrong in hints.items():
            if np.allclose(out, wrong, rtol=1e-9):
                return verdict(False, f"on the worked example: {hint}")
        return verdict(False, f"on ratios {ratio[0].tolist()} with A = {adv[0].tolist()} you "
                              f"gave {np.round(out, 4).tolist()}, expected "
                              f"{np.round(expected, 4).tolist()}")

    # a batch with per-token advantages: elementwise, nothing reduced
    rng = np.random.default_rng(3)
    old_b = rng.uniform(-5, -0.1, size=(4, 6))
    logp_b = old_b + rng.normal(0, 0.4, size=(4, 6))
    adv_b = rng.normal(size=(4, 6))
    out, problem = call(fn, logp_b, old_b, adv_b, returns=_RETURNS)
    if problem:
        return verdict(False, f"on a (4, 6) batch your function {problem}")
    if out.shape != (4, 6) or not np.allclose(out, clipped_surrogate_loss(logp_b, old_b, adv_b)):
        return verdict(False, "the worked example is right but a (4, 6) batch is not: keep it "
                              "elementwise (no mean, no sum) and use eps for both bounds")

    # a ratio that overflows: exp(800) is inf, and inf * 0 is NaN
    out, problem = call(fn, np.array([[0.0, 0.0]]), np.array([[-800.0, -800.0]]),
                         np.array([[0.0, 1.0]]), returns=_RETURNS)
    if problem:
        return verdict(False, f"on a log-ratio of 800 your function {problem}")
    if not np.all(np.isfinite(out)):
        return verdict(False, "on a log-ratio of 800 (a stale old_logp) you gave "
                              f"{out.tolist()}: exp(800) is inf, and inf * A with A = 0 is NaN. "
                              "Clamp the log-ratio before exp (verl clamps it to [-20, 20])")
    if not np.allclose(out, [[0.0, -1.2]]):
        return verdict(False, f"on a log-ratio of 800 you gave {out.tolist()}, expected "
                              "[[0, -1.2]]")
    return verdict(True, "both clip sides, a batch, and a ratio that would overflow are all right")
