r"""PPO's clipped surrogate, its gradient, and GSPO's sequence-level ratio.

Taught in chapter 2 (``chapters/02_ppo_to_grpo.ipynb``); chapter 7 derives the gradient.

* :func:`surrogate_from_ratio`: the clipped objective term by term, from the ratio (CleanRL's
  ``pg_loss1``, ``pg_loss2``, ``max``), with DAPO's clip-higher and the dual-clip bound;
* :func:`clipped_surrogate_loss`: the same from ``logp`` and ``old_logp``, checked and in the
  inputs' dtype (Schulman et al. 2017, eq. 7);
* :func:`surrogate_grad_logp`: its derivative with respect to ``logp``, token by token;
* :func:`sequence_ratio`: GSPO's length-normalised sequence ratio (Zheng et al. 2025).

The ratio ``exp(logp - old_logp)`` is computed from a log-ratio clamped to
``[-MAX_LOG_RATIO, MAX_LOG_RATIO]`` in float64 (:func:`grpo_lab.log_ratio`), as verl does
(``compute_policy_loss`` in ``verl/trainer/ppo/core_algos.py`` clamps it to [-20, 20]).

Each public function checks its arguments in one ``check_*_arguments`` call and then runs the
math. :func:`surrogate_from_ratio_math` and :func:`sequence_ratio_math` are that math on values
already checked: :func:`grpo_lab.grpo_loss` composes them without checking anything again.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.dtypes import all_finite, cast_result, common_dtype, working_dtype
from grpo_lab.numerics.logspace import log_ratio_math
from grpo_lab.numerics.stable import masked_mean_math
from grpo_lab.numerics.validate import (as_float_array, as_mask, check_block_input, check_real,
                                        check_shape, describe, valid_lengths)

__all__ = ["LEVELS", "MAX_LOG_RATIO", "check_adv_shape", "check_advantages", "check_clip_range",
           "check_clipped_surrogate_arguments", "check_logp_pair", "check_sequence_ratio_arguments",
           "check_surrogate_from_ratio_arguments", "check_surrogate_options",
           "clipped_surrogate_loss", "sequence_ratio", "sequence_ratio_math",
           "surrogate_from_ratio", "surrogate_from_ratio_math", "surrogate_grad_logp"]

#: Largest |logp - old_logp| used in a ratio: e^20 is 4.9e8, far outside any clip range.
MAX_LOG_RATIO = 20.0

#: ``"token"``: one ratio per token (PPO, GRPO, DAPO); ``"sequence"``: GSPO's one per sequence.
LEVELS = ("token", "sequence")

_TOKENS_DOC = " of per-token log-probs, shape (N, T)"


# --- argument checks (the options are backend-neutral: the torch mirror calls them too) ------

def check_clip_range(eps_low, eps_high):
    """``(eps_low, eps_high)`` as floats; ``eps_high`` None means ``eps_low`` (symmetric PPO)."""
    eps_low = check_real("eps_low", eps_low, minimum=0.0, maximum=1.0)
    eps_high = eps_low if eps_high is None else check_real("eps_high", eps_high, minimum=0.0)
    return eps_low, eps_high


def check_surrogate_options(eps_low, eps_high, dual_clip):
    """``(eps_low, eps_high, dual_clip)`` as floats (``dual_clip`` None or c > 1)."""
    eps_low, eps_high = check_clip_range(eps_low, eps_high)
    if dual_clip is not None:
        dual_clip = check_real("dual_clip", dual_clip, minimum=1.0, allow_equal=False)
    return eps_low, eps_high, dual_clip


def check_adv_shape(adv_shape, shape, got: str) -> bool:
    """True for one advantage per sequence (``shape[:-1]``), False for one per token (``shape``).

    ``got`` describes the advantages for the message. A per-sequence ``adv`` must then be given
    its token axis explicitly (``adv[..., None]``): NumPy's and torch's broadcasting would
    align an (N,) array with the *last* axis, the tokens, and for N == T silently so.
    """
    if tuple(adv_shape) == tuple(shape):
        return False
    if tuple(adv_shape) == tuple(shape[:-1]):
        return True
    raise ValueError(f"adv: expected shape {tuple(shape[:-1])} (one advantage per sequence) or "
                     f"{tuple(shape)} (one per token), got {got}")


def check_logp_pair(logp, old_logp, *, ndim=None):
    """``(logp, old_logp, dtype)``: two same-shape finite arrays (as given) and their dtype."""
    lp, lp_dtype = as_float_array("logp", logp, ndim=ndim, shape_doc=_TOKENS_DOC)
    if lp.ndim == 0:
        raise ValueError(f"logp: expected an array with at least 1 dimension (T tokens), "
                         f"got {describe(lp)}")
    old, old_dtype = as_float_array("old_logp", old_logp, shape_doc=_TOKENS_DOC)
    check_shape("old_logp", old, lp.shape, " (the shape of logp; nothing is broadcast)")
    return lp, old, common_dtype(lp_dtype, old_dtype)


def check_advantages(adv, shape):
    """``(adv, dtype)``: adv (N,) or (N, T), returned as (N, 1) or (N, T) (not cast)."""
    a, a_dtype = as_float_array("adv", adv, min_size=0)
    return (a[..., None] if check_adv_shape(a.shape, shape, describe(a)) else a), a_dtype


def check_clipped_surrogate_arguments(logp, old_logp, adv, eps_low, eps_high, dual_clip):
    """Everything :func:`clipped_surrogate_loss` and :func:`surrogate_grad_logp` take, checked.

    Returns ``(logp, old_logp, adv, dtype, eps_low, eps_high, dual_clip)``: the arrays in
    float64 (adv with its token axis, (N, 1) or (N, T)), and the result's dtype.
    """
    lp, old, dtype = check_logp_pair(logp, old_logp)
    a, a_dtype = check_advantages(adv, lp.shape)
    eps_low, eps_high, dual_clip = check_surrogate_options(eps_low, eps_high, dual_clip)
    out_dtype = common_dtype(dtype, a_dtype)
    work = working_dtype(out_dtype)
    return (lp.astype(work), old.astype(work), a.astype(work), out_dtype,
            eps_low, eps_high, dual_clip)


def check_sequence_ratio_arguments(logp, old_logp, mask):
    """``(logp, old_logp, mask, dtype)``: (N, T) arrays in float64, a bool mask with a valid
    token in every row, and the result's dtype."""
    lp, old, dtype = check_logp_pair(logp, old_logp, ndim=2)
    m = as_mask("mask", mask, lp.shape, " (the shape of logp)")
    valid_lengths(m)                                               # every row has a token
    work = working_dtype(dtype)
    return lp.astype(work), old.astype(work), m, dtype


def check_surrogate_from_ratio_arguments(ratio, adv, eps_low, eps_high, dual_clip):
    """``(ratio, adv, eps_low, eps_high, dual_clip)`` for :func:`surrogate_from_ratio`: two real
    arrays of one rank whose shapes broadcast (checked in O(1): a building block's check)."""
    r, _ = check_block_input("ratio", ratio)
    a, _ = check_block_input("adv", adv)
    if a.ndim != r.ndim or any(p != q and 1 not in (p, q) for p, q in zip(r.shape, a.shape)):
        raise ValueError(f"adv: expected an array of ratio's rank, {r.ndim}, that broadcasts with "
                         f"its shape {r.shape} ((N, 1) per sequence or (N, T) per token), "
                         f"got {describe(a)}")
    return (r, a) + check_surrogate_options(eps_low, eps_high, dual_clip)


# --- the clipped surrogate --------------------------------------------------------------------

def surrogate_from_ratio(ratio, adv, *, eps_low=0.2, eps_high=None, dual_clip=None):
    r"""The clipped surrogate from the ratio, term by term with the paper's names (CleanRL).

    .. math::

        \ell_t = \max\big(\underbrace{-A_t r_t}_{\texttt{pg\_loss1}},\
                 \underbrace{-A_t \operatorname{clip}(r_t, 1-\varepsilon_{low},
                 1+\varepsilon_{high})}_{\texttt{pg\_loss2}}\big)
               = -\min\big(r_t A_t,\ \operatorname{clip}(r_t, \dots) A_t\big)

    and with dual-clip, for :math:`A_t < 0` also :math:`\ell_t \le -c A_t` (``pg_loss3``).

    ==========  =================  ================================================
    Symbol      Shape              Meaning
    ==========  =================  ================================================
    ratio       (N, T) or (N, 1)   pi_theta / pi_old per token, or one per sequence
    adv         (N, T) or (N, 1)   advantage per token, or one per sequence
    eps_low     scalar             lower clip in [0, 1] (0.2)
    eps_high    scalar             upper clip; None means eps_low (DAPO: 0.28)
    dual_clip   scalar             None, or c > 1 (verl's clip_ratio_c; 3 is common)
    return      (N, T)             per-token loss, in the dtype given (float64)
    ==========  =================  ================================================

    ``ratio`` and ``adv`` have the same rank and broadcast together (give a per-sequence
    value its token axis, ``adv[:, None]``). Use :func:`clipped_surrogate_loss` to start from
    log-probs.

    >>> import numpy as np, grpo_lab as gl
    >>> gl.surrogate_from_ratio(np.array([[1.0, 1.5, 0.5, 5.0]]), np.array([[1.0, 1.0, -1.0, -1.0]]))
    array([[-1. , -1.2,  0.8,  5. ]])
    """
    ratio, adv, eps_low, eps_high, dual_clip = check_surrogate_from_ratio_arguments(
        ratio, adv, eps_low, eps_high, dual_clip)
    pg_loss = surrogate_from_ratio_math(ratio, adv, eps_low, eps_high, dual_clip)
    if not all_finite(pg_loss) and all_finite(ratio) and all_finite(adv):
        where = tuple(np.argwhere(~np.isfinite(pg_loss))[0].tolist())
        raise ValueError(f"ratio, adv: expected a per-token loss -A r within float64's range, "
                         f"got {pg_loss[where]} at index {where} (|A| r past 1.8e308); the "
                         f"advantages are far too large, or pass dual_clip=... to bound it")
    return pg_loss


def surrogate_from_ratio_math(ratio, adv, eps_low, eps_high, dual_clip=None):
    """:func:`surrogate_from_ratio` on checked values: float arrays ``ratio`` and ``adv`` that
    broadcast, floats ``eps_low``, ``eps_high`` and ``dual_clip`` (None or c > 1).

    A term past float64's range is inf, quietly (an A of -1e300 with a ratio of e^20): the
    callers refuse it by name.
    """
    with np.errstate(over="ignore"):                              # |A| r past float64: inf
        pg_loss1 = -adv * ratio                                   # unclipped: -r A
        pg_loss2 = -adv * np.clip(ratio, 1 - eps_low, 1 + eps_high)   # clipped: -clip(r) A
        pg_loss = np.maximum(pg_loss1, pg_loss2)                  # = -min(r A, clip(r) A)
        if dual_clip is not None:
            # Dual-clip (Ye et al. 2020): for A < 0 the objective is also bounded below by
            # c A, so a token whose ratio has run far above 1 cannot dominate the batch.
            pg_loss3 = -adv * dual_clip                           # (N, 1) or (N, T)
            pg_loss = np.where(adv < 0, np.minimum(pg_loss, pg_loss3), pg_loss)
    return pg_loss


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
    lp, old, adv, dtype, eps_low, eps_high, dual_clip = check_clipped_surrogate_arguments(
        logp, old_logp, adv, eps_low, eps_high, dual_clip)
    ratio = np.exp(log_ratio_math(lp, old, MAX_LOG_RATIO))        # (N, T) pi_theta / pi_old
    pg_loss = surrogate_from_ratio_math(ratio, adv, eps_low, eps_high, dual_clip)   # (N, T)
    return cast_result("logp, old_logp, adv", "per-token losses", pg_loss, dtype)


def surrogate_grad_logp(logp, old_logp, adv, *, eps_low=0.2, eps_high=None, dual_clip=None):
    r"""``d loss / d logp`` of :func:`clipped_surrogate_loss`, token by token.

    .. math::

        \frac{\partial \ell_t}{\partial \log\pi_\theta(y_t)} =
        \begin{cases} -A_t r_t & \text{where the unclipped term } -r_t A_t \text{ is the loss}\\
                      0 & \text{where a clip (or dual-clip, or the log-ratio clamp) holds}
        \end{cases}

    since :math:`\partial r_t / \partial \log\pi_\theta = r_t`. This is what the fused loss
    of chapter 7 writes in its forward pass, and what a hand-written training loop multiplies
    by each token's aggregation weight (``gl.hidden_string``). Same arguments, shapes and
    dtypes as :func:`clipped_surrogate_loss`.

    >>> import numpy as np, grpo_lab as gl
    >>> logp, old = np.log([[1.0, 1.5, 0.5, 0.9]]), np.zeros((1, 4))
    >>> gl.surrogate_grad_logp(logp, old, [[1.0, 1.0, -1.0, -1.0]])   # 1.5, 0.5: clipped
    array([[-1. ,  0. ,  0. ,  0.9]])
    """
    lp, old, adv, dtype, eps_low, eps_high, dual_clip = check_clipped_surrogate_arguments(
        logp, old_logp, adv, eps_low, eps_high, dual_clip)
    d = log_ratio_math(lp, old)                                   # (N, T), not clamped
    ratio = np.exp(np.clip(d, -MAX_LOG_RATIO, MAX_LOG_RATIO))     # (N, T) as in the loss
    held = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    if dual_clip is not None:
        held |= (adv < 0) & (ratio > dual_clip)                   # the loss is -c A there
    held |= np.abs(d) > MAX_LOG_RATIO                             # the clamp holds: constant
    with np.errstate(over="ignore"):                              # refused by name just below
        grad = np.where(held, 0.0, -adv * ratio)                  # (N, T) d(-r A)/d logp = -r A
    return cast_result("logp, old_logp, adv", "gradients", grad, dtype)


# --- GSPO's sequence-level ratio ---------------------------------------------------------------

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
    lp, old, m, dtype = check_sequence_ratio_arguments(logp, old_logp, mask)   # (N, T) each
    return cast_result("logp, old_logp", "sequence ratios", sequence_ratio_math(lp, old, m), dtype)


def sequence_ratio_math(logp, old_logp, mask):
    """:func:`sequence_ratio` on checked values: (N, T) float arrays and a bool mask with a
    valid token in every row; returns s_i (N,) in their dtype."""
    mean_log_ratio = masked_mean_math(log_ratio_math(logp, old_logp), mask, axis=-1)  # (N,)
    return np.exp(np.clip(mean_log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO))   # (N,) s_i
