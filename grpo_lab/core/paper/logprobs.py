r"""Log-probabilities as a textbook writes them: the log-softmax, the picked token, the sum.

Plain code (chapter 4 shows it before the hardened :mod:`grpo_lab.numerics.logprobs`).
"""

import numpy as np

__all__ = ["log_softmax", "sequence_logprob_sum", "token_logprobs"]


def log_softmax(z):
    r"""Log-probabilities over the last axis: the softmax, in logs.

    .. math::

        \log \pi(v) = z_v - \log \sum_{w=1}^{V} e^{z_w}

    ======  ========  ======================================================
    Symbol  Shape     Meaning
    ======  ========  ======================================================
    z       (..., V)  logits over a vocabulary of V tokens
    return  (..., V)  log-probabilities
    ======  ========  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.log_softmax(np.array([0.0, np.log(3.0)])).round(4)
    array([-1.3863, -0.2877])
    """
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def token_logprobs(z, x):
    r"""``log pi(x_t)`` of each sampled token, the ``logp`` every GRPO loss starts from.

    .. math::

        \texttt{logp}_{n,t} = \log \pi(x_{n,t}) = z_{n,t,x_{n,t}} - \log \sum_{v} e^{z_{n,t,v}}

    ======  ===========  ====================================================
    Symbol  Shape        Meaning
    ======  ===========  ====================================================
    z       (N, T, V)    logits at each of T positions
    x       (N, T)       the sampled token ids
    return  (N, T)       their log-probabilities
    ======  ===========  ====================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.token_logprobs(np.log([[[1.0, 3.0], [2.0, 2.0]]]), np.array([[1, 0]])).round(4)
    array([[-0.2877, -0.6931]])
    """
    return np.take_along_axis(log_softmax(z), x[..., None], axis=-1)[..., 0]


def sequence_logprob_sum(logp, mask):
    r"""``log pi(o)`` of each completion: the chain rule, its token log-probs summed.

    .. math::

        \log \pi(o_n) = \sum_{t=1}^{T} m_{n,t} \log \pi(o_{n,t} \mid q, o_{n,<t})

    ======  ========  ======================================================
    Symbol  Shape     Meaning
    ======  ========  ======================================================
    logp    (N, T)    per-token log-probs
    mask    (N, T)    1 on real tokens, 0 on padding
    return  (N,)      one sum per completion
    ======  ========  ======================================================

    >>> import numpy as np, grpo_lab as gl
    >>> gl.paper.sequence_logprob_sum(np.array([[-1.0, -2.0, -9.0]]), np.array([[1, 1, 0]]))
    array([-3.])
    """
    return (logp * mask).sum(axis=-1)
