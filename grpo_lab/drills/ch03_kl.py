"""Drill checkers for chapter 3, the KL estimators: k3 per token, and the expected gradient of
the k3 loss term.

Each ``check_<name>(fn)`` prints a short verdict and returns True or False.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.drills.harness import call, named_mistake, verdict
from grpo_lab.numerics.logprobs import log_softmax
from grpo_lab.theory.kl_theory import estimator_grad_table, kl_categorical_grad

__all__ = ["check_k3_loss_gradient", "check_kl_k3"]


def check_kl_k3(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, ref_logp) -> k3`` per token, k3 = exp(r) - r - 1, r = ref_logp - logp.

    Tokens are sampled from pi_theta; the answer must keep the shape, never be negative, be
    exactly 0 where the two log-probs agree, and stay accurate for tiny gaps (use expm1).
    """
    say = verdict(verbose, fn)
    per_token = "; the estimate is per token, same shape as logp"

    # 1. the worked example, with the usual mix-ups named
    logp, ref_logp = np.log([0.5, 0.25]), np.log([0.25, 0.5])
    expected = kl_k3(logp, ref_logp)                     # [log 2 - 0.5, 1 - log 2]
    out, problem = call(fn, logp, ref_logp, where="the worked example", shape=(2,),
                        shape_hint=per_token)
    if problem:
        return say(False, problem)
    if not np.allclose(out, expected, rtol=1e-9):
        hint = named_mistake(out, {
            "the ratio is upside down: k3 uses r = ref_logp - logp, i.e. "
            "pi_ref / pi_theta of the sampled token": kl_k3(ref_logp, logp),
            "that is k1 = logp - ref_logp, not k3": kl_k1(logp, ref_logp),
            "that is k2 = (logp - ref_logp)^2 / 2, not k3": kl_k2(logp, ref_logp),
        }, rtol=1e-9, atol=1e-8)
        return say(False, f"on the worked example you gave {np.round(out, 4).tolist()}, "
                          f"expected {np.round(expected, 4).tolist()}"
                          + (f": {hint}" if hint else ""))

    # 2. a batch (N, T): elementwise, shape kept, zero where the policies agree
    rng = np.random.default_rng(0)
    logp = np.log(rng.uniform(0.01, 1.0, size=(3, 5)))                   # (N, T)
    ref_logp = np.log(rng.uniform(0.01, 1.0, size=(3, 5)))               # (N, T)
    ref_logp[:, 0] = logp[:, 0]                                          # agree on token 0
    out, problem = call(fn, logp, ref_logp, where="a batch of shape (3, 5)", shape=(3, 5),
                        shape_hint=": no sums or means, one estimate per token")
    if problem:
        return say(False, problem)
    if not np.allclose(out, kl_k3(logp, ref_logp), rtol=1e-9, atol=1e-15):
        return say(False, "on a batch of shape (3, 5) the values are wrong, though the worked "
                          "example was right: is anything reduced or broadcast?")
    if np.any(out[:, 0] != 0):
        return say(False, "where logp == ref_logp the estimate must be exactly 0")

    # 3. tiny gaps: exp(r) - 1 - r loses every digit to cancellation; expm1(r) - r does not
    tiny = np.array([1e-6, -1e-6, 1e-4])
    out, problem = call(fn, np.zeros(3), tiny, where="tiny gaps", shape=(3,),
                        shape_hint=per_token)
    if problem:
        return say(False, problem)
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
    say = verdict(verbose, fn)
    rng = np.random.default_rng(3)
    for case in range(4):
        V = 3 + case
        logits, ref_logits = rng.normal(size=V), rng.normal(size=V)     # (V,), (V,)
        p = np.exp(log_softmax(logits))
        expected = estimator_grad_table(kl_k3, logits, ref_logits) @ p   # (V,)
        out, problem = call(fn, logits, ref_logits, where=f"a vocabulary of V = {V} tokens",
                            shape=(V,),
                            shape_hint="; the gradient has one entry per logit")
        if problem:
            return say(False, problem)
        if np.allclose(out, expected, atol=1e-6):
            continue
        hint = named_mistake(out, {
            "that is the gradient of KL(pi_theta || pi_ref), which k2 gives; k3's gradient "
            "follows the other direction": kl_categorical_grad(logits, ref_logits),
            "the sign is flipped: this is the gradient of the penalty, not of -penalty":
                -expected,
            "exp(logits) are not probabilities: take the softmax of both logits first "
            "(pi = exp(z - logsumexp(z)))": np.exp(logits) - np.exp(ref_logits),
            "all zeros is k1's expected gradient; k3's is not zero": 0.0,
        }, rtol=1e-5, atol=1e-6)
        hint = hint or f"expected {np.round(expected, 4).tolist()}"
        return say(False, f"with V = {V} tokens you gave {np.round(out, 4).tolist()}: {hint}")
    return say(True, "your closed form matches the finite-difference gradient of gl.kl_k3 on "
                     "4 random policies")
