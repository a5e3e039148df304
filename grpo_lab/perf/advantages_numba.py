r"""Group advantages in one pass over memory: a compiled row kernel (Numba).

Taught in chapter 7 (``chapters/07_performance.ipynb``); the reference is
:func:`grpo_lab.core.advantages.group_advantages` (chapter 1), and
:func:`grpo_lab.group_advantages_fast` calls :func:`advantages_one_pass` for float32 and
float64 rewards with ``scale="group"`` or ``"none"``.

A row of G rewards is read once from main memory into the core's L1 cache; the kernel then
makes its three small loops over it there (the shifted sum, the sum of squares, the scaled
write) and writes the row of advantages once. That is the traffic of a copy, and the work per
reward (a subtract, a multiply-add, a multiply) is far below what a core does in the time a
reward takes to arrive, so a compiled loop can run near the speed of a copy. NumPy cannot: each
of its operations is a separate sweep over the whole array.

The numerics are the reference's, step for step, in float64:

1. the reference's power of two ``2**-k`` (``k`` from the largest ``|r|``), exact, for float64
   rewards (float32 values square without overflow in float64, so they need none);
2. the shift by each row's first value, so that an all-equal row is exactly 0;
3. the mean of the shifted row, the deviations and their sum of squares (the compiler may add
   four or eight lanes at once: ``FASTMATH``);
4. ``c / (std + eps)`` once per row, and each deviation multiplied by it, and ``1 / G`` once
   per call (each one rounding more than the reference's divisions, well inside 4 ulp).

A NaN or inf reward shows up in the row's sum of squares, and a result too large for the
output dtype (``scale="none"``) in the check before it is stored; the kernel then stops and
says so, and the reference reports the problem with its own message.

Numba is optional: :func:`kernel_or_none` returns None where it is not installed, and the
fast path then takes its blocked NumPy route (:mod:`grpo_lab.perf.advantages_fast`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["advantages_one_pass", "kernel_or_none", "one_pass_rows"]

_KERNEL = []          # the compiled kernel, once built (or None without numba)


def one_pass_rows(r, out, s, eps_s, ddof, c, none, t, limit):
    """The row loop (compiled by :func:`kernel_or_none`): ``out[b] = A`` of row b, for every b.

    ========  ========  =====================================================================
    Symbol    Shape     Meaning
    ========  ========  =====================================================================
    r         (B, G)    rewards, float32 or float64
    out       (B, G)    the advantages, written row by row
    s         scalar    the reference's ``2**-k`` (exact); 1 for float32
    eps_s     scalar    ``eps * 2**-k``: eps in the rescaled units
    ddof, c   scalars   the std's ``ddof``; 1, or G / (G - 1) for leave-one-out
    none      bool      ``scale="none"``: ``c * (r - mean)``, scaled back by ``t = 2**k``
    limit     scalar    the largest finite value of out's dtype
    ========  ========  =====================================================================

    Returns -1, or the first row where the reference must decide (a NaN or inf reward, or an
    advantage larger than ``limit``).
    """
    B, G = r.shape
    inv_g, inv_n = 1.0 / G, 1.0 / (G - ddof)              # multiplies, off the critical path
    for b in range(B):
        x0 = r[b, 0] * s                                   # the shift: the row's first value
        total = 0.0
        for j in range(G):
            total += r[b, j] * s - x0                      # exact for float32 rewards
        mean = total * inv_g                               # mean of the shifted row
        ss = 0.0
        for j in range(G):
            d = (r[b, j] * s - x0) - mean                  # the deviation, from L1 cache
            ss += d * d
        if not math.isfinite(ss):                          # a NaN or inf reward
            return b
        if none:                                           # Dr. GRPO: c (r - mean), in units
            for j in range(G):
                a = ((r[b, j] * s - x0) - mean) * c * t
                if abs(a) > limit:                         # too large for out's dtype
                    return b
                out[b, j] = a
            continue
        den = math.sqrt(ss * inv_n) + eps_s                # std + eps
        factor = c / den if den > 0 else 0.0               # 0 / 0 is 0, as in the reference
        if math.isinf(factor):                             # std + eps below 2**-1024: divide
            for j in range(G):
                out[b, j] = ((r[b, j] * s - x0) - mean) * c / den
            continue
        for j in range(G):                                 # A = c (r - mean) / (std + eps)
            out[b, j] = ((r[b, j] * s - x0) - mean) * factor
    return -1


#: Let the compiler reorder the sums (so it can add four or eight lanes at once) and fuse a
#: multiply with an add; NaN and inf keep their meaning, so the checks above still hold.
FASTMATH = {"reassoc", "contract"}


def kernel_or_none():
    """The compiled :func:`one_pass_rows` (Numba, cached on disk), or None without Numba."""
    if not _KERNEL:
        try:
            import numba
        except ImportError:
            _KERNEL.append(None)
        else:
            _KERNEL.append(numba.njit(cache=True, nogil=True, fastmath=FASTMATH)(one_pass_rows))
    return _KERNEL[0]


def advantages_one_pass(arr, out, eps, scale, ddof, c):
    """Run the kernel on checked float32/float64 ``arr`` (B, G) into ``out``.

    Returns ``out``, or None where the reference must decide (see :func:`one_pass_rows`) or
    Numba is missing. ``scale`` is ``"group"`` or ``"none"``; the arguments are checked by
    :func:`grpo_lab.group_advantages_fast`.
    """
    kernel = kernel_or_none()
    if kernel is None:
        return None
    k = 0
    if arr.dtype == np.float64:                            # the reference's power of two
        top = max(float(arr.max()), -float(arr.min()))    # two reads, no temporary
        if not math.isfinite(top):
            return None
        k = int(np.frexp(top)[1])
        if not -1020 <= k <= 1020:                         # 2**k or 2**-k not a normal float
            return None
    with np.errstate(under="ignore"):
        eps_s = float(np.ldexp(eps, -k))                   # eps in the rescaled units
    bad = kernel(arr, out, math.ldexp(1.0, -k), eps_s, ddof, c, scale == "none",
                 math.ldexp(1.0, k), float(np.finfo(out.dtype).max))
    return out if bad < 0 else None
