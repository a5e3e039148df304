"""TRL's trainer on two CPU processes (torchrun, gloo), beta > 0 and two iterations: each rank's
loss and gradient and the gathered advantages equal the book's math over the whole batch
(groups whole across ranks, rewards gathered before the advantages, dapo's num_items_in_batch
per process), and the reference's model folder, shared by the ranks, is gone afterwards.

Chapter 6b ("How it scales", two processes on this CPU) states this run and its numbers: the
ranks' token counts, and the largest differences of each rank's loss, gradient and advantages
from the book's."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")


def test_two_processes_equal_the_books_math(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", "29517", "-m", "grpo_lab.hf.trl_matrix", "--distributed",
           str(tmp_path / "out")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / "out" / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["processes"] == 2 and r["calls"] >= 2
        assert r["loss"] < 1e-6 and r["grad"] < 1e-6 * max(1.0, r["grad_max"]), r
        assert r["adv"] < 1e-5 and r["grad_max"] > 1e-3, r
        assert set(r["needs"]) == {"kl", "ratio_dev"} and r["kl"] > 0 and r["ratio_dev"] > 0, r
        # dapo's normaliser counts both ranks' tokens: more than this rank's own
        assert all(n > t for n, t in zip(r["num_items"], r["local_tokens"])), r
        assert not r["folder_left"]
    assert os.listdir(tmp_path / "tmp") == [] or all(
        not name.startswith("grpo_lab_trl_") for name in os.listdir(tmp_path / "tmp"))
