r"""GRPO's neighbours as their papers write them: other baselines, other importance weights.

Plain code, beside :mod:`grpo_lab.core.paper.advantages` and :mod:`grpo_lab.core.paper.loss`;
the hardened twins are in :mod:`grpo_lab.core.neighbour_advantages` and
:mod:`grpo_lab.core.neighbour_losses` (``gl.neighbours``). Each changes one line of GRPO:

================================  ==============================================  ============
plain function                    paper                                           changes
================================  ==============================================  ============
``reinforce_pp_advantages``       REINFORCE++ (Hu et al. 2025), arXiv 2501.03262  the std
``remax_advantages``              ReMax (Li et al. 2023), arXiv 2310.10505        the baseline
``rloo_advantages``               RLOO (Ahmadian et al. 2024), arXiv 2402.14740   the baseline
``cispo_loss``                    MiniMax-M1 (2025), arXiv 2506.13585             the IS weight
``sapo_loss``                     SAPO (Gao et al. 2025), arXiv 2511.20347        the clip
================================  ==============================================  ============

GSPO's sequence ratio (arXiv 2507.18071) is ``gl.paper.sequence_ratio``.
"""

import numpy as np

__all__ = ["cispo_loss", "reinforce_pp_advantages", "remax_advantages", "rloo_advantages",
           "sapo_loss"]


def reinforce_pp_advantages(r, mask):
    r"""REINFORCE++'s global normalisation of outcome rewards (Hu et al. 2025, arXiv 2501.03262).

    .. math::

        A_{i,t} = r_i, \qquad
        A^{norm}_{i,t} = \frac{A_{i,t} - \operatorname{mean}_{batch}(A)}{\operatorname{std}_{batch}(A)}

    the mean and std over every token of the batch, not over a group (verl's Bessel std;
    OpenRLHF 0.11.2 whitens with the population variance, experience_maker.py:332).

    ======  ========  ====================================================
    Symbol  Shape     Meaning
    ======  ========  ====================================================
    r       (N,)      one outcome reward per completion
    mask    (N, T)    1 on a completion's tokens
    return  (N, T)    the advantage of every token; 0 on padding
    ======  ========  ====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.neighbours.reinforce_pp_advantages(np.array([1.0, 0.0]), np.ones((2, 2))).round(4)
    array([[ 0.866,  0.866],
           [-0.866, -0.866]])
    """
    m = mask.astype(bool)
    A = r[:, None] * m                                                 # (N, T) r_i on each token
    return (A - A[m].mean()) / A[m].std(ddof=1) * m                    # whitened over the batch


def remax_advantages(r, r_greedy):
    r"""ReMax's advantage: the reward minus the greedy completion's (Li et al. 2023, arXiv 2310.10505).

    .. math:: A_i = r(x, y_i) - r(x, \bar y), \qquad \bar y_t = \arg\max_v \pi_\theta(v \mid x, \bar y_{<t})

    ========  ======  ==================================================
    Symbol    Shape   Meaning
    ========  ======  ==================================================
    r         (B, G)  reward of each sampled completion of prompt b
    r_greedy  (B,)    reward of prompt b's greedy completion
    return    (B, G)  the advantage of every token of completion i
    ========  ======  ==================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.neighbours.remax_advantages(np.array([[1.0, 0.0]]), np.array([1.0]))
    array([[ 0., -1.]])
    """
    return r - r_greedy[:, None]                                       # (B, G)


def rloo_advantages(r):
    r"""RLOO's leave-one-out baseline (Ahmadian et al. 2024, arXiv 2402.14740).

    .. math:: A_i = r_i - \frac{1}{G-1} \sum_{j \ne i} r_j

    ======  ======  ======================================================
    Symbol  Shape   Meaning
    ======  ======  ======================================================
    r       (B, G)  one reward per completion; row b is prompt b's group
    return  (B, G)  the advantage of every token of completion i
    ======  ======  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.neighbours.rloo_advantages(np.array([[1.0, 0.0, 0.0]]))
    array([[ 1. , -0.5, -0.5]])
    """
    G = r.shape[-1]
    return r - (r.sum(axis=-1, keepdims=True) - r) / (G - 1)           # (B, G)


def cispo_loss(logp, old_logp, A, eps_high=4.0):
    r"""CISPO's per-token loss: a clipped, stop-gradient IS weight (MiniMax-M1, arXiv 2506.13585).

    .. math::

        \hat r_{i,t} = \operatorname{clip}(r_{i,t}, 1 - \varepsilon^{IS}_{low},
                                           1 + \varepsilon^{IS}_{high}), \qquad
        \ell_{i,t} = -\operatorname{sg}(\hat r_{i,t})\, \hat A_{i,t} \log\pi_\theta(o_{i,t})

    with no lower bound (M1 sets :math:`\varepsilon^{IS}_{low}` large). NumPy has no
    gradient: sg matters only on tensors (``grpo_lab.torch.neighbours``).

    ========  ======  ==================================================
    Symbol    Shape   Meaning
    ========  ======  ==================================================
    logp      (N, T)  log pi_theta(o_t)
    old_logp  (N, T)  log pi_old(o_t)
    A         (N, T)  advantage per token ((N, 1) broadcasts)
    eps_high  scalar  the weight is at most 1 + eps_high (4: at most 5)
    return    (N, T)  per-token loss
    ========  ======  ==================================================

    >>> import numpy as np, grpo_lab as gl
    >>> lp = np.log([[0.5, 0.5]])
    >>> gl.paper.neighbours.cispo_loss(lp, lp - np.log([[1.0, 9.0]]), np.ones((1, 1))).round(4)
    array([[0.6931, 3.4657]])
    """
    r = np.exp(logp - old_logp)                                        # (N, T) the ratio
    return -np.minimum(r, 1 + eps_high) * A * logp                     # sg(r_hat) A log pi


def sapo_loss(logp, old_logp, A, tau_pos=1.0, tau_neg=1.05):
    r"""SAPO's per-token loss: a soft gate in place of the clip (Gao et al. 2025, arXiv 2511.20347).

    .. math::

        f_{i,t}(r) = \sigma\big(\tau_{i,t} (r - 1)\big) \frac{4}{\tau_{i,t}}, \qquad
        \tau_{i,t} = \begin{cases} \tau_{pos} & \hat A_{i,t} > 0 \\ \tau_{neg} & \text{else}
        \end{cases}, \qquad \ell_{i,t} = -f_{i,t}(r_{i,t})\, \hat A_{i,t}

    ========  ======  ==================================================
    Symbol    Shape   Meaning
    ========  ======  ==================================================
    logp      (N, T)  log pi_theta(o_t)
    old_logp  (N, T)  log pi_old(o_t)
    A         (N, T)  advantage per token ((N, 1) broadcasts)
    tau_pos   scalar  temperature where A > 0 (1.0); tau_neg where A <= 0
    return    (N, T)  per-token loss
    ========  ======  ==================================================

    >>> import numpy as np, grpo_lab as gl
    >>> lp = np.zeros((1, 2))
    >>> gl.paper.neighbours.sapo_loss(lp, lp, np.array([[1.0, -1.0]])).round(4)   # r = 1: -2A/tau
    array([[-2.    ,  1.9048]])
    """
    r = np.exp(logp - old_logp)                                        # (N, T) the ratio
    tau = np.where(A > 0, tau_pos, tau_neg)                            # (N, T)
    gate = 4 / tau / (1 + np.exp(-tau * (r - 1)))                      # sigma(tau (r-1)) 4/tau
    return -gate * A
