"""Chapter 4's drill checkers accept right answers and name the mistake in wrong ones."""

import numpy as np
import pytest

import grpo_lab as gl


# --- log-softmax ---------------------------------------------------------------------------

def ls_right(z):
    z = np.asarray(z).astype(np.float32)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def ls_package(z):
    return gl.log_softmax(z)


def ls_no_shift(z):
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def ls_low_accumulator(z):
    m = z.max(-1, keepdims=True)
    return ((z - m) - np.log(np.exp(z - m).sum(-1, keepdims=True))).astype(np.float32)


def ls_low_output(z):
    return ls_right(z).astype(z.dtype)


def ls_softmax(z):
    e = np.exp(ls_right(z))
    return e


def ls_axis0(z):
    z = np.asarray(z, dtype=np.float64)
    return z - np.log(np.exp(z).sum(0, keepdims=True))


def ls_only_max(z):
    return np.asarray(z, dtype=np.float32) - np.asarray(z, dtype=np.float32).max(-1, keepdims=True)


def ls_in_place(z):
    z -= z.max(-1, keepdims=True)
    return ls_right(z)


def ls_raises(z):
    raise RuntimeError("boom")


@pytest.mark.parametrize("fn", [ls_right, ls_package])
def test_log_softmax_checker_accepts_right_answers(fn, capsys):
    assert gl.drills_precision.check_log_softmax(fn) is True
    assert capsys.readouterr().out.startswith("PASS: ")


@pytest.mark.parametrize("fn, words", [
    (ls_no_shift, "Subtract the row max"),
    (ls_low_accumulator, "sum of exp ran in bfloat16"),
    (ls_low_output, "come back in bfloat16"),
    (ls_softmax, "probabilities (softmax)"),
    (ls_axis0, "axis 0"),
    (ls_only_max, "subtracted the max but not"),
    (ls_in_place, "modified its input"),
    (ls_raises, "raised RuntimeError: boom"),
    (lambda z: None, "returned None"),
    (lambda z: z[..., :1], "returned shape (2, 1)"),
])
def test_log_softmax_checker_names_the_mistake(fn, words, capsys):
    assert gl.drills_precision.check_log_softmax(fn) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and words in out, out


# --- sequence log-prob sum -----------------------------------------------------------------

def sum_right(logp, mask):
    return np.where(mask, logp.astype(np.float64), 0.0).sum(-1)


def sum_float32(logp, mask):
    return (logp.astype(np.float32) * mask).sum(-1)


def sum_package(logp, mask):
    return gl.sequence_logprob_sum(logp, mask)


def sum_no_mask(logp, mask):
    return logp.astype(np.float64).sum(-1)


def sum_low(logp, mask):
    return (logp * mask.astype(logp.dtype)).sum(-1)


def sum_low_output(logp, mask):
    return sum_right(logp, mask).astype(logp.dtype)


def sum_mean(logp, mask):
    return sum_right(logp, mask) / mask.sum(-1)


@pytest.mark.parametrize("fn", [sum_right, sum_float32, sum_package])
def test_sum_checker_accepts_right_answers(fn, capsys):
    assert gl.drills_precision.check_sequence_logprob_sum(fn) is True
    assert capsys.readouterr().out.startswith("PASS: ")


@pytest.mark.parametrize("fn, words", [
    (sum_no_mask, "padded token (-99) was counted"),
    (sum_low, "running sum was kept in bfloat16"),
    (sum_low_output, "comes back in bfloat16"),
    (sum_mean, "that is a mean"),
    (lambda logp, mask: sum_right(logp, mask)[:1], "expected one sum per sequence"),
    (lambda logp, mask: np.array(["a", "b"]), "expected a float array"),
])
def test_sum_checker_names_the_mistake(fn, words, capsys):
    assert gl.drills_precision.check_sequence_logprob_sum(fn) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and words in out, out


def test_sum_checker_catches_float16_overflow(capsys):
    def low_only_for_float16(logp, mask):
        if logp.dtype == np.float16:
            return sum_low(logp, mask)          # NumPy's pairwise float16 sum: -inf
        return sum_right(logp, mask)
    assert gl.drills_precision.check_sequence_logprob_sum(low_only_for_float16) is False
    out = capsys.readouterr().out
    assert "beyond float16's range" in out, out
