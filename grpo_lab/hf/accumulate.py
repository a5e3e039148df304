r"""Micro-batches and gradient accumulation, normalised so the gradient is the full batch's.

Taught in chapter 6b, section "Micro-batches and gradient accumulation"
(``chapters/06b_real_model.ipynb``).

A batch too large for memory is cut into K micro-batches; each gets its own forward and
backward, the gradients add up in ``.grad``, and one optimizer step follows. The gradient
equals the full batch's only if each micro-batch's loss is weighted by its share of the
full batch's normaliser. For a token-mean loss (``agg="dapo"`` or ``"bnpo"``):

.. math::

    \mathcal L = \frac{\sum_{i,t} m_{i,t}\,\ell_{i,t}}{\sum_{i,t} m_{i,t}}
    = \sum_{k=1}^{K} \underbrace{\frac{n_k}{n}}_{\text{weight}}
      \underbrace{\frac{\sum_{(i,t) \in k} m_{i,t}\,\ell_{i,t}}{n_k}}_{\text{micro-batch loss}},
    \qquad n_k = \sum_{(i,t) \in k} m_{i,t},\quad n = \sum_k n_k

The bug is the weight 1/K (what a generic trainer divides by, ``gradient_accumulation_steps``):
it gives each micro-batch the same say whatever its token count, so the tokens of a micro-batch
of short completions count more than those of one of long completions, and the gradient
changes with the micro-batch size. TRL's ``"dapo"`` divides by ``num_items_in_batch``, the
token count of the whole generation batch (``GRPOTrainer._compute_loss``); verl's
``token-mean`` divides by the global token count of the mini-batch. For a sequence-mean loss
(``agg="grpo"``, ``"dr_grpo"``) the share is of rows instead: :math:`N_k / N`.
"""

from __future__ import annotations

import torch

from grpo_lab.hf.checks import check_slices
from grpo_lab.numerics.validate import as_mask, check_choice, check_int, check_real, describe

__all__ = ["MICRO_WEIGHTS", "accumulate", "accumulate_math", "check_accumulate_arguments",
           "micro_batches", "micro_mean_weights", "micro_weights", "micro_weights_math"]

#: How each aggregation's normaliser splits over micro-batches: by tokens or by rows.
MICRO_WEIGHTS = {"dapo": "tokens", "bnpo": "tokens", "grpo": "rows", "dr_grpo": "rows"}


def micro_batches(n_rows: int, micro_size: int) -> list[slice]:
    """The row slices of consecutive micro-batches of ``micro_size`` rows (the last may be
    smaller).

    >>> import grpo_lab.hf as glh
    >>> glh.micro_batches(5, 2)
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    n_rows = check_int("n_rows", n_rows, minimum=1)
    micro_size = check_int("micro_size", micro_size, minimum=1)
    return [slice(s, min(s + micro_size, n_rows)) for s in range(0, n_rows, micro_size)]


def micro_weights(mask, slices, agg: str = "dapo") -> list[float]:
    r"""Each micro-batch's share of the full batch's normaliser: :math:`n_k / n` (tokens) for
    ``"dapo"`` / ``"bnpo"``, :math:`N_k / N` (rows) for ``"grpo"`` / ``"dr_grpo"``.

    ==========  ========  ===========================================================
    Symbol      Shape     Meaning
    ==========  ========  ===========================================================
    mask        (N, T)    the completion mask of the *full* batch
    slices      K slices  from :func:`micro_batches`: contiguous ``slice(start, stop)``
                          (``slice(2, None)`` reads to N) covering the N rows once
    agg         str       the loss's aggregation (``glt.grpo_loss(agg=...)``)
    return      K floats  the weights, summing to 1
    ==========  ========  ===========================================================

    >>> import torch, grpo_lab.hf as glh
    >>> mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    >>> glh.micro_weights(mask, glh.micro_batches(4, 2))          # 5 and 4 of 9 tokens
    [0.5555555555555556, 0.4444444444444444]
    >>> glh.micro_weights(mask, glh.micro_batches(4, 2), agg="grpo")
    [0.5, 0.5]
    """
    m = as_mask("mask", mask, None, backend="torch")
    if m.dim() != 2:
        raise ValueError(f"mask: expected a 2-D completion mask (N, T), got {describe(m)}")
    agg = check_choice("agg", agg, tuple(MICRO_WEIGHTS))
    slices = check_slices("slices", slices, m.shape[0])
    if MICRO_WEIGHTS[agg] == "tokens" and not bool(m.any()):
        raise ValueError("mask: expected at least one completion token in the batch, got none")
    return micro_weights_math(m, slices, agg)


def micro_weights_math(m, slices, agg):
    """:func:`micro_weights` on a checked bool mask and contiguous slices covering its rows."""
    if MICRO_WEIGHTS[agg] == "rows":
        return [(s.stop - s.start) / m.shape[0] for s in slices]           # N_k / N
    n = float(m.sum())
    return [float(m[s].sum()) / n for s in slices]                          # n_k / n


def micro_mean_weights(slices) -> list[float]:
    """The bug, for a token-mean loss: 1/K for each of K micro-batches, whatever their tokens.

    >>> import grpo_lab.hf as glh
    >>> glh.micro_mean_weights(glh.micro_batches(4, 2))
    [0.5, 0.5]
    """
    slices = check_slices("slices", slices)
    return [1.0 / len(slices)] * len(slices)


def accumulate(loss_of, slices, weights) -> float:
    r"""Forward and backward each micro-batch, its loss times its weight; the gradients add up.

    .. math::  \nabla \mathcal L = \sum_k w_k \nabla \mathcal L_k

    =========  =========  ===========================================================
    Argument   Type       Meaning
    =========  =========  ===========================================================
    loss_of    callable   ``loss_of(rows) -> 0-d tensor``: the loss of micro-batch
                          ``rows`` (a slice), aggregated over that micro-batch alone
    slices     K slices   from :func:`micro_batches`
    weights    K floats   :func:`micro_weights` (right) or :func:`micro_mean_weights`
    return     float      :math:`\sum_k w_k \mathcal L_k`, the full batch's loss value
    =========  =========  ===========================================================

    Only one micro-batch's activations are alive at a time. Call ``optimizer.zero_grad()``
    before and ``optimizer.step()`` after; this function only fills ``.grad``.
    """
    return accumulate_math(*check_accumulate_arguments(loss_of, slices, weights))


def check_accumulate_arguments(loss_of, slices, weights):
    """Validate :func:`accumulate`'s arguments: a callable, contiguous slices, one finite
    weight >= 0 per slice (a NaN weight would turn every gradient into NaN)."""
    if not callable(loss_of):
        raise TypeError(f"loss_of: expected a callable rows -> 0-d loss tensor, got "
                        f"{describe(loss_of)}")
    slices = check_slices("slices", slices)
    if isinstance(weights, (str, bytes)) or not isinstance(weights, (list, tuple)):
        raise TypeError(f"weights: expected a list of one float per micro-batch, got "
                        f"{describe(weights)}")
    if len(weights) != len(slices):
        raise ValueError(f"weights: expected one weight per micro-batch ({len(slices)}), got "
                         f"{describe(weights)}")
    return loss_of, slices, [check_real("weights", w, minimum=0.0) for w in weights]


def accumulate_math(loss_of, slices, weights):
    """:func:`accumulate` on checked arguments."""
    total = 0.0
    for rows, w in zip(slices, weights):
        loss = loss_of(rows)                                     # this micro-batch only
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise TypeError(f"loss_of: expected a 0-d tensor from loss_of({rows}), got "
                            f"{describe(loss)}")
        if not bool(torch.isfinite(loss.detach())):
            raise ValueError(f"loss_of: expected a finite loss, got {float(loss.detach())} from "
                             f"loss_of({rows}); nothing was added to .grad for it")
        (w * loss).backward()                                    # .grad += w_k grad L_k
        total += w * float(loss.detach())
    return total
