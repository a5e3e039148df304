"""Drill checkers for chapter 3, the KL estimators: k3 per token, and the expected gradient of
the k3 loss term.

Neither statement fixes a dtype: a float32 answer is graded to float32's precision, against
the size of the terms it subtracts (``|expm1(r)| + |r|`` for k3, the probabilities for the
gradient). At float64 the gradient's tolerance also covers how the valid answers round
differently: the log-softmax by ``np.logaddexp.reduce``, by a max shift or by torch, then
the closed form ``pi - pi_ref`` or the chain rule term by term (:func:`gradient_error`), so no
right way of writing it is refused on peaked policies, while an answer that loses digits
beyond that (finite differences, a float32 step) is.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.drills.cases import Case, Mistake, full, log_softmax_error
from grpo_lab.drills.grading import check_cases
from grpo_lab.drills.harness import verdict
from grpo_lab.numerics.logprobs import log_softmax
from grpo_lab.theory.kl_theory import kl_categorical_grad

__all__ = ["check_k3_loss_gradient", "check_kl_k3", "gradient_error", "k3_expected_gradient"]


# --- k3 per token -------------------------------------------------------------------------------

def _k3_cases():
    rng = np.random.default_rng(0)
    logp = np.log(rng.uniform(0.01, 1.0, size=(3, 5)))                   # (N, T)
    ref_logp = np.log(rng.uniform(0.01, 1.0, size=(3, 5)))
    ref_logp[:, 0] = logp[:, 0]                                          # agree on token 0
    base = np.log([0.3, 0.05, 0.9])
    rows = [("the worked example", np.log([0.5, 0.25]), np.log([0.25, 0.5])),
            ("a batch of shape (3, 5)", logp, ref_logp),
            ("tiny gaps", np.zeros(3), np.array([1e-6, -1e-6, 1e-4])),
            ("tiny gaps beside log-probs far from 0", base, base + np.array([1e-7, -3e-8, 2e-5])),
            ("a (2, 3, 4) batch", np.log(rng.uniform(0.01, 1, (2, 3, 4))),
             np.log(rng.uniform(0.01, 1, (2, 3, 4)))),
            ("large gaps (|r| up to 30)", np.array([[-20.0, -1.0, -31.0]]),
             np.array([[-5.0, -16.0, -1.0]]))]
    for where, lp, ref in rows:
        r = ref - lp                                                     # log(pi_ref / pi_theta)
        yield Case(where, (lp, ref), kl_k3(lp, ref), inputs={"logp": lp, "ref_logp": ref},
                   scale=np.abs(np.expm1(r)) + np.abs(r), reference=kl_k3, perturb=(0, 1),
                   show=lambda i, r=r: f"d = logp - ref_logp = {full(-r[i])}")


def _k3_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["logp"], c.inputs["ref_logp"]))

    return [
        m("the ratio is upside down: k3 = exp(-d) + d - 1 with d = logp - ref_logp, "
          "i.e. exp(-d) = pi_ref / pi_theta of the sampled token", lambda a, b: kl_k3(b, a)),
        m("that is k1 = logp - ref_logp, not k3", kl_k1),
        m("that is k2 = (logp - ref_logp)^2 / 2, not k3", kl_k2),
        m("exp(-d) - 1 cancels for a tiny d (all but a few digits are rounding): compute k3 as "
          "np.expm1(-d) + d", lambda a, b: np.exp(b - a) - (b - a) - 1),
        m("each sequence's k3 was summed (or averaged) and broadcast back over its tokens; k3 "
          "is per token: no sums or means", lambda a, b: None if np.ndim(a) < 2 else
          np.broadcast_to(kl_k3(a, b).sum(-1, keepdims=True), np.shape(a))),
        m("each sequence's k3 was averaged and broadcast back over its tokens; k3 is per "
          "token: no sums or means", lambda a, b: None if np.ndim(a) < 2 else
          np.broadcast_to(kl_k3(a, b).mean(-1, keepdims=True), np.shape(a))),
    ]


def _exact_zero(case, answer):
    agree = case.inputs["logp"] == case.inputs["ref_logp"]
    if agree.any() and np.any(answer.values[agree] != 0):
        i = tuple(int(j) for j in np.argwhere(agree & (answer.values != 0))[0])
        return (f"on {case.where} entry {list(i)} is {full(answer.values[i], answer.dtype)} "
                "where logp == ref_logp: the estimate must be exactly 0 there (r = 0, and "
                "expm1(0) - 0 is 0)")
    return None


def check_kl_k3(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, ref_logp) -> k3`` per token, k3 = exp(-d) + d - 1, d = logp - ref_logp.

    Tokens are sampled from pi_theta; the answer must keep the shape (any shape), be exactly 0
    where the two log-probs agree, and stay accurate for tiny gaps (use expm1).
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_k3_cases()), say, mistakes=_k3_mistakes(), extra=_exact_zero,
                       shape_hint="; the estimate is per token, same shape as logp",
                       signature="my_kl_k3(logp, ref_logp)", returns="the per-token k3 array",
                       passed="worked example, batches of 1 to 3 dimensions, exact zeros "
                              "where the policies agree, tiny and large gaps are all right")


# --- the expected gradient of the k3 loss term ---------------------------------------------------

def k3_expected_gradient(logits, ref_logits):
    """``sum_x pi(x) d k3(x) / d logits`` by the chain rule, the sampled x held fixed: with
    ``r(x) = log pi_ref(x) - log pi(x)``, ``d k3 / d log pi(x) = 1 - e^{r(x)}`` and
    ``d log pi(x) / d logits_j = [x = j] - pi_j`` (what the drill asks the reader to reduce)."""
    logp, ref_logp = log_softmax(logits), log_softmax(ref_logits)       # (V,), (V,)
    p = np.exp(logp)
    d_k3 = -np.expm1(ref_logp - logp)                                   # (V,) d k3 / d log pi(x)
    d_logp = np.eye(p.size) - p[None, :]                                # (V, V) [x, j]
    return (p * d_k3) @ d_logp                                          # (V,)


def gradient_error(logits, ref_logits) -> np.ndarray:
    """A bound, in units of ``u``, on the rounding error of the k3 gradient over its valid
    formulations, entry by entry (V,).

    With ``E`` and ``E'`` the log-softmax bounds of the two logits (:func:`log_softmax_error`),
    a term ``pi(x) d_k3(x) = pi(x) - pi(x) exp(log pi_ref(x) - log pi(x))`` is off by at most
    ``w(x) = pi(x) (E(x) + 1) + pi_ref(x) (E(x) + E'(x) + |log pi_ref(x) - log pi(x)| + 3)``
    (an exp's relative error is its argument's absolute one); entry j of the chain rule is
    ``pi_j d_k3(j) - pi_j sum_x pi(x) d_k3(x)``, off by ``w(j) + pi_j (sum_x w(x) + 2 V)`` (the
    sum's own roundings). The closed form ``pi - pi_ref`` is inside this."""
    E, E_ref = log_softmax_error(logits), log_softmax_error(ref_logits)         # (V,), (V,)
    logp, ref_logp = log_softmax(logits), log_softmax(ref_logits)
    p, q = np.exp(logp), np.exp(ref_logp)
    w = p * (E + 1) + q * (E + E_ref + np.abs(ref_logp - logp) + 3)              # (V,)
    return w + p * (w.sum() + 2 * p.size)


def _grad_cases():
    rng = np.random.default_rng(3)
    rows = [(f"a vocabulary of V = {V} tokens", rng.normal(size=V), rng.normal(size=V))
            for V in (3, 4, 5, 6)]
    z = rng.normal(size=5)
    rows += [("two tokens", np.array([0.3, -1.2]), np.array([1.0, 0.0])),
             ("identical policies", z, z.copy()),
             ("peaked policies (logits spread over 30)", 10 * rng.normal(size=6),
              10 * rng.normal(size=6)),
             ("logits near 800 (exp overflows unless shifted)", 800 + rng.normal(size=4),
              -800 + rng.normal(size=4))]
    for where, z, zr in rows:
        p, pr = np.exp(log_softmax(z)), np.exp(log_softmax(zr))
        yield Case(where, (z, zr), k3_expected_gradient(z, zr),
                   inputs={"logits": z, "ref_logits": zr}, scale=p + pr,
                   bound=gradient_error(z, zr), reference=k3_expected_gradient, perturb=(0, 1))


def _grad_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["logits"], c.inputs["ref_logits"]))
    return [
        m("that is the gradient of KL(pi_theta || pi_ref), which k2 gives; k3's gradient "
          "follows the other direction", kl_categorical_grad),
        m("the sign is flipped: this is the gradient of the penalty, not of -penalty",
          lambda z, zr: -k3_expected_gradient(z, zr)),
        m("exp(logits) are not probabilities: take the softmax of both logits first "
          "(pi = exp(z - logsumexp(z)))", lambda z, zr: np.exp(z) - np.exp(zr)),
        m("all zeros is k1's expected gradient; k3's is not zero", lambda z, zr: np.zeros_like(z)),
    ]


def _finite_gradient(case, answer):
    """A non-finite gradient, and what this case shows of where it came from: exp overflowing
    only where these logits are beyond exp's range in the answer's dtype (every earlier case
    came out right, so finite); a probability underflowing only where one is below the dtype's
    smallest normal; else neither is named."""
    values = answer.values
    if np.isfinite(values).all():
        return None
    text = (f"on {case.where} the gradient has inf or NaN entries "
            f"{[full(v, answer.dtype) for v in values]}")
    dtype = np.float32 if answer.dtype == "float32" else np.float64
    info = np.finfo(dtype)
    z, zr = case.inputs["logits"], case.inputs["ref_logits"]
    top = float(max(np.abs(z).max(), np.abs(zr).max()))
    low = float(min(log_softmax(z).min(), log_softmax(zr).min()))
    if top > np.log(info.max):
        return text + (f", on logits up to {top:.0f} in size, beyond {np.log(info.max):.1f}, "
                       f"the log of the largest {answer.dtype}: exp of such an unshifted logit "
                       "overflows to inf (or underflows to 0), and inf / inf is NaN, while "
                       "every policy before this one came out finite; subtract each vector's "
                       "max logit before exp (softmax does not change)")
    if low < np.log(info.tiny):
        return text + (f": a probability here is exp({low:.0f}), below the smallest normal "
                       f"{answer.dtype} ({info.tiny:.2g}), so it underflows to 0, and a log of "
                       "it is -inf, a ratio by it 0/0 or x/0; keep log-probabilities (z - "
                       "logsumexp(z)) and form the ratio as exp(log pi_ref - log pi)")
    return text + (f": no exp overflows and no probability underflows in {answer.dtype} on "
                   "these logits, so look for a division by zero or a log of 0 in the "
                   "formula")


def check_k3_loss_gradient(fn, *, verbose=True) -> bool:
    """Check ``fn(logits, ref_logits) -> g``: the expected gradient of the k3 loss term.

    For pi_theta = softmax(logits) and pi_ref = softmax(ref_logits), both shape (V,), the
    answer is ``sum_x pi_theta(x) * d k3(x) / d logits``, tokens x ~ pi_theta held fixed
    (:func:`k3_expected_gradient`; the tests check it against finite differences of
    ``gl.kl_k3``), the closed form the chapter asks the reader to derive.
    """
    say = verdict(verbose, fn)
    return check_cases(fn, list(_grad_cases()), say, mistakes=_grad_mistakes(),
                       extra=_finite_gradient, returns="the (V,) gradient",
                       shape_hint="; the gradient has one entry per logit",
                       signature="my_k3_grad(logits, ref_logits)",
                       passed="your closed form matches the expected gradient of gl.kl_k3 on "
                              "8 policies: random, two tokens, identical, peaked and logits "
                              "near 800")
