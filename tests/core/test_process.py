"""process_advantages and steps_to_tokens: DeepSeekMath's process supervision (chapter 8).

Hand-worked numbers first, then properties (hypothesis, >= 200 examples each, see conftest),
then every kind of bad input.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl

# --- worked numbers ---------------------------------------------------------------------------


def test_two_completions_two_steps_by_hand():
    # R = {1, 1, 1, 0}: mean 3/4, population std sqrt(3)/4.
    std = np.sqrt(3) / 4
    good, bad = 0.25 / std, -0.75 / std                      # 0.5774, -1.7321
    adv = gl.process_advantages([[[1, 1], [1, 0]]], np.ones((1, 2, 2)), eps=0.0)
    np.testing.assert_allclose(adv, [[[good + good, good], [good + bad, bad]]], rtol=1e-14)


def test_ragged_steps_by_hand():
    # Completion 0 has two steps (1, 1), completion 1 one step (0): R = {1, 1, 0},
    # mean 2/3, std sqrt(2)/3, so a 1 is worth 1/sqrt(2) and the 0 is worth -sqrt(2).
    adv = gl.process_advantages([[[1, 1, 7], [0, 5, 5]]], [[[1, 1, 0], [1, 0, 0]]], eps=0.0)
    half = 1 / np.sqrt(2)
    np.testing.assert_allclose(adv, [[[2 * half, half, 0.0], [-np.sqrt(2), 0.0, 0.0]]],
                               rtol=1e-14)


def test_bessel_std_by_hand():
    # Same R = {1, 1, 1, 0}; Bessel std is sqrt(1/4) = 0.5, so a good step is worth 0.5.
    adv = gl.process_advantages([[[1, 1], [1, 0]]], np.ones((1, 2, 2)), eps=0.0, ddof=1)
    np.testing.assert_allclose(adv, [[[1.0, 0.5], [-1.0, -1.5]]], rtol=1e-14)


def test_groups_are_normalised_separately():
    one = gl.process_advantages([[[1, 0], [0, 0]]], np.ones((1, 2, 2)))
    other = gl.process_advantages([[[5, 9], [3, 4]]], np.ones((1, 2, 2)))
    both = gl.process_advantages([[[1, 0], [0, 0]], [[5, 9], [3, 4]]], np.ones((2, 2, 2)))
    np.testing.assert_array_equal(both, np.concatenate([one, other]))


def test_all_equal_group_gives_exact_zeros():
    same = np.full((1, 3, 2), 699051.00118143)   # a value whose mean is off by one rounding
    assert np.array_equal(gl.process_advantages(same, np.ones((1, 3, 2))), np.zeros((1, 3, 2)))


def test_dtypes_and_input_untouched():
    r32 = np.array([[[0.5, 1.0], [0.0, 0.25]]], dtype=np.float32)
    keep = r32.copy()
    out = gl.process_advantages(r32, np.ones((1, 2, 2), dtype=bool))
    assert out.dtype == np.float32 and np.array_equal(r32, keep)
    assert gl.process_advantages([[[1, 0], [0, 1]]], np.ones((1, 2, 2))).dtype == np.float64


def test_steps_to_tokens_by_hand():
    values, mask = gl.steps_to_tokens([[[2.0, -1.0], [0.5, 0.0]]], [[[1, 3], [2, 0]]], max_len=5)
    np.testing.assert_array_equal(values, [[2, -1, -1, -1, 0], [0.5, 0.5, 0, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    assert mask.dtype == bool


def test_steps_to_tokens_rows_follow_group_advantages_order():
    # Row b*G + i is completion i of prompt b, as in group_advantages(...).ravel().
    step_values = np.arange(12.0).reshape(2, 3, 2)           # (B=2, G=3, K=2)
    values, _ = gl.steps_to_tokens(step_values, np.ones((2, 3, 2), dtype=int))
    np.testing.assert_array_equal(values, step_values.reshape(6, 2))


def test_token_advantages_of_a_worked_group():
    # Steps of 2 and 1 tokens: the first step's two tokens share its advantage.
    adv = gl.process_advantages([[[1, 1], [1, 0]]], np.ones((1, 2, 2)), eps=0.0)
    values, mask = gl.steps_to_tokens(adv, [[[2, 1], [1, 1]]])
    np.testing.assert_allclose(values[0], [adv[0, 0, 0], adv[0, 0, 0], adv[0, 0, 1]])
    np.testing.assert_allclose(values[1], [adv[0, 1, 0], adv[0, 1, 1], 0.0])
    assert mask.sum() == 5


# --- properties -------------------------------------------------------------------------------

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def ragged_groups(draw, max_b=3, max_g=5, max_k=5):
    """(step_rewards, step_mask): B groups of G completions with 1..K steps each, a prefix mask."""
    B, G, K = draw(st.integers(1, max_b)), draw(st.integers(1, max_g)), draw(st.integers(1, max_k))
    r = draw(hnp.arrays(np.float64, (B, G, K), elements=finite))
    n_steps = draw(hnp.arrays(np.int64, (B, G), elements=st.integers(1, K)))
    mask = np.arange(K)[None, None, :] < n_steps[..., None]   # (B, G, K) prefix of 1s
    return r, mask


def _reference(r, mask, eps, ddof):
    """The formula, group by group, with plain NumPy (no shifts, no rescaling)."""
    out = np.zeros_like(r)
    for b in range(r.shape[0]):
        R = r[b][mask[b]]
        norm = np.where(mask[b], (r[b] - R.mean()) / (R.std(ddof=ddof) + eps), 0.0)
        for i in range(r.shape[1]):
            for j in range(r.shape[2]):
                if mask[b, i, j]:
                    out[b, i, j] = norm[i, j:].sum()
    return out


def _has_spread(r, mask):
    return all(np.ptp(r[b][mask[b]]) > 1e-3 * (1 + np.abs(r[b][mask[b]]).max())
               for b in range(r.shape[0]))


@given(ragged_groups())
def test_matches_the_plain_formula(case):
    r, mask = case
    if not _has_spread(r, mask):
        return  # an all-equal group is the exact-zero test's business
    for ddof in (0, 1):
        if mask.reshape(r.shape[0], -1).sum(axis=1).min() <= ddof:
            continue
        np.testing.assert_allclose(gl.process_advantages(r, mask, ddof=ddof),
                                   _reference(r, mask, 1e-8, ddof), rtol=1e-8, atol=1e-9)


@given(ragged_groups())
def test_normalised_rewards_sum_to_zero_per_group(case):
    # The first step's advantage is the sum of the completion's normalised rewards, and the
    # normalised rewards of a group sum to 0.
    r, mask = case
    adv = gl.process_advantages(r, mask)
    size = 1.0 + np.abs(adv).max()
    np.testing.assert_allclose(adv[:, :, 0].sum(axis=1), 0.0, atol=1e-9 * size * r.shape[1])


@given(ragged_groups())
def test_padding_is_zero_and_its_contents_do_not_matter(case):
    r, mask = case
    adv = gl.process_advantages(r, mask)
    assert np.all(adv[~mask] == 0.0)
    junk = np.where(mask, r, 12345.0)
    np.testing.assert_array_equal(gl.process_advantages(junk, mask), adv)
    wider_r = np.concatenate([r, np.full(r.shape[:2] + (2,), -7.0)], axis=-1)
    wider_m = np.concatenate([mask, np.zeros(mask.shape[:2] + (2,), dtype=bool)], axis=-1)
    # More columns change the order NumPy sums in, so equal up to rounding, not bit for bit.
    size = 1.0 + np.abs(adv).max()
    np.testing.assert_allclose(gl.process_advantages(wider_r, wider_m)[..., :r.shape[2]], adv,
                               rtol=1e-12, atol=1e-13 * size)


@given(ragged_groups(), st.randoms(use_true_random=False))
def test_equivariant_to_reordering_completions(case, rnd):
    r, mask = case
    perm = list(range(r.shape[1]))
    rnd.shuffle(perm)
    adv = gl.process_advantages(r, mask)
    size = 1.0 + np.abs(adv).max()
    np.testing.assert_allclose(gl.process_advantages(r[:, perm], mask[:, perm]), adv[:, perm],
                               rtol=1e-9, atol=1e-12 * size)


@given(ragged_groups(), st.floats(1e-2, 1e2), st.floats(-1e3, 1e3))
def test_invariant_to_positive_affine_maps(case, a, c):
    r, mask = case
    if not _has_spread(r, mask):
        return
    adv = gl.process_advantages(r, mask, eps=0.0)
    np.testing.assert_allclose(gl.process_advantages(a * r + c, mask, eps=0.0), adv,
                               rtol=1e-6, atol=1e-6)


@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 8)), elements=finite))
def test_one_step_per_completion_is_outcome_supervision(r):
    """Chapter 8 ("Process supervision") shows K = 1 equal to outcome supervision on one group;
    here on random groups, for both std conventions and two eps."""
    mask = np.ones(r.shape + (1,), dtype=bool)
    for ddof in (0, 1):
        for eps in (1e-8, 1e-4):
            np.testing.assert_allclose(
                gl.process_advantages(r[..., None], mask, eps=eps, ddof=ddof)[..., 0],
                gl.group_advantages(r, eps=eps, ddof=ddof), rtol=1e-12, atol=1e-12)


@given(ragged_groups(), st.data())
def test_steps_to_tokens_keeps_every_step_value_in_order(case, data):
    r, mask = case
    lengths = data.draw(hnp.arrays(np.int64, r.shape, elements=st.integers(1, 4))) * mask
    values, tok_mask = gl.steps_to_tokens(r, lengths)
    N = r.shape[0] * r.shape[1]
    assert values.shape == (N, lengths.reshape(N, -1).sum(axis=1).max())
    np.testing.assert_array_equal(tok_mask.sum(axis=1), lengths.reshape(N, -1).sum(axis=1))
    for row in range(N):
        expected = np.repeat(r.reshape(N, -1)[row], lengths.reshape(N, -1)[row])
        np.testing.assert_array_equal(values[row][tok_mask[row]], expected)
        assert np.all(values[row][~tok_mask[row]] == 0)


# --- bad input --------------------------------------------------------------------------------

ONES = np.ones((1, 2, 2))


@pytest.mark.parametrize("rewards, mask, kwargs, error, words", [
    ([[1, 0], [0, 1]], np.ones((2, 2)), {}, ValueError, "step_rewards: expected a 3-D array"),
    ("1, 0", ONES, {}, TypeError, "step_rewards: expected a numeric array"),
    ([[["a", "b"], ["c", "d"]]], ONES, {}, TypeError, "step_rewards: expected a real numeric"),
    ([[[1, np.nan], [0, 1]]], ONES, {}, ValueError, "step_rewards: expected finite values"),
    ([[[1, 0], [0, 1]]], np.ones((1, 2, 3)), {}, ValueError, "step_mask: expected shape (1, 2, 2)"),
    ([[[1, 0], [0, 1]]], [[[1, 0.5], [1, 1]]], {}, ValueError, "step_mask: expected only 0 and 1"),
    ([[[1, 0], [0, 1]]], [[[1, 1], [0, 0]]], {}, ValueError,
     "expected at least one step in every completion, got none for prompt 0, completion 1"),
    ([[[1, 0], [0, 1]]], [[[0, 1], [1, 1]]], {}, ValueError,
     "expected each completion's steps first and padding after"),
    ([[[1, 0], [0, 1]]], ONES, {"eps": -1e-8}, ValueError, "eps: expected a number >= 0"),
    ([[[1, 0], [0, 1]]], ONES, {"eps": "small"}, TypeError, "eps: expected a real number"),
    ([[[1, 0], [0, 1]]], ONES, {"ddof": 4}, ValueError, "ddof: expected an integer in [0, 3]"),
    ([[[1, 0], [0, 1]]], ONES, {"ddof": 0.5}, TypeError, "ddof: expected an integer"),
    ([[[1], [0]]], np.ones((1, 2, 1)), {"ddof": 2}, ValueError, "the smallest group has 2 step"),
])
def test_process_advantages_rejects_bad_input(rewards, mask, kwargs, error, words):
    with pytest.raises(error) as info:
        gl.process_advantages(rewards, mask, **kwargs)
    assert words in str(info.value)


@pytest.mark.parametrize("values, lengths, kwargs, error, words", [
    (np.ones((1, 2, 2)), np.ones((1, 2, 2)), {}, TypeError,
     "step_lengths: expected integer counts"),
    (np.ones((1, 2, 2)), "2", {}, TypeError, "step_lengths: expected an integer array"),
    (np.ones((1, 2, 2)), np.ones((1, 2, 3), dtype=int), {}, ValueError,
     "step_lengths: expected shape (1, 2, 2)"),
    (np.ones((1, 2, 2)), [[[1, -1], [1, 1]]], {}, ValueError,
     "step_lengths: expected counts >= 0, got -1 at index (0, 0, 1)"),
    (np.ones((1, 2, 2)), [[[1, 1], [0, 0]]], {}, ValueError,
     "expected at least one token in every completion, got 0 for completion 1 of prompt 0"),
    (np.ones((1, 2, 2)), [[[1, 3], [1, 1]]], {"max_len": 3}, ValueError,
     "max_len: expected an integer in [4, inf]"),
    (np.ones((2, 2)), np.ones((2, 2), dtype=int), {}, ValueError,
     "step_values: expected a 3-D array"),
])
def test_steps_to_tokens_rejects_bad_input(values, lengths, kwargs, error, words):
    with pytest.raises(error) as info:
        gl.steps_to_tokens(values, lengths, **kwargs)
    assert words in str(info.value)


# --- issue 24: step lengths whose sum wraps ------------------------------------------------------

@pytest.mark.parametrize("lengths, message", [
    # uint64 2**63 + 2**63 wrapped to 0 tokens ("at least one token ... got 0"), and 2**63 alone
    # to a negative int64 ("negative dimensions are not allowed")
    (np.array([[[2**63, 2**63]]], dtype=np.uint64),
     r"^step_lengths: expected counts below 2\*\*63, got 9223372036854775808 at index \(0, 0, 0\)"),
    (np.array([[[2**64 - 1, 1]]], dtype=np.uint64), r"got 18446744073709551615 at index"),
    # int64 2**62 + 2**62 wraps to -2**63
    (np.array([[[2**62, 2**62]]], dtype=np.int64),
     r"^step_lengths: expected fewer than 2\*\*62 tokens in a completion, got steps summing to "
     r"about 9.22e\+18 for completion 0 of prompt 0 \(row 0\)"),
])
def test_step_lengths_that_would_wrap_are_refused_by_name(lengths, message):
    with pytest.raises(ValueError, match=message):
        gl.steps_to_tokens([[[1.0, 2.0]]], lengths)


def test_small_uint64_step_lengths_are_read_as_counts():
    values, mask = gl.steps_to_tokens([[[2.0, -1.0]]], np.array([[[1, 2]]], dtype=np.uint64))
    np.testing.assert_array_equal(values, [[2.0, -1.0, -1.0]])
    assert mask.all()
