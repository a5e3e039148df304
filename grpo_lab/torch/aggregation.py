r"""Loss aggregation on tensors: the weights and reductions of :mod:`grpo_lab.core.aggregation`.

Taught in chapter 2 (the NumPy reference). Every mode weighs each token of row i by one
number, so the reduction is a row sum followed by a weighted sum over rows: no (N, T) tensor of
weights is made, which matters on the loss's hot path (:func:`grpo_lab.torch.grpo_loss`).
"""

from __future__ import annotations

import torch

from grpo_lab.core.aggregation import AGGREGATIONS, check_aggregation_options
from grpo_lab.numerics.validate import (as_float_array, as_mask, cast_result, check_int,
                                        check_real, describe, same_device, valid_lengths,
                                        working_dtype)

__all__ = ["AGGREGATIONS", "aggregate", "aggregate_loss", "aggregation_weights",
           "check_aggregate_loss_arguments", "check_aggregation_weights_arguments",
           "check_masked_normalize_arguments", "masked_normalize", "row_weights"]


def check_aggregation_weights_arguments(mask, mode, max_len, dtype=torch.float64):
    """``(mask, lengths, mode, max_len)``: a 2-D (N, T) mask as 0.0 / 1.0 in ``dtype`` with a
    valid token in every row, the valid tokens per row, and the checked options."""
    m = as_mask("mask", mask, getattr(mask, "shape", ()), backend="torch", dtype=dtype)
    if m.dim() != 2:
        raise ValueError(f"mask: expected a 2-D (N, T) tensor of 0/1 or bools, got {describe(m)}")
    mode, max_len = check_aggregation_options(mode, max_len, m.shape[1])
    return m, valid_lengths(m), mode, max_len


def check_aggregate_loss_arguments(per_token_loss, mask, mode, max_len):
    """``(per_token_loss, mask, lengths, dtype, mode, max_len)``: the losses (N, T) and the mask
    in the working dtype, the valid tokens per row, the result's dtype, the options."""
    lt, dtype = as_float_array("per_token_loss", per_token_loss, ndim=2,
                               shape_doc=" of shape (N, T)", backend="torch")
    work = working_dtype(dtype)
    m = as_mask("mask", mask, lt.shape, " (the shape of per_token_loss; nothing is broadcast)",
                backend="torch", dtype=work)
    same_device("per_token_loss", lt, mask=m)
    mode, max_len = check_aggregation_options(mode, max_len, lt.shape[1])
    return lt.to(work), m, valid_lengths(m), dtype, mode, max_len


def row_weights(lengths, mode, max_len):
    r"""The weight of each valid token of row i, one number per row: (N,) or a 0-d tensor.

    ``grpo``: :math:`1/(N L_i)`; ``bnpo``, ``dapo``: :math:`1/\sum_j L_j`; ``dr_grpo``:
    :math:`1/(N\,\text{max\_len})` (see :func:`grpo_lab.aggregation_weights`).

    >>> import torch, grpo_lab.torch as glt
    >>> lengths = torch.tensor([2.0, 4.0])                       # L_i, N = 2
    >>> glt.row_weights(lengths, "grpo", max_len=4), glt.row_weights(lengths, "dapo", max_len=4)
    (tensor([0.2500, 0.1250]), tensor(0.1667))
    """
    N = lengths.shape[0]
    if mode == "grpo":
        return 1.0 / (N * lengths)                                  # (N,)
    if mode in ("bnpo", "dapo"):
        return 1.0 / lengths.sum()                                  # ()
    return torch.full((), 1.0 / (N * max_len), dtype=lengths.dtype, device=lengths.device)


def aggregate(per_token_loss, m, w):
    r""":math:`\sum_i w_i \sum_t m_{i,t}\,\ell_{i,t}`: row sums first, then one weight per row.

    ``per_token_loss`` (N, T) or (N, 1) (one loss per sequence, GSPO), ``m`` the (N, T) mask
    as 0.0 / 1.0 in the loss's dtype, ``w`` from :func:`row_weights`. Checked tensors only.

    A row sum can pass the float range where the weighted sum does not (2048 tokens of 1.5e308
    in float64, of 3e38 in float32, each weighed 1 / (N L_i)): then, and only then, the sum is
    redone with every token weighed first, as the NumPy reference always does, so the loss
    comes out whenever it fits. The usual case costs one look at a 0-d tensor.
    """
    if per_token_loss.shape[-1] == 1 and m.shape[-1] > 1:         # (N, 1): L_i equal tokens
        return (per_token_loss[:, 0] * (m.sum(-1) * w)).sum()      # L_i w_i <= 1 first
    loss = ((per_token_loss * m).sum(-1) * w).sum()                 # (N, T) -> (N,) -> ()
    if bool(torch.isfinite(loss)):
        return loss
    weights = m * (w[:, None] if w.dim() else w)                    # (N, T), each <= 1
    return (per_token_loss * weights).sum()                         # weighed first: no overflow


def aggregation_weights(mask, mode, *, max_len=None):
    r"""The weight of each token's loss in :func:`aggregate_loss`, an (N, T) float64 tensor.

    ``grpo``: :math:`1/(N L_i)`; ``bnpo``, ``dapo``: :math:`1/\sum_j L_j`; ``dr_grpo``:
    :math:`1/(N\,\text{max\_len})`, ``max_len`` defaulting to T. Padding gets 0.
    """
    m, lengths, mode, max_len = check_aggregation_weights_arguments(mask, mode, max_len)
    w = row_weights(lengths, mode, max_len=max_len)               # (N,) or ()
    return m * (w[:, None] if w.dim() else w)                     # (N, T), 0 on padding


def aggregate_loss(per_token_loss, mask, mode, *, max_len=None):
    r"""Reduce per-token losses (N, T) to one scalar by TRL's ``loss_type`` rules.

    See :func:`grpo_lab.aggregate_loss`. Returns a 0-d tensor in the dtype of
    ``per_token_loss`` (worked in float32, or float64 for float64); padded positions must hold
    finite numbers.

    ``dr_grpo`` keeps its check ``max_len >= T``: ``max_len`` is the generation budget, TRL's
    ``max_completion_length`` (``trl/trainer/grpo_trainer.py:3164`` @ trl 1.16.0 divides by
    ``per_token_loss.size(0) * self.max_completion_length``), and no completion is longer
    than the budget, so a padded length T above it means the wrong budget was passed: each
    row's weights would then sum past 1/N and the loss stop being Dr. GRPO's. A free
    constant, with no claim to be a budget, is :func:`masked_normalize`.

    >>> import torch, grpo_lab.torch as glt
    >>> loss, mask = torch.tensor([[1.0, 0, 0], [0, 0, 0]]), torch.tensor([[1, 0, 0], [1, 1, 1]])
    >>> [round(glt.aggregate_loss(loss, mask, m).item(), 4) for m in ("grpo", "dapo", "dr_grpo")]
    [0.5, 0.25, 0.1667]
    """
    lt, m, lengths, dtype, mode, max_len = check_aggregate_loss_arguments(
        per_token_loss, mask, mode, max_len)                      # (N, T), (N, T), (N,)
    loss = aggregate(lt, m, row_weights(lengths, mode, max_len=max_len))
    return cast_result("per_token_loss", "aggregated loss", loss, dtype)


# --- a masked sum over a constant (CS336's masked_normalize) ----------------------------------

def check_masked_normalize_arguments(x, mask, normalize_constant, dim):
    """``(x, mask, c, dim, dtype)`` for :func:`masked_normalize`: ``x`` in the working dtype, the
    mask as bools of its shape on its device, a finite constant > 0, ``dim`` None or an axis."""
    xt, dtype = as_float_array("x", x, backend="torch")
    m = as_mask("mask", mask, xt.shape, " (the shape of x; nothing is broadcast)",
                backend="torch")
    same_device("x", xt, mask=m)
    c = check_real("normalize_constant", normalize_constant, minimum=0.0, allow_equal=False)
    if dim is not None:
        dim = check_int("dim", dim, minimum=-max(xt.dim(), 1), maximum=max(xt.dim(), 1) - 1,
                        why=f", an axis of x ({describe(xt)}), or None for every entry")
    return xt.to(working_dtype(dtype)), m, c, dim, dtype


def masked_normalize(x, mask, normalize_constant, dim=None):
    r"""The masked sum of ``x`` divided by a constant: :math:`\frac{1}{c}\sum_t m_t x_t`, over
    ``dim`` (every entry for None).

    Stanford CS336's ``masked_normalize``, which its SFT micro-batch step uses to sum a
    sequence's token losses and divide by a constant of the caller's choosing (a token budget,
    a batch size, gradient-accumulation steps). It is the Dr. GRPO aggregation with the
    constant made free: ``aggregate_loss(l, m, "dr_grpo", max_len=L)`` is
    ``masked_normalize(l, m, N * L)``. Here the constant may be **any** positive number, and a
    row with no valid token sums to 0 (0 / c is 0: a masked sum has a value where a masked
    mean has none, see :func:`grpo_lab.masked_mean`).

    ==================  ======  ====================================================
    Symbol              Shape   Meaning
    ==================  ======  ====================================================
    x                   any     the values (finite, padding included), autograd kept
    mask                x's     1 / True where an entry counts (0/1 or bools)
    normalize_constant  scalar  c, a finite number > 0
    dim                 int     the axis to sum over, or None for every entry
    return              x's without ``dim`` (a 0-d tensor for None), in x's dtype
    ==================  ======  ====================================================

    The sum is taken in float32 (float64 for float64) and divided by ``c`` in float64, so a
    constant of 1e-300 or 1e300 does not round to 0 or inf in float32; a result that does not
    fit ``x``'s dtype is a ``ValueError`` naming ``x`` and ``normalize_constant``.

    >>> import torch, grpo_lab.torch as glt
    >>> x, mask = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    >>> glt.masked_normalize(x, mask, 2.0), glt.masked_normalize(x, mask, 2.0, dim=-1)
    (tensor(3.5000), tensor([1.5000, 2.0000]))
    >>> glt.masked_normalize(x, torch.zeros(2, 3), 4.0, dim=1)      # empty rows: 0, not NaN
    tensor([0., 0.])
    """
    xt, m, c, dim, dtype = check_masked_normalize_arguments(x, mask, normalize_constant, dim)
    kept = torch.where(m, xt, torch.zeros((), dtype=xt.dtype, device=xt.device))   # padding: 0
    total = kept.sum() if dim is None else kept.sum(dim)                            # () or x's - dim
    if not bool(torch.isfinite(total).all()):                    # a sum past the range: rescale
        k = int(torch.frexp(kept.abs().max())[1])                # max |x| = m 2**k, 0.5 <= m < 1
        small = torch.ldexp(kept, torch.tensor(-k, device=xt.device))
        total = (small.sum() if dim is None else small.sum(dim)).to(torch.float64)
        return cast_result("x, normalize_constant", "normalized sums",
                           torch.ldexp(total / c, torch.tensor(k, device=xt.device)), dtype)
    return cast_result("x, normalize_constant", "normalized sums", total.to(torch.float64) / c,
                       dtype)
