"""Chapter 4's figures: each draws what it measured, and its title states the finding computed
from the same numbers (cancellation, long log-prob sums, training/inference mismatch)."""

import math

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.book import ch04


def naive_advantages(rewards, eps=1e-8):
    """Chapter 4's naive formula: everything in the rewards' dtype."""
    eps = np.asarray(eps, dtype=rewards.dtype)
    mean = rewards.mean(axis=-1, keepdims=True)                     # (B, 1)
    std = rewards.std(axis=-1, keepdims=True)                       # (B, 1)
    return (rewards - mean) / (std + eps)                           # (B, G)


# --- cancellation ---------------------------------------------------------------------------

def test_the_naive_error_grows_with_the_mean_and_the_package_stays_at_its_rounding():
    ratios = [1.0, 1e3, 1e6]
    naive, ours = ch04.cancellation_errors(naive_advantages, "float32", ratios, n_groups=64)
    u = gl.unit_roundoff("float32")
    assert naive[0] < 4 * u and naive[2] > 1e3 * naive[0]           # about u |mu| / sigma
    assert naive[2] == pytest.approx(u * 1e6, rel=0.9)
    assert np.all(ours < u)                                         # under one rounding


def test_the_package_against_itself_has_no_error_in_float64():
    naive, ours = ch04.cancellation_errors(gl.group_advantages, "float64", [1.0, 1e8],
                                           n_groups=16)
    np.testing.assert_array_equal(naive, ours)
    np.testing.assert_array_equal(ours, [0.0, 0.0])


def test_cancellation_figure_title_states_the_worst_errors_it_drew():
    fig = ch04.cancellation_figure(naive_advantages, n_groups=32, points=4)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2 * len(gl.DTYPES)                         # naive and dashed package
    worst_naive = max(np.nanmax(line.get_ydata()) for line in lines[0::2])
    worst_ours = max(np.nanmax(line.get_ydata()) / gl.unit_roundoff(name)
                     for line, name in zip(lines[1::2], gl.DTYPES))
    assert f"up to {100 * worst_naive:.0f}%" in ax.get_title()
    assert f"stays under {worst_ours:.1f} u" in ax.get_title()
    assert worst_naive > 0.01 and worst_ours < 1
    assert ax.get_xscale() == ax.get_yscale() == "log" and "sigma" in ax.get_xlabel()


def test_cancellation_needs_a_function():
    with pytest.raises(TypeError, match=r"naive: expected a function rewards \(B, G\)"):
        ch04.cancellation_errors("naive", "float32", [1.0])


# --- summing log-probs ----------------------------------------------------------------------

def chapter_logp(T):
    logp = -np.random.default_rng(0).exponential(2.5, size=(1, T))  # (1, T), the chapter's
    return logp, np.ones((1, T), dtype=bool)


def test_logprob_sum_errors_per_length():
    logp, mask = chapter_logp(1024)
    Ts, curves = ch04.logprob_sum_errors(logp, mask)
    np.testing.assert_array_equal(Ts, 2 ** np.arange(11))            # 1 ... 1024
    xbf = logp.astype(gl.as_dtype("bfloat16")).astype(np.float64)
    exact = math.fsum(xbf[0])
    rounded = abs(gl.round_trip([exact], "bfloat16")[0] - exact)
    assert curves["exact sum stored in bfloat16"][-1] == rounded
    assert curves["bfloat16, naive (NumPy)"][-1] > 10                # stalled: nats off
    assert curves["gl.sequence_logprob_sum (bfloat16 in)"][-1] < 1e-2
    assert all(c[0] == 0 for c in curves.values())                   # one token: exact


def test_logprob_sum_figure_title_states_the_stall_and_where_float16_overflows():
    logp, mask = chapter_logp(32_768)
    Ts, curves = ch04.logprob_sum_errors(logp, mask)
    T_inf = int(Ts[~np.isfinite(curves["float16, naive (NumPy pairwise)"])][0])
    title = ch04.logprob_sum_figure(logp, mask).axes[0].get_title()
    assert f"({curves['bfloat16, naive (NumPy)'][-1]:,.0f} nats off at T = 32768)" in title
    assert f"float16 is -inf from T = {T_inf}" in title
    short = ch04.logprob_sum_figure(*chapter_logp(64)).axes[0].get_title()
    assert "float16 stays finite" in short


def test_padding_is_left_out_of_the_sums():
    logp, mask = chapter_logp(8)
    mask[0, 4:] = False
    _, curves = ch04.logprob_sum_errors(logp, mask)
    _, unpadded = ch04.logprob_sum_errors(logp[:, :4], mask[:, :4])
    for label, errs in curves.items():
        np.testing.assert_array_equal(errs[:3], unpadded[label])


@pytest.mark.parametrize("logp, mask, exc, pattern", [
    (np.zeros((2, 8)), np.ones((2, 8)), ValueError, r"logp: expected shape \(1, T\)"),
    (np.zeros(8), np.ones(8), ValueError, r"logp: expected a 2-D array"),
    (np.zeros((1, 8)), np.ones((1, 4)), ValueError, r"mask: expected shape \(1, 8\)"),
])
def test_logprob_sum_rejects_bad_input_by_name(logp, mask, exc, pattern):
    with pytest.raises(exc, match=pattern):
        ch04.logprob_sum_errors(logp, mask)


# --- training/inference mismatch ------------------------------------------------------------

def mismatch(N=4, T=64):
    rng = np.random.default_rng(0)
    return {"float16": 1e-3 * rng.normal(size=(N, T)),               # (N, T) log-ratios
            "bfloat16": 8e-3 * rng.normal(size=(N, T)),
            "float32": 1e-7 * rng.normal(size=(N, T))}


def test_mismatch_figure_titles_state_the_ratio_and_the_weight_range():
    d = mismatch()
    fig = ch04.mismatch_figure(d)
    left, right = fig.axes
    times = np.abs(d["bfloat16"]).mean() / np.abs(d["float16"]).mean()
    assert left.get_title() == f"Per-token mismatch: bfloat16's is {times:.0f}x float16's"
    weight = np.exp(d["bfloat16"].sum(axis=1))                       # (N,) pi/mu
    assert f"ends in [{weight.min():.2f}, {weight.max():.2f}] after 64 tokens" in right.get_title()
    assert len(left.patches) == 3                                    # one step histogram each
    assert len(right.get_lines()) == 2 * (4 + 1) + 1                 # 4 walks + a legend entry, x2; 0
    walk = right.get_lines()[0].get_ydata()
    np.testing.assert_allclose(walk, np.cumsum(d["bfloat16"][0]))    # the first bfloat16 walk


def test_mismatch_figure_rejects_bad_input_by_name():
    with pytest.raises(TypeError, match=r"log_ratio: expected a dict"):
        ch04.mismatch_figure([1.0])
    with pytest.raises(ValueError, match=r"log_ratio: expected .* got the keys \['float32'\]"):
        ch04.mismatch_figure({"float32": np.zeros((2, 3))})
    with pytest.raises(ValueError, match=r"log_ratio\['float16'\]: expected a 2-D array"):
        ch04.mismatch_figure({"float16": np.zeros(3), "bfloat16": np.zeros((2, 3))})


def test_each_figure_redraws_into_the_figure_it_is_given():
    fig = ch04.mismatch_figure(mismatch())
    assert ch04.logprob_sum_figure(*chapter_logp(16), fig=fig) is fig and len(fig.axes) == 1
    assert ch04.cancellation_figure(naive_advantages, n_groups=8, points=2, fig=fig) is fig
    assert len(fig.axes) == 1
