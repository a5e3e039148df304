r"""Group statistics without overflow or cancellation, each a small named function a chapter
can show (chapters 1, 2, 4 and 8).

========================  =======  ===========================================================
helper                    chapter  what it keeps from going wrong
========================  =======  ===========================================================
``centred_deviations``    1, 8     ``x - mean(x)`` exactly 0 for an all-equal group
``std_from_deviations``   1, 8     the std from deviations that already have mean 0
``power_of_two_rescale``  1, 8     no square overflows: divide by 2**k, exactly
``scale_by_power_of_two`` 1, 8     multiply by 2**k, exactly, inf (not a warning) past range
``divide_or_zero``        1, 8     0 / 0 read as "no spread, no signal": 0, not NaN
``masked_mean``           2, 4     a mean over the real tokens only, right whenever it fits
========================  =======  ===========================================================

Each is two functions: the public one checks its arguments (cheaply: a numeric array of the
right rank and shape; NaN passes through as in NumPy) and calls its ``*_math`` twin, which
takes arrays already checked and cast to the dtype to compute in (float64) and checks
nothing. The package's own formulas (:func:`grpo_lab.group_advantages`,
:func:`grpo_lab.process_advantages`, the losses) call the twins on the values their own door
checked. k3, logsumexp and the log-ratio are in :mod:`grpo_lab.numerics.logspace`.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import (as_float_array, check_block_input, check_int,
                                        check_real, describe)

__all__ = ["EPS_HEADROOM_BITS", "centred_deviations", "centred_deviations_math",
           "check_divide_or_zero_arguments", "check_masked_mean_arguments", "check_std_arguments",
           "divide_or_zero", "divide_or_zero_math", "masked_mean", "masked_mean_math",
           "power_of_two_exponent", "power_of_two_rescale", "power_of_two_rescale_math",
           "scale_by_power_of_two", "scale_by_power_of_two_math", "std_from_deviations",
           "std_from_deviations_math"]

#: ``power_of_two_rescale(x, eps=eps)`` keeps ``eps / 2**k`` below ``2**EPS_HEADROOM_BITS``.
EPS_HEADROOM_BITS = 1000


# --- r - mean(r), exactly ------------------------------------------------------------------------

def centred_deviations(x, mask=None):
    r"""``x - mean(x)`` along the last axis, computed about each row's first element.

    .. math::

        d_i = (x_i - x_1) - \operatorname{mean}_j (x_j - x_1) = x_i - \operatorname{mean}(x)

    Shifting by a value from the data (the "shifted data" algorithm) leaves a constant row as
    exact zeros, ``0 - mean(0) == 0``, where ``x - mean(x)`` can be off by one rounding
    (``0.1 + 0.1 + 0.1 != 0.3``), and it removes most of the cancellation when the spread is
    small against the mean (1e3 +- 1e-3).

    ========  ========  ==========================================================
    Symbol    Shape     Meaning
    ========  ========  ==========================================================
    x         (..., G)  one group per row, e.g. rewards (B, G)
    mask      (..., G)  optional: True on the entries that count; each row needs one
    return    (..., G)  deviations from the row mean; 0 where ``mask`` is False
    ========  ========  ==========================================================

    With a ``mask`` the shift is each row's first valid entry and the mean is over the valid
    entries only (process supervision's ragged steps, chapter 8).

    >>> import numpy as np, grpo_lab as gl
    >>> gl.centred_deviations(np.array([[0.1, 0.1, 0.1], [1.0, 2.0, 6.0]]))  # exact 0s, then -2 -1 3
    array([[ 0.,  0.,  0.],
           [-2., -1.,  3.]])
    >>> gl.centred_deviations(np.array([[9.0, 1.0, 3.0]]), mask=[[False, True, True]])
    array([[ 0., -1.,  1.]])
    """
    x, mask = check_block_input("x", x, mask=mask, min_size=1)
    return centred_deviations_math(x, mask)


def centred_deviations_math(x, mask=None):
    """:func:`centred_deviations` on checked arrays: ``x`` (..., G) floats, ``mask`` None or
    bools of ``x``'s shape."""
    if mask is None:
        y = x - x[..., :1]                                   # (..., G), first column exactly 0
        return y - y.mean(axis=-1, keepdims=True)            # (..., G) - (..., 1)
    first = np.take_along_axis(x, mask.argmax(axis=-1)[..., None], axis=-1)   # (..., 1)
    y = np.where(mask, x - first, 0.0)                       # (..., G), padding -> 0
    n = mask.sum(axis=-1, keepdims=True)                     # (..., 1) valid entries
    return np.where(mask, y - y.sum(axis=-1, keepdims=True) / n, 0.0)


# --- the std from the deviations -----------------------------------------------------------------

def std_from_deviations(dev, ddof=0, *, count=None):
    r"""The standard deviation along the last axis from deviations that have mean 0.

    .. math::

        \operatorname{std} = \sqrt{\frac{1}{n - \text{ddof}} \sum_i d_i^2}

    ``count`` is n, the number of entries per row (default: the last axis' length; an (..., 1)
    array for ragged rows whose padding holds 0). Returns shape (..., 1), ready to broadcast.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.std_from_deviations(np.array([[-1.0, 1.0, -1.0, 1.0]]))           # population
    array([[1.]])
    >>> gl.std_from_deviations(np.array([[-1.0, 1.0, -1.0, 1.0]]), ddof=1).round(4)  # Bessel
    array([[1.1547]])
    """
    dev, ddof, n = check_std_arguments(dev, ddof, count)     # n: entries per row
    return std_from_deviations_math(dev, ddof, n)


def std_from_deviations_math(dev, ddof, n):
    """:func:`std_from_deviations` on checked values: ``dev`` (..., G) floats, ``ddof`` an int
    below ``n``, the entries per row (an int, or an (..., 1) array)."""
    return np.sqrt((dev * dev).sum(axis=-1, keepdims=True) / (n - ddof))   # (..., 1)


def check_std_arguments(dev, ddof, count):
    """``(dev, ddof, n)`` for :func:`std_from_deviations`: a real array, an integer ``ddof >= 0``
    and ``n`` (``count``, or the last axis' length) above ``ddof`` in every row."""
    dev, _ = check_block_input("dev", dev)
    ddof = check_int("ddof", ddof, minimum=0)
    if count is None:
        if dev.shape[-1] <= ddof:
            raise ValueError(f"ddof: expected fewer than the {dev.shape[-1]} entries per row, "
                             f"got {ddof}")
        return dev, ddof, dev.shape[-1]
    n, _ = as_float_array("count", count, shape_doc=" of shape (..., 1)")   # finite
    if n.shape != dev.shape[:-1] + (1,) or not (n > ddof).all():
        raise ValueError(f"count: expected more than ddof = {ddof} entries in every row, shape "
                         f"{dev.shape[:-1] + (1,)}, got {describe(n)} with minimum {n.min()}")
    return dev, ddof, n


# --- exact rescaling by a power of two -------------------------------------------------------------

def power_of_two_rescale(x, *, eps=0.0):
    r"""``(x / 2**k, k)`` with ``2**k`` just above ``max |x|``: exact, and ``|x / 2**k| < 1``.

    Dividing by a power of two changes only the exponent of each number, so no digit is lost
    (unless a value is 2**1000 times smaller than the largest and underflows: far below one
    rounding of the largest); afterwards no square can overflow, even for rewards of 1e300.
    ``x`` has any shape and at least one value; ``k`` is a Python int.

    ``eps`` (> 0: an eps that will be added to a std in these units, ``eps / 2**k``) makes
    ``2**k`` at least ``eps / 2**1000`` too, so that ``eps / 2**k`` stays a float: rewards
    near 1e-320 and eps = 1e-8 would otherwise put it at 2**1050, past float64's range.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.power_of_two_rescale(np.array([3.0, -6.0, 0.5]))       # 2**3 = 8 > 6
    (array([ 0.375 , -0.75  ,  0.0625]), 3)
    """
    x, _ = check_block_input("x", x, min_size=1)
    return power_of_two_rescale_math(x, eps=check_real("eps", eps, minimum=0.0))


def power_of_two_rescale_math(x, *, eps=0.0):
    """:func:`power_of_two_rescale` on a checked float array ``x`` and a float ``eps >= 0``."""
    k = power_of_two_exponent(np.abs(x).max(), eps=eps)
    return np.ldexp(x, -k), k


def power_of_two_exponent(largest, *, eps=0.0) -> int:
    """The ``k`` of :func:`power_of_two_rescale` for a block whose largest ``|x|`` is ``largest``:
    ``largest = m 2**k`` with ``0.5 <= m < 1``, raised so that ``eps / 2**k <= 2**1000``.

    >>> import grpo_lab.numerics.stable as st
    >>> st.power_of_two_exponent(6.0), st.power_of_two_exponent(1e-320, eps=1e-8)
    (3, -1026)
    """
    _, k = np.frexp(largest)                                 # largest = m 2**k, 0.5 <= m < 1
    if eps > 0:                                              # eps / 2**k <= 2**1000
        k = max(k, np.frexp(eps)[1] - EPS_HEADROOM_BITS)
    return int(k)


def scale_by_power_of_two(x, k):
    """``x * 2**k``, exactly; past the dtype's range it is inf, quietly (the caller checks).

    Undoes :func:`power_of_two_rescale` (``k``), or brings a constant into its units (``-k``).

    >>> import grpo_lab as gl
    >>> float(gl.scale_by_power_of_two(0.375, 3)), float(gl.scale_by_power_of_two(1e-8, 3))
    (3.0, 8e-08)
    """
    x = check_block_input("x", x, min_ndim=0)[0]
    return scale_by_power_of_two_math(x, check_int("k", k))


def scale_by_power_of_two_math(x, k):
    """:func:`scale_by_power_of_two` on a checked float (array) ``x`` and an int ``k``."""
    with np.errstate(over="ignore"):                         # inf is checked by the caller
        return np.ldexp(x, k)


# --- 0 / 0 as 0 ----------------------------------------------------------------------------------

def divide_or_zero(num, den):
    """``num / den`` where ``den > 0``, and 0 where ``den`` is 0: no spread means no signal.

    ``den`` broadcasts over ``num`` (a std of shape (B, 1) over advantages (B, G)); it is never
    negative (a std plus an eps). With ``eps = 0`` an all-equal group is ``0 / 0``, read as 0.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.divide_or_zero(np.array([[1.0, -1.0], [0.0, 0.0]]), np.array([[0.5], [0.0]]))
    array([[ 2., -2.],
           [ 0.,  0.]])
    """
    return divide_or_zero_math(*check_divide_or_zero_arguments(num, den))


def divide_or_zero_math(num, den):
    """:func:`divide_or_zero` on checked float arrays, ``den`` broadcasting over ``num``."""
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def check_divide_or_zero_arguments(num, den):
    """``(num, den)`` for :func:`divide_or_zero`: real arrays, ``den`` broadcasting over ``num``
    without changing its shape (a (B, 1) std over (B, G) advantages, or a scalar)."""
    num, _ = check_block_input("num", num)
    den, _ = check_block_input("den", den, min_ndim=0)
    try:
        fits = np.broadcast_shapes(num.shape, den.shape) == num.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"den: expected a shape that broadcasts over num's {num.shape}, such "
                         f"as (B, 1) for num (B, G), got {describe(den)}")
    return num, den


# --- the mean over the real tokens ------------------------------------------------------------------

def masked_mean(x, mask, axis=None):
    r"""The mean of ``x`` over the entries where ``mask`` is True: over all (``axis=None``) or
    per row (``axis=-1``).

    .. math::

        \bar x = \frac{\sum_t m_t\, x_t}{\sum_t m_t}

    Padding never enters, whatever it holds (NaN aside: pass finite padding). A sum past the
    float range (a mean of values near 1e308) is redone on ``x / 2**k``, so the mean comes out
    right whenever it fits.

    **A row with no True entry has no mean**, and the book does not invent one: it is a
    ``ValueError`` naming ``mask`` and the row, the rule of every mean over tokens in the
    package (:func:`grpo_lab.numerics.validate.valid_lengths`: an empty completion is almost
    always a masking bug), not a quiet NaN, nor a ``RuntimeWarning`` that the package's own
    pytest setting turns into an error. Conventions elsewhere differ: ``(x * m).sum() /
    m.sum()`` in PyTorch is a quiet NaN there, and verl's ``masked_mean`` divides by
    ``m.sum() + 1e-8``, a quiet 0. A caller whose rows may be empty (an adapter for another
    course's tests, a batch with empty completions) wants a masked sum over a constant of its
    own choosing, which is defined on every row: ``grpo_lab.torch.masked_normalize``.

    >>> import numpy as np, grpo_lab as gl
    >>> x = np.array([[1.0, 3.0, 99.0], [2.0, 2.0, 2.0]])
    >>> gl.masked_mean(x, [[1, 1, 0], [1, 1, 1]]), gl.masked_mean(x, [[1, 1, 0], [1, 1, 1]], axis=-1)
    (np.float64(2.0), array([2., 2.]))
    """
    return masked_mean_math(*check_masked_mean_arguments(x, mask, axis))


def masked_mean_math(x, mask, axis=None):
    """:func:`masked_mean` on checked arrays: ``x`` floats (or bools), ``mask`` bools of its
    shape, ``axis`` None or -1."""
    kept, n = np.where(mask, x, 0.0), mask.sum(axis=axis)         # padding -> 0, counts
    with np.errstate(over="ignore"):
        total = kept.sum(axis=axis)
    if np.isfinite(total).all() or not np.isfinite(kept).all():
        return total / n
    small, k = power_of_two_rescale_math(kept)     # a sum past the float range, a mean inside
    return scale_by_power_of_two_math(small.sum(axis=axis) / n, k)


def check_masked_mean_arguments(x, mask, axis):
    """``(x, mask, axis)`` for :func:`masked_mean`: a real array, a bool mask of its shape with
    a True entry in every row (``axis=-1``) or somewhere (``axis=None``), and ``axis`` None or
    the last axis."""
    x, mask = check_block_input("x", x, mask=mask, mask_required=True)
    if not (axis is None or (isinstance(axis, (int, np.integer)) and not isinstance(axis, bool)
                             and axis in (-1, x.ndim - 1))):
        raise ValueError(f"axis: expected None (over every entry) or -1 (per row), got "
                         f"{describe(axis)}")
    if axis is None and not mask.any():
        raise ValueError(f"mask: expected at least one True entry, got none in {describe(mask)}: "
                         f"a mean over no entry is 0/0 and has no value")
    if axis is not None and x.ndim > 0:
        empty = ~mask.any(axis=-1)                                # (...,) rows without a token
        if empty.any():
            row = tuple(int(i) for i in np.argwhere(empty)[0])
            raise ValueError(
                f"mask: expected a True entry in every row (axis=-1), got none in row "
                f"{row[0] if len(row) == 1 else row} ({int(empty.sum())} empty row(s) in all): "
                f"a mean over no entry is 0/0 and has no value; for a sum over a constant that "
                f"every row has, see grpo_lab.torch.masked_normalize")
    return x, mask, axis
