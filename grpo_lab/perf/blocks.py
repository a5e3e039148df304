r"""The building blocks of the blocked fast path (:mod:`grpo_lab.perf.advantages_fast`).

Taught in chapter 7 (``chapters/07_performance.ipynb``). A kernel takes its rows a block at a
time; :class:`BlockBuffers` holds the block's float64 working memory, allocated once and small
enough to stay in the L2 cache, and every step below writes into it with ``out=``:

==========================  ====================================================================
``BlockBuffers.centre``     load a block in float64 and centre its rows (BLAS row sums)
``BlockBuffers.centre_rescaled``  the same after an exact power-of-two rescale and a shift
``BlockBuffers.sum_of_squares``   each row's sum of squared deviations
``group_factor``            ``c / (std + eps)`` of each row, from its deviations
``batch_factor``            ``c / (std + eps)`` of all B*G rewards: a first sweep
``none_factor``             ``c`` alone (Dr. GRPO's unscaled advantages)
``inverse_denominator``     ``c / (std + eps)``, finite even for a row with no spread
``pooled_moments``          count, mean and m2 of all rewards from per-block summaries
``store_block``             cast the block into the output, and say if it fitted
==========================  ====================================================================

Each factor comes with a bound on the advantages' size, so that :func:`store_block` checks for
overflow only when it could happen; a factor of None means a NaN or inf reward, which the
reference then reports. They are building blocks: their arguments are checked by the public
function, and :func:`check_kernel_arrays` is a kernel's one cheap check.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import check_shape, describe, is_float_dtype

__all__ = ["SHORT_ROWS", "TINY", "BlockBuffers", "batch_factor", "centring_matrix",
           "check_kernel_arrays", "group_factor", "inverse_denominator", "is_narrow_dtype",
           "largest_finite", "merge_moments", "none_factor", "pooled_moments", "row_blocks",
           "store_block"]

#: Group sizes up to this count as short rows: centred by one small matmul, not per row.
SHORT_ROWS = 16

#: The smallest eps used in a denominator (see :func:`inverse_denominator`).
TINY = 2.0 ** -1000


def is_narrow_dtype(dtype) -> bool:
    """True where every value has at most 24 significant bits: float16/bfloat16/float32, bool.

    >>> is_narrow_dtype(np.float32), is_narrow_dtype(np.float64), is_narrow_dtype(np.int8)
    (True, False, False)
    """
    dtype = np.dtype(dtype)
    return dtype.kind == "b" or (is_float_dtype(dtype) and dtype.itemsize <= 4)


def centring_matrix(G):
    """``G I - 1 1^T`` (G x G): ``X @ it`` is ``G * (X - row mean)``, in one matmul.

    Its entries are the integers G - 1 and -1, so every product is exact, and for rewards of
    at most 24 significant bits the sums are exact too wherever it matters (see
    :mod:`grpo_lab.perf.advantages_fast`): an all-equal row gives exactly 0, with no shift.

    >>> centring_matrix(3) @ [1.0, 2.0, 6.0]      # 3 * ([1, 2, 6] - 3)
    array([-6., -3.,  9.])
    """
    return G * np.eye(G) - 1.0


def row_blocks(B, rows):
    """``(r0, r1)`` row ranges of at most ``rows`` rows covering ``0..B``.

    >>> list(row_blocks(5, 2))
    [(0, 2), (2, 4), (4, 5)]
    """
    return ((r0, min(B, r0 + rows)) for r0 in range(0, B, rows))


class BlockBuffers:
    """The float64 working memory of one block of ``rows`` rows of G rewards, reused by every block.

    ``short=True`` centres rows with :func:`centring_matrix` (G <= ``SHORT_ROWS``): one matmul
    for the whole block instead of a row sum and a subtraction; the deviations then come out
    multiplied by G, and :meth:`centre` says so in the ``unit`` it returns.
    """

    def __init__(self, rows, G, *, short=False):
        self.rows, self.G = rows, G
        self.X, self.Q = np.empty((rows, G)), np.empty((rows, G))   # (rows, G) data, squares
        self.ones = np.ones(G)                                       # X @ ones: row sums
        self.mean, self.ss, self.first = np.empty(rows), np.empty(rows), np.empty(rows)
        self.centring = centring_matrix(G) if short else None
        self.D = np.empty((rows, G)) if short else None              # (rows, G) G * deviations

    def centre(self, block):
        """``(dev, unit)``: the block's ``unit * (r - row mean)`` in float64; row means in ``mean``.

        Widening to float64 is exact. ``unit`` is G for short rows (the row means are then not
        computed), else 1.
        """
        n = block.shape[0]
        X = self.X[:n]
        np.copyto(X, block, casting="unsafe")                  # (n, G) float64, exact
        if self.centring is not None:
            return np.matmul(X, self.centring, out=self.D[:n]), self.G   # (n, G) G * dev
        np.matmul(X, self.ones, out=self.mean[:n])             # (n,) row sums, one BLAS call
        self.mean[:n] /= self.G
        np.subtract(X, self.mean[:n, None], out=X)             # (n, G) - (n, 1)
        return X, 1

    def centre_rescaled(self, block, k):
        """``(dev, row_mean)`` of ``block * 2**-k``: the reference's rescale and shift, per block.

        Multiplying by ``2**-k`` changes only exponents (exact); shifting each row by its first
        value makes an all-equal row exactly 0, as in :func:`grpo_lab.group_advantages`.
        """
        n = block.shape[0]
        X, first, mean = self.X[:n], self.first[:n], self.mean[:n]
        np.copyto(X, block, casting="unsafe")
        np.ldexp(X, -k, out=X)                                 # exact: only exponents change
        np.copyto(first, X[:, 0])
        np.subtract(X, first[:, None], out=X)                  # shifted data, first column 0
        np.matmul(X, self.ones, out=mean)
        mean /= self.G
        np.subtract(X, mean[:, None], out=X)                   # (n, G) - (n, 1)
        return X, first + mean

    def sum_of_squares(self, dev):
        """``ss[i] = sum_j dev[i, j]**2``: one ``vecdot`` for long rows; squares and BLAS for short.

        ``vecdot`` runs one dot product per row, which pays off when a row is long; for G of 8
        that per-row call costs more than squaring into ``Q`` and summing with ``Q @ ones``.
        """
        n = dev.shape[0]
        if self.G > SHORT_ROWS:
            return np.vecdot(dev, dev, out=self.ss[:n])
        np.multiply(dev, dev, out=self.Q[:n])
        return np.matmul(self.Q[:n], self.ones, out=self.ss[:n])


def inverse_denominator(ss, n_over, eps, c):
    """``c / (sqrt(ss / n_over) + eps)``, in place in ``ss``; finite even where ``ss == 0``.

    Where ``ss == 0`` every deviation of the row is exactly 0, so the factor only has to be
    finite (0 * inf would be NaN): ``eps`` is raised to ``TINY`` = ``2**-1000`` if it is smaller.
    That changes nothing elsewhere: a row with a spread has a std of at least ``2**-200`` here
    (narrow floats), and adding anything below ``2**-1000`` to it rounds back to it.

    >>> r = inverse_denominator(np.array([4.0, 0.0]), 4, 0.0, 1.0)   # std 1, and std 0
    >>> float(r[0]), float(r[1]) == 2.0 ** 1000                      # 1, and finite
    (1.0, True)
    """
    np.divide(ss, n_over, out=ss)
    np.sqrt(ss, out=ss)
    ss += max(eps, TINY)
    return np.divide(c, ss, out=ss)


def merge_moments(total, block):
    """Chan, Golub and LeVeque's update: two ``(count, mean, m2)`` summaries -> their union.

    >>> merge_moments((2, 1.0, 2.0), (2, 3.0, 2.0))     # {0, 2} and {2, 4}: mean 2, m2 8
    (4, 2.0, 8.0)
    """
    n_a, mean_a, m2_a = total
    n_b, mean_b, m2_b = block
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def pooled_moments(blocks, G):
    """``(count, mean, m2)`` of all rewards, from ``(row_mean (n,), row_ss (n,))`` per block.

    A block's m2 is within its rows plus between its row means; neither subtracts two large
    sums, and blocks are merged by :func:`merge_moments`. A NaN or inf reward makes the mean
    and m2 non-finite.

    >>> pooled_moments([(np.array([1.0, 3.0]), np.array([2.0, 2.0]))], G=2)   # {0,2}, {2,4}
    (4, 2.0, 8.0)
    """
    total = (0, 0.0, 0.0)
    for row_mean, row_ss in blocks:
        mean = float(row_mean.mean())
        m2 = float(row_ss.sum()) + G * float(np.square(row_mean - mean).sum())
        total = merge_moments(total, (row_mean.size * G, mean, m2))
    return total


def largest_finite(dtype) -> float:
    """The largest finite value of a float dtype (NumPy's or ml_dtypes').

    >>> largest_finite(np.float16)
    65504.0
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return float(np.finfo(dtype).max)
    import ml_dtypes
    return float(ml_dtypes.finfo(dtype).max)


def group_factor(buf, dev, unit, eps, ddof, c):
    """``(c / (std + eps) per row (n, 1), bound on |A|)`` from ``unit * deviations``; None on NaN.

    The std is in the deviations' units, so eps is too (``unit * eps``). A group's largest
    deviation is at most ``sqrt(G - 1)`` of its population std (Samuelson), so ``|A| <= c sqrt(G)``.
    """
    ss = buf.sum_of_squares(dev)                               # (n,) unit**2 * SS
    if not np.isfinite(ss.sum()):                              # a NaN or inf reward
        return None
    factor = inverse_denominator(ss, buf.G - ddof, unit * eps, c)   # (n,)
    return factor[:, None], c * np.sqrt(buf.G)


def batch_factor(rewards, buf, eps, ddof, c):
    """``(c / (std of all B*G rewards + eps), bound on |A|)``, or None for a NaN or inf reward.

    One sweep over the blocks before the one that writes: each block is centred on its row
    means and summarised, and :func:`pooled_moments` merges the summaries. A deviation from a
    group mean is at most ``sqrt(m2)``, so ``|A| <= factor * sqrt(m2)``.
    """
    def summaries():
        for r0, r1 in row_blocks(rewards.shape[0], buf.rows):
            dev, _ = buf.centre(rewards[r0:r1])                # (n, G) r - row mean
            yield buf.mean[:r1 - r0], buf.sum_of_squares(dev)  # (n,), (n,)
    count, mean, m2 = pooled_moments(summaries(), buf.G)
    if not (np.isfinite(mean) and np.isfinite(m2)):
        return None
    factor = float(inverse_denominator(np.array([m2]), count - ddof, eps, c)[0])
    return factor, factor * np.sqrt(m2)


def none_factor(dev, unit, c):
    """``(c / unit, bound on |A|)``: no std, only the baseline's factor; None on NaN or inf."""
    factor = c / unit
    bound = max(abs(float(dev.max())), abs(float(dev.min()))) * factor
    return (factor, bound) if np.isfinite(bound) else None


def check_kernel_arrays(rewards, out, *, narrow):
    """A kernel's one cheap check: (B, G) rewards with G >= 2 of the right kind, and ``out``.

    Returns ``(B, G)``. ``narrow`` says which kernel: at most 24 significant bits or not.
    """
    if not isinstance(rewards, np.ndarray) or rewards.ndim != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards: expected a 2-D array of shape (B, G) with G >= 2, got "
                         f"{describe(rewards)}")
    if is_narrow_dtype(rewards.dtype) != narrow:
        want = "float16, bfloat16, float32 or bool" if narrow else "float64 or integer"
        raise TypeError(f"rewards: expected dtype {want} for this kernel, got {rewards.dtype}")
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out: expected a NumPy array of shape {rewards.shape}, got "
                        f"{describe(out)}")
    check_shape("out", out, rewards.shape, " (the shape of rewards)")
    return rewards.shape


def store_block(out_block, X, bound):
    """Cast the block ``X`` into ``out_block``; False if a value did not fit the output dtype.

    ``bound`` is an upper bound on ``|X|``: below half the dtype's largest value nothing can
    overflow and nothing is checked; above it the cast block is checked for inf.
    """
    with np.errstate(over="ignore"):
        np.copyto(out_block, X, casting="unsafe")
    if bound < 0.5 * largest_finite(out_block.dtype):
        return True
    return bool(np.isfinite(out_block.astype(np.float64, copy=False)).all())
