r"""The policy loss as the papers write it: PPO's clipped surrogate, the aggregations, GRPO.

Plain code (chapter 2 shows it before the hardened :mod:`grpo_lab.core.surrogate`,
:mod:`grpo_lab.core.aggregation` and :mod:`grpo_lab.core.loss`). Every array is (N, T): N
completions (N = B*G), T tokens; ``mask`` is 1 on a completion's tokens, 0 on padding.
"""

import numpy as np

__all__ = ["aggregate_dapo", "aggregate_dr_grpo", "aggregate_grpo", "clipped_surrogate_loss",
           "grpo_loss", "sequence_ratio"]


def clipped_surrogate_loss(logp, old_logp, A, eps_low=0.2, eps_high=0.2):
    r"""PPO's clipped surrogate, per token, as a loss (Schulman et al. 2017, eq. 7).

    .. math::

        r_t = \frac{\pi_\theta(o_t)}{\pi_{old}(o_t)}, \qquad
        \ell_t = -\min\big(r_t A_t,\ \operatorname{clip}(r_t, 1-\varepsilon_{low},
                 1+\varepsilon_{high}) A_t\big)

    ========  ========  ==================================================
    Symbol    Shape     Meaning
    ========  ========  ==================================================
    logp      (N, T)    log pi_theta(o_t), the policy being trained
    old_logp  (N, T)    log pi_old(o_t), the policy that sampled o
    A         (N, T)    advantage per token ((N, 1) broadcasts a sequence's)
    eps_low   scalar    lower clip (0.2); eps_high the upper (DAPO: 0.28)
    return    (N, T)    per-token loss
    ========  ========  ==================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.clipped_surrogate_loss(np.log([[1.0, 1.5]]), np.zeros((1, 2)), np.ones((1, 2)))
    array([[-1. , -1.2]])
    """
    r = np.exp(logp - old_logp)                                        # (N, T) the ratio
    return -np.minimum(r * A, np.clip(r, 1 - eps_low, 1 + eps_high) * A)


def sequence_ratio(logp, old_logp, mask):
    r"""GSPO's sequence ratio s_i, normalised by length (Zheng et al. 2025).

    .. math::

        s_i = \Big(\frac{\pi_\theta(o_i)}{\pi_{old}(o_i)}\Big)^{1/|o_i|}
            = \exp\Big(\frac{1}{|o_i|} \sum_t \log\frac{\pi_\theta(o_{i,t})}{\pi_{old}(o_{i,t})}\Big)

    ========  ========  ==================================================
    Symbol    Shape     Meaning
    ========  ========  ==================================================
    logp      (N, T)    log pi_theta(o_t)
    old_logp  (N, T)    log pi_old(o_t)
    mask      (N, T)    1 on a completion's tokens
    return    (N,)      one ratio per completion
    ========  ========  ==================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.sequence_ratio(np.log([[2.0, 0.5]]), np.zeros((1, 2)), np.ones((1, 2)))
    array([1.])
    """
    return np.exp(((logp - old_logp) * mask).sum(axis=-1) / mask.sum(axis=-1))


def aggregate_grpo(loss, mask):
    r"""DeepSeekMath's aggregation (eq. 3): a mean over each completion's tokens, then over them.

    .. math:: \mathcal L = \frac1G \sum_{i=1}^G \frac{1}{|o_i|} \sum_{t=1}^{|o_i|} \ell_{i,t}

    ======  ======  ======================================================
    Symbol  Shape   Meaning
    ======  ======  ======================================================
    loss    (N, T)  per-token loss
    mask    (N, T)  1 on a completion's tokens; |o_i| is its row sum
    return  scalar  the loss
    ======  ======  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.aggregate_grpo(np.array([[1.0, 0, 0], [0, 0, 0]]), np.array([[1, 0, 0], [1, 1, 1]]))
    np.float64(0.5)
    """
    return ((loss * mask).sum(axis=-1) / mask.sum(axis=-1)).mean()


def aggregate_dapo(loss, mask):
    r"""DAPO's token-level loss (Yu et al. 2025, section 3.3; TRL's ``dapo`` and ``bnpo``).

    .. math:: \mathcal L = \frac{1}{\sum_i |o_i|} \sum_{i=1}^G \sum_{t=1}^{|o_i|} \ell_{i,t}

    ======  ======  ======================================================
    Symbol  Shape   Meaning
    ======  ======  ======================================================
    loss    (N, T)  per-token loss
    mask    (N, T)  1 on a completion's tokens
    return  scalar  the loss: every token of the batch weighs the same
    ======  ======  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.aggregate_dapo(np.array([[1.0, 0, 0], [0, 0, 0]]), np.array([[1, 0, 0], [1, 1, 1]]))
    np.float64(0.25)
    """
    return (loss * mask).sum() / mask.sum()


def aggregate_dr_grpo(loss, mask, max_len):
    r"""Dr. GRPO's aggregation (Liu et al. 2025): the token sum over a constant, G * max_len.

    .. math:: \mathcal L = \frac{1}{G \cdot \text{max\_len}} \sum_{i=1}^G \sum_{t=1}^{|o_i|} \ell_{i,t}

    =======  ======  =====================================================
    Symbol   Shape   Meaning
    =======  ======  =====================================================
    loss     (N, T)  per-token loss
    mask     (N, T)  1 on a completion's tokens
    max_len  int     the generation limit (TRL's max_completion_length)
    return   scalar  the loss: no length in the normaliser
    =======  ======  =====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.aggregate_dr_grpo(np.array([[1.0, 0], [0, 0]]), np.array([[1, 0], [1, 1]]), 2)
    np.float64(0.25)
    """
    return (loss * mask).sum() / (loss.shape[0] * max_len)


def grpo_loss(logp, old_logp, ref_logp, A, mask, eps=0.2, beta=0.04):
    r"""The whole GRPO loss: DeepSeekMath (Shao et al. 2024) eq. 3 with eq. 4's KL, negated.

    .. math::

        \mathcal J = \frac1G \sum_{i=1}^G \frac{1}{|o_i|} \sum_{t=1}^{|o_i|}
            \Big\{ \min\big[r_{i,t} \hat A_{i,t},\
            \operatorname{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon) \hat A_{i,t}\big]
            - \beta\, \mathbb D_{KL}[\pi_\theta \| \pi_{ref}] \Big\}, \qquad
        \mathbb D_{KL} = \frac{\pi_{ref}}{\pi_\theta} - \log\frac{\pi_{ref}}{\pi_\theta} - 1

    ========  ======  ====================================================
    Symbol    Shape   Meaning
    ========  ======  ====================================================
    logp      (N, T)  log pi_theta(o_{i,t}), N = B*G completions
    old_logp  (N, T)  log pi_old(o_{i,t}), the policy that sampled them
    ref_logp  (N, T)  log pi_ref(o_{i,t}), the frozen reference
    A         (N,)    one advantage per completion (chapter 1), every token
    mask      (N, T)  1 on a completion's tokens; |o_i| is its row sum
    eps       scalar  clip range (0.2); beta the KL weight (0.04)
    return    scalar  the loss -J, to minimise
    ========  ======  ====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> lp, A, m = np.log(np.full((2, 2), 0.5)), np.array([1.0, 0.0]), np.ones((2, 2))
    >>> float(gl.paper.grpo_loss(lp, lp, lp, A, m))        # ratio 1, no KL: -mean(A)
    -0.5
    """
    r = np.exp(logp - old_logp)                                        # (N, T) the ratio
    A = A[:, None]                                                     # (N, 1) every token
    surrogate = np.minimum(r * A, np.clip(r, 1 - eps, 1 + eps) * A)    # (N, T) PPO's min
    kl = np.exp(ref_logp - logp) - (ref_logp - logp) - 1               # (N, T) eq. 4, k3
    J = (((surrogate - beta * kl) * mask).sum(axis=-1) / mask.sum(axis=-1)).mean()
    return -J
