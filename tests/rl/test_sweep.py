"""``python -m grpo_lab.sweep`` (issue 24): the default run's promise is measured across seeds,
thread counts and CPU code paths, each run in a fresh process.

What is asserted here is what the sweep relies on: one process layout (seed, threads, CPU
capability) gives the same run bit for bit in two fresh processes, so the spread the sweep
prints is the spread across layouts, not noise; and bad arguments are refused by name.

Chapter 6 ("One seed, one machine") says that the same seed, on one machine with the same
thread count, gives the same run bit for bit, process after process, every logged number of
every step: test_one_layout_gives_the_same_run_in_two_fresh_processes is that claim, on a short
run, compared column by column (the wall time aside).
"""

import csv
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from grpo_lab.rl import sweep  # noqa: E402

SHORT = ["--steps", "3", "--warmup-steps", "4", "--prompts-per-step", "4", "--group-size", "4",
         "--eval-every", "3"]


def test_one_layout_gives_the_same_run_in_two_fresh_processes(tmp_path):
    first = sweep.run_case(0, 1, "default", tmp_path / "a", SHORT)
    second = sweep.run_case(0, 1, "default", tmp_path / "b", SHORT)
    assert first["returncode"] == second["returncode"] == 0, first.get("error")
    history = [_without_wall_time(tmp_path / d / "seed0-threads1-default" / "history.csv")
               for d in ("a", "b")]
    assert history[0] == history[1] and len(history[0]) == 1 + 1 + 3   # header, step 0, 3 steps


def _without_wall_time(path):
    """history.csv's rows as text, less the one column that is not seeded (seconds)."""
    rows = list(csv.reader(path.read_text().splitlines()))
    keep = [i for i, name in enumerate(rows[0]) if name != "seconds"]
    assert len(keep) == len(rows[0]) - 1
    return [",".join(row[i] for i in keep) for row in rows]


def test_the_command_prints_the_spread_and_writes_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grpo_lab.sweep", "--seeds", "0-1",
                           "--threads", "1", "--out", str(tmp_path), *SHORT],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert [r["seed"] for r in report["runs"]] == [0, 1]
    accuracies = [r["final_held_out_accuracy"] for r in report["runs"]]
    assert report["final_held_out_accuracy"]["min"] == min(accuracies)
    assert "2 of 2 runs finished" in proc.stdout


def test_parse_ints_reads_ranges_and_lists():
    assert sweep.parse_ints("seeds", "0-4", low=0, high=9) == [0, 1, 2, 3, 4]
    assert sweep.parse_ints("threads", "1,2", low=1, high=8) == [1, 2]


@pytest.mark.parametrize("text, problem", [("a-b", "expected integers"), ("4-0", "low before"),
                                           ("0-10", "from 0 to 9"), ("", "expected integers"),
                                           ("1e400", "expected integers")])
def test_parse_ints_names_the_argument_and_the_problem(text, problem):
    with pytest.raises(ValueError, match=f"--seeds: .*{problem}"):
        sweep.parse_ints("--seeds", text, low=0, high=9)


@pytest.mark.parametrize("argv, flag", [(["--seeds", "x"], "--seeds"),
                                        (["--threads", "0"], "--threads"), (["--threads", "1,9999"], "--threads"),
                                        (["--capabilities", "SSE9"], "--capabilities"),
                                        (["--jobs", "99"], "--jobs")])
def test_the_command_refuses_bad_arguments_by_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        sweep.main(argv)
    assert exc.value.code == 2 and flag in capsys.readouterr().err


@pytest.mark.parametrize("make, words", [
    (lambda tmp: "", "expected a path, got ''"),
    (lambda tmp: str(tmp / "dangling"), "a symbolic link to"),
    (lambda tmp: "/proc/grpo-sweep", "expected a path outside /proc and /sys"),
])
def test_out_goes_through_the_one_path_check(make, words, tmp_path, capsys, monkeypatch):
    """The --out check of grpo_lab.train and grpo_lab.bench (issue 24), before any run."""
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    monkeypatch.setattr(sweep, "run_case", lambda *a: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as info:
        sweep.main(["--seeds", "0", "--threads", "1", "--out", make(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --out: expected" in err and words in err, err


def test_each_run_sleeps_its_idle_threads_unless_told_otherwise(tmp_path, monkeypatch):
    """Two runs side by side must not spin each other down: OMP_WAIT_POLICY=PASSIVE goes to
    every run unless the caller's environment sets the policy itself."""
    seen = []

    def fake_run(cmd, env, **kwargs):
        seen.append(env)
        return subprocess.CompletedProcess(cmd, 1, "", "stopped by the test")

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    sweep.run_case(0, 2, "AVX2", tmp_path)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    sweep.run_case(0, 2, "AVX2", tmp_path)
    assert [e["OMP_WAIT_POLICY"] for e in seen] == ["PASSIVE", "ACTIVE"]
    assert all(e["ATEN_CPU_CAPABILITY"] == "avx2" for e in seen)
