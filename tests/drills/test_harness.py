"""The harness every checker shares: the reader's function runs on copies, each way it can go
wrong becomes one sentence, the usual mistakes are named by value, and torch tensors (chapter
6's drill) go in and come out without torch being imported by the drills themselves."""

import subprocess
import sys

import numpy as np
import pytest

from grpo_lab.drills.harness import as_array, call, named_mistake, run, verdict


def test_call_hands_over_float64_copies_and_reads_the_output_back():
    given = [1, 2, 3]
    out, problem = call(lambda x: x * 2, given, where="the worked example", shape=(3,))
    assert problem is None and out.dtype == np.float64 and out.tolist() == [2.0, 4.0, 6.0]
    assert given == [1, 2, 3]


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
])
def test_outputs_that_are_not_float_arrays_are_problems(output, words):
    arr, problem = as_array(output, returns="the loss")
    assert arr is None and words in problem


def test_shape_is_checked_and_one_number_accepts_any_size_one_output():
    out, problem = call(lambda x: x.sum(keepdims=True), np.ones((2, 3)), where="a batch",
                        shape=())
    assert problem is None and out.shape == () and float(out) == 6.0
    _, problem = call(lambda x: x.sum(0), np.ones((2, 3)), where="a batch", shape=(),
                      shape_hint="; the loss is one number")
    assert problem == "on a batch it returned shape (3,), expected (); the loss is one number"


def test_low_precision_outputs_keep_their_dtype_when_asked():
    x = np.ones(3, dtype=np.float16)
    out, _ = call(lambda a: a, x, where="float16 logits", dtype=None)
    assert out.dtype == np.float16
    out, _ = call(lambda a: a, x, where="float16 logits")
    assert out.dtype == np.float64


def test_named_mistake_returns_the_first_match_and_broadcasts_scalars():
    out = np.array([0.0, 0.0])
    assert named_mistake(out, {"one": [1.0, 1.0], "zeros": 0.0, "also zeros": [0, 0]}) == "zeros"
    assert named_mistake(out, [("a wrong shape", np.zeros(3))]) is None
    assert named_mistake(np.array([1.0 + 1e-3]), {"close": 1.0}, rtol=1e-6) is None


def test_verdict_prints_one_line_unless_quiet(capsys):
    assert verdict(True, print)(True, "all right") is True
    assert verdict(False, print)(False, "wrong") is False
    assert capsys.readouterr().out == "PASS: all right\n"


def test_tensors_go_in_as_they_are_and_their_in_place_change_is_caught():
    torch = pytest.importorskip("torch")
    logp = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    kept = []
    out, problem = call(lambda t: (t * 2).sum(), logp, where="a batch", shape=(), keep=kept)
    assert problem is None and float(out) == 3.0
    kept[0].backward()
    assert logp.grad.tolist() == [2.0, 2.0]                     # the checker reads the gradient
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    _, problem = run(lambda a: a.unsqueeze_(1), adv)
    assert "modified its input" in problem and adv.shape == (2, 1)


def test_importing_the_drills_does_not_import_torch():
    code = "import sys, grpo_lab.drills; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"
