r"""The GRPO loss, built from PPO's clipped surrogate, a KL penalty and a loss aggregation.

Taught in chapter 2 (``chapters/02_ppo_to_grpo.ipynb``).

The pieces, in the order the loss uses them:

* :func:`clipped_surrogate_loss`: PPO's per-token clipped objective (Schulman et al. 2017),
  with DAPO's clip-higher (``eps_high > eps_low``) and the dual-clip bound (Ye et al. 2020);
* :func:`sequence_ratio`: GSPO's length-normalised sequence-level ratio (Zheng et al. 2025);
* :func:`grpo_lab.core.aggregation.aggregate_loss` (its own module): how per-token losses become
  one number, under TRL's ``loss_type`` names ``grpo``, ``bnpo``, ``dapo`` and ``dr_grpo``;
* :func:`grpo_loss`: all of it together with the KL estimators of :mod:`grpo_lab.core.kl`.

The probability ratio ``exp(logp - old_logp)`` is computed from a log-ratio clamped to
``[-MAX_LOG_RATIO, MAX_LOG_RATIO]`` in float64, as verl does (``compute_policy_loss`` in
``verl/trainer/ppo/core_algos.py`` clamps it to [-20, 20]), so it cannot overflow.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import (as_float_array, as_mask, cast_result, check_choice, check_real, check_shape,
                      common_dtype, describe, working_dtype)
from grpo_lab.core.aggregation import AGGREGATIONS, aggregation_weights, valid_lengths
from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3

__all__ = ["KL_ESTIMATORS", "LEVELS", "MAX_LOG_RATIO", "clipped_surrogate_loss", "grpo_loss",
           "sequence_ratio"]

#: Largest |logp - old_logp| used in a ratio: e^20 is 4.9e8, far outside any clip range.
MAX_LOG_RATIO = 20.0

#: The per-token KL estimators ``grpo_loss(kl=...)`` can use (chapter 3).
KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}

#: ``"token"``: one ratio per token (PPO, GRPO, DAPO); ``"sequence"``: GSPO's one per sequence.
LEVELS = ("token", "sequence")

_TOKENS_DOC = " of per-token log-probs, shape (N, T)"


# --- helpers: validation and the ratio -----------------------------------------------------

def _logp_pair(logp, old_logp, *, ndim=None):
    """Validate ``logp`` and ``old_logp`` (same shape) and return them with their common dtype."""
    lp, lp_dtype = as_float_array("logp", logp, ndim=ndim, shape_doc=_TOKENS_DOC)
    if lp.ndim == 0:
        raise ValueError(f"logp: expected an array with at least 1 dimension (T tokens), "
                         f"got {describe(lp)}")
    old, old_dtype = as_float_array("old_logp", old_logp, shape_doc=_TOKENS_DOC)
    check_shape("old_logp", old, lp.shape, " (the shape of logp; nothing is broadcast)")
    return lp, old, common_dtype(lp_dtype, old_dtype)


def _advantages(adv, shape):
    """Validate ``adv``: one per sequence, shape[:-1], or one per token, shape. Returns (adv, dtype).

    A per-sequence ``adv`` is given its token axis explicitly (``adv[..., None]``): NumPy's own
    broadcasting would align an (N,) array with the *last* axis, the tokens, and for N == T it
    would do so without an error.
    """
    a, a_dtype = as_float_array("adv", adv, min_size=0)
    if a.shape == tuple(shape):
        return a, a_dtype                                   # (N, T) per token
    if a.shape == tuple(shape[:-1]):
        return a[..., None], a_dtype                        # (N,) -> (N, 1), broadcast over T
    raise ValueError(f"adv: expected shape {tuple(shape[:-1])} (one advantage per sequence) or "
                     f"{tuple(shape)} (one per token), got {describe(a)}")


def _eps(eps_low, eps_high):
    """Validate the clip range; ``eps_high`` defaults to ``eps_low`` (symmetric PPO clipping)."""
    eps_low = check_real("eps_low", eps_low, minimum=0.0, maximum=1.0)
    eps_high = eps_low if eps_high is None else check_real("eps_high", eps_high, minimum=0.0)
    return eps_low, eps_high


def _log_ratio(lp, old, work):
    """``logp - old_logp`` in working precision, clamped to [-MAX_LOG_RATIO, MAX_LOG_RATIO]."""
    with np.errstate(over="ignore"):       # only near float64's limit; the clamp catches it
        d = lp.astype(work) - old.astype(work)
    return np.clip(d, -MAX_LOG_RATIO, MAX_LOG_RATIO)


def _surrogate(log_ratio, adv, eps_low, eps_high, dual_clip):
    """The clipped surrogate, term by term with the paper's names (CleanRL's ppo.py layout).

    ``log_ratio`` and ``adv`` are float64 arrays that broadcast to (N, T); returns
    ``(pg_loss, ratio)``.
    """
    ratio = np.exp(log_ratio)                                     # (N, T) pi_theta / pi_old
    pg_loss1 = -adv * ratio                                       # unclipped: -r A
    pg_loss2 = -adv * np.clip(ratio, 1 - eps_low, 1 + eps_high)   # clipped: -clip(r) A
    pg_loss = np.maximum(pg_loss1, pg_loss2)                      # = -min(r A, clip(r) A)
    if dual_clip is not None:
        # Dual-clip (Ye et al. 2020): for A < 0 the objective is also bounded below by
        # c A, so a token whose ratio has run far above 1 cannot dominate the batch.
        pg_loss3 = -adv * dual_clip                                # (N, 1) or (N, T)
        pg_loss = np.where(adv < 0, np.minimum(pg_loss, pg_loss3), pg_loss)
    return pg_loss, ratio


# --- the per-token clipped surrogate -------------------------------------------------------

def clipped_surrogate_loss(logp, old_logp, adv, *, eps_low=0.2, eps_high=None, dual_clip=None):
    r"""PPO's clipped surrogate as a per-token loss to minimise.

    Schulman et al. 2017, eq. 7 (L^CLIP), with the ratio :math:`r_t = \pi_\theta(y_t)/\pi_{old}(y_t)`:

    .. math::

        \ell_t = -\min\big(r_t A_t,\ \operatorname{clip}(r_t, 1-\varepsilon_{low},
                 1+\varepsilon_{high})\, A_t\big)

    For :math:`A_t > 0` the loss stops falling once :math:`r_t > 1+\varepsilon_{high}`; for
    :math:`A_t < 0` once :math:`r_t < 1-\varepsilon_{low}`. Outside that, the gradient is 0.
    With ``dual_clip=c`` (Ye et al. 2020) a token with :math:`A_t < 0` also has
    :math:`\ell_t \le -c A_t`: without it, a token the policy now likes far more than when it
    was sampled (r in the hundreds) gets a loss, and a gradient, as large as r.

    ==========  ===============  ====================================================
    Symbol      Shape            Meaning
    ==========  ===============  ====================================================
    logp        (N, T)           log pi_theta(y_t) of the sampled tokens, current policy
    old_logp    (N, T)           log pi_old(y_t), the policy that sampled them
    adv         (N,) or (N, T)   advantage per sequence (broadcast over its tokens) or
                                 per token
    eps_low     scalar           lower clip, in [0, 1]; usually 0.1 to 0.3 (0.2)
    eps_high    scalar           upper clip; None means eps_low. DAPO's clip-higher
                                 uses 0.28 with eps_low 0.2
    dual_clip   scalar           None, or c > 1 (verl's clip_ratio_c; 3 is common)
    return      (N, T)           per-token loss; padded tokens are removed later by
                                 :func:`aggregate_loss`
    ==========  ===============  ====================================================

    Any number of leading axes works the same way: logp of shape (..., T), adv of shape
    (...,) or (..., T). Inputs are worked in float64; the result has the common float dtype of
    ``logp``, ``old_logp`` and ``adv`` (a float16 loss that does not fit is a ``ValueError``).
    The log-ratio is clamped to ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]`` before ``exp``: a ratio
    of e^20 is far outside any clip range, so this only changes the unclipped A < 0 branch
    without dual-clip, which it caps at ``-A e^20`` instead of inf.

    Example: at ratio 1 the loss is -A; with A = +1 it stops at -1.2 (ratio 1.5 is clipped to
    1.2); with A = -1 a ratio of 5 costs 5, or 3 with dual-clip.

    >>> import numpy as np, grpo_lab as gl
    >>> logp = np.log([[1.0, 1.5, 1.5, 5.0]])      # old_logp = 0, so these are the ratios
    >>> old = np.zeros((1, 4))
    >>> gl.clipped_surrogate_loss(logp, old, [[1.0, 1.0, -1.0, -1.0]])
    array([[-1. , -1.2,  1.5,  5. ]])
    >>> gl.clipped_surrogate_loss(logp, old, [[1.0, 1.0, -1.0, -1.0]], eps_high=0.28, dual_clip=3.0)
    array([[-1.  , -1.28,  1.5 ,  3.  ]])
    """
    lp, old, dtype = _logp_pair(logp, old_logp)
    a, a_dtype = _advantages(adv, lp.shape)
    eps_low, eps_high = _eps(eps_low, eps_high)
    if dual_clip is not None:
        dual_clip = check_real("dual_clip", dual_clip, minimum=1.0, allow_equal=False)
    out_dtype = common_dtype(dtype, a_dtype)
    work = working_dtype(out_dtype)

    log_ratio = _log_ratio(lp, old, work)                          # (N, T)
    pg_loss, _ = _surrogate(log_ratio, a.astype(work), eps_low, eps_high, dual_clip)
    return cast_result("logp, old_logp, adv", "per-token losses", pg_loss, out_dtype)


# --- GSPO's sequence-level ratio ------------------------------------------------------------

def _mean_log_ratio(lp, old, m, work):
    """Each sequence's mean log-ratio over its valid tokens, (N,), clamped."""
    with np.errstate(over="ignore"):
        d = lp.astype(work) - old.astype(work)                     # (N, T)
    d = np.where(m, d, 0.0)                                        # padding contributes nothing
    mean = d.sum(axis=-1) / valid_lengths(m)                       # (N,)
    return np.clip(mean, -MAX_LOG_RATIO, MAX_LOG_RATIO)


def sequence_ratio(logp, old_logp, mask):
    r"""GSPO's sequence-level importance ratio, normalised by length (GSPO, Zheng et al. 2025).

    .. math::

        s_i = \left(\frac{\pi_\theta(y_i)}{\pi_{old}(y_i)}\right)^{1/|y_i|}
            = \exp\Big(\frac{1}{|y_i|}\sum_{t} m_{i,t}\,
              \big(\log\pi_\theta(y_{i,t}) - \log\pi_{old}(y_{i,t})\big)\Big)

    The geometric mean of the token ratios: without the ``1/|y_i|``, a 1000-token sequence
    whose tokens each moved by 1% would have a ratio of 1.01^1000 = 21000 and be clipped
    whatever happened; with it, the ratio stays near 1 and one clip range fits all lengths.

    ========  ========  ========================================================
    Symbol    Shape     Meaning
    ========  ========  ========================================================
    logp      (N, T)    log pi_theta of each sampled token
    old_logp  (N, T)    log pi_old of the same tokens
    mask      (N, T)    1 (True) for a completion's tokens, 0 for padding; every
                        row needs at least one 1
    return    (N,)      s_i, one ratio per sequence
    ========  ========  ========================================================

    Worked in float64, returned in the common dtype of ``logp`` and ``old_logp``; the mean
    log-ratio is clamped to ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]`` so it cannot overflow.

    Example: token ratios 2 and 1/2 give a sequence ratio of 1; a padded token is ignored.

    >>> import numpy as np, grpo_lab as gl
    >>> logp = np.log([[2.0, 0.5, 9.0], [4.0, 1.0, 1.0]])
    >>> gl.sequence_ratio(logp, np.zeros((2, 3)), [[1, 1, 0], [1, 1, 1]]).round(4)  # 4^(1/3)
    array([1.    , 1.5874])
    """
    lp, old, dtype = _logp_pair(logp, old_logp, ndim=2)
    m = as_mask("mask", mask, lp.shape, " (the shape of logp)")
    work = working_dtype(dtype)
    s = np.exp(_mean_log_ratio(lp, old, m, work))                  # (N,)
    return cast_result("logp, old_logp", "sequence ratios", s, dtype)


# --- everything together --------------------------------------------------------------------

def _masked_mean(x, m):
    """Mean of ``x`` over the valid tokens, as a Python float (how TRL logs its metrics)."""
    return float(np.where(m, x, 0.0).sum() / m.sum())


def grpo_loss(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None, beta=0.04,
              kl="k3", agg="grpo", level="token"):
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
    kl          str              ``"k1"``, ``"k2"`` or ``"k3"`` (DeepSeekMath: k3)
    agg         str              ``"grpo"``, ``"bnpo"``, ``"dapo"`` or ``"dr_grpo"``
                                 (max_len is T)
    level       str              ``"token"`` or ``"sequence"`` (GSPO)
    ==========  ===============  ======================================================

    Returns:
        ``(loss, diagnostics)``: the scalar loss in the common dtype of the inputs, and a
        dict of Python floats, each a mean over the valid tokens as TRL logs them:
        ``clip_frac_low`` (A < 0 and r < 1 - eps_low: pushed down as far as allowed),
        ``clip_frac_high`` (A > 0 and r > 1 + eps_high), ``clip_frac`` (their sum),
        ``mean_ratio``, ``mean_kl`` (the KL estimate against ``ref_logp``; None without one)
        and ``approx_kl`` (k3 of KL(pi_old || pi_theta), CleanRL's early-stopping signal).

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
    lp, old, dtype = _logp_pair(logp, old_logp, ndim=2)
    m = as_mask("mask", mask, lp.shape, " (the shape of logp; nothing is broadcast)")
    a, a_dtype = _advantages(adv, lp.shape)
    eps_low, eps_high = _eps(eps_low, eps_high)
    beta = check_real("beta", beta, minimum=0.0)
    kl = check_choice("kl", kl, tuple(KL_ESTIMATORS))
    agg = check_choice("agg", agg, AGGREGATIONS)
    level = check_choice("level", level, LEVELS)
    dtypes = [dtype, a_dtype]
    if ref_logp is None:
        if beta != 0:
            raise ValueError(f"ref_logp: expected an (N, T) array of reference log-probs "
                             f"when beta = {beta} > 0, got None")
    else:
        ref, ref_dtype = as_float_array("ref_logp", ref_logp, shape_doc=_TOKENS_DOC)
        check_shape("ref_logp", ref, lp.shape, " (the shape of logp; nothing is broadcast)")
        dtypes.append(ref_dtype)
    out_dtype = common_dtype(*dtypes)
    work = working_dtype(out_dtype)
    w = aggregation_weights(m, agg)                                # (N, T), checks empty rows

    # The ratio: per token, or GSPO's per-sequence geometric mean given to all its tokens.
    if level == "token":
        log_ratio = _log_ratio(lp, old, work)                      # (N, T)
    else:
        log_ratio = _mean_log_ratio(lp, old, m, work)[:, None]     # (N, 1), broadcast over T
    adv_w = a.astype(work)                                         # (N, 1) or (N, T)
    pg_loss, ratio = _surrogate(log_ratio, adv_w, eps_low, eps_high, None)
    ratio = np.broadcast_to(ratio, lp.shape)                       # (N, T)

    if ref_logp is None:
        per_token_kl, mean_kl = 0.0, None
    else:
        per_token_kl = KL_ESTIMATORS[kl](lp.astype(work), ref.astype(work))   # (N, T)
        mean_kl = _masked_mean(per_token_kl, m)
    per_token_loss = pg_loss + beta * per_token_kl                 # (N, T)
    loss = cast_result("logp, old_logp, ref_logp, adv", "loss", (w * per_token_loss).sum(),
                       out_dtype)[()]

    # Diagnostics, as TRL's GRPOTrainer logs them (clip_ratio/low_mean, clip_ratio/high_mean).
    is_low_clipped = (ratio < 1 - eps_low) & (adv_w < 0)           # (N, T)
    is_high_clipped = (ratio > 1 + eps_high) & (adv_w > 0)         # (N, T)
    diagnostics = {
        "clip_frac_low": _masked_mean(is_low_clipped, m),
        "clip_frac_high": _masked_mean(is_high_clipped, m),
        "clip_frac": _masked_mean(is_low_clipped | is_high_clipped, m),
        "mean_ratio": _masked_mean(ratio, m),
        "mean_kl": mean_kl,
        # k3 with the roles swapped: ratio - 1 - log(ratio), samples from pi_old (CleanRL).
        "approx_kl": _masked_mean(kl_k3(old.astype(work), lp.astype(work), clamp=MAX_LOG_RATIO), m),
    }
    return loss, diagnostics
