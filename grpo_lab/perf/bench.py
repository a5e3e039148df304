r"""``python -m grpo_lab.bench``: each implementation against a memory copy of the same size.

Taught in chapter 7 (``chapters/07_performance.ipynb``). A memory copy of an array reads it
once and writes it once, as fast as the machine moves bytes: no kernel that has to read its
input and write an output of the same size can beat it, so it is the floor to measure against.
Every implementation is timed in the same run as its copy, round by round (copy, then each
implementation, repeated), so a machine that slows down slows all of them alike; the ratio
reported is the median over rounds of (implementation time / copy time).

Benchmarks (sizes from issue 7; ``--quick`` runs small ones, for a smoke test or a chapter):

* ``group_advantages`` at (B, G) = (262144, 64) and (1048576, 8), float32: the plain formula
  in NumPy, :func:`grpo_lab.group_advantages` (the reference), :func:`grpo_lab.group_advantages_fast`,
  and with torch an eager composition in the style of TRL (``repeat_interleave``).
* the GRPO loss, forward plus backward, at (B*G, T) = (512, 2048), float32: the eager
  composition :func:`grpo_lab.perf.loss_fused.grpo_loss_eager` (TRL's way) and the fused
  :func:`grpo_lab.perf.loss_fused.grpo_loss_fused`; also ``grpo_lab.torch.grpo_loss`` if present.

Peak extra memory is what a call allocates at its highest point, its result included:
``tracemalloc`` for NumPy (NumPy reports its array buffers to it); for torch on CUDA the
caching allocator's ``max_memory_allocated`` after ``reset_peak_memory_stats``; for torch on
CPU, which keeps no such counter, the running sum of the allocations and frees that
``torch.profiler`` records with ``profile_memory=True``.

Usage::

    python -m grpo_lab.bench                    # full sizes, CPU, JSON to bench_results.json
    python -m grpo_lab.bench --quick --out q.json
    python -m grpo_lab.bench --device cuda      # torch parts on the GPU (NumPy stays on CPU)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc

import numpy as np

from grpo_lab.perf import advantages_fast
from grpo_lab.core.advantages import group_advantages

__all__ = ["ADV_SIZES", "LOSS_SIZE", "QUICK_ADV_SIZES", "QUICK_LOSS_SIZE", "plain_advantages",
           "print_report", "run", "trl_style_advantages", "main"]

ADV_SIZES = [(262144, 64), (1048576, 8)]       # (B, G) float32, from issue 7
LOSS_SIZE = (512, 2048)                         # (B*G, T)
QUICK_ADV_SIZES = [(4096, 64), (16384, 8)]
QUICK_LOSS_SIZE = (64, 256)
MIN_REPEATS = 5
TRL_EPS = 1e-4                                  # TRL adds 1e-4 to the std


# --- the baselines ----------------------------------------------------------------------------

def plain_advantages(rewards, eps=1e-8):
    """The formula as written, in the rewards' dtype: (r - mean) / (std + eps), row by row.

    Three reductions and three full-size temporaries; in float32 the squares inside ``std``
    overflow for rewards above about 1e19 (chapter 1). A baseline, not for use.
    """
    mean = rewards.mean(axis=1, keepdims=True)                 # (B, 1)
    std = rewards.std(axis=1, keepdims=True)                   # (B, 1)
    return (rewards - mean) / (std + eps)                      # (B, G)


def trl_style_advantages(rewards, G, eps=TRL_EPS):
    """Group advantages the way TRL's ``GRPOTrainer`` composes them, on a flat torch tensor.

    ``rewards`` is (B*G,), the groups side by side. The group statistics are computed on a
    (B, G) view and then *repeated* back to (B*G,) with ``repeat_interleave`` before the
    subtraction and the division: two more full-size tensors than the broadcast needs.
    ``torch.std`` is Bessel-corrected, so this equals ``group_advantages(ddof=1, eps=1e-4)``.
    (Written after the description in TRL's ``_generate_and_score_completions``; not copied.)
    """
    mean_grouped = rewards.view(-1, G).mean(dim=1)             # (B,)
    std_grouped = rewards.view(-1, G).std(dim=1)               # (B,)
    mean_grouped = mean_grouped.repeat_interleave(G, dim=0)    # (B*G,)
    std_grouped = std_grouped.repeat_interleave(G, dim=0)      # (B*G,)
    return (rewards - mean_grouped) / (std_grouped + eps)      # (B*G,)


# --- measuring ---------------------------------------------------------------------------------

def _round_robin(fns, repeats, sync):
    """Time each callable ``repeats`` times, interleaved; returns {name: [seconds, ...]}."""
    for fn in fns.values():                                    # warm-up: caches, allocators
        fn()
        sync()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - start)
    return times


def _peak_numpy(fn):
    """Peak bytes NumPy allocates during ``fn()`` (result included), by tracemalloc."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del result
    return peak


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ side logs its start and stop there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _peak_torch(fn, device):
    """Peak bytes torch allocates during ``fn()`` on ``device`` (see the module docstring)."""
    import torch
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del result
        return peak
    from torch.profiler import ProfilerActivity, profile
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    del result
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:                  # allocations are positive, frees negative
        current += nbytes
        peak = max(peak, current)
    return peak


def _rows(bench, shape, times, peaks, out_bytes, devices, copy_name="copy"):
    """One result row per implementation: median time, median ratio to the copy, memory."""
    rows = []
    copy = times[copy_name]
    for name, ts in times.items():
        ratios = [t / c for t, c in zip(ts, copy)]
        rows.append({
            "bench": bench, "shape": list(shape), "impl": name, "device": devices[name],
            "median_s": statistics.median(ts), "times_s": ts,
            "ratio_to_copy": statistics.median(ratios),
            "peak_extra_bytes": peaks.get(name),
            "peak_extra_vs_output": (None if peaks.get(name) is None
                                     else peaks[name] / out_bytes),
            "output_bytes": out_bytes,
        })
    return rows


def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_mirror(name):
    """``grpo_lab.torch.<name>`` if the torch path provides it, else None."""
    try:
        import grpo_lab.torch as glt
    except ImportError:
        return None
    return getattr(glt, name, None)


def bench_advantages(shape, repeats, device, seed=0):
    """group_advantages implementations at (B, G) float32, each against a copy of its size."""
    B, G = shape
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=shape).astype(np.float32)        # (B, G)
    out = np.empty_like(rewards)
    fns = {
        "copy": lambda: np.copyto(out, rewards),
        "numpy plain formula": lambda: plain_advantages(rewards),
        "numpy reference (gl.group_advantages)": lambda: group_advantages(rewards),
        "numpy fast (gl.group_advantages_fast)": lambda: advantages_fast.group_advantages_fast(
            rewards),
    }
    devices = dict.fromkeys(fns, "cpu")
    peaks = {name: _peak_numpy(fn) for name, fn in fns.items() if name != "copy"}
    times = _round_robin(fns, repeats, lambda: None)
    rows = _rows("group_advantages", shape, times, peaks, rewards.nbytes, devices)

    torch = _torch_or_none()
    if torch is not None:
        flat = torch.from_numpy(rewards.reshape(-1)).to(device)    # (B*G,)
        flat_out = torch.empty_like(flat)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        tfns = {"torch copy": lambda: flat_out.copy_(flat),
                "torch eager, TRL style": lambda: trl_style_advantages(flat, G)}
        mirror = _torch_mirror("group_advantages")
        if mirror is not None:
            rewards_t = flat.view(B, G)
            tfns["torch mirror (grpo_lab.torch)"] = lambda: mirror(rewards_t)
        tpeaks = {name: _peak_torch(fn, device) for name, fn in tfns.items() if name != "torch copy"}
        ttimes = _round_robin(tfns, repeats, sync)
        rows += _rows("group_advantages", shape, ttimes, tpeaks, rewards.nbytes,
                      dict.fromkeys(tfns, device), copy_name="torch copy")
    return rows


def _loss_inputs(shape, device, seed=0):
    """Seeded per-token log-probs, advantages and a padded mask (prefixes of random length)."""
    import torch
    N, T = shape
    gen = torch.Generator().manual_seed(seed)
    logp = -2.0 + 0.3 * torch.randn(N, T, generator=gen)
    old = logp + 0.05 * torch.randn(N, T, generator=gen)
    ref = logp + 0.05 * torch.randn(N, T, generator=gen)
    adv = torch.randn(N, generator=gen)
    lengths = torch.randint(T // 4, T + 1, (N,), generator=gen)
    mask = torch.arange(T)[None, :] < lengths[:, None]            # (N, T) valid prefix
    return [t.to(device) for t in (logp, old, ref, adv, mask)]


def bench_loss(shape, repeats, device, seed=0):
    """The GRPO loss, forward + backward, eager vs fused (vs the torch mirror, if present)."""
    import torch

    from grpo_lab.perf import loss_fused
    logp, old, ref, adv, mask = _loss_inputs(shape, device, seed)
    leaf = logp.clone().requires_grad_()
    copy_out = torch.empty_like(logp)

    def step(fn):
        def run_once():
            leaf.grad = None
            loss, _ = fn(leaf, old, ref, adv, mask)
            loss.backward()
            return leaf.grad
        return run_once

    fns = {"torch copy": lambda: copy_out.copy_(logp),
           "eager, TRL style (loss_fused.grpo_loss_eager)": step(loss_fused.grpo_loss_eager),
           "fused (loss_fused.grpo_loss_fused)": step(loss_fused.grpo_loss_fused)}
    mirror = _torch_mirror("grpo_loss")
    if mirror is not None:
        fns["torch mirror (grpo_lab.torch.grpo_loss)"] = step(mirror)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for fn in fns.values():
        fn()
    peaks = {}
    for name, fn in fns.items():
        if name != "torch copy":
            leaf.grad = None
            peaks[name] = _peak_torch(fn, device)
    times = _round_robin(fns, repeats, sync)
    return _rows("grpo_loss fwd+bwd", shape, times, peaks, logp.numel() * logp.element_size(),
                 dict.fromkeys(fns, device), copy_name="torch copy")


def _environment(args):
    info = {"python": sys.version.split()[0], "numpy": np.__version__,
            "platform": platform.platform(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "quick": args.quick, "repeats": args.repeats,
            "device": args.device, "load_average_start": list(os.getloadavg()),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}
    torch = _torch_or_none()
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if args.device == "cuda":
            info["gpu"] = torch.cuda.get_device_name()
    return info


def _summary(rows):
    """The issue's goals, side by side with what was measured."""
    def find(bench, shape, impl):
        for row in rows:
            if row["bench"] == bench and row["shape"] == list(shape) and impl in row["impl"]:
                return row
        return None
    summary = []
    for row in rows:
        if row["impl"].startswith("numpy fast"):
            goal = 2.0 if row["shape"][1] >= 64 else 3.0
            summary.append({"what": f"group_advantages_fast {tuple(row['shape'])}",
                            "ratio_to_copy": row["ratio_to_copy"], "goal_ratio": goal,
                            "peak_vs_output": row["peak_extra_vs_output"], "goal_peak": 1.1})
    fused = [r for r in rows if r["impl"].startswith("fused")]
    for row in fused:
        eager = find(row["bench"], row["shape"], "eager")
        summary.append({
            "what": f"fused loss vs eager {tuple(row['shape'])} fwd+bwd",
            "speedup": statistics.median(e / f for e, f in zip(eager["times_s"], row["times_s"])),
            "goal_speedup": 3.0,
            "peak_fraction_of_eager": row["peak_extra_bytes"] / eager["peak_extra_bytes"],
            "goal_peak_fraction": 1 / 3})
    return summary


def run(*, quick=False, repeats=7, device="cpu", only=("advantages", "loss"), threads=None,
        adv_sizes=None, loss_size=None):
    """Run the benchmarks and return ``{"environment", "results", "summary"}`` (JSON-ready).

    ``adv_sizes`` (a list of (B, G)) and ``loss_size`` ((N, T)) replace the issue's sizes, or
    the quick ones with ``quick=True``; ``threads`` defaults to 1 on CPU (see ``--threads``).
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats: expected at least {MIN_REPEATS}, got {repeats}")
    args = argparse.Namespace(quick=quick, repeats=repeats, device=device)
    torch = _torch_or_none()
    if threads is None and device == "cpu":
        threads = 1
    if threads is not None and torch is not None:
        torch.set_num_threads(threads)
    env = _environment(args)
    rows = []
    if "advantages" in only:
        for shape in adv_sizes or (QUICK_ADV_SIZES if quick else ADV_SIZES):
            rows += bench_advantages(tuple(shape), repeats, device)
    if "loss" in only and torch is not None:
        rows += bench_loss(tuple(loss_size or (QUICK_LOSS_SIZE if quick else LOSS_SIZE)),
                           repeats, device)
    env["load_average_end"] = list(os.getloadavg())
    return {"environment": env, "results": rows, "summary": _summary(rows)}


def print_report(report, file=sys.stdout):
    """The report as a table, then the summary against the issue's goals."""
    env = report["environment"]
    print(f"grpo_lab.bench on {env['platform']} ({env['cpu_count']} CPUs), numpy "
          f"{env['numpy']}, torch {env.get('torch', 'absent')}; load average "
          f"{env['load_average_start'][0]:.2f} -> {env['load_average_end'][0]:.2f}", file=file)
    header = f"{'bench':18s} {'shape':>14s} {'implementation':48s} {'dev':4s} " \
             f"{'median ms':>10s} {'x copy':>7s} {'peak MiB':>9s} {'x out':>6s}"
    print(header, file=file)
    for r in report["results"]:
        peak, times_out = r["peak_extra_bytes"], r["peak_extra_vs_output"]
        peak_mib = "" if peak is None else f"{peak / 2**20:.1f}"
        vs_out = "" if times_out is None else f"{times_out:.2f}"
        print(f"{r['bench']:18s} {str(tuple(r['shape'])):>14s} {r['impl']:48s} {r['device']:4s} "
              f"{r['median_s'] * 1e3:10.2f} {r['ratio_to_copy']:7.2f} {peak_mib:>9s} "
              f"{vs_out:>6s}", file=file)
    for s in report["summary"]:
        print("summary:", ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in s.items()), file=file)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m grpo_lab.bench",
        description="Each group_advantages and GRPO loss implementation against a memory copy "
                    "of the same size; writes JSON.")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--repeats", type=int, default=7,
                        help=f"timed rounds, at least {MIN_REPEATS} (default 7)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the torch implementations run (NumPy runs on the CPU)")
    parser.add_argument("--only", choices=("advantages", "loss"), action="append",
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads for the torch implementations (default on "
                             "CPU: 1, like NumPy's element-wise loops and the copy; a shared "
                             "machine makes multi-threaded timings erratic)")
    parser.add_argument("--out", default="bench_results.json", help="the JSON file to write")
    args = parser.parse_args(argv)
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats: expected at least {MIN_REPEATS} (medians of fewer runs are "
                     f"noise on a shared machine), got {args.repeats}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads: expected a positive integer, got {args.threads}")
    if args.device == "cuda":
        torch = _torch_or_none()
        if torch is None or not torch.cuda.is_available():
            parser.error("--device cuda: expected torch with a CUDA device, got "
                         + ("no torch" if torch is None else "no CUDA device"))
    report = run(quick=args.quick, repeats=args.repeats, device=args.device,
                 only=tuple(args.only or ("advantages", "loss")), threads=args.threads)
    print_report(report)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
