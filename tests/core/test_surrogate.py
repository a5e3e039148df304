"""PPO's clipped surrogate (from log-probs and from the ratio), its gradient, GSPO's ratio.

Hand-worked numbers first, then properties (hypothesis, >= 200 examples each, see conftest),
then every bad input with a check of its message.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl
from tests.core.strategies import BF16, eps_values, masked_batches, ratios_to_logp, token_batches


# --- clipped_surrogate_loss: hand-worked numbers ---------------------------------------------

@pytest.mark.parametrize("ratio, adv, expected", [
    (1.0, 2.0, -2.0),      # at ratio 1 the loss is -A
    (1.5, 1.0, -1.2),      # A > 0, r above 1 + eps: clipped at 1.2
    (1.1, 1.0, -1.1),      # A > 0, inside the range
    (0.5, 1.0, -0.5),      # A > 0, r below 1 - eps: NOT clipped (min picks r A = 0.5)
    (0.5, -1.0, 0.8),      # A < 0, r below 1 - eps: clipped at 0.8
    (0.9, -1.0, 0.9),      # A < 0, inside
    (3.0, -1.0, 3.0),      # A < 0, r above 1 + eps: NOT clipped, grows with r
    (7.0, 0.0, 0.0),       # A = 0: no loss whatever the ratio
])
def test_both_clip_sides_by_hand(ratio, adv, expected):
    logp, old = ratios_to_logp([[ratio]])
    out = gl.clipped_surrogate_loss(logp, old, [[adv]], eps_low=0.2)
    np.testing.assert_allclose(out, [[expected]], rtol=1e-12)


def test_clip_higher_moves_only_the_upper_bound():
    logp, old = ratios_to_logp([[1.5, 0.5, 1.25]])
    adv = [[1.0, -1.0, 1.0]]
    sym = gl.clipped_surrogate_loss(logp, old, adv, eps_low=0.2)
    dapo = gl.clipped_surrogate_loss(logp, old, adv, eps_low=0.2, eps_high=0.28)
    np.testing.assert_allclose(sym, [[-1.2, 0.8, -1.2]], rtol=1e-12)
    np.testing.assert_allclose(dapo, [[-1.28, 0.8, -1.25]], rtol=1e-12)


def test_eps_high_defaults_to_eps_low():
    logp, old = ratios_to_logp([[0.1, 0.7, 1.0, 1.3, 4.0]])
    adv = [[1.0, -1.0, 0.5, 2.0, -3.0]]
    np.testing.assert_array_equal(
        gl.clipped_surrogate_loss(logp, old, adv, eps_low=0.1),
        gl.clipped_surrogate_loss(logp, old, adv, eps_low=0.1, eps_high=0.1))


def test_dual_clip_by_hand():
    logp, old = ratios_to_logp([[5.0, 2.0, 5.0, 0.5]])
    adv = [[-2.0, -2.0, 2.0, -2.0]]
    out = gl.clipped_surrogate_loss(logp, old, adv, dual_clip=3.0)
    # A=-2, r=5: min(2*5, 2*3) = 6;  r=2 < c: 4, untouched;  A > 0: -1.2*2;  r=0.5: 0.8*2
    np.testing.assert_allclose(out, [[6.0, 4.0, -2.4, 1.6]], rtol=1e-12)
    np.testing.assert_allclose(gl.clipped_surrogate_loss(logp, old, adv), [[10.0, 4.0, -2.4, 1.6]],
                               rtol=1e-12)


def test_docstring_numbers():
    logp, old = np.log([[1.0, 1.5, 1.5, 5.0]]), np.zeros((1, 4))
    adv = [[1.0, 1.0, -1.0, -1.0]]
    np.testing.assert_allclose(gl.clipped_surrogate_loss(logp, old, adv), [[-1, -1.2, 1.5, 5]])
    np.testing.assert_allclose(
        gl.clipped_surrogate_loss(logp, old, adv, eps_high=0.28, dual_clip=3.0),
        [[-1, -1.28, 1.5, 3]])


def test_per_sequence_adv_is_broadcast_over_tokens_not_sequences():
    # N == T == 3: NumPy alone would line an (N,) advantage up with the token axis.
    rng = np.random.default_rng(0)
    logp, old = rng.normal(size=(3, 3)) - 2, rng.normal(size=(3, 3)) - 2
    adv_seq = np.array([1.0, -2.0, 0.5])
    per_seq = gl.clipped_surrogate_loss(logp, old, adv_seq)
    per_tok = gl.clipped_surrogate_loss(logp, old, np.repeat(adv_seq[:, None], 3, axis=1))
    np.testing.assert_array_equal(per_seq, per_tok)
    wrong_axis = gl.clipped_surrogate_loss(logp, old, np.tile(adv_seq, (3, 1)))
    assert not np.allclose(per_seq, wrong_axis)


def test_one_sequence_1d_with_a_scalar_advantage():
    logp, old = ratios_to_logp([1.0, 1.5])
    np.testing.assert_allclose(gl.clipped_surrogate_loss(logp, old, 2.0), [-2.0, -2.4])


def test_huge_ratio_cannot_overflow():
    # log-ratios of +-800: exp would be inf (and 0 * inf = NaN for A = 0).
    logp = np.array([[0.0, 0.0, 0.0, -800.0, 0.0]])
    old = np.array([[-800.0, -800.0, -800.0, 0.0, -800.0]])
    adv = np.array([[1.0, -1.0, 0.0, -1.0, -1.0]])
    out = gl.clipped_surrogate_loss(logp, old, adv)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out[0, :4], [-1.2, np.exp(gl.MAX_LOG_RATIO), 0.0, 0.8])
    dual = gl.clipped_surrogate_loss(logp, old, adv, dual_clip=3.0)
    np.testing.assert_allclose(dual, [[-1.2, 3.0, 0.0, 0.8, 3.0]])


def test_float16_loss_that_does_not_fit_is_an_error():
    logp = np.array([[0.0]], dtype=np.float16)
    old = np.array([[-30.0]], dtype=np.float16)
    with pytest.raises(ValueError, match=r"logp, old_logp, adv: the per-token losses do not fit in float16"):
        gl.clipped_surrogate_loss(logp, old, np.array([[-1.0]], dtype=np.float16))
    # the same ratio with A > 0 is clipped, and fits
    assert gl.clipped_surrogate_loss(logp, old, np.array([[1.0]], dtype=np.float16)).dtype == np.float16


def test_dtypes_and_inputs_untouched():
    logp, old = ratios_to_logp([[1.3, 0.6]])
    lp32, old32, adv32 = logp.astype(np.float32), old.astype(np.float32), np.float32([1.0, -1.0])
    copies = [x.copy() for x in (lp32, old32, adv32)]
    out = gl.clipped_surrogate_loss(lp32, old32, adv32[None, :])
    assert out.dtype == np.float32
    for x, c in zip((lp32, old32, adv32), copies):
        np.testing.assert_array_equal(x, c)
    assert gl.clipped_surrogate_loss(lp32.astype(BF16), old32.astype(BF16),
                                     adv32[None, :].astype(BF16)).dtype == BF16
    assert gl.clipped_surrogate_loss(lp32, old32, [[1.0, -1.0]]).dtype == np.float64

# --- clipped_surrogate_loss: properties -----------------------------------------------------

@given(token_batches(), eps_values, st.floats(0, 2), st.one_of(st.none(), st.floats(1.01, 10)))
def test_at_ratio_one_the_loss_is_minus_adv(batch, eps_low, eps_high, dual_clip):
    _, old, adv = batch
    out = gl.clipped_surrogate_loss(old, old, adv, eps_low=eps_low, eps_high=eps_high,
                                    dual_clip=dual_clip)
    np.testing.assert_array_equal(out, -adv)


@given(token_batches(), eps_values, st.floats(0, 2))
def test_clipped_loss_is_a_pessimistic_bound(batch, eps_low, eps_high):
    logp, old, adv = batch
    ratio = np.exp(logp - old)
    out = gl.clipped_surrogate_loss(logp, old, adv, eps_low=eps_low, eps_high=eps_high)
    assert np.all(out >= -ratio * adv - 1e-12)                   # never better than unclipped
    inside = (ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)
    np.testing.assert_allclose(out[inside], (-ratio * adv)[inside], rtol=1e-12, atol=1e-12)


@given(token_batches(), st.floats(1.01, 10))
def test_dual_clip_bounds_negative_advantages_only(batch, c):
    logp, old, adv = batch
    plain = gl.clipped_surrogate_loss(logp, old, adv)
    dual = gl.clipped_surrogate_loss(logp, old, adv, dual_clip=c)
    neg = adv < 0
    assert np.all(dual[neg] <= -c * adv[neg] + 1e-12)
    assert np.all(dual <= plain)
    np.testing.assert_array_equal(dual[~neg], plain[~neg])


@given(token_batches(), st.floats(0, 0.5), st.floats(0, 0.5))
def test_a_wider_upper_clip_never_raises_the_loss(batch, eps, extra):
    logp, old, adv = batch
    narrow = gl.clipped_surrogate_loss(logp, old, adv, eps_low=eps, eps_high=eps)
    wide = gl.clipped_surrogate_loss(logp, old, adv, eps_low=eps, eps_high=eps + extra)
    assert np.all(wide <= narrow + 1e-12)

# --- surrogate_from_ratio: the same loss from the ratio ---------------------------------------

def test_surrogate_from_ratio_by_hand_term_by_term():
    ratio = np.array([[1.0, 1.5, 0.5, 5.0, 0.5]])
    adv = np.array([[1.0, 1.0, -1.0, -1.0, 1.0]])
    # -A r vs -A clip(r): max picks the clipped 1.2 for (1.5, +1) and 0.8 for (0.5, -1)
    np.testing.assert_array_equal(gl.surrogate_from_ratio(ratio, adv), [[-1.0, -1.2, 0.8, 5.0, -0.5]])
    np.testing.assert_array_equal(gl.surrogate_from_ratio(ratio, adv, dual_clip=3.0)[0, 3], 3.0)


def test_surrogate_from_ratio_broadcasts_one_advantage_per_sequence_over_its_tokens():
    ratio = np.array([[1.0, 1.5], [0.5, 1.0]])
    per_seq = gl.surrogate_from_ratio(ratio, np.array([[1.0], [-1.0]]))
    np.testing.assert_array_equal(per_seq, [[-1.0, -1.2], [0.8, 1.0]])


@given(token_batches(), eps_values, st.floats(0, 2), st.one_of(st.none(), st.floats(1.01, 10)))
def test_surrogate_from_ratio_is_clipped_surrogate_loss_of_the_log_ratio(batch, lo, hi, c):
    logp, old, adv = batch
    from_logp = gl.clipped_surrogate_loss(logp, old, adv, eps_low=lo, eps_high=hi, dual_clip=c)
    ratio = np.exp(gl.log_ratio(logp, old, clamp=gl.MAX_LOG_RATIO))
    np.testing.assert_array_equal(
        gl.surrogate_from_ratio(ratio, adv, eps_low=lo, eps_high=hi, dual_clip=c), from_logp)


# --- surrogate_grad_logp: the gradient, against finite differences of the loss -----------------

def finite_difference_per_token(logp, old, adv, h=1e-6, **kw):
    """d loss_t / d logp_t by central differences of gl.clipped_surrogate_loss (elementwise)."""
    up = gl.clipped_surrogate_loss(logp + h, old, adv, **kw)
    down = gl.clipped_surrogate_loss(logp - h, old, adv, **kw)
    return (up - down) / (2 * h)


def test_surrogate_grad_by_hand():
    # ratio 1: -A; ratio 1.5 with A > 0 and 0.5 with A < 0: clipped, 0; 0.9 with A < 0: -A r
    logp, old = np.log([[1.0, 1.5, 0.5, 0.9, 0.5]]), np.zeros((1, 5))
    adv = [[1.0, 1.0, -1.0, -1.0, 2.0]]
    np.testing.assert_allclose(gl.surrogate_grad_logp(logp, old, adv), [[-1.0, 0.0, 0.0, 0.9, -1.0]],
                               rtol=1e-15)


@pytest.mark.parametrize("kw", [{}, {"eps_high": 0.28}, {"dual_clip": 3.0},
                                {"eps_low": 0.1, "eps_high": 0.4, "dual_clip": 2.0}])
def test_surrogate_grad_matches_finite_differences_of_the_loss(kw):
    rng = np.random.default_rng(0)
    old = -rng.exponential(size=(6, 9))
    logp = old + rng.normal(0, 0.8, size=old.shape)             # ratios from 0.1 to 10
    logp[0, 0], logp[1, 1] = old[0, 0] + 25.0, old[1, 1] - 25.0  # clamped log-ratios
    adv = rng.normal(size=6)
    g = gl.surrogate_grad_logp(logp, old, adv, **kw)
    np.testing.assert_allclose(g, finite_difference_per_token(logp, old, adv, **kw), atol=1e-6)
    assert (g == 0).any() and (g != 0).any()                      # both branches exercised
    assert g[0, 0] == 0 and g[1, 1] == 0                          # the clamp holds: no gradient


@given(token_batches(), eps_values, st.floats(0, 2))
def test_surrogate_grad_is_zero_exactly_where_the_clip_holds(batch, lo, hi):
    logp, old, adv = batch
    ratio = np.exp(logp - old)
    g = gl.surrogate_grad_logp(logp, old, adv, eps_low=lo, eps_high=hi)
    held = ((adv > 0) & (ratio > 1 + hi)) | ((adv < 0) & (ratio < 1 - lo))
    assert np.all(g[held] == 0)
    np.testing.assert_allclose(g[~held], (-adv * ratio)[~held], rtol=1e-12)


def test_surrogate_grad_keeps_the_dtype():
    logp, old = ratios_to_logp([[1.3, 0.6]])
    g = gl.surrogate_grad_logp(logp.astype(np.float32), old.astype(np.float32), np.float32([1.0]))
    assert g.dtype == np.float32


# --- sequence_ratio -------------------------------------------------------------------------

def test_sequence_ratio_by_hand():
    logp = np.log([[2.0, 0.5, 9.0], [4.0, 1.0, 1.0], [1.1, 1.1, 1.1]])
    mask = [[1, 1, 0], [1, 1, 1], [1, 1, 1]]
    s = gl.sequence_ratio(logp, np.zeros((3, 3)), mask)
    np.testing.assert_allclose(s, [1.0, 4 ** (1 / 3), 1.1], rtol=1e-12)


def test_sequence_ratio_length_normalisation():
    # 100 tokens each 1% more likely: the product is 2.7, the sequence ratio stays 1.01.
    logp, old = ratios_to_logp(np.full((1, 100), 1.01))
    np.testing.assert_allclose(gl.sequence_ratio(logp, old, np.ones((1, 100))), [1.01], rtol=1e-12)


def test_sequence_ratio_cannot_overflow():
    s = gl.sequence_ratio([[0.0, 0.0]], [[-900.0, -900.0]], [[1, 1]])
    np.testing.assert_allclose(s, [np.exp(gl.MAX_LOG_RATIO)])


@given(masked_batches(), hnp.arrays(np.float64, 8, elements=st.floats(-5, 5)))
def test_sequence_ratio_ignores_padding_and_lies_between_token_ratios(batch, junk):
    logp, old, _, mask = batch
    s = gl.sequence_ratio(logp, old, mask)
    logp2 = np.where(mask, logp, junk[:logp.shape[1]])          # change only padded tokens
    np.testing.assert_array_equal(gl.sequence_ratio(logp2, old, mask), s)
    ratio = np.exp(logp - old)
    lo = np.where(mask, ratio, np.inf).min(axis=1)
    hi = np.where(mask, ratio, -np.inf).max(axis=1)
    assert np.all(s >= lo * (1 - 1e-12)) and np.all(s <= hi * (1 + 1e-12))

# --- bad input -------------------------------------------------------------------------------

LOGP = np.full((2, 3), -1.0)
MASK = np.ones((2, 3))


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"old_logp": np.zeros((2, 2))}, ValueError,
     r"old_logp: expected shape \(2, 3\) \(the shape of logp; nothing is broadcast\), got a 2-D float64 array of shape \(2, 2\)"),
    ({"adv": np.zeros(3)}, ValueError,
     r"adv: expected shape \(2,\) \(one advantage per sequence\) or \(2, 3\) \(one per token\), got a 1-D float64 array of shape \(3,\)"),
    ({"adv": np.zeros((2, 1))}, ValueError, r"adv: expected shape \(2,\)"),
    ({"eps_low": -0.1}, ValueError, r"eps_low: expected a number >= 0.0, got -0.1"),
    ({"eps_low": 1.5}, ValueError, r"eps_low: expected a number <= 1.0, got 1.5"),
    ({"eps_high": -0.2}, ValueError, r"eps_high: expected a number >= 0.0, got -0.2"),
    ({"eps_low": "0.2"}, TypeError, r"eps_low: expected a real number, got str '0.2'"),
    ({"dual_clip": 1.0}, ValueError, r"dual_clip: expected a number > 1.0, got 1.0"),
    ({"dual_clip": 0.5}, ValueError, r"dual_clip: expected a number > 1.0, got 0.5"),
    ({"dual_clip": True}, TypeError, r"dual_clip: expected a real number, got bool True"),
    ({"logp": [[np.nan, 0, 0], [0, 0, 0]]}, ValueError, r"logp: expected finite values, got nan at index \(0, 0\)"),
    ({"old_logp": "x"}, TypeError, r"old_logp: expected a numeric array"),
    ({"adv": [[1 + 1j] * 3] * 2}, TypeError, r"adv: expected a real numeric dtype"),
    ({"logp": 0.5, "old_logp": 0.5, "adv": 1.0}, ValueError, r"logp: expected an array with at least 1 dimension"),
])
def test_surrogate_bad_input(kwargs, exc, message):
    args = {"logp": LOGP, "old_logp": LOGP, "adv": np.zeros(2)} | kwargs
    with pytest.raises(exc, match=message):
        gl.clipped_surrogate_loss(args.pop("logp"), args.pop("old_logp"), args.pop("adv"), **args)

@pytest.mark.parametrize("kwargs, exc, message", [
    ({"mask": np.ones((2, 2))}, ValueError, r"mask: expected shape \(2, 3\) \(the shape of logp\)"),
    ({"mask": [[0, 0, 0], [1, 1, 1]]}, ValueError, r"mask: expected at least one valid token in every sequence \(row\), got none in row 0"),
    ({"logp": np.zeros(3), "old_logp": np.zeros(3), "mask": np.ones(3)}, ValueError,
     r"logp: expected a 2-D array of per-token log-probs, shape \(N, T\), got a 1-D"),
    ({"old_logp": np.zeros((3, 2))}, ValueError, r"old_logp: expected shape \(2, 3\)"),
])
def test_sequence_ratio_bad_input(kwargs, exc, message):
    args = {"logp": LOGP, "old_logp": LOGP, "mask": MASK} | kwargs
    with pytest.raises(exc, match=message):
        gl.sequence_ratio(args["logp"], args["old_logp"], args["mask"])


@pytest.mark.parametrize("call, exc, message", [
    (lambda: gl.surrogate_from_ratio(np.ones((2, 3)), np.ones(2)), ValueError,
     r"adv: expected an array of ratio's rank, 2, that broadcasts with its shape \(2, 3\)"),
    (lambda: gl.surrogate_from_ratio(np.ones((2, 3)), np.ones((3, 1))), ValueError,
     r"adv: expected an array of ratio's rank"),
    (lambda: gl.surrogate_from_ratio(np.ones((2, 3)), np.ones((2, 1)), eps_low=2.0), ValueError,
     r"eps_low: expected a number <= 1.0, got 2.0"),
    (lambda: gl.surrogate_from_ratio("r", np.ones((2, 1))), TypeError, r"ratio: expected a numeric array"),
    (lambda: gl.surrogate_grad_logp(LOGP, LOGP, np.zeros(3)), ValueError,
     r"adv: expected shape \(2,\) \(one advantage per sequence\) or \(2, 3\)"),
    (lambda: gl.surrogate_grad_logp(LOGP, LOGP, np.zeros(2), dual_clip=1.0), ValueError,
     r"dual_clip: expected a number > 1.0, got 1.0"),
])
def test_surrogate_from_ratio_and_grad_bad_input(call, exc, message):
    with pytest.raises(exc, match=message):
        call()
