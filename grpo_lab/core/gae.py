"""Generalized Advantage Estimation: how PPO turns a learned critic into advantages.

Taught in chapter 2 (``chapters/02_ppo_to_grpo.ipynb``), as the part of PPO that GRPO removes.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import (as_float_array, cast_result, check_real, check_shape,
                                        common_dtype, describe, working_dtype)

__all__ = ["check_gae_arguments", "gae"]


def check_gae_arguments(rewards, values, gamma, lam):
    """``(rewards, values, gamma, lam, dtype)`` for :func:`gae`: rewards (T,) or (N, T) and
    values with one more step, both in float64, and the outputs' dtype."""
    r, r_dtype = as_float_array("rewards", rewards, shape_doc=" of shape (T,) or (N, T)")
    if r.ndim not in (1, 2):
        raise ValueError(f"rewards: expected a 1-D (T,) or 2-D (N, T) array, got {describe(r)}")
    v, v_dtype = as_float_array("values", values, shape_doc=" of shape (T+1,) or (N, T+1)")
    check_shape("values", v, r.shape[:-1] + (r.shape[-1] + 1,),
                " (the rewards' shape with one more step on the last axis: V(s_0) .. V(s_T), "
                "the last one the bootstrap value)")
    gamma = check_real("gamma", gamma, minimum=0.0, maximum=1.0)
    lam = check_real("lam", lam, minimum=0.0, maximum=1.0)
    out_dtype = common_dtype(r_dtype, v_dtype)
    work = working_dtype(out_dtype)
    return r.astype(work), v.astype(work), gamma, lam, out_dtype            # copies


def gae(rewards, values, gamma=1.0, lam=1.0):
    r"""Advantages and value targets from per-step rewards and a critic's values (GAE-lambda).

    Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
    Estimation", section 3. With the TD error of step t

    .. math::

        \delta_t = r_t + \gamma V(s_{t+1}) - V(s_t),

    the advantage is the exponentially weighted sum of the TD errors that follow it,

    .. math::

        \hat A_t = \sum_{l=0}^{T-1-t} (\gamma\lambda)^l \, \delta_{t+l}
                 = \delta_t + \gamma\lambda \hat A_{t+1},

    and the critic's regression target (the "return") is :math:`\hat A_t + V(s_t)`.

    The two limits: ``lam=0`` gives the one-step TD error :math:`\delta_t` (low variance, biased
    by the critic); ``lam=1`` gives the Monte-Carlo return minus the baseline,
    :math:`\sum_{l} \gamma^l r_{t+l} + \gamma^{T-t} V(s_T) - V(s_t)` (unbiased, high variance).

    ========  ===============  ==========================================================
    Symbol    Shape            Meaning
    ========  ===============  ==========================================================
    rewards   (T,) or (N, T)   reward after each of T steps (for an LLM: 0 until the last
                               token, then the sequence's reward); N sequences
    values    (T+1,), (N, T+1) critic's V(s_0) .. V(s_T); V(s_T) is the bootstrap value of
                               the state after the last step: 0 if the episode ended there
    gamma     scalar           discount in [0, 1]; 1 for LLM fine-tuning
    lam       scalar           GAE's lambda in [0, 1], usually 0.9 to 1 (0.95 is common)
    return    two arrays       ``(advantages, returns)``, each of the rewards' shape
    ========  ===============  ==========================================================

    Inputs of float16, bfloat16 or float32 are worked in float64; the outputs have the common
    float dtype of ``rewards`` and ``values`` (float64 for ints and bools). Inputs are never
    modified. Sequences of different lengths: pad rewards with 0 and give every value after a
    sequence's end 0; the padded steps then have advantage 0 and do not leak into valid ones.

    Example: a 3-token completion, rewarded 1 at the end, with a critic that says 0.5 throughout
    (and 0 after the end, where the episode is over).

    >>> import grpo_lab as gl
    >>> adv, ret = gl.gae([0, 0, 1], [0.5, 0.5, 0.5, 0.0], gamma=1.0, lam=1.0)
    >>> adv, ret  # lam=1: reward-to-go minus V, and the return is the reward-to-go
    (array([0.5, 0.5, 0.5]), array([1., 1., 1.]))
    >>> gl.gae([0, 0, 1], [0.5, 0.5, 0.5, 0.0], lam=0.0)[0]  # lam=0: only the last TD error is non-zero
    array([0. , 0. , 0.5])
    >>> gl.gae([0, 0, 1], [0.5, 0.5, 0.5, 0.0], lam=0.5)[0]  # in between: 0.5 decays back by gamma*lam
    array([0.125, 0.25 , 0.5  ])
    """
    r, v, gamma, lam, out_dtype = check_gae_arguments(rewards, values, gamma, lam)
    T = r.shape[-1]                                      # r (N, T) or (T,); v one step longer

    # The next two lines are GAE-lambda: the TD errors, then their (gamma*lam)-discounted
    # sum from each step to the end, accumulated backwards.
    delta = r + gamma * v[..., 1:] - v[..., :-1]         # (N, T) delta_t
    adv = np.empty_like(delta)                           # (N, T)
    running = np.zeros_like(delta[..., 0])               # (N,)  A_{t+1}, 0 after the last step
    for t in range(T - 1, -1, -1):
        running = delta[..., t] + gamma * lam * running
        adv[..., t] = running
    returns = adv + v[..., :-1]                          # (N, T) critic targets

    return (cast_result("rewards, values", "advantages", adv, out_dtype),
            cast_result("rewards, values", "returns", returns, out_dtype))
