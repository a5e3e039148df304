"""Group-relative advantages: the heart of GRPO.

Taught in chapter 1 (``chapters/01_group_advantages.ipynb``).
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import as_float_array, check_choice, check_int, check_real, working_dtype

__all__ = ["group_advantages", "SCALES", "BASELINES"]

SCALES = ("group", "batch", "none")
BASELINES = ("mean", "leave_one_out")


def _deviations(x: np.ndarray) -> np.ndarray:
    """``x - mean(x)`` along the last axis, computed about each row's first element.

    Shifting by a value from the data (the "shifted data" algorithm) leaves a constant row
    as exact zeros, ``0 - mean(0) == 0``, where ``x - mean(x)`` can be off by one rounding
    (0.1 + 0.1 + 0.1 != 0.3), and it removes most of the cancellation when the spread is
    small against the mean (1e3 +- 1e-3).
    """
    y = x - x[..., :1]                          # (B, G), first column is exactly 0
    return y - y.mean(axis=-1, keepdims=True)   # (B, G) - (B, 1)


def _std(dev: np.ndarray, ddof: int) -> np.ndarray:
    """Standard deviation along the last axis from deviations that already have mean 0."""
    n = dev.shape[-1]
    return np.sqrt((dev * dev).sum(axis=-1, keepdims=True) / (n - ddof))  # (B, 1)


def check_arguments(rewards, eps, scale, ddof, baseline, *, finite=True):
    """Validate the arguments of :func:`group_advantages` (and of its fast path).

    Returns ``(arr, out_dtype, eps, scale, ddof, baseline)``; ``arr`` is the rewards as an
    array, not copied. ``finite=False`` skips the scan for NaN and inf: a caller that finds
    them itself (the fast path does, for free, in its row sums) must then raise the same error.
    """
    arr, out_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)",
                                    finite=finite)
    return (arr, out_dtype) + check_options(arr.shape, eps, scale, ddof, baseline)


def check_options(shape, eps, scale, ddof, baseline):
    """Validate the group size and the options for rewards of ``shape`` (B, G).

    Shared by the NumPy reference, its fast path and the torch mirror, so all three refuse the
    same inputs with the same words. Returns ``(eps, scale, ddof, baseline)``.
    """
    B, G = shape
    if G < 2:
        raise ValueError(
            f"rewards: expected a group size G >= 2 on the last axis of shape (B, G), got "
            f"shape {tuple(shape)}: a single completion has no group to be compared with")
    eps = check_real("eps", eps, minimum=0.0)
    scale = check_choice("scale", scale, SCALES)
    baseline = check_choice("baseline", baseline, BASELINES)
    n = B * G if scale == "batch" else G          # how many rewards each std is over
    ddof = check_int("ddof", ddof, minimum=0, maximum=n - 1,
                     why=f" so that {'B*G' if scale == 'batch' else 'G'} - ddof > 0")
    return eps, scale, ddof, baseline


def group_advantages(rewards, eps=1e-8, *, scale="group", ddof=0, baseline="mean"):
    r"""Advantages of G completions per prompt, each judged against its own group.

    The outcome-supervision advantage of DeepSeekMath (Shao et al. 2024, eq. 3's estimator):

    .. math::

        A_{b,i} = \frac{r_{b,i} - \operatorname{mean}(r_{b,1..G})}
                       {\operatorname{std}(r_{b,1..G}) + \varepsilon}

    Every token of completion ``i`` then gets the same ``A_{b,i}``.

    ========  ========  =========================================================
    Symbol    Shape     Meaning
    ========  ========  =========================================================
    rewards   (B, G)    one scalar reward per completion; row b is prompt b's group
    eps       scalar    added to the std so an all-equal group gives 0, not 0/0
    return    (B, G)    advantages; each row has mean 0
    ========  ========  =========================================================

    Args:
        rewards: array-like of shape (B, G), B >= 1 prompts, G >= 2 completions each.
            Floats keep their dtype (float16, bfloat16 from ml_dtypes, float32, float64);
            ints and bools (pass/fail rewards) are read as float64 and give float64.
            NaN and inf are rejected.
        eps: >= 0, usually 1e-8 to 1e-4 (TRL and verl add 1e-4 or 1e-6). It is added in
            float64, so it never underflows the way 1e-8 does in float16.
        scale: ``"group"`` divides by the group's std (DeepSeekMath, GRPO);
            ``"batch"`` subtracts the group mean but divides by the std of all B*G rewards
            (TRL's ``scale_rewards="batch"``); ``"none"`` only subtracts the baseline
            (Dr. GRPO, Liu et al. 2025), and ``eps`` and ``ddof`` are then unused.
        ddof: 0 for the population std of the formula above; 1 for Bessel's correction,
            as TRL, verl and OpenRLHF compute it (``torch.std`` is unbiased by default).
        baseline: ``"mean"`` subtracts the group mean; ``"leave_one_out"`` subtracts, for
            each completion, the mean of the other G-1 (RLOO, Ahmadian et al. 2024).

    Returns:
        advantages of shape (B, G), in the float dtype of ``rewards`` (float64 for ints
        and bools). The input is never modified.

    All statistics are accumulated in float64 (wider for longdouble), so a float32 reward
    of 1e20 squares without overflow; rewards are first rescaled by a power of two, which is
    exact in binary floating point, so that no square overflows even in float64.

    Example: two right answers and two wrong ones; the right ones get +1, the wrong -1.

    >>> import grpo_lab as gl
    >>> gl.group_advantages([[1, 0, 1, 0]])  # std 0.5; eps keeps it a hair under 1
    array([[ 0.99999998, -0.99999998,  0.99999998, -0.99999998]])
    >>> gl.group_advantages([[1, 0, 1, 0]], ddof=1).round(4)  # Bessel: std sqrt(1/3), not 0.5
    array([[ 0.866, -0.866,  0.866, -0.866]])
    >>> gl.group_advantages([[1, 1, 1, 1]])  # no spread, no signal: exactly 0
    array([[0., 0., 0., 0.]])
    """
    arr, out_dtype, eps, scale, ddof, baseline = check_arguments(rewards, eps, scale, ddof,
                                                                 baseline)
    B, G = arr.shape

    x = arr.astype(working_dtype(out_dtype))      # (B, G), a copy: rewards stay untouched
    # Divide by a power of two near max|r| (exact: only the exponent changes) so |x| <= 1
    # and no square below can overflow; eps is rescaled the same way.
    _, k = np.frexp(np.abs(x).max())
    x = np.ldexp(x, -k)

    dev = _deviations(x)                          # (B, G) r - group mean, rows sum to ~0
    if baseline == "leave_one_out":
        # r_i - mean_{j != i} r_j  ==  G/(G-1) * (r_i - mean_j r_j)
        dev_baseline = dev * (G / (G - 1))
    else:
        dev_baseline = dev

    if scale == "none":
        with np.errstate(over="ignore"):          # too large for the dtype: checked below
            adv = np.ldexp(dev_baseline, k)       # back to reward units
    else:
        if scale == "group":
            std = _std(dev, ddof)                                 # (B, 1)
        else:
            std = _std(_deviations(x.reshape(1, B * G)), ddof)    # (1, 1), over all B*G
        # For subnormal rewards eps / 2**k overflows to inf: eps dwarfs any spread, so the
        # advantages are 0, which is also what the exact arithmetic gives (to 1e-300).
        with np.errstate(over="ignore"):
            denom = std + np.ldexp(eps, -k)       # (B, 1) or (1, 1), broadcast over G
        # An all-equal group has dev == 0 exactly, so with eps > 0 it gives 0 / eps = 0.
        # With eps == 0 it would be 0 / 0: define it as 0 (no spread, no signal).
        adv = np.divide(dev_baseline, denom, out=np.zeros_like(dev_baseline),
                        where=denom > 0)

    with np.errstate(over="ignore"):              # checked on the next line
        out = adv.astype(out_dtype)
    if not np.all(np.isfinite(out.astype(np.float64))):
        raise ValueError(
            f"rewards: the advantages do not fit in {out_dtype} (largest magnitude "
            f"{np.abs(adv).max():.4g}); pass rewards in a wider dtype such as float32")
    return out
