r"""The whole GRPO loss: clipped surrogate + beta * KL, aggregated, and what a trainer logs.

Taught in chapter 2 (``chapters/02_ppo_to_grpo.ipynb``).

* :func:`grpo_loss`: the loss of DeepSeekMath (Shao et al. 2024, eq. 3) from its pieces, the
  surrogate of :mod:`grpo_lab.core.surrogate`, the KL estimators of :mod:`grpo_lab.core.kl`
  and the aggregations of :mod:`grpo_lab.core.aggregation`;
* :func:`grpo_diagnostics`: the metrics a trainer logs beside it (TRL's clip fractions, the
  mean ratio and KL, CleanRL's ``approx_kl``), each defined in its docstring.

:func:`grpo_loss` checks its arguments in one call (:func:`check_grpo_loss_arguments`), then
composes the math of its pieces on the checked arrays: :func:`surrogate_from_ratio_math`,
:func:`sequence_ratio_math`, :data:`grpo_lab.core.kl.KL_MATH`, :func:`aggregation_weights_math`
and :func:`grpo_diagnostics_math`, none of which checks anything again.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.aggregation import AGGREGATIONS, aggregation_weights_math, check_max_len
from grpo_lab.core.kl import KL_MATH, cast_kl_estimate, kl_k1, kl_k2, kl_k3
from grpo_lab.core.kl_production import kl_k3_plus
from grpo_lab.core.surrogate import (LEVELS, MAX_LOG_RATIO, check_advantages, check_clip_range,
                                     check_logp_pair, sequence_ratio_math,
                                     surrogate_from_ratio_math)
from grpo_lab.numerics.dtypes import cast_result, common_dtype, working_dtype
from grpo_lab.numerics.logspace import log_ratio_math
from grpo_lab.numerics.stable import masked_mean_math
from grpo_lab.numerics.validate import (as_float_array, as_mask, check_choice, check_real,
                                        check_shape, describe, valid_lengths)

__all__ = ["KL_ESTIMATORS", "check_grpo_diagnostics_arguments", "check_grpo_loss_arguments",
           "check_grpo_loss_knobs", "check_grpo_loss_options", "grpo_diagnostics",
           "grpo_diagnostics_math", "grpo_loss"]

#: The per-token KL estimators ``grpo_loss(kl=...)`` can use (chapter 3; verl's straight-through
#: "k3+", whose value is k3's and whose gradient is k2's, in chapter 8).
KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3, "k3+": kl_k3_plus}

_SHAPE_OF_LOGP = " (the shape of logp; nothing is broadcast)"


# --- argument checks ---------------------------------------------------------------------------

def check_grpo_loss_options(eps_low, eps_high, beta, kl, agg, level, *, has_ref, kind="array"):
    """The options of :func:`grpo_loss` as plain Python values (backend-neutral).

    ``has_ref``: whether a ``ref_logp`` came; without one, ``beta`` must be 0. ``kind`` names
    what ``ref_logp`` should have been in the message ("array", or "tensor" for torch).
    Returns ``(eps_low, eps_high, beta, kl, agg, level)``.
    """
    eps_low, eps_high = check_clip_range(eps_low, eps_high)
    beta = check_real("beta", beta, minimum=0.0)
    kl = check_choice("kl", kl, tuple(KL_ESTIMATORS))
    agg = check_choice("agg", agg, AGGREGATIONS)
    level = check_choice("level", level, LEVELS)
    if not has_ref and beta != 0:
        raise ValueError(f"ref_logp: expected an (N, T) {kind} of reference log-probs "
                         f"when beta = {beta} > 0, got None")
    return eps_low, eps_high, beta, kl, agg, level


def check_grpo_loss_knobs(dual_clip, max_len, kl_clamp, kl_bias_correction, agg, T):
    """The production knobs of :func:`grpo_loss` (chapter 8) as plain Python values
    (backend-neutral): ``(dual_clip, max_len, kl_clamp, kl_bias_correction)``.

    ``dual_clip`` None or c > 1; ``max_len`` None, or (``agg="dr_grpo"`` only) at least the
    padded length ``T``, and T when None under ``dr_grpo``; ``kl_clamp`` None or > 0;
    ``kl_bias_correction`` a bool.
    """
    if dual_clip is not None:
        dual_clip = check_real("dual_clip", dual_clip, minimum=1.0, allow_equal=False)
    max_len = check_max_len(max_len, agg, T)
    if kl_clamp is not None:
        kl_clamp = check_real("kl_clamp", kl_clamp, minimum=0.0, allow_equal=False)
    if not isinstance(kl_bias_correction, (bool, np.bool_)):
        raise TypeError(f"kl_bias_correction: expected True or False, got "
                        f"{type(kl_bias_correction).__name__} {kl_bias_correction!r}")
    return dual_clip, max_len, kl_clamp, bool(kl_bias_correction)


def check_grpo_loss_arguments(logp, old_logp, ref_logp, adv, mask, eps_low, eps_high, beta, kl,
                              agg, level, dual_clip=None, max_len=None, kl_clamp=None,
                              kl_bias_correction=False):
    """Everything :func:`grpo_loss` takes, checked, in the order of its signature.

    Returns ``(logp, old_logp, ref_logp, adv, mask, lengths, dtype, options, knobs)``: the
    arrays in float64 (``ref_logp`` None if absent; adv (N, 1) or (N, T)), a bool mask with a
    valid token in every row and those counts (N,), the result's dtype, the options of
    :func:`check_grpo_loss_options` and the knobs of :func:`check_grpo_loss_knobs`.
    """
    lp, old, dtype = check_logp_pair(logp, old_logp, ndim=2)
    m = as_mask("mask", mask, lp.shape, _SHAPE_OF_LOGP)
    a, a_dtype = check_advantages(adv, lp.shape)
    options = check_grpo_loss_options(eps_low, eps_high, beta, kl, agg, level,
                                      has_ref=ref_logp is not None)
    knobs = check_grpo_loss_knobs(dual_clip, max_len, kl_clamp, kl_bias_correction, options[4],
                                  lp.shape[-1])
    dtypes = [dtype, a_dtype]
    if ref_logp is not None:
        ref, ref_dtype = as_float_array("ref_logp", ref_logp, shape_doc=" of per-token log-probs, "
                                                                        "shape (N, T)")
        check_shape("ref_logp", ref, lp.shape, _SHAPE_OF_LOGP)
        dtypes.append(ref_dtype)
    lengths = valid_lengths(m)                                      # every row has a token
    out_dtype = common_dtype(*dtypes)
    work = working_dtype(out_dtype)
    ref = None if ref_logp is None else ref.astype(work)
    return (lp.astype(work), old.astype(work), ref, a.astype(work), m, lengths, out_dtype,
            options, knobs)


def check_grpo_diagnostics_arguments(logp, old_logp, ratio, adv, mask, eps_low, eps_high,
                                     per_token_kl):
    """:func:`grpo_diagnostics`' arguments: ``(logp, old_logp, ratio, adv, mask, eps_low,
    eps_high, per_token_kl)``, the arrays (N, T) (ratio and adv broadcast to it), in float64."""
    lp, old, _ = check_logp_pair(logp, old_logp, ndim=2)
    m = as_mask("mask", mask, lp.shape, _SHAPE_OF_LOGP)
    valid_lengths(m)
    N, T = lp.shape
    out = []
    for name, x in (("ratio", ratio), ("adv", adv)):
        arr, _ = as_float_array(name, x)
        if arr.shape not in ((N, T), (N, 1)):
            raise ValueError(f"{name}: expected shape {(N, T)} (one per token) or {(N, 1)} (one "
                             f"per sequence, broadcast over its tokens), got {describe(arr)}")
        out.append(np.broadcast_to(arr.astype(np.float64, copy=False), (N, T)))
    if per_token_kl is not None:
        per_token_kl, _ = as_float_array("per_token_kl", per_token_kl)
        check_shape("per_token_kl", per_token_kl, lp.shape, _SHAPE_OF_LOGP)
    eps_low, eps_high = check_clip_range(eps_low, eps_high)
    work = np.float64
    return (lp.astype(work, copy=False), old.astype(work, copy=False), *out, m, eps_low, eps_high,
            per_token_kl)


# --- the loss -------------------------------------------------------------------------------------

def grpo_loss(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None, beta=0.04,
              kl="k3", agg="grpo", level="token", dual_clip=None, max_len=None, kl_clamp=None,
              kl_bias_correction=False):
    r"""The GRPO loss of a batch, and the diagnostics a trainer logs with it.

    DeepSeekMath (Shao et al. 2024, eq. 3), written as a loss to minimise:

    .. math::

        \ell_{i,t} = -\min\big(r_{i,t} A_{i,t},\ \operatorname{clip}(r_{i,t}, 1-\varepsilon_{low},
        1+\varepsilon_{high}) A_{i,t}\big) + \beta\, \mathbb{D}_{KL}[\pi_\theta \| \pi_{ref}]_{i,t},
        \qquad \mathcal{L} = \operatorname{agg}(\ell, m)

    with :math:`r_{i,t} = \pi_\theta(y_{i,t}) / \pi_{old}(y_{i,t})` (``level="token"``) or
    GSPO's :func:`sequence_ratio` :math:`s_i` for every token of sequence i
    (``level="sequence"``, Zheng et al. 2025; use GSPO's clip range, e.g. eps_low=3e-4,
    eps_high=4e-4). ``agg="grpo"`` is the paper's mean over tokens then sequences; see
    :func:`aggregation_weights` for the others.

    ==========  ===============  ======================================================
    Symbol      Shape            Meaning
    ==========  ===============  ======================================================
    logp        (N, T)           log pi_theta(y_t), N = B*G completions, T tokens
    old_logp    (N, T)           log pi_old(y_t) at sampling time (equal to logp on the
                                 first update of a batch, so the ratio is 1)
    ref_logp    (N, T) or None   log pi_ref(y_t), the frozen reference; None only
                                 with beta = 0 (no reference model needed)
    adv         (N,) or (N, T)   per sequence (e.g. gl.group_advantages(...).ravel()),
                                 broadcast over tokens, or per token
    mask        (N, T)           1 for completion tokens, 0 for padding
    eps_low     scalar           in [0, 1], usually 0.2
    eps_high    scalar           None means eps_low; DAPO's clip-higher: 0.28
    beta        scalar           KL weight >= 0: 0.04 in DeepSeekMath; 0 in DAPO and
                                 Dr. GRPO (TRL's default is 0 since v0.19)
    kl          str              ``"k1"``, ``"k2"`` or ``"k3"`` (DeepSeekMath: k3), or
                                 ``"k3+"``: k3's value, k2's gradient (verl's
                                 straight-through; the same value here)
    agg         str              ``"grpo"``, ``"bnpo"``, ``"dapo"`` or ``"dr_grpo"``
    level       str              ``"token"`` or ``"sequence"`` (GSPO)

    The production knobs of chapter 8, all off by default:

    dual_clip   scalar           None, or c > 1: for A < 0 the loss is at most -c A
                                 (verl's clip_ratio_c = 3, on by default there;
                                 TRL's ``delta`` when delta >= 1 + eps_high)
    max_len     int              ``agg="dr_grpo"`` only: the constant divisor, default T
                                 (TRL's max_completion_length, 512)
    kl_clamp    scalar           None, or c > 0: each KL estimate clipped to [-c, c]
                                 (verl's low_var_kl and OpenRLHF: 10)
    kl_bias_correction  bool     weigh the KL by the ratio r (TRL's
                                 ``use_bias_correction_kl``, on by default there)

    verl's default actor loss (``vanilla``, ``token-mean``, KL loss ``low_var_kl``) is
    ``grpo_loss(..., agg="dapo", dual_clip=3.0, kl_clamp=10.0)``; its
    ``seq-mean-token-sum-norm`` is ``agg="dr_grpo"`` with ``max_len`` = the padded length.
    ==========  ===============  ======================================================

    Returns:
        ``(loss, diagnostics)``: the scalar loss in the common dtype of the inputs, and the
        dict of :func:`grpo_diagnostics` (Python floats; ``mean_kl`` None without a reference).

    Example: the first update of a batch (logp == old_logp, so every ratio is 1) with the
    policy still equal to the reference, so the loss is the aggregated -A. Under ``grpo``
    each answer counts once: -mean(A) = 0. Under ``dapo`` each token counts once, and the
    3-token wrong answer outweighs the 1-token right one: (-3 + 2 - 1 + 3) / 9 = 1/9.

    >>> import numpy as np, grpo_lab as gl
    >>> logp = np.log(np.full((4, 3), 0.5))
    >>> adv = gl.group_advantages([[1.0, 0.0, 1.0, 0.0]]).round(6).ravel()  # (4,) per sequence
    >>> adv
    array([ 1., -1.,  1., -1.])
    >>> mask = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]]
    >>> loss, diag = gl.grpo_loss(logp, logp, logp, adv, mask)
    >>> abs(float(loss)) < 1e-12          # -mean(A) = 0, up to rounding
    True
    >>> diag["mean_ratio"], diag["clip_frac"], diag["mean_kl"]
    (1.0, 0.0, 0.0)
    >>> round(float(gl.grpo_loss(logp, logp, logp, adv, mask, agg="dapo")[0]), 6)
    0.111111
    """
    lp, old, ref, adv, m, lengths, dtype, (eps_low, eps_high, beta, kl, agg, level), knobs = (
        check_grpo_loss_arguments(logp, old_logp, ref_logp, adv, mask, eps_low, eps_high, beta,
                                  kl, agg, level, dual_clip, max_len, kl_clamp,
                                  kl_bias_correction))              # float64 (N, T); adv (N, 1|T)
    dual_clip, max_len, kl_clamp, kl_bias_correction = knobs
    if level == "token":
        ratio = np.exp(log_ratio_math(lp, old, MAX_LOG_RATIO))       # (N, T) pi_theta / pi_old
    else:
        ratio = sequence_ratio_math(lp, old, m)[:, None]             # (N, 1) GSPO's s_i
    pg_loss = surrogate_from_ratio_math(ratio, adv, eps_low, eps_high, dual_clip)   # (N, T)
    per_token_kl = None if ref is None else cast_kl_estimate(
        kl, KL_MATH[kl](lp, ref), lp.dtype, kl_clamp)                # (N, T), clipped, finite
    with np.errstate(over="ignore"):                                 # refused by name below
        if per_token_kl is not None and kl_bias_correction:
            per_token_kl = ratio * per_token_kl                      # TRL: k weighted by r
        per_token_loss = pg_loss if ref is None else pg_loss + beta * per_token_kl  # (N, T)
        w = aggregation_weights_math(m, lengths, agg, max_len)       # (N, T), each w <= 1
        loss = (w * per_token_loss).sum()                            # sum w l
    diagnostics = grpo_diagnostics_math(lp, old, ratio, adv, m, eps_low, eps_high, per_token_kl)
    return cast_result("logp, old_logp, ref_logp, adv", "loss", loss, dtype)[()], diagnostics


def grpo_diagnostics(logp, old_logp, ratio, adv, mask, *, eps_low=0.2, eps_high=None,
                     per_token_kl=None):
    r"""The metrics a GRPO trainer logs with its loss, each a mean over the valid tokens.

    ================  ===========================================================================
    key               definition (means over the tokens with ``mask`` True)
    ================  ===========================================================================
    clip_frac_low     share with A < 0 and r < 1 - eps_low: pushed down as far as the clip allows
                      (TRL's ``clip_ratio/low_mean``)
    clip_frac_high    share with A > 0 and r > 1 + eps_high (TRL's ``clip_ratio/high_mean``)
    clip_frac         their sum: the tokens that pass no gradient through the surrogate
    mean_ratio        mean of r (1 on the first update of a batch)
    mean_kl           mean of ``per_token_kl`` against the reference; None without one
    approx_kl         mean of k3 of KL(pi_old || pi_theta), ``r - 1 - log r`` with samples from
                      pi_old: CleanRL's early-stopping signal (``approx_kl`` in ``ppo.py``)
    ================  ===========================================================================

    ==============  ================  ===================================================
    Symbol          Shape             Meaning
    ==============  ================  ===================================================
    logp, old_logp  (N, T)            the log-probs the ratio came from
    ratio           (N, T) or (N, 1)  per token, or GSPO's one per sequence
    adv             (N, T) or (N, 1)  per token, or one per sequence
    mask            (N, T)            1 on completion tokens; every row needs one
    per_token_kl    (N, T) or None    the KL term of the loss
    return          dict              Python floats (``mean_kl`` may be None)
    ==============  ================  ===================================================

    >>> import numpy as np, grpo_lab as gl
    >>> logp, old = np.log([[1.5, 0.5, 1.0]]), np.zeros((1, 3))
    >>> d = gl.grpo_diagnostics(logp, old, np.exp(logp - old), np.array([[1.0, -1.0, 1.0]]),
    ...                         [[1, 1, 1]])
    >>> d["clip_frac_low"], d["clip_frac_high"], round(d["mean_ratio"], 4)
    (0.3333333333333333, 0.3333333333333333, 1.0)
    """
    return grpo_diagnostics_math(*check_grpo_diagnostics_arguments(
        logp, old_logp, ratio, adv, mask, eps_low, eps_high, per_token_kl))


def grpo_diagnostics_math(logp, old_logp, ratio, adv, mask, eps_low, eps_high,
                          per_token_kl=None):
    """:func:`grpo_diagnostics` on checked values: float64 arrays that broadcast to the (N, T)
    bool ``mask`` (which has a valid token in every row) and floats ``eps_low``, ``eps_high``."""
    is_low_clipped = (ratio < 1 - eps_low) & (adv < 0)             # (N, T)
    is_high_clipped = (ratio > 1 + eps_high) & (adv > 0)           # (N, T)
    # k3 with the roles swapped: ratio - 1 - log(ratio), samples from pi_old (CleanRL).
    approx_kl = np.minimum(KL_MATH["k3"](old_logp, logp), MAX_LOG_RATIO)   # (N, T)
    return {
        "clip_frac_low": float(masked_mean_math(is_low_clipped, mask)),
        "clip_frac_high": float(masked_mean_math(is_high_clipped, mask)),
        "clip_frac": float(masked_mean_math(is_low_clipped | is_high_clipped, mask)),
        "mean_ratio": float(masked_mean_math(ratio, mask)),
        "mean_kl": None if per_token_kl is None else float(masked_mean_math(per_token_kl, mask)),
        "approx_kl": float(masked_mean_math(approx_kl, mask)),
    }
