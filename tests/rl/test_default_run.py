"""The command line's default run, as chapter 6 and the README promise it: python -m
grpo_lab.train ends at 90% held-out accuracy or more.

The promise is measured by ``python -m grpo_lab.sweep`` over seeds, thread counts and CPU code
paths (the record ships as ``grpo_lab/rl/default_sweep.json``). The run on this machine is one
more draw from that spread: the same seed gives another run with another thread count or
another CPU, so it is held to what held in every recorded run, with a margin, never to the
value one machine gave. (An earlier version asserted a format rate of exactly 1.0; a CI
machine's run ended at 0.992 and failed.) The wall time is printed, not asserted.

Chapter 6 ("One seed, one machine") prints the recorded sweep and states the promise as what
held in every recorded run, less a margin, never the value one machine gave: these tests hold
the run to it, 90% held-out accuracy or more (PROMISE) and a format rate of 0.98 or more
(FORMAT_FLOOR, a margin below the recorded runs' lowest).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMISE = 0.90            # held-out accuracy: README, chapter 6
FORMAT_FLOOR = 0.98       # the recorded runs' lowest format rate, less a margin
RECORD = gl.sweep.load_record()


def test_the_recorded_sweep_backs_the_promise_with_a_margin():
    runs = RECORD["runs"]
    assert len(runs) >= 20 and all(r["returncode"] == 0 for r in runs)   # the floor
    layouts = {(r["seed"], r["threads"], r["capability"]) for r in runs}
    assert len(layouts) == len(runs)                          # no layout counted twice
    assert layouts >= {(s, t, c) for s in range(5) for t in (1, 2) for c in ("default", "AVX2")}
    assert min(r["final_held_out_accuracy"] for r in runs) >= PROMISE + 0.01
    assert min(r["final_held_out_format"] for r in runs) >= FORMAT_FLOOR + 0.005
    assert RECORD["final_held_out_accuracy"]["min"] == min(r["final_held_out_accuracy"]
                                                           for r in runs)
    assert RECORD["measured"]["command"].startswith("python -m grpo_lab.sweep")


def test_the_default_run_ends_at_90_percent_or_more(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "grpo_lab.train", "--quiet", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    print(f"default run: {summary['start_held_out_accuracy']:.1%} -> "
          f"{summary['final_held_out_accuracy']:.1%}, format "
          f"{summary['final_held_out_format']:.3f}, in {summary['seconds']} s")
    assert not summary["interrupted"] and summary["steps_done"] == gl.train.TrainConfig().steps
    assert summary["start_held_out_accuracy"] < 0.2
    assert summary["final_held_out_accuracy"] >= PROMISE
    assert summary["final_held_out_format"] >= FORMAT_FLOOR
    assert "wall time" in proc.stdout and "held-out accuracy" in proc.stdout


def test_the_readme_quotes_the_recorded_spread():
    section = (ROOT / "README.md").read_text().split("## What the default training run promises")[1]
    section = section.split("\n## ")[0]
    acc = RECORD["final_held_out_accuracy"]
    assert f"between **{acc['min']:.1%} and {acc['max']:.1%}**" in section
    assert f"median {acc['median']:.1%}" in section
    assert f"all {len(RECORD['runs'])} runs" in section
    assert RECORD["measured"]["command"] in section
