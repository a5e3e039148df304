"""python -m grpo_lab.bench: runs, writes valid JSON, refuses bad arguments, and puts each goal
next to what it measured (the baselines: test_baselines.py; the probes: test_measure.py).

Timings are never asserted here: the benchmark is a command, not a test.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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
    linear = [r for r in report["results"] if r["bench"].startswith("fused linear")]
    rows = [r for r in report["results"] if r not in linear]
    impls = {(r["bench"], tuple(r["shape"]), r["impl"]) for r in rows}
    for shape in bench.QUICK_ADV_SIZES:
        for impl in ("copy", "new-array copy", "numpy plain formula",
                     "numpy reference (gl.group_advantages)",
                     "numpy fast (gl.group_advantages_fast)",
                     "numpy fast, out= (gl.group_advantages_fast)"):
            assert ("group_advantages", shape, impl) in impls
    for r in rows:
        assert len(r["times_s"]) == 5 and all(t > 0 for t in r["times_s"])
        assert r["median_s"] == pytest.approx(float(np.median(r["times_s"])))
        if r["impl"] in ("copy", "torch copy"):
            assert r["ratio_to_copy"] == 1.0 and r["peak_extra_bytes"] is None
        elif r["impl"] == "new-array copy":
            assert r["ratio_to_copy"] > 0 and r["peak_extra_bytes"] is None
        elif "out=" in r["impl"]:                    # writes into its buffer: no new array
            assert r["ratio_to_copy"] > 0 and r["peak_extra_bytes"] < r["output_bytes"] / 10
        else:
            assert r["ratio_to_copy"] > 0 and r["peak_extra_bytes"] > 0
    # every NumPy implementation returns a (B, G) float32 array: its peak is at least that
    for r in rows:
        if r["impl"].startswith("numpy") and "out=" not in r["impl"]:
            assert r["peak_extra_bytes"] >= r["output_bytes"]
    whats = [s["what"] for s in report["summary"]]
    for shape in bench.QUICK_ADV_SIZES:                  # like against like, both ways
        assert f"group_advantages_fast {shape}, a new array, vs a new-array copy" in whats
        assert f"group_advantages_fast {shape}, out=, vs a copy into an existing array" in whats
    assert "x copy" in proc.stdout and "wrote quick.json" in proc.stdout
    if "torch" in report["environment"]:
        assert_torch_rows_and_goals(report, proc.stdout)
    assert "profiler_start" not in proc.stderr
    if "torch" in report["environment"]:                 # the loss from hidden states
        assert [r["impl"] for r in linear] == ["fused", "liger", "trl", "eager"]
        for r in linear:
            if "error" not in r:
                assert len(r["times_s"]) == 3 and r["peak_extra_bytes"] > 0
                assert r["shape"] == list(bench.QUICK_LINEAR_SIZE)
        losses = [r["loss"] for r in linear if "error" not in r]
        assert np.allclose(losses, losses[0], atol=1e-5)     # the same loss, three ways
        assert "(fresh process): median" in proc.stdout
        if len(losses) > 1:
            assert report["linear_loss_check"]["equal_to_1e-5"]
            assert "losses agree to 1e-5: True" in proc.stdout


@pytest.mark.parametrize("out, message", [
    ("/dev/null/x.json", "--out: expected a file in an existing folder, but '/dev/null'"),
    ("no_such_folder/x.json", "--out: expected a file in an existing folder"),
    (".", "--out: expected a file to write, got the folder"),
])
def test_a_bad_out_is_refused_before_any_benchmark_runs(tmp_path, out, message):
    proc = run_bench("--quick", "--out", out, tmp_path=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
    assert "group_advantages" not in proc.stdout            # nothing was measured


def test_check_out_path_accepts_a_new_file_in_a_writable_folder(tmp_path):
    assert bench.check_out_path(str(tmp_path / "new.json")) is None
    (tmp_path / "old.json").write_text("{}")
    assert bench.check_out_path(str(tmp_path / "old.json")) is None


def test_summary_puts_the_fused_linear_loss_next_to_liger():
    L, shape = "fused linear GRPO fwd+bwd", [8, 512, 512, 32000]
    rows = [{"bench": L, "shape": shape, "impl": "fused", "median_s": 2.0, "peak_extra_bytes": 90},
            {"bench": L, "shape": shape, "impl": "liger", "median_s": 4.0, "peak_extra_bytes": 100},
            {"bench": L, "shape": shape, "impl": "eager", "median_s": 3.0,
             "peak_extra_bytes": 900}]
    (goal,) = bench.summary(rows)
    assert goal["time_vs_liger"] == 0.5 and goal["peak_vs_liger"] == 0.9 and goal["goal_met"]
    rows[0]["peak_extra_bytes"] = 101
    assert not bench.summary(rows)[0]["goal_met"]
    assert bench.summary([rows[0], {**rows[1], "error": "no liger"}]) == []


def test_summary_puts_the_fused_linear_loss_next_to_trls_fused_head():
    L, shape = "fused linear GRPO fwd+bwd", [8, 512, 512, 32000]
    rows = [{"bench": L, "shape": shape, "impl": "fused", "median_s": 3.0, "peak_extra_bytes": 90},
            {"bench": L, "shape": shape, "impl": "liger", "median_s": 4.0, "peak_extra_bytes": 100},
            {"bench": L, "shape": shape, "impl": "trl", "median_s": 2.0, "peak_extra_bytes": 300}]
    liger_goal, trl_goal = bench.summary(rows)
    assert "vs Liger" in liger_goal["what"] and liger_goal["goal_met"]
    assert "vs TRL 1.16.0's fused LM head" in trl_goal["what"]
    assert trl_goal["time_vs_trl_head"] == 1.5 and trl_goal["peak_vs_trl_head"] == 0.3
    assert not trl_goal["goal_met"]                                 # slower: not met
    assert "its CPU (torch fold) path" in trl_goal["what"] and "cpu_time_vs_trl_head" not in trl_goal
    assert len(bench.summary([rows[0], {**rows[2], "error": "no trl"}])) == 0
    # with CPU times and a CUDA row: the CPU-time ratio beside the goal, the Triton path named
    timed = [{**r, "cpu_times_s": [t], "device": "cuda"} for r, t in zip(rows, (1.0, 2.0, 4.0))]
    liger_goal, trl_goal = bench.summary(timed)
    assert liger_goal["cpu_time_vs_liger"] == 0.5 and trl_goal["cpu_time_vs_trl_head"] == 0.25
    assert "its Triton path" in trl_goal["what"]


@pytest.mark.parametrize("args, message", [
    (["--repeats", "3"], "--repeats: expected an integer in [5, "),
    (["--threads", "0"], "--threads: expected an integer in [1, "),
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


def assert_torch_rows_and_goals(report, stdout):
    """The TRL baselines, the torch mirror and the fused loss, measured in the same run, and
    the issue-13 goals next to them in the summary, the table and the JSON."""
    impls = {(r["bench"], tuple(r["shape"]), r["impl"]) for r in report["results"]}
    for shape in bench.QUICK_ADV_SIZES:
        for impl in ("torch copy", bench.TRL_ADV, bench.MIRROR_ADV):
            assert ("group_advantages", shape, impl) in impls
    for impl in ("torch copy", bench.TRL_LOSS, bench.MIRROR_LOSS, bench.FUSED_LOSS):
        assert ("grpo_loss fwd+bwd", bench.QUICK_LOSS_SIZE, impl) in impls
    assert not any("grpo_loss_eager" in impl for _, _, impl in impls)
    goals = {s["what"]: s for s in report["summary"]}
    N, T = bench.QUICK_LOSS_SIZE
    loss = goals[f"torch mirror loss vs TRL <=0.16 eager ({N}, {T}) fwd+bwd"]
    assert loss["goal_time_vs_trl"] == 1.2 and loss["goal_peak_vs_trl"] == 1.2
    assert loss["time_vs_trl"] > 0 and loss["peak_vs_trl"] > 0
    assert loss["goal_met"] == (loss["time_vs_trl"] <= 1.2 and loss["peak_vs_trl"] <= 1.2)
    fused = goals[f"fused loss vs TRL <=0.16 eager ({N}, {T}) fwd+bwd"]
    assert fused["goal_speedup"] == 3.0 and fused["goal_peak_fraction"] == pytest.approx(1 / 3)
    for B, G in bench.QUICK_ADV_SIZES:
        adv = goals[f"torch mirror advantages vs TRL's mean/std core ({B}, {G})"]
        assert adv["goal_time_vs_trl"] == 1.0
        assert adv["goal_met"] == (adv["time_vs_trl"] <= 1.0)
    assert "summary: torch mirror loss vs TRL <=0.16 eager" in stdout
    assert "time_vs_trl" in stdout and "(goal <= 1.2)" in stdout


def row(bench_name, shape, impl, times, peak):
    return {"bench": bench_name, "shape": list(shape), "impl": impl, "times_s": times,
            "ratio_to_copy": 1.0, "peak_extra_bytes": peak, "peak_extra_vs_output": 1.0}


def test_summary_pairs_each_round_with_the_trl_style_baseline():
    L = "grpo_loss fwd+bwd"
    rows = [row(L, (8, 16), bench.TRL_LOSS, [1.0, 2.0, 1.0], 100),
            row(L, (8, 16), bench.MIRROR_LOSS, [1.1, 2.2, 1.5], 110),   # 1.1, 1.1, 1.5
            row(L, (8, 16), bench.FUSED_LOSS, [0.25, 0.5, 0.5], 30),    # 4x, 4x, 2x faster
            row("group_advantages", (4, 8), bench.TRL_ADV, [2.0, 2.0, 2.0], 50),
            row("group_advantages", (4, 8), bench.MIRROR_ADV, [1.0, 3.0, 2.2], 40)]
    goals = {s["what"]: s for s in bench.summary(rows)}
    mirror = goals["torch mirror loss vs TRL <=0.16 eager (8, 16) fwd+bwd"]
    assert mirror["time_vs_trl"] == pytest.approx(1.1) and mirror["peak_vs_trl"] == 1.1
    assert mirror["goal_met"]
    fused = goals["fused loss vs TRL <=0.16 eager (8, 16) fwd+bwd"]
    assert fused["speedup"] == pytest.approx(4.0) and fused["peak_fraction_of_eager"] == 0.3
    assert fused["goal_met"]
    adv = goals["torch mirror advantages vs TRL's mean/std core (4, 8)"]
    assert adv["time_vs_trl"] == pytest.approx(1.1) and not adv["goal_met"]


def test_summary_says_a_goal_is_missed_when_memory_is_over():
    L = "grpo_loss fwd+bwd"
    rows = [row(L, (8, 16), bench.TRL_LOSS, [1.0] * 3, 100),
            row(L, (8, 16), bench.MIRROR_LOSS, [1.0] * 3, 121)]       # fast enough, too big
    (mirror,) = bench.summary(rows)
    assert mirror["peak_vs_trl"] == 1.21 and not mirror["goal_met"]


# --- issue 24: the shared --out check, bounded integers, prints in any encoding -----------------

@pytest.mark.parametrize("make, message", [
    (lambda tmp: "", "--out: expected a path, got '' (an empty name)"),
    (lambda tmp: str(tmp / "dangling"), "a symbolic link to"),
    (lambda tmp: "/proc/grpo-bench.json", "--out: expected a path outside /proc and /sys"),
])
def test_an_empty_dangling_or_virtual_out_is_refused_before_any_benchmark(make, message,
                                                                          tmp_path, capsys,
                                                                          monkeypatch):
    """Before: a dangling link and a file under /proc passed the check (os.access says yes to
    root), every benchmark ran, and the write ended in a traceback."""
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    monkeypatch.setattr(bench, "run", lambda **k: pytest.fail("a benchmark ran"))
    with pytest.raises(SystemExit) as info:
        bench.main(["--quick", "--out", make(tmp_path)])
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("args, message", [
    (["--threads", "1000000"], "--threads: expected an integer in [1, "),
    (["--threads", "0"], "--threads: expected an integer in [1, "),
    (["--repeats", "100000000"], "--repeats: expected an integer in [5, 1000]"),
])
def test_integer_options_are_bounded(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "run", lambda **k: pytest.fail("a benchmark ran"))
    with pytest.raises(SystemExit) as info:
        bench.main(["--quick", "--out", str(tmp_path / "b.json"), *args])
    assert info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a name that is not UTF-8")
@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_a_name_that_is_not_utf8_is_printed_escaped(encoding, tmp_path, monkeypatch):
    import io
    out = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.json")      # as sys.argv holds it
    report = {"environment": {"platform": "Linux", "cpu_count": 2, "numpy": "2",
                              "load_average_start": [0.0], "load_average_end": [0.0]},
              "results": [], "summary": []}
    monkeypatch.setattr(bench, "run", lambda **k: report)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding)       # strict, like a pipe
    monkeypatch.setattr(sys, "stdout", stdout)
    assert bench.main(["--quick", "--out", out]) == 0
    stdout.flush()
    assert b"wrote " + os.fsencode(tmp_path) + b"/caf\\udce9.json" in stdout.buffer.getvalue()
    assert json.loads(Path(out).read_text())["results"] == []


@pytest.mark.parametrize("options, message", [
    (dict(repeats=10**8), r"^repeats: expected an integer in \[5, 1000\]"),
    (dict(repeats=5, threads=10**6), r"^threads: expected an integer in \[1, \d+\] \(at most 4"),
    (dict(repeats=5, linear_repeats=0), r"^linear_repeats: expected an integer in \[1, 1000\]"),
    (dict(repeats=5, linear_jobs=0), r"^linear_jobs: expected an integer in \[1, 4\]"),
])
def test_run_bounds_its_integers_for_callers_in_python_too(options, message):
    with pytest.raises(ValueError, match=message):
        bench.run(quick=True, only=(), **options)


def test_trls_fused_head_path_equals_eager_loss_and_gradients():
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from grpo_lab.perf import bench_linear as bl
    inputs = bl.linear_inputs((3, 16, 8, 50), seed=2)
    out = {}
    for impl in ("trl", "eager"):
        loss = bl.step_function(impl, inputs)()
        out[impl] = (loss, inputs[0].grad.clone(), inputs[1].grad.clone())
    for a, b in zip(out["trl"], out["eager"]):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_shipped_full_size_record_is_four_fresh_processes_agreeing():
    from grpo_lab.perf import bench_linear as bl
    record = bl.RECORD
    assert "python -m grpo_lab.bench --only linear" in record["command"]
    assert [r["impl"] for r in record["results"]] == list(bl.IMPLS)
    assert all(r["shape"] == list(bl.LINEAR_SIZE) for r in record["results"])
    # a size where every peer tiles: N*T past TRL's 4096-token tile, V past its 32768 columns
    N, T, H, V = bl.LINEAR_SIZE
    assert N * T > 4096 and V > bl.TRL_CHUNK
    # the machine's load is recorded with every row, and the rows are CPU runs (TRL's torch
    # fold, not its Triton path)
    for r in record["results"]:
        if "error" in r:                              # a row that did not finish says so
            assert r["error"] and r["device"] == "cpu"
            continue
        assert r["device"] == "cpu" and len(r["load_average_start"]) == 3
        assert len(r["load_average_end"]) == 3 and r["median_s"] > 0
        assert len(r["cpu_times_s"]) == len(r["times_s"]) and min(r["cpu_times_s"]) > 0
    assert record["linear_loss_check"]["equal_to_1e-5"]
    assert record["summary"] == bench.summary(record["results"])      # the goals, recomputed
