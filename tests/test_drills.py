"""The drill checker accepts a right answer and names the mistake in wrong ones."""

import numpy as np
import pytest

import grpo_lab as gl


def right(r, eps=1e-8):
    r = np.asarray(r, dtype=np.float64)
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + eps)


def bessel(r):
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True, ddof=1) + 1e-8)


def no_keepdims(r):
    return (r - r.mean(-1)) / (r.std(-1) + 1e-8)


def wrong_axis(r):
    return (r - r.mean(0)) / (r.std(0) + 1e-8)


def whole_batch(r):
    return (r - r.mean()) / (r.std() + 1e-8)


def no_eps(r):
    with np.errstate(invalid="ignore", divide="ignore"):
        return (r - r.mean(-1, keepdims=True)) / r.std(-1, keepdims=True)


def no_std(r):
    return r - r.mean(-1, keepdims=True)


def sign_flip(r):
    return -right(r)


def mutates(r):
    r -= r.mean(-1, keepdims=True)
    return r / (r.std(-1, keepdims=True) + 1e-8)


def returns_none(r):
    right(r)


def square_only_bug(r):
    # right for B != G, but reshapes the mean wrongly when B == G (a missing keepdims
    # hidden behind a shape check)
    mean = r.mean(-1)
    mean = mean[:, None] if r.shape[0] != r.shape[1] else mean[None, :]
    return (r - mean) / (r.std(-1, keepdims=True) + 1e-8)


def test_accepts_the_right_answer(capsys):
    assert gl.drills.check_group_advantages(right) is True
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("fn, hint", [
    (bessel, "Bessel's std"),
    (no_keepdims, "keepdims=True"),
    (wrong_axis, "axis 0"),
    (whole_batch, "whole batch"),
    (no_eps, "guarded with eps"),
    (no_std, "std is not divided out"),
    (sign_flip, "signs are flipped"),
    (mutates, "modified its input"),
    (returns_none, "returned None"),
    (square_only_bug, "B == G"),
])
def test_rejects_wrong_answers_with_the_right_hint(fn, hint, capsys):
    assert gl.drills.check_group_advantages(fn) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET") and hint in out, out


def test_quiet_mode_prints_nothing(capsys):
    assert gl.drills.check_group_advantages(bessel, verbose=False) is False
    assert capsys.readouterr().out == ""
