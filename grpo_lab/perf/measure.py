r"""How :mod:`grpo_lab.perf.bench` measures: interleaved timings and peak extra memory.

Taught in chapter 7 (``chapters/07_performance.ipynb``). Two rules make timings on a shared
machine comparable:

* **Interleave.** :func:`time_round_robin` runs every callable once per round (a copy, then
  each implementation), so a machine that slows down slows all of them alike; the bench reports
  the median over rounds of each time divided by the copy's time in the same round.
* **Count the allocator, not the process.** The resident size keeps freed pages and hides
  temporaries. :func:`peak_bytes_numpy` uses ``tracemalloc`` (NumPy reports its buffers to it);
  :func:`peak_bytes_torch` uses ``max_memory_allocated`` after ``reset_peak_memory_stats`` on
  CUDA, and on CPU, which keeps no such counter, the running sum of the allocations and frees
  that ``torch.profiler`` records with ``profile_memory=True``.

Peak extra memory is what a call allocates at its highest point, its result included.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
import tracemalloc

__all__ = ["forward_backward", "peak_bytes_numpy", "peak_bytes_torch", "quiet_stderr", "result_rows",
           "time_round_robin", "torch_mirror", "torch_or_none"]


def forward_backward(loss_fn, leaf, *inputs):
    """A callable for the timers: ``loss_fn(leaf, *inputs)``, then its backward pass.

    Each call clears ``leaf.grad`` first, so every run measures one fresh gradient; it
    returns ``leaf.grad``. ``loss_fn`` returns ``(loss, diagnostics)``, as every GRPO loss here.
    """
    def run():
        leaf.grad = None
        loss, _ = loss_fn(leaf, *inputs)
        loss.backward()
        return leaf.grad
    return run


def time_round_robin(fns, repeats, sync=None):
    """Time each callable ``repeats`` times, interleaved; returns ``{name: [seconds, ...]}``.

    Every callable runs once first (caches, allocators and lazy imports warm up on it); then
    each round calls every callable once, in order. ``sync`` (e.g. ``torch.cuda.synchronize``)
    is called around each timing so that asynchronous work is counted.

    >>> times = time_round_robin({"a": lambda: None, "b": lambda: None}, repeats=3)
    >>> sorted(times), [len(t) for t in times.values()]
    (['a', 'b'], [3, 3])
    """
    sync = sync or (lambda: None)
    for fn in fns.values():                                    # warm-up
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


def peak_bytes_numpy(fn):
    """Peak bytes NumPy allocates during ``fn()``, its result included (``tracemalloc``).

    >>> import numpy as np
    >>> 8 * 2**20 <= peak_bytes_numpy(lambda: np.ones(2**20)) < 9 * 2**20   # 8 MiB of float64
    True
    """
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
def quiet_stderr():
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


def peak_bytes_torch(fn, device="cpu"):
    """Peak bytes torch allocates during ``fn()`` on ``device``, its result included.

    On CUDA the caching allocator's own counter; on CPU the running sum of the allocations
    (positive) and frees (negative) that ``torch.profiler`` records, in time order.
    """
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
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    del result
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak


def result_rows(bench, shape, times, peaks, out_bytes, devices, copy_name="copy"):
    """One JSON-ready row per implementation: median time, median ratio to the copy, memory.

    ``times`` comes from :func:`time_round_robin` and holds ``copy_name``; ``peaks`` maps a
    name to its peak extra bytes (the copy has none); ``out_bytes`` is the size of the output,
    the unit of ``peak_extra_vs_output``.
    """
    copy = times[copy_name]
    rows = []
    for name, ts in times.items():
        peak = peaks.get(name)
        rows.append({
            "bench": bench, "shape": list(shape), "impl": name, "device": devices[name],
            "median_s": statistics.median(ts), "times_s": ts,
            "ratio_to_copy": statistics.median(t / c for t, c in zip(ts, copy)),
            "peak_extra_bytes": peak,
            "peak_extra_vs_output": None if peak is None else peak / out_bytes,
            "output_bytes": out_bytes,
        })
    return rows


def torch_or_none():
    """The ``torch`` module, or None where it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_mirror(name):
    """``grpo_lab.torch.<name>``, or None without torch."""
    if torch_or_none() is None:
        return None
    import grpo_lab.torch as glt
    return getattr(glt, name)
