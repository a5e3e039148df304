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

Two kernels share this plan. :func:`one_pass_rows` takes any float32/float64 row and
``scale="none"``; it reads each row from the L1 cache three times (the sum, the squares, the
write). :func:`float32_rows`, for float32 rewards with ``scale="group"`` (the common case),
gets the sum and the sum of squares of the shifted row in the same loop and takes the variance
as ``(sum d**2 - mean * sum d) / (G - ddof)``. That formula is the textbook example of
cancellation, and here it is safe: a row's first value is within ``sqrt(G - 1)`` standard
deviations of its mean, so ``sum d**2 <= G**2 var``, and the float64 rounding of the sums moves
the variance by at most about ``G**2 * 2**-53`` of itself: ``2**-29`` at G = 4096, far below
half a float32 step (``2**-24``). Past G = 4096 the float32 rows take :func:`one_pass_rows`.

Division is the slowest arithmetic a core does (a float64 divide or square root takes several
times an add, and one unit does both), so each row gets exactly one square root and one divide.
``1 / G`` and ``1 / (G - ddof)`` are passed in, not computed in the kernel: with ``FASTMATH``
the compiler may turn ``total * (1 / G)`` back into ``total / G``, and did (three divides a
row; passing them in made the kernel about 1.15x faster at G = 8).

Even one square root and one divide a row are the bottleneck when rows are short. Each waits
for its row's sums and the row's writes wait for it, and a core can only look so far ahead, so
row by row it runs them one at a time. :func:`float32_rows` therefore takes the sums of
:data:`ROWS` rows first, then all their square roots and divides in one fixed loop (vector
instructions, several rows each), then writes the rows: 1.2-1.3x faster at G = 8 to 64 on
arrays the caches have just seen, 1.1x at G = 8 in the bench's rounds (arrays cold).

A NaN or inf reward shows up in the row's sum of squares, and a result too large for the
output dtype (``scale="none"``) in the check before it is stored; the kernel then stops and
says so, and the reference reports the problem with its own message.

Numba is optional: :func:`kernel_or_none` returns None where it is not installed, and the
fast path then takes its blocked NumPy route (:mod:`grpo_lab.perf.advantages_fast`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BLOCKED_MAX_G", "FLOAT32_MAX_G", "ROWS", "advantages_one_pass", "float32_rows",
           "kernel_or_none", "one_pass_rows"]

_KERNEL = []          # the compiled kernels, once built (or None without numba)

#: The largest G for which :func:`float32_rows` gets the variance from one loop (see above).
FLOAT32_MAX_G = 4096

#: Rows per block in :func:`float32_rows`, and the largest G it blocks: 32 rows of 128 float32
#: rewards are 16 KiB, in the L1 cache. Measured at (1048576, 8) against 8, 16, 64, 128 and
#: 256 rows: 32 was fastest (a fixed loop of 32 is unrolled into vector instructions; longer
#: ones stay loops). At G = 256 and 2048 blocking was slower than row by row.
ROWS = 32
BLOCKED_MAX_G = 128


def one_pass_rows(r, out, s, eps_s, inv_g, inv_n, c, none, t, limit):
    r"""The row loop (compiled by :func:`kernel_or_none`): ``out[b] = A`` of row b, for every b.

    .. math::

        A_{b,j} = c\,\frac{x_{b,j} - \bar x_b}{\operatorname{std}(x_b) + \varepsilon s},
        \qquad x_{b,j} = (r_{b,j} - r_{b,0})\, s

    the reference's formula (``gl.paper.group_advantages``, chapter 1) on the row shifted by its
    first value and scaled by ``s = 2**-k``. Called with keywords (:func:`advantages_one_pass`).

    ========  ========  =====================================================================
    Symbol    Shape     Meaning
    ========  ========  =====================================================================
    r         (B, G)    rewards, float32 or float64
    out       (B, G)    the advantages, written row by row
    s         scalar    the reference's ``2**-k`` (exact); 1 for float32
    eps_s     scalar    ``eps * 2**-k``: eps in the rescaled units
    inv_g     scalar    ``1 / G``
    inv_n     scalar    ``1 / (G - ddof)``: the std's denominator
    c         scalar    1, or G / (G - 1) for leave-one-out
    none      bool      ``scale="none"``: ``c * (r - mean)``, scaled back by ``t = 2**k``
    limit     scalar    the largest finite value of out's dtype
    ========  ========  =====================================================================

    Returns -1, or the first row where the reference must decide (a NaN or inf reward, or an
    advantage larger than ``limit``).
    """
    B, G = r.shape
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


def float32_rows(r, out, eps, inv_g, inv_n, c):
    r""":func:`one_pass_rows` for float32 rewards and ``scale="group"``: one loop for the sums,
    and :data:`ROWS` rows at a time.

    .. math::

        A_{b,j} = c\,\frac{r_{b,j} - \bar r_b}{\sqrt{(\sum_j d_{b,j}^2 - \bar d_b \sum_j d_{b,j})
        / (G - \text{ddof})} + \varepsilon}, \qquad d_{b,j} = r_{b,j} - r_{b,0}

    ========  ========  =====================================================================
    Symbol    Shape     Meaning
    ========  ========  =====================================================================
    r, out    (B, G)    float32 rewards, G <= :data:`FLOAT32_MAX_G`; the advantages
    eps       scalar    eps (float32 rewards need no rescale)
    inv_g     scalar    ``1 / G``
    inv_n     scalar    ``1 / (G - ddof)``: the std's denominator
    c         scalar    1, or G / (G - 1) for leave-one-out
    ========  ========  =====================================================================

    For G <= :data:`BLOCKED_MAX_G` the rows go in blocks of :data:`ROWS`: the block's sums
    first, then its square roots and divisions in one loop of fixed length (the compiler
    issues them as vector instructions, several rows at once), then its writes. Past that
    G (and for the last ``B % ROWS`` rows) each row is done whole, as in :func:`one_pass_rows`.

    Returns -1, or a row at or before the first row where the reference must decide (a NaN or
    inf reward, or ``std + eps`` so small that ``c / (std + eps)`` is inf).
    """
    B, G = r.shape
    tot = np.empty(ROWS)                                   # a block's sums of d = r - x0,
    ssq = np.empty(ROWS)                                   # its sums of d**2,
    fac = np.empty(ROWS)                                   # c / (std + eps) of each row,
    off = np.empty(ROWS)                                   # and each row's mean
    blocked = B - B % ROWS if G <= BLOCKED_MAX_G else 0
    for b0 in range(0, blocked, ROWS):
        for i in range(ROWS):                              # 1. the sums, a row at a time
            x0 = np.float64(r[b0 + i, 0])                  # the shift: the row's first value
            total = 0.0
            ss = 0.0
            for j in range(G):                             # d = r - x0: exact in float64
                d = r[b0 + i, j] - x0                      # unless exponents differ by > 29
                total += d
                ss += d * d
            tot[i] = total
            ssq[i] = ss
            off[i] = x0
        finite = True
        for i in range(ROWS):
            finite = finite and math.isfinite(ssq[i])
        if not finite:                                     # a NaN or inf reward
            return b0
        for i in range(ROWS):                              # 2. the block's roots and divides
            mean = tot[i] * inv_g                          # mean of the shifted row
            var = max((ssq[i] - tot[i] * mean) * inv_n, 0.0)   # sum (d - mean)^2 / (G - ddof)
            den = math.sqrt(var) + eps                     # std + eps
            fac[i] = c / den if den > 0 else 0.0           # 0 / 0 is 0, as in the reference
            off[i] = off[i] + mean                         # the row's mean, in float64
        for i in range(ROWS):
            finite = finite and not math.isinf(fac[i])
        if not finite:                                     # std + eps below 2**-1024
            return b0
        for i in range(ROWS):                              # 3. A = c (r - mean) / (std + eps)
            factor = fac[i]
            offset = off[i]
            for j in range(G):
                out[b0 + i, j] = (r[b0 + i, j] - offset) * factor
    for b in range(blocked, B):                            # the same, one row at a time
        x0 = np.float64(r[b, 0])
        total = 0.0
        ss = 0.0
        for j in range(G):
            d = r[b, j] - x0
            total += d
            ss += d * d
        if not math.isfinite(ss):
            return b
        mean = total * inv_g
        var = max((ss - total * mean) * inv_n, 0.0)
        den = math.sqrt(var) + eps
        factor = c / den if den > 0 else 0.0
        if math.isinf(factor):
            return b
        offset = x0 + mean
        for j in range(G):
            out[b, j] = (r[b, j] - offset) * factor
    return -1


#: Let the compiler reorder the sums (so it can add four or eight lanes at once) and fuse a
#: multiply with an add; NaN and inf keep their meaning, so the checks above still hold.
FASTMATH = {"reassoc", "contract"}


def kernel_or_none():
    """The compiled kernels, ``(one_pass_rows, float32_rows)`` (Numba, cached on disk), or
    None without Numba."""
    if not _KERNEL:
        try:
            import numba
        except ImportError:
            _KERNEL.append(None)
        else:
            jit = numba.njit(cache=True, nogil=True, fastmath=FASTMATH)
            _KERNEL.append((jit(one_pass_rows), jit(float32_rows)))
    return _KERNEL[0]


def advantages_one_pass(arr, out, eps, scale, ddof, c):
    """Run the kernel on checked float32/float64 ``arr`` (B, G) into ``out``.

    Returns ``out``, or None where the reference must decide (see :func:`one_pass_rows`) or
    Numba is missing. ``scale`` is ``"group"`` or ``"none"``; the arguments are checked by
    :func:`grpo_lab.group_advantages_fast`.
    """
    kernels = kernel_or_none()
    if kernels is None:
        return None
    G = arr.shape[1]
    inv_g, inv_n = 1.0 / G, 1.0 / (G - ddof)      # computed here: see the module docstring
    if arr.dtype == np.float32 and scale == "group" and G <= FLOAT32_MAX_G:
        bad = kernels[1](r=arr, out=out, eps=float(eps), inv_g=inv_g, inv_n=inv_n, c=c)
        return out if bad < 0 else None
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
    bad = kernels[0](r=arr, out=out, s=math.ldexp(1.0, -k), eps_s=eps_s, inv_g=inv_g,
                     inv_n=inv_n, c=c, none=scale == "none", t=math.ldexp(1.0, k),
                     limit=float(np.finfo(out.dtype).max))
    return out if bad < 0 else None
