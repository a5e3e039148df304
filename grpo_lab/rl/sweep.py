"""``python -m grpo_lab.sweep``: the default run's promise, measured across seeds and threads.

Chapter 6 and the README promise that the command line's default run
(``python -m grpo_lab.train``) ends at 90% held-out accuracy or more. One run proves nothing
about a reader's machine: torch's CPU kernels round differently with the thread count (a
reduction split over 2 threads adds in another order than over 1) and with the CPU's vector
width (ATen and MKL pick AVX-512 or AVX2 code at run time), and 450 steps of sampling amplify a
last-bit difference into a different run. Within one process layout the run is reproducible:
the same seed, thread count and CPU capability give the same weights bit for bit, process after
process (tests/rl/test_sweep.py checks it on a short run).

So the promise is measured over the cases a reader can meet, each run in a fresh process::

    python -m grpo_lab.sweep --seeds 0-4 --threads 1,2 --capabilities default,AVX2

prints one line per run and the spread (min / median / max) of the held-out accuracy and the
format rate, and writes them to ``--out``/sweep.json. ``--capabilities`` sets
``ATEN_CPU_CAPABILITY`` (torch's kernel choice) and the matching ``MKL_CBWR`` branch for each
run; ``default`` leaves both to the machine. ``--jobs 2`` runs two single-thread runs at once
(the result does not depend on it: each run is deterministic for its layout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grpo_lab.numerics.command_line import check_out_path, echo, max_threads

__all__ = ["CAPABILITIES", "RECORD", "load_record", "parse_ints", "run_case", "spread", "main"]

#: CPU capability -> the environment that makes torch (ATen) and MKL use that code path.
CAPABILITIES = {
    "default": {},
    "AVX512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512"},
    "AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "DEFAULT": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
MAX_SEEDS = 1000                    # a sweep of more runs than this is a typo, not a plan
#: The sweep behind the promise, as the command wrote it (its sweep.json), with the command,
#: the commit and the CPU it ran on. Chapter 6 and tests/rl/test_default_run.py read it.
RECORD = Path(__file__).with_name("default_sweep.json")


def load_record(path=RECORD) -> dict:
    """The recorded sweep: ``runs`` (one dict per run) and the spreads, plus ``measured``
    (the command, the commit, the CPU and the date it was measured with)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def parse_ints(name: str, text: str, *, low: int, high: int) -> list[int]:
    """``"0-4"`` or ``"1,2"`` (or both, ``"0-2,7"``) as a list of ints in [low, high].

    >>> parse_ints("seeds", "0-2,7", low=0, high=99)
    [0, 1, 2, 7]
    """
    values = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            lo, hi = int(first), int(last) if dash else int(first)
        except ValueError:
            raise ValueError(f"{name}: expected integers like 0-4 or 1,2, got {text!r}") from None
        if not low <= lo <= hi <= high:
            raise ValueError(f"{name}: expected values from {low} to {high}, low before high, "
                             f"got {part.strip()!r}")
        values.extend(range(lo, hi + 1))
    if len(values) > MAX_SEEDS:
        raise ValueError(f"{name}: at most {MAX_SEEDS} values, got {len(values)}")
    return values


def run_case(seed: int, threads: int, capability: str, out: Path, extra=()) -> dict:
    """One default run in a fresh process; its summary plus the case that produced it."""
    folder = out / f"seed{seed}-threads{threads}-{capability}"
    # OpenMP's idle threads sleep instead of spinning (unless the caller chose otherwise): two
    # two-thread runs side by side on two cores spun each other down (one run 488 s, with
    # PASSIVE 165 s, the same 95.2% bit for bit); the policy changes waiting, not arithmetic
    env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ, **CAPABILITIES[capability]}
    cmd = [sys.executable, "-m", "grpo_lab.train", "--quiet", "--seed", str(seed),
           "--threads", str(threads), "--out", str(folder), *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    case = {"seed": seed, "threads": threads, "capability": capability,
            "returncode": proc.returncode}
    if proc.returncode != 0:
        return {**case, "error": proc.stderr[-2000:]}
    summary = json.loads((folder / "summary.json").read_text())
    return {**case, **{k: summary[k] for k in ("start_held_out_accuracy",
                                               "final_held_out_accuracy",
                                               "final_held_out_format", "seconds")}}


def spread(values) -> dict:
    """min, median and max of ``values``."""
    values = list(values)
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_lab.sweep",
        description="Run the default training run (python -m grpo_lab.train) once per seed, "
                    "thread count and CPU capability, each in a fresh process, and print the "
                    "spread of its held-out accuracy and format rate (chapter 6's promise).")
    p.add_argument("--seeds", default="0-4", help="seeds, e.g. 0-4 or 0,3 (default: 0-4)")
    p.add_argument("--threads", default="1,2", help="torch thread counts (default: 1,2)")
    p.add_argument("--capabilities", default="default",
                   help=f"CPU code paths, from {', '.join(CAPABILITIES)} (default: default)")
    p.add_argument("--jobs", type=int, default=1, choices=range(1, 9), metavar="1..8",
                   help="runs at once (default: 1)")
    p.add_argument("--out", default=None, help="folder for the runs and sweep.json "
                                               "(default: a temporary folder)")
    return p


def main(argv=None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)    # the rest goes to every run (--steps 100)
    try:
        seeds = parse_ints("--seeds", args.seeds, low=0, high=2**31 - 1)
        threads = parse_ints("--threads", args.threads, low=1, high=max_threads())  # as train
    except ValueError as exc:
        parser.error(str(exc))
    capabilities = [c.strip() for c in args.capabilities.split(",")]
    for c in capabilities:
        if c not in CAPABILITIES:
            parser.error(f"argument --capabilities: expected some of {', '.join(CAPABILITIES)}, "
                         f"got {c!r}")
    problem = None if args.out is None else check_out_path(args.out, "folder")
    if problem:                                   # the one --out check (grpo_lab.train's too)
        parser.error(f"argument --out: {problem}")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="grpo-sweep-"))
    out.mkdir(parents=True, exist_ok=True)
    cases = [(s, t, c) for c in capabilities for t in threads for s in seeds]
    echo(f"{len(cases)} runs into {out}", flush=True)
    results = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for r in pool.map(lambda case: run_case(*case, out, extra), cases):
            results.append(r)
            if "error" in r:
                echo(f"seed {r['seed']} threads {r['threads']} {r['capability']}: FAILED "
                     f"(exit {r['returncode']})\n{r['error']}", flush=True)
            else:
                echo(f"seed {r['seed']:>3} threads {r['threads']} {r['capability']:>7}: "
                     f"held-out {r['start_held_out_accuracy']:.1%} -> "
                     f"{r['final_held_out_accuracy']:.1%}, format "
                     f"{r['final_held_out_format']:.3f}, {r['seconds']:.1f} s", flush=True)
    done = [r for r in results if "error" not in r]
    report = {"runs": results}
    if done:
        report["final_held_out_accuracy"] = spread(r["final_held_out_accuracy"] for r in done)
        report["final_held_out_format"] = spread(r["final_held_out_format"] for r in done)
        acc, fmt = report["final_held_out_accuracy"], report["final_held_out_format"]
        echo(f"{len(done)} of {len(results)} runs finished; held-out accuracy min "
             f"{acc['min']:.1%}, median {acc['median']:.1%}, max {acc['max']:.1%}; format "
             f"min {fmt['min']:.3f}; runs at 90% or more: "
             f"{sum(r['final_held_out_accuracy'] >= 0.9 for r in done)} of {len(done)}")
    (out / "sweep.json").write_text(json.dumps(report, indent=1))
    return 0 if len(done) == len(results) else 1
