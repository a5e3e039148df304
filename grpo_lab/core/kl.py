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

Chapter 8 adds what production trainers do with them (:mod:`grpo_lab.core.kl_production`):
verl's straight-through ``"k3+"``, each estimator's gradient, and the KL in the reward.
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
already checked, which :func:`grpo_lab.grpo_loss` and :func:`grpo_lab.kl_shaped_rewards` call
directly.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.dtypes import common_dtype, first_non_finite, is_tensor, working_dtype
from grpo_lab.numerics.logspace import k3_from_log_ratio_math, log_ratio_math
from grpo_lab.numerics.validate import as_float_array, check_real, describe

__all__ = ["KL_MATH", "KL_NAMES", "cast_kl_estimate", "check_kl_arguments", "check_kl_shapes",
           "kl_k1", "kl_k1_math", "kl_k2", "kl_k2_math", "kl_k3", "kl_k3_math"]

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

    An estimate past the output's range (``e^{-d}`` for ``-d > 88.7`` in float32) is a
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
    r"""k3 = exp(-d) + d - 1 with d = logp - ref_logp: unbiased, never negative.

    DeepSeekMath's per-token KL (Shao et al. 2024, eq. 4), written there with the ratio
    ``pi_ref / pi_theta = e^{-d}`` of the sampled token. Same arguments and shapes as
    :func:`kl_k1`; samples come from ``pi_theta``, over which ``E[pi_ref/pi_theta] = 1`` makes
    k3 unbiased.

    It is ``f(d) = e^{-d} + d - 1 >= 0``, zero only at ``d = 0``. It grows like ``e^{-d}`` when
    the reference likes a token far more than the policy does (``d`` very negative), and only
    like ``|d|`` the other way. Used as a loss term its expected gradient is that of
    KL(pi_ref || pi_theta), the *other* direction (chapter 3).

    Computed by :func:`grpo_lab.k3_from_log_ratio` as ``expm1(-d) + d`` (the series
    :func:`grpo_lab.k3_series` for ``|d| < 0.1``) in float64; see the module docstring for
    overflow and ``clamp``.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.kl_k3(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(4)   # 0.5+log2-1, 2-log2-1
    array([0.1931, 0.3069])
    >>> gl.kl_k3([-1e-9], [0.0])      # 5e-19; exp(-d) + d - 1 would give exactly 0 here
    array([5.e-19])
    >>> gl.kl_k3([-800.0], [0.0], clamp=10.0)   # e^800 overflows float64: clipped to 10
    array([10.])
    """
    lp, ref, out_dtype, clamp = check_kl_arguments(logp, ref_logp, clamp)   # float64 (..., T)
    return cast_kl_estimate("k3", kl_k3_math(lp, ref), out_dtype, clamp)


def kl_k3_math(logp, ref_logp):
    """:func:`kl_k3` on checked same-shape float arrays; inf where ``e^{-d}`` overflows."""
    return k3_from_log_ratio_math(log_ratio_math(logp, ref_logp))   # e^{-d} + d - 1, (..., T)


#: The estimators by name, as ``grpo_loss(kl=...)`` and :func:`grpo_lab.kl_grad_logp` accept them.
KL_NAMES = ("k1", "k2", "k3", "k3+")
#: Their values on checked log-probs (k3+ has k3's value; only its gradient differs).
KL_MATH = {"k1": kl_k1_math, "k2": kl_k2_math, "k3": kl_k3_math, "k3+": kl_k3_math}
