"""Loss aggregation: the weights of grpo, bnpo, dapo, dr_grpo, the length bias they set, and
the sums they give; hand-worked numbers, properties, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl
from tests.core.strategies import BF16, masked_batches, token_batches


# --- aggregation: hand-worked length-bias numbers -----------------------------------------

# A short answer (2 tokens, loss +1 per token) and a long one (8 tokens, loss -1 per token),
# padded to T = 8: the same tokens, weighted three ways.
SHORT_LONG_LOSS = np.array([[1.0] * 8, [-1.0] * 8])
SHORT_LONG_MASK = np.array([[1] * 2 + [0] * 6, [1] * 8])


def test_length_bias_numbers():
    agg = {m: float(gl.aggregate_loss(SHORT_LONG_LOSS, SHORT_LONG_MASK, m))
           for m in gl.AGGREGATIONS}
    assert agg["grpo"] == pytest.approx(0.0, abs=1e-15)        # (1 + -1) / 2: each answer once
    assert agg["dapo"] == pytest.approx(-0.6)                  # (2 - 8) / 10 tokens
    assert agg["bnpo"] == agg["dapo"]
    assert agg["dr_grpo"] == pytest.approx(-0.375)             # (2 - 8) / (2 * 8)
    assert float(gl.aggregate_loss(SHORT_LONG_LOSS, SHORT_LONG_MASK, "dr_grpo", max_len=10)) \
        == pytest.approx(-0.3)                                 # (2 - 8) / (2 * 10)


def test_length_bias_weights_per_token():
    w = {m: gl.aggregation_weights(SHORT_LONG_MASK, m) for m in ("grpo", "dapo", "dr_grpo")}
    np.testing.assert_allclose(w["grpo"][0, :2], 1 / 4)        # a short answer's token: 1/(2*2)
    np.testing.assert_allclose(w["grpo"][1], 1 / 16)           # a long answer's token: 1/(2*8)
    np.testing.assert_allclose(w["dapo"][SHORT_LONG_MASK == 1], 1 / 10)
    np.testing.assert_allclose(w["dr_grpo"][SHORT_LONG_MASK == 1], 1 / 16)
    for v in w.values():
        assert np.all(v[SHORT_LONG_MASK == 0] == 0)


def test_aggregate_docstring_numbers():
    loss, mask = [[1.0, 0, 0], [0, 0, 0]], [[1, 0, 0], [1, 1, 1]]
    got = [float(gl.aggregate_loss(loss, mask, m)) for m in ("grpo", "dapo", "dr_grpo")]
    assert got == pytest.approx([0.5, 0.25, 1 / 6])


def test_aggregate_keeps_dtype():
    loss = np.array([[1.0, 2.0]], dtype=np.float32)
    out = gl.aggregate_loss(loss, [[1, 1]], "grpo")
    assert out.dtype == np.float32 and out.shape == () and float(out) == 1.5
    assert gl.aggregate_loss(loss.astype(BF16), [[True, False]], "dapo").dtype == BF16


# --- aggregation: properties -------------------------------------------------------------

@given(masked_batches(), st.integers(0, 5))
def test_weights_sum_to_one_or_to_the_filled_fraction(batch, extra):
    _, _, _, mask = batch
    n, t = mask.shape
    for mode in ("grpo", "bnpo", "dapo"):
        assert gl.aggregation_weights(mask, mode).sum() == pytest.approx(1.0)
    w = gl.aggregation_weights(mask, "dr_grpo", max_len=t + extra)
    assert w.sum() == pytest.approx(mask.sum() / (n * (t + extra)))


@given(masked_batches(), hnp.arrays(np.float64, 8, elements=st.floats(-5, 5)))
def test_padded_losses_do_not_count(batch, junk):
    _, _, loss, mask = batch
    loss2 = np.where(mask, loss, junk[:mask.shape[1]])
    for mode in gl.AGGREGATIONS:
        assert gl.aggregate_loss(loss2, mask, mode) == gl.aggregate_loss(loss, mask, mode)


@given(token_batches(), st.integers(1, 8))
def test_modes_agree_when_all_answers_have_the_same_length(batch, length):
    _, _, loss = batch
    n, t = loss.shape
    L = min(length, t)
    mask = np.zeros((n, t), dtype=bool)
    mask[:, :L] = True
    grpo, dapo = gl.aggregate_loss(loss, mask, "grpo"), gl.aggregate_loss(loss, mask, "dapo")
    assert grpo == pytest.approx(dapo, rel=1e-12, abs=1e-12)
    assert gl.aggregate_loss(loss, mask, "bnpo") == dapo
    # dr_grpo divides by N * T instead of N * L
    assert gl.aggregate_loss(loss, mask, "dr_grpo") == pytest.approx(dapo * L / t, rel=1e-12,
                                                                       abs=1e-12)


@given(masked_batches(), st.floats(-5, 5))
def test_a_constant_loss_aggregates_to_itself_under_grpo_and_dapo(batch, c):
    _, _, _, mask = batch
    loss = np.full(mask.shape, c)
    for mode in ("grpo", "bnpo", "dapo"):
        assert gl.aggregate_loss(loss, mask, mode) == pytest.approx(c, rel=1e-12, abs=1e-12)

# --- bad input -------------------------------------------------------------------------------

LOGP = np.full((2, 3), -1.0)
MASK = np.ones((2, 3))


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"mask": np.ones((2, 2))}, ValueError,
     r"mask: expected shape \(2, 3\) \(the shape of per_token_loss; nothing is broadcast\), got a 2-D float64 array of shape \(2, 2\)"),
    ({"mask": np.ones(3)}, ValueError, r"mask: expected shape \(2, 3\)"),
    ({"mask": [[1, 1, 1], [0, 0, 0]]}, ValueError,
     r"mask: expected at least one valid token in every sequence \(row\), got none in row 1"),
    ({"mask": [[1, 0.5, 1], [1, 1, 1]]}, ValueError, r"mask: expected only 0 and 1 \(or bools\), got 0.5 at index \(0, 1\)"),
    ({"mask": [[1, 2, 1], [1, 1, 1]]}, ValueError, r"mask: expected only 0 and 1"),
    ({"mask": None}, TypeError, r"mask: expected a mask of 0/1 or bools"),
    ({"mask": np.array([["a"] * 3] * 2)}, TypeError, r"mask: expected a mask of 0/1 or bools.*got dtype <U1"),
    ({"mode": "mean"}, ValueError, r"mode: expected one of 'grpo', 'bnpo', 'dapo', 'dr_grpo', got 'mean'"),
    ({"mode": "GRPO"}, ValueError, r"mode: expected one of .*got 'GRPO'"),
    ({"mode": "dr_grpo", "max_len": 2}, ValueError,
     r"max_len: expected an integer in \[3, inf\] \(at least T = 3, the padded length\), got 2"),
    ({"mode": "dr_grpo", "max_len": 4.0}, TypeError, r"max_len: expected an integer, got float 4.0"),
    ({"mode": "grpo", "max_len": 8}, ValueError,
     r"max_len: expected None with mode 'grpo' \(only 'dr_grpo' divides by it\), got 8"),
    ({"per_token_loss": np.zeros(3)}, ValueError, r"per_token_loss: expected a 2-D array of shape \(N, T\), got a 1-D"),
    ({"per_token_loss": [[0, np.inf, 0], [0, 0, 0]]}, ValueError, r"per_token_loss: expected finite values, got inf"),
])
def test_aggregate_bad_input(kwargs, exc, message):
    args = {"per_token_loss": np.zeros((2, 3)), "mask": MASK, "mode": "grpo"} | kwargs
    with pytest.raises(exc, match=message):
        gl.aggregate_loss(args.pop("per_token_loss"), args.pop("mask"), args.pop("mode"), **args)


def test_aggregation_weights_needs_a_2d_mask():
    with pytest.raises(ValueError, match=r"mask: expected a 2-D \(N, T\) array of 0/1 or bools, got a 1-D"):
        gl.aggregation_weights([1, 1, 0], "grpo")
