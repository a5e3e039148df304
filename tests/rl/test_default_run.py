"""The command line's default run, as chapter 6 and the README promise it: python -m
grpo_lab.train ends at 90% held-out accuracy or more.

The promise is measured by ``python -m grpo_lab.sweep`` over seeds, thread counts and CPU code
paths (the record ships as ``grpo_lab/rl/default_sweep.json``). The run on this machine is one
more draw from that spread: the same seed gives another run with another thread count or
another CPU, so it is held to what held in every recorded run, with a margin, never to the
value one machine gave. (An earlier version asserted a format rate of exactly 1.0; a CI
machine's run ended at 0.992 and failed.)

Chapter 6 makes that run: its config is ``TrainConfig()``, the command line's with no options
(the same settings, seed and thread count; a layout gives the same run bit for bit in every
fresh process, tests/rl/test_sweep.py), and its checked cell, which nbval runs in every test
run, holds it to the promise: every step run, a start below 20%, 90% held-out accuracy or more
(PROMISE) and a format rate of 0.98 or more (FORMAT_FLOOR, a margin below the recorded runs'
lowest). So the 450 steps run once per test run, in the chapter, not a second time here; the
tests below hold the chapter and the command line to the same config, and
tests/rl/test_train.py runs the command line end to end on a short run.

Chapter 6 ("One seed, one machine") prints the recorded sweep and states the promise as what
held in every recorded run, less a margin, never the value one machine gave.
"""

import json
import re
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


def chapter_6_code() -> list:
    nb = json.loads((ROOT / "chapters" / "06_training_loop.ipynb").read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_chapter_6_makes_the_default_run_and_holds_it_to_the_promise():
    cells = chapter_6_code()
    sources = ["".join(c["source"]) for c in cells]
    assigned = [ln for s in sources for ln in s.splitlines() if re.match(r"config\s*=", ln)]
    assert len(assigned) == 1 and assigned[0].startswith("config = gl.train.TrainConfig()  ")
    assert any(s.startswith("full = gl.train.train(config, progress=False)") for s in sources)
    checked = [(s, c) for s, c in zip(sources, cells)
               if "nbval-check-output" in c["metadata"].get("tags", [])
               and "the command's promise" in s]
    assert len(checked) == 1, "one checked cell holds the run to the promise"
    source, cell = checked[0]
    assert f'full.final["accuracy"] >= {PROMISE}' in source
    assert f'full.final["format"] >= {FORMAT_FLOOR}' in source
    assert "full.start[\"accuracy\"] < 0.2" in source
    assert "not full.interrupted" in source and "== config.steps" in source
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    lines = [ln for ln in printed.splitlines() if ln.strip()]
    assert len(lines) == 4 and all(ln.endswith(": True") for ln in lines), printed


def test_the_command_line_with_no_options_trains_chapter_6s_config(tmp_path, monkeypatch):
    """What python -m grpo_lab.train with no options (only --out) hands the training loop."""
    from grpo_lab.rl import cli

    class Seen(Exception):
        pass

    def train(config, **kwargs):
        raise Seen(config)

    monkeypatch.setattr(cli.loop, "train", train)
    with pytest.raises(Seen) as seen:
        cli.main(["--quiet", "--out", str(tmp_path / "run")])
    assert seen.value.args[0] == gl.train.TrainConfig()
    assert gl.train.TrainConfig().steps == 450


def test_the_readme_quotes_the_recorded_spread():
    section = (ROOT / "README.md").read_text().split("## What the default training run promises")[1]
    section = section.split("\n## ")[0]
    acc = RECORD["final_held_out_accuracy"]
    assert f"between **{acc['min']:.1%} and {acc['max']:.1%}**" in section
    assert f"median {acc['median']:.1%}" in section
    assert f"all {len(RECORD['runs'])} runs" in section
    assert RECORD["measured"]["command"] in section
