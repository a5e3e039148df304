r"""The GRPO loss in torch, twice: as an eager composition, and fused into one autograd Function.

Taught in chapter 7 (``chapters/07_performance.ipynb``). Needs torch; ``import grpo_lab`` does
not import this module (use ``import grpo_lab.perf.loss_fused``).

* :func:`grpo_loss_eager` composes the loss from small tensor operations, term by term, the
  way TRL's ``GRPOTrainer`` writes it (ratio, two surrogates, their max, k3, masked mean), and
  lets autograd differentiate it. It is the reference that the fused loss is tested against,
  with the NumPy :func:`grpo_lab.grpo_loss`'s signature, options and diagnostics.
* :func:`grpo_loss_fused` computes the same loss *and its gradient* in one sweep over the
  tokens, a block of rows at a time, and hands autograd only the gradient.

Why fusing pays: every eager operation reads and writes a full (N, T) tensor, and autograd
keeps about ten of them alive from the forward pass to the backward pass (the ratio, the
clipped ratio, the two surrogates, which one won, exp(-d) of the KL...). The loss is a sum of
per-token terms, so its gradient with respect to ``logp`` is per token too:

.. math::

    \frac{\partial \mathcal{L}}{\partial\, \mathrm{logp}_{i,t}} = w_{i,t}\Big(
        -A_{i,t}\, r_{i,t}\, [\text{surrogate not clipped}]
        + \beta\, \frac{\partial\, \mathrm{KL}_{i,t}}{\partial\, \mathrm{logp}_{i,t}}\Big),
    \qquad \frac{\partial k_3}{\partial\, \mathrm{logp}} = 1 - e^{-(\mathrm{logp}-\mathrm{ref})}

so it can be computed in the forward sweep while the block's values are in cache, and stored
as the one (N, T) tensor the backward pass returns. The gradient flows to ``logp`` only (the
other inputs are data in GRPO: the old and reference policies are frozen, the advantages are
computed from rewards).
"""

from __future__ import annotations

import torch

from grpo_lab.numerics.validate import check_choice, check_real
from grpo_lab.core.aggregation import AGGREGATIONS
from grpo_lab.core.losses import KL_ESTIMATORS, LEVELS, MAX_LOG_RATIO

__all__ = ["grpo_loss_eager", "grpo_loss_fused", "BLOCK_TOKENS"]

#: Tokens per block of the fused sweep on CPU: 2**16 float32 values (256 KiB) per temporary.
BLOCK_TOKENS = 1 << 16

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DIAGNOSTICS = ("clip_frac_low", "clip_frac_high", "clip_frac", "mean_ratio", "mean_kl",
                "approx_kl")


# --- input checks (the torch side of grpo_lab.numerics.validate) --------------------------------------

def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dim()}-D {str(x.dtype).replace('torch.', '')} tensor of shape {tuple(x.shape)}"
    return type(x).__name__


def _tensor(name, x, shape=None, shape_doc=""):
    """A floating tensor (of ``shape`` if given); TypeError/ValueError naming ``name`` otherwise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor{shape_doc}, got {_describe(x)}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"{name}: expected a float16, bfloat16, float32 or float64 tensor"
                        f"{shape_doc}, got dtype {str(x.dtype).replace('torch.', '')}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}{shape_doc}, got {_describe(x)}")
    return x


def _check(logp, old_logp, ref_logp, adv, mask, eps_low, eps_high, beta, kl, agg, level):
    """Validate everything; returns the options and the working dtype (float32 or float64)."""
    _tensor("logp", logp, shape_doc=" of per-token log-probs, shape (N, T)")
    if logp.dim() != 2 or logp.numel() == 0:
        raise ValueError(f"logp: expected a non-empty 2-D (N, T) tensor, got {_describe(logp)}")
    same = " (the shape of logp; nothing is broadcast)"
    _tensor("old_logp", old_logp, logp.shape, same)
    N, T = logp.shape
    if not isinstance(adv, torch.Tensor) or tuple(adv.shape) not in ((N,), (N, T)):
        raise ValueError(f"adv: expected shape ({N},) (one advantage per sequence) or ({N}, {T}) "
                         f"(one per token), got {_describe(adv)}")
    _tensor("adv", adv)
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask: expected a torch.Tensor of 0/1 or bools{same}, got {_describe(mask)}")
    if tuple(mask.shape) != (N, T):
        raise ValueError(f"mask: expected shape {(N, T)}{same}, got {_describe(mask)}")
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask: expected only 0 and 1 (or bools), got other values")
    eps_low = check_real("eps_low", eps_low, minimum=0.0, maximum=1.0)
    eps_high = eps_low if eps_high is None else check_real("eps_high", eps_high, minimum=0.0)
    beta = check_real("beta", beta, minimum=0.0)
    kl = check_choice("kl", kl, tuple(KL_ESTIMATORS))
    agg = check_choice("agg", agg, AGGREGATIONS)
    level = check_choice("level", level, LEVELS)
    if ref_logp is None:
        if beta != 0:
            raise ValueError(f"ref_logp: expected an (N, T) tensor of reference log-probs when "
                             f"beta = {beta} > 0, got None")
    else:
        _tensor("ref_logp", ref_logp, logp.shape, same)
    tensors = [t for t in (logp, old_logp, ref_logp, adv, mask) if t is not None]
    if len({t.device for t in tensors}) > 1:
        raise ValueError(f"logp, old_logp, ref_logp, adv, mask: expected one device, got "
                         f"{[str(t.device) for t in tensors]}")
    lengths = torch.count_nonzero(mask, dim=-1)                      # (N,) valid tokens
    empty = (lengths == 0).nonzero()
    if empty.numel():
        raise ValueError(
            f"mask: expected at least one valid token in every sequence (row), got none in row "
            f"{int(empty[0, 0])} ({empty.numel()} empty row(s) in all): an empty completion "
            f"has no mean, and is almost always a masking bug")
    work = torch.float64 if torch.float64 in (logp.dtype, old_logp.dtype, adv.dtype,
                                              getattr(ref_logp, "dtype", None)) else torch.float32
    return eps_low, eps_high, beta, kl, agg, level, work, lengths


def _row_weights(lengths, agg, work, T):
    """Each row's per-token weight (N, 1) from its valid-token count (see aggregation.py)."""
    N = lengths.shape[0]
    lengths = lengths.to(work)[:, None]                              # (N, 1)
    if agg == "grpo":
        return 1.0 / (N * lengths)                                   # 1 / (N L_i)
    if agg in ("bnpo", "dapo"):
        return torch.full_like(lengths, 1.0) / lengths.sum()         # 1 / sum_j L_j
    return torch.full_like(lengths, 1.0 / (N * T))                   # dr_grpo, max_len = T


def _finish(loss, sums, count, names, inputs):
    """The loss in the inputs' dtype and the diagnostics as floats; non-finite -> ValueError."""
    if not bool(torch.isfinite(loss)):
        for name, t in zip(names, inputs):
            if t is not None and not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name}: expected finite values, got "
                                 f"{int((~torch.isfinite(t)).sum())} non-finite value(s)")
        raise ValueError(f"{', '.join(names)}: the loss does not fit in {loss.dtype} "
                         f"(it is {float(loss)}); pass them in a wider dtype such as float64")
    values = (sums / count).tolist()
    diagnostics = dict(zip(_DIAGNOSTICS, values))
    if inputs[2] is None:
        diagnostics["mean_kl"] = None
    return diagnostics


_NAMES = ("logp", "old_logp", "ref_logp", "adv", "mask")


# --- the eager composition (the reference) ---------------------------------------------------

def grpo_loss_eager(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None,
                    beta=0.04, kl="k3", agg="grpo", level="token"):
    r"""The GRPO loss from small tensor operations, differentiated by autograd (the reference).

    Same arguments, options and diagnostics as :func:`grpo_lab.grpo_loss` (chapter 2), on
    tensors: ``(loss, diagnostics)``, with ``loss`` a 0-D tensor in the inputs' float dtype
    that ``loss.backward()`` differentiates. Worked in float32 (float64 if an input is).

    ==========  ===============  ======================================================
    Symbol      Shape            Meaning
    ==========  ===============  ======================================================
    logp        (N, T)           log pi_theta of the sampled tokens (requires grad)
    old_logp    (N, T)           log pi_old, the policy that sampled them
    ref_logp    (N, T) or None   log pi_ref, the frozen reference (None only if beta = 0)
    adv         (N,) or (N, T)   advantages, per sequence or per token
    mask        (N, T)           1 for completion tokens, 0 for padding
    ==========  ===============  ======================================================

    >>> import torch, grpo_lab.perf.loss_fused as lf
    >>> logp = torch.log(torch.full((4, 3), 0.5)).requires_grad_()
    >>> adv, mask = torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.ones(4, 3)
    >>> loss, diag = lf.grpo_loss_eager(logp, logp.detach(), logp.detach(), adv, mask)
    >>> float(loss.detach()), diag["clip_frac"]
    (0.0, 0.0)
    """
    eps_low, eps_high, beta, kl, agg, level, work, lengths = _check(
        logp, old_logp, ref_logp, adv, mask, eps_low, eps_high, beta, kl, agg, level)
    lp, old = logp.to(work), old_logp.to(work)
    m = mask.to(work)                                                # (N, T)
    a = adv.to(work)
    a = a[:, None] if a.dim() == 1 else a                            # (N, 1) or (N, T)

    log_ratio_raw = lp - old
    if level == "token":
        log_ratio = torch.clamp(log_ratio_raw, -MAX_LOG_RATIO, MAX_LOG_RATIO)     # (N, T)
    else:  # GSPO: the mean log-ratio of each sequence, for all its tokens
        mean = (log_ratio_raw * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True)
        log_ratio = torch.clamp(mean, -MAX_LOG_RATIO, MAX_LOG_RATIO)              # (N, 1)
    ratio = torch.exp(log_ratio)
    pg_loss1 = -a * ratio                                            # unclipped: -r A
    pg_loss2 = -a * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)    # clipped: -clip(r) A
    pg_loss = torch.max(pg_loss1, pg_loss2)                          # (N, T)
    if ref_logp is None:
        per_token_kl = torch.zeros_like(lp)
    else:
        d = lp - ref_logp.to(work)                                   # log pi_theta / pi_ref
        if kl == "k3":
            per_token_kl = torch.exp(-d) + d - 1                     # TRL's form of k3
        elif kl == "k2":
            per_token_kl = 0.5 * d * d
        else:
            per_token_kl = d
    per_token_loss = pg_loss + beta * per_token_kl if beta else pg_loss   # (N, T)
    loss = (per_token_loss * m * _row_weights(lengths, agg, work, lp.shape[1])).sum()

    with torch.no_grad():                                            # TRL's logged metrics
        ratio_t = ratio.expand_as(lp)
        low = (ratio_t < 1 - eps_low) & (a < 0)
        high = (ratio_t > 1 + eps_high) & (a > 0)
        approx_kl = torch.clamp(torch.exp(log_ratio_raw) - 1 - log_ratio_raw,
                                -MAX_LOG_RATIO, MAX_LOG_RATIO)       # k3(pi_old || pi_theta)
        sums = torch.stack([(low * m).sum(), (high * m).sum(), ((low | high) * m).sum(),
                            (ratio_t * m).sum(), (per_token_kl.detach() * m).sum(),
                            (approx_kl * m).sum()])
    diagnostics = _finish(loss, sums, lengths.sum().to(work), _NAMES, (logp, old_logp, ref_logp, adv, mask))
    return loss.to(logp.dtype), diagnostics


# --- the fused loss --------------------------------------------------------------------------

class _Workspace:
    """The block-sized buffers of the fused sweep, allocated once and reused for every block.

    Reusing them keeps the allocator out of the loop (on CPU a fresh 256 KiB buffer is a fresh
    mapping from the operating system, and its pages fault in one by one). Every buffer is a
    float: comparisons write 0.0/1.0 into them, because on CPU arithmetic on floats is several
    times faster than ``where`` and ``masked_fill`` on bools.
    """

    NAMES = ("log_ratio_raw", "log_ratio", "ratio", "pg", "m", "wm", "low", "high", "nd",
             "e", "kl")

    def __init__(self, rows, T, dtype, device):
        self.buffers = {name: torch.empty((rows, T), dtype=dtype, device=device)
                        for name in self.NAMES}

    def view(self, n):
        """The first n rows of every buffer (the last block may be shorter)."""
        return {name: buf[:n] for name, buf in self.buffers.items()}


def _dot(x, y):
    """sum(x * y) of two same-shape tensors, without the (n, T) product."""
    return torch.dot(x.reshape(-1), y.reshape(-1))


def _fused_block(lp, old, ref, a, mask, w, grad, ws, eps_low, eps_high, beta, kl):
    """One block of rows: returns its loss and diagnostic sums, writes d loss / d logp to grad.

    ========  ===============  ===================================================
    Symbol    Shape            Meaning
    ========  ===============  ===================================================
    lp, old   (n, T)           the block's logp and old_logp, in the working dtype
    ref       (n, T) or None   its ref_logp
    a         (n, 1) / (n, T)  advantages
    mask      (n, T)           bool mask
    w         (n, 1)           each row's aggregation weight
    grad      (n, T)           output: the gradient of the loss w.r.t. lp
    ws        dict             the workspace's (n, T) buffers
    ========  ===============  ===================================================

    Returns ``loss_sum, [low, high, ratio, kl, approx_kl + 1]`` (sums over valid tokens).
    """
    m = ws["m"].copy_(mask)                                          # (n, T) 0.0 / 1.0
    log_ratio_raw = torch.sub(lp, old, out=ws["log_ratio_raw"])
    log_ratio = torch.clamp(log_ratio_raw, -MAX_LOG_RATIO, MAX_LOG_RATIO, out=ws["log_ratio"])
    ratio = torch.exp(log_ratio, out=ws["ratio"])                    # (n, T) pi_theta / pi_old

    # The two surrogates, -r A and -clip(r) A, and the loss: their max (CleanRL's layout).
    torch.mul(ratio, -a, out=grad)                                   # pg_loss1 = -r A
    pg = torch.clamp(ratio, 1 - eps_low, 1 + eps_high, out=ws["pg"]).mul_(-a)    # pg_loss2
    torch.maximum(grad, pg, out=pg)                                  # pg_loss

    # Clipped tokens (as the diagnostics count them): the max picks -clip(r) A there, whose
    # gradient is 0. Everywhere else the gradient is that of -r A: -r A itself.
    low = torch.lt(ratio, 1 - eps_low, out=ws["low"]).mul_(torch.lt(a, 0).to(lp.dtype))
    high = torch.gt(ratio, 1 + eps_high, out=ws["high"]).mul_(torch.gt(a, 0).to(lp.dtype))
    low_sum, high_sum = _dot(low, m), _dot(high, m)
    clipped = low.add_(high)                                         # 1.0 where clipped
    grad.addcmul_(grad, clipped, value=-1.0)                         # grad * (1 - clipped)
    if grad.device.type != "cpu" or float(log_ratio_raw.abs().max()) > MAX_LOG_RATIO:
        grad.mul_(torch.eq(log_ratio, log_ratio_raw, out=ws["high"]))   # clamped: no gradient

    kl_sum = None
    if ref is not None:
        nd = torch.sub(ref, lp, out=ws["nd"])                        # -d = log pi_ref / pi_theta
        if kl == "k3":
            e = torch.exp(nd, out=ws["e"])                           # e^{-d}
            per_token_kl = torch.sub(e, nd, out=ws["kl"]).sub_(1.0)  # k3 = e^{-d} + d - 1
            dkl = e.neg_().add_(1.0)                                 # d k3 / d logp = 1 - e^{-d}
        elif kl == "k2":
            per_token_kl = torch.mul(nd, nd, out=ws["kl"]).mul_(0.5)
            dkl = nd.neg_()                                          # d (d^2/2) / d logp = d
        else:
            per_token_kl = torch.neg(nd, out=ws["kl"])
            dkl = None                                               # d d / d logp = 1
        kl_sum = _dot(per_token_kl, m)
        if beta != 0:
            pg.add_(per_token_kl, alpha=beta)                        # the per-token loss
            if dkl is None:
                grad += beta
            else:
                grad.add_(dkl, alpha=beta)

    wm = torch.mul(m, w, out=ws["wm"])                               # token weights w m
    loss = _dot(pg, wm)
    grad.mul_(wm)
    # k3 of KL(pi_old || pi_theta), CleanRL's approx_kl, plus 1 (taken off by the caller)
    approx_kl = torch.sub(ratio, log_ratio_raw, out=ws["kl"]).clamp_(max=MAX_LOG_RATIO + 1)
    return loss, [low_sum, high_sum, _dot(ratio, m), kl_sum, _dot(approx_kl, m)]


class _FusedGRPOLoss(torch.autograd.Function):
    """Forward: loss, diagnostic sums and the gradient, block by block. Backward: one multiply."""

    @staticmethod
    def forward(ctx, logp, old_logp, ref_logp, adv, mask, options):
        eps_low, eps_high, beta, kl, agg, work, block_rows, lengths = options
        N, T = logp.shape
        mask = mask if mask.dtype == torch.bool else mask != 0
        w_rows = _row_weights(lengths, agg, work, T)                 # (N, 1)
        direct = logp.dtype == work                                  # write grad in place
        grad = torch.empty_like(logp)                                # the one (N, T) result
        rows = min(block_rows, N)
        ws = _Workspace(rows, T, work, logp.device)
        block_grad = None if direct else torch.empty((rows, T), dtype=work, device=logp.device)
        losses, sums = [], []
        for r0 in range(0, N, block_rows):
            r1 = min(N, r0 + block_rows)
            a = adv[r0:r1].to(work)
            a = a[:, None] if a.dim() == 1 else a                    # (n, 1) or (n, T)
            g = grad[r0:r1] if direct else block_grad[: r1 - r0]
            block_loss, block_sums = _fused_block(
                logp[r0:r1].to(work), old_logp[r0:r1].to(work),
                None if ref_logp is None else ref_logp[r0:r1].to(work), a, mask[r0:r1],
                w_rows[r0:r1], g, ws.view(r1 - r0), eps_low, eps_high, beta, kl)
            if not direct:
                grad[r0:r1] = g                                      # cast to logp's dtype
            losses.append(block_loss)
            zero = block_loss.new_zeros(())
            sums.append(torch.stack([zero if x is None else x for x in block_sums]))
        loss = torch.stack(losses).sum()
        low, high, ratio, kl_sum, approx_kl = torch.stack(sums).sum(0)
        approx_kl = approx_kl - lengths.sum().to(work)               # it was k3 + 1 per token
        # the diagnostics' sums: low, high, low + high, ratio, kl, approx_kl
        sums = torch.stack([low, high, low + high, ratio, kl_sum, approx_kl])
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(sums)
        return loss.to(logp.dtype), sums

    @staticmethod
    def backward(ctx, grad_loss, grad_sums):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None, None, None


def grpo_loss_fused(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None,
                    beta=0.04, kl="k3", agg="grpo", level="token"):
    r"""The GRPO loss and its gradient in one sweep: :func:`grpo_loss_eager`, fused.

    Same arguments, result and diagnostics as :func:`grpo_loss_eager` (and the NumPy
    :func:`grpo_lab.grpo_loss`). The gradient reaches ``logp`` only: another input that
    requires grad is a ``ValueError`` rather than a silently missing gradient. GSPO's
    ``level="sequence"`` couples the tokens of a sequence and is computed by the eager
    composition. See the module docstring for the gradient it computes in the forward pass.

    On CPU the rows are swept ``BLOCK_TOKENS`` tokens at a time, so every temporary
    is a block, and the peak extra memory is the (N, T) gradient plus a few blocks; on CUDA
    the blocks are 64 times larger, to keep the kernel launches few.

    >>> import torch, grpo_lab.perf.loss_fused as lf
    >>> logp = torch.log(torch.full((4, 3), 0.5)).requires_grad_()
    >>> adv, mask = torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.ones(4, 3)
    >>> loss, diag = lf.grpo_loss_fused(logp, logp.detach(), logp.detach(), adv, mask)
    >>> loss.backward()
    >>> logp.grad[0]             # -A r w: each of row 0's 3 tokens weighs 1 / (4 * 3)
    tensor([-0.0833, -0.0833, -0.0833])
    """
    eps_low, eps_high, beta, kl, agg, level, work, lengths = _check(
        logp, old_logp, ref_logp, adv, mask, eps_low, eps_high, beta, kl, agg, level)
    for name, t in zip(_NAMES[1:], (old_logp, ref_logp, adv, mask)):
        if t is not None and t.requires_grad:
            raise ValueError(f"{name}: expected a tensor that does not require grad (the fused "
                             f"loss differentiates logp only; detach it), got one that does")
    if level == "sequence":
        return grpo_loss_eager(logp, old_logp, ref_logp, adv, mask, eps_low=eps_low,
                               eps_high=eps_high, beta=beta, kl=kl, agg=agg, level=level)
    N, T = logp.shape
    tokens = BLOCK_TOKENS * (64 if logp.device.type == "cuda" else 1)
    block_rows = max(1, tokens // T)
    options = (eps_low, eps_high, beta, kl, agg, work, block_rows, lengths)
    loss, sums = _FusedGRPOLoss.apply(logp, old_logp, ref_logp, adv, mask, options)
    count = lengths.sum().to(sums.dtype)
    diagnostics = _finish(loss, sums, count, _NAMES, (logp, old_logp, ref_logp, adv, mask))
    return loss, diagnostics
