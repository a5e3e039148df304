r"""DeepSeek-R1's two rule-based rewards, as a first script would write them.

DeepSeek-AI 2025, "DeepSeek-R1", section 2.2.2: an accuracy reward (is the final answer
right?) and a format reward (is the thinking in ``<think>`` tags and the answer in
``<answer>`` tags?). Plain code (chapter 5 shows it before the hardened
:mod:`grpo_lab.rl.rewards`, and the completions that break it).
"""

import re

import numpy as np

__all__ = ["accuracy_reward", "format_reward", "normalise_then_sum"]


def accuracy_reward(o, a):
    r"""1.0 if the completion's ``<answer>`` is the reference number, else 0.0.

    .. math:: r_{acc}(o) = \mathbb 1[\,\text{answer of } o = a^\star\,]

    ======  =====  ======================================================
    Symbol  Type   Meaning
    ======  =====  ======================================================
    o       str    the completion, as the policy wrote it
    a       float  the reference answer a*
    return  float  1.0 or 0.0
    ======  =====  ======================================================

    >>> import grpo_lab as gl
    >>> gl.paper.accuracy_reward("<think>7+5</think><answer>12</answer>", 12)
    1.0
    """
    match = re.search(r"<answer>(.*?)</answer>", o, re.DOTALL)
    return float(match is not None and float(match.group(1)) == a)


def format_reward(o):
    r"""1.0 for ``<think>...</think><answer>...</answer>`` and nothing else, else 0.0.

    .. math:: r_{fmt}(o) = \mathbb 1[\,o = \texttt{<think>}\dots\texttt{</think>}
              \texttt{<answer>}\dots\texttt{</answer>}\,]

    ======  =====  ======================================================
    Symbol  Type   Meaning
    ======  =====  ======================================================
    o       str    the completion, as the policy wrote it
    return  float  1.0 or 0.0
    ======  =====  ======================================================

    >>> import grpo_lab as gl
    >>> gl.paper.format_reward("<think>7+5</think>\n<answer>12</answer>")
    1.0
    """
    pattern = r"\s*<think>.*?</think>\s*<answer>.+?</answer>\s*"
    return float(re.fullmatch(pattern, o, re.DOTALL) is not None)


def normalise_then_sum(rewards, weights, eps=1e-8):
    r"""GDPO's decoupled normalisation, plainly: each reward normalised in its group, the
    weighted sum, then normalised over the whole batch (the population std, as the book's
    ``gl.normalise_then_sum`` by default).

    .. math:: A = \operatorname{norm}_{BG}\Bigl(\sum_k w_k\,
              \operatorname{norm}_{\text{group}}\bigl(r^{(k)}\bigr)\Bigr)

    =======  =========  ======================================================
    Symbol   Shape      Meaning
    =======  =========  ======================================================
    rewards  (K, B, G)  K reward functions, each scored on B groups of G
    weights  (K,)       w_k, one weight per reward
    return   (B, G)     the advantages
    =======  =========  ======================================================

    >>> import grpo_lab as gl
    >>> gl.paper.normalise_then_sum([[[1, 0, 0, 1]], [[1, 1, 0, 1]]], [1.0, 0.5]).round(3)
    array([[ 0.953, -0.526, -1.38 ,  0.953]])
    """
    r = np.asarray(rewards, dtype=float)                                  # (K, B, G)
    A = (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + eps)   # per group
    s = np.tensordot(np.asarray(weights, dtype=float), A, axes=1)         # (B, G)
    return (s - s.mean()) / (s.std() + eps)                               # over the batch
