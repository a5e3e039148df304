"""Reading a completion (chapter 5): the one answer tag, ASCII decimals only, the caller's
reference answer, and the checks on the caller's arguments. The rewards: test_rewards.py."""

from fractions import Fraction

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.rl import parsing as P
from grpo_lab.rl import rewards as R


def good(answer, think="reasoning"):
    return f"<think>{think}</think><answer>{answer}</answer>"


def test_extract_answer_strips_the_one_answer_and_finds_none_without_tags():
    assert R.extract_answer(good(" 42 ")) == "42"
    assert R.extract_answer("no tags") is None


def test_parse_number_reads_only_ascii_decimals_up_to_max_number_chars():
    assert R.parse_number("-12.50") == Fraction(-25, 2)
    assert R.parse_number("007") == 7
    for text in ["", "-", "+", ".5", "5.", "1e3", "1E3", "0x1f", "1_000", "nan", "inf", "-inf",
                 "1.2.3", "١٢", "１２", "²", "१२", " 12", "12 ", "1\x002", "--1"]:
        assert R.parse_number(text) is None, repr(text)
    assert R.parse_number("1" * R.MAX_NUMBER_CHARS) is not None
    assert R.parse_number("1" * (R.MAX_NUMBER_CHARS + 1)) is None


def test_extract_answer_does_not_read_past_max_chars():
    text = good(12, think="x" * 100)
    assert R.extract_answer(text, max_chars=len(text)) == "12"
    assert R.extract_answer(text, max_chars=len(text) - 1) is None


def test_rewards_reexports_the_parsing_names():
    for name in ("extract_answer", "parse_number", "reference_number", "ANSWER", "THINK",
                 "TAGS", "MAX_CHARS", "MAX_NUMBER_CHARS"):
        assert getattr(R, name) is getattr(P, name), name
    assert gl.rewards.extract_answer is P.extract_answer


@pytest.mark.parametrize("answer, value", [
    (12, Fraction(12)), (np.int64(-3), Fraction(-3)), (0.5, Fraction(1, 2)),
    (" -1.50 ", Fraction(-3, 2)), ("0012", Fraction(12)), ("9" * 60, Fraction(int("9" * 60))),
])
def test_reference_number_is_the_exact_value_of_the_callers_answer(answer, value):
    assert P.reference_number(answer) == value


@pytest.mark.parametrize("call, exc, words", [
    (lambda: P.reference_number(True), TypeError, "answer: expected a number or a numeric str"),
    (lambda: P.reference_number([12]), TypeError, "answer: expected a number or a numeric str"),
    (lambda: P.reference_number(float("inf")), ValueError, "answer: expected a finite number"),
    (lambda: P.reference_number("1e3"), ValueError, "answer: expected an ASCII decimal"),
    (lambda: P.check_completion(b"x", 10), TypeError,
     "completion: expected a str (the policy's decoded text), got bytes"),
    (lambda: P.check_completion("x", 0), ValueError, "max_chars: expected an integer in [1, inf]"),
    (lambda: P.check_str("text", 3), TypeError, "text: expected a str, got int 3"),
    (lambda: P.extract_answer(None), TypeError, "completion: expected a str"),
    (lambda: P.extract_answer("x", max_chars=2.0), TypeError, "max_chars: expected an integer"),
])
def test_parsing_error_names_the_callers_bad_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)
