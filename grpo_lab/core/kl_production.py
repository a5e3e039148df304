r"""What production trainers do with the KL estimators of :mod:`grpo_lab.core.kl` (chapter 8).

Taught in chapter 8 (``chapters/08_production_knobs.ipynb``).

* :func:`kl_k3_plus`: verl's straight-through ``"k3+"``, the value of k3 and the gradient of k2;
* :func:`kl_grad_logp`: each estimator's gradient with respect to ``logp``, which is how k3+
  differs from k3 without autograd;
* :func:`kl_shaped_rewards`: verl's ``use_kl_in_reward``, the KL subtracted from the score
  before the group normalisation.

Each checks its arguments in one call and then runs the estimators' math
(:data:`grpo_lab.core.kl.KL_MATH`) on the checked log-probs.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import KL_MATH, KL_NAMES, cast_kl_estimate, check_kl_arguments, kl_k3_math
from grpo_lab.numerics.dtypes import cast_result, common_dtype, working_dtype
from grpo_lab.numerics.logspace import log_ratio_math
from grpo_lab.numerics.stable import power_of_two_rescale_math, scale_by_power_of_two_math
from grpo_lab.numerics.validate import (as_float_array, as_mask, check_choice, check_real,
                                        check_shape, describe)

_SHAPE_DOC = " of per-token log-probs, shape (..., T)"

__all__ = ["check_kl_grad_logp_arguments", "check_kl_shaped_rewards_arguments", "kl_grad_logp",
           "kl_k3_plus", "kl_shaped_rewards"]


def kl_k3_plus(logp, ref_logp, *, clamp=None):
    r"""verl's straight-through ``"k3+"``: the value of k3, the gradient of k2.

    verl's ``kl_penalty(logp, ref_logp, "k3+")`` returns
    ``k2 - stop_grad(k2) + stop_grad(k3)`` (``verl/trainer/ppo/core_algos.py``, 0.9.1): the
    loss *reads* k3, unbiased for KL with low variance, but its gradient is k2's,
    ``logp - ref_logp``, whose expectation is the gradient of KL(pi_theta || pi_ref) (chapter
    3). NumPy has no gradients, so this function returns the value, which is exactly
    :func:`kl_k3`; :func:`kl_grad_logp` gives the gradient and
    :func:`grpo_lab.torch.kl.kl_k3_plus` both. Same arguments and shapes as :func:`kl_k1`.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.kl_k3_plus(np.log([0.5]), np.log([0.25])).round(4)     # k3's value
    array([0.1931])
    >>> gl.kl_grad_logp(np.log([0.5]), np.log([0.25]), "k3+").round(4)   # k2's gradient, log 2
    array([0.6931])
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)   # float64 (..., T)
    return cast_kl_estimate("k3", kl_k3_math(lp, ref), out_dtype, clamp)


def kl_grad_logp(logp, ref_logp, kl="k3", *, clamp=None):
    r"""``d k / d logp`` per token, for each estimator: what its gradient pushes on.

    With :math:`d = \log\pi_\theta - \log\pi_{ref}`:

    ======  ===========================  =================================================
    kl      :math:`\partial k/\partial \texttt{logp}`  expected gradient (samples from pi_theta)
    ======  ===========================  =================================================
    k1      :math:`1`                    0: no force at all (chapter 3)
    k2      :math:`d`                    the gradient of KL(pi_theta || pi_ref)
    k3      :math:`1 - e^{-d}`           the gradient of KL(pi_ref || pi_theta)
    k3+     :math:`d`                    k2's: verl's straight-through (:func:`kl_k3_plus`)
    ======  ===========================  =================================================

    With ``clamp=c`` a token whose estimate is clipped has gradient 0 (as the trainers'
    ``clamp`` gives it); for k3+ the clip of the *value* leaves k2's gradient in place, as in
    verl. Same arguments and shapes as :func:`kl_k1`, plus ``kl`` (one of :data:`KL_NAMES`).

    >>> import numpy as np, grpo_lab as gl
    >>> lp, ref = np.log([0.5, 0.25]), np.log([0.25, 0.5])
    >>> [gl.kl_grad_logp(lp, ref, k).round(4).tolist() for k in ("k1", "k2", "k3")]
    [[1.0, 1.0], [0.6931, -0.6931], [0.5, -1.0]]
    """
    lp, ref, kl, out_dtype, clamp = check_kl_grad_logp_arguments(logp, ref_logp, kl, clamp)
    d = log_ratio_math(lp, ref)                                    # (..., T) logp - ref_logp
    if kl == "k1":
        grad = np.ones_like(d)                                     # d k1 / d logp = 1
    elif kl == "k3":
        with np.errstate(over="ignore"):                           # refused by name below
            grad = -np.expm1(-d)                                   # 1 - e^{-d}
    else:
        grad = d                                                   # k2 and k3+: d
    if clamp is not None and kl != "k3+":                          # only the estimate asked for
        grad = np.where(np.abs(KL_MATH[kl](lp, ref)) > clamp, 0.0, grad)   # clipped: flat
    return cast_kl_estimate(f"{kl} gradient", grad, out_dtype, None)


def check_kl_grad_logp_arguments(logp, ref_logp, kl, clamp):
    """``(logp, ref_logp, kl, out_dtype, clamp)`` for :func:`kl_grad_logp`: those of
    :func:`check_kl_arguments`, and ``kl`` one of :data:`KL_NAMES`."""
    kl = check_choice("kl", kl, KL_NAMES)
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)   # float64 (..., T)
    return lp, ref, kl, out_dtype, clamp


def check_kl_shaped_rewards_arguments(rewards, old_logp, ref_logp, mask, beta, kl, clamp):
    """``(rewards, old_logp, ref_logp, mask, beta, kl, clamp, dtype)`` for
    :func:`kl_shaped_rewards`: rewards (B, G) in float64, the log-probs (B*G, T) in float64, a
    bool mask of their shape, ``beta >= 0``, ``kl`` one of k1, k2, k3 and the result's dtype."""
    r, r_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)")
    old, old_dtype = as_float_array("old_logp", old_logp, shape_doc=_SHAPE_DOC)
    if old.ndim != 2 or old.shape[0] != r.size:
        raise ValueError(f"old_logp: expected shape (B*G, T) = ({r.size}, T), one row per "
                         f"reward, got {describe(old)}")
    ref, ref_dtype = as_float_array("ref_logp", ref_logp, shape_doc=_SHAPE_DOC)
    check_shape("ref_logp", ref, old.shape, " (the shape of old_logp; nothing is broadcast)")
    m = as_mask("mask", mask, old.shape, " (the shape of old_logp; nothing is broadcast)")
    beta = check_real("beta", beta, minimum=0.0)
    kl = check_choice("kl", kl, KL_NAMES[:3])
    if clamp is not None:
        clamp = check_real("clamp", clamp, minimum=0.0, allow_equal=False)
    dtype = common_dtype(r_dtype, old_dtype, ref_dtype)
    work = working_dtype(dtype)
    return r.astype(work), old.astype(work), ref.astype(work), m, beta, kl, clamp, dtype


def kl_shaped_rewards(rewards, old_logp, ref_logp, mask, *, beta, kl="k1", clamp=None):
    r"""verl's KL in the reward: each score minus beta times its completion's summed KL.

    .. math::

        \tilde r_i = r_i - \beta \sum_t m_{i,t}\, k(\texttt{old\_logp}, \texttt{ref\_logp})_{i,t}

    verl (``algorithm.use_kl_in_reward=true``) subtracts :math:`\beta k_t` from every token's
    reward (``apply_kl_penalty`` in ``ray_trainer.py``), and its GRPO estimator then sums the
    token rewards into one score (``compute_grpo_outcome_advantage``): the KL enters **before**
    the group normalisation, so ``group_advantages(kl_shaped_rewards(...))`` is verl's
    advantage. OpenRLHF instead adds the KL **after** normalising, token by token, as a
    reward-to-go (:func:`grpo_lab.presets.default_loss`). The KL is read at sampling time,
    from ``old_logp``; verl's default estimator here is k1 (``algorithm.kl_penalty: kl``).

    ==========  ========  =====================================================
    Symbol      Shape     Meaning
    ==========  ========  =====================================================
    rewards     (B, G)    one score per completion
    old_logp    (N, T)    log-probs at sampling time, N = B*G in ``rewards.ravel()`` order
    ref_logp    (N, T)    reference log-probs of the same tokens
    mask        (N, T)    1 for completion tokens
    beta        scalar    KL coefficient >= 0 (verl: ``algorithm.kl_ctrl.kl_coef``, 0.001)
    kl          str       ``"k1"`` (verl's ``kl``), ``"k2"`` or ``"k3"``
    clamp       scalar    None, or c > 0: clip each token's estimate to [-c, c]
    return      (B, G)    the shaped scores, in the common dtype of the inputs
    ==========  ========  =====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> old = np.log([[0.5, 0.5], [0.5, 0.5]]); ref = np.log([[0.25, 0.5], [0.5, 0.5]])
    >>> gl.kl_shaped_rewards([[1.0, 0.0]], old, ref, [[1, 1], [1, 0]], beta=0.1).round(4)
    array([[0.9307, 0.    ]])
    """
    r, old, ref, m, beta, kl, clamp, dtype = check_kl_shaped_rewards_arguments(
        rewards, old_logp, ref_logp, mask, beta, kl, clamp)
    k = cast_kl_estimate(kl, KL_MATH[kl](old, ref), old.dtype, clamp)   # (N, T) float64
    # sum_t k in units of 2**j, exact, so that a sum past float64's range of estimates that
    # fit is no inf: beta * sum_t k fits whenever the shaped reward does.
    small, j = power_of_two_rescale_math(np.where(m, k, 0.0))      # (N, T) |k / 2**j| < 1
    with np.errstate(over="ignore"):                               # refused by name below
        penalty = scale_by_power_of_two_math(beta * small.sum(axis=-1), j)   # (N,) beta sum_t k
        shaped = r - penalty.reshape(r.shape)                      # (B, G) r_i - beta sum_t k
    return cast_result("rewards, old_logp, ref_logp", "shaped rewards", shaped, dtype)
