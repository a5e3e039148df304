r"""DeepSeek-R1's two rule-based rewards, as a first script would write them.

DeepSeek-AI 2025, "DeepSeek-R1", section 2.2.2: an accuracy reward (is the final answer
right?) and a format reward (is the thinking in ``<think>`` tags and the answer in
``<answer>`` tags?). Plain code (chapter 5 shows it before the hardened
:mod:`grpo_lab.rl.rewards`, and the completions that break it).
"""

import re

__all__ = ["accuracy_reward", "format_reward"]


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
