r"""Schulman's three per-token KL estimators, as the blog post writes them.

J. Schulman, "Approximating KL Divergence", 2020 (http://joschu.net/blog/kl-approx.html), with
the sampled token :math:`x \sim \pi_\theta` and :math:`\rho = \pi_{ref}(x)/\pi_\theta(x)`:

.. math::

    k_1 = -\log\rho, \qquad k_2 = \tfrac12 (\log\rho)^2, \qquad k_3 = (\rho - 1) - \log\rho

Plain code (chapter 3 shows it before the hardened :mod:`grpo_lab.core.kl`). Every function:

========  ========  ====================================================
Symbol    Shape     Meaning
========  ========  ====================================================
logp      (N, T)    log pi_theta(x_t) of the sampled tokens
ref_logp  (N, T)    log pi_ref(x_t) of the same tokens
return    (N, T)    the per-token estimate of KL(pi_theta || pi_ref)
========  ========  ====================================================
"""

import numpy as np

__all__ = ["kl_k1", "kl_k2", "kl_k3"]


def kl_k1(logp, ref_logp):
    r"""k1 = -log rho = logp - ref_logp (Schulman 2020): unbiased, often negative.

    .. math:: k_1 = -\log\frac{\pi_{ref}(x)}{\pi_\theta(x)}

    ========  ========  ====================================================
    Symbol    Shape     Meaning
    ========  ========  ====================================================
    logp      (N, T)    log pi_theta(x_t), x_t ~ pi_theta
    ref_logp  (N, T)    log pi_ref(x_t)
    return    (N, T)    k1 per token
    ========  ========  ====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.kl_k1(np.log([0.5]), np.log([0.25])).round(4)
    array([0.6931])
    """
    return logp - ref_logp


def kl_k2(logp, ref_logp):
    r"""k2 = (log rho)^2 / 2 (Schulman 2020): never negative, low variance, biased.

    .. math:: k_2 = \tfrac12 \Big(\log\frac{\pi_{ref}(x)}{\pi_\theta(x)}\Big)^2

    ========  ========  ====================================================
    Symbol    Shape     Meaning
    ========  ========  ====================================================
    logp      (N, T)    log pi_theta(x_t), x_t ~ pi_theta
    ref_logp  (N, T)    log pi_ref(x_t)
    return    (N, T)    k2 per token
    ========  ========  ====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.kl_k2(np.log([0.5]), np.log([0.25])).round(4)
    array([0.2402])
    """
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp, ref_logp):
    r"""k3 = (rho - 1) - log rho (Schulman 2020; DeepSeekMath eq. 4): unbiased, never negative.

    .. math::

        \mathbb D_{KL}[\pi_\theta \| \pi_{ref}] = \frac{\pi_{ref}(o_t)}{\pi_\theta(o_t)}
            - \log\frac{\pi_{ref}(o_t)}{\pi_\theta(o_t)} - 1

    ========  ========  ====================================================
    Symbol    Shape     Meaning
    ========  ========  ====================================================
    logp      (N, T)    log pi_theta(x_t), x_t ~ pi_theta
    ref_logp  (N, T)    log pi_ref(x_t)
    return    (N, T)    k3 per token
    ========  ========  ====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.kl_k3(np.log([0.5]), np.log([0.25])).round(4)
    array([0.1931])
    """
    log_rho = ref_logp - logp                              # (N, T) log pi_ref / pi_theta
    return np.exp(log_rho) - log_rho - 1
