"""Drill checkers for chapter 3 (KL estimators): they run the reader's function on worked
and edge cases and say what exactly is wrong.

Each ``check_<name>(fn)`` prints a short verdict and returns True or False.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.theory.kl_theory import estimator_grad_table, kl_categorical_grad, log_softmax
from grpo_lab.drills._harness import call as _call_any, verdict as _verdict

__all__ = ["check_kl_k3", "check_k3_loss_gradient"]


def _call(fn, *arrays):
    return _call_any(fn, *arrays, returns="the array")


def check_kl_k3(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, ref_logp) -> k3`` per token, k3 = exp(r) - r - 1, r = ref_logp - logp.

    Tokens are sampled from pi_theta; the answer must keep the shape, never be negative, be
    exactly 0 where the two log-probs agree, and stay accurate for tiny gaps (use expm1).
    """
    say = _verdict(verbose, fn)
    logp, ref_logp = np.log([0.5, 0.25]), np.log([0.25, 0.5])
    expected = kl_k3(logp, ref_logp)                     # [log 2 - 0.5, 1 - log 2]

    # 1. the worked example, with the usual mix-ups named
    out, problem = _call(fn, logp, ref_logp)
    if problem:
        return say(False, f"on the worked example your function {problem}")
    if out.shape != (2,):
        return say(False, f"on inputs of shape (2,) it returned shape {out.shape}; the "
                          "estimate is per token, same shape as logp")
    if not np.allclose(out, expected, rtol=1e-9):
        mixups = {
            "the ratio is upside down: k3 uses r = ref_logp - logp, i.e. "
            "pi_ref / pi_theta of the sampled token": kl_k3(ref_logp, logp),
            "that is k1 = logp - ref_logp, not k3": kl_k1(logp, ref_logp),
            "that is k2 = (logp - ref_logp)^2 / 2, not k3": kl_k2(logp, ref_logp),
        }
        for hint, wrong in mixups.items():
            if np.allclose(out, wrong, rtol=1e-9):
                return say(False, f"on the worked example you gave {np.round(out, 4).tolist()}"
                                  f", expected {np.round(expected, 4).tolist()}: {hint}")
        return say(False, f"on the worked example you gave {np.round(out, 4).tolist()}, "
                          f"expected {np.round(expected, 4).tolist()}")

    # 2. a batch (N, T): elementwise, shape kept, zero where the policies agree
    rng = np.random.default_rng(0)
    logp = np.log(rng.uniform(0.01, 1.0, size=(3, 5)))                   # (N, T)
    ref_logp = np.log(rng.uniform(0.01, 1.0, size=(3, 5)))               # (N, T)
    ref_logp[:, 0] = logp[:, 0]                                          # agree on token 0
    out, problem = _call(fn, logp, ref_logp)
    if problem:
        return say(False, f"on a batch of shape (3, 5) your function {problem}")
    if out.shape != (3, 5):
        return say(False, f"on a batch of shape (3, 5) it returned shape {out.shape}: no "
                          "sums or means, one estimate per token")
    if not np.allclose(out, kl_k3(logp, ref_logp), rtol=1e-9, atol=1e-15):
        return say(False, "on a batch of shape (3, 5) the values are wrong, though the worked "
                          "example was right: is anything reduced or broadcast?")
    if np.any(out[:, 0] != 0):
        return say(False, "where logp == ref_logp the estimate must be exactly 0")

    # 3. tiny gaps: exp(r) - 1 - r loses every digit to cancellation; expm1(r) - r does not
    tiny = np.array([1e-6, -1e-6, 1e-4])
    out, problem = _call(fn, np.zeros(3), tiny)
    if problem:
        return say(False, f"on tiny gaps your function {problem}")
    if np.any(out < 0) or not np.allclose(out, kl_k3(np.zeros(3), tiny), rtol=1e-6, atol=0):
        return say(False, f"for r = 1e-6 you gave {out[0]:.6e}, expected "
                          f"{kl_k3([0.0], [1e-6])[0]:.6e}: exp(r) - 1 cancels; compute it "
                          "as np.expm1(r)")

    return say(True, "worked example, batch shape, zero where the policies agree and tiny "
                     "gaps are all right")


def check_k3_loss_gradient(fn, *, verbose=True) -> bool:
    """Check ``fn(logits, ref_logits) -> g``: the expected gradient of the k3 loss term.

    For pi_theta = softmax(logits) and pi_ref = softmax(ref_logits), both shape (V,), the
    answer is ``sum_x pi_theta(x) * d k3(x) / d logits``, tokens x ~ pi_theta held fixed:
    the closed form the chapter asks the reader to derive.
    """
    say = _verdict(verbose, fn)
    rng = np.random.default_rng(3)
    for case in range(4):
        V = 3 + case
        logits, ref_logits = rng.normal(size=V), rng.normal(size=V)     # (V,), (V,)
        p = np.exp(log_softmax(logits))
        expected = estimator_grad_table(kl_k3, logits, ref_logits) @ p   # (V,)
        out, problem = _call(fn, logits, ref_logits)
        if problem:
            return say(False, f"with V = {V} tokens your function {problem}")
        if out.shape != (V,):
            return say(False, f"with V = {V} tokens it returned shape {out.shape}; the "
                              f"gradient has one entry per logit, shape ({V},)")
        if np.allclose(out, expected, atol=1e-6):
            continue
        reverse = kl_categorical_grad(logits, ref_logits)
        if np.allclose(out, reverse, atol=1e-6):
            hint = ("that is the gradient of KL(pi_theta || pi_ref), which k2 gives; k3's "
                    "gradient follows the other direction")
        elif np.allclose(out, -expected, atol=1e-6):
            hint = "the sign is flipped: this is the gradient of the penalty, not of -penalty"
        elif np.allclose(out, np.exp(logits) - np.exp(ref_logits), atol=1e-6):
            hint = ("exp(logits) are not probabilities: take the softmax of both logits "
                    "first (pi = exp(z - logsumexp(z)))")
        elif np.allclose(out, 0.0, atol=1e-6):
            hint = "all zeros is k1's expected gradient; k3's is not zero"
        else:
            hint = f"expected {np.round(expected, 4).tolist()}"
        return say(False, f"with V = {V} tokens you gave {np.round(out, 4).tolist()}: {hint}")
    return say(True, "your closed form matches the finite-difference gradient of gl.kl_k3 on "
                     "4 random policies")
