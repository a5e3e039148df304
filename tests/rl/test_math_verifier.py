r"""The math-verify verifier (gl.math_verifier): what it accepts beside chapter 5's strict
verifier, the plain \boxed{} extraction, its timeout (main thread only, and working there), and
every bad argument. Its cost per call is measured in chapter 6b, not asserted here."""

import threading
import time

import pytest

import grpo_lab as gl

MV = gl.math_verifier


# --- the plain extraction ------------------------------------------------------------------------

@pytest.mark.parametrize("text, boxed", [
    (r"\boxed{12}", "12"),
    (r"first \boxed{3}, then \boxed{ 4 }", "4"),                    # the last box, stripped
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),                        # nested braces
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),                            # escaped braces count too
    (r"\boxed{4", None),                                             # never closed
    ("no box here: 12", None),
    ("", None),
])
def test_last_boxed_reads_the_last_balanced_box(text, boxed):
    assert MV.last_boxed(text) == boxed


def test_last_boxed_does_not_read_past_max_chars():
    assert MV.last_boxed(r"\boxed{1}", max_chars=9) == "1"
    assert MV.last_boxed(r"\boxed{1}", max_chars=8) is None


# --- what each verifier accepts -------------------------------------------------------------------

@pytest.mark.parametrize("completion, answer, strict, math", [
    ("<think>x</think><answer>12</answer>", 12, 1.0, 0.0),      # math-verify cannot see the tag
    (r"so \boxed{12}", 12, 0.0, 1.0),
    (r"\boxed{\frac{1}{2}}", "0.5", 0.0, 1.0),
    (r"\boxed{\dfrac{2}{4}}", r"\frac{1}{2}", 0.0, 1.0),
    (r"\boxed{12.0}", 12, 0.0, 1.0),
    (r"\boxed{x = 3}", 3, 0.0, 1.0),                                # the assignment is unwrapped
    (r"\boxed{\sqrt{2}/2}", r"\frac{\sqrt{2}}{2}", 0.0, 1.0),
    (r"\boxed{0.5000001}", "0.5", 0.0, 1.0),                        # 6 decimals: a tolerance
    (r"\boxed{0.50001}", "0.5", 0.0, 0.0),
    (r"\boxed{3} or \boxed{4}", 4, 0.0, 0.0),                       # read as the set {3, 4}
    (r"\boxed{13}", 12, 0.0, 0.0),
    ("4 5 6 7 8 9 10 11 12", 12, 0.0, 1.0),                          # no box: the last number
    (r"\boxed{9**9}", 387420489, 0.0, 0.0),                          # not LaTeX, never evaluated
    ("\\boxed{\u0661\u0662}", 12, 0.0, 0.0),                         # Arabic-Indic digits
])
def test_each_verifier_accepts_what_the_chapter_table_says(completion, answer, strict, math):
    numeric = gl.rewards.parse_number(str(answer)) is not None     # else chapter 5's "exact"
    compare = "numeric" if numeric else "exact"
    assert gl.accuracy_reward(completion, str(answer), compare=compare) == strict
    assert MV.math_reward(completion, answer) == math


def test_a_box_wins_over_an_earlier_number_and_a_late_number_wins_without_a_box():
    assert MV.math_reward(r"I first thought 3. \boxed{4}", 4) == 1.0
    assert MV.math_reward(r"I first thought 3. \boxed{4}", 3) == 0.0
    assert MV.math_reward("I first thought 3, then 4", 4) == 1.0


def test_math_verify_alone_grades_the_reasoning_and_the_answer_tag_closes_it():
    """The reward-hacking risk of chapter 6b: with the R1 format, a number in <think> counts."""
    hedged = "<think>is it 12?</think><answer>5</answer>"
    assert MV.math_reward(hedged, 12) == 1.0 and MV.math_reward(hedged, 5) == 0.0
    assert MV.math_reward(hedged, 12, in_answer_tag=True) == 0.0
    assert MV.math_reward(hedged, 5, in_answer_tag=True) == 1.0
    assert MV.math_reward(r"<answer>\frac{1}{2}</answer>", "0.5", in_answer_tag=True) == 1.0
    assert MV.math_reward(r"\boxed{5}", 5, in_answer_tag=True) == 0.0          # no tag
    assert MV.math_reward("<answer>5</answer><answer>5</answer>", 5, in_answer_tag=True) == 0.0


def test_a_completion_past_max_chars_scores_zero_unread():
    assert MV.math_reward(r"\boxed{4}", 4, max_chars=9) == 1.0
    assert MV.math_reward(r"\boxed{4}", 4, max_chars=8) == 0.0


# --- the timeout: main thread only ---------------------------------------------------------------

def _in_a_thread(fn):
    box = {}

    def body():
        try:
            box["out"] = fn()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            box["exc"] = exc
    thread = threading.Thread(target=body)
    thread.start()
    thread.join(30)
    return box


def test_in_main_thread_says_where_the_call_runs():
    assert MV.in_main_thread() is True
    assert _in_a_thread(MV.in_main_thread)["out"] is False


def test_a_timeout_off_the_main_thread_is_refused_naming_timeout_s():
    box = _in_a_thread(lambda: MV.math_reward(r"\boxed{4}", 4))
    assert isinstance(box.get("exc"), ValueError)
    assert str(box["exc"]).startswith("timeout_s: math-verify's timeout uses signal.alarm")


def test_math_verify_itself_refuses_a_thread_and_timeout_none_runs_there():
    import math_verify

    box = _in_a_thread(lambda: math_verify.parse(r"\boxed{4}"))
    assert isinstance(box.get("exc"), ValueError) and "threaded" in str(box["exc"])
    assert _in_a_thread(lambda: MV.math_reward(r"\boxed{4}", 4, timeout_s=None))["out"] == 1.0


def test_the_timeout_stops_a_pathological_answer_in_the_main_thread():
    start = time.perf_counter()
    assert MV.math_reward(r"\boxed{9^{9^{9^{9}}}}", 5, timeout_s=1) == 0.0
    assert time.perf_counter() - start < 10              # 1 s per comparison, a few at most


# --- bad arguments -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, words", [
    ({"completion": 12}, TypeError, "completion: expected a str"),
    ({"answer": True}, TypeError, "answer: expected the reference as a str"),
    ({"answer": [1]}, TypeError, "answer: expected the reference as a str"),
    ({"answer": "  "}, ValueError, "answer: expected a reference answer, got an empty str"),
    ({"answer": r"\text{}"}, ValueError, "answer: math-verify could not read the reference"),
    ({"timeout_s": 0}, ValueError, "timeout_s"),
    ({"timeout_s": 1.5}, TypeError, "timeout_s"),
    ({"max_chars": 0}, ValueError, "max_chars"),
    ({"in_answer_tag": 1}, TypeError, "in_answer_tag: expected True or False"),
])
def test_bad_arguments_raise_naming_the_argument(kwargs, error, words):
    call = {"completion": r"\boxed{4}", "answer": 4, **kwargs}
    with pytest.raises(error, match=words.replace("\\", "\\\\")):
        MV.math_reward(call.pop("completion"), call.pop("answer"), **call)
