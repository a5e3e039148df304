r"""Triton kernels for the GPU: group advantages, and the GRPO loss with its gradient in one pass.

Taught in chapter 7 (``chapters/07_performance.ipynb``). Each kernel stands beside its
reference with the same arguments and is tested equal to it (``tests/torch/``):

==============================  ==========================================================
:func:`group_advantages_triton`  :func:`grpo_lab.torch.group_advantages` (``scale="group"``)
:func:`grpo_loss_triton`         :func:`grpo_lab.torch.grpo_loss` (k3, token level)
==============================  ==========================================================

On a GPU each is one kernel launch that reads its inputs once and writes its outputs once, the
traffic of a copy. Where there is no GPU (or ``TRITON_INTERPRET=1``) the kernels are built for
Triton's interpreter, which runs the same kernel code on CPU tensors with NumPy: slow, but it
is how the kernels are tested in CI on a machine without a GPU. They are built on first use
(:func:`kernels`), so importing this module costs nothing.

Both work in float64 inside the kernel, as the NumPy reference does (the work per element is a
handful of flops, far below what an H100 or H200 does in the time its bytes arrive, and fp64
is fast on those parts).
"""

import os

import torch

try:                                       # kernels are written against triton.language
    import triton
    import triton.language as tl
except ImportError:                        # pragma: no cover - triton is pinned
    triton = None

    class tl:                              # noqa: N801 - so that the annotations below parse
        constexpr = int

from grpo_lab.numerics.validate import cast_result, check_choice
from grpo_lab.torch.advantages import check_group_advantages_arguments, group_advantages
from grpo_lab.torch.aggregation import row_weights
from grpo_lab.torch.loss import DIAGNOSTICS, check_loss_arguments, diagnostic_means
from grpo_lab.torch.surrogate import MAX_LOG_RATIO

__all__ = ["BLOCK_TOKENS", "grpo_loss_kernel", "grpo_loss_triton", "group_advantages_kernel",
           "group_advantages_triton", "interpreted", "kernels"]

#: Tokens per program of the loss kernel.
BLOCK_TOKENS = 1024

_BUILT = {}


def interpreted() -> bool:
    """True where the kernels run under Triton's interpreter: no CUDA, or TRITON_INTERPRET=1."""
    return os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available()


def _add(a, b):
    """The combine function of every sum below (``tl.reduce(x, axis, _add)``); jit-compiled with
    the kernels. Triton's own ``tl.sum`` is compiled when Triton is imported, for a GPU or for
    the interpreter, and another library may have imported it first; this one is not."""
    return a + b


def group_advantages_kernel(r_ptr, out_ptr, B, G, stride, par_ptr,
                       BLOCK_B: tl.constexpr, BLOCK_G: tl.constexpr):
    """BLOCK_B rows of G rewards per program: shift, mean, std, ``c (r - mean) / (std + eps)``;
    ``par`` holds ``eps, 1 / G, 1 / (G - ddof), c`` in float64 (a Python float would be fp32)."""
    eps, inv_g = tl.load(par_ptr), tl.load(par_ptr + 1)
    inv_n, c = tl.load(par_ptr + 2), tl.load(par_ptr + 3)
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)               # (BLOCK_B,)
    cols = tl.arange(0, BLOCK_G)                                             # (BLOCK_G,)
    inside = (rows < B)[:, None] & (cols < G)[None, :]                      # (BLOCK_B, BLOCK_G)
    x = tl.load(r_ptr + rows[:, None] * stride + cols[None, :], mask=inside, other=0.0)
    x0 = tl.load(r_ptr + rows * stride, mask=rows < B, other=0.0)           # the row's first
    y = tl.where(inside, x.to(tl.float64) - x0.to(tl.float64)[:, None], 0.0)  # shifted
    mean = tl.reduce(y, 1, _add) * inv_g                                         # (BLOCK_B,)
    dev = tl.where(inside, y - mean[:, None], 0.0)                           # r - mean
    std = tl.sqrt(tl.reduce(dev * dev, 1, _add) * inv_n)                         # (BLOCK_B,)
    factor = tl.where(std + eps > 0, c / (std + eps), 0.0)                   # 0 / 0 is 0
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :],
             (dev * factor[:, None]).to(out_ptr.dtype.element_ty), mask=inside)


def grpo_loss_kernel(lp_ptr, old_ptr, ref_ptr, adv_ptr, m_ptr, w_ptr, grad_ptr, sums_ptr, n, T,
                 par_ptr, HAS_REF: tl.constexpr, PER_TOKEN: tl.constexpr, BLOCK: tl.constexpr):
    """BLOCK tokens per program: the weighted loss and its derivative in logp, and the sums of
    the diagnostics (one row of ``sums`` per program, in DIAGNOSTICS order, loss last).
    ``par`` holds ``eps_low, eps_high, beta, MAX_LOG_RATIO`` in float64."""
    eps_low, eps_high = tl.load(par_ptr), tl.load(par_ptr + 1)
    beta, max_log_ratio = tl.load(par_ptr + 2), tl.load(par_ptr + 3)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)                       # flat token index
    inside = i < n
    row = i // T
    lp = tl.load(lp_ptr + i, mask=inside, other=0.0).to(tl.float64)
    old = tl.load(old_ptr + i, mask=inside, other=0.0).to(tl.float64)
    if PER_TOKEN:                                                            # adv (N, T)
        a = tl.load(adv_ptr + i, mask=inside, other=0.0).to(tl.float64)
    else:                                                                    # adv (N, 1)
        a = tl.load(adv_ptr + row, mask=inside, other=0.0).to(tl.float64)
    m = tl.load(m_ptr + i, mask=inside, other=0.0).to(tl.float64)           # 0.0 / 1.0
    wm = m * tl.load(w_ptr + row, mask=inside, other=0.0).to(tl.float64)    # token weight w m
    log_ratio = lp - old
    clamped_lr = tl.minimum(tl.maximum(log_ratio, -max_log_ratio), max_log_ratio)
    ratio = tl.exp(clamped_lr)                                               # the ratio r
    lo = tl.where(a < 0, 1.0 - eps_low, 0.0)                                 # clip_bounds
    hi = tl.where(a > 0, 1.0 + eps_high, float("inf"))
    kept = (ratio >= lo) & (ratio <= hi) & (tl.abs(log_ratio) <= max_log_ratio)
    loss = -a * tl.minimum(tl.maximum(ratio, lo), hi)                        # -A clamp(r, lo, hi)
    grad = tl.where(kept, -a * ratio, 0.0)                                   # d / d logp
    kl = lp * 0.0
    if HAS_REF:
        d = tl.load(ref_ptr + i, mask=inside, other=0.0).to(tl.float64) - lp   # ref - logp
        e = tl.exp(d)
        kl = e - 1.0 - d                                                     # k3
        loss += beta * kl
        grad += beta * (1.0 - e)                                             # d k3 / d logp
    tl.store(grad_ptr + i, (grad * wm).to(grad_ptr.dtype.element_ty), mask=inside)
    lr = tl.minimum(log_ratio, max_log_ratio)                                # approx_kl's clip
    approx = tl.minimum(tl.exp(lr) - 1.0 - lr, max_log_ratio)
    base = sums_ptr + tl.program_id(0) * 7
    tl.store(base + 0, tl.reduce(tl.where(ratio < lo, m, 0.0), 0, _add))        # clip_frac_low
    tl.store(base + 1, tl.reduce(tl.where(ratio > hi, m, 0.0), 0, _add))        # clip_frac_high
    tl.store(base + 2, tl.reduce(tl.where((ratio < lo) | (ratio > hi), m, 0.0), 0, _add))
    tl.store(base + 3, tl.reduce(ratio * m, 0, _add))                           # mean_ratio
    tl.store(base + 4, tl.reduce(kl * m, 0, _add))                              # mean_kl
    tl.store(base + 5, tl.reduce(approx * m, 0, _add))                          # approx_kl
    tl.store(base + 6, tl.reduce(loss * wm, 0, _add))                           # the loss


def kernels():
    """``{"advantages": kernel, "loss": kernel}``, built on first use (for the interpreter where
    :func:`interpreted`); raises ImportError naming Triton where it is not installed."""
    if not _BUILT:
        if triton is None:
            raise ImportError("grpo_lab.torch.triton_kernels needs Triton: pip install triton "
                              "(pinned in requirements.txt)")
        saved = os.environ.get("TRITON_INTERPRET")
        if interpreted():
            os.environ["TRITON_INTERPRET"] = "1"          # read when a kernel is decorated
        try:
            globals()["_add"] = triton.jit(_add)           # the kernels call it by name
            _BUILT.update(advantages=triton.jit(group_advantages_kernel),
                          loss=triton.jit(grpo_loss_kernel))
        finally:
            if saved is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved
    return _BUILT


def _next_power_of_two(n):
    return 1 << max(0, (n - 1).bit_length())


def group_advantages_triton(rewards, eps=1e-8, *, scale="group", ddof=0, baseline="mean"):
    r"""Group advantages in one Triton kernel: :func:`grpo_lab.torch.group_advantages`.

    .. math::

        A_{b,i} = c\,\frac{r_{b,i} - \bar r_b}{\operatorname{std}_b + \varepsilon},
        \qquad c = 1 \text{ (mean) or } G / (G - 1) \text{ (leave-one-out)}

    Same arguments and checks; ``scale="group"`` only (``"batch"`` needs all rewards before the
    first write, ``"none"`` no std: the torch mirror does both). Rewards of float64 beyond
    2**500 in size go to the torch mirror, whose rescale keeps their squares finite.

    >>> import torch
    >>> group_advantages_triton(torch.tensor([[1.0, 0.0, 1.0, 0.0]]))
    tensor([[ 1., -1.,  1., -1.]])
    """
    r, out_dtype, eps, scale, ddof, baseline = check_group_advantages_arguments(
        rewards, eps, scale, ddof, baseline)
    check_choice("scale", scale, ("group",))
    B, G = r.shape
    if r.dtype == torch.float64 and float(r.abs().max()) > 2.0 ** 500:
        return group_advantages(rewards, eps, scale=scale, ddof=ddof, baseline=baseline)
    r = r.to(out_dtype if out_dtype != torch.float64 or r.dtype.is_floating_point
             else torch.float64).contiguous()
    out = torch.empty_like(r)
    c = G / (G - 1) if baseline == "leave_one_out" else 1.0
    BLOCK_G = _next_power_of_two(G)
    BLOCK_B = max(1, min(_next_power_of_two(B), 4096 // BLOCK_G))
    grid = ((B + BLOCK_B - 1) // BLOCK_B,)
    par = torch.tensor([eps, 1.0 / G, 1.0 / (G - ddof), c], dtype=torch.float64,
                       device=r.device)
    kernels()["advantages"][grid](r, out, B, G, G, par, BLOCK_B=BLOCK_B, BLOCK_G=BLOCK_G)
    return cast_result("rewards", "advantages", out, out_dtype)


class TritonGRPOLoss(torch.autograd.Function):
    """Forward: one kernel writes the gradient and per-program sums. Backward: one multiply."""

    @staticmethod
    def forward(ctx, logp, old, ref, adv, mask, w, options):
        eps_low, eps_high, beta = options
        n, T = logp.numel(), logp.shape[1]
        grad = torch.empty_like(logp)
        programs = (n + BLOCK_TOKENS - 1) // BLOCK_TOKENS
        sums = torch.empty((programs, 7), dtype=torch.float64, device=logp.device)
        kernels()["loss"][(programs,)](
            logp, old, logp if ref is None else ref, adv, mask, w, grad, sums, n, T,
            torch.tensor([eps_low, eps_high, beta, MAX_LOG_RATIO], dtype=torch.float64,
                         device=logp.device), HAS_REF=ref is not None,
            PER_TOKEN=adv.shape[1] != 1 or T == 1, BLOCK=BLOCK_TOKENS)
        ctx.save_for_backward(grad)
        sums = sums.sum(0)                                           # (7,)
        diagnostics = sums[:6].clone()
        ctx.mark_non_differentiable(diagnostics)
        return sums[6].to(logp.dtype), diagnostics

    @staticmethod
    def backward(ctx, grad_loss, grad_sums):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None, None, None, None


def grpo_loss_triton(logp, old_logp, ref_logp, adv, mask, *, eps_low=0.2, eps_high=None,
                     beta=0.04, agg="grpo"):
    r"""The GRPO loss and its gradient in one Triton kernel: :func:`grpo_lab.torch.grpo_loss`.

    Same arguments, checks, result and diagnostics for the k3 estimator at token level (the
    settings of DeepSeekMath's GRPO); the gradient reaches ``logp`` only. Each token's loss
    and derivative are computed where its five inputs are loaded, and the loss comes back as
    per-program sums: one read of the inputs, one write of the (N, T) gradient.

    >>> import torch
    >>> logp = torch.log(torch.full((4, 3), 0.5)).requires_grad_()
    >>> adv, mask = torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.ones(4, 3)
    >>> loss, diag = grpo_loss_triton(logp, logp.detach(), logp.detach(), adv, mask)
    >>> loss.backward(); logp.grad[0]         # -A r w: each of row 0's 3 tokens weighs 1 / 12
    tensor([-0.0833, -0.0833, -0.0833])
    """
    x = check_loss_arguments(logp, old_logp, ref_logp, adv, mask, eps_low=eps_low,
                             eps_high=eps_high, beta=beta, kl="k3", agg=agg, level="token")
    for name, t in (("old_logp", old_logp), ("ref_logp", ref_logp), ("adv", adv), ("mask", mask)):
        if t is not None and t.requires_grad:
            raise ValueError(f"{name}: expected a tensor that does not require grad (the "
                             f"Triton loss differentiates logp only; detach it), got one that does")
    N, T = logp.shape
    w = row_weights(x.lengths, x.agg, max_len=T)                     # (N,) or ()
    w = (w.expand(N) if w.dim() == 0 else w).contiguous()
    ref = None if x.ref_logp is None else x.ref_logp.contiguous()
    loss, sums = TritonGRPOLoss.apply(logp.contiguous(), x.old_logp.contiguous(), ref,
                                      x.adv.contiguous(), x.mask.contiguous(), w,
                                      (x.eps_low, x.eps_high, x.beta))
    diagnostics = diagnostic_means(dict(zip(DIAGNOSTICS, sums)), x.lengths)
    if x.ref_logp is None:
        diagnostics["mean_kl"] = None
    return cast_result("logp, old_logp, ref_logp, adv", "loss", loss, x.out_dtype), diagnostics
