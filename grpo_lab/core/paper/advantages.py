r"""Advantages as the papers write them: GRPO's group statistics, PPO's GAE, process supervision.

Plain code (chapter 1, 2 and 8 show it before the hardened :mod:`grpo_lab.core.advantages`,
:mod:`grpo_lab.core.gae` and :mod:`grpo_lab.core.process`).
"""

import numpy as np

__all__ = ["gae", "group_advantages", "process_advantages"]


def group_advantages(r, eps=1e-8):
    r"""GRPO's outcome-supervision advantage (DeepSeekMath, Shao et al. 2024, section 4.1.2).

    .. math::

        \hat A_{i,t} = \tilde r_i = \frac{r_i - \operatorname{mean}(\mathbf r)}
                                          {\operatorname{std}(\mathbf r) + \varepsilon}

    ======  ======  ==============================================================
    Symbol  Shape   Meaning
    ======  ======  ==============================================================
    r       (B, G)  one reward per completion; row b is prompt b's group of G
    eps     scalar  epsilon, added to the (population) std
    return  (B, G)  the advantage of every token of completion i
    ======  ======  ==============================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.group_advantages(np.array([[1.0, 0.0, 1.0, 0.0]]))
    array([[ 0.99999998, -0.99999998,  0.99999998, -0.99999998]])
    """
    mean = r.mean(axis=-1, keepdims=True)                  # (B, 1)
    std = r.std(axis=-1, keepdims=True)                    # (B, 1) population std
    return (r - mean) / (std + eps)                        # (B, G)


def gae(r, V, gamma=1.0, lam=1.0):
    r"""PPO's advantages from a critic: GAE-lambda (Schulman et al. 2016, eqs. 11-16).

    .. math::

        \delta_t = r_t + \gamma V(s_{t+1}) - V(s_t), \qquad
        \hat A_t = \sum_{l \ge 0} (\gamma\lambda)^l \delta_{t+l}
                 = \delta_t + \gamma\lambda \hat A_{t+1}

    ======  =================  ========================================================
    Symbol  Shape              Meaning
    ======  =================  ========================================================
    r       (N, T)             reward after each step
    V       (N, T+1)           the critic's V(s_0) .. V(s_T); V(s_T) bootstraps the end
    gamma   scalar             discount
    lam     scalar             GAE's lambda
    return  (N, T), (N, T)     the advantages and the critic's targets A + V(s_t)
    ======  =================  ========================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.gae(np.array([0.0, 0.0, 1.0]), np.array([0.5, 0.5, 0.5, 0.0]), lam=0.5)[0]
    array([0.125, 0.25 , 0.5  ])
    """
    delta = r + gamma * V[..., 1:] - V[..., :-1]           # (N, T) TD errors
    A = np.zeros_like(delta)                               # (N, T)
    running = 0.0                                          # A_{T} = 0 after the last step
    for t in reversed(range(r.shape[-1])):
        running = delta[..., t] + gamma * lam * running    # A_t = delta_t + gamma lam A_{t+1}
        A[..., t] = running
    return A, A + V[..., :-1]


def process_advantages(r, mask, eps=1e-8):
    r"""Process supervision's advantages (DeepSeekMath, Shao et al. 2024, section 4.1.3).

    .. math::

        \tilde r_{i,j} = \frac{r_{i,j} - \operatorname{mean}(\mathbf R)}
                              {\operatorname{std}(\mathbf R) + \varepsilon}, \qquad
        \hat A_{i,j} = \sum_{j' \ge j} \tilde r_{i,j'}

    with :math:`\mathbf R` every real step of every completion of the group.

    ======  =========  ========================================================
    Symbol  Shape      Meaning
    ======  =========  ========================================================
    r       (B, G, K)  reward of step j of completion i of prompt b
    mask    (B, G, K)  1 for a real step, 0 for padding (steps first)
    eps     scalar     epsilon, added to the std of R
    return  (B, G, K)  the advantage of every token of step j; 0 on padding
    ======  =========  ========================================================

    >>> import numpy as np, grpo_lab as gl
    >>> r, m = np.array([[[1.0, 1.0], [1.0, 0.0]]]), np.ones((1, 2, 2))
    >>> gl.paper.process_advantages(r, m).round(4)
    array([[[ 1.1547,  0.5774],
            [-1.1547, -1.7321]]])
    """
    n = mask.sum(axis=(1, 2), keepdims=True)                           # (B, 1, 1) |R|
    mean = (r * mask).sum(axis=(1, 2), keepdims=True) / n              # (B, 1, 1)
    std = np.sqrt((((r - mean) * mask) ** 2).sum(axis=(1, 2), keepdims=True) / n)
    r_norm = (r - mean) / (std + eps) * mask                           # (B, G, K)
    return np.flip(np.cumsum(np.flip(r_norm, -1), -1), -1)             # sum over j' >= j
