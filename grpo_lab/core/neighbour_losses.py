r"""GRPO's neighbours on the loss side: CISPO's clipped IS weight, SAPO's soft gate.

Beside :func:`grpo_lab.clipped_surrogate_loss` (chapter 2), each replaces PPO's clip,
:math:`-\min(r A, \operatorname{clip}(r) A)`, with one other line:

* :func:`cispo_weight` and :func:`cispo_loss`: the weight is clipped and held constant, and the
  gradient flows through :math:`\log\pi_\theta` instead, so no token's gradient is dropped
  (MiniMax-M1, 2025, arXiv 2506.13585; TRL's and verl's ``cispo``);
* :func:`sapo_gate` and :func:`sapo_loss`: a smooth sigmoid gate instead of the hard clip
  (Soft Adaptive Policy Optimization, Gao et al. 2025, arXiv 2511.20347; TRL's and verl's
  ``sapo``).

GSPO's sequence weight (Zheng et al. 2025, arXiv 2507.18071) is :func:`grpo_lab.sequence_ratio`
and ``gl.grpo_loss(..., level="sequence")``, kept as they are. All functions here return
per-token losses or weights (N, T); :func:`grpo_lab.aggregate_loss` reduces them (TRL and verl
aggregate CISPO with ``"dapo"``, a token mean, and SAPO with ``"grpo"``).

The ratio is ``exp(logp - old_logp)`` with the log-ratio clamped to
``[-MAX_LOG_RATIO, MAX_LOG_RATIO]`` (verl clamps it to [-20, 20] in both losses); each public
function checks its arguments once (:func:`grpo_lab.core.surrogate.check_logp_pair` and
:func:`grpo_lab.core.surrogate.check_advantages`) and then runs its ``*_math``.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.surrogate import MAX_LOG_RATIO, check_advantages, check_logp_pair
from grpo_lab.numerics.dtypes import cast_result, common_dtype, working_dtype
from grpo_lab.numerics.logspace import log_ratio_math
from grpo_lab.numerics.validate import check_real

__all__ = ["check_cispo_options", "check_neighbour_loss_arguments", "check_sapo_options",
           "cispo_loss", "cispo_weight", "cispo_weight_math", "sapo_gate", "sapo_gate_math",
           "sapo_loss"]


# --- argument checks (the options are backend-neutral: the torch twin calls them too) ---------

def check_cispo_options(eps_low, eps_high):
    """``(eps_low, eps_high)``: eps_low None (no lower bound, as MiniMax-M1) or in [0, 1];
    eps_high >= 0, the weight's cap being 1 + eps_high."""
    if eps_low is not None:
        eps_low = check_real("eps_low", eps_low, minimum=0.0, maximum=1.0)
    return eps_low, check_real("eps_high", eps_high, minimum=0.0)


def check_sapo_options(tau_pos, tau_neg):
    """``(tau_pos, tau_neg)``: two temperatures > 0."""
    return (check_real("tau_pos", tau_pos, minimum=0.0, allow_equal=False),
            check_real("tau_neg", tau_neg, minimum=0.0, allow_equal=False))


def check_neighbour_loss_arguments(logp, old_logp, adv):
    """``(logp, old_logp, adv, dtype)``: the arrays in float64 (adv (N, 1) or (N, T)) and the
    result's dtype, for the losses and the gate of this module."""
    lp, old, dtype = check_logp_pair(logp, old_logp)
    a, a_dtype = check_advantages(adv, lp.shape)
    work = working_dtype(common_dtype(dtype, a_dtype))
    return lp.astype(work), old.astype(work), a.astype(work), common_dtype(dtype, a_dtype)


# --- CISPO ---------------------------------------------------------------------------------------

def cispo_weight(logp, old_logp, *, eps_low=None, eps_high=4.0):
    r"""CISPO's importance-sampling weight: the ratio, clipped (MiniMax-M1, arXiv 2506.13585).

    .. math::

        \hat r_{i,t} = \operatorname{clip}\big(r_{i,t},\ 1 - \varepsilon^{IS}_{low},\
                       1 + \varepsilon^{IS}_{high}\big), \qquad
        r_{i,t} = \frac{\pi_\theta(o_{i,t})}{\pi_{old}(o_{i,t})}

    In the loss it is held constant, :math:`\operatorname{sg}(\hat r_{i,t})` (see
    :func:`cispo_loss`); here it is a number.

    ========  ======  ===============================================================
    Symbol    Shape   Meaning
    ========  ======  ===============================================================
    logp      (N, T)  log pi_theta(o_t) of the sampled tokens (any leading axes)
    old_logp  (N, T)  log pi_old(o_t)
    eps_low   scalar  None: no lower bound (MiniMax-M1); or in [0, 1] (verl's
                      ``clip_ratio_low``, 0.2 by default there)
    eps_high  scalar  the weight is at most 1 + eps_high. 4 (a cap of 5) is the ScaleRL
                      value TRL recommends; TRL's ``epsilon_high`` is the cap itself
                      (5.0), verl's ``clip_ratio_high`` is eps_high (0.2 by default)
    return    (N, T)  the clipped weight, in the inputs' dtype
    ========  ======  ===============================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.neighbours.cispo_weight(np.log([[0.5, 1.0, 9.0]]), np.zeros((1, 3)))
    array([[0.5, 1. , 5. ]])
    >>> gl.neighbours.cispo_weight(np.log([[0.5, 1.0, 9.0]]), np.zeros((1, 3)), eps_low=0.2, eps_high=0.2)
    array([[0.8, 1. , 1.2]])
    """
    lp, old, dtype = check_logp_pair(logp, old_logp)                # (N, T) each
    eps_low, eps_high = check_cispo_options(eps_low, eps_high)
    work = working_dtype(dtype)
    w = cispo_weight_math(lp.astype(work), old.astype(work), eps_low, eps_high)
    return cast_result("logp, old_logp", "weights", w, dtype)


def cispo_weight_math(logp, old_logp, eps_low, eps_high):
    """:func:`cispo_weight` on checked float arrays and options: (N, T) in their dtype."""
    ratio = np.exp(log_ratio_math(logp, old_logp, MAX_LOG_RATIO))   # (N, T) pi_theta / pi_old
    low = 0.0 if eps_low is None else 1 - eps_low                   # no lower bound: r >= 0
    return np.clip(ratio, low, 1 + eps_high)                        # (N, T) r_hat


def cispo_loss(logp, old_logp, adv, *, eps_low=None, eps_high=4.0):
    r"""CISPO's per-token loss: the clipped IS weight, held constant, times A log pi.

    MiniMax-M1 (2025, arXiv 2506.13585), the CISPO objective, as a loss to minimise:

    .. math::

        \ell_{i,t} = -\operatorname{sg}(\hat r_{i,t})\, \hat A_{i,t}\,
                     \log\pi_\theta(o_{i,t} \mid q, o_{i,<t}), \qquad
        \frac{\partial \ell_{i,t}}{\partial \log\pi_\theta(o_{i,t})} = -\hat r_{i,t} \hat A_{i,t}

    Against GRPO's :math:`-\min(r A, \operatorname{clip}(r) A)`, whose gradient is 0 on a
    clipped token, CISPO's gradient is never 0: a token whose ratio ran past the cap still
    gets :math:`-(1+\varepsilon_{high}) A`. The value itself is not a meaningful number (it
    is the log-prob, weighted); only its gradient is. The mean of the value over tokens is
    what TRL and verl aggregate (TRL's ``loss_type="cispo"``: a token mean, ``"dapo"``).

    ========  ===============  ======================================================
    Symbol    Shape            Meaning
    ========  ===============  ======================================================
    logp      (N, T)           log pi_theta(o_t)
    old_logp  (N, T)           log pi_old(o_t)
    adv       (N,) or (N, T)   per sequence (broadcast over its tokens) or per token
    eps_low   scalar           see :func:`cispo_weight` (None: no lower bound)
    eps_high  scalar           the weight's cap is 1 + eps_high (4)
    return    (N, T)           per-token loss, in the common dtype of the inputs
    ========  ===============  ======================================================

    On tensors, ``grpo_lab.torch.neighbours.cispo_loss`` detaches the weight, so autograd
    gives the gradient above.

    >>> import numpy as np, grpo_lab as gl
    >>> lp = np.log([[0.5, 0.5]])
    >>> gl.neighbours.cispo_loss(lp, lp - np.log([[1.0, 9.0]]), [1.0]).round(4)   # ratios 1, 9
    array([[0.6931, 3.4657]])
    """
    lp, old, a, dtype = check_neighbour_loss_arguments(logp, old_logp, adv)
    eps_low, eps_high = check_cispo_options(eps_low, eps_high)
    w = cispo_weight_math(lp, old, eps_low, eps_high)               # (N, T) sg(r_hat)
    with np.errstate(over="ignore"):                                # refused by name below
        loss = -w * a * lp                                          # (N, T) -sg(r_hat) A log pi
    return cast_result("logp, old_logp, adv", "per-token losses", loss, dtype)


# --- SAPO ----------------------------------------------------------------------------------------

def sapo_gate(logp, old_logp, adv, *, tau_pos=1.0, tau_neg=1.05):
    r"""SAPO's soft gate, the smooth stand-in for PPO's clipped ratio (arXiv 2511.20347).

    .. math::

        f_{i,t}(r) = \sigma\big(\tau_{i,t}\,(r - 1)\big)\,\frac{4}{\tau_{i,t}}, \qquad
        \tau_{i,t} = \tau_{pos} \text{ if } \hat A_{i,t} > 0 \text{, else } \tau_{neg}

    At r = 1 the gate is 2 / tau and its slope is 1, as the ratio's is; its slope
    :math:`f'(r) = 4\sigma(1 - \sigma)` falls smoothly to 0 as r leaves 1, where the clip cuts
    it to 0 at a step. ``tau_neg > tau_pos`` makes the gate fall faster for negative
    advantages, whose updates the paper finds the less stable.

    ========  ===============  ======================================================
    Symbol    Shape            Meaning
    ========  ===============  ======================================================
    logp      (N, T)           log pi_theta(o_t)
    old_logp  (N, T)           log pi_old(o_t)
    adv       (N,) or (N, T)   only its sign is read: it picks the temperature
    tau_pos   scalar           > 0; 1.0 (TRL's ``sapo_temperature_pos``)
    tau_neg   scalar           > 0; 1.05 (TRL's ``sapo_temperature_neg``)
    return    (N, T)           f(r), in the common dtype of the inputs
    ========  ===============  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.neighbours.sapo_gate(np.log([[1.0, 3.0]]), np.zeros((1, 2)), [1.0]).round(4)
    array([[2.    , 3.5232]])
    """
    lp, old, a, dtype = check_neighbour_loss_arguments(logp, old_logp, adv)
    tau_pos, tau_neg = check_sapo_options(tau_pos, tau_neg)
    return cast_result("logp, old_logp, adv", "gates", sapo_gate_math(lp, old, a, tau_pos, tau_neg),
                       dtype)


def sapo_gate_math(logp, old_logp, adv, tau_pos, tau_neg):
    """:func:`sapo_gate` on checked float arrays and options: f(r) (N, T) in their dtype."""
    ratio = np.exp(log_ratio_math(logp, old_logp, MAX_LOG_RATIO))   # (N, T) pi_theta / pi_old
    tau = np.where(adv > 0, tau_pos, tau_neg)                       # (N, T) by the sign of A
    sigma = np.exp(-np.logaddexp(0.0, -tau * (ratio - 1)))          # sigma(tau (r - 1)), no overflow
    return sigma * (4.0 / tau)                                      # (N, T) f(r)


def sapo_loss(logp, old_logp, adv, *, tau_pos=1.0, tau_neg=1.05):
    r"""SAPO's per-token loss: the soft gate times the advantage, negated.

    Gao et al. 2025, "Soft Adaptive Policy Optimization" (arXiv 2511.20347), as a loss:

    .. math::

        \ell_{i,t} = -f_{i,t}(r_{i,t})\, \hat A_{i,t}, \qquad
        \frac{\partial \ell_{i,t}}{\partial \log\pi_\theta(o_{i,t})}
            = -4\,\sigma_{i,t}(1 - \sigma_{i,t})\, r_{i,t}\, \hat A_{i,t}

    with :func:`sapo_gate`'s f and :math:`\sigma_{i,t} = \sigma(\tau_{i,t}(r_{i,t} - 1))`.
    GRPO's line :math:`-\min(r A, \operatorname{clip}(r) A)` becomes :math:`-f(r) A`: on
    the first update (r = 1) the gradient is GRPO's, -A; away from it, it fades instead of
    stopping. TRL and verl aggregate it per sequence, then over sequences (``"grpo"``).
    TRL 1.16.0 builds the temperatures with ``torch.where`` on two Python floats, so they are
    float32 even for float64 log-probs (1.05 becomes 1.0499999523); verl keeps the inputs'
    dtype (``tests/reference/test_neighbours.py`` measures both).

    ========  ===============  ======================================================
    Symbol    Shape            Meaning
    ========  ===============  ======================================================
    logp      (N, T)           log pi_theta(o_t)
    old_logp  (N, T)           log pi_old(o_t)
    adv       (N,) or (N, T)   per sequence (broadcast over its tokens) or per token
    tau_pos   scalar           temperature where A > 0 (1.0)
    tau_neg   scalar           temperature where A <= 0 (1.05)
    return    (N, T)           per-token loss, in the common dtype of the inputs
    ========  ===============  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.neighbours.sapo_loss(np.zeros((2, 1)), np.zeros((2, 1)), [1.0, -1.0]).round(4)
    array([[-2.    ],
           [ 1.9048]])
    """
    lp, old, a, dtype = check_neighbour_loss_arguments(logp, old_logp, adv)
    tau_pos, tau_neg = check_sapo_options(tau_pos, tau_neg)
    with np.errstate(over="ignore"):                                # refused by name below
        loss = -sapo_gate_math(lp, old, a, tau_pos, tau_neg) * a    # (N, T) -f(r) A
    return cast_result("logp, old_logp, adv", "per-token losses", loss, dtype)
