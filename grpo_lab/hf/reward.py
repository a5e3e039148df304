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
from grpo_lab.rl.parsing import reference_number
from grpo_lab.rl.rewards import accuracy_reward, format_reward

__all__ = ["FORMAT_WEIGHT", "addition_rewards", "trl_reward_function"]

#: Chapter 6's weight of the format reward (``TrainConfig.format_weight``).
FORMAT_WEIGHT = 0.5


def _texts(name: str, texts) -> list:
    """``texts`` as a list of str: each a decoded completion, or (TRL's conversational form)
    a list of chat messages whose last is ``{"role": "assistant", "content": str}``."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"{name}: expected a list of decoded completions, got {describe(texts)}")
    out = []
    for i, text in enumerate(texts):
        if isinstance(text, (list, tuple)) and text and isinstance(text[-1], dict):
            text = text[-1].get("content")
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}]: expected a str, or a list of chat messages whose last "
                            f"is {{'role': 'assistant', 'content': str}}, got "
                            f"{describe(texts[i])}")
        out.append(text)
    return out


def _answers(name: str, answers, n: int) -> list:
    """One reference per completion, each checked as chapter 5's ``reference_number`` reads it."""
    if isinstance(answers, (str, bytes)) or not isinstance(answers, (list, tuple, np.ndarray)):
        raise TypeError(f"{name}: expected a list of reference answers, one per completion, "
                        f"got {describe(answers)}")
    if len(answers) != n:
        raise ValueError(f"{name}: expected one answer per completion ({n}), got "
                         f"{describe(answers)}")
    for i, answer in enumerate(answers):
        try:
            reference_number(answer)
        except (TypeError, ValueError) as err:     # "answer: expected ..." -> "answer[i]: ..."
            raise type(err)(f"{name}[{i}]: {str(err).partition(': ')[2]}") from None
    return list(answers)


def addition_rewards(texts, answers, *, format_weight: float = FORMAT_WEIGHT) -> np.ndarray:
    """One reward per completion: accuracy + ``format_weight`` * format, float64, shape (N,).

    >>> import grpo_lab.hf as glh
    >>> glh.addition_rewards(["<think></think><answer>5</answer>", "<answer>5</answer>",
    ...                       "<think></think><answer>6</answer>"], [5, 5, 5])
    array([1.5, 1. , 0.5])
    """
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts: expected a list of decoded completions, got {describe(texts)}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}]: expected a str (a decoded completion), got "
                            f"{describe(text)}")
    answers = _answers("answers", answers, len(texts))
    w = check_real("format_weight", format_weight, minimum=0.0)
    return np.array([accuracy_reward(t, a) + w * format_reward(t) for t, a in zip(texts, answers)],
                    dtype=np.float64)


def trl_reward_function(*, format_weight: float = FORMAT_WEIGHT, record: list | None = None):
    """The same reward with the signature TRL's ``GRPOTrainer`` calls:
    ``f(prompts=..., completions=..., completion_ids=..., answer=..., **kwargs) -> list[float]``
    (``trl/trainer/grpo_trainer.py``, line 1626 at TRL 1.16.0: every argument by keyword, the
    dataset's other columns among them).

    ``completions`` are strings (standard prompts) or ``[{"role": "assistant", "content":
    ...}]`` lists (conversational prompts); ``answer`` is the dataset's column of that name,
    one per completion. ``record``, a list, receives each call's ``(texts, rewards)``, so a
    test can recompute TRL's advantages from the rewards TRL was given. A bad call names the
    argument TRL passed (``completions[3]: ...``, ``answer: ...``; a dataset without an
    ``answer`` column is named as such), never a KeyError or IndexError from inside.
    """
    w = check_real("format_weight", format_weight, minimum=0.0)
    if record is not None and not isinstance(record, list):
        raise TypeError(f"record: expected a list or None, got {describe(record)}")

    def addition_reward(prompts=None, completions=None, answer=None, **kwargs):
        texts = _texts("completions", completions)
        if answer is None:
            raise TypeError("answer: expected the dataset's 'answer' column, one reference per "
                            "completion; TRL passed none (does the dataset have a column named "
                            "'answer'?)")
        answers = _answers("answer", answer, len(texts))
        if prompts is not None and (not hasattr(prompts, "__len__")
                                    or len(prompts) != len(texts)):
            raise ValueError(f"prompts: expected one prompt per completion ({len(texts)}), got "
                             f"{describe(prompts)}")
        rewards = np.array([accuracy_reward(t, a) + w * format_reward(t)
                            for t, a in zip(texts, answers)], dtype=np.float64)
        if record is not None:
            record.append((texts, rewards))
        return rewards.tolist()

    return addition_reward
