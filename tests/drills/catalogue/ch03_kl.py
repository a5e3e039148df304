"""Chapter 3: k3 per token, and the k3 term's expected gradient."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import kl_k3
from grpo_lab.numerics.logprobs import log_softmax
from grpo_lab.theory.kl_theory import kl_categorical_grad
from tests.drills.catalogue.entry import Drill, Wrong


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


_K3 = Drill("check_kl_k3", 3, rights=(_k3_right, kl_k3), wrongs=(
    Wrong("the ratio upside down", lambda a, b: _k3_right(b, a), "the ratio is upside down"),
    Wrong("k1 instead of k3", lambda a, b: a - b, "that is k1"),
    Wrong("k2 instead of k3", lambda a, b: 0.5 * (a - b) ** 2, "that is k2"),
    Wrong("exp(r) - r - 1 (cancels for tiny r)",
          lambda a, b: np.exp(b - a) - (b - a) - 1, "compute it as np.expm1(r)"),
    Wrong("a mean over tokens", lambda a, b: _k3_right(a, b).mean(), "returned shape ()"),
    Wrong("a sum over each sequence, broadcast back", _k3_row_sums, "reduced or broadcast"),
    Wrong("subtracts in place", _k3_in_place, "modified its input"),
    Wrong("forgets to return", lambda a, b: None, "returned None"),
    Wrong("crashes", lambda a, b: a[len(a) + 5], "raised IndexError"),
))


# --- chapter 3: the k3 term's expected gradient, fn(logits, ref_logits) -> (V,) -----------------

def _softmax(z):
    return np.exp(log_softmax(np.asarray(z, dtype=np.float64)))


_K3_GRAD = Drill("check_k3_loss_gradient", 3, rights=(
    lambda z, zr: _softmax(z) - _softmax(zr),
), wrongs=(
    Wrong("the reverse-KL gradient (what k2 gives)", lambda z, zr: kl_categorical_grad(z, zr),
          "which k2 gives"),
    Wrong("sign error", lambda z, zr: _softmax(zr) - _softmax(z), "the sign is flipped"),
    Wrong("zero, as for k1", lambda z, zr: np.zeros_like(z), "k1's expected gradient"),
    Wrong("unnormalised exponentials", lambda z, zr: np.exp(z) - np.exp(zr),
          "exp(logits) are not probabilities"),
    Wrong("the logit difference", lambda z, zr: z - zr, "expected ["),
    Wrong("a fixed shape", lambda z, zr: np.zeros(2), "returned shape (2,)"),
))


DRILLS = (_K3, _K3_GRAD)
