r"""The fused GRPO loss: the loss and its gradient in one sweep over the tokens.

Taught in chapter 7 (``chapters/07_performance.ipynb``). Needs torch; ``import grpo_lab`` does
not import this module (use ``import grpo_lab.perf.loss_fused``).

:func:`grpo_loss_fused` is the torch mirror's eager loss :func:`grpo_lab.torch.grpo_loss`
computed in another order: the same argument check (one call,
:func:`grpo_lab.torch.check_loss_arguments`), the same arguments, results and diagnostics
(:func:`grpo_lab.torch.diagnostic_sums`), tested equal in value, diagnostics and gradient.

Why fusing pays: every eager operation reads and writes a full (N, T) tensor, and autograd
keeps some of them alive from the forward pass to the backward pass. The loss is a sum of
per-token terms, so its gradient with respect to ``logp`` is per token too:

.. math::

    \frac{\partial \mathcal{L}}{\partial\, \mathrm{logp}_{i,t}} = w_{i,t}\Big(
        -A_{i,t}\, r_{i,t}\, [lo_i \le r_{i,t} \le hi_i]
        + \beta\, \frac{\partial\, \mathrm{KL}_{i,t}}{\partial\, \mathrm{logp}_{i,t}}\Big),
    \qquad \frac{\partial k_3}{\partial\, \mathrm{logp}} = -(e^{r} - 1),
    \quad r = \mathrm{ref} - \mathrm{logp}

with ``[lo, hi]`` the range :func:`grpo_lab.torch.clip_bounds` clamps the ratio to (0 where a
clip holds; see :func:`grpo_lab.surrogate_grad_logp` for the NumPy version). So it can be
computed in the forward sweep while a block's values are in cache, and stored as the one
(N, T) tensor the backward pass returns. The gradient flows to ``logp`` only (the other inputs
are data in GRPO: the old and reference policies are frozen, the advantages come from rewards).

Two routes compute the sweep. On CPU, for float32 and float64 inputs, a compiled Numba kernel
(:mod:`grpo_lab.perf.loss_numba`, :func:`one_pass`) reads each token once and writes its
gradient once, every other quantity living in registers. Elsewhere (CUDA, float16 and
bfloat16 inputs, a machine without Numba) the rows are swept in blocks of torch operations
(:func:`fused_block`), each a pass over a block small enough to stay in cache.
"""

from __future__ import annotations

import torch

from grpo_lab.numerics.validate import cast_result
from grpo_lab.perf import loss_numba
from grpo_lab.torch.aggregation import row_weights
from grpo_lab.torch.fused_linear import check_no_grad
from grpo_lab.torch.loss import (DIAGNOSTICS, check_loss_arguments, diagnostic_means,
                                 diagnostic_sums, grpo_loss)
from grpo_lab.torch.surrogate import MAX_LOG_RATIO, clip_bounds

__all__ = ["BLOCK_TOKENS", "Workspace", "fused_block", "grpo_loss_fused", "one_pass"]

#: Tokens per block of the fused sweep on CPU: 2**16 float32 values (256 KiB) per temporary.
BLOCK_TOKENS = 1 << 16


class Workspace:
    """The block-sized buffers of the fused sweep, allocated once and reused for every block.

    Reusing them keeps the allocator out of the loop (on CPU a fresh 256 KiB buffer is a fresh
    mapping from the operating system, and its pages fault in one by one). Comparisons write
    0.0 / 1.0 into float buffers: on CPU, arithmetic on floats is several times faster than
    ``where`` and ``masked_fill`` on bools.
    """

    NAMES = ("log_ratio", "ratio", "loss", "kl", "dkl", "wm", "scratch")

    def __init__(self, rows, T, dtype, device):
        self.buffers = {name: torch.empty((rows, T), dtype=dtype, device=device)
                        for name in self.NAMES}

    def view(self, n):
        """The first n rows of every buffer (the last block may be shorter)."""
        return {name: buf[:n] for name, buf in self.buffers.items()}


def flat_dot(x, y):
    """sum(x * y) of two same-shape tensors, without the (n, T) product."""
    return torch.dot(x.reshape(-1), y.reshape(-1))


def fused_block(lp, old, ref, a, m, w, grad, ws, eps_low, eps_high, beta, kl):
    """One block of rows: returns its loss and diagnostic sums, writes d loss / d logp to grad.

    ========  ===============  ===================================================
    Symbol    Shape            Meaning
    ========  ===============  ===================================================
    lp, old   (n, T)           the block's logp and old_logp, in the working dtype
    ref       (n, T) or None   its ref_logp
    a         (n, 1) / (n, T)  advantages
    m         (n, T)           the mask, 0.0 / 1.0
    w         (n, 1) or ()     each row's aggregation weight
    grad      (n, T)           output: the gradient of the loss w.r.t. lp
    ws        dict             the workspace's (n, T) buffers
    ========  ===============  ===================================================
    """
    log_ratio = torch.sub(lp, old, out=ws["log_ratio"])              # (n, T) log pi / pi_old
    ratio = torch.clamp(log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO, out=ws["ratio"]).exp_()
    lo, hi = clip_bounds(a, eps_low, eps_high)                       # where the clip bites
    # The surrogate -A clamp(r, lo, hi), and its gradient: -A r where the clamp let r through
    # (d r / d logp = r), 0 where a clip holds or the log-ratio was clamped.
    loss = torch.clamp(ratio, lo, hi, out=ws["loss"])                # (n, T) clip(r)
    torch.eq(loss, ratio, out=grad).mul_(ratio).mul_(-a)             # d pg_loss / d logp
    loss.mul_(-a)                                                    # pg_loss
    if grad.device.type != "cpu" or float(log_ratio.abs().max()) > MAX_LOG_RATIO:
        grad.mul_(torch.abs(log_ratio, out=ws["scratch"]).le_(MAX_LOG_RATIO))

    per_token_kl = None
    if ref is not None:                            # the KL term and its derivative in logp
        r = torch.sub(ref, lp, out=ws["kl"])                         # log pi_ref / pi_theta
        if kl == "k3":
            e = torch.expm1(r, out=ws["dkl"])                        # e^r - 1
            per_token_kl, dkl = r.neg_().add_(e), e.neg_()           # expm1(r) - r; -(e^r - 1)
        elif kl == "k2":
            per_token_kl = torch.mul(r, r, out=ws["dkl"]).mul_(0.5)  # d^2 / 2
            dkl = r.neg_()                                           # d = logp - ref_logp
        else:
            per_token_kl, dkl = r.neg_(), None                       # k1 = d; derivative 1
        if beta != 0:
            loss.add_(per_token_kl, alpha=beta)                      # the per-token loss
            if dkl is None:
                grad.add_(beta)
            else:
                grad.add_(dkl, alpha=beta)

    wm = torch.mul(m, w, out=ws["wm"])                               # token weights w m
    block_loss = flat_dot(loss, wm)
    grad.mul_(wm)
    sums = diagnostic_sums(ratio, lo, hi, per_token_kl, log_ratio, m, ws["scratch"])
    return block_loss, sums


def one_pass(logp, old_logp, ref_logp, adv, mask, w_rows, eps_low, eps_high, beta, kl):
    """The Numba route: ``(grad, loss, sums)``, or None where it does not apply.

    It applies on CPU to checked tensors all in the working dtype, float32 or float64 (the
    mask too: :func:`grpo_lab.torch.check_loss_arguments` made it so), with Numba installed.
    The kernel works on the tensors' NumPy views (contiguous ones are not copied) and writes
    the gradient into a new (N, T) tensor, the only one. None also where the kernel found a
    k3 argument its ``exp`` does not cover (:data:`grpo_lab.perf.loss_numba.EXP_LIMIT`).
    """
    tensors = [logp, old_logp, adv, mask] + ([] if ref_logp is None else [ref_logp])
    work = mask.dtype
    if (logp.device.type != "cpu" or work not in (torch.float32, torch.float64)
            or any(t.dtype != work for t in tensors) or MAX_LOG_RATIO + 1 > loss_numba.EXP_LIMIT
            or loss_numba.kernel_or_none() is None):
        return None
    lp, old, ref, a, m = (None if t is None else t.detach().contiguous().numpy()
                          for t in (logp, old_logp, ref_logp, adv, mask))
    grad = torch.empty(logp.shape, dtype=work)                      # the one (N, T) result
    w = w_rows.to(torch.float64).expand(lp.shape[0]).contiguous().numpy()   # (N,)
    lo, hi = clip_bounds(torch.tensor([-1.0, 1.0], dtype=work), eps_low, eps_high)
    sums = loss_numba.loss_one_pass(lp, old, ref, a, m, grad.numpy(), w,
                                    (float(lo[0]), float(hi[1])), beta, kl, MAX_LOG_RATIO)
    if sums is None:
        return None
    return grad, torch.tensor(sums[0], dtype=work), torch.from_numpy(sums[1:])


class FusedGRPOLoss(torch.autograd.Function):
    """Forward: loss, diagnostic sums and the gradient, in one sweep (:func:`one_pass`) or
    block by block. Backward: one multiply."""

    @staticmethod
    def forward(ctx, logp, old_logp, ref_logp, adv, mask, options):
        eps_low, eps_high, beta, kl, w_rows, work, block_rows = options
        swept = one_pass(logp, old_logp, ref_logp, adv, mask, w_rows, eps_low, eps_high, beta,
                         kl)
        if swept is not None:
            grad, loss, sums = swept
            ctx.save_for_backward(grad)
            ctx.mark_non_differentiable(sums)
            return loss, sums
        N, T = logp.shape
        direct = logp.dtype == work                                  # write grad in place
        grad = torch.empty_like(logp)                                # the one (N, T) result
        rows = min(block_rows, N)
        ws = Workspace(rows, T, work, logp.device)
        block_grad = None if direct else torch.empty((rows, T), dtype=work, device=logp.device)
        losses, sums = [], []
        for r0 in range(0, N, block_rows):
            r1 = min(N, r0 + block_rows)
            g = grad[r0:r1] if direct else block_grad[: r1 - r0]
            w = w_rows[r0:r1, None] if w_rows.dim() else w_rows
            block_loss, block_sums = fused_block(
                logp[r0:r1].to(work), old_logp[r0:r1].to(work),
                None if ref_logp is None else ref_logp[r0:r1].to(work), adv[r0:r1].to(work),
                mask[r0:r1], w, g, ws.view(r1 - r0), eps_low, eps_high, beta, kl)
            if not direct:
                grad[r0:r1] = g                                      # cast to logp's dtype
            losses.append(block_loss)
            zero = block_loss.new_zeros(())
            sums.append(torch.stack([zero if block_sums[k] is None else block_sums[k]
                                     for k in DIAGNOSTICS]))
        ctx.save_for_backward(grad)
        sums = torch.stack(sums).sum(0)                              # (6,) in DIAGNOSTICS order
        ctx.mark_non_differentiable(sums)
        return torch.stack(losses).sum(), sums

    @staticmethod
    def backward(ctx, grad_loss, grad_sums):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None, None, None


def grpo_loss_fused(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None,
                    beta=0.04, kl="k3", agg="grpo", level="token", dual_clip=None, max_len=None,
                    kl_clamp=None, kl_bias_correction=False):
    r"""The GRPO loss and its gradient in one sweep: :func:`grpo_lab.torch.grpo_loss`, fused.

    Same arguments, checks, result and diagnostics as :func:`grpo_lab.torch.grpo_loss` (and
    the NumPy :func:`grpo_lab.grpo_loss`), except ``kl="k3+"``, refused by name (its
    straight-through gradient needs autograd). The gradient reaches ``logp`` only: another input
    that requires grad is a ``ValueError`` rather than a silently missing gradient. GSPO's
    ``level="sequence"`` couples the tokens of a sequence and is computed by the eager loss.

    Of chapter 8's production knobs, ``max_len`` (dr_grpo's divisor) is fused: it only changes
    the rows' weights. ``dual_clip``, ``kl_clamp`` and ``kl_bias_correction`` change the
    per-token terms and their derivatives, which the fused sweep does not compute yet: a call
    that sets one is computed by the eager loss, as GSPO is (same result, not fused).

    On CPU, float32 and float64 inputs are swept once by a compiled kernel (:func:`one_pass`):
    the peak extra memory is the (N, T) gradient. Otherwise the rows are swept
    ``BLOCK_TOKENS`` tokens at a time, so every temporary is a block, and the peak extra
    memory is the gradient plus a few blocks; on CUDA the blocks are 64 times larger, to keep
    the kernel launches few.

    >>> import torch, grpo_lab.perf.loss_fused as lf
    >>> logp = torch.log(torch.full((4, 3), 0.5)).requires_grad_()
    >>> adv, mask = torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.ones(4, 3)
    >>> loss, diag = lf.grpo_loss_fused(logp, logp.detach(), logp.detach(), adv, mask)
    >>> loss.backward()
    >>> logp.grad[0]             # -A r w: each of row 0's 3 tokens weighs 1 / (4 * 3)
    tensor([-0.0833, -0.0833, -0.0833])
    """
    knobs = dict(dual_clip=dual_clip, max_len=max_len, kl_clamp=kl_clamp,
                 kl_bias_correction=kl_bias_correction)
    x = check_loss_arguments(logp, old_logp, ref_logp, adv, mask, eps_low=eps_low,
                             eps_high=eps_high, beta=beta, kl=kl, agg=agg, level=level, **knobs)
    check_no_grad(old_logp=old_logp, ref_logp=ref_logp, adv=adv, mask=mask)
    if (x.level == "sequence" or x.dual_clip is not None or x.kl_clamp is not None
            or x.kl_bias_correction):
        return grpo_loss(logp, old_logp, ref_logp, adv, mask, eps_low=eps_low,
                         eps_high=eps_high, beta=beta, kl=kl, agg=agg, level=level, **knobs)
    N, T = logp.shape
    tokens = BLOCK_TOKENS * (64 if logp.device.type == "cuda" else 1)
    w_rows = row_weights(x.lengths, x.agg, max_len=T if x.max_len is None else x.max_len)
    options = (x.eps_low, x.eps_high, x.beta, x.kl, w_rows, x.work, max(1, tokens // T))
    loss, sums = FusedGRPOLoss.apply(logp, x.old_logp, x.ref_logp, x.adv, x.mask, options)
    sums = dict(zip(DIAGNOSTICS, sums))
    if x.ref_logp is None:
        sums["mean_kl"] = None
    loss = cast_result("logp, old_logp, ref_logp, adv", "loss", loss, x.out_dtype)
    return loss, diagnostic_means(sums, x.lengths)
