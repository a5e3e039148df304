"""A verifiable task generated in code: add a few small numbers, e.g. ``2+4+1+3=`` -> ``10``.

Taught in chapter 6 (``chapters/06_training_loop.ipynb``). Every prompt of the task is
enumerated, shuffled with a seed and split once into training prompts and held-out prompts,
so "held-out accuracy" is measured on sums the policy never saw during training.
"""

from __future__ import annotations

import itertools

import numpy as np

from grpo_lab.numerics.validate import check_int, check_real

__all__ = ["AdditionTask", "check_task_arguments"]


def check_task_arguments(n_terms, max_term, held_out, seed):
    """Validate :class:`AdditionTask`'s arguments without building it (the CLI checks its
    flags with this). Returns ``(n_terms, max_term, n_held, seed)``; ``n_held`` is how many
    of the ``(max_term + 1) ** n_terms`` prompts are held out."""
    n_terms = check_int("n_terms", n_terms, minimum=2, maximum=6)
    max_term = check_int("max_term", max_term, minimum=1, maximum=9,
                         why=" (terms are single digits)")
    held_out = check_real("held_out", held_out, minimum=0.0, allow_equal=False)
    if held_out >= 1:
        raise ValueError(f"held_out: expected a fraction in (0, 1), got {held_out}")
    total = (max_term + 1) ** n_terms
    n_held = max(1, int(round(held_out * total)))
    if n_held >= total:
        raise ValueError(f"held_out: expected a fraction that leaves training prompts, got "
                         f"{held_out}: it holds out all {total} prompts of n_terms = "
                         f"{n_terms}, max_term = {max_term}")
    return n_terms, max_term, n_held, check_int("seed", seed, minimum=0)


class AdditionTask:
    """``n_terms`` numbers from 0 to ``max_term`` (single digits), summed.

    =========  ===================================================================
    Attribute  Meaning
    =========  ===================================================================
    train      the terms of every training prompt, e.g. (2, 4, 1, 3)
    held_out   the terms of every held-out prompt: never sampled during training
    max_answer the largest possible sum, n_terms * max_term
    prompt_len tokens in a prompt ("2+4+1+3=" is 8)
    =========  ===================================================================

    >>> import grpo_lab as gl
    >>> task = gl.task.AdditionTask(n_terms=4, max_term=4, held_out=0.2, seed=0)
    >>> len(task.train), len(task.held_out), task.max_answer
    (500, 125, 16)
    >>> task.prompt((2, 4, 1, 3)), task.answer((2, 4, 1, 3))
    ('2+4+1+3=', 10)
    """

    def __init__(self, *, n_terms: int = 4, max_term: int = 4, held_out: float = 0.2,
                 seed: int = 0):
        self.n_terms, self.max_term, n_held, seed = check_task_arguments(n_terms, max_term,
                                                                         held_out, seed)
        terms = list(itertools.product(range(self.max_term + 1), repeat=self.n_terms))
        order = np.random.default_rng(seed).permutation(len(terms))
        self.held_out = [terms[i] for i in order[:n_held]]
        self.train = [terms[i] for i in order[n_held:]]
        self.max_answer = self.n_terms * self.max_term
        self.prompt_len = 2 * self.n_terms
        self._train_by_answer = {}
        for t in self.train:
            self._train_by_answer.setdefault(self.answer(t), []).append(t)

    def prompt(self, terms) -> str:
        return "+".join(str(t) for t in terms) + "="

    def answer(self, terms) -> int:
        return int(sum(terms))

    def batch(self, n: int, rng: np.random.Generator, *, balanced: bool = False) -> list[tuple]:
        """``n`` training prompts' terms, drawn with replacement.

        ``balanced=True`` first draws an answer uniformly, then a training prompt with that
        answer, so every sum is equally frequent: a policy that always writes the most common
        sum (8 for four terms up to 4, 14% of prompts) gains nothing from it.
        """
        n = check_int("n", n, minimum=1)
        if not balanced:
            return [self.train[i] for i in rng.integers(0, len(self.train), size=n)]
        answers = sorted(self._train_by_answer)
        out = []
        for a in rng.integers(0, len(answers), size=n):
            pool = self._train_by_answer[answers[a]]
            out.append(pool[rng.integers(0, len(pool))])
        return out
