r"""Chapter 6's reward on decoded text, for the book's step and as a TRL reward function.

Taught in chapter 6b, sections "One step, from the book's functions" and "The same run in
TRL" (``chapters/06b_real_model.ipynb``). The verifiers are chapter 5's, unchanged:

.. math::  r = r_{acc} + w_{fmt}\, r_{fmt}

with :func:`grpo_lab.accuracy_reward` (the ``<answer>`` equals the sum) and
:func:`grpo_lab.format_reward` (``<think>...</think><answer>...</answer>`` and nothing else),
``format_weight`` 0.5 as in chapter 6's :class:`grpo_lab.train.TrainConfig`.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import check_real, describe
from grpo_lab.rl.rewards import accuracy_reward, format_reward

__all__ = ["FORMAT_WEIGHT", "addition_rewards", "trl_reward_function"]

#: Chapter 6's weight of the format reward (``TrainConfig.format_weight``).
FORMAT_WEIGHT = 0.5


def addition_rewards(texts, answers, *, format_weight: float = FORMAT_WEIGHT) -> np.ndarray:
    """One reward per completion: accuracy + ``format_weight`` * format, float64, shape (N,).

    >>> import grpo_lab.hf as glh
    >>> glh.addition_rewards(["<think></think><answer>5</answer>", "<answer>5</answer>",
    ...                       "<think></think><answer>6</answer>"], [5, 5, 5])
    array([1.5, 1. , 0.5])
    """
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts: expected a list of decoded completions, got {describe(texts)}")
    if isinstance(answers, str) or not hasattr(answers, "__len__") or len(answers) != len(texts):
        raise ValueError(f"answers: expected one answer per completion ({len(texts)}), got "
                         f"{describe(answers)}")
    w = check_real("format_weight", format_weight, minimum=0.0)
    return np.array([accuracy_reward(t, a) + w * format_reward(t) for t, a in zip(texts, answers)],
                    dtype=np.float64)


def trl_reward_function(*, format_weight: float = FORMAT_WEIGHT, record: list | None = None):
    """The same reward with the signature TRL's ``GRPOTrainer`` calls:
    ``f(prompts, completions, answer, **kwargs) -> list[float]``.

    ``completions`` are strings (standard prompts) or ``[{"role": "assistant", "content":
    ...}]`` lists (conversational prompts); ``answer`` is the dataset's column of that name,
    one per completion. ``record``, a list, receives each call's ``(texts, rewards)``, so a
    test can recompute TRL's advantages from the rewards TRL was given.
    """
    w = check_real("format_weight", format_weight, minimum=0.0)
    if record is not None and not isinstance(record, list):
        raise TypeError(f"record: expected a list or None, got {describe(record)}")

    def addition_reward(prompts, completions, answer, **kwargs):
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        rewards = addition_rewards(texts, list(answer), format_weight=w)
        if record is not None:
            record.append((texts, rewards))
        return rewards.tolist()

    return addition_reward
