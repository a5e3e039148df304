"""Group-relative advantages: the heart of GRPO.

Taught in chapter 1 (``chapters/01_group_advantages.ipynb``). The careful numerics it relies
on are named helpers of :mod:`grpo_lab.numerics.stable`, shown in the chapter by name:
``centred_deviations``, ``std_from_deviations``, ``power_of_two_rescale``,
``scale_by_power_of_two`` and ``divide_or_zero``.

:func:`group_advantages` checks its arguments in one call, then runs
:func:`group_advantages_math`, the formula on rewards already checked and cast to float64,
which calls the helpers' math (``centred_deviations_math``, ...) and checks nothing again.
"""

from __future__ import annotations

from grpo_lab.numerics.dtypes import cast_result, working_dtype
from grpo_lab.numerics.stable import (centred_deviations_math, divide_or_zero_math,
                                      power_of_two_rescale_math, scale_by_power_of_two_math,
                                      std_from_deviations_math)
from grpo_lab.numerics.validate import as_float_array, check_choice, check_int, check_real

__all__ = ["BASELINES", "SCALES", "check_group_advantages_arguments",
           "check_group_advantages_options", "group_advantages", "group_advantages_math"]

SCALES = ("group", "batch", "none")
BASELINES = ("mean", "leave_one_out")


def check_group_advantages_arguments(rewards, eps, scale, ddof, baseline, *, finite=True):
    """Validate the arguments of :func:`group_advantages` (and of its fast path).

    Returns ``(rewards, out_dtype, eps, scale, ddof, baseline)``; ``rewards`` is an array, not
    copied. ``finite=False`` skips the scan for NaN and inf: a caller that finds them itself
    (the fast path does, for free, in its row sums) must then raise the same error.
    """
    arr, out_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)",
                                    finite=finite)
    return (arr, out_dtype) + check_group_advantages_options(arr.shape, eps, scale, ddof,
                                                             baseline)


def check_group_advantages_options(shape, eps, scale, ddof, baseline):
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
    r, out_dtype, eps, scale, ddof, baseline = check_group_advantages_arguments(
        rewards, eps, scale, ddof, baseline)
    adv = group_advantages_math(r.astype(working_dtype(out_dtype)), eps, scale, ddof, baseline)
    return cast_result("rewards", "advantages", adv, out_dtype)


def group_advantages_math(r, eps=1e-8, scale="group", ddof=0, baseline="mean"):
    """:func:`group_advantages` on checked values: rewards (B, G) as a float array in the dtype
    to compute in (float64), G >= 2, and the options as :func:`check_group_advantages_options`
    returns them. Returns the advantages (B, G) in that dtype; inf only where they do not fit.
    """
    B, G = r.shape
    # Divide by 2**k near max|r| (exact), so that no square overflows; eps is divided too, and
    # A, a ratio of deviations to a std, does not change.
    x, k = power_of_two_rescale_math(r, eps=eps)                          # (B, G) r / 2**k

    # The formula, A = (r - baseline) / (std + eps), a line per term:
    dev = centred_deviations_math(x)                                      # (B, G) r - mean(r)
    centred = dev * (G / (G - 1)) if baseline == "leave_one_out" else dev  # r - baseline
    if scale == "none":                                                   # Dr. GRPO: no std
        return scale_by_power_of_two_math(centred, k)
    pool = dev if scale == "group" else centred_deviations_math(x.reshape(1, B * G))  # (B|1, .)
    std = std_from_deviations_math(pool, ddof, pool.shape[-1])            # (B, 1) or (1, 1)
    return divide_or_zero_math(centred, std + scale_by_power_of_two_math(eps, -k))   # 0/0 is 0
