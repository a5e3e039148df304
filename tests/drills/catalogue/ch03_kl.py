"""Chapter 3: k3 per token, and the k3 term's expected gradient."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import kl_k3
from grpo_lab.numerics.logprobs import log_softmax
from grpo_lab.theory.kl_theory import kl_categorical_grad
from .entry import Drill, Wrong, endless_loop


# --- chapter 3: k3 per token, fn(logp, ref_logp) ------------------------------------------------

def _k3_right(logp, ref_logp):
    r = np.asarray(ref_logp, dtype=np.float64) - logp             # log(pi_ref / pi_theta)
    return np.expm1(r) - r


def _k3_in_place(logp, ref_logp):
    logp -= ref_logp                                              # reuses the caller's array
    return np.expm1(-logp) + logp


def _k3_row_sums(logp, ref_logp):
    k = _k3_right(logp, ref_logp)
    return k if k.ndim == 1 else k.sum(-1, keepdims=True) + 0 * k  # a "sequence KL" per token


def _k3_torch(logp, ref_logp):
    import torch
    r = torch.as_tensor(ref_logp) - torch.as_tensor(logp)
    return torch.expm1(r) - r


def _k3_float32(logp, ref_logp):
    r = np.asarray(ref_logp, np.float32) - np.asarray(logp, np.float32)
    return np.expm1(r) - r


def _k3_series(logp, ref_logp):
    """expm1(r) - r, or its Taylor series r^2/2 + r^3/6 + r^4/24 where r is small."""
    r = np.asarray(ref_logp, dtype=np.float64) - logp
    small = np.abs(r) < 1e-3
    return np.where(small, r * r / 2 * (1 + r / 3 * (1 + r / 4)), np.expm1(r) - r)


def _k3_log1p_form(logp, ref_logp):
    """k3 = exp(-d) + d - 1 with d = logp - ref_logp, written with expm1 of -d."""
    d = np.asarray(logp, dtype=np.float64) - ref_logp
    return np.expm1(-d) + d


def _k3_hangs(logp, ref_logp):
    while True:
        pass


_K3 = Drill("check_kl_k3", 3, rights=(_k3_right, kl_k3, _k3_torch, _k3_float32, _k3_series,
                                      _k3_log1p_form), wrongs=(
    Wrong("a stray constant 1e-8 added (float64, float32-sized on the worked example)",
          lambda logp, ref: (lambda r: np.exp(r) - r - 1 + 1e-8)(
              np.asarray(ref, np.float64) - np.asarray(logp, np.float64)),
          "so float32 does not explain it"),
    Wrong("the ratio upside down", lambda a, b: _k3_right(b, a), "the ratio is upside down"),
    Wrong("k1 instead of k3", lambda a, b: a - b, "that is k1"),
    Wrong("k2 instead of k3", lambda a, b: 0.5 * (a - b) ** 2, "that is k2"),
    Wrong("exp(-d) + d - 1 unfused (cancels for tiny d)",
          lambda a, b: np.exp(b - a) - (b - a) - 1, "compute k3 as np.expm1(-d) + d"),
    Wrong("a mean over tokens", lambda a, b: _k3_right(a, b).mean(), "returned shape ()"),
    Wrong("a sum over each sequence, broadcast back", _k3_row_sums, "summed (or averaged)"),
    Wrong("subtracts in place", _k3_in_place, "modified its input"),
    Wrong("forgets to return", lambda a, b: None, "returned None"),
    Wrong("crashes", lambda a, b: a[len(a) + 5], "raised IndexError"),
    Wrong("float32 returned as float64", lambda a, b: _k3_float32(a, b).astype(np.float64),
          "float32 rounding"),
    endless_loop(_k3_hangs),
    Wrong("a generator of per-token values", lambda a, b: (x for x in _k3_right(a, b)),
          "returned a generator"),
))


# --- chapter 3: the k3 term's expected gradient, fn(logits, ref_logits) -> (V,) -----------------

def _softmax(z):
    return np.exp(log_softmax(np.asarray(z, dtype=np.float64)))


def _grad_shifted(z, zr):
    pi = np.exp(z - z.max())
    pi_ref = np.exp(zr - zr.max())
    return pi / pi.sum() - pi_ref / pi_ref.sum()


def _grad_chain_rule(z, zr):
    """sum_x pi(x) (1 - pi_ref(x) / pi(x)) ([x = j] - pi_j), term by term."""
    p, q = _softmax(z), _softmax(zr)
    return sum(p[x] * (1 - q[x] / p[x]) * (np.eye(len(p))[x] - p) for x in range(len(p)))


def _grad_torch(z, zr):
    import torch
    return torch.softmax(torch.as_tensor(z), 0) - torch.softmax(torch.as_tensor(zr), 0)


def _grad_autograd(z, zr):
    """Autograd of the exact expectation sum_x pi(x) k3(x), pi(x) held fixed."""
    import torch
    logits = torch.tensor(z, requires_grad=True)
    logp = torch.log_softmax(logits, 0)
    r = torch.log_softmax(torch.as_tensor(zr), 0) - logp
    (logp.exp().detach() * (r.exp() - r - 1)).sum().backward()
    return logits.grad


def _lae_log_softmax(z, dtype=np.float64):
    z = np.asarray(z, dtype=dtype)
    return z - np.logaddexp.reduce(z)                             # log-softmax, no max shift


def _grad_logaddexp_chain(z, zr):
    """The chain rule term by term on log-softmaxes by np.logaddexp.reduce: ~30 ulp from exact
    on peaked policies, inside the error every valid formulation may make."""
    logp, ref_logp = _lae_log_softmax(z), _lae_log_softmax(zr)
    p = np.exp(logp)
    d_k3 = -np.expm1(ref_logp - logp)                             # d k3 / d log pi(x)
    return (p * d_k3) @ (np.eye(p.size) - p[None, :])


def _grad_logaddexp_closed(z, zr):
    return np.exp(_lae_log_softmax(z)) - np.exp(_lae_log_softmax(zr))


def _grad_log_sum_exp_shift(z, zr):
    """log(sum(exp(z - m))) + m, then the chain rule with the ratio taken as a difference."""
    def logp_of(v):
        v = np.asarray(v, dtype=np.float64)
        m = v.max()
        return v - (m + np.log(np.sum(np.exp(v - m))))
    logp, ref_logp = logp_of(z), logp_of(zr)
    p = np.exp(logp)
    w = p * (1 - np.exp(ref_logp - logp))                         # (V,) pi(x) d k3(x)
    return w - p * w.sum()


def _grad_logaddexp_float32(z, zr):
    logp, ref_logp = _lae_log_softmax(z, np.float32), _lae_log_softmax(zr, np.float32)
    p = np.exp(logp)
    w = p * -np.expm1(ref_logp - logp)
    return w - p * w.sum()                                        # float32, graded as float32


def _grad_central_difference(z, zr, h=1e-5):
    """Central differences of sum_x pi(x) k3(x), pi held fixed: ~6e-12 off, hundreds of times
    what rounding explains, so it is not the closed form the drill asks for."""
    z = np.asarray(z, dtype=np.float64)
    p, ref_logp = _softmax(z), log_softmax(np.asarray(zr, dtype=np.float64))

    def expected_k3(v):
        r = ref_logp - log_softmax(v)
        return np.sum(p * (np.expm1(r) - r))
    step = h * np.eye(z.size)
    return np.array([(expected_k3(z + e) - expected_k3(z - e)) / (2 * h) for e in step])


def _grad_unshifted_chain(z, zr):
    logp = z - np.log(np.sum(np.exp(z)))                          # overflows at logits near 800
    ref_logp = zr - np.log(np.sum(np.exp(zr)))
    p = np.exp(logp)
    w = p * (1 - np.exp(ref_logp - logp))
    return w - p * w.sum()


_K3_GRAD = Drill("check_k3_loss_gradient", 3, rights=(
    lambda z, zr: _softmax(z) - _softmax(zr), _grad_shifted, _grad_chain_rule, _grad_torch,
    _grad_autograd, lambda z, zr: kl_categorical_grad(z, zr, direction="forward"),
    _grad_logaddexp_chain, _grad_logaddexp_closed, _grad_log_sum_exp_shift,
    _grad_logaddexp_float32,
), wrongs=(
    Wrong("the reverse-KL gradient (what k2 gives)", lambda z, zr: kl_categorical_grad(z, zr),
          "which k2 gives"),
    Wrong("sign error", lambda z, zr: _softmax(zr) - _softmax(z), "the sign is flipped"),
    Wrong("zero, as for k1", lambda z, zr: np.zeros_like(z), "k1's expected gradient"),
    Wrong("unnormalised exponentials", lambda z, zr: np.exp(z) - np.exp(zr),
          "exp(logits) are not probabilities"),
    Wrong("the logit difference", lambda z, zr: z - zr, "tokens entry [0]"),
    Wrong("a fixed shape", lambda z, zr: np.zeros(2), "returned shape (2,)"),
    Wrong("softmax without the max shift (overflows at logits near 800)",
          lambda z, zr: np.exp(z) / np.exp(z).sum() - np.exp(zr) / np.exp(zr).sum(),
          "exp of such an unshifted logit overflows to inf"),
    Wrong("log(sum(exp(z))) without the shift, then the chain rule", _grad_unshifted_chain,
          "beyond 709.8, the log of the largest float64"),
    Wrong("central differences of the expected k3 (h = 1e-5)", _grad_central_difference,
          "a float64 step loses digits"),
    Wrong("float32 log-softmax by logaddexp, returned as float64",
          lambda z, zr: _grad_logaddexp_float32(z, zr).astype(np.float64),
          "within what float32 rounding gives here"),
    Wrong("the probability of the reference only", lambda z, zr: -_softmax(zr),
          "tokens entry [0]"),
    Wrong("the gradient weighted by pi twice",
          lambda z, zr: _softmax(z) * (_softmax(z) - _softmax(zr)), "tokens entry [0]"),
    Wrong("returns a list of the right values, then one too many",
          lambda z, zr: list(_softmax(z) - _softmax(zr)) + [0.0], "expected (3,)"),
))


DRILLS = (_K3, _K3_GRAD)
