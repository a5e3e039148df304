r"""Numerics of log-probabilities: the clamped log-ratio, logsumexp, and k3 without
cancellation (chapters 3 and 4).

========================  =======  ===========================================================
helper                    chapter  what it keeps from going wrong
========================  =======  ===========================================================
``log_ratio``             4        ``logp - old_logp`` in float64, clamped before any ``exp``
``logsumexp``             4        ``log sum exp z`` with no overflow, whatever the logits
``k3_series``             3        k3 = e^{-d} + d - 1 without cancellation for small ``|d|``
``k3_from_log_ratio``     3        k3 over every ``d``: series near 0, ``expm1`` elsewhere
========================  =======  ===========================================================

As in :mod:`grpo_lab.numerics.stable`, each public helper checks its arguments cheaply (NaN
passes through as in NumPy) and calls its ``*_math`` twin, which takes checked float arrays
and checks nothing; the package's formulas call the twins.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from grpo_lab.numerics.validate import check_block_input, check_real, check_shape

__all__ = ["K3_SERIES_BELOW", "K3_SERIES_TERMS", "check_log_ratio_arguments", "k3_from_log_ratio",
           "k3_from_log_ratio_math", "k3_series", "k3_series_math", "log_ratio", "log_ratio_math",
           "logsumexp", "logsumexp_math"]

#: Below this ``|d|``, k3 is summed as a series: ``expm1(-d) + d`` would lose -log2|d| bits.
K3_SERIES_BELOW = 0.1
#: Terms up to ``d^13 / 13!``: the truncation is under 1e-20 relative for ``|d| < 0.1``.
K3_SERIES_TERMS = 13


# --- the log-ratio --------------------------------------------------------------------------------

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
    return log_ratio_math(*check_log_ratio_arguments(logp, old_logp, clamp))


def log_ratio_math(logp, old_logp, clamp=None):
    """:func:`log_ratio` on checked same-shape float arrays and ``clamp`` None or a float > 0."""
    with np.errstate(over="ignore"):                   # only near float64's limit
        d = logp - old_logp                            # (..., T)
    return d if clamp is None else np.clip(d, -clamp, clamp)


def check_log_ratio_arguments(logp, old_logp, clamp):
    """``(logp, old_logp, clamp)`` for :func:`log_ratio`: two same-shape real arrays (cheaply
    checked, as in every building block) and ``clamp`` None or a number > 0."""
    logp, _ = check_block_input("logp", logp)
    old_logp, _ = check_block_input("old_logp", old_logp)
    check_shape("old_logp", old_logp, logp.shape, " (the shape of logp; nothing is broadcast)")
    if clamp is not None:
        clamp = check_real("clamp", clamp, minimum=0.0, allow_equal=False)
    return logp, old_logp, clamp


# --- logsumexp ----------------------------------------------------------------------------------

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
    return logsumexp_math(check_block_input("z", z, min_size=1)[0])


def logsumexp_math(z):
    """:func:`logsumexp` on a checked, non-empty float array ``z`` (..., V)."""
    m = z.max(axis=-1, keepdims=True)                              # (..., 1)
    with np.errstate(over="ignore"):                               # a gap past range: -inf, e^. 0
        return m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))   # (..., 1), exp(.) <= 1


# --- k3 without cancellation ------------------------------------------------------------------------

def k3_series(d):
    r"""``e^{-d} + d - 1`` as its Taylor series, for small ``|d|`` (below ``K3_SERIES_BELOW``).

    .. math::

        k_3 = e^{r} - r - 1 = \frac{r^2}{2!} + \frac{r^3}{3!} + \dots
            = \frac{r^2}{2}\Big(1 + \frac{r}{3}\big(1 + \frac{r}{4}(1 + \dots)\big)\Big),
        \qquad r = -d

    summed in Horner form up to ``r^13 / 13!``. Nothing of size 1 is subtracted, so it is
    accurate to a few ulp where ``exp(r) - r - 1`` keeps a few digits (float64) or none
    (float32).

    >>> import numpy as np, grpo_lab as gl
    >>> gl.k3_series(np.array([1e-9, -0.05]))       # d^2/2 = 5e-19; e^0.05 - 1.05 = 0.00127
    array([5.00000000e-19, 1.27109638e-03])
    """
    return k3_series_math(check_block_input("d", d)[0])


def k3_series_math(d):
    """:func:`k3_series` on a checked float array ``d``."""
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
    return k3_from_log_ratio_math(check_block_input("d", d)[0])


def k3_from_log_ratio_math(d):
    """:func:`k3_from_log_ratio` on a checked float array ``d``."""
    # From r = log(max float) on, e^r is inf and so is k3; the cap keeps inf - inf from NaN.
    r = np.minimum(-d, float(np.log(float(ml_dtypes.finfo(d.dtype).max))) + 1.0)  # (..., T)
    with np.errstate(over="ignore"):
        k = np.expm1(r) - r                                        # (..., T)
    small = np.abs(r) < K3_SERIES_BELOW                            # where expm1(r) - r cancels
    k[small] = k3_series_math(d[small])
    return k
