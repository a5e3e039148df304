"""Rewards: worked numbers, combining, DAPO's overlong shaping, every bad argument, and each
function's shape (one check, then the rule). Reading the answer out of the text:
test_parsing.py; text written to break the rewards: test_hostile_completions.py."""

import ast
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import grpo_lab as gl
from grpo_lab.rl import rewards as R

def good(answer, think="reasoning"):
    return f"<think>{think}</think><answer>{answer}</answer>"


# --- accuracy: worked numbers ---------------------------------------------------------------

def test_accuracy_is_one_for_the_reference_and_zero_for_another_answer():
    assert gl.accuracy_reward(good(12), 12) == 1.0
    assert gl.accuracy_reward(good(13), 12) == 0.0
    assert gl.accuracy_reward(good(-7), "-7") == 1.0
    assert gl.accuracy_reward(good(" 12 \n"), 12) == 1.0            # whitespace is not content


def test_accuracy_numeric_compares_values_not_strings():
    assert gl.accuracy_reward(good("12.0"), 12) == 1.0
    assert gl.accuracy_reward(good("+12"), 12) == 1.0
    assert gl.accuracy_reward(good("0012"), 12) == 1.0
    assert gl.accuracy_reward(good("0.3"), 0.1 + 0.2) == 0.0            # 0.30000000000000004
    assert gl.accuracy_reward(good("0.3"), 0.1 + 0.2, rel_tol=1e-12) == 1.0
    assert gl.accuracy_reward(good("0.3"), "0.3") == 1.0                 # exact decimals
    big = "9" * 60
    assert gl.accuracy_reward(good(big), big) == 1.0
    assert gl.accuracy_reward(good(big), "9" * 59 + "8") == 0.0          # no float rounding


@pytest.mark.parametrize("reference", [0.1, 1.1, 2.675, -0.1, 1e-7, np.float64(0.1),
                                       np.float32(0.1), np.float32(2.675), np.float16(0.1)])
def test_a_float_reference_means_the_decimal_it_is_written_as(reference):
    """0.1 is stored as 0.1000000000000000055...; the task author meant 0.1. The reference is
    read as the shortest decimal that round-trips in its own precision, so the policy's
    "0.1" matches, and a neighbouring decimal does not."""
    written = np.format_float_positional(reference, unique=True, trim="-")
    assert written in ("0.1", "1.1", "2.675", "-0.1", "0.0000001")   # the decimal typed
    assert gl.accuracy_reward(good(written), reference) == 1.0
    assert gl.accuracy_reward(good(written + "1"), reference) == 0.0
    assert R.reference_number(reference) == R.parse_number(written)


def test_a_float_reference_is_not_its_binary_value():
    from fractions import Fraction

    assert Fraction(0.1) != Fraction(1, 10)                       # why the old way failed
    assert R.reference_number(0.1) == Fraction(1, 10)
    assert R.reference_number(np.float32(0.1)) == Fraction(1, 10)   # not 0.10000000149...
    assert gl.accuracy_reward(good("0.10000000149011612"), np.float32(0.1)) == 0.0


def test_max_chars_is_a_work_bound_far_above_any_generation_limit():
    """DAPO's L_max = 20480 tokens is about 80k characters: a right answer that long is read
    and scored under the default bound; a bound of 16384 would score it 0 without reading."""
    long_right = good(12, think="x" * (4 * 20480))
    assert len(long_right) > 80_000 and R.MAX_CHARS >= 10 * len(long_right)
    assert gl.accuracy_reward(long_right, 12) == 1.0 and gl.format_reward(long_right) == 1.0
    assert gl.accuracy_reward(long_right, 12, max_chars=16384) == 0.0   # the cliff, explicit
    assert gl.accuracy_reward("x" * (R.MAX_CHARS + 1), 12) == 0.0


def test_accuracy_exact_compares_stripped_text():
    assert gl.accuracy_reward(good("Paris"), "Paris", compare="exact") == 1.0
    assert gl.accuracy_reward(good("paris"), "Paris", compare="exact") == 0.0
    assert gl.accuracy_reward(good("12.0"), "12", compare="exact") == 0.0


def test_accuracy_needs_exactly_one_answer_tag():
    assert gl.accuracy_reward("12", 12) == 0.0
    assert gl.accuracy_reward("<answer>12</answer>", 12) == 1.0          # format is not its job
    assert gl.accuracy_reward("<answer>1</answer><answer>12</answer>", 12) == 0.0
    assert gl.accuracy_reward("<answer>12", 12) == 0.0
    assert gl.accuracy_reward("</answer>12<answer>", 12) == 0.0


# --- format ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    good(12),
    "<think></think><answer>12</answer>",
    "  <think>a\nb</think>\n\n<answer>\n12\n</answer>\n",
])
def test_format_accepts_the_r1_format(text):
    assert gl.format_reward(text) == 1.0


@pytest.mark.parametrize("text", [
    "",
    "12",
    "<answer>12</answer>",                                    # no think
    "<think>x</think>",                                       # no answer
    "<think>x</think><answer></answer>",                      # empty answer
    "<think>x</think><answer>  </answer>",
    "<answer>12</answer><think>x</think>",                    # wrong order
    "<think>x</think>so<answer>12</answer>",                  # text between
    "preamble<think>x</think><answer>12</answer>",            # text before
    "<think>x</think><answer>12</answer>and more",            # text after
    "<think><think>x</think></think><answer>12</answer>",     # nested think
    "<think>x</think><answer><answer>12</answer></answer>",   # nested answer
    "<think>x<answer>1</answer></think><answer>12</answer>",  # answer inside think
    "<think>x</think><answer>12</answer></answer>",           # unbalanced
    "<think>x</think></think><answer>12</answer>",
    "<think>x</answer><answer>12</think>",                    # crossed
    "<THINK>x</THINK><ANSWER>12</ANSWER>",                    # tags are case-sensitive
])
def test_format_rejects_everything_else(text):
    assert gl.format_reward(text) == 0.0


@given(st.integers(min_value=-10**40, max_value=10**40), st.text(max_size=50))
def test_the_right_integer_is_right_and_its_neighbour_is_not(n, think):
    think = "".join(c for c in think if c not in "<>")         # no stray tags in the thinking
    assert gl.accuracy_reward(good(n, think), n) == 1.0
    assert gl.accuracy_reward(good(n + 1, think), n) == 0.0
    assert gl.format_reward(good(n, think)) == 1.0


def test_contains_reward_is_fooled_by_a_string_of_digits_and_accuracy_is_not():
    hack = "<think></think><answer>1213141516</answer>"
    assert [R.contains_reward(hack, k) for k in (12, 13, 14, 15, 16)] == [1.0] * 5
    assert [gl.accuracy_reward(hack, k) for k in (12, 13, 14, 15, 16)] == [0.0] * 5
    assert R.contains_reward(good(7), 8) == 0.0


# --- DAPO overlong shaping ---------------------------------------------------------------------

def test_overlong_penalty_ramps_from_zero_to_minus_one_over_the_cache():
    out = gl.overlong_penalty([0, 16, 17, 18, 19, 20, 21, 500], max_len=20, cache_len=4)
    np.testing.assert_allclose(out, [0, 0, -0.25, -0.5, -0.75, -1, -1, -1], rtol=0, atol=1e-15)
    assert out.dtype == np.float64
    full = gl.overlong_penalty(np.arange(11), max_len=10, cache_len=10)   # ramp from 0
    np.testing.assert_allclose(full, -np.arange(11) / 10, atol=1e-15)
    assert gl.overlong_penalty(np.array([[3, 9]]), max_len=10, cache_len=2).shape == (1, 2)


def test_overlong_penalty_is_monotone_and_bounded():
    lengths = np.arange(0, 300)
    out = gl.overlong_penalty(lengths, max_len=200, cache_len=50)
    assert np.all(np.diff(out) <= 0) and out.max() == 0 and out.min() == -1
    assert np.all(out[lengths <= 150] == 0) and np.all(out[lengths > 200] == -1)


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(lengths=[1.5], max_len=10, cache_len=2), TypeError, "lengths: expected integer"),
    (dict(lengths=[-1], max_len=10, cache_len=2), ValueError, "lengths: expected lengths >= 0"),
    (dict(lengths=["3"], max_len=10, cache_len=2), TypeError, "lengths:"),
    (dict(lengths=[3], max_len=10, cache_len=11), ValueError, "cache_len: expected an integer in [1, 10]"),
    (dict(lengths=[3], max_len=10, cache_len=0), ValueError, "cache_len:"),
    (dict(lengths=[3], max_len=0, cache_len=1), ValueError, "max_len:"),
    (dict(lengths=[3], max_len=10.0, cache_len=2), TypeError, "max_len: expected an integer"),
])
def test_overlong_penalty_error_names_the_bad_argument(kwargs, exc, words):
    with pytest.raises(exc) as info:
        gl.overlong_penalty(**kwargs)
    assert words in str(info.value)


# --- combining ---------------------------------------------------------------------------------

ACC = [[1, 0, 0, 1], [0, 0, 0, 0]]
FMT = [[1, 1, 0, 1], [1, 0, 1, 1]]


def test_weighted_sum_adds_each_completions_weighted_rewards():
    out = gl.weighted_sum([ACC, FMT], [1.0, 0.5])
    np.testing.assert_array_equal(out, [[1.5, 0.5, 0.0, 1.5], [0.5, 0.0, 0.5, 0.5]])
    np.testing.assert_array_equal(gl.weighted_sum([ACC], [1]), np.array(ACC, dtype=float))


def test_normalise_then_sum_is_the_sum_of_group_advantages_then_batch_normalised():
    r = np.array([ACC, FMT], dtype=float)                                  # (K=2, B=2, G=4)
    summed = gl.normalise_then_sum(r, [2.0, 0.5], batch=False)
    expected = 2.0 * gl.group_advantages(r[0]) + 0.5 * gl.group_advantages(r[1])
    np.testing.assert_allclose(summed, expected, rtol=1e-15)
    assert np.all(summed[1] == 0.5 * gl.group_advantages(r[1])[1])  # all-equal accuracy adds 0
    np.testing.assert_allclose(summed.sum(axis=1), 0.0, atol=1e-12)  # each group centred
    out = gl.normalise_then_sum(r, [2.0, 0.5])                       # batch=True, the default
    by_hand = (summed - summed.mean()) / (summed.std() + 1e-8)       # over all B*G = 8
    np.testing.assert_allclose(out, by_hand, rtol=1e-12)
    assert abs(out.mean()) < 1e-12 and abs(out.std() - 1) < 1e-7


def test_normalise_then_sum_reproduces_trls_normalize_then_sum():
    """TRL's GRPOTrainer, multi_objective_aggregation="normalize_then_sum"
    (trl/trainer/grpo_trainer.py, lines 2710-2720 at f2cd577), written out here in NumPy:
    per reward, (r - group mean) / (group std + 1e-4) with Bessel's std (TRL's nanstd); the
    weighted sum; then (s - batch mean) / (batch std + 1e-4), Bessel's again. Chapter 5
    ("Combining rewards") says that eps=1e-4, ddof=1 gives TRL's numbers exactly: this backs it."""
    rng = np.random.default_rng(3)
    r = np.stack([rng.integers(0, 2, size=(6, 8)), rng.normal(size=(6, 8)),
                  rng.integers(0, 2, size=(6, 8))]).astype(float)      # (K=3, B=6, G=8)
    r[0, 2] = 1.0                                                      # an all-equal group
    w = np.array([1.0, 0.3, 0.5])
    per_k = (r - r.mean(axis=2, keepdims=True)) / (r.std(axis=2, ddof=1, keepdims=True) + 1e-4)
    s = np.einsum("k,kbg->bg", w, per_k)
    trl = (s - s.mean()) / (s.std(ddof=1) + 1e-4)
    np.testing.assert_allclose(gl.normalise_then_sum(r, w, eps=1e-4, ddof=1), trl, rtol=1e-12)


def test_normalise_then_sum_batch_must_be_a_bool():
    with pytest.raises(TypeError, match="batch: expected True or False, got str"):
        gl.normalise_then_sum([ACC, FMT], [1.0, 1.0], batch="yes")


def test_normalise_then_sum_ignores_a_rewards_scale_and_weighted_sum_does_not():
    rng = np.random.default_rng(0)
    acc = rng.integers(0, 2, size=(50, 8)).astype(float)
    length = rng.normal(size=(50, 8))
    for scale in (1e-3, 1.0, 1e3):
        np.testing.assert_allclose(gl.normalise_then_sum([acc, scale * length], [1, 1], eps=0),
                                   gl.normalise_then_sum([acc, length], [1, 1], eps=0),
                                   rtol=1e-10, atol=1e-12)
    big = gl.group_advantages(gl.weighted_sum([acc, 1e3 * length], [1, 1]))
    # with a wide second reward, the plain sum ranks by it alone: accuracy barely matters
    by_length = gl.group_advantages(length)
    assert np.corrcoef(big.ravel(), by_length.ravel())[0, 1] > 0.999
    fair = gl.normalise_then_sum([acc, 1e3 * length], [1, 1])
    assert np.corrcoef(fair.ravel(), by_length.ravel())[0, 1] < 0.9


def test_normalise_then_sum_error_names_a_bad_eps():
    with pytest.raises(ValueError, match=r"eps: expected a number >= 0.0, got -1.0"):
        gl.normalise_then_sum([ACC, FMT], [1.0, 1.0], eps=-1.0)
    with pytest.raises(TypeError, match="eps: expected a real number"):
        gl.normalise_then_sum([ACC, FMT], [1.0, 1.0], eps="tiny")


@pytest.mark.parametrize("fn", [gl.weighted_sum, gl.normalise_then_sum])
@pytest.mark.parametrize("rewards, weights, exc, words", [
    ([ACC, FMT], [1.0], ValueError, "weights: expected one weight per reward function, K = 2"),
    ([ACC, FMT], [1.0, 1.0, 1.0], ValueError, "got 3"),
    ([ACC, FMT], [[1.0, 1.0]], ValueError, "weights: expected a 1-D array"),
    (ACC, [1.0, 1.0], ValueError, "rewards: expected a 3-D array of shape (K, B, G)"),
    ([ACC, FMT], [1.0, np.nan], ValueError, "weights: expected finite values"),
    ([ACC, [[1, 0, np.inf, 1], [1, 0, 1, 1]]], [1, 1], ValueError, "rewards: expected finite"),
    ([ACC, FMT], ["1", "2"], TypeError, "weights: expected a real numeric dtype"),
    (None, [1.0], TypeError, "rewards: expected a numeric array"),
])
def test_combining_error_names_the_bad_argument(fn, rewards, weights, exc, words):
    with pytest.raises(exc) as info:
        fn(rewards, weights)
    assert words in str(info.value)


# --- bad arguments (the caller's mistakes, not the model's) ------------------------------------

@pytest.mark.parametrize("call, exc, words", [
    (lambda: gl.accuracy_reward(b"<answer>1</answer>", 1), TypeError,
     "completion: expected a str (the policy's decoded text), got bytes"),
    (lambda: gl.accuracy_reward(None, 1), TypeError, "completion: expected a str"),
    (lambda: gl.format_reward(["<think>"]), TypeError, "completion: expected a str"),
    (lambda: gl.accuracy_reward(good(1), True), TypeError, "answer: expected a number"),
    (lambda: gl.accuracy_reward(good(1), None), TypeError, "answer: expected a number"),
    (lambda: gl.accuracy_reward(good(1), "one"), ValueError,
     "answer: expected an ASCII decimal such as '42' or '-1.5' for compare='numeric', got 'one'"),
    (lambda: gl.accuracy_reward(good(1), float("nan")), ValueError,
     "answer: expected a finite number"),
    (lambda: gl.accuracy_reward(good(1), 1, compare="fuzzy"), ValueError,
     "compare: expected one of 'numeric', 'exact', got 'fuzzy'"),
    (lambda: gl.accuracy_reward(good(1), 1, compare="exact"), TypeError,
     "answer: expected a str for compare='exact', got int 1"),
    (lambda: gl.accuracy_reward(good(1), 1, rel_tol=-0.1), ValueError, "rel_tol:"),
    (lambda: gl.accuracy_reward(good(1), 1, max_chars=0), ValueError, "max_chars:"),
    (lambda: gl.format_reward(good(1), max_chars=1.5), TypeError, "max_chars: expected an integer"),
    (lambda: R.contains_reward(good(1), 1.0), TypeError, "answer: expected an int or a str"),
    (lambda: R.parse_number(12), TypeError, "text: expected a str"),
])
def test_reward_error_names_the_callers_bad_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


# --- each public function: one check, then the rule ----------------------------------------------

PUBLIC = ["extract_answer", "parse_number", "accuracy_reward", "format_reward",
          "contains_reward", "overlong_penalty", "weighted_sum", "normalise_then_sum"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_function_is_one_check_then_the_rule_with_no_private_name(name):
    """What chapter 5 shows: the first statement validates in one check_* call, the rest is
    the rule in about 15 lines, and no private name appears (a chapter never shows one)."""
    import inspect

    func = getattr(R, name)
    tree = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    body = tree.body[1:]                                       # after the docstring
    first = body[0]
    assert isinstance(first, ast.Assign) and isinstance(first.value, ast.Call)
    assert first.value.func.id.startswith("check_"), ast.unparse(first)
    assert not any(isinstance(n, ast.Call) and getattr(n.func, "id", "").startswith("check_")
                   for stmt in body[1:] for n in ast.walk(stmt)), name
    code_lines = body[-1].end_lineno - body[0].lineno + 1
    assert code_lines <= 15, (name, code_lines)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not [n for n in names if n.startswith("_")], name


def test_the_names_chapters_use_stay_on_gl_rewards():
    for name in ("extract_answer", "parse_number", "contains_reward", "ANSWER", "TAGS", "THINK",
                 "MAX_CHARS", "MAX_NUMBER_CHARS", "accuracy_reward", "format_reward"):
        assert hasattr(gl.rewards, name), name
    assert gl.rewards.TAGS == gl.rewards.THINK + gl.rewards.ANSWER
    for name in ("accuracy_reward", "format_reward", "overlong_penalty", "weighted_sum",
                 "normalise_then_sum"):
        assert getattr(gl, name) is getattr(gl.rewards, name)


# --- issue 24: invisible characters are blank ----------------------------------------------------

INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e"]
SPACES = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2003", "\u3000"]


@pytest.mark.parametrize("blank", INVISIBLE + SPACES + ["\u200b \ufeff\n"],
                         ids=lambda s: "-".join(f"U+{ord(c):04X}" for c in s))
def test_an_answer_of_invisible_or_space_characters_is_empty(blank):
    """Before: a zero-width space as the whole answer counted as an answer (1.0)."""
    assert gl.format_reward(good(blank)) == 0.0
    assert gl.format_reward(good(f"{blank}12{blank}")) == 1.0      # around an answer: fine


@pytest.mark.parametrize("blank", INVISIBLE, ids=lambda s: f"U+{ord(s):04X}")
def test_invisible_characters_outside_the_tags_are_text_not_whitespace(blank):
    """Issue 37's regression: a byte-order mark before <think> and a zero-width space between
    the blocks scored 1.0 once outside the tags blank meant Cf too; refused again, as before
    (Python's str.strip() and the chapter's "only whitespace outside them")."""
    assert gl.format_reward(f"{blank}<think>x</think><answer>12</answer>") == 0.0    # before
    assert gl.format_reward(f"<think>x</think>{blank}<answer>12</answer>") == 0.0    # between
    assert gl.format_reward(f"<think>x</think><answer>12</answer>{blank}") == 0.0    # after
    assert gl.format_reward(f"<think>x</think>{blank}so<answer>12</answer>") == 0.0  # text
    assert gl.format_reward(good(12, think=blank)) == 1.0           # the thinking may be empty
    assert gl.format_reward(good(f"{blank}12")) == 1.0              # inside the answer: fine


def test_the_two_cases_of_the_probe_and_their_whitespace_twins():
    assert gl.format_reward("\ufeff<think>7+5</think><answer>12</answer>") == 0.0
    assert gl.format_reward("<think>7+5</think>\u200b<answer>12</answer>") == 0.0
    assert gl.format_reward(" \n<think>7+5</think>\n\t<answer>12</answer>\n") == 1.0
    assert gl.format_reward("\u3000<think>7+5</think>\xa0<answer>12</answer>") == 1.0  # spaces


@given(st.text(max_size=30))
def test_blank_is_whitespace_or_an_invisible_format_character(text):
    import unicodedata
    want = all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)
    assert R.is_blank(text) == want
    assert R.strip_blank(text) == "" if want else R.strip_blank(text)[0] not in " \u200b"
