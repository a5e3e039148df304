"""Reading a completion as hostile text: the one answer tag, and the number inside it.

Taught in chapter 5 (``chapters/05_rewards.ipynb``) as ``gl.rewards.extract_answer`` and
``gl.rewards.parse_number``; the reward functions of :mod:`grpo_lab.rl.rewards` build on them.

A completion is text written by the policy, so it is treated as hostile:

* it is **never evaluated as code** (no ``eval``, ``exec``, ``int()`` on raw text, no regular
  expression that can backtrack): ``__import__('os').system('x')`` is just characters, and
  ``9**9**9**9`` is not a number;
* parsing is **bounded**: a completion longer than ``max_chars`` is not read at all, every
  scan is a linear ``str.find`` or ``str.count``, and a number has at most
  ``MAX_NUMBER_CHARS`` characters, so the time per call is at most linear in ``max_chars``;
* only **ASCII digits** make a number: ``int('١٢')`` is 12 in Python, but a verifier that
  accepts Arabic-Indic or full-width digits is a verifier the policy can learn to game.

Only bad *arguments* from the caller raise (a completion that is not a ``str``), with the
package's ``<argument>: expected ..., got ...``; the text itself is never a reason to raise.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from grpo_lab.numerics.validate import check_int, describe

__all__ = ["ANSWER", "ASCII_DIGITS", "MAX_CHARS", "MAX_NUMBER_CHARS", "TAGS", "THINK",
           "check_completion", "check_str", "extract_answer", "parse_number", "reference_number"]

THINK = ("<think>", "</think>")
ANSWER = ("<answer>", "</answer>")
TAGS = THINK + ANSWER
#: A safety bound on the work per call, not a length rule: a longer completion scores 0
#: without being read. 2**20 characters is about 260k tokens at 4 characters a token, far
#: above any generation limit in the book (DAPO's L_max = 20480 tokens is about 80k
#: characters). Set ``max_chars`` above your own limit in characters; length is shaped by
#: ``overlong_penalty``, never by this cliff (chapter 5 shows the cliff a small bound makes).
MAX_CHARS = 1 << 20
MAX_NUMBER_CHARS = 64       # "-" + 63 digits and a point: far beyond any task here
ASCII_DIGITS = frozenset("0123456789")   # the only digits a number may have


def check_str(name: str, value, why: str = "") -> str:
    """Require a ``str``: ``<name>: expected a str<why>, got ...`` (a TypeError) otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str{why}, got {describe(value)}")
    return value


def check_completion(completion, max_chars) -> int:
    """Validate a completion (a ``str``) and ``max_chars`` (an int >= 1); returns max_chars."""
    check_str("completion", completion, " (the policy's decoded text)")
    return check_int("max_chars", max_chars, minimum=1)


def extract_answer(completion: str, *, max_chars: int = MAX_CHARS) -> str | None:
    """The text inside the one ``<answer>...</answer>``, stripped; None if there is not one.

    Exactly one opening and one closing answer tag, in that order, or there is no answer:
    a completion that lists several answers must not be scored on the one that happens to
    be right. Longer than ``max_chars``: None, without reading it.

    >>> import grpo_lab as gl
    >>> gl.rewards.extract_answer("<think>7+5</think><answer> 12 </answer>")
    '12'
    >>> gl.rewards.extract_answer("<answer>1</answer><answer>12</answer>") is None
    True
    """
    max_chars = check_completion(completion, max_chars)
    if len(completion) > max_chars:
        return None
    open_tag, close_tag = ANSWER
    if completion.count(open_tag) != 1 or completion.count(close_tag) != 1:
        return None                                   # missing, repeated or unbalanced
    start = completion.find(open_tag) + len(open_tag)
    end = completion.find(close_tag)
    if end < start:                                   # "</answer> ... <answer>"
        return None
    return completion[start:end].strip()


def parse_number(text: str) -> Fraction | None:
    """An ASCII decimal ``[+-]digits[.digits]`` as an exact Fraction; anything else is None.

    Not ``int()`` or ``float()``: they accept unicode digits, ``'1_000'``, ``'nan'`` and
    ``'1e999'``, and ``int()`` of a long digit string is slow (quadratic) or refused.

    >>> import grpo_lab as gl
    >>> gl.rewards.parse_number("-12.50")
    Fraction(-25, 2)
    >>> [gl.rewards.parse_number(s) for s in ("1e3", "١٢", "9**9", "nan", "")]
    [None, None, None, None, None]
    """
    text = check_str("text", text)
    if not 0 < len(text) <= MAX_NUMBER_CHARS:
        return None
    body = text[1:] if text[0] in "+-" else text
    whole, point, frac = body.partition(".")
    if not whole or (point and not frac):             # ".5", "5." and "-" are not numbers
        return None
    if not set(whole) <= ASCII_DIGITS or not set(frac) <= ASCII_DIGITS:
        return None
    return Fraction(text)                             # exact: only ASCII digits reach here


def reference_number(answer) -> Fraction:
    """The caller's reference answer (an int, a finite float or a numeric str) as a Fraction.

    A float is read as the shortest decimal that round-trips in its own precision (its
    ``repr``; for NumPy floats, ``np.format_float_positional(unique=True)``), because that is
    the number its author typed: ``0.1``, ``2.675`` and ``np.float32(0.1)`` all mean the
    decimals written, so ``"<answer>0.1</answer>"`` matches them exactly. The reference comes
    from the task, not from the policy, so a bad one raises:

    >>> import grpo_lab as gl
    >>> gl.rewards.reference_number(" -1.5 "), gl.rewards.reference_number(12)
    (Fraction(-3, 2), Fraction(12, 1))
    >>> import numpy as np
    >>> gl.rewards.reference_number(0.1), gl.rewards.reference_number(np.float32(0.1))
    (Fraction(1, 10), Fraction(1, 10))
    """
    if isinstance(answer, (bool, np.bool_)):
        raise TypeError(f"answer: expected a number or a numeric str, got {describe(answer)}")
    if isinstance(answer, (int, np.integer)):
        return Fraction(int(answer))
    if isinstance(answer, (float, np.floating)):
        if not np.isfinite(answer):
            raise ValueError(f"answer: expected a finite number, got {answer}")
        # The shortest decimal that rounds back to this float in its own precision: 0.1 is
        # the decimal 0.1 a task author meant, not the binary 0.1000000000000000055...; the
        # same for float32 0.1 (whose float64 value is 0.10000000149...).
        return Fraction(np.format_float_positional(answer, unique=True, trim="-"))
    if isinstance(answer, str):
        number = parse_number(answer.strip())
        if number is None:
            raise ValueError(f"answer: expected an ASCII decimal such as '42' or '-1.5' for "
                             f"compare='numeric', got {answer[:80]!r}; use compare='exact' "
                             f"for answers that are not numbers")
        return number
    raise TypeError(f"answer: expected a number or a numeric str, got {describe(answer)}")
