r"""A short supervised warm start on the answer format, before GRPO (as chapter 6 has).

Taught in chapter 6b, section "A short warm start, then GRPO on the real model"
(``chapters/06b_real_model.ipynb``).

DeepSeek-R1-Zero started GRPO from a pretrained model, which already writes text; a model
built from a seed writes noise, and an exact-match reward on noise is 0 for every sample,
so every group has zero spread and GRPO has no gradient at all. A few supervised steps on
``<think></think><answer>N</answer><eos>`` fix the format. With ``answers="random"`` (chapter 6's
choice) N is a random number, so the format is taught and the sums are left to GRPO: the
model then writes well-formed but mostly wrong answers, and the groups have reward spread.

.. math::  \mathcal L_{SFT} = -\frac{1}{\sum_{i,t} m_{i,t}} \sum_{i,t} m_{i,t}
           \log \pi_\theta(y_{i,t} \mid x_i, y_{i,<t})

the token-mean negative log-likelihood of the completion tokens only (the prompt is read, not
learned), computed with :func:`grpo_lab.hf.completion_logprobs`.
"""

from __future__ import annotations

import numpy as np
import torch

from grpo_lab.hf.batch import encode_prompts_math, left_pad_math
from grpo_lab.hf.checks import check_model, check_tokenizer, is_integer, vocab_size
from grpo_lab.hf.logprobs import completion_logprobs_math
from grpo_lab.hf.tokenizer import prompt_messages
from grpo_lab.numerics.validate import check_choice, check_int, check_real, describe
from grpo_lab.rl.parsing import ANSWER, THINK
from grpo_lab.rl.task import AdditionTask

__all__ = ["ANSWER_KINDS", "check_warm_start_arguments", "format_text", "format_text_math",
           "warm_start"]

ANSWER_KINDS = ("random", "correct")


def format_text(answer) -> str:
    """The completion the warm start teaches: ``<think></think><answer>N</answer>``.

    >>> import grpo_lab.hf as glh
    >>> glh.format_text(12)
    '<think></think><answer>12</answer>'
    """
    if not is_integer(answer):
        raise TypeError(f"answer: expected an integer (the sum the answer states), got "
                        f"{describe(answer)}")
    return format_text_math(int(answer))


def format_text_math(answer: int) -> str:
    """:func:`format_text` of a checked integer."""
    return f"{THINK[0]}{THINK[1]}{ANSWER[0]}{answer}{ANSWER[1]}"


def _right_pad(rows, pad_id):
    ids, mask = left_pad_math([r[::-1] for r in rows], pad_id)          # pad left, reversed
    return ids.flip(1), mask.flip(1)                                     # = padded on the right


def check_warm_start_arguments(model, tokenizer, task, steps, batch_size, lr, answers, seed):
    """Validate :func:`warm_start`'s arguments: the tokenizer's ids must be rows of the
    model's embedding, and the task's prompts and answers text the tokenizer encodes."""
    model = check_model("model", model)
    tokenizer = check_tokenizer("tokenizer", tokenizer, chat=True)
    if len(tokenizer) > vocab_size(model):
        raise ValueError(f"tokenizer: expected at most the model's {vocab_size(model)} pieces "
                         f"(its embedding's rows), got {len(tokenizer)}")
    if not isinstance(task, AdditionTask):
        raise TypeError(f"task: expected a grpo_lab.task.AdditionTask, got {describe(task)}")
    return (model, tokenizer, task, check_int("steps", steps, minimum=0),
            check_int("batch_size", batch_size, minimum=1),
            check_real("lr", lr, minimum=0.0, allow_equal=False),
            check_choice("answers", answers, ANSWER_KINDS), check_int("seed", seed, minimum=0))


def warm_start(model, tokenizer, task, *, steps: int = 60, batch_size: int = 64,
               lr: float = 3e-3, answers: str = "random", seed: int = 0) -> list[float]:
    r"""``steps`` Adam steps of :math:`\mathcal L_{SFT}` on ``task``'s training prompts; returns
    the losses. Trains ``model`` in place and leaves it in eval mode.

    ==========  =====  ================================================================
    Argument    Type   Meaning
    ==========  =====  ================================================================
    task        Task   chapter 6's :class:`grpo_lab.task.AdditionTask`
    steps       int    Adam steps, e.g. 60 (0: nothing)
    batch_size  int    prompts per step
    lr          float  Adam's learning rate, e.g. 3e-3 (chapter 6's warm-up)
    answers     str    "random": N uniform in [0, max_answer] (chapter 6); "correct": the sum
    seed        int    the prompts, the answers and nothing else
    ==========  =====  ================================================================
    """
    model, tokenizer, task, steps, batch_size, lr, answers, seed = check_warm_start_arguments(
        model, tokenizer, task, steps, batch_size, lr, answers, seed)
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        terms = task.batch(batch_size, rng)
        targets = [task.answer(t) if answers == "correct"
                   else int(rng.integers(0, task.max_answer + 1)) for t in terms]
        prompts = [prompt_messages(t) for t in terms]
        prompt_ids, prompt_mask = encode_prompts_math(tokenizer, prompts, 1)        # (B, P)
        rows = [tokenizer(format_text_math(int(a)), add_special_tokens=False)["input_ids"]
                + [tokenizer.eos_token_id] for a in targets]
        completion_ids, completion_mask = _right_pad(rows, tokenizer.pad_token_id)  # (B, T)
        prompt_ids, prompt_mask, completion_ids, completion_mask = (
            t.to(model.device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask))
        logp = completion_logprobs_math(model, torch.cat([prompt_ids, completion_ids], 1),
                                        torch.cat([prompt_mask, completion_mask], 1),
                                        completion_ids.shape[1], 1.0)               # (B, T)
        loss = -(logp * completion_mask).sum() / completion_mask.sum()              # NLL
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
