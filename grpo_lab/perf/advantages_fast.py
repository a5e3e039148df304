r"""A fast ``group_advantages``: the same function as the reference, with fewer passes over memory.

For float32 and float64 rewards with ``scale="group"`` or ``"none"`` the work is done by a
compiled one-pass kernel, :mod:`grpo_lab.perf.advantages_numba` (Numba), which reads each row
once and writes it once. The rest (other dtypes, ``scale="batch"``, or no Numba installed, of
which the first call says so once) takes the blocked NumPy path this docstring describes.

Taught in chapter 7 (``chapters/07_performance.ipynb``); the reference is
:func:`grpo_lab.core.advantages.group_advantages` (chapter 1), and the two are tested equal.

Where the reference's time goes. For B*G float32 rewards the reference makes a float64 copy
(2x the input), a copy for the rescale, the shifted copy, the deviations, their squares, the
quotient and the float32 result: about ten full-size arrays, each written to main memory and
read back, because each is far bigger than the caches. The work per element is a handful of
flops; the time is the traffic.

What this version changes:

1. **Blocks that stay in cache.** Rows are taken ``BLOCK_ELEMENTS`` rewards at a time; the
   float64 working copy of a block (256 KiB) stays in the core's L2 cache, so the only main
   memory traffic is reading the rewards once and writing the advantages once.
2. **BLAS for the row sums.** ``X @ ones`` (a matrix-vector product) sums every row of the
   block in one call; NumPy's ``sum(axis=1)`` over rows of 8 pays a call per row.
3. **No rescale for narrow floats.** float16, bfloat16 and float32 values square without
   overflow or underflow in float64 (the largest float32 squared is 1.2e77, the smallest
   nonzero one 2e-90), so the power-of-two rescale is not needed: it only multiplies every
   intermediate by the same power of two, which changes no rounding. float64 and integer
   rewards take the reference's steps (rescale, shift), block by block.
4. **No shift for narrow floats.** The reference subtracts each row's first reward so that an
   all-equal row gives exactly 0. For rewards with at most 24 significant bits the float64
   row sum of G equal values is exact (G <= 2**29), so the mean *is* that value and the
   deviations are exactly 0 without the shift. The mean itself is accurate to about 2**-42
   standard deviations (the row sum is exact when the exponents in the row span at most 23
   binades, and the row's spread is at least a third of its largest value when they do not),
   and the one rounding of ``sum / G`` moves every deviation of a row by at most ``2**-53`` of
   the mean, which is below half a float32 ulp of the advantages.
5. **No temporaries the size of the output.** Every operation writes into the block's own
   buffers (``out=``); the only full-size array is the result. NaN and inf show up in the
   row sums for free, and are then reported by the reference, with its message.

The result agrees with the reference to within about one float32 ulp for float32 rewards
(rounding once from float64 in both), and to about 1e-15 relative for float64 rewards.

Two kernels do the work, :func:`blocked_advantages_narrow` (points 3 and 4) and
:func:`blocked_advantages_wide` (the reference's steps); their building blocks, each named,
are in :mod:`grpo_lab.perf.blocks`.
"""

from __future__ import annotations

import warnings

import numpy as np

from grpo_lab.numerics.stable import power_of_two_exponent
from grpo_lab.core.advantages import check_group_advantages_arguments, group_advantages
from grpo_lab.perf.advantages_numba import advantages_one_pass, kernel_or_none
from grpo_lab.perf.blocks import (SHORT_ROWS, BlockBuffers, batch_factor, check_kernel_arrays,
                                  group_factor, is_narrow_dtype, none_factor, pooled_moments,
                                  row_blocks, store_block)

__all__ = ["BLOCK_ELEMENTS", "NumbaMissingWarning", "blocked_advantages_narrow",
           "blocked_advantages_wide", "check_out", "group_advantages_fast"]


class NumbaMissingWarning(UserWarning):
    """Numba is not installed: the fast path takes its blocked NumPy route (said once)."""


_NOTICE = []          # one entry once the notice has been given

#: Rewards per block: 2**15 float64 values are 256 KiB, two such buffers fit a 1 MiB L2 cache.
BLOCK_ELEMENTS = 1 << 15


def blocked_advantages_narrow(rewards, out, eps=1e-8, scale="group", ddof=0, c=1.0):
    r"""The fast path for float16, bfloat16, float32 and bool rewards: blocks, no rescale, no shift.

    .. math::

        A_{b,i} = c\,\frac{r_{b,i} - \bar r_b}{s + \varepsilon}

    with :math:`s` the std of row b (``scale='group'``) or of all B*G rewards (``'batch'``);
    ``'none'`` is :math:`c\,(r_{b,i} - \bar r_b)`.

    ========  ========  ============================================================
    Symbol    Shape     Meaning
    ========  ========  ============================================================
    rewards   (B, G)    at most 24 significant bits; checked by the caller
    out       (B, G)    the result, written one block at a time
    eps       scalar    ``eps``, ``scale`` and ``ddof`` as in ``gl.group_advantages``
    c         scalar    1, or G / (G - 1) for the leave-one-out baseline
    ========  ========  ============================================================

    Returns ``out``, or None where the reference must decide (:func:`group_advantages_fast`
    then calls it): a NaN or inf reward, which it reports, or a result too large for ``out``.

    >>> blocked_advantages_narrow(np.float32([[1, 0, 1, 0]]), np.empty((1, 4), np.float32))
    array([[ 1., -1.,  1., -1.]], dtype=float32)
    """
    B, G = check_kernel_arrays(rewards, out, narrow=True)
    buf = BlockBuffers(max(1, min(B, BLOCK_ELEMENTS // G)), G,   # float64 blocks, in cache
                       short=G <= SHORT_ROWS and scale != "batch")
    if scale == "batch":                          # a first sweep: the std of all B*G rewards
        batch = batch_factor(rewards, buf, eps, ddof, c)
    for r0, r1 in row_blocks(B, buf.rows):
        dev, unit = buf.centre(rewards[r0:r1])                   # (n, G) unit * (r - mean)
        if scale == "group":
            step = group_factor(buf, dev, unit, eps, ddof, c)    # (n, 1) c / (std + eps)
        elif scale == "batch":
            step = batch                                         # c / (batch std + eps)
        else:
            step = none_factor(dev, unit, c)                     # c / unit
        if step is None:                                         # a NaN or inf reward
            return None
        factor, bound = step                                     # bound: the largest |A|
        np.multiply(dev, factor, out=dev)                        # (n, G) the advantages
        if not store_block(out[r0:r1], dev, bound):              # cast into out's dtype
            return None
    return out


def blocked_advantages_wide(rewards, out, eps=1e-8, scale="group", ddof=0, c=1.0):
    r"""The fast path for float64 and integer rewards: the reference's rescale and shift, by block.

    The same equation, symbols and return as :func:`blocked_advantages_narrow`. Every reward is
    first divided by the reference's power of two ``2**k`` (exact), each row shifted by its
    first value, and ``eps`` taken into the same units; a row's ``std + eps`` of 0 (no spread,
    ``eps = 0``) divides nothing, since its deviations are 0.

    >>> blocked_advantages_wide(np.array([[1.0, 0.0, 1.0, 0.0]]), np.empty((1, 4)))
    array([[ 0.99999998, -0.99999998,  0.99999998, -0.99999998]])
    """
    B, G = check_kernel_arrays(rewards, out, narrow=False)
    hi, lo = float(np.max(rewards)), float(np.min(rewards))     # two passes, no temporaries
    if not (np.isfinite(hi) and np.isfinite(lo)):
        return None
    k = power_of_two_exponent(max(abs(hi), abs(lo)), eps=eps)   # the reference's power of two
    with np.errstate(over="ignore"):
        eps_k = float(np.ldexp(eps, -k))                        # eps in the rescaled units
    buf = BlockBuffers(max(1, min(B, BLOCK_ELEMENTS // G)), G)
    blocks = list(row_blocks(B, buf.rows))
    if scale == "batch":                                        # a first sweep
        def summaries():
            for r0, r1 in blocks:
                dev, row_mean = buf.centre_rescaled(rewards[r0:r1], k)
                yield row_mean, buf.sum_of_squares(dev)
        count, _, m2 = pooled_moments(summaries(), G)
        std = np.sqrt(m2 / (count - ddof))
    for r0, r1 in blocks:
        dev, _ = buf.centre_rescaled(rewards[r0:r1], k)         # (n, G) (r - mean) / 2**k
        if scale == "group":
            std = np.sqrt(buf.sum_of_squares(dev) / (G - ddof))  # (n,)
        if c != 1.0:
            dev *= c                                            # leave-one-out baseline
        with np.errstate(over="ignore"):                        # checked by store_block
            if scale == "none":
                np.ldexp(dev, k, out=dev)                       # back to reward units
            else:
                denom = np.atleast_1d(std + eps_k)[:, None]     # (n, 1) or (1, 1)
                np.divide(dev, denom, out=dev, where=denom > 0)
        if not store_block(out[r0:r1], dev, np.inf):
            return None
    return out


def group_advantages_fast(rewards, eps=1e-8, *, scale="group", ddof=0, baseline="mean",
                          out=None):
    r"""Group-relative advantages, as :func:`grpo_lab.group_advantages`, with less memory traffic.

    Same signature, same result (to about one float32 ulp), same errors; the differences are
    how it gets there (see the module docstring) and what it costs: one read of the rewards,
    one write of the advantages, and no temporary the size of either.

    .. math::

        A_{b,i} = \frac{r_{b,i} - \operatorname{mean}(r_{b,1..G})}
                       {\operatorname{std}(r_{b,1..G}) + \varepsilon}

    ========  ========  =========================================================
    Symbol    Shape     Meaning
    ========  ========  =========================================================
    rewards   (B, G)    one scalar reward per completion; row b is prompt b's group
    out       (B, G)    optional: a writeable array of the result's dtype to write into
    return    (B, G)    advantages, in the rewards' float dtype (float64 for ints)
    ========  ========  =========================================================

    ``eps``, ``scale``, ``ddof`` and ``baseline`` mean what they mean in the reference.
    ``out`` works as NumPy's ``out=``: the result is written there and ``out`` is returned, so
    a training loop that calls this every step reuses one buffer instead of asking the
    operating system for fresh pages each time (chapter 7 measures what that costs). It must
    not share memory with ``rewards``; after an error its contents are unspecified.

    >>> import grpo_lab as gl
    >>> gl.group_advantages_fast([[1, 0, 1, 0]])
    array([[ 0.99999998, -0.99999998,  0.99999998, -0.99999998]])
    >>> gl.group_advantages_fast([[1, 1, 1, 1]])  # no spread, no signal: exactly 0
    array([[0., 0., 0., 0.]])
    """
    arr, out_dtype, eps, scale, ddof, baseline = check_group_advantages_arguments(
        rewards, eps, scale, ddof, baseline, finite=False)
    target = np.empty(arr.shape, out_dtype) if out is None else check_out(out, arr, out_dtype)
    G = arr.shape[1]
    c = G / (G - 1) if baseline == "leave_one_out" else 1.0    # r_i - mean of the other G-1

    def reference():                      # a NaN/inf reward, a result too large, longdouble
        result = group_advantages(rewards, eps, scale=scale, ddof=ddof, baseline=baseline)
        if out is None:
            return result
        np.copyto(out, result)
        return out

    if arr.dtype in (np.float32, np.float64) and scale != "batch":
        if kernel_or_none() is not None:                      # one pass, compiled
            with np.errstate(invalid="ignore", over="ignore"):
                result = advantages_one_pass(arr, target, eps, scale, ddof, c)
            return reference() if result is None else result
        if not _NOTICE:
            _NOTICE.append(True)
            warnings.warn("group_advantages_fast: numba is not installed, so float32 and "
                          "float64 rewards take the blocked NumPy path (a few times slower); "
                          "pip install numba for the one-pass kernel", NumbaMissingWarning,
                          stacklevel=2)
    kernel = (blocked_advantages_narrow if is_narrow_dtype(arr.dtype)
              else blocked_advantages_wide if np.dtype(out_dtype).itemsize <= 8
              else None)                                          # longdouble: the reference
    # NaN and inf rewards are found in the row sums and then reported by the reference;
    # until then inf - inf may happen in a block, and is not worth a warning.
    with np.errstate(invalid="ignore"):
        result = None if kernel is None else kernel(arr, target, eps, scale, ddof, c)
    return reference() if result is None else result


def check_out(out, arr, out_dtype):
    """``out`` of :func:`group_advantages_fast`: a writeable ndarray of the result's shape and
    dtype, not sharing memory with the rewards; returns it, or raises naming ``out``."""
    if type(out) is not np.ndarray:               # a subclass (MaskedArray) has its own rules
        raise TypeError(f"out: expected a NumPy array (numpy.ndarray itself) to write the "
                        f"advantages into, got {type(out).__name__}")
    if out.shape != arr.shape or out.dtype != np.dtype(out_dtype):
        raise ValueError(f"out: expected an array of shape {arr.shape} and dtype "
                         f"{np.dtype(out_dtype)} (the rewards' shape and the result's dtype), "
                         f"got shape {out.shape} and dtype {out.dtype}")
    if not out.flags.writeable:
        raise ValueError("out: expected a writeable array, got a read-only one")
    if np.may_share_memory(out, arr) and np.shares_memory(out, arr):   # bounds, then exact
        raise ValueError("out: expected an array that does not overlap rewards in memory "
                         "(the advantages are not computed in place)")
    return out
