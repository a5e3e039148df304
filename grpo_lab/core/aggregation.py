"""Loss aggregation: how per-token losses become one number, and the length bias it sets.

Taught in chapter 2 (``chapters/02_ppo_to_grpo.ipynb``).

Every aggregation is a weighted sum of the per-token losses; the modes (TRL's ``loss_type``
names ``grpo``, ``bnpo``, ``dapo``, ``dr_grpo``) differ only in the weights, which
:func:`aggregation_weights` returns so they can be looked at. The public functions check
their arguments once; :func:`aggregation_weights_math` is the weights on a mask already checked,
which :func:`aggregate_loss` and :func:`grpo_lab.grpo_loss` call.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.dtypes import cast_result, working_dtype
from grpo_lab.numerics.validate import (as_float_array, as_mask, check_choice, check_int,
                                        describe, scalar_text, valid_lengths)

__all__ = ["AGGREGATIONS", "aggregate_loss", "aggregation_weights", "aggregation_weights_math",
           "check_aggregate_loss_arguments", "check_aggregation_options",
           "check_aggregation_weights_arguments", "check_max_len"]

#: TRL's ``loss_type`` names. ``bnpo`` and ``dapo`` are the same on one batch; under gradient
#: accumulation they differ, even on one process (see :func:`aggregation_weights`).
AGGREGATIONS = ("grpo", "bnpo", "dapo", "dr_grpo")


def check_aggregation_options(mode, max_len, T):
    """``(mode, max_len)`` for a padded length ``T`` (backend-neutral): ``max_len`` is T by
    default and only ``dr_grpo`` takes it."""
    mode = check_choice("mode", mode, AGGREGATIONS)
    return mode, check_max_len(max_len, mode, T)


def check_max_len(max_len, mode, T):
    """``max_len`` for an aggregation ``mode`` already checked and a padded length ``T``: T by
    default under ``dr_grpo``, and None under every other mode."""
    if max_len is not None and mode != "dr_grpo":
        raise ValueError(f"max_len: expected None with mode {mode!r} (only 'dr_grpo' divides by "
                         f"it), got {scalar_text(max_len) if isinstance(max_len, int) else repr(max_len)}")
    if mode == "dr_grpo":
        max_len = T if max_len is None else check_int(
            "max_len", max_len, minimum=T, why=f" (at least T = {T}, the padded length)")
    return max_len


def check_aggregation_weights_arguments(mask, mode, max_len):
    """``(mask, lengths, mode, max_len)``: a 2-D bool mask (N, T) with a valid token in every
    row, the valid tokens per row (N,), and the options of :func:`check_aggregation_options`."""
    m = as_mask("mask", mask, None)                                   # any shape; 2-D below
    if m.ndim != 2:
        raise ValueError(f"mask: expected a 2-D (N, T) array of 0/1 or bools, got {describe(m)}")
    mode, max_len = check_aggregation_options(mode, max_len, m.shape[1])
    return m, valid_lengths(m), mode, max_len


def check_aggregate_loss_arguments(per_token_loss, mask, mode, max_len):
    """``(per_token_loss, mask, lengths, dtype, mode, max_len)``: the losses (N, T) in float64,
    a same-shape bool mask with a valid token in every row, the valid tokens per row, the
    result's dtype and the options of :func:`check_aggregation_options`."""
    lt, dtype = as_float_array("per_token_loss", per_token_loss, ndim=2,
                               shape_doc=" of shape (N, T)")
    m = as_mask("mask", mask, lt.shape, " (the shape of per_token_loss; nothing is broadcast)")
    mode, max_len = check_aggregation_options(mode, max_len, lt.shape[1])
    return lt.astype(working_dtype(dtype)), m, valid_lengths(m), dtype, mode, max_len


def aggregation_weights(mask, mode, *, max_len=None):
    r"""The weight each token's loss gets in :func:`aggregate_loss`, as an (N, T) array.

    Every aggregation is a weighted sum :math:`\sum_{i,t} w_{i,t}\, \ell_{i,t}`; the modes
    differ only in the weights, and so in how much a token of a short or a long completion
    counts. With :math:`m_{i,t}` the mask, :math:`L_i = \sum_t m_{i,t}` and N sequences:

    ===========  ====================================  ========================================
    mode         :math:`w_{i,t}` (for a valid token)   who uses it
    ===========  ====================================  ========================================
    ``grpo``     :math:`1 / (N L_i)`                   DeepSeekMath eq. 3: mean over each
                                                       sequence, then over sequences
    ``bnpo``     :math:`1 / \sum_j L_j`                TRL: every token of the micro-batch
                                                       equal
    ``dapo``     :math:`1 / \sum_j L_j`                DAPO (Yu et al. 2025); in TRL the
                                                       count is the generation batch's, over
                                                       all processes
    ``dr_grpo``  :math:`1 / (N \cdot \text{max\_len})`  Dr. GRPO (Liu et al. 2025): a constant
    ===========  ====================================  ========================================

    Under ``grpo`` a token of a 10-token answer weighs 10 times one of a 100-token answer, so
    a wrong long answer is punished less per token, and length drifts upwards (Dr. GRPO's
    length bias). ``dapo`` and ``dr_grpo`` weigh every token the same within a batch;
    ``dr_grpo`` also keeps the same scale across batches.

    On one batch ``bnpo`` and ``dapo`` are the same weights. Under gradient accumulation they
    are not, even on one process: TRL 1.16.0's ``bnpo`` divides each micro-batch by its *own*
    token count, then by the accumulation steps (``grpo_trainer.py:3158-3162``), so a token of a
    micro-batch with few tokens weighs more (:func:`grpo_lab.hf.micro_mean_weights`), while its
    ``dapo`` divides every micro-batch by the whole generation batch's count
    (``num_items_in_batch``, ``grpo_trainer.py:3168-3174``; :func:`grpo_lab.hf.micro_weights`),
    which is this function's weight on the whole batch. Both are proven against TRL's trainer
    in ``tests/hf/test_trl_matrix.py``.

    ``max_len`` (``dr_grpo`` only) is TRL's ``max_completion_length``; it defaults to T, the
    padded length, and must be at least T. Padded tokens get weight 0.

    >>> import grpo_lab as gl
    >>> gl.aggregation_weights([[1, 1, 0, 0], [1, 1, 1, 1]], "grpo")   # short answer: 1/4 a token
    array([[0.25 , 0.25 , 0.   , 0.   ],
           [0.125, 0.125, 0.125, 0.125]])
    >>> gl.aggregation_weights([[1, 1, 0, 0], [1, 1, 1, 1]], "dapo").round(4)  # 1/6 each
    array([[0.1667, 0.1667, 0.    , 0.    ],
           [0.1667, 0.1667, 0.1667, 0.1667]])
    >>> gl.aggregation_weights([[1, 1, 0, 0], [1, 1, 1, 1]], "dr_grpo")  # 1/(2*4) each
    array([[0.125, 0.125, 0.   , 0.   ],
           [0.125, 0.125, 0.125, 0.125]])
    """
    m, lengths, mode, max_len = check_aggregation_weights_arguments(mask, mode, max_len)
    return aggregation_weights_math(m, lengths, mode, max_len)


def aggregation_weights_math(m, lengths, mode, max_len=None):
    """:func:`aggregation_weights` on checked values: a 2-D bool mask (N, T), its valid tokens
    per row (N,) (none 0), ``mode`` one of :data:`AGGREGATIONS` and ``max_len`` (dr_grpo's)."""
    N, T = m.shape                                                 # lengths: (N,) L_i
    if mode == "grpo":
        per_token = 1.0 / (N * lengths[:, None])                   # (N, 1) 1 / (N L_i)
    elif mode in ("bnpo", "dapo"):
        per_token = 1.0 / lengths.sum()                            # 1 / sum_j L_j
    else:  # dr_grpo
        per_token = 1.0 / (N * max_len)                            # a constant
    return np.where(m, per_token, 0.0)                             # (N, T), 0 on padding


def aggregate_loss(per_token_loss, mask, mode, *, max_len=None):
    r"""Reduce per-token losses to one scalar with TRL's ``loss_type`` rules.

    .. math::

        \text{grpo: } \frac1N \sum_i \frac{1}{L_i}\sum_t m_{i,t}\ell_{i,t} \qquad
        \text{bnpo, dapo: } \frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{\sum_{i,t} m_{i,t}} \qquad
        \text{dr\_grpo: } \frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{N \cdot \text{max\_len}}

    ===============  ========  =====================================================
    Symbol           Shape     Meaning
    ===============  ========  =====================================================
    per_token_loss   (N, T)    e.g. from :func:`clipped_surrogate_loss`
    mask             (N, T)    1 for a completion's tokens, 0 for padding; every row
                               needs a valid token
    mode             str       ``"grpo"``, ``"bnpo"``, ``"dapo"`` or ``"dr_grpo"``
    max_len          int       ``dr_grpo`` only: the constant divisor, default T
    return           scalar    the loss, in the dtype of ``per_token_loss``
    ===============  ========  =====================================================

    The weights are those of :func:`aggregation_weights`; the sum runs in float64. Padded
    positions must still hold finite numbers (they are multiplied by 0, and NaN * 0 is NaN).

    Example: one 1-token answer with loss 1 and one 3-token answer with loss 0 per token.

    >>> import grpo_lab as gl
    >>> loss, mask = [[1.0, 0, 0], [0, 0, 0]], [[1, 0, 0], [1, 1, 1]]
    >>> [float(gl.aggregate_loss(loss, mask, m)) for m in ("grpo", "dapo", "dr_grpo")]
    [0.5, 0.25, 0.16666666666666666]
    """
    lt, m, lengths, dtype, mode, max_len = check_aggregate_loss_arguments(
        per_token_loss, mask, mode, max_len)                       # (N, T) float64, bool, (N,)
    w = aggregation_weights_math(m, lengths, mode, max_len)        # (N, T), each w <= 1
    return cast_result("per_token_loss", "aggregated loss", (w * lt).sum(), dtype)[()]
