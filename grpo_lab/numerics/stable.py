r"""The careful numerics the formulas rely on, each a small named function a chapter can show.

========================  =======  ===========================================================
helper                    chapter  what it keeps from going wrong
========================  =======  ===========================================================
``centred_deviations``    1, 8     ``x - mean(x)`` exactly 0 for an all-equal group
``std_from_deviations``   1, 8     the std from deviations that already have mean 0
``power_of_two_rescale``  1, 8     no square overflows: divide by 2**k, exactly
``scale_by_power_of_two`` 1, 8     multiply by 2**k, exactly, inf (not a warning) past range
``divide_or_zero``        1, 8     0 / 0 read as "no spread, no signal": 0, not NaN
``k3_series``             3        k3 = e^{-d} + d - 1 without cancellation for small ``|d|``
``k3_from_log_ratio``     3        k3 over every ``d``: series near 0, ``expm1`` elsewhere
``logsumexp``             4        ``log sum exp z`` with no overflow, whatever the logits
``log_ratio``             4        ``logp - old_logp`` in float64, clamped before any ``exp``
``masked_mean``           2, 4     a mean over the real tokens only
========================  =======  ===========================================================

They are building blocks: they take arrays that a public function has already checked and
cast to its working dtype (float64), compute in the dtype they are given, and only check
what is cheap (a numeric array of the right rank and shape; NaN passes through as in NumPy).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from grpo_lab.numerics.validate import (as_array, as_float_array, as_mask, check_int, check_real,
                                        check_shape, describe)

__all__ = ["EPS_HEADROOM_BITS", "K3_SERIES_BELOW", "K3_SERIES_TERMS", "centred_deviations",
           "check_block_input", "check_divide_or_zero_arguments", "check_log_ratio_arguments",
           "check_std_arguments",
           "divide_or_zero", "k3_from_log_ratio", "k3_series", "log_ratio", "logsumexp",
           "masked_mean", "power_of_two_exponent",
           "power_of_two_rescale", "scale_by_power_of_two", "std_from_deviations"]

#: Below this ``|d|``, k3 is summed as a series: ``expm1(-d) + d`` would lose -log2|d| bits.
K3_SERIES_BELOW = 0.1
#: ``power_of_two_rescale(x, eps=eps)`` keeps ``eps / 2**k`` below ``2**EPS_HEADROOM_BITS``.
EPS_HEADROOM_BITS = 1000
#: Terms up to ``d^13 / 13!``: the truncation is under 1e-20 relative for ``|d| < 0.1``.
K3_SERIES_TERMS = 13


def check_block_input(name: str, x, *, mask=None, min_ndim: int = 1, min_size: int = 0,
                      mask_required: bool = False):
    """The one cheap check of a building block: a real array of at least ``min_ndim`` dimensions
    and ``min_size`` elements.

    Ints and bools come back as float64; floats as given (not copied). A ``mask`` must have
    ``x``'s shape and comes back as bools; None is no mask, unless ``mask_required``. No scan
    for NaN: that is the public function's job.
    """
    if mask is None and mask_required:
        raise TypeError(f"mask: expected a mask of 0/1 or bools (the shape of {name}), got None")
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.size >= min_size:
        arr = x                                        # the usual case, checked in O(1)
    else:
        arr, dtype = as_float_array(name, x, finite=False, min_size=min_size)
        arr = arr.astype(dtype, copy=False)
    if arr.ndim < min_ndim:
        raise ValueError(f"{name}: expected an array with at least {min_ndim} dimension, "
                         f"got {describe(arr)}")
    if mask is not None:
        mask = as_array("mask", mask, f"a mask of 0/1 or bools (the shape of {name})")
        if mask.dtype != bool:
            mask = as_mask("mask", mask, arr.shape, f" (the shape of {name})")
        check_shape("mask", mask, arr.shape, f" (the shape of {name})")
    return arr, mask


# --- chapter 1: the group statistics ----------------------------------------------------------

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
    if mask is None:
        y = x - x[..., :1]                                   # (..., G), first column exactly 0
        return y - y.mean(axis=-1, keepdims=True)            # (..., G) - (..., 1)
    first = np.take_along_axis(x, mask.argmax(axis=-1)[..., None], axis=-1)   # (..., 1)
    y = np.where(mask, x - first, 0.0)                       # (..., G), padding -> 0
    n = mask.sum(axis=-1, keepdims=True)                     # (..., 1) valid entries
    return np.where(mask, y - y.sum(axis=-1, keepdims=True) / n, 0.0)


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
    dev, n = check_std_arguments(dev, ddof, count)           # n: entries per row
    return np.sqrt((dev * dev).sum(axis=-1, keepdims=True) / (n - ddof))   # (..., 1)


def check_std_arguments(dev, ddof, count):
    """``(dev, n)`` for :func:`std_from_deviations`: a real array, an integer ``ddof >= 0`` and
    ``n`` (``count``, or the last axis' length) above ``ddof`` in every row."""
    dev, _ = check_block_input("dev", dev)
    ddof = check_int("ddof", ddof, minimum=0)
    if count is None:
        if dev.shape[-1] <= ddof:
            raise ValueError(f"ddof: expected fewer than the {dev.shape[-1]} entries per row, "
                             f"got {ddof}")
        return dev, dev.shape[-1]
    n, _ = as_float_array("count", count, shape_doc=" of shape (..., 1)")   # finite
    if n.shape != dev.shape[:-1] + (1,) or not (n > ddof).all():
        raise ValueError(f"count: expected more than ddof = {ddof} entries in every row, shape "
                         f"{dev.shape[:-1] + (1,)}, got {describe(n)} with minimum {n.min()}")
    return dev, n


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
    eps = check_real("eps", eps, minimum=0.0)
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
    x, k = check_block_input("x", x, min_ndim=0)[0], check_int("k", k)
    with np.errstate(over="ignore"):                         # inf is checked by the caller
        return np.ldexp(x, k)


def divide_or_zero(num, den):
    """``num / den`` where ``den > 0``, and 0 where ``den`` is 0: no spread means no signal.

    ``den`` broadcasts over ``num`` (a std of shape (B, 1) over advantages (B, G)); it is never
    negative (a std plus an eps). With ``eps = 0`` an all-equal group is ``0 / 0``, read as 0.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.divide_or_zero(np.array([[1.0, -1.0], [0.0, 0.0]]), np.array([[0.5], [0.0]]))
    array([[ 2., -2.],
           [ 0.,  0.]])
    """
    num, den = check_divide_or_zero_arguments(num, den)
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


# --- chapter 3: k3 without cancellation --------------------------------------------------------

def k3_series(d):
    r"""``e^{-d} + d - 1`` as its Taylor series, for small ``|d|`` (below ``K3_SERIES_BELOW``).

    .. math::

        k_3 = e^{r} - r - 1 = \frac{r^2}{2!} + \frac{r^3}{3!} + \dots
            = \frac{r^2}{2}\Big(1 + \frac{r}{3}\big(1 + \frac{r}{4}(1 + \dots)\big)\Big),
        \qquad r = -d

    summed in Horner form up to ``r^13 / 13!``. Nothing of size 1 is subtracted, so it is
    accurate to a few ulp where ``exp(r) - r - 1`` loses every digit.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.k3_series(np.array([1e-9, -0.05]))       # d^2/2 = 5e-19; e^0.05 - 1.05 = 0.00127
    array([5.00000000e-19, 1.27109638e-03])
    """
    d, _ = check_block_input("d", d)
    r = -d                                           # k3 = e^r - r - 1 with r = ref_logp - logp
    acc = np.ones_like(r)
    for n in range(K3_SERIES_TERMS, 2, -1):          # 1 + r/3 (1 + r/4 (1 + ... (1 + r/13)))
        acc = 1.0 + acc * r / n
    return 0.5 * r * r * acc


def k3_from_log_ratio(d):
    r"""Schulman's k3 from the log-ratio ``d = logp - ref_logp``, without cancellation.

    .. math::

        k_3 = e^{-d} + d - 1 = \operatorname{expm1}(r) - r, \qquad r = -d

    ``expm1(r) - r`` subtracts nothing of size 1 and is accurate for ``|r| >= 0.1``; below,
    :func:`k3_series`. ``e^r`` overflows for ``r > 709.8``: the result is then inf (never NaN,
    even for ``r = inf``), for the caller to refuse or clip.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.k3_from_log_ratio(np.array([np.log(2), 1e-9, -800.0]))   # 0.5 + log 2 - 1, 5e-19, inf
    array([1.93147181e-01, 5.00000000e-19,            inf])
    """
    d, _ = check_block_input("d", d)
    # From r = log(max float) on, e^r is inf and so is k3; the cap keeps inf - inf from NaN.
    r = np.minimum(-d, float(np.log(float(ml_dtypes.finfo(d.dtype).max))) + 1.0)  # (..., T)
    with np.errstate(over="ignore"):
        k = np.expm1(r) - r                                        # (..., T)
    small = np.abs(r) < K3_SERIES_BELOW                            # where expm1(r) - r cancels
    k[small] = k3_series(d[small])
    return k


# --- chapter 4: logsumexp and the log-ratio -----------------------------------------------------

def logsumexp(z):
    r"""``log(sum(exp(z)))`` over the last axis, shifted by the max so that no ``exp`` overflows.

    .. math::

        \log \sum_{w} e^{z_w} = m + \log \sum_{w} e^{z_w - m}, \qquad m = \max_w z_w

    Every ``exp`` is at most 1 and the largest exactly 1, so the sum is at least 1 and its log
    never underflows. The sum runs in the dtype given: pass float64 for a low-precision input.

    ========  ========  ======================================================
    Symbol    Shape     Meaning
    ========  ========  ======================================================
    z         (..., V)  logits, finite
    return    (..., 1)  the log of the softmax's normaliser, kept 2-D to broadcast
    ========  ========  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.logsumexp(np.array([[1000.0, 1000.0]])).round(4)      # 1000 + log 2; exp(1000) = inf
    array([[1000.6931]])
    """
    z, _ = check_block_input("z", z, min_size=1)
    m = z.max(axis=-1, keepdims=True)                              # (..., 1)
    with np.errstate(over="ignore"):                               # a gap past range: -inf, e^. 0
        return m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))   # (..., 1), exp(.) <= 1


def check_log_ratio_arguments(logp, old_logp, clamp):
    """``(logp, old_logp, clamp)`` for :func:`log_ratio`: two same-shape real arrays (cheaply
    checked, as in every building block) and ``clamp`` None or a number > 0."""
    logp, _ = check_block_input("logp", logp)
    old_logp, _ = check_block_input("old_logp", old_logp)
    check_shape("old_logp", old_logp, logp.shape, " (the shape of logp; nothing is broadcast)")
    if clamp is not None:
        clamp = check_real("clamp", clamp, minimum=0.0, allow_equal=False)
    return logp, old_logp, clamp


def log_ratio(logp, old_logp, *, clamp=None):
    r"""``logp - old_logp``, in the dtype given, clamped to ``[-clamp, clamp]`` when asked.

    .. math::

        \log r_t = \operatorname{clip}\big(\log\pi_\theta(y_t) - \log\pi_{old}(y_t),
                   -c,\ c\big)

    The ratio is ``exp`` of this, never ``exp(logp) / exp(old_logp)`` (0 / 0 once both
    underflow). The clamp (``MAX_LOG_RATIO`` = 20 in the losses, as verl does) keeps ``exp``
    finite: ``e^20`` is 4.9e8, far outside any clip range. A difference past float64's range
    is inf, quietly, before the clamp.

    ========  ========  ======================================================
    Symbol    Shape     Meaning
    ========  ========  ======================================================
    logp      (..., T)  log pi_theta of the sampled tokens
    old_logp  (..., T)  log pi_old (or log pi_ref) of the same tokens
    clamp     scalar    None (no clamp) or c > 0
    return    (..., T)  the log-ratio
    ========  ========  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.log_ratio(np.array([-0.5, -1.0]), np.array([-15.5, -1.5]), clamp=10.0)
    array([10. ,  0.5])
    """
    logp, old_logp, clamp = check_log_ratio_arguments(logp, old_logp, clamp)
    with np.errstate(over="ignore"):                   # only near float64's limit
        d = logp - old_logp                            # (..., T)
    return d if clamp is None else np.clip(d, -clamp, clamp)


def masked_mean(x, mask, axis=None):
    r"""The mean of ``x`` over the entries where ``mask`` is True: over all (``axis=None``) or
    per row (``axis=-1``).

    .. math::

        \bar x = \frac{\sum_t m_t\, x_t}{\sum_t m_t}

    Padding never enters, whatever it holds (NaN aside: pass finite padding). Every row (or
    the whole array) needs a True entry; the callers check that with the right message. A
    sum past the float range (a mean of values near 1e308) is redone on ``x / 2**k``, so the
    mean comes out right whenever it fits.

    >>> import numpy as np, grpo_lab as gl
    >>> x = np.array([[1.0, 3.0, 99.0], [2.0, 2.0, 2.0]])
    >>> gl.masked_mean(x, [[1, 1, 0], [1, 1, 1]]), gl.masked_mean(x, [[1, 1, 0], [1, 1, 1]], axis=-1)
    (np.float64(2.0), array([2., 2.]))
    """
    x, mask = check_block_input("x", x, mask=mask, mask_required=True)
    if not (axis is None or (isinstance(axis, (int, np.integer)) and not isinstance(axis, bool)
                             and axis in (-1, x.ndim - 1))):
        raise ValueError(f"axis: expected None (over every entry) or -1 (per row), got "
                         f"{describe(axis)}")
    kept, n = np.where(mask, x, 0.0), mask.sum(axis=axis)         # padding -> 0, counts
    with np.errstate(over="ignore"):
        total = kept.sum(axis=axis)
    if np.isfinite(total).all() or not np.isfinite(kept).all():
        return total / n
    small, k = power_of_two_rescale(kept)          # a sum past the float range, a mean inside
    return scale_by_power_of_two(small.sum(axis=axis) / n, k)
