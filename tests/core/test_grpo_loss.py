"""The whole GRPO loss: surrogate + beta * KL aggregated, GSPO's level, the diagnostics a
trainer logs; properties, hand-worked numbers, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import grpo_lab as gl
from tests.core.strategies import masked_batches, ratios_to_logp


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


@given(masked_batches(), st.sampled_from(["k1", "k2", "k3", "k3+"]), st.floats(1.01, 5.0),
       st.floats(0.5, 20.0), st.booleans(), st.booleans())
def test_the_production_knobs_are_the_pieces_they_name(batch, kl, c, clamp, bias, dr):
    """dual_clip, kl_clamp, kl_bias_correction and max_len (chapter 8): grpo_loss equals the
    surrogate with dual-clip, plus beta times the clipped KL, weighted by the ratio if asked,
    aggregated with max_len."""
    logp, old, adv, mask = batch
    ref = old - 0.3
    agg, max_len = ("dr_grpo", logp.shape[1] + 7) if dr else ("dapo", None)
    loss, _ = gl.grpo_loss(logp, old, ref, adv, mask, beta=0.1, kl=kl, agg=agg, dual_clip=c,
                           max_len=max_len, kl_clamp=clamp, kl_bias_correction=bias)
    k = gl.kl_k3(logp, ref, clamp=clamp) if kl == "k3+" else \
        {"k1": gl.kl_k1, "k2": gl.kl_k2, "k3": gl.kl_k3}[kl](logp, ref, clamp=clamp)
    ratio = np.exp(np.clip(logp - old, -gl.MAX_LOG_RATIO, gl.MAX_LOG_RATIO)) if bias else 1.0
    per_token = gl.clipped_surrogate_loss(logp, old, adv, dual_clip=c) + 0.1 * ratio * k
    assert loss == pytest.approx(gl.aggregate_loss(per_token, mask, agg, max_len=max_len),
                                 rel=1e-10, abs=1e-12)


def test_the_knobs_default_to_off():
    logp, old = np.log([[0.5, 0.9], [0.2, 0.4]]), np.log([[0.1, 0.9], [0.5, 0.4]])
    adv, mask = np.array([-1.0, 1.0]), np.ones((2, 2))
    plain, _ = gl.grpo_loss(logp, old, old, adv, mask)
    off, _ = gl.grpo_loss(logp, old, old, adv, mask, dual_clip=None, max_len=None, kl_clamp=None,
                          kl_bias_correction=False)
    assert plain == off


def test_verl_default_loss_by_hand():
    """One token with A = -1 and ratio 5: dual-clip c = 3 caps its loss at 3, token-mean."""
    logp, old = np.log([[5.0, 1.0]]), np.zeros((1, 2))        # ratios 5 and 1
    loss, _ = gl.grpo_loss(logp, old, None, np.array([-1.0]), np.ones((1, 2)), beta=0.0,
                           agg="dapo", dual_clip=3.0)
    assert float(loss) == pytest.approx((3.0 + 1.0) / 2)      # without dual-clip: (5 + 1) / 2


def test_trl_bias_corrected_kl_by_hand():
    logp, old, ref = np.log([[0.6]]), np.log([[0.3]]), np.log([[0.3]])   # ratio 2, d = log 2
    k3 = 0.5 + np.log(2) - 1
    loss, diag = gl.grpo_loss(logp, old, ref, np.array([0.0]), np.ones((1, 1)), beta=1.0,
                              kl_bias_correction=True)
    assert float(loss) == pytest.approx(2 * k3) and diag["mean_kl"] == pytest.approx(2 * k3)


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

# --- grpo_diagnostics ----------------------------------------------------------------------------

@given(masked_batches(), st.sampled_from(gl.LEVELS), st.floats(0, 0.5))
def test_grpo_loss_logs_grpo_diagnostics_of_its_own_ratio(batch, level, shift):
    logp, old, adv, mask = batch
    ref = old - shift
    _, diag = gl.grpo_loss(logp, old, ref, adv[:, 0], mask, level=level, eps_high=0.28)
    if level == "token":
        ratio = np.exp(gl.log_ratio(logp, old, clamp=gl.MAX_LOG_RATIO))   # (N, T)
    else:
        ratio = gl.sequence_ratio(logp, old, mask)[:, None]                # (N, 1)
    expected = gl.grpo_diagnostics(logp, old, ratio, adv[:, :1], mask, eps_high=0.28,
                                   per_token_kl=gl.kl_k3(logp, ref))
    assert diag == expected


def test_grpo_diagnostics_by_hand_with_one_ratio_per_sequence():
    # two sequences: s = 1.5 (A = +1, above 1.2: clipped high) over 2 tokens, s = 0.5 (A = -1,
    # below 0.8: clipped low) over 1 valid token of 3
    logp, old = np.zeros((2, 3)), np.zeros((2, 3))
    ratio, adv = np.array([[1.5], [0.5]]), np.array([[1.0], [-1.0]])
    mask = [[1, 1, 0], [1, 0, 0]]
    d = gl.grpo_diagnostics(logp, old, ratio, adv, mask)
    assert d["clip_frac_high"] == pytest.approx(2 / 3) and d["clip_frac_low"] == pytest.approx(1 / 3)
    assert d["clip_frac"] == 1.0 and d["mean_ratio"] == pytest.approx((1.5 * 2 + 0.5) / 3)
    assert d["mean_kl"] is None and d["approx_kl"] == 0.0          # logp == old_logp


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"ratio": np.ones((2,))}, ValueError,
     r"ratio: expected shape \(2, 3\) \(one per token\) or \(2, 1\) \(one per sequence"),
    ({"adv": np.ones(2)}, ValueError, r"adv: expected shape \(2, 3\) \(one per token\) or \(2, 1\)"),
    ({"mask": [[1, 1, 1], [0, 0, 0]]}, ValueError, r"mask: expected at least one valid token"),
    ({"per_token_kl": np.zeros((2, 2))}, ValueError, r"per_token_kl: expected shape \(2, 3\)"),
    ({"ratio": np.full((2, 3), np.nan)}, ValueError, r"ratio: expected finite values"),
    ({"eps_low": -1.0}, ValueError, r"eps_low: expected a number >= 0.0"),
])
def test_grpo_diagnostics_bad_input(kwargs, exc, message):
    args = {"logp": LOGP, "old_logp": LOGP, "ratio": np.ones((2, 3)), "adv": np.ones((2, 1)),
            "mask": MASK} | kwargs
    with pytest.raises(exc, match=message):
        gl.grpo_diagnostics(args.pop("logp"), args.pop("old_logp"), args.pop("ratio"),
                            args.pop("adv"), args.pop("mask"), **args)


# --- bad input -------------------------------------------------------------------------------

LOGP = np.full((2, 3), -1.0)
MASK = np.ones((2, 3))


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"ref_logp": None}, ValueError,
     r"ref_logp: expected an \(N, T\) array of reference log-probs when beta = 0.04 > 0, got None"),
    ({"ref_logp": np.zeros((2, 4))}, ValueError, r"ref_logp: expected shape \(2, 3\) \(the shape of logp"),
    ({"beta": -0.1}, ValueError, r"beta: expected a number >= 0.0, got -0.1"),
    ({"kl": "k4"}, ValueError, r"kl: expected one of 'k1', 'k2', 'k3', 'k3\+', got 'k4'"),
    ({"agg": "sum"}, ValueError, r"agg: expected one of 'grpo', 'bnpo', 'dapo', 'dr_grpo', got 'sum'"),
    ({"level": "tokens"}, ValueError, r"level: expected one of 'token', 'sequence', got 'tokens'"),
    ({"eps_low": -0.2}, ValueError, r"eps_low: expected a number >= 0.0, got -0.2"),
    ({"mask": MASK[:, :2]}, ValueError, r"mask: expected shape \(2, 3\) \(the shape of logp; nothing is broadcast\)"),
    ({"mask": [[1, 1, 1], [0, 0, 0]]}, ValueError, r"mask: expected at least one valid token in every sequence"),
    ({"adv": np.zeros((3,))}, ValueError, r"adv: expected shape \(2,\) \(one advantage per sequence\)"),
    ({"adv": np.zeros((3, 2))}, ValueError, r"adv: expected shape \(2,\)"),
    ({"logp": LOGP[None]}, ValueError, r"logp: expected a 2-D array"),
    ({"old_logp": LOGP.T}, ValueError, r"old_logp: expected shape \(2, 3\)"),
    ({"dual_clip": 1.0}, ValueError, r"dual_clip: expected a number > 1.0, got 1.0"),
    ({"max_len": 5}, ValueError, r"max_len: expected None with mode 'grpo'"),
    ({"max_len": 2, "agg": "dr_grpo"}, ValueError, r"max_len: expected an integer in \[3, inf\] \(at least T = 3"),
    ({"kl_clamp": 0}, ValueError, r"kl_clamp: expected a number > 0.0, got 0"),
    ({"kl_bias_correction": 1}, TypeError, r"kl_bias_correction: expected True or False, got int 1"),
])
def test_grpo_loss_bad_input(kwargs, exc, message):
    args = {"logp": LOGP, "old_logp": LOGP, "ref_logp": LOGP, "adv": np.zeros(2), "mask": MASK} | kwargs
    with pytest.raises(exc, match=message):
        gl.grpo_loss(args.pop("logp"), args.pop("old_logp"), args.pop("ref_logp"), args.pop("adv"),
                     args.pop("mask"), **args)
