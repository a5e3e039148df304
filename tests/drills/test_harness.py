"""The harness every checker shares: the reader's function runs on copies in a worker thread
with a time limit, each way it can go wrong becomes one sentence, any output is read back
with its dtype, and the global state it touches is put back."""

import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

from grpo_lab.drills import harness
from grpo_lab.drills.cases import Case, Mistake, close, tolerance
from grpo_lab.drills.grading import matching_mistakes
from grpo_lab.drills.harness import Answer, as_answer, call, in_thread, run, verdict


def test_call_hands_over_float64_copies_and_reads_the_output_back():
    given = [1, 2, 3]
    out, problem = call(lambda x: x * 2, given, where="the worked example", shape=(3,))
    assert problem is None and out.values.dtype == np.float64 and out.dtype == "float64"
    assert out.values.tolist() == [2.0, 4.0, 6.0] and given == [1, 2, 3]


def test_a_modified_input_is_the_verdict_not_a_silent_change():
    rewards = np.array([1.0, 2.0])

    def in_place(x):
        x -= x.mean()
        return x
    out, problem = call(in_place, rewards, where="the worked example")
    assert out is None and problem.startswith("on the worked example your function modified "
                                              "its input")
    assert rewards.tolist() == [1.0, 2.0]                       # the checker's copy is intact


def test_an_exception_is_named_and_a_broadcast_one_gets_the_drills_hint():
    _, problem = call(lambda x: {}["key"], [1.0], where="a batch")
    assert problem == "on a batch your function raised KeyError: 'key'"
    _, problem = call(lambda x: x + np.ones(3), np.ones(2), where="a batch",
                      broadcast_hint=" (keepdims=True)")
    assert "could not be broadcast" in problem and problem.endswith(" (keepdims=True)")


@pytest.mark.parametrize("output, words", [
    (None, "returned None: return the loss"),
    ((1.0, 2.0), "returned a tuple of 2; return only the loss"),
    ("0.5", "returned a str, expected the loss (numbers)"),
    (np.ones(2, dtype=complex), "returned dtype complex128, expected a float array"),
    ([[1.0], [2.0, 3.0]], "returned list that is not an array"),
    ((x for x in range(3)), "returned a generator"),
    (print, "returned a builtin_function_or_method"),
])
def test_outputs_that_are_not_float_arrays_are_problems(output, words):
    arr, problem = as_answer(output, returns="the loss")
    assert arr is None and words in problem


def test_the_answer_keeps_its_dtype_and_a_tensor_that_requires_grad_is_read():
    assert as_answer(np.ones(2, np.float32))[0].dtype == "float32"
    assert as_answer(1.5)[0].dtype == "float64" and as_answer(True)[0].dtype == "bool"
    torch = pytest.importorskip("torch")
    answer, problem = as_answer(torch.ones(3, dtype=torch.bfloat16, requires_grad=True) * 2)
    assert problem is None and answer.dtype == "bfloat16" and answer.values.tolist() == [2.0] * 3


def test_shape_is_checked_and_one_number_accepts_any_size_one_output():
    out, problem = call(lambda x: x.sum(keepdims=True), np.ones((2, 3)), where="a batch",
                        shape=())
    assert problem is None and out.values.shape == () and float(out.values) == 6.0
    _, problem = call(lambda x: x.sum(0), np.ones((2, 3)), where="a batch", shape=(),
                      shape_hint="; the loss is one number")
    assert problem == "on a batch it returned shape (3,), expected (); the loss is one number"


def test_low_precision_inputs_keep_their_dtype_when_asked():
    x = np.ones(3, dtype=np.float16)
    out, _ = call(lambda a: a, x, where="float16 logits", dtype=None)
    assert out.dtype == "float16"
    out, _ = call(lambda a: a, x, where="float16 logits")
    assert out.dtype == "float64"


def test_an_endless_loop_is_stopped_at_the_time_limit(monkeypatch):
    monkeypatch.setattr(harness, "TIME_LIMIT_S", 0.3)

    def spins(x):
        while True:
            x = x + 1

    start = time.perf_counter()
    out, problem = run(spins, np.ones(2))
    assert out is None and problem.startswith("did not finish within 0.3 s")
    assert time.perf_counter() - start < 2.0


def test_the_time_limit_cannot_be_swallowed_by_the_readers_except(monkeypatch):
    monkeypatch.setattr(harness, "TIME_LIMIT_S", 0.3)

    def stubborn(x):
        while True:
            try:
                while True:
                    x = x + 1
            except Exception:                                    # noqa: BLE001
                pass
    _, problem = run(stubborn, np.ones(2))
    assert problem.startswith("did not finish")


def test_torch_settings_the_readers_function_changes_are_put_back():
    torch = pytest.importorskip("torch")
    before = (torch.get_default_dtype(), torch.get_num_threads())

    def meddles(x):
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(1 if before[1] != 1 else 2)
        return x
    _, exc = in_thread(lambda: meddles(np.ones(2)))
    assert exc is None and (torch.get_default_dtype(), torch.get_num_threads()) == before


def test_tensors_go_in_as_fresh_clones_and_their_in_place_change_is_caught():
    torch = pytest.importorskip("torch")
    logp = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    kept = []
    out, problem = call(lambda t: (t * 2).sum(), logp, where="a batch", shape=(),
                        dtype=None, keep=kept)
    assert problem is None and float(out.values) == 3.0
    kept[0].backward()
    assert out.given[0].grad.tolist() == [2.0, 2.0] and logp.grad is None
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    _, problem = run(lambda a: a.unsqueeze_(1), adv)
    assert "modified its input" in problem and adv.shape == (2,)


def test_verdict_prints_one_line_unless_quiet(capsys):
    assert verdict(True, print)(True, "all right") is True
    assert verdict(False, print)(False, "wrong") is False
    assert capsys.readouterr().out == "PASS: all right\n"


def test_tolerance_follows_the_answers_dtype_and_the_cases_conditioning():
    rewards = np.array([[0.5 + 1e-6, 0.5 - 1e-6, 0.5, 0.5]])
    case = Case("near-tied", (rewards,), rewards - rewards.mean(), reference=lambda r: r - 0.5,
                perturb=(0,))
    wide, narrow = tolerance(case, "float64"), tolerance(case, "float32")
    assert (narrow > 1e6 * wide).all() and (narrow < 1e-5).all()  # 16 u |r| / 1, both dtypes


def test_a_mistake_is_named_only_where_the_cases_tell_it_apart():
    """A divisor of N * N looks like 'max_len only' when N * N == max_len, not elsewhere."""
    def case(n, budget):
        return Case(f"N = {n}", (), np.array(1.0 / (n * budget)), inputs={"n": n, "b": budget})
    max_len_only = Mistake("divided by max_len only", lambda c: 1.0 / c.inputs["b"])

    def answers(cases):
        return [(c, Answer(np.array(1.0 / c.inputs["n"] ** 2), "float64")) for c in cases]
    coincidence = answers([case(2, 4)])
    assert matching_mistakes([max_len_only], coincidence, 0) == ["divided by max_len only"]
    told_apart = answers([case(2, 4), case(3, 5)])
    assert matching_mistakes([max_len_only], told_apart, 0) == []
    assert close(np.nan, np.nan, 0.0) and not close(np.nan, 1.0, 1.0)


def test_the_memory_measure_sees_torch_and_leaves_tracemalloc_as_it_was():
    from grpo_lab.drills.memory import peak_bytes
    torch = pytest.importorskip("torch")
    x = np.ones((1000, 100))                                     # 800 kB
    out, exc, numpy_peak, torch_peak = peak_bytes(
        lambda a: (torch.from_numpy(a) * 2 + 1).sum().item(), x)
    assert exc is None and out == 300_000.0
    assert torch_peak >= 2 * x.nbytes and numpy_peak < x.nbytes
    assert not tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        peak_bytes(lambda a: a * 2, x)
        assert tracemalloc.is_tracing()                          # the reader's tracing goes on
    finally:
        tracemalloc.stop()


def test_importing_the_drills_does_not_import_torch():
    code = "import sys, grpo_lab.drills; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"


# --- issue 24: the reader's objects whose text cannot be made --------------------------------

class _BadStr(Exception):
    def __str__(self):
        raise RuntimeError("no text")


class _BadArgRepr:
    def __repr__(self):
        raise ValueError("no repr")


class _NotStr(Exception):
    def __str__(self):
        return 42


class _BadArray:
    def __array__(self, dtype=None, copy=None):
        raise _BadStr()


class _ExitingArray:
    def __array__(self, dtype=None, copy=None):
        raise SystemExit(3)


def _raise(exc):
    def fn(x):
        raise exc
    return fn


@pytest.mark.parametrize("exc, words", [
    (_BadStr(), "raised _BadStr: <a _BadStr whose str() raised RuntimeError>"),
    (ValueError(1, _BadArgRepr()), "raised ValueError: <a ValueError whose str() raised "
                                   "ValueError>"),                    # str of 2 args: repr
    (_NotStr(), "raised _NotStr: <a _NotStr whose str() raised TypeError>"),
    (ValueError("x" * 10**6), "raised ValueError: " + "x" * harness.TEXT_LIMIT + "..."),
])
def test_an_exception_whose_text_fails_is_still_a_verdict(exc, words):
    """Before: the harness formatted the reader's exception unprotected, and the checker
    itself raised."""
    _, problem = call(_raise(exc), [1.0], where="a batch")
    assert problem == f"on a batch your function {words}"


@pytest.mark.parametrize("out, words", [
    (_BadArray(), "returned _BadArray that is not an array (<a _BadStr whose str() raised "
                  "RuntimeError>)"),
    (_ExitingArray(), "returned _ExitingArray that is not an array (3)"),   # sys.exit(3)
])
def test_an_output_whose_reading_fails_is_still_a_verdict(out, words):
    _, problem = call(lambda x: out, [1.0], where="a batch")
    assert problem == f"on a batch your function {words}"


def test_the_checkers_own_messages_quote_exceptions_through_the_same_guard():
    from grpo_lab.drills import ch06_training, ch07_performance
    for module in (ch06_training, ch07_performance):
        assert module.exception_text is harness.exception_text
    assert harness.exception_text(_BadStr()) == "_BadStr: <a _BadStr whose str() raised " \
                                                "RuntimeError>"
    assert harness.exception_text(KeyError()) == "KeyError"


def test_a_verdict_quoting_the_readers_text_prints_on_an_ascii_stream(monkeypatch):
    import io
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")       # strict, like a pipe
    monkeypatch.setattr(sys, "stdout", stream)
    say = verdict(True, len)
    _, problem = call(_raise(ValueError("caf\u00e9 \udce9")), [1.0], where="a batch")
    assert say(False, problem) is False
    stream.flush()
    assert stream.buffer.getvalue() == (b"NOT YET: on a batch your function raised ValueError: "
                                        b"caf\\xe9 \\udce9\n")
