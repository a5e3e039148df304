r"""GRPO's neighbours on the advantage side: REINFORCE++'s global normalisation, ReMax's baseline.

Beside :func:`grpo_lab.group_advantages` (chapter 1), each changes one line of it:

* :func:`reinforce_pp_advantages`: the std (and the mean) are the whole batch's, token by token,
  not the group's (REINFORCE++, Hu et al. 2025, arXiv 2501.03262; verl's
  ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline`` estimators);
* :func:`remax_advantages`: the baseline is the reward of the prompt's greedy completion (ReMax,
  Li et al. 2023, arXiv 2310.10505; verl's ``remax``).

RLOO's leave-one-out baseline (Ahmadian et al. 2024, arXiv 2402.14740) is already
``gl.group_advantages(rewards, baseline="leave_one_out", scale="none")``, kept as it is.
The plain faces are in :mod:`grpo_lab.core.paper.neighbours`; the table that places each method
against GRPO is :func:`grpo_lab.core.neighbours.table`.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.dtypes import cast_result, common_dtype, working_dtype
from grpo_lab.numerics.stable import (centred_deviations_math, divide_or_zero_math,
                                      power_of_two_rescale_math, scale_by_power_of_two_math)
from grpo_lab.numerics.validate import (as_float_array, as_mask, check_choice, check_int,
                                        check_real, check_shape, describe, valid_lengths)

__all__ = ["RPP_BASELINES", "check_reinforce_pp_arguments", "check_remax_arguments",
           "reinforce_pp_advantages", "reinforce_pp_advantages_math", "remax_advantages"]

#: ``"none"``: REINFORCE++ (one sample per prompt is enough); ``"group_mean"``: REINFORCE++
#: with baseline, the group mean subtracted first (verl's ``reinforce_plus_plus_baseline``).
RPP_BASELINES = ("none", "group_mean")


def check_reinforce_pp_arguments(rewards, mask, eps, ddof, baseline):
    """``(rewards, weights, out_dtype, eps, ddof, baseline)``: rewards (B, G) as given, each
    completion's weight in the statistics (its valid tokens, (B, G) float64; 1 without a mask),
    the result's dtype, and the options (``ddof`` below the total weight)."""
    r, out_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)")
    B, G = r.shape
    baseline = check_choice("baseline", baseline, RPP_BASELINES)
    if baseline == "group_mean" and G < 2:
        raise ValueError(f"rewards: expected a group size G >= 2 for baseline='group_mean', got "
                         f"shape {r.shape}: a single completion has no group mean to subtract")
    if mask is None:
        weights = np.ones((B, G))                                  # each completion counts once
    else:
        m = as_mask("mask", mask, None, " of shape (B*G, T)")
        if m.ndim != 2 or m.shape[0] != B * G:
            raise ValueError(f"mask: expected shape (B*G, T) = ({B * G}, T), one row per "
                             f"completion of rewards {r.shape}, got {describe(m)}")
        weights = valid_lengths(m).reshape(B, G).astype(np.float64)   # (B, G) tokens each
    eps = check_real("eps", eps, minimum=0.0)
    n = int(weights.sum())
    ddof = check_int("ddof", ddof, minimum=0, maximum=n - 1,
                     why=f" so that the {'tokens' if mask is not None else 'completions'} of "
                         f"the batch ({n}) minus ddof is > 0")
    return r, weights, out_dtype, eps, ddof, baseline


def reinforce_pp_advantages(rewards, mask=None, *, baseline="none", eps=1e-8, ddof=1):
    r"""REINFORCE++'s advantages: outcome rewards normalised over the whole batch, token by token.

    Hu et al. 2025, "REINFORCE++" (arXiv 2501.03262), global advantage normalisation: every
    token of completion i carries :math:`x_i = r_i - b_i`, and the batch's tokens are whitened,

    .. math::

        A_i = \frac{x_i - \mu}{\sigma + \varepsilon}, \qquad
        \mu = \frac{\sum_j L_j x_j}{\sum_j L_j}, \qquad
        \sigma^2 = \frac{\sum_j L_j (x_j - \mu)^2}{\sum_j L_j - \text{ddof}}

    with :math:`L_j` completion j's valid tokens. Against GRPO the one line that changes is
    the std: the batch's, not the group's (and the mean too when there is no group baseline).

    ========  ==========  =========================================================
    Symbol    Shape       Meaning
    ========  ==========  =========================================================
    rewards   (B, G)      one outcome reward per completion; G = 1 is allowed with
                          ``baseline="none"`` (REINFORCE++ needs no group)
    mask      (B*G, T)    1 on completion tokens: each completion weighs its length
                          in mu and sigma, as verl and OpenRLHF whiten token tensors.
                          None: each completion weighs 1
    baseline  str         ``"none"`` (b_i = 0) or ``"group_mean"``: b_i = the group's
                          mean (REINFORCE++ with baseline, for G > 1)
    eps       scalar      added to sigma, >= 0 (an all-equal batch gives 0, not 0/0)
    ddof      int         1 (Bessel, as verl's ``masked_var``), or 0
    return    (B, G)      A_i, the advantage of every token of completion i
    ========  ==========  =========================================================

    verl's ``masked_whiten`` puts its 1e-8 inside the square root, (x - mu) / sqrt(var + 1e-8);
    here eps is added to sigma as in :func:`grpo_lab.group_advantages`: the two differ by
    at most 1e-8 / (2 var) relatively. With ``baseline="group_mean"`` and no mask this is not
    TRL's ``scale_rewards="batch"``: TRL divides by the std of the raw rewards, REINFORCE++ by
    the std of the group-centred ones.

    Example: in one batch a group that always succeeds (all 1) and one that never does
    (all 0). GRPO gives every completion 0; REINFORCE++ without a baseline gives the first
    group +0.93 and the second -0.93, since across the batch they differ.

    >>> import grpo_lab as gl
    >>> gl.neighbours.reinforce_pp_advantages([[1, 1, 1, 1], [0, 0, 0, 0]]).round(4)
    array([[ 0.9354,  0.9354,  0.9354,  0.9354],
           [-0.9354, -0.9354, -0.9354, -0.9354]])
    >>> gl.neighbours.reinforce_pp_advantages([[1, 1, 1, 1], [0, 0, 0, 0]], baseline="group_mean")
    array([[0., 0., 0., 0.],
           [0., 0., 0., 0.]])
    """
    r, w, out_dtype, eps, ddof, baseline = check_reinforce_pp_arguments(rewards, mask, eps, ddof,
                                                                        baseline)
    adv = reinforce_pp_advantages_math(r.astype(working_dtype(out_dtype)), w, eps, ddof, baseline)
    return cast_result("rewards", "advantages", adv, out_dtype)


def reinforce_pp_advantages_math(r, w, eps=1e-8, ddof=1, baseline="none"):
    """:func:`reinforce_pp_advantages` on checked values: rewards (B, G) in float64, their
    weights w (B, G) > 0 (tokens per completion), ``ddof`` below ``w.sum()``."""
    x, k = power_of_two_rescale_math(r, eps=eps)              # (B, G) r / 2**k, exact
    if baseline == "group_mean":
        x = centred_deviations_math(x)                        # (B, G) r - group mean
    y = x - x.reshape(-1)[0]                                  # shift by one value: exact 0s
    dev = y - (w * y).sum() / w.sum()                         # (B, G) x - mu (token weighted)
    sigma = np.sqrt((w * dev * dev).sum() / (w.sum() - ddof))  # the batch's std, Bessel
    return divide_or_zero_math(dev, sigma + scale_by_power_of_two_math(eps, -k))   # 0/0 is 0


def check_remax_arguments(rewards, greedy_rewards):
    """``(rewards, greedy_rewards, out_dtype)``: (B, G) and (B, 1) float64 arrays, the dtype."""
    r, r_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)")
    g, g_dtype = as_float_array("greedy_rewards", greedy_rewards, shape_doc=" of shape (B,)")
    check_shape("greedy_rewards", g, r.shape[:1], " (B,), one greedy completion per prompt "
                                                  "(row of rewards)")
    dtype = common_dtype(r_dtype, g_dtype)
    work = working_dtype(dtype)
    return r.astype(work), g.astype(work)[:, None], dtype


def remax_advantages(rewards, greedy_rewards):
    r"""ReMax's advantages: each reward minus the reward of its prompt's greedy completion.

    Li et al. 2023, "ReMax" (arXiv 2310.10505), Algorithm 1: the REINFORCE gradient
    :math:`\sum_t \nabla \log\pi_\theta(y_t \mid x, y_{<t})\, (r(x, y) - r(x, \bar y))`, with
    :math:`\bar y` decoded greedily from the same policy. The baseline costs one more
    generation per prompt and no critic; it depends on the prompt, not on the sample, so the
    gradient stays unbiased.

    .. math:: A_{b,i} = r_{b,i} - r(x_b, \bar y_b)

    ==============  ======  ===================================================
    Symbol          Shape   Meaning
    ==============  ======  ===================================================
    rewards         (B, G)  reward of each sampled completion (ReMax: G = 1)
    greedy_rewards  (B,)    reward of each prompt's greedy completion
    return          (B, G)  the advantage of every token of completion i; no
                            division by a std (verl's ``remax`` has none)
    ==============  ======  ===================================================

    >>> import grpo_lab as gl
    >>> gl.neighbours.remax_advantages([[1.0, 0.0], [1.0, 1.0]], [1.0, 0.0])
    array([[ 0., -1.],
           [ 1.,  1.]])
    """
    r, g, dtype = check_remax_arguments(rewards, greedy_rewards)   # (B, G), (B, 1)
    with np.errstate(over="ignore"):                               # refused by name below
        adv = r - g                                                # (B, G)
    return cast_result("rewards, greedy_rewards", "advantages", adv, dtype)
