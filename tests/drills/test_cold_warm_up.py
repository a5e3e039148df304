"""The package's own Numba compile is not charged to the reader (issue 30, class 7).

In a fresh interpreter the first call of ``gl.group_advantages_fast`` compiles (or loads) its
kernel: about 2 s, with numba imported for the first time. A reader's answer that calls it
must not come near the time limit for that reason, so the checkers that time such answers
(chapters 1 and 7) warm the package up first. Each check here runs in its own cold process,
with the time limit set below the cold call's cost and far above a warm call's: with the
warm-up the answer passes, and the kernels are already compiled when the reader's answer first
runs; with the warm-up skipped, nothing is compiled at that moment, so the compile lands in the
reader's first call. (The control asserts that state, not a time: how long a cold call takes
depends on the machine and on Numba's cache on disk, and a warm cache can load in under 0.5 s.)
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 0.5     # the catalogue tests' limit: below a cold call (~2 s), far above a warm one

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                reason="without numba there is nothing to compile")

SCRIPT = """
import contextlib, io, json, os, sys, time
import numpy as np
import grpo_lab as gl
from grpo_lab.drills import grading, harness

harness.TIME_LIMIT_S = {limit}
if {skip_warm_up}:
    grading._WARM.append(True)           # as if warmed: the first call stays cold
from grpo_lab.perf.advantages_numba import _KERNEL
checker = getattr(gl.drills, {checker!r})
reader = {answer}
compiled_at_first_call = []
def answer(*args, **kwargs):
    if not compiled_at_first_call:           # the kernels' compiled signatures, right now
        kernels = _KERNEL[0] if _KERNEL else None
        compiled_at_first_call.append(sum(len(k.signatures) for k in kernels) if kernels else 0)
    return reader(*args, **kwargs)
said = io.StringIO()
start = time.perf_counter()
with contextlib.redirect_stdout(said):
    ok = checker(answer)
took = time.perf_counter() - start
warm = None
if not {skip_warm_up}:               # (skipped, a timed-out compile may still be running)
    start = time.perf_counter()
    gl.group_advantages_fast(np.zeros((4, 3), np.float32))
    warm = time.perf_counter() - start
print(json.dumps({{"ok": ok, "said": said.getvalue().strip(), "took": took, "warm": warm,
                  "compiled_at_first_call": compiled_at_first_call[0]}}))
sys.stdout.flush()
os._exit(0)                          # not waiting on a compile left running in its thread
"""

ANSWER = "lambda r, eps=1e-8: gl.group_advantages_fast(r, eps)"


def _cold_run(checker: str, *, skip_warm_up: bool) -> dict:
    code = SCRIPT.format(limit=LIMIT_S, skip_warm_up=skip_warm_up, checker=checker,
                         answer=ANSWER)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cold_process_does_not_charge_the_compile_to_the_reader():
    """Chapter 1's checker in a fresh interpreter, 0.5 s per call: an answer that calls
    gl.group_advantages_fast passes, and a warm call takes a small part of the limit."""
    run = _cold_run("check_group_advantages", skip_warm_up=False)
    assert run["ok"] is True, run["said"]
    assert run["said"].startswith("PASS: ")
    assert run["warm"] < LIMIT_S / 10, run
    assert run["compiled_at_first_call"] >= 1, run       # compiled before the reader's clock


def test_without_the_warm_up_the_compile_lands_in_the_readers_first_call():
    """The control: the warm-up skipped, nothing is compiled when the reader's answer first
    runs, so its first call pays for the compile (about 2 s cold, less from a warm cache)."""
    run = _cold_run("check_group_advantages", skip_warm_up=True)
    assert run["compiled_at_first_call"] == 0, run


def test_the_blocked_checker_warms_up_before_it_calls_the_reader(monkeypatch):
    """Chapter 7's checker (whose 6000 x 32 case is slow to run cold in full) warms the
    package up before its first call of the reader's function."""
    import grpo_lab as gl
    from grpo_lab.drills import ch07_performance

    order = []
    monkeypatch.setattr(ch07_performance, "warm_up_package", lambda: order.append("warm-up"))

    def answer(rewards, block_rows):
        order.append("reader")
    assert gl.drills.check_blocked_advantages(answer, verbose=False) is False
    assert order[:2] == ["warm-up", "reader"], order
