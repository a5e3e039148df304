"""Tests of the loss pieces: clipped surrogate, sequence ratio, aggregation, grpo_loss.

Hand-worked numbers first, then properties (hypothesis, >= 200 examples each, see conftest),
then every bad input with a check of its message.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl

BF16 = np.dtype(ml_dtypes.bfloat16)


def ratios_to_logp(ratios):
    """(logp, old_logp) whose ratio exp(logp - old_logp) is ``ratios`` (old_logp = -1)."""
    r = np.asarray(ratios, dtype=np.float64)
    return np.log(r) - 1.0, np.full(r.shape, -1.0)


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

log_ratios = st.floats(-3, 3)
advs = st.floats(-5, 5)
eps_values = st.floats(0, 1)


@st.composite
def token_batches(draw, max_n=4, max_t=8):
    n, t = draw(st.integers(1, max_n)), draw(st.integers(1, max_t))
    old = draw(hnp.arrays(np.float64, (n, t), elements=st.floats(-10, 0)))
    d = draw(hnp.arrays(np.float64, (n, t), elements=log_ratios))
    adv = draw(hnp.arrays(np.float64, (n, t), elements=advs))
    return old + d, old, adv


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


@st.composite
def masked_batches(draw, max_n=4, max_t=8):
    """(logp, old_logp, mask) with every row holding at least one valid token."""
    logp, old, adv = draw(token_batches(max_n, max_t))
    n, t = logp.shape
    lengths = draw(hnp.arrays(np.int64, (n,), elements=st.integers(1, t)))
    mask = np.arange(t)[None, :] < lengths[:, None]             # (N, T) left-aligned answers
    return logp, old, adv, mask


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


# --- grpo_loss -------------------------------------------------------------------------------

@given(masked_batches(), st.sampled_from(gl.AGGREGATIONS), st.sampled_from(["k1", "k2", "k3"]),
       st.floats(0, 0.5), st.floats(0, 1), st.booleans())
def test_grpo_loss_is_surrogate_plus_beta_kl_aggregated(batch, agg, kl, beta, shift, per_seq):
    logp, old, adv, mask = batch
    ref = old - shift
    a = adv[:, 0] if per_seq else adv
    loss, diag = gl.grpo_loss(logp, old, ref, a, mask, beta=beta, kl=kl, agg=agg)
    kl_fn = {"k1": gl.kl_k1, "k2": gl.kl_k2, "k3": gl.kl_k3}[kl]
    per_token = gl.clipped_surrogate_loss(logp, old, a) + beta * kl_fn(logp, ref)
    assert loss == pytest.approx(gl.aggregate_loss(per_token, mask, agg), rel=1e-10, abs=1e-12)
    m = mask.astype(bool)
    assert diag["mean_kl"] == pytest.approx(kl_fn(logp, ref)[m].mean(), rel=1e-10, abs=1e-12)
    assert diag["mean_ratio"] == pytest.approx(np.exp(logp - old)[m].mean(), rel=1e-10)


@given(masked_batches())
def test_beta_zero_needs_no_reference(batch):
    logp, old, adv, mask = batch
    loss, diag = gl.grpo_loss(logp, old, None, adv, mask, beta=0.0)
    assert diag["mean_kl"] is None
    assert loss == gl.grpo_loss(logp, old, old - 1.0, adv, mask, beta=0.0)[0]


@given(masked_batches(), st.sampled_from(gl.AGGREGATIONS))
def test_sequence_level_equals_token_level_when_each_sequence_moves_uniformly(batch, agg):
    _, old, adv, mask = batch
    shift = np.linspace(-0.3, 0.3, old.shape[0])[:, None]       # one log-ratio per sequence
    logp = old + shift
    tok = gl.grpo_loss(logp, old, None, adv[:, 0], mask, beta=0.0, agg=agg, level="token")[0]
    seq = gl.grpo_loss(logp, old, None, adv[:, 0], mask, beta=0.0, agg=agg, level="sequence")[0]
    assert seq == pytest.approx(tok, rel=1e-12, abs=1e-12)


def test_gspo_by_hand():
    # Two answers: token ratios (2, 1/2) -> s = 1; (1.5, 1.5, 1.5) -> s = 1.5, clipped to 1.2.
    logp = np.log([[2.0, 0.5, 1.0], [1.5, 1.5, 1.5]])
    mask = [[1, 1, 0], [1, 1, 1]]
    adv = [1.0, 1.0]
    loss, diag = gl.grpo_loss(logp, np.zeros((2, 3)), None, adv, mask, beta=0.0, level="sequence")
    assert float(loss) == pytest.approx(-(1.0 + 1.2) / 2)
    assert diag["clip_frac_high"] == pytest.approx(3 / 5)       # the 3 tokens of answer 2
    assert diag["mean_ratio"] == pytest.approx((2 * 1.0 + 3 * 1.5) / 5)
    # at token level the first answer's token of ratio 2 is clipped instead
    loss_tok, diag_tok = gl.grpo_loss(logp, np.zeros((2, 3)), None, adv, mask, beta=0.0)
    assert float(loss_tok) == pytest.approx(-((1.2 + 0.5) / 2 + 1.2) / 2)
    assert diag_tok["clip_frac_high"] == pytest.approx(4 / 5)


def test_diagnostics_by_hand():
    # 6 valid tokens and 1 padded; ratios and signs chosen to hit every case.
    ratios = [[0.5, 0.5, 1.5, 1.5, 1.0, 1.25, 9.0]]
    adv = [[-1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0]]
    mask = [[1, 1, 1, 1, 1, 1, 0]]
    logp, old = ratios_to_logp(ratios)
    _, diag = gl.grpo_loss(logp, old, old, adv, mask, eps_high=0.28)
    assert diag["clip_frac_low"] == pytest.approx(1 / 6)       # r=0.5 with A<0
    assert diag["clip_frac_high"] == pytest.approx(1 / 6)      # r=1.5 with A>0 (1.25 < 1.28)
    assert diag["clip_frac"] == pytest.approx(2 / 6)
    assert diag["mean_ratio"] == pytest.approx((0.5 + 0.5 + 1.5 + 1.5 + 1.0 + 1.25) / 6)
    r = np.array(ratios[0][:6])
    assert diag["approx_kl"] == pytest.approx(np.mean(r - 1 - np.log(r)))
    assert diag["mean_kl"] == pytest.approx(np.mean(1 / r - 1 + np.log(r)))  # k3 vs ref = old
    assert all(isinstance(v, float) for v in diag.values())


def test_grpo_loss_dtype_and_default_kl_is_k3():
    logp, old = ratios_to_logp([[1.1, 0.9]])
    ref = old - 0.5
    loss32, _ = gl.grpo_loss(logp.astype(np.float32), old.astype(np.float32),
                             ref.astype(np.float32), np.float32([1.0]), [[1, 1]])
    assert loss32.dtype == np.float32
    default, _ = gl.grpo_loss(logp, old, ref, [1.0], [[1, 1]])
    k3, _ = gl.grpo_loss(logp, old, ref, [1.0], [[1, 1]], kl="k3")
    k1, _ = gl.grpo_loss(logp, old, ref, [1.0], [[1, 1]], kl="k1")
    assert default == k3 != k1


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


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"ref_logp": None}, ValueError,
     r"ref_logp: expected an \(N, T\) array of reference log-probs when beta = 0.04 > 0, got None"),
    ({"ref_logp": np.zeros((2, 4))}, ValueError, r"ref_logp: expected shape \(2, 3\) \(the shape of logp"),
    ({"beta": -0.1}, ValueError, r"beta: expected a number >= 0.0, got -0.1"),
    ({"kl": "k4"}, ValueError, r"kl: expected one of 'k1', 'k2', 'k3', got 'k4'"),
    ({"agg": "sum"}, ValueError, r"agg: expected one of 'grpo', 'bnpo', 'dapo', 'dr_grpo', got 'sum'"),
    ({"level": "tokens"}, ValueError, r"level: expected one of 'token', 'sequence', got 'tokens'"),
    ({"eps_low": -0.2}, ValueError, r"eps_low: expected a number >= 0.0, got -0.2"),
    ({"mask": MASK[:, :2]}, ValueError, r"mask: expected shape \(2, 3\) \(the shape of logp; nothing is broadcast\)"),
    ({"mask": [[1, 1, 1], [0, 0, 0]]}, ValueError, r"mask: expected at least one valid token in every sequence"),
    ({"adv": np.zeros((3,))}, ValueError, r"adv: expected shape \(2,\) \(one advantage per sequence\)"),
    ({"adv": np.zeros((3, 2))}, ValueError, r"adv: expected shape \(2,\)"),
    ({"logp": LOGP[None]}, ValueError, r"logp: expected a 2-D array"),
    ({"old_logp": LOGP.T}, ValueError, r"old_logp: expected shape \(2, 3\)"),
])
def test_grpo_loss_bad_input(kwargs, exc, message):
    args = {"logp": LOGP, "old_logp": LOGP, "ref_logp": LOGP, "adv": np.zeros(2), "mask": MASK} | kwargs
    with pytest.raises(exc, match=message):
        gl.grpo_loss(args.pop("logp"), args.pop("old_logp"), args.pop("ref_logp"), args.pop("adv"),
                     args.pop("mask"), **args)
