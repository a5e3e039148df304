r"""The roofline model, bytes-moved counts and GPU bandwidth arithmetic.

Taught in chapter 7 (``chapters/07_performance.ipynb``), whose figures are drawn by
``gl.book.ch07``.

The roofline (Williams, Waterman and Patterson, 2009): a kernel that does ``F`` flops and must
move ``M`` bytes between memory and the processor takes at least

.. math::

    t \ge \max\Big(\frac{F}{P},\ \frac{M}{W}\Big)

on a machine with peak compute ``P`` (flop/s) and memory bandwidth ``W`` (byte/s). Its
*arithmetic intensity* ``I = F / M`` decides which bound binds: below the ridge point ``P / W``
the kernel is memory-bound, and only moving fewer bytes makes it faster.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.numerics.validate import check_real, describe
from grpo_lab.perf.cost_checks import check_cost_arguments

__all__ = ["ADV_FLOPS_PER_REWARD", "GPU", "H100_SXM", "H200_SXM", "LOSS_FLOPS_PER_TOKEN", "TraceCount",
           "advantages_min_bytes", "attainable", "loss_min_bytes", "measure_matmul_flops",
           "trace_torch_traffic"]

#: Flops per reward of group advantages: row sum (add), deviation (sub), square (mul), sum of
#: squares (add), scale (mul). The per-row sqrt and divide are 1/G of that, left out.
ADV_FLOPS_PER_REWARD = 5

#: Flops per token of the GRPO loss, forward and backward, with k3: log-ratio, exp, two
#: surrogate products, clamp (2 compares), max, ref difference, exp, k3 (2), beta*kl + pg,
#: weight, sum (the forward, 14); -A r, gate, dk3, add, weight (the gradient, 5).
LOSS_FLOPS_PER_TOKEN = 19


@dataclass(frozen=True)
class GPU:
    """Datasheet figures of a GPU, for arithmetic (not measurement)."""
    name: str
    hbm_bytes_per_s: float          # memory bandwidth
    fp32_flops: float               # non-tensor-core FP32 peak
    l2_bytes: float                 # last-level cache
    launch_s: float                 # an assumed per-kernel launch cost, not a datasheet figure
    bf16_flops: float = 989e12      # dense bf16 tensor-core peak (no sparsity)
    hbm_capacity_bytes: float = 80e9    # memory on the card
    nvlink_bytes_per_s: float = 450e9   # NVLink, all links, ONE direction (half the datasheet's)

    def __post_init__(self):            # checked once, here: every function then trusts it
        if not isinstance(self.name, str):
            raise TypeError(f"name: expected a str, got {describe(self.name)}")
        for field in ("hbm_bytes_per_s", "fp32_flops", "bf16_flops", "hbm_capacity_bytes",
                      "nvlink_bytes_per_s"):
            check_real(field, getattr(self, field), minimum=0.0, allow_equal=False)
        for field in ("l2_bytes", "launch_s"):
            check_real(field, getattr(self, field), minimum=0.0)


#: NVIDIA H100 SXM5 (the H100 datasheet): 3.35 TB/s HBM3 (80 GB), 67 TFLOP/s FP32, 989 TFLOP/s
#: dense bf16 (1979 with 2:4 sparsity, which training does not use), 50 MB L2, and NVLink 4 at
#: 900 GB/s: 18 links of 50 GB/s counted both ways, so 450 GB/s in one direction, the rate a
#: GPU receives an all-gather at. The launch cost is an assumption of a few microseconds per
#: eager kernel.
H100_SXM = GPU("H100 SXM (datasheet)", 3.35e12, 67e12, 50e6, 5e-6, bf16_flops=989e12,
               hbm_capacity_bytes=80e9, nvlink_bytes_per_s=450e9)

#: NVIDIA H200 SXM (the H200 datasheet): 4.8 TB/s HBM3e (141 GB), 67 TFLOP/s FP32, 989 TFLOP/s
#: dense bf16, NVLink 900 GB/s both ways (450 one way): the same compute as the H100 SXM with
#: 1.4x its bandwidth and 1.76x its memory. The datasheet gives no L2 size: 60 MB is what
#: PyTorch reports on one. Same assumed launch cost.
H200_SXM = GPU("H200 SXM (datasheet)", 4.8e12, 67e12, 60e6, 5e-6, bf16_flops=989e12,
               hbm_capacity_bytes=141e9, nvlink_bytes_per_s=450e9)


def attainable(intensity, peak_flops, bandwidth):
    """The roof: the flop/s a kernel of ``intensity`` flop/byte can reach, ``min(P, I W)``."""
    intensity, peak_flops, bandwidth = check_cost_arguments(
        intensity=intensity, peak_flops=peak_flops, bandwidth=bandwidth)
    return np.minimum(peak_flops, intensity * bandwidth)


def advantages_min_bytes(B, G, itemsize=4):
    """Bytes a group-advantages kernel must move: read B*G rewards, write B*G advantages."""
    B, G, itemsize = check_cost_arguments(B=B, G=G, itemsize=itemsize)
    return 2 * B * G * itemsize


def loss_min_bytes(N, T, itemsize=4, per_sequence_adv=True):
    """Bytes the GRPO loss forward + backward must move, at the least, for N x T tokens.

    Read ``logp``, ``old_logp``, ``ref_logp`` (``itemsize`` each) and the bool mask (1 byte)
    per token, the advantages per sequence (or per token), and write the gradient per token.
    """
    N, T, itemsize, per_sequence_adv = check_cost_arguments(
        N=N, T=T, itemsize=itemsize, per_sequence_adv=per_sequence_adv)
    adv = N * itemsize if per_sequence_adv else N * T * itemsize
    return N * T * (3 * itemsize + 1 + itemsize) + adv


@dataclass
class TraceCount:
    """What a torch computation asked of memory, op by op (see :func:`trace_torch_traffic`)."""
    ops: int = 0                    # aten operations = kernel launches on a GPU
    bytes_read: int = 0             # sum over ops of their tensor inputs' sizes
    bytes_written: int = 0          # sum over ops of their tensor outputs' sizes
    full_size_outputs: int = 0      # outputs at least as large as ``full_size`` bytes

    @property
    def bytes_moved(self):
        return self.bytes_read + self.bytes_written


def trace_torch_traffic(fn, full_size=0):
    """Run ``fn()`` and count each aten op's tensor inputs and outputs, forward and backward.

    An eager op is a kernel of its own: it streams its inputs from memory and its output back,
    so the sum over ops is the memory traffic of the eager computation when its tensors are
    larger than the caches (views, which move nothing, are not counted).
    """
    fn, full_size = check_cost_arguments(fn=fn, full_size=full_size)
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    count = TraceCount()
    moves_nothing = {"view", "_unsafe_view", "expand", "t", "transpose", "as_strided", "slice",
                     "select", "unsqueeze", "squeeze", "detach", "alias", "permute", "reshape",
                     "lift_fresh", "empty", "empty_like", "new_empty", "empty_strided"}

    def nbytes(tree):
        return sum(t.numel() * t.element_size() for t in tree_flatten(tree)[0]
                   if isinstance(t, torch.Tensor))

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ not in moves_nothing:
                count.ops += 1
                count.bytes_read += nbytes((args, kwargs))
                written = nbytes(out)
                count.bytes_written += written
                if full_size and any(isinstance(t, torch.Tensor) and
                                     t.numel() * t.element_size() >= full_size
                                     for t in tree_flatten(out)[0]):
                    count.full_size_outputs += 1
            return out

    with Counter():
        fn()
    return count


def measure_matmul_flops(n=1024, repeats=5, dtype=np.float32):
    """Flop/s of an n x n matrix product (BLAS): the compute roof of this machine, measured."""
    n, repeats, dtype = check_cost_arguments(n=n, repeats=repeats, dtype=dtype)
    import time
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(n, n)).astype(dtype), rng.normal(size=(n, n)).astype(dtype)
    a @ b                                                          # warm-up
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / max(best, time.get_clock_info("perf_counter").resolution)


def __getattr__(name):
    if name in ("ratio_figure", "roofline_figure"):
        raise AttributeError(f"grpo_lab.perf.roofline.{name} moved to the book's chapter 7 "
                             f"module: gl.book.ch07.{name}, which takes fig= (a Figure) "
                             f"instead of ax= and returns the Figure")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
