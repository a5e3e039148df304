r"""GRPO's neighbours on tensors: :mod:`grpo_lab.core.neighbours`, step for step.

The same names, arguments, equations and results as the NumPy functions
(:mod:`grpo_lab.core.neighbour_advantages`, :mod:`grpo_lab.core.neighbour_losses`), on tensors
on CPU or CUDA, and differentiable in ``logp``:

* :func:`cispo_loss` detaches its clipped weight, so autograd gives
  :math:`\partial \ell / \partial \log\pi_\theta = -\hat r A` on every token, a clipped one
  included (MiniMax-M1's sg; TRL's and verl's ``.detach()``);
* :func:`sapo_loss` differentiates through its gate: :math:`-4\sigma(1-\sigma) r A`.

The losses work in float32 (float64 for float64 inputs, :func:`working_dtype`); the two
advantage functions work on B*G rewards, so they always work in float64 and return the
rewards' dtype. Reached as ``grpo_lab.torch.neighbours`` (``glt.neighbours``).
"""

from __future__ import annotations

import torch

from grpo_lab.core.neighbour_advantages import check_reinforce_pp_arguments
from grpo_lab.core.neighbour_losses import check_cispo_options, check_sapo_options
from grpo_lab.torch.surrogate import check_adv, check_logp_pair, probability_ratio
from grpo_lab.numerics.validate import (as_float_array, as_mask, cast_result, check_shape,
                                        common_dtype, same_device, working_dtype)

__all__ = ["check_loss_arguments", "cispo_loss", "cispo_weight", "reinforce_pp_advantages",
           "remax_advantages", "sapo_gate", "sapo_loss"]


def check_loss_arguments(logp, old_logp, adv):
    """``(logp, old_logp, adv, dtype)``: tensors in the working dtype (adv (N, 1) or (N, T))
    and the result's dtype."""
    lp, old, dtype = check_logp_pair(logp, old_logp)
    a, a_dtype = check_adv(adv, lp)
    dtype = common_dtype(dtype, a_dtype)
    work = working_dtype(dtype)
    return lp.to(work), old.to(work), a.to(work), dtype


# --- CISPO ---------------------------------------------------------------------------------------

def _cispo_weight(lp, old, eps_low, eps_high):
    ratio = probability_ratio(lp - old)                               # (N, T) pi / pi_old
    low = 0.0 if eps_low is None else 1 - eps_low
    return torch.clamp(ratio, low, 1 + eps_high)                      # (N, T) r_hat


def cispo_weight(logp, old_logp, *, eps_low=None, eps_high=4.0):
    r"""CISPO's clipped IS weight :math:`\hat r = \operatorname{clip}(r, 1-\varepsilon_{low},
    1+\varepsilon_{high})` (see :func:`grpo_lab.core.neighbour_losses.cispo_weight`), detached:
    in CISPO it is a constant.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.neighbours.cispo_weight(torch.log(torch.tensor([[0.5, 9.0]])), torch.zeros(1, 2))
    tensor([[0.5000, 5.0000]])
    """
    lp, old, dtype = check_logp_pair(logp, old_logp)
    eps_low, eps_high = check_cispo_options(eps_low, eps_high)
    work = working_dtype(dtype)
    w = _cispo_weight(lp.to(work), old.to(work), eps_low, eps_high).detach()
    return cast_result("logp, old_logp", "weights", w, dtype)


def cispo_loss(logp, old_logp, adv, *, eps_low=None, eps_high=4.0):
    r"""CISPO's per-token loss :math:`-\operatorname{sg}(\hat r) A \log\pi_\theta` (N, T); see
    :func:`grpo_lab.core.neighbour_losses.cispo_loss`. Its gradient in ``logp`` is
    :math:`-\hat r A`, token by token.

    >>> import torch, grpo_lab.torch as glt
    >>> lp = torch.log(torch.tensor([[0.5, 0.5]])).requires_grad_()
    >>> loss = glt.neighbours.cispo_loss(lp, lp.detach() - torch.log(torch.tensor([[1.0, 9.0]])),
    ...                                  torch.tensor([1.0]))
    >>> loss.sum().backward(); lp.grad                   # -r_hat A: -1, then the cap, -5
    tensor([[-1., -5.]])
    """
    lp, old, a, dtype = check_loss_arguments(logp, old_logp, adv)
    eps_low, eps_high = check_cispo_options(eps_low, eps_high)
    w = _cispo_weight(lp, old, eps_low, eps_high).detach()            # (N, T) sg(r_hat)
    return cast_result("logp, old_logp, adv", "per-token losses", -w * a * lp, dtype)


# --- SAPO ----------------------------------------------------------------------------------------

def _sapo_gate(lp, old, a, tau_pos, tau_neg):
    ratio = probability_ratio(lp - old)                               # (N, T)
    tau = torch.where(a > 0, a.new_tensor(tau_pos), a.new_tensor(tau_neg))   # (N, 1|T)
    return torch.sigmoid(tau * (ratio - 1)) * (4.0 / tau)             # (N, T) f(r)


def sapo_gate(logp, old_logp, adv, *, tau_pos=1.0, tau_neg=1.05):
    r"""SAPO's soft gate :math:`f(r) = \sigma(\tau (r - 1))\, 4/\tau` (N, T); see
    :func:`grpo_lab.core.neighbour_losses.sapo_gate`.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.neighbours.sapo_gate(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([1.0]))
    tensor([[2.]])
    """
    lp, old, a, dtype = check_loss_arguments(logp, old_logp, adv)
    tau_pos, tau_neg = check_sapo_options(tau_pos, tau_neg)
    return cast_result("logp, old_logp, adv", "gates", _sapo_gate(lp, old, a, tau_pos, tau_neg),
                       dtype)


def sapo_loss(logp, old_logp, adv, *, tau_pos=1.0, tau_neg=1.05):
    r"""SAPO's per-token loss :math:`-f(r) A` (N, T); see
    :func:`grpo_lab.core.neighbour_losses.sapo_loss`. At r = 1 its gradient in ``logp`` is
    GRPO's, -A.

    >>> import torch, grpo_lab.torch as glt
    >>> lp = torch.zeros(1, 2, requires_grad=True)
    >>> glt.neighbours.sapo_loss(lp, lp.detach(), torch.tensor([[1.0, -1.0]])).sum().backward()
    >>> lp.grad                                           # -4 sigma(0)(1 - sigma(0)) A = -A
    tensor([[-1.,  1.]])
    """
    lp, old, a, dtype = check_loss_arguments(logp, old_logp, adv)
    tau_pos, tau_neg = check_sapo_options(tau_pos, tau_neg)
    loss = -_sapo_gate(lp, old, a, tau_pos, tau_neg) * a              # (N, T)
    return cast_result("logp, old_logp, adv", "per-token losses", loss, dtype)


# --- the advantages --------------------------------------------------------------------------------

def reinforce_pp_advantages(rewards, mask=None, *, baseline="none", eps=1e-8, ddof=1):
    r"""REINFORCE++'s global normalisation (B, G), see
    :func:`grpo_lab.core.neighbour_advantages.reinforce_pp_advantages`: the NumPy reference's
    checks and equation, on a tensor (worked in float64 on its device).

    >>> import torch, grpo_lab.torch as glt
    >>> glt.neighbours.reinforce_pp_advantages(torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    tensor([[ 0.8660,  0.8660],
            [-0.8660, -0.8660]])
    """
    r, out_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)",
                                  backend="torch")
    m = None
    if mask is not None:                    # 0/1 or bools of any dtype (bfloat16 too), as bools
        m = as_mask("mask", mask, None, " of shape (B*G, T)", backend="torch")
        same_device("rewards", r, mask=m)
        m = m.detach().cpu().numpy()
    _, w, _, eps, ddof, baseline = check_reinforce_pp_arguments(
        r.detach().cpu().to(torch.float64).numpy(), m, eps, ddof, baseline)   # the one check
    x = r.to(torch.float64)                                              # (B, G)
    scale = x.abs().max().clamp(min=torch.finfo(torch.float64).tiny)     # no square overflows
    x = x / scale
    if baseline == "group_mean":
        x = (x - x[:, :1]) - (x - x[:, :1]).mean(-1, keepdim=True)       # exact 0s in a tie
    w = torch.as_tensor(w, dtype=torch.float64, device=x.device)         # (B, G) tokens each
    y = x - x.reshape(-1)[0]
    dev = y - (w * y).sum() / w.sum()                                    # x - mu
    sigma = torch.sqrt((w * dev * dev).sum() / (w.sum() - ddof))
    den = sigma + eps / scale
    adv = torch.where(den > 0, dev / torch.where(den > 0, den, 1.0), 0.0)
    return cast_result("rewards", "advantages", adv, out_dtype)


def remax_advantages(rewards, greedy_rewards):
    r"""ReMax's advantages :math:`r_{b,i} - r(x_b, \bar y_b)` (B, G), see
    :func:`grpo_lab.core.neighbour_advantages.remax_advantages`.

    >>> import torch, grpo_lab.torch as glt
    >>> glt.neighbours.remax_advantages(torch.tensor([[1.0, 0.0]]), torch.tensor([1.0]))
    tensor([[ 0., -1.]])
    """
    r, r_dtype = as_float_array("rewards", rewards, ndim=2, shape_doc=" of shape (B, G)",
                                backend="torch")
    g, g_dtype = as_float_array("greedy_rewards", greedy_rewards, shape_doc=" of shape (B,)",
                                backend="torch")
    check_shape("greedy_rewards", g, r.shape[:1], " (B,), one greedy completion per prompt "
                                                  "(row of rewards)")
    same_device("rewards", r, greedy_rewards=g)
    adv = r.to(torch.float64) - g.to(torch.float64)[:, None]             # (B, G)
    return cast_result("rewards, greedy_rewards", "advantages", adv, common_dtype(r_dtype, g_dtype))
