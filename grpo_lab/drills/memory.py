"""The peak memory of a reader's function: NumPy's allocations and torch's.

``tracemalloc`` sees every NumPy array (NumPy reports its buffers to it) but not torch's: a
torch tensor's storage comes from torch's own CPU allocator, invisible to it. So torch's
allocations are counted apart, by a ``TorchDispatchMode`` that sees every torch operation in
the worker thread: each output whose storage is new (not an input's, not a view of one) adds
its bytes, and its bytes go when the last tensor seen on that storage is freed. It counts what
operations return, not the scratch space inside one kernel, and only on the CPU; CUDA has its
own counter (``torch.cuda.max_memory_allocated``). The two peaks are added: an upper bound on
the true peak, since they need not happen at the same moment.

``tracemalloc`` is started and stopped around the call, or, if the reader had it running, left
running (its peak is reset, which tracemalloc cannot undo).
"""

from __future__ import annotations

import importlib.util
import tracemalloc
import weakref

from grpo_lab.drills import harness
from grpo_lab.drills.harness import in_thread

__all__ = ["TRACED_SLOWDOWN", "peak_bytes"]

#: How much longer than the harness's time limit a measured call may take: tracemalloc traces
#: every NumPy allocation, which made a right row-by-row answer of chapter 7 about 8x slower
#: (0.06 s -> 0.5 s on (3000, 16) rewards), past the catalogue tests' 0.5 s limit under load.
TRACED_SLOWDOWN = 10


def _torch_tracker():
    """A fresh tracker of torch's CPU allocations, or None without torch."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Tracker(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live, self.now, self.peak = {}, 0, 0               # storage -> [refs, bytes]

        def _freed(self, key):
            entry = self.live.get(key)
            if entry is not None:
                entry[0] -= 1
                if entry[0] == 0:
                    self.now -= entry[1]
                    del self.live[key]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                      if isinstance(t, torch.Tensor)}
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                    continue
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key in self.live:
                    self.live[key][0] += 1
                elif key == 0 or key in inputs:                      # a view, or in place
                    continue
                else:
                    self.live[key] = [1, storage.nbytes()]
                    self.now += storage.nbytes()
                    self.peak = max(self.peak, self.now)
                weakref.finalize(t, self._freed, key)
            return out

    def warm():                                   # the first dispatch mode costs a second or two
        with Tracker():
            torch.zeros(1) + 1
    in_thread(warm, 60.0)
    return Tracker()


def peak_bytes(fn, *args):
    """``fn(*args)`` in the harness's worker thread, measured: ``(output, exception, NumPy's peak
    bytes, torch's peak bytes)``; the exception is None, or TIMED_OUT, or what ``fn`` raised."""
    tracker = _torch_tracker()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]

        def work():
            if tracker is None:
                return fn(*args)
            with tracker:
                return fn(*args)
        out, exc = in_thread(work, TRACED_SLOWDOWN * harness.TIME_LIMIT_S)
        numpy_peak = max(tracemalloc.get_traced_memory()[1] - base, 0)
    finally:
        if not was_tracing and tracemalloc.is_tracing():
            tracemalloc.stop()
    return out, exc, numpy_peak, 0 if tracker is None else tracker.peak
