r"""A fast ``group_advantages``: the same function as the reference, with fewer passes over memory.

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
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import is_float_dtype
from grpo_lab.core.advantages import check_arguments, group_advantages

__all__ = ["BLOCK_ELEMENTS", "group_advantages_fast"]

#: Rewards per block: 2**15 float64 values are 256 KiB, two such buffers fit a 1 MiB L2 cache.
BLOCK_ELEMENTS = 1 << 15

#: Group sizes up to this count as short rows: centred by one small matmul, not per row.
SHORT_ROWS = 16

_TINY = 2.0 ** -1000     # the smallest eps used in a denominator (see _inverse_denominator)


def _is_narrow(dtype: np.dtype) -> bool:
    """True where every value has at most 24 significant bits: float16/bfloat16/float32, bool."""
    if dtype.kind == "b":
        return True
    return is_float_dtype(dtype) and dtype.itemsize <= 4


def _row_deviations(xb, X, ones, mean):
    """Load a block into the float64 buffer ``X`` and centre each row about its own mean.

    ========  ========  ============================================================
    Symbol    Shape     Meaning
    ========  ========  ============================================================
    xb        (n, G)    the block of rewards, any dtype
    X         (n, G)    float64 buffer; on return, r - mean(r) row by row
    ones      (G,)      float64 ones, so that ``X @ ones`` is the row sums (BLAS)
    mean      (n,)      float64 buffer; on return, each row's mean
    ========  ========  ============================================================
    """
    np.copyto(X, xb, casting="unsafe")             # (n, G) widening to float64: exact
    np.matmul(X, ones, out=mean)                   # (n,) row sums, one BLAS call
    mean /= X.shape[1]
    np.subtract(X, mean[:, None], out=X)           # (n, G) - (n, 1)


def _sum_of_squares(X, Q, ones, out):
    """``out[i] = sum_j X[i, j]**2``: one ``vecdot`` for long rows; squares, then BLAS, for short.

    ``vecdot`` runs one dot product per row, which pays off when a row is long; for G of 8
    that per-row call costs more than squaring into ``Q`` and summing with ``Q @ ones``.
    """
    if X.shape[1] > SHORT_ROWS:
        return np.vecdot(X, X, out=out)
    np.multiply(X, X, out=Q)
    return np.matmul(Q, ones, out=out)


def _inverse_denominator(ss, n_over, eps, c):
    """``c / (sqrt(ss / n_over) + eps)``, in place in ``ss``; finite even where ``ss == 0``.

    Where ``ss == 0`` every deviation of the row is exactly 0, so the factor only has to be
    finite (0 * inf would be NaN): ``eps`` is raised to ``2**-1000`` if it is smaller. That
    changes nothing elsewhere: a row with a spread has a std of at least ``2**-200`` here
    (narrow floats), and adding anything below ``2**-1000`` to it rounds back to it.
    """
    np.divide(ss, n_over, out=ss)
    np.sqrt(ss, out=ss)
    ss += max(eps, _TINY)
    return np.divide(c, ss, out=ss)


def _largest(dtype: np.dtype) -> float:
    """The largest finite value of a float dtype (NumPy's or ml_dtypes')."""
    if dtype.kind == "f":
        return float(np.finfo(dtype).max)
    import ml_dtypes
    return float(ml_dtypes.finfo(dtype).max)


def _store(outb, X, bound, largest):
    """Cast the block into the output; False if a value did not fit its dtype.

    ``bound`` is an upper bound on ``|X|``: below half the dtype's largest value nothing can
    overflow and nothing is checked; above it the cast block is checked for inf.
    """
    with np.errstate(over="ignore"):
        np.copyto(outb, X, casting="unsafe")
    return bound < 0.5 * largest or bool(np.isfinite(outb.astype(np.float64, copy=False)).all())


def _blocks(B, nb):
    """``(r0, r1)`` row ranges of at most ``nb`` rows covering ``0..B``."""
    return ((r0, min(B, r0 + nb)) for r0 in range(0, B, nb))


def _merge(total, block):
    """Chan, Golub and LeVeque's update: two ``(count, mean, m2)`` summaries -> their union."""
    n_a, mean_a, m2_a = total
    n_b, mean_b, m2_b = block
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def _block_summary(row_mean, row_ss, G):
    """``(count, mean, m2)`` of a block from its rows' means and sums of squared deviations.

    m2 = within rows + between row means; neither subtracts two large sums.
    """
    mean = float(row_mean.mean())
    return row_mean.size * G, mean, float(row_ss.sum()) + G * float(np.square(row_mean - mean).sum())


def _centring_matrix(G):
    """``G I - 1 1^T`` (G x G): ``X @ it`` is ``G * (X - row mean)``, in one matmul.

    Its entries are the integers G - 1 and -1, so every product is exact, and for rewards of
    at most 24 significant bits the sums are exact too wherever it matters (see the module
    docstring): an all-equal row gives exactly 0, with no shift.
    """
    return G * np.eye(G) - 1.0


def _narrow(arr, out, eps, scale, ddof, c):
    """float16/bfloat16/float32/bool rewards: no rescale, no shift (see the module docstring).

    Returns ``out``, or None for a NaN/inf reward or a result too large for the dtype.
    """
    B, G = arr.shape
    nb = max(1, min(B, BLOCK_ELEMENTS // G))       # rows per block
    X, Q = np.empty((nb, G)), np.empty((nb, G))    # the block's float64 working copy, squares
    ones = np.ones(G)
    mean, ss = np.empty(nb), np.empty(nb)          # per row of the block
    largest = _largest(out.dtype)

    if scale == "batch":                           # first sweep: the std of all B*G rewards
        total = (0, 0.0, 0.0)
        for r0, r1 in _blocks(B, nb):
            n = r1 - r0
            _row_deviations(arr[r0:r1], X[:n], ones, mean[:n])
            if not np.isfinite(mean[:n]).all():
                return None
            total = _merge(total, _block_summary(mean[:n], _sum_of_squares(
                X[:n], Q[:n], ones, ss[:n]), G))
        count, _, m2 = total
        batch_r = float(_inverse_denominator(np.array([m2]), count - ddof, eps, c)[0])
        batch_bound = batch_r * np.sqrt(m2)         # |r - group mean| <= sqrt(m2)

    # Short rows are centred by a matmul (deviations times G, `unit`); long ones per row.
    short = G <= SHORT_ROWS and scale != "batch"
    if short:
        centre, D, unit = _centring_matrix(G), np.empty((nb, G)), G
    else:
        unit = 1
    for r0, r1 in _blocks(B, nb):
        n = r1 - r0
        if short:
            np.copyto(X[:n], arr[r0:r1], casting="unsafe")        # (n, G) float64, exact
            Xb = np.matmul(X[:n], centre, out=D[:n])                # (n, G) G * deviations
        else:
            Xb = X[:n]
            _row_deviations(arr[r0:r1], Xb, ones, mean[:n])
        if scale == "group":
            s = _sum_of_squares(Xb, Q[:n], ones, ss[:n])             # (n,) unit**2 * SS
            if not np.isfinite(s.sum()):                            # a NaN or inf reward
                return None
            r = _inverse_denominator(s, G - ddof, unit * eps, c)   # (n,)
            np.multiply(Xb, r[:, None], out=Xb)                      # (n, G) * (n, 1)
            bound = c * np.sqrt(G)   # |r_i - mean| / std <= sqrt(G - 1) (Samuelson)
        elif scale == "batch":
            if not np.isfinite(mean[:n]).all():
                return None
            Xb *= batch_r
            bound = batch_bound
        else:  # "none"
            if c != unit:
                Xb *= c / unit
            bound = max(abs(float(Xb.max())), abs(float(Xb.min())))
            if not np.isfinite(bound):
                return None
        if not _store(out[r0:r1], Xb, bound, largest):
            return None
    return out


def _wide(arr, out, eps, scale, ddof, c):
    """float64 and integer rewards: the reference's own steps (rescale, shift), block by block.

    Returns ``out``, or None for a NaN/inf reward or a result too large for float64.
    """
    B, G = arr.shape
    hi, lo = float(np.max(arr)), float(np.min(arr))         # two reductions, no temporaries
    if not (np.isfinite(hi) and np.isfinite(lo)):
        return None
    _, k = np.frexp(max(abs(hi), abs(lo)))                  # the reference's power of two
    k = int(k)
    with np.errstate(over="ignore"):
        eps_k = float(np.ldexp(eps, -k))                    # eps in the rescaled units
    nb = max(1, min(B, BLOCK_ELEMENTS // G))
    X, Q = np.empty((nb, G)), np.empty((nb, G))
    ones = np.ones(G)
    mean, ss, first = np.empty(nb), np.empty(nb), np.empty(nb)

    def deviations(r0, r1):
        """The block's rescaled, shifted deviations in X, and its row means (rescaled)."""
        n = r1 - r0
        Xb, f, m = X[:n], first[:n], mean[:n]
        np.copyto(Xb, arr[r0:r1], casting="unsafe")
        np.ldexp(Xb, -k, out=Xb)                            # exact: only exponents change
        np.copyto(f, Xb[:, 0])
        np.subtract(Xb, f[:, None], out=Xb)                 # shifted data, first column 0
        np.matmul(Xb, ones, out=m)
        m /= G
        np.subtract(Xb, m[:, None], out=Xb)                 # (n, G) - (n, 1)
        return Xb, f + m

    if scale == "batch":
        total = (0, 0.0, 0.0)
        for r0, r1 in _blocks(B, nb):
            n = r1 - r0
            Xb, row_mean = deviations(r0, r1)
            total = _merge(total, _block_summary(row_mean, _sum_of_squares(
                Xb, Q[:n], ones, ss[:n]), G))
        count, _, m2 = total
        batch_std = np.sqrt(m2 / (count - ddof))

    for r0, r1 in _blocks(B, nb):
        n = r1 - r0
        Xb, _ = deviations(r0, r1)
        if scale == "group":
            std = np.sqrt(_sum_of_squares(Xb, Q[:n], ones, ss[:n]) / (G - ddof))   # (n,)
        if c != 1.0:
            Xb *= c                                          # leave-one-out baseline
        if scale == "none":
            with np.errstate(over="ignore"):                 # checked by _store
                np.ldexp(Xb, k, out=Xb)                      # back to reward units
        else:
            with np.errstate(over="ignore"):
                denom = (std if scale == "group" else np.full(n, batch_std)) + eps_k
            # denom == 0 only for a row with no spread and eps == 0: its deviations are 0.
            np.divide(Xb, denom[:, None], out=Xb, where=denom[:, None] > 0)
        if not _store(out[r0:r1], Xb, np.inf, _largest(out.dtype)):
            return None
    return out


def group_advantages_fast(rewards, eps=1e-8, *, scale="group", ddof=0, baseline="mean"):
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
    return    (B, G)    advantages, in the rewards' float dtype (float64 for ints)
    ========  ========  =========================================================

    ``eps``, ``scale``, ``ddof`` and ``baseline`` mean what they mean in the reference.

    >>> import grpo_lab as gl
    >>> gl.group_advantages_fast([[1, 0, 1, 0]])
    array([[ 0.99999998, -0.99999998,  0.99999998, -0.99999998]])
    >>> gl.group_advantages_fast([[1, 1, 1, 1]])  # no spread, no signal: exactly 0
    array([[0., 0., 0., 0.]])
    """
    arr, out_dtype, eps, scale, ddof, baseline = check_arguments(
        rewards, eps, scale, ddof, baseline, finite=False)
    G = arr.shape[1]
    c = G / (G - 1) if baseline == "leave_one_out" else 1.0   # r_i - mean of the other G-1
    out = np.empty(arr.shape, dtype=out_dtype)
    # NaN and inf rewards are found in the row sums and then reported by the reference;
    # until then inf - inf may happen in a block, and is not worth a warning.
    with np.errstate(invalid="ignore"):
        if _is_narrow(arr.dtype):
            result = _narrow(arr, out, eps, scale, ddof, c)
        elif np.dtype(out_dtype).itemsize <= 8:
            result = _wide(arr, out, eps, scale, ddof, c)
        else:
            result = None                                      # longdouble: rare, exact
    if result is None:
        # A NaN or inf in the rewards, a result that does not fit the output dtype, or a
        # longdouble input: the reference raises the error (with its message) or computes it.
        return group_advantages(rewards, eps, scale=scale, ddof=ddof, baseline=baseline)
    return result
