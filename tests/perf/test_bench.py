"""python -m grpo_lab.bench: runs, writes valid JSON, refuses bad arguments; its baselines are right.

Timings are never asserted here: the benchmark is a command, not a test.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab import bench

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "grpo_lab.bench", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_quick_run_writes_valid_json(tmp_path):
    proc = run_bench("--quick", "--repeats", "5", "--out", "quick.json", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "quick.json").read_text())
    assert {"environment", "results", "summary"} <= report.keys()
    assert report["environment"]["repeats"] == 5 and report["environment"]["quick"]
    rows = report["results"]
    impls = {(r["bench"], tuple(r["shape"]), r["impl"]) for r in rows}
    for shape in bench.QUICK_ADV_SIZES:
        for impl in ("copy", "numpy plain formula", "numpy reference (gl.group_advantages)",
                     "numpy fast (gl.group_advantages_fast)"):
            assert ("group_advantages", shape, impl) in impls
    for r in rows:
        assert len(r["times_s"]) == 5 and all(t > 0 for t in r["times_s"])
        assert r["median_s"] == pytest.approx(float(np.median(r["times_s"])))
        if r["impl"] in ("copy", "torch copy"):
            assert r["ratio_to_copy"] == 1.0 and r["peak_extra_bytes"] is None
        else:
            assert r["ratio_to_copy"] > 0 and r["peak_extra_bytes"] > 0
    # every NumPy implementation returns a (B, G) float32 array: its peak is at least that
    for r in rows:
        if r["impl"].startswith("numpy"):
            assert r["peak_extra_bytes"] >= r["output_bytes"]
    whats = [s["what"] for s in report["summary"]]
    assert any("group_advantages_fast" in w for w in whats)
    assert "x copy" in proc.stdout and "wrote quick.json" in proc.stdout
    assert "profiler_start" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--repeats", "3"], "--repeats: expected at least 5"),
    (["--threads", "0"], "--threads: expected a positive integer"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    proc = run_bench("--quick", *args, tmp_path=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_cuda_without_a_gpu_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = run_bench("--quick", "--device", "cuda", tmp_path=tmp_path)
    assert proc.returncode == 2 and "--device cuda: expected torch with a CUDA device" in proc.stderr


# --- the baselines compute what they claim ---------------------------------------------------

def test_plain_formula_is_group_advantages_where_groups_have_a_spread():
    r = np.random.default_rng(0).normal(size=(50, 8))
    np.testing.assert_allclose(bench.plain_advantages(r), gl.group_advantages(r), rtol=1e-12)


def test_trl_style_is_bessel_std_with_eps_1e4():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(1).normal(size=(40, 6))
    got = bench.trl_style_advantages(torch.from_numpy(r.reshape(-1)), 6).numpy().reshape(40, 6)
    np.testing.assert_allclose(got, gl.group_advantages(r, eps=1e-4, ddof=1), rtol=1e-12)


# --- the memory probes measure -----------------------------------------------------------------

def test_numpy_peak_sees_a_temporary():
    def allocate():
        big = np.ones(1 << 20)           # 8 MiB, freed before returning
        return float(big.sum())
    assert 8 << 20 <= bench._peak_numpy(allocate) < 9 << 20


def test_torch_cpu_peak_sees_a_temporary():
    torch = pytest.importorskip("torch")

    def allocate():
        big = torch.ones(1 << 20, dtype=torch.float64)      # 8 MiB, freed before returning
        return float(big.sum())
    assert 8 << 20 <= bench._peak_torch(allocate, "cpu") < 9 << 20
