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
    assert str(box["exc"]).startswith("timeout_s: the verifier's timeout is a SIGALRM timer")


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
    ({"timeout_s": 2**40}, ValueError, "timeout_s: expected an integer in .1, 86400. seconds"),
    ({"timeout_s": "5"}, TypeError, "timeout_s: expected an integer"),
    ({"answer": float("nan")}, ValueError, "answer: expected a finite number, got nan"),
    ({"answer": float("inf")}, ValueError, "answer: expected a finite number, got inf"),
    ({"answer": "nan"}, ValueError, "answer: math-verify reads the reference 'nan' as undefined"),
    ({"answer": r"\frac{0}{0}"}, ValueError, "answer: math-verify reads the reference"),
    ({"max_chars": 0}, ValueError, "max_chars"),
    ({"in_answer_tag": 1}, TypeError, "in_answer_tag: expected True or False"),
])
def test_bad_arguments_raise_naming_the_argument(kwargs, error, words):
    call = {"completion": r"\boxed{4}", "answer": 4, **kwargs}
    with pytest.raises(error, match=words.replace("\\", "\\\\")):
        MV.math_reward(call.pop("completion"), call.pop("answer"), **call)


# --- the caller's own SIGALRM: handler and pending alarm survive a call ------------------------

def test_a_pending_alarm_set_by_the_caller_survives_a_call():
    """Before: math-verify's timeout ends in signal.alarm(0), which cancelled the caller's alarm."""
    import signal

    calls = []
    old = signal.signal(signal.SIGALRM, lambda signum, frame: calls.append(signum))
    try:
        signal.alarm(100)
        assert MV.math_reward(r"<answer>\frac{1}{2}</answer>", "0.5", in_answer_tag=True) == 1.0
        assert MV.math_reward(r"\boxed{9^{9^{9^{9}}}}", 5, timeout_s=1) == 0.0    # one expired
        left = signal.alarm(0)                     # cancels it, and says how long was left
        assert 90 <= left <= 100
        assert signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL and calls == []
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_the_callers_handler_is_put_back_and_an_alarm_due_during_the_call_still_fires():
    import signal

    calls = []

    def mine(signum, frame):
        calls.append(signum)

    old = signal.signal(signal.SIGALRM, mine)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)          # due in the middle of the tower
        assert MV.math_reward(r"\boxed{9^{9^{9^{9}}}}", 5, timeout_s=5) == 0.0
        time.sleep(0.05)                                   # the caller's alarm, just after
        assert calls == [signal.SIGALRM]
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_with_no_alarm_pending_none_is_left_behind():
    import signal

    assert MV.math_reward(r"\boxed{4}", 4) == 1.0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


# --- the answer read the way the reference is ----------------------------------------------------

@pytest.mark.parametrize("text, latex", [
    (r"\frac{\sqrt{2}}{2}", r"$$\frac{\sqrt{2}}{2}$$"),
    ("2^{10}", "$$2^{10}$$"),
    ("1e-7", "$$0.0000001$$"),                      # chapter 5's rule: the decimal written
    ("-2.5E+3", "$$-2500$$"),
    ("x = 1e20", "$$x = 100000000000000000000$$"),
    ("e^{2}", "$$e^{2}$$"),                          # Euler's e stays e
    ("x1e5", "$$x1e5$$"),                            # inside a word: not a number
    ("1e1000", "$$1e1000$$"),                        # 4 exponent digits: left alone (bounded)
    (r"\boxed{1e-7}", r"\boxed{0.0000001}"),         # delimiters of its own: not wrapped
    ("$5$", "$5$"),
])
def test_answer_latex_writes_out_exponent_forms_and_wraps_bare_latex(text, latex):
    assert MV.answer_latex(text) == latex


@pytest.mark.parametrize("answer, reference", [
    (r"\frac{\sqrt{2}}{2}", r"\frac{\sqrt{2}}{2}"),    # issue 36: 0.0 against itself
    ("2^{10}", "1024"),
    ("1e-7", 1e-7), ("0.0000001", 1e-7), ("10^{-7}", "1e-7"), ("1e20", 1e20),
])
def test_the_tag_content_is_read_like_the_reference(answer, reference):
    assert MV.math_reward(f"<answer>{answer}</answer>", reference, in_answer_tag=True) == 1.0
    assert MV.math_reward(f"<answer>{reference}</answer>", answer, in_answer_tag=True) == 1.0


def test_exponent_forms_are_not_eulers_e_and_small_references_keep_their_digits():
    reward = MV.math_reward
    assert reward("<answer>2e-7</answer>", 1e-7, in_answer_tag=True) == 0.0      # was 1.0
    assert reward("<answer>1e-7</answer>", 0.0, in_answer_tag=True) == 0.0
    assert reward("<answer>e - 7</answer>", 1e-7, in_answer_tag=True) == 0.0
    assert reward("so the answer is 1e-7", 1e-7) == 1.0                         # in prose too
    assert reward("<answer>2^{10}</answer>", 2, in_answer_tag=True) == 0.0       # was 1.0


@pytest.mark.parametrize("answer", [r"\text{NaN}", "nan", "NaN", r"\frac{0}{0}", r"\frac{1}{0}"])
@pytest.mark.parametrize("reference", [0, 5, "x", r"\infty"])
def test_an_undefined_answer_never_scores(answer, reference):
    assert MV.math_reward(f"<answer>{answer}</answer>", reference, in_answer_tag=True) == 0.0
    assert MV.math_reward(rf"\boxed{{{answer}}}", reference) == 0.0


# --- math-verify 0.9.0's extraction order, as the docstring states it ---------------------------

@pytest.mark.parametrize("completion, read_as", [
    (r"\boxed{3}. The final answer is $4$", 4),          # priority 50 both: the later wins
    (r"The final answer is $4$ and \boxed{3}", 3),        # ... either way round
    ("The final answer is $4$. I hope it is correct. \\boxed{3}", 4),   # priority 0 wins
    ("Answer: 7." + " More words." * 6 + " $8$", 7),      # 100 "answer:" before 300 LaTeX
    (r"$5$ then $6$", 6),                                  # 300: the last first
    (r"\boxed{2} then $6$", 2),                            # a box before any bare LaTeX
])
def test_extraction_follows_math_verify_0_9_0_order(completion, read_as):
    assert MV.math_reward(completion, read_as) == 1.0
    assert MV.math_reward(completion, read_as + 100) == 0.0


def test_read_answer_and_its_arguments():
    import sympy

    assert sympy.simplify(MV.read_answer(r"\frac{\sqrt{2}}{2}")[0] - sympy.sqrt(2) / 2) == 0
    assert MV.read_answer("") == []
    with pytest.raises(TypeError, match="completion: expected a str"):
        MV.read_answer(5)
    with pytest.raises(ValueError, match="timeout_s"):
        MV.read_answer("1", timeout_s=0)


def test_grading_cost_times_real_parses_and_checks_its_arguments():
    seconds, read = MV.grading_cost([rf"<answer>\sqrt{{{k}}}/2</answer>" for k in (2, 3)],
                                    r"\frac{\sqrt{2}}{2}")
    assert seconds > 0 and read == 1.0
    _, read = MV.grading_cost([r"\sqrt{2}/2"], r"\frac{\sqrt{2}}{2}", in_answer_tag=False)
    assert read == 0.0            # bare LaTeX in prose: math-verify reads nothing, a failed parse
    with pytest.raises(TypeError, match="completions: expected a non-empty list"):
        MV.grading_cost("x", 1)
    with pytest.raises(TypeError, match=r"completions\[1\]: expected a str"):
        MV.grading_cost(["x", 2], 1)
    with pytest.raises(ValueError, match="timeout_s"):
        MV.grading_cost(["x"], 1, timeout_s=-1)
