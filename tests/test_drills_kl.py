"""Chapter 3's drill checkers pass right answers and name the usual mistakes."""

import numpy as np
import pytest

import grpo_lab as gl

check_k3 = gl.drills_kl.check_kl_k3
check_grad = gl.drills_kl.check_k3_loss_gradient


def stable_k3(logp, ref_logp):
    r = ref_logp - logp
    return np.expm1(r) - r


def naive_k3(logp, ref_logp):
    r = ref_logp - logp
    return np.exp(r) - r - 1


def inplace_k3(logp, ref_logp):
    logp -= ref_logp                     # modifies the caller's array
    return np.expm1(-logp) + logp


@pytest.mark.parametrize("fn, message", [
    (stable_k3, "PASS: worked example"),
    (gl.kl_k3, "PASS: worked example"),
    (lambda a, b: stable_k3(b, a), "the ratio is upside down"),
    (lambda a, b: a - b, "that is k1"),
    (lambda a, b: 0.5 * (a - b) ** 2, "that is k2"),
    (lambda a, b: stable_k3(a, b).mean(), "returned shape ()"),
    (naive_k3, "compute it as np.expm1(r)"),
    (inplace_k3, "it modified its input"),
    (lambda a, b: None, "it returned None"),
    (lambda a, b: 1 / 0, "raised ZeroDivisionError"),
])
def test_k3_checker(fn, message, capsys):
    ok = check_k3(fn)
    out = capsys.readouterr().out
    assert message in out
    assert ok == out.startswith("PASS")


def test_k3_checker_catches_a_batch_reduction():
    def sums_rows(logp, ref_logp):
        k = stable_k3(logp, ref_logp)
        return k if k.ndim == 1 else k.sum(axis=-1, keepdims=True) + 0 * k
    assert not check_k3(sums_rows, verbose=False)


@pytest.mark.parametrize("fn, message", [
    (lambda z, zr: np.exp(gl.kl_theory.log_softmax(z)) - np.exp(gl.kl_theory.log_softmax(zr)),
     "PASS: your closed form"),
    (lambda z, zr: gl.kl_theory.kl_categorical_grad(z, zr), "which k2 gives"),
    (lambda z, zr: np.exp(gl.kl_theory.log_softmax(zr)) - np.exp(gl.kl_theory.log_softmax(z)),
     "the sign is flipped"),
    (lambda z, zr: np.zeros_like(z), "k1's expected gradient"),
    (lambda z, zr: z - zr, "expected ["),
    (lambda z, zr: np.zeros(2), "returned shape (2,)"),
])
def test_gradient_checker(fn, message, capsys):
    ok = check_grad(fn)
    out = capsys.readouterr().out
    assert message in out
    assert ok == out.startswith("PASS")
