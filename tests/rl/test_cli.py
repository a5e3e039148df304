"""``python -m grpo_lab.train`` under Ctrl-C and with a bad --out: every moment after the
output folder exists leaves a valid summary.json marked interrupted, and the exit status is
130; a bad --out is refused, naming the flag, before any work (issue 15)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from grpo_lab import train as T  # noqa: E402
from grpo_lab.rl import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(d_model=16, n_head=2, warmup_steps=3, warmup_batch=8, steps=4, prompts_per_step=3,
            group_size=4, inner_iters=2, eval_every=2, threads=1)


def argv(out, **over):
    return [f"--{k.replace('_', '-')}={v}" for k, v in {**TINY, **over}.items()] + [
        f"--out={out}", "--quiet"]


def summary(out):
    return json.loads((out / "summary.json").read_text())          # valid JSON, or it raises


# --- --out ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make, words", [
    (lambda tmp: tmp / "file.txt", "expected a folder, got"),
    (lambda tmp: tmp / "file.txt" / "run", "cannot write to"),
    (lambda tmp: Path("/dev/null/run"), "cannot write to '/dev/null/run'"),
    (lambda tmp: tmp / "blocked", "cannot write to"),              # summary.json is a folder
])
def test_an_unusable_out_is_refused_naming_the_flag(make, words, tmp_path, capsys,
                                                    monkeypatch):
    (tmp_path / "file.txt").write_text("not a folder")
    (tmp_path / "blocked" / "summary.json").mkdir(parents=True)
    monkeypatch.setattr(T, "prepare", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(SystemExit) as info:
        T.main(argv(make(tmp_path)))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "python -m grpo_lab.train: error: argument --out: " in err and words in err, err
    assert (tmp_path / "file.txt").read_text() == "not a folder"


def test_the_folder_never_exists_without_a_summary_marked_interrupted(tmp_path, monkeypatch):
    """The first summary.json is written with the folder, before any work, marked
    interrupted: a run killed at any moment after that says it did not finish."""
    seen = {}

    def stop(config, stop=None):
        seen.update(summary(tmp_path / "run"))
        raise KeyboardInterrupt                                    # Ctrl-C in the warm-up
    monkeypatch.setattr(T, "prepare", stop)
    assert T.main(argv(tmp_path / "run")) == 130
    assert seen["interrupted"] is True and seen["steps_done"] == 0
    after = summary(tmp_path / "run")
    assert after["interrupted"] is True and after["final_held_out_accuracy"] is None
    assert after["config"]["d_model"] == 16


def test_ctrl_c_while_the_files_are_written_marks_the_summary_interrupted(tmp_path,
                                                                          monkeypatch):
    def draw(run, out):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_draw", draw)
    assert T.main(argv(tmp_path)) == 130
    info = summary(tmp_path)
    assert info["interrupted"] is True and info["steps_done"] == 4     # the numbers it had


def test_a_ctrl_c_that_a_library_swallowed_still_stops_the_run(tmp_path, monkeypatch):
    """The handler records the request; train() asks before every step, so a KeyboardInterrupt
    lost inside a library (it happens inside imports) still ends the run with status 130."""
    real_step, calls = T.grpo_step, []

    def step(run):
        calls.append(1)
        if len(calls) == 2:
            cli._CTRL_C.requested = True       # as the handler does; its raise was "lost"
        return real_step(run)
    monkeypatch.setattr(T, "grpo_step", step)
    monkeypatch.setattr(cli._CTRL_C, "requested", False)
    assert T.main(argv(tmp_path, steps=50)) == 130
    info = summary(tmp_path)
    assert info["interrupted"] is True and info["steps_done"] == 2


def test_a_ctrl_c_inside_importlibs_lock_callback_is_recorded_not_raised():
    """Python runs importlib's module-lock callback (a weakref callback) as a lazy import ends;
    a KeyboardInterrupt raised there cannot propagate and was printed as an "Exception ignored
    in" traceback (one fresh-clone run in the warm-up). The handler records it there, and
    raises anywhere else."""
    namespace = {}
    exec(compile("import sys\ndef cb():\n    return sys._getframe()\n",
                 "<frozen importlib._bootstrap>", "exec"), namespace)
    handler = cli._CtrlC()
    handler(signal.SIGINT, namespace["cb"]())
    assert handler.requested and not handler.pending
    elsewhere = cli._CtrlC()
    with pytest.raises(KeyboardInterrupt):
        elsewhere(signal.SIGINT, sys._getframe())
    assert elsewhere.requested


def test_a_finished_run_logs_wall_time_and_accuracy(tmp_path, capsys):
    assert T.main(argv(tmp_path)) == 0
    info = summary(tmp_path)
    assert info["interrupted"] is False and info["steps_done"] == 4
    assert info["seconds"] > 0 and 0 <= info["final_held_out_accuracy"] <= 1
    out = capsys.readouterr().out
    printed = re.search(r"finished 4 GRPO steps; wall time ([0-9.]+) s\n", out)
    assert printed and 0 < float(printed[1]) and abs(float(printed[1]) - info["seconds"]) < 0.05
    assert f"-> {info['final_held_out_accuracy']:.1%}" in out
    assert not list(tmp_path.glob("*.partial*"))                    # nothing half-written


# --- a real SIGINT, in a child process --------------------------------------------------------

def _start(out, **over):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "grpo_lab.train", *argv(out, **over)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(path, proc, timeout=120.0):
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended first: {proc.communicate()[1][-2000:]}")
        if time.monotonic() > end:
            proc.kill()
            pytest.fail(f"{path} never appeared")
        time.sleep(0.005)


def _interrupt(proc):
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run did not stop on SIGINT")
    return proc.returncode, err


@pytest.mark.parametrize("moment, over, wait_for, delay", [
    ("as soon as the folder exists", dict(steps=10_000), None, 0.0),
    ("in the warm-up", dict(warmup_steps=1_000_000, steps=10), "summary.json", 1.0),
    ("in a GRPO step", dict(steps=1_000_000, eval_every=1), "history.csv", 0.3),
])
def test_sigint_at_any_moment_leaves_a_summary_marked_interrupted_and_exits_130(
        moment, over, wait_for, delay, tmp_path):
    out = tmp_path / "run"
    proc = _start(out, **over)
    _wait_for(out / wait_for if wait_for else out, proc)
    time.sleep(delay)
    code, err = _interrupt(proc)
    assert code == 130, (moment, err[-2000:])
    assert "Traceback" not in err, (moment, err[-2000:])
    info = summary(out)
    assert info["interrupted"] is True, moment
    if wait_for == "history.csv":                     # GRPO had started: its log is kept
        assert info["steps_done"] >= 1 and (out / "curves.png").exists()
        assert info["final_held_out_accuracy"] is not None


def test_the_printed_wall_time_keeps_milliseconds_under_a_second_and_never_goes_exponential():
    assert cli._seconds(0.0412) == "0.041"
    assert cli._seconds(41.26) == "41.3"
    assert cli._seconds(1234.56) == "1234.6"                  # a long run: no "1.23e+03"


# --- issue 24: one --out check, upper bounds, prints that survive any name and encoding ---------

@pytest.mark.parametrize("make, words", [
    (lambda tmp: "", "expected a path, got '' (an empty name"),
    (lambda tmp: tmp / "dangling", "a symbolic link to"),
    (lambda tmp: tmp / "dangling" / "run", "a symbolic link to"),
    (lambda tmp: Path("/proc/grpo-run"), "expected a path outside /proc and /sys"),
])
def test_an_empty_dangling_or_virtual_out_is_refused_before_any_work(make, words, tmp_path,
                                                                     capsys, monkeypatch):
    """Before: "" trained into the current folder, and the other two failed after the run
    started (or, under /proc as root, whose permission bits say yes, at the first write)."""
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(T, "prepare", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(SystemExit) as info:
        T.main(argv(make(tmp_path)))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --out: " in err and words in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling"]        # nothing written


@pytest.mark.parametrize("option, value, words", [
    ("group_size", 10**8, "--group-size: expected a run that fits in half of this machine's"),
    ("prompts_per_step", 10**7, "--group-size: expected a run that fits"),
    ("warmup_batch", 10**9, "--warmup-batch: expected a run that fits"),
    ("d_model", 10**6, "--d-model: expected a run that fits"),
    ("threads", 10**6, "--threads: expected at most "),
    ("steps", 10**7, "--steps: expected at most 1000000 (a million steps is days"),
    ("warmup_steps", 10**7, "--warmup-steps: expected at most 1000000"),
    ("eval_every", 10**7, "--eval-every: expected at most 1000000"),
    ("inner_iters", 10**4, "--inner-iters: expected at most 1000"),
    ("max_new_tokens", 10**4, "--max-new-tokens: expected at most 256"),
])
def test_integer_options_have_upper_bounds_that_name_the_flag(option, value, words, tmp_path,
                                                              capsys, monkeypatch):
    """Before: --group-size 1e8 ended in an allocator traceback, --threads 1e6 in a failed
    segment map; now each exits 2 with the bound and its reason, before any work."""
    monkeypatch.setattr(T, "prepare", lambda *a, **k: pytest.fail("work started"))
    over = {option: value, "n_head": 1} if option == "d_model" else {option: value}
    with pytest.raises(SystemExit) as info:
        T.main(argv(tmp_path / "run", **over))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {words}" in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_the_bounds_leave_the_default_run_and_chapter_6_alone():
    parser = cli._parser()
    cli._check_sizes(parser, T.TrainConfig())                        # does not exit
    cli._check_sizes(parser, T.TrainConfig(steps=250, threads=1))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a name that is not UTF-8")
@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_a_name_that_is_not_utf8_is_printed_escaped_in_any_encoding(encoding, tmp_path):
    """Before: the run finished, then the last print raised UnicodeEncodeError (exit 1)."""
    out = os.fsencode(tmp_path) + b"/caf\xe9-run"                    # Latin-1, not UTF-8
    env = dict(os.environ, PYTHONIOENCODING=encoding,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    tiny = dict(TINY, steps=1, warmup_steps=1, eval_every=1)
    proc = subprocess.run([sys.executable, "-m", "grpo_lab.train",
                           *[f"--{k.replace('_', '-')}={v}" for k, v in tiny.items()],
                           b"--out=" + out, "--quiet"], env=env, capture_output=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr.decode("ascii", "replace")[-2000:]
    assert b"caf\\udce9-run/summary.json" in proc.stdout, proc.stdout
    assert b"log in " in proc.stderr and b"caf\\udce9-run/" in proc.stderr
    assert json.loads((Path(os.fsdecode(out)) / "summary.json").read_text())["steps_done"] == 1
