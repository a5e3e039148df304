r"""``python -m grpo_lab.bench``: every implementation against a memory copy and TRL's code.

Taught in chapter 7 (``chapters/07_performance.ipynb``). A memory copy reads its input once and
writes its output once, as fast as the machine moves bytes: no kernel that reads an array and
writes one of the same size can beat it, so it is the floor. Every implementation is timed in
the same run as its copy, round by round (:mod:`grpo_lab.perf.measure` says how), and the
ratio reported is the median over rounds of (implementation time / copy time).

Benchmarks (sizes from issue 7; ``--quick`` runs small ones, for a smoke test or a chapter):

* ``group_advantages`` at (B, G) = (262144, 64) and (1048576, 8), float32: the plain formula
  in NumPy, :func:`grpo_lab.group_advantages`, :func:`grpo_lab.group_advantages_fast`, and on
  torch TRL's mean/std core :func:`trl_style_advantages` (without 1.16.0's NaN handling)
  next to the torch mirror
  :func:`grpo_lab.torch.group_advantages` (both Bessel-corrected, eps = 1e-4).
* the GRPO loss, forward plus backward, at (N, T) = (512, 2048), float32: the eager loss of
  TRL's default up to 0.16 (per-sequence "grpo" aggregation, beta 0.04, k3), :func:`trl_style_loss`, the torch mirror :func:`grpo_lab.torch.grpo_loss` and the fused
  :func:`grpo_lab.perf.loss_fused.grpo_loss_fused`, on the same :func:`loss_inputs`.
* the loss from hidden states, forward plus backward, at (N, T, H, V) = (8, 512, 512, 32000),
  float32, each implementation in a fresh process: this package's fused LM head and loss,
  Liger-Kernel 0.8.5's ``LigerFusedLinearGRPOLoss``, TRL 1.16.0's own fused LM head
  (``trl.kernels.ChunkedLogProbFunction``, the path GRPOTrainer takes on a CPU), and eager code
  that holds the (N, T, V) logits (:mod:`grpo_lab.perf.bench_linear`); the same inputs, the
  same loss to 1e-5.

The summary puts each goal next to what was measured: the fast path within 2x (G = 64) or 3x
(G = 8) of a copy, like against like (returning a new array against ``np.copy``, which also
gets fresh pages from the operating system; writing into ``out=`` against ``np.copyto`` into an
array already there), with at most 1.1x the output in memory; the fused loss 3x faster than the
TRL-style loss in a third of its memory; the torch mirror within 1.2x of the TRL-style loss in
time and peak memory, and its advantages no slower than TRL's core; the fused linear loss
no slower than Liger's or TRL's fused head and no larger in peak memory.

Usage::

    python -m grpo_lab.bench                    # full sizes, CPU, JSON to bench_results.json
    python -m grpo_lab.bench --quick --out q.json
    python -m grpo_lab.bench --only linear      # the loss from hidden states alone, four ways
    python -m grpo_lab.bench --device cuda      # torch parts on the GPU (NumPy stays on CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.perf.advantages_fast import group_advantages_fast
from grpo_lab.perf.bench_linear import LINEAR_SIZE, QUICK_LINEAR_SIZE, bench_fused_linear
from grpo_lab.perf.baselines import (TRL_EPS, loss_inputs, plain_advantages,
                                     trl_style_advantages, trl_style_loss)
from grpo_lab.perf.goals import (COPY, COPY_NEW, FUSED_LOSS, GOAL_KEYS, MIRROR_ADV,
                                  MIRROR_LOSS, NUMPY_FAST, NUMPY_FAST_OUT, NUMPY_PLAIN,
                                  NUMPY_REF, TORCH_COPY, TRITON_ADV, TRITON_LOSS, TRL_ADV,
                                  TRL_LOSS, summary)
from grpo_lab.numerics.command_line import THREADS_PER_CPU, check_out_path, echo, max_threads
from grpo_lab.numerics.validate import check_int
from grpo_lab.perf.measure import (forward_backward, peak_bytes_numpy, peak_bytes_torch,
                                   result_rows, time_round_robin, torch_mirror, torch_or_none)

__all__ = ["ADV_SIZES", "LINEAR_SIZE", "LOSS_SIZE", "QUICK_ADV_SIZES", "QUICK_LOSS_SIZE",
           "TRL_EPS", "bench_advantages", "bench_loss", "check_out_path", "check_run_options",
           "loss_inputs", "main", "plain_advantages", "print_report", "run", "summary",
           "trl_style_advantages", "trl_style_loss"]

ADV_SIZES = [(262144, 64), (1048576, 8)]       # (B, G) float32
LOSS_SIZE = (512, 2048)                         # (N, T) = (B*G, T)
QUICK_ADV_SIZES = [(4096, 64), (16384, 8)]
QUICK_LOSS_SIZE = (64, 256)
MIN_REPEATS = 5
MAX_REPEATS = 1000


# --- the benchmarks ----------------------------------------------------------------------------

def _torch_rows(bench, shape, fns, repeats, device, out_bytes, reset=lambda: None):
    """Peak memory (after a warm-up, ``reset()`` before each) and interleaved times of ``fns``."""
    import torch
    for fn in fns.values():
        fn()
    peaks = {}
    for name, fn in fns.items():
        if name != TORCH_COPY:
            reset()
            peaks[name] = peak_bytes_torch(fn, device)
    times = time_round_robin(fns, repeats, torch.cuda.synchronize if device == "cuda" else None)
    return result_rows(bench, shape, times, peaks, out_bytes, dict.fromkeys(fns, device),
                       TORCH_COPY)


def bench_advantages(shape, repeats, device="cpu", seed=0):
    """Every group_advantages at (B, G) float32, each against a copy of its size; JSON rows."""
    B, G = shape
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    rewards = rng.normal(size=shape).astype(np.float32)                 # (B, G)
    out, fast_out = np.empty_like(rewards), np.empty_like(rewards)
    fns = {COPY: lambda: np.copyto(out, rewards),
           COPY_NEW: lambda: np.copy(rewards),
           NUMPY_PLAIN: lambda: plain_advantages(rewards),
           NUMPY_REF: lambda: group_advantages(rewards),
           NUMPY_FAST: lambda: group_advantages_fast(rewards),
           NUMPY_FAST_OUT: lambda: group_advantages_fast(rewards, out=fast_out)}
    for fn in fns.values():              # warm-up first: Numba compiles (or loads) its kernel
        fn()
    peaks = {name: peak_bytes_numpy(fn) for name, fn in fns.items()
             if name not in (COPY, COPY_NEW)}
    times = time_round_robin(fns, repeats)
    rows = result_rows("group_advantages", shape, times, peaks, rewards.nbytes,
                       dict.fromkeys(fns, "cpu"))
    torch = torch_or_none()
    if torch is None:
        return rows
    flat = torch.from_numpy(rewards.reshape(-1)).to(device)                       # (B*G,)
    flat_out, mirror = torch.empty_like(flat), torch_mirror("group_advantages")
    tfns = {TORCH_COPY: lambda: flat_out.copy_(flat),
            TRL_ADV: lambda: trl_style_advantages(flat, G),
            MIRROR_ADV: lambda: mirror(flat.view(B, G), TRL_EPS, ddof=1)}          # the same std
    if device == "cuda":                         # the Triton kernel, compiled for the GPU
        from grpo_lab.torch.triton_kernels import group_advantages_triton
        tfns[TRITON_ADV] = lambda: group_advantages_triton(flat.view(B, G), TRL_EPS, ddof=1)
    return rows + _torch_rows("group_advantages", shape, tfns, repeats, device, rewards.nbytes)


def bench_loss(shape, repeats, device="cpu", seed=0):
    """The GRPO loss, forward + backward: TRL <=0.16's eager loss, torch mirror, fused; JSON rows."""
    import torch

    from grpo_lab.perf.loss_fused import grpo_loss_fused
    logp, old, ref, adv, mask = loss_inputs(shape, device, seed)
    leaf = logp.clone().requires_grad_()
    copy_out = torch.empty_like(logp)

    def step(loss_fn):
        return forward_backward(loss_fn, leaf, old, ref, adv, mask)

    def reset():
        leaf.grad = None

    fns = {TORCH_COPY: lambda: copy_out.copy_(logp), TRL_LOSS: step(trl_style_loss),
           MIRROR_LOSS: step(torch_mirror("grpo_loss")), FUSED_LOSS: step(grpo_loss_fused)}
    if device == "cuda":
        from grpo_lab.torch.triton_kernels import grpo_loss_triton
        fns[TRITON_LOSS] = step(grpo_loss_triton)
    return _torch_rows("grpo_loss fwd+bwd", shape, fns, repeats, device,
                       logp.numel() * logp.element_size(), reset)


# --- the command ---------------------------------------------------------------------------------

def _environment(quick, repeats, device):
    info = {"python": sys.version.split()[0], "numpy": np.__version__,
            "platform": platform.platform(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "quick": quick, "repeats": repeats,
            "device": device, "load_average_start": list(os.getloadavg()),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}
    torch = torch_or_none()
    if torch is not None:
        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
        if device == "cuda":
            info["gpu"] = torch.cuda.get_device_name()
    return info


def check_run_options(repeats, threads, linear_repeats=3, linear_jobs=1):
    """``(repeats, threads, linear_repeats, linear_jobs)`` checked, with the reasons for their
    bounds."""
    repeats = check_int("repeats", repeats, minimum=MIN_REPEATS, maximum=MAX_REPEATS,
                        why=" (medians of fewer runs are noise on a shared machine; each round "
                            "of the full sizes takes seconds)")
    linear_repeats = check_int("linear_repeats", linear_repeats, minimum=1,
                               maximum=MAX_REPEATS, why=" (each takes seconds at full size)")
    if threads is not None:
        threads = check_int("threads", threads, minimum=1, maximum=max_threads(),
                            why=f" (at most {THREADS_PER_CPU} per CPU, {os.cpu_count()} here: "
                                f"more only wait for each other)")
    linear_jobs = check_int("linear_jobs", linear_jobs, minimum=1, maximum=4,
                            why=" (one process per implementation of the loss from hidden states)")
    return repeats, threads, linear_repeats, linear_jobs


def run(*, quick=False, repeats=7, device="cpu", only=("advantages", "loss", "linear"),
        threads=None, adv_sizes=None, loss_size=None, linear_size=None, linear_repeats=3,
        linear_jobs=1):
    """Run the benchmarks and return ``{"environment", "results", "summary"}`` (JSON-ready).

    ``adv_sizes`` (a list of (B, G)), ``loss_size`` ((N, T)) and ``linear_size`` ((N, T, H, V))
    replace the full sizes, or the quick ones with ``quick=True``; ``threads`` defaults to 1 on
    CPU (see ``--threads``); ``linear_repeats`` timed steps of the loss from hidden states (each
    takes seconds at the full size); ``linear_jobs`` of its fresh processes side by side.
    """
    repeats, threads, linear_repeats, linear_jobs = check_run_options(repeats, threads,
                                                                      linear_repeats, linear_jobs)
    torch = torch_or_none()
    if threads is None and device == "cpu":
        threads = 1
    if threads is not None and torch is not None:
        torch.set_num_threads(threads)
    env = _environment(quick, repeats, device)
    rows = []
    if "advantages" in only:
        for shape in adv_sizes or (QUICK_ADV_SIZES if quick else ADV_SIZES):
            rows += bench_advantages(tuple(shape), repeats, device)
    if "loss" in only and torch is not None:
        rows += bench_loss(tuple(loss_size or (QUICK_LOSS_SIZE if quick else LOSS_SIZE)),
                           repeats, device)
    if "linear" in only and torch is not None:
        rows += bench_fused_linear(tuple(linear_size or (QUICK_LINEAR_SIZE if quick
                                                         else LINEAR_SIZE)),
                                   linear_repeats, threads=threads or 1, device=device,
                                   jobs=linear_jobs)
    env["load_average_end"] = list(os.getloadavg())
    report = {"environment": env, "results": rows, "summary": summary(rows)}
    losses = [r["loss"] for r in rows if r["bench"].startswith("fused linear") and "error" not in r]
    if losses:                  # the same inputs in every process: the same loss, to 1e-5
        spread = max(losses) - min(losses)
        report["linear_loss_check"] = {"implementations": len(losses), "max_difference": spread,
                                       "equal_to_1e-5": bool(spread <= 1e-5)}
    return report


def print_report(report, file=None):
    """The report as a table, then each goal next to what was measured."""
    env = report["environment"]
    echo(f"grpo_lab.bench on {env['platform']} ({env['cpu_count']} CPUs), numpy "
          f"{env['numpy']}, torch {env.get('torch', 'absent')}; load average "
          f"{env['load_average_start'][0]:.2f} -> {env['load_average_end'][0]:.2f}", file=file)
    echo(f"{'bench':18s} {'shape':>14s} {'implementation':48s} {'dev':4s} {'median ms':>10s} "
          f"{'x copy':>7s} {'peak MiB':>9s} {'x out':>6s}", file=file)
    for r in report["results"]:
        if "ratio_to_copy" not in r:                       # the loss from hidden states
            continue
        peak, vs_out = r["peak_extra_bytes"], r["peak_extra_vs_output"]
        echo(f"{r['bench']:18s} {str(tuple(r['shape'])):>14s} {r['impl']:48s} {r['device']:4s} "
              f"{r['median_s'] * 1e3:10.2f} {r['ratio_to_copy']:7.2f} "
              f"{'' if peak is None else f'{peak / 2**20:.1f}':>9s} "
              f"{'' if vs_out is None else f'{vs_out:.2f}':>6s}", file=file)
    linear = [r for r in report["results"] if r["bench"].startswith("fused linear")]
    for r in linear:
        what = (f"error: {r['error']}" if "error" in r else
                f"median {r['median_s']:.3f} s, peak {r['peak_extra_bytes'] / 2**20:.1f} MiB")
        echo(f"{r['bench']} {tuple(r['shape'])} {r['impl']:6s} (fresh process): {what}",
              file=file)
    check = report.get("linear_loss_check")
    if check:
        echo(f"fused linear GRPO fwd+bwd: the {check['implementations']} losses agree to 1e-5: "
             f"{check['equal_to_1e-5']} (largest difference {check['max_difference']:.1e})",
             file=file)
    for s in report["summary"]:
        checks = ", ".join(f"{key} {s[key]:.3g} (goal {'>=' if key == 'speedup' else '<='} "
                           f"{s[GOAL_KEYS[key]]:.3g})" for key in GOAL_KEYS if key in s)
        echo(f"summary: {s['what']}: {checks}: {'met' if s['goal_met'] else 'NOT met'}",
              file=file)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m grpo_lab.bench",
        description="Each group_advantages and GRPO loss implementation against a memory copy "
                    "of the same size, the torch mirror against TRL's code, and the loss from "
                    "hidden states against Liger's and TRL 1.16.0's fused heads; "
                    "writes JSON.")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--repeats", type=int, default=7,
                        help=f"timed rounds, {MIN_REPEATS} to {MAX_REPEATS} (default 7)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the torch implementations run (NumPy runs on the CPU)")
    parser.add_argument("--only", choices=("advantages", "loss", "linear"), action="append",
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads for the torch implementations (default on "
                             "CPU: 1, like NumPy's element-wise loops and the copy; a shared "
                             "machine makes multi-threaded timings erratic)")
    parser.add_argument("--linear-repeats", type=int, default=3,
                        help="timed steps of the loss from hidden states in each fresh process, "
                             "after a warm-up and a profiled step (default 3; each step takes "
                             "seconds to a minute at the full size on a loaded CPU)")
    parser.add_argument("--linear-jobs", type=int, default=1, choices=range(1, 5),
                        metavar="{1,2,3,4}",
                        help="fresh processes of the loss from hidden states run side by side "
                             "(default 1, one after the other; 4 measures the four under the "
                             "same load)")
    parser.add_argument("--out", default="bench_results.json", help="the JSON file to write")
    args = parser.parse_args(argv)
    problem = check_out_path(args.out, "file")
    if problem:                                          # before minutes of benchmarks
        parser.error(f"--out: {problem}")
    try:
        check_run_options(args.repeats, args.threads, args.linear_repeats, args.linear_jobs)
    except ValueError as exc:                            # "repeats: expected ..." -> --repeats
        name, rest = str(exc).split(":", 1)
        parser.error(f"--{name.replace('_', '-')}:{rest}")
    if args.device == "cuda":
        torch = torch_or_none()
        if torch is None or not torch.cuda.is_available():
            parser.error("--device cuda: expected torch with a CUDA device, got "
                         + ("no torch" if torch is None else "no CUDA device"))
    report = run(quick=args.quick, repeats=args.repeats, device=args.device,
                 only=tuple(args.only or ("advantages", "loss", "linear")), threads=args.threads,
                 linear_repeats=args.linear_repeats, linear_jobs=args.linear_jobs)
    print_report(report)
    try:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    except OSError as exc:                    # checked at the start; changed since
        parser.error(f"--out: cannot write to {args.out!r}: {exc.strerror or exc}")
    echo(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
