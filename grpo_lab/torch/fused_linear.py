r"""The GRPO loss straight from hidden states: the LM head and the loss fused, chunk by chunk.

Taught in chapter 7 (``chapters/07_performance.ipynb``). In a GRPO step the largest tensor is
not in the loss: it is the (N, T, V) logits the LM head makes to get one log-prob per token.
At N = 8, T = 512 and a vocabulary of V = 32000 they take 524 MB in float32, and eager code
keeps them (and their log-softmax) alive until the backward pass. TRL computes the log-probs
a few rows at a time for that reason, and Liger-Kernel's ``LigerFusedLinearGRPOLoss`` fuses
the head with the loss. :func:`fused_linear_grpo_loss` does the same in three matmuls per
token:

* take ``chunk_size`` valid tokens (padding is skipped: it has no loss and no gradient);
* ``z = h W^T`` (n, V), the chunk's logits, and ``logp = z_y - logsumexp(z)``, the exp taken
  over ``z`` in place (so the chunk's one (n, V) tensor is reused to the end);
* the per-token GRPO loss and its derivative ``g = dL/dlogp`` (n,), by autograd on those n
  numbers (the loss is a sum of per-token terms whose weights are known from the mask);
* ``dL/dz = g (onehot(y) - softmax(z))``, written over the same tensor, then
  ``dL/dh = (dL/dz) W`` and ``dL/dW += (dL/dz)^T h``.

So the gradients are ready when the forward pass ends (the backward pass only scales them),
the logits are made once (Liger makes them twice: once for the loss, once again in the
backward pass), and no tensor larger than ``chunk_size`` x V exists.

The per-token loss is the torch mirror's, from its public pieces
(:func:`grpo_lab.torch.probability_ratio`, :func:`grpo_lab.torch.clip_bounds`, k3 through
:func:`grpo_lab.torch.kl.kl_estimate`, the weights of :func:`grpo_lab.torch.row_weights`), and
it is tested equal to :func:`grpo_lab.torch.grpo_loss` on the eager logits, to a TRL-style
eager loss, and to Liger's.
"""

from __future__ import annotations

import torch

from grpo_lab.numerics.validate import (as_float_array, check_choice, check_int, describe,
                                        same_device)
from grpo_lab.torch.aggregation import row_weights
from grpo_lab.torch.kl import kl_estimate
from grpo_lab.torch.loss import check_loss_arguments, diagnostic_means, diagnostic_sums
from grpo_lab.torch.surrogate import clip_bounds, probability_ratio

__all__ = ["CHUNK_TOKENS", "ID_DTYPES", "LOSS_TYPES", "check_fused_linear_arguments",
           "check_no_grad", "chunk_loss_grad", "fused_linear_grpo_loss"]

#: Valid tokens per chunk: at V = 32000 a float32 chunk of logits is 256 x 32000 x 4 = 33 MB.
CHUNK_TOKENS = 256

#: The dtypes ``ids`` may have: torch's integers with full operator support (its uint16, uint32
#: and uint64 lack them; bool is not a token id). They are widened to int64 for ``gather``.
ID_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)

#: The aggregations both this loss and Liger's support (TRL's ``loss_type`` names).
LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")


def check_fused_linear_arguments(hidden, weight, ids, adv, mask, old_logp, ref_logp, beta,
                                 eps_low, eps_high, loss_type, chunk_size):
    """Every argument of :func:`fused_linear_grpo_loss`, checked in one call.

    Returns ``(h, w, ids, x, chunk_size)``: hidden as (N*T, H) and weight in the working dtype,
    the token ids (N*T,), the loss arguments of :func:`grpo_lab.torch.check_loss_arguments`
    (on a stand-in logp of zeros, so that old_logp, ref_logp, adv, mask and the options are
    checked with the eager loss's words), and the chunk size.
    """
    loss_type = check_choice("loss_type", loss_type, LOSS_TYPES)
    h, h_dtype = as_float_array("hidden", hidden, ndim=3, shape_doc=" of shape (N, T, H)",
                                backend="torch")
    w, _ = as_float_array("weight", weight, ndim=2, shape_doc=" of shape (V, H)",
                          backend="torch")
    N, T, H = h.shape
    if w.shape[1] != H:
        raise ValueError(f"weight: expected shape (V, {H}) (H from hidden {tuple(h.shape)}), "
                         f"got {tuple(w.shape)}")
    if not isinstance(ids, torch.Tensor) or ids.dtype not in ID_DTYPES \
            or tuple(ids.shape) != (N, T):
        raise TypeError(f"ids: expected an integer tensor of shape ({N}, {T}) (dtype one of "
                        f"{', '.join(str(d) for d in ID_DTYPES)}), got {describe(ids)}")
    same_device("hidden", h, weight=w, ids=ids)
    check_no_grad(old_logp=old_logp, ref_logp=ref_logp, adv=adv, mask=mask)
    stand_in = torch.zeros((N, T), dtype=h_dtype, device=h.device)
    x = check_loss_arguments(stand_in, stand_in if old_logp is None else old_logp, ref_logp,
                             adv, mask, eps_low=eps_low, eps_high=eps_high, beta=beta,
                             kl="k3", agg=loss_type, level="token")
    valid = ids[x.mask > 0]
    if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= w.shape[0]):
        bad = int(valid.min()) if int(valid.min()) < 0 else int(valid.max())
        raise ValueError(f"ids: expected token ids in [0, {w.shape[0]}) (V from weight) on "
                         f"every valid token, got {bad}")
    chunk_size = check_int("chunk_size", chunk_size, minimum=1)
    ids = ids.reshape(N * T).to(torch.int64)           # gather takes int32/int64 only
    return h.reshape(N * T, H).to(x.work), w.to(x.work), ids, x, chunk_size


def check_no_grad(**tensors):
    """Refuse, by name, a data tensor that requires grad: a loss that writes its gradient by
    hand (this one, :func:`grpo_lab.perf.loss_fused.grpo_loss_fused`) gives it none, and a
    missing gradient would otherwise pass in silence. None is allowed."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise ValueError(f"{name}: expected a tensor that does not require grad (the fused "
                             f"loss writes the gradients of its model inputs only; detach it), "
                             f"got one that does")


def chunk_loss_grad(logp, old, ref, a, w, x):
    r"""The loss of n valid tokens, ``sum_t w_t l_t``, its derivative ``g = dL/dlogp`` (n,), and
    the diagnostic sums.

    .. math::

        \ell_t = -A_t \operatorname{clamp}(r_t, lo_t, hi_t) + \beta\, k_3(\mathrm{logp}_t,
        \mathrm{ref}_t), \qquad r_t = e^{\mathrm{logp}_t - \mathrm{old}_t}

    ``old`` None means the detached log-probs (a ratio of 1 whose gradient is ``r``); ``w`` the
    tokens' aggregation weights; ``x`` the checked options. Autograd on n numbers finds ``g``.
    """
    # Under torch.inference_mode the chunk's tensors are inference tensors, which autograd
    # cannot record: leave inference mode for these n numbers and work on normal copies.
    inference = torch.is_inference_mode_enabled()
    with torch.inference_mode(False), torch.enable_grad():
        if inference:
            logp, old, ref, a, w = (None if t is None else t.clone()
                                    for t in (logp, old, ref, a, w))
        lp = logp.detach().requires_grad_()                         # (n,)
        log_ratio = lp - (lp.detach() if old is None else old)      # (n,) log pi / pi_old
        ratio = probability_ratio(log_ratio)                        # (n,)
        lo, hi = clip_bounds(a, x.eps_low, x.eps_high)              # (n,) where the clip bites
        per_token_loss = -a * torch.clamp(ratio, lo, hi)            # -min(r A, clip(r) A)
        per_token_kl = None if ref is None else kl_estimate("k3", lp, ref)
        if x.beta != 0:
            per_token_loss = per_token_loss + x.beta * per_token_kl
        loss = torch.dot(per_token_loss, w)                         # sum_t w_t l_t
        (g,) = torch.autograd.grad(loss, lp)
    ones = torch.ones_like(w)
    with torch.no_grad():
        sums = diagnostic_sums(ratio.detach(), lo, hi, None if per_token_kl is None
                               else per_token_kl.detach(), log_ratio.detach(), ones,
                               torch.empty_like(w))
    return loss.detach(), g, sums


class FusedLinearGRPO(torch.autograd.Function):
    """Forward: loss, log-probs, diagnostics and both gradients, chunk by chunk. Backward: scale."""

    @staticmethod
    def forward(ctx, hidden, weight, h, w, ids, x, has_old, chunk_size):
        rows = torch.nonzero(x.mask.reshape(-1) > 0).squeeze(1)      # (M,) the valid tokens
        N, T = x.mask.shape
        wt = row_weights(x.lengths, x.agg, max_len=T)                # (N,) or ()
        token_w = (wt.expand(N) if wt.dim() == 0 else wt).repeat_interleave(T)[rows]  # (M,)
        adv = x.adv.to(x.work).expand(N, T).reshape(-1)[rows]        # (M,)
        old = x.old_logp.to(x.work).reshape(-1)[rows] if has_old else None
        ref = None if x.ref_logp is None else x.ref_logp.to(x.work).reshape(-1)[rows]
        grad_h = torch.zeros_like(h) if ctx.needs_input_grad[0] else None  # (N*T, H)
        grad_w = torch.zeros_like(w) if ctx.needs_input_grad[1] else None  # (V, H)
        logp = torch.zeros(N * T, dtype=x.work, device=h.device)           # (N*T,)
        loss, sums = h.new_zeros(()), {}
        for c0 in range(0, rows.numel(), chunk_size):
            idx = rows[c0:c0 + chunk_size]                           # (n,)
            hc, yc = h[idx], ids[idx]                                # (n, H), (n,)
            z = hc @ w.T                                             # (n, V) the chunk's logits
            z_y = z.gather(1, yc[:, None]).squeeze(1)                # (n,) the sampled tokens'
            top = z.amax(dim=1)                                      # (n,) for a safe exp
            p = z.sub_(top[:, None]).exp_()                          # (n, V) e^(z - top), over z
            total = p.sum(dim=1)                                     # (n,)
            lp = z_y - top - torch.log(total)                        # (n,) z_y - logsumexp(z)
            part = slice(c0, c0 + idx.numel())
            c_loss, g, c_sums = chunk_loss_grad(lp, None if old is None else old[part],
                                                None if ref is None else ref[part],
                                                adv[part], token_w[part], x)
            loss += c_loss
            logp[idx] = lp
            for key, s in c_sums.items():
                sums[key] = s if key not in sums or s is None else sums[key] + s
            p.mul_((-g / total)[:, None])                            # (n, V) -g softmax(z)
            p.scatter_add_(1, yc[:, None], g[:, None])               # + g onehot(y): dL/dz
            if grad_h is not None:
                grad_h[idx] = p @ w                                  # (n, H)
            if grad_w is not None:
                grad_w.addmm_(p.T, hc)                               # (V, H) += (V, n)(n, H)
            del z, p                      # free this chunk before the next one is allocated
        ctx.save_for_backward(grad_h, grad_w)
        ctx.shapes = (hidden.shape, hidden.dtype, weight.dtype)
        logp = logp.reshape(N, T)
        ctx.mark_non_differentiable(logp)
        return loss, logp, sums

    @staticmethod
    def backward(ctx, grad_loss, grad_logp, grad_sums):
        grad_h, grad_w = ctx.saved_tensors
        shape, h_dtype, w_dtype = ctx.shapes
        if grad_h is not None:
            grad_h = grad_h.reshape(shape).to(h_dtype)
        if grad_w is not None:
            grad_w = grad_w.to(w_dtype)
        if not bool(grad_loss == 1):                                 # a scaled loss: scale
            grad_h = None if grad_h is None else grad_h * grad_loss
            grad_w = None if grad_w is None else grad_w * grad_loss
        return grad_h, grad_w, None, None, None, None, None, None


def fused_linear_grpo_loss(hidden, weight, ids, adv, mask, *, old_logp=None, ref_logp=None,
                           beta=0.0, eps_low=0.2, eps_high=None, loss_type="dapo",
                           chunk_size=CHUNK_TOKENS):
    r"""The GRPO loss from the last hidden states and the LM head, without the (N, T, V) logits.

    .. math::

        \mathrm{logp}_{i,t} = (h_{i,t} W^\top)_{y_{i,t}} - \log\sum_v e^{(h_{i,t} W^\top)_v},
        \qquad \mathcal L = \sum_{i,t} w_{i,t}\,\ell_{i,t}(\mathrm{logp}_{i,t})

    with :math:`\ell` the clipped surrogate plus :math:`\beta` k3 (as
    :func:`grpo_lab.torch.grpo_loss`) and :math:`w` the weights of ``loss_type``.

    ==========  ==============  ===========================================================
    Symbol      Shape           Meaning
    ==========  ==============  ===========================================================
    hidden      (N, T, H)       the policy's last hidden states (carries the grad)
    weight      (V, H)          the LM head (carries the grad)
    ids         (N, T)          the sampled tokens y, integers in [0, V) where mask is 1
    adv         (N,)            one advantage per completion
    mask        (N, T)          1 for completion tokens, 0 for padding
    old_logp    (N, T) or None  log pi_old; None: the detached log-probs (ratio 1)
    ref_logp    (N, T) or None  log pi_ref; needed when beta > 0
    loss_type   str             "grpo", "bnpo", "dapo" (default, as Liger) or "dr_grpo"
    chunk_size  int             valid tokens per chunk (memory: chunk_size x V logits)
    ==========  ==============  ===========================================================

    float32 and float64 inputs are worked in their own dtype; float16 and bfloat16 ones in
    float32 (a float32 copy of hidden and weight: the logsumexp over V needs the range).

    Returns ``(loss, stats)``: a 0-d tensor and a dict with ``logp`` (N, T), detached, 0 on
    padding (the log-probs of this pass, e.g. the next step's ``old_logp``), and the
    diagnostics of :func:`grpo_lab.torch.grpo_loss` as Python floats.

    >>> import torch, grpo_lab.torch.fused_linear as fl
    >>> hidden, weight = torch.zeros(2, 3, 4, requires_grad=True), torch.zeros(5, 4)
    >>> ids, mask = torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3)
    >>> loss, stats = fl.fused_linear_grpo_loss(hidden, weight, ids, torch.tensor([1.0, -1.0]),
    ...                                         mask)
    >>> float(loss.detach()), round(float(stats["logp"][0, 0]), 4)   # uniform over V = 5 tokens
    (0.0, -1.6094)
    """
    h, w, flat_ids, x, chunk_size = check_fused_linear_arguments(
        hidden, weight, ids, adv, mask, old_logp, ref_logp, beta, eps_low, eps_high,
        loss_type, chunk_size)
    loss, logp, sums = FusedLinearGRPO.apply(hidden, weight, h, w, flat_ids, x,
                                             old_logp is not None, chunk_size)
    stats = {"logp": logp, **diagnostic_means(sums, x.lengths)}
    if x.ref_logp is None:
        stats["mean_kl"] = None
    return loss.to(x.out_dtype), stats
