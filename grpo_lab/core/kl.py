r"""Per-token estimators of KL(pi_theta || pi_ref): Schulman's k1, k2 and k3.

Taught in chapter 3 (``chapters/03_kl_estimators.ipynb``).

GRPO keeps the policy ``pi_theta`` near a frozen reference ``pi_ref`` with a KL penalty. The
exact KL sums over the whole vocabulary at every position; the estimators below need only the
two log-probabilities of the token that was actually sampled, and are averaged over tokens.
All three read the log-ratio of the sampled token ``x ~ pi_theta``:

.. math::

    d = \log \pi_\theta(x) - \log \pi_{ref}(x) = \texttt{logp} - \texttt{ref\_logp}

    k_1 = d, \qquad k_2 = \tfrac12 d^2, \qquad k_3 = e^{-d} - (-d) - 1 = e^{-d} + d - 1

(J. Schulman, "Approximating KL Divergence", 2020, http://joschu.net/blog/kl-approx.html).

Chapter 8 adds what production trainers do with them: :func:`kl_k3_plus` (verl's
straight-through ``"k3+"``: the value of k3, the gradient of k2), :func:`kl_grad_logp` (each
estimator's gradient, which is how k3+ differs from k3 without autograd) and
:func:`kl_shaped_rewards` (verl's ``use_kl_in_reward``: the KL subtracted from the score
before the group normalisation).
Over ``x ~ pi_theta``, k1 and k3 are unbiased for KL(pi_theta || pi_ref); k2 is biased (it is
unbiased for a different f-divergence) but, like k3, never negative. DeepSeekMath's GRPO loss
(Shao et al. 2024, eq. 4) uses k3.

Numerics, the same for all three:

* the log-ratio and the estimate are computed in float64 (wider for longdouble), then cast
  back to the input's float dtype;
* k3 is ``expm1(-d) + d`` so that nothing of size 1 is subtracted; for ``|d| < 0.1``, where
  ``expm1(-d) + d`` still cancels to about ``2e-16 / |d|`` relative error, it is summed as the
  Taylor series ``d^2/2 - d^3/6 + ...`` instead, accurate to a few ulp;
* ``exp(-d)`` overflows float64 once ``-d > 709.8``, and a float32 result once ``-d > 88.7``.
  Without ``clamp`` a result that does not fit the output dtype is a ``ValueError`` (never an
  inf or a NaN). With ``clamp=c`` each estimate is clipped to ``[-c, c]`` in float64 first,
  as production trainers do: verl 0.9.1's ``kl_penalty(..., "low_var_kl")`` clips k3 to
  ``[-10, 10]`` (``verl/trainer/ppo/core_algos.py``); OpenRLHF 0.11.2's
  ``compute_approx_kl`` (``openrlhf/models/utils.py``) clips every estimator to
  ``[-10, 10]`` (chapter 8's map gives file and line; ``tests/reference`` compares). A
  clipped token passes no gradient through its KL term.

Each public function checks its arguments in one call, then runs the math: ``kl_k1_math``,
``kl_k2_math`` and ``kl_k3_math`` (:data:`KL_MATH` by name) are the estimators on log-probs
already checked, which :func:`grpo_lab.grpo_loss` and :func:`kl_shaped_rewards` call directly.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.dtypes import (cast_result, common_dtype, first_non_finite, is_tensor,
                                      working_dtype)
from grpo_lab.numerics.logspace import k3_from_log_ratio_math, log_ratio_math
from grpo_lab.numerics.stable import power_of_two_rescale_math, scale_by_power_of_two_math
from grpo_lab.numerics.validate import (as_float_array, as_mask, check_choice, check_real,
                                        check_shape, describe)

__all__ = ["KL_MATH", "KL_NAMES", "cast_kl_estimate", "check_kl_arguments",
           "check_kl_grad_logp_arguments", "check_kl_shapes", "check_kl_shaped_rewards_arguments",
           "kl_grad_logp", "kl_k1", "kl_k1_math", "kl_k2", "kl_k2_math", "kl_k3", "kl_k3_math",
           "kl_k3_plus", "kl_shaped_rewards"]

_SHAPE_DOC = " of per-token log-probs, shape (..., T)"


def check_kl_shapes(logp_shape, ref_shape) -> None:
    """Both log-prob arrays (or tensors) at least 1-D and of one shape (backend-neutral)."""
    if len(logp_shape) == 0:
        raise ValueError(f"logp: expected an array with at least 1 dimension{_SHAPE_DOC}, got "
                         f"a 0-D array of shape ()")
    if tuple(logp_shape) != tuple(ref_shape):
        raise ValueError(f"ref_logp: expected the shape of logp, {tuple(logp_shape)} (no "
                         f"broadcasting), got shape {tuple(ref_shape)}")


def check_kl_arguments(logp, ref_logp, clamp):
    """``(logp, ref_logp, out_dtype, clamp)``: the log-probs in float64 (copies), the dtype to
    return (the wider input's; float32 for bfloat16 with float16) and ``clamp`` (None or > 0)."""
    a, a_dtype = as_float_array("logp", logp, shape_doc=_SHAPE_DOC)
    b, b_dtype = as_float_array("ref_logp", ref_logp, shape_doc=_SHAPE_DOC)
    if a.ndim == 0:
        raise ValueError(
            f"logp: expected an array with at least 1 dimension{_SHAPE_DOC}, got {describe(a)}")
    check_kl_shapes(a.shape, b.shape)
    if clamp is not None:
        clamp = check_real("clamp", clamp, minimum=0.0, allow_equal=False)
    out_dtype = common_dtype(a_dtype, b_dtype)
    work = working_dtype(out_dtype)
    return a.astype(work), b.astype(work), out_dtype, clamp


def cast_kl_estimate(name: str, k, out_dtype, clamp):
    """Clip to ``[-clamp, clamp]`` if asked, cast to ``out_dtype``, refuse anything non-finite.

    An estimate past the output's range (``e^r`` for ``r > 88.7`` in float32) is a
    ``ValueError`` that says what to do, never an inf or a NaN. Written for arrays and
    tensors alike: :mod:`grpo_lab.torch.kl` casts its estimates with this same function.
    """
    if clamp is not None:
        k = k.clip(-clamp, clamp)
    with np.errstate(over="ignore", invalid="ignore"):
        out = k.to(out_dtype) if is_tensor(k) else k.astype(out_dtype)
    where = first_non_finite(out)
    if where is not None:
        raise ValueError(
            f"logp, ref_logp: expected a {name} estimate that fits in {out_dtype}, got "
            f"{float(k[where]):.4g} at index {where} (log-ratio logp - ref_logp too far from 0); "
            f"pass clamp=... (verl clips k3 to 10) or log-probs in a wider dtype")
    return out


def kl_k1(logp, ref_logp, *, clamp=None):
    r"""k1 = logp - ref_logp: the plain log-ratio, unbiased for KL but often negative.

    ==========  ========  =====================================================
    Symbol      Shape     Meaning
    ==========  ========  =====================================================
    logp        (..., T)  log pi_theta(x_t) of the sampled tokens x_t ~ pi_theta
    ref_logp    (..., T)  log pi_ref(x_t) of the same tokens under the reference
    clamp       scalar    None, or c > 0: clip each estimate to [-c, c]
    return      (..., T)  per-token estimate; its mean over x ~ pi_theta is the KL
    ==========  ========  =====================================================

    Args:
        logp, ref_logp: same-shape arrays (at least 1-D, no broadcasting) of finite
            log-probabilities (or log-densities) of tokens sampled from ``pi_theta``: the
            estimate is unbiased only for samples from the policy, not from ``pi_ref``.
            Floats keep their dtype (two different ones give the wider); ints give float64.
        clamp: None (no clipping) or a number > 0.

    Returns:
        ``logp - ref_logp``, same shape, in the inputs' float dtype. Inputs are not modified.

    Its variance is large when the policies are close (std/KL = 20 in Schulman's N(0.1, 1)
    example), and its expected gradient as a loss term is zero (chapter 3).

    >>> import numpy as np, grpo_lab as gl
    >>> gl.kl_k1(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(4)   # +log 2, -log 2
    array([ 0.6931, -0.6931])
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)   # float64 (..., T)
    return cast_kl_estimate("k1", kl_k1_math(lp, ref), out_dtype, clamp)


def kl_k1_math(logp, ref_logp):
    """:func:`kl_k1` on checked same-shape float arrays, in their dtype, not clipped."""
    return log_ratio_math(logp, ref_logp)                          # (..., T) d = logp - ref_logp


def kl_k2(logp, ref_logp, *, clamp=None):
    r"""k2 = (logp - ref_logp)^2 / 2: never negative, low variance, biased for KL.

    Same arguments and shapes as :func:`kl_k1`. Its mean over ``x ~ pi_theta`` is
    ``KL + O(d^3)``: the bias is small when the policies are close (``mu^4/8`` for two unit
    Gaussians ``mu`` apart, against a KL of ``mu^2/2``). Used as a loss term, its expected
    gradient is exactly the gradient of KL(pi_theta || pi_ref) (chapter 3).

    >>> import numpy as np, grpo_lab as gl
    >>> gl.kl_k2(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(4)   # (log 2)^2 / 2 twice
    array([0.2402, 0.2402])
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)   # float64 (..., T)
    return cast_kl_estimate("k2", kl_k2_math(lp, ref), out_dtype, clamp)


def kl_k2_math(logp, ref_logp):
    """:func:`kl_k2` on checked same-shape float arrays; a square past float64's range is inf,
    quietly, for the caller to refuse or clip."""
    d = log_ratio_math(logp, ref_logp)                             # (..., T) logp - ref_logp
    with np.errstate(over="ignore"):
        return 0.5 * d * d                                         # (..., T)


def kl_k3(logp, ref_logp, *, clamp=None):
    r"""k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1: unbiased, never negative.

    DeepSeekMath's per-token KL (Shao et al. 2024, eq. 4), written with the ratio
    ``pi_ref / pi_theta`` of the sampled token. Same arguments and shapes as :func:`kl_k1`;
    samples come from ``pi_theta``, over which ``E[pi_ref/pi_theta] = 1`` makes k3 unbiased.

    It is ``f(r) = e^r - r - 1 >= 0`` at ``r = ref_logp - logp``, zero only at ``r = 0``. It
    grows like ``e^r`` when the reference likes a token far more than the policy does, and
    only like ``|r|`` the other way. Used as a loss term its expected gradient is that of
    KL(pi_ref || pi_theta), the *other* direction (chapter 3).

    Computed by :func:`grpo_lab.k3_from_log_ratio` as ``expm1(r) - r`` (the series
    :func:`grpo_lab.k3_series` for ``|r| < 0.1``) in float64; see the module docstring for
    overflow and ``clamp``.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.kl_k3(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(4)   # 0.5+log2-1, 2-log2-1
    array([0.1931, 0.3069])
    >>> gl.kl_k3([-1e-9], [0.0])      # 5e-19; exp(r) - r - 1 would give exactly 0 here
    array([5.e-19])
    >>> gl.kl_k3([-800.0], [0.0], clamp=10.0)   # e^800 overflows float64: clipped to 10
    array([10.])
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)   # float64 (..., T)
    return cast_kl_estimate("k3", kl_k3_math(lp, ref), out_dtype, clamp)


def kl_k3_math(logp, ref_logp):
    """:func:`kl_k3` on checked same-shape float arrays; inf where ``e^{-d}`` overflows."""
    return k3_from_log_ratio_math(log_ratio_math(logp, ref_logp))   # e^{-d} + d - 1, (..., T)


# --- what production trainers add (chapter 8) ----------------------------------------------------

#: The estimators by name, as ``grpo_loss(kl=...)`` and :func:`kl_grad_logp` accept them.
KL_NAMES = ("k1", "k2", "k3", "k3+")
#: Their values on checked log-probs (k3+ has k3's value; only its gradient differs).
KL_MATH = {"k1": kl_k1_math, "k2": kl_k2_math, "k3": kl_k3_math, "k3+": kl_k3_math}


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
