r"""Rule-based rewards in the style of DeepSeek-R1: verifiers, format, length, combining.

Taught in chapter 5 (``chapters/05_rewards.ipynb``); chapter 6 trains with them.

DeepSeek-R1 (2025, section 2.2.2) trains R1-Zero with two rule-based rewards and no reward
model: an **accuracy** reward (is the final answer right?) and a **format** reward (is the
reasoning inside ``<think>...</think>`` and the answer inside ``<answer>...</answer>``?).

The completion is hostile text; how it is read (never evaluated, bounded, ASCII digits only)
is :mod:`grpo_lab.rl.parsing`, whose names are re-exported here (``gl.rewards.extract_answer``,
``gl.rewards.parse_number``, ``THINK``, ``ANSWER``, ``TAGS``, ``MAX_CHARS``). A reward
function returns a float for every string and raises only for bad *arguments* from the caller
(a completion that is not a ``str``, an ``answer`` that is not a number under
``compare="numeric"``), with the package's ``<argument>: expected ..., got ...``.

=====================  =====================================================================
Function               Meaning
=====================  =====================================================================
extract_answer         the text of the one ``<answer>`` tag, or None (from ``parsing``)
parse_number           an ASCII decimal as an exact Fraction, or None (from ``parsing``)
accuracy_reward        1.0 if the ``<answer>`` matches the reference, else 0.0
format_reward          1.0 for ``<think>...</think><answer>...</answer>`` and nothing else
contains_reward        a deliberately weak verifier (answer appears anywhere): chapter 5's hack
overlong_penalty       DAPO's soft overlong punishment, 0 down to -1 over the last cache_len
weighted_sum           sum_k w_k r_k over K reward functions
normalise_then_sum     sum_k w_k A_k of group advantages, then batch-normalised (TRL)
=====================  =====================================================================
"""

from __future__ import annotations

import unicodedata
from fractions import Fraction

import numpy as np

from grpo_lab.core.advantages import check_group_advantages_options, group_advantages_math
from grpo_lab.numerics.dtypes import all_finite
from grpo_lab.numerics.stable import power_of_two_rescale_math, scale_by_power_of_two_math
from grpo_lab.numerics.validate import (as_float_array, check_choice, check_int, check_real,
                                        describe)
from grpo_lab.rl.parsing import (ANSWER, MAX_CHARS, MAX_NUMBER_CHARS, TAGS, THINK,
                                 check_completion, extract_answer, parse_number, reference_number)

__all__ = ["THINK", "ANSWER", "TAGS", "MAX_CHARS", "MAX_NUMBER_CHARS", "COMPARES",
           "extract_answer", "parse_number", "reference_number", "accuracy_reward",
           "check_accuracy_arguments", "format_reward", "contains_reward",
           "check_contains_arguments", "overlong_penalty", "check_overlong_arguments",
           "weighted_sum", "normalise_then_sum", "check_reward_components",
           "check_normalise_then_sum_arguments", "blank", "strip_blank", "is_blank"]

COMPARES = ("numeric", "exact")


def check_accuracy_arguments(completion, answer, compare, rel_tol, max_chars):
    """Validate :func:`accuracy_reward`'s arguments: ``(reference, compare, rel_tol, max_chars)``.

    The reference is a Fraction under ``compare="numeric"`` (see :func:`reference_number`)
    and the stripped ``answer`` str under ``compare="exact"``.
    """
    compare = check_choice("compare", compare, COMPARES)
    rel_tol = check_real("rel_tol", rel_tol, minimum=0.0)
    if compare == "numeric":
        reference = reference_number(answer)
    elif isinstance(answer, str):
        reference = answer.strip()
    else:
        raise TypeError(f"answer: expected a str for compare='exact', got {describe(answer)}")
    return reference, compare, rel_tol, check_completion(completion, max_chars)


def accuracy_reward(completion: str, answer, *, compare: str = "numeric",
                    rel_tol: float = 0.0, max_chars: int = MAX_CHARS) -> float:
    r"""1.0 if the completion's ``<answer>`` is the reference ``answer``, else 0.0.

    .. math::

        r_{acc}(o) = \mathbb 1[\,\mathrm{parse}(\mathrm{answer\ tag\ of\ } o) = a^\star\,]

    =========  =======  ===========================================================
    Symbol     Type     Meaning
    =========  =======  ===========================================================
    completion str      the policy's decoded text, trusted for nothing
    answer     int,     the reference a*: a number (or numeric str) for "numeric",
               float,   a str for "exact"
               str
    compare    str      "numeric": both sides as exact decimals, equal within rel_tol;
                        "exact": the stripped answer text equals str(answer).strip()
    rel_tol    float    >= 0; 0 (the default) asks for the exact value. "12.0" == 12
    return     float    1.0 or 0.0
    =========  =======  ===========================================================

    No answer tag, two answer tags or an answer that is not an ASCII decimal (under
    "numeric") give 0.0; so does a completion longer than ``max_chars`` (``MAX_CHARS`` =
    2**20 characters: a bound on the work per call, far above any generation limit, not a
    length rule; a smaller bound is a silent length cliff). A float reference means the
    decimal it is written as: ``0.1`` and ``np.float32(0.1)`` both match ``"0.1"``.

    >>> import grpo_lab as gl
    >>> gl.accuracy_reward("<think>7+5 is 12</think><answer>12</answer>", 12)
    1.0
    >>> gl.accuracy_reward("<answer>12.0</answer>", "12"), gl.accuracy_reward("12", 12)
    (1.0, 0.0)
    >>> gl.accuracy_reward("<answer>__import__('os').system('x')</answer>", 0)
    0.0
    """
    reference, compare, rel_tol, max_chars = check_accuracy_arguments(
        completion, answer, compare, rel_tol, max_chars)
    text = extract_answer(completion, max_chars=max_chars)    # None unless one answer tag
    if text is None:
        return 0.0
    if compare == "exact":
        return float(text == reference)
    value = parse_number(text)                                 # None unless an ASCII decimal
    if value is None:
        return 0.0
    # Fractions are exact, so 0.1 + 0.2 == 0.3 here and a 60-digit integer is compared whole.
    return float(abs(value - reference) <= Fraction(rel_tol) * max(abs(value), abs(reference)))


def blank(ch: str) -> bool:
    """True for a character that shows nothing: whitespace (``str.isspace``, what
    ``str.strip()`` removes) or an invisible format character (Unicode category Cf: zero-width
    space U+200B, the joiners U+200C / U+200D, word joiner U+2060, byte-order mark U+FEFF, soft
    hyphen, bidi marks...). A completion can look empty and not be: an answer of one U+200B is
    no answer."""
    return ch.isspace() or unicodedata.category(ch) == "Cf"


def strip_blank(text: str) -> str:
    """``text`` without its leading and trailing :func:`blank` characters (``str.strip()``
    for whitespace and the invisible ones).

    >>> import grpo_lab as gl
    >>> gl.rewards.strip_blank(" \\u200b 12\\ufeff\\n"), gl.rewards.strip_blank("\\u200b")
    ('12', '')
    """
    start, end = 0, len(text)
    while start < end and blank(text[start]):
        start += 1
    while end > start and blank(text[end - 1]):
        end -= 1
    return text[start:end]


def is_blank(text: str) -> bool:
    """True if ``text`` has nothing but :func:`blank` characters (the empty string included)."""
    return strip_blank(text) == ""


def format_reward(completion: str, *, max_chars: int = MAX_CHARS) -> float:
    r"""1.0 for ``<think>...</think><answer>...</answer>`` (whitespace around and between), else 0.0.

    The R1 format, checked strictly: each of the four tags exactly once, in that order,
    nothing but whitespace (``str.isspace``) outside them, and a non-empty answer. Outside the
    tags an invisible character (a byte-order mark before ``<think>``, a zero-width space
    between the blocks) is not whitespace but text the policy wrote, so it gives 0.0; inside
    the answer, an answer of only invisible characters is empty (:func:`is_blank`). Nested or
    repeated tags, text after ``</answer>`` and over-long completions give 0.0. The thinking
    may be empty: the tiny policy of chapter 6 has little to think about.

    >>> import grpo_lab as gl
    >>> gl.format_reward("<think>7+5</think>\n<answer>12</answer>")
    1.0
    >>> gl.format_reward("<think><think>7+5</think></think><answer>12</answer>")  # nested
    0.0
    >>> gl.format_reward("<answer>12</answer>")                                  # no think
    0.0
    """
    max_chars = check_completion(completion, max_chars)
    if len(completion) > max_chars:
        return 0.0
    text = completion.strip()                                    # whitespace, not U+FEFF
    if any(text.count(tag) != 1 for tag in TAGS):
        return 0.0
    positions = [text.find(tag) for tag in TAGS]                 # think, /think, answer, /answer
    if positions != sorted(positions) or positions[0] != 0:
        return 0.0
    if not text.endswith(ANSWER[1]):
        return 0.0
    between = text[positions[1] + len(THINK[1]):positions[2]]
    answer = text[positions[2] + len(ANSWER[0]):positions[3]]
    return float(between.strip() == "" and not is_blank(answer))   # U+200B between: text


def check_contains_arguments(completion, answer, max_chars):
    """Validate :func:`contains_reward`'s arguments: ``(str(answer).strip(), max_chars)``."""
    if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, (int, np.integer, str)):
        raise TypeError(f"answer: expected an int or a str, got {describe(answer)}")
    return str(answer).strip(), check_completion(completion, max_chars)


def contains_reward(completion: str, answer, *, max_chars: int = MAX_CHARS) -> float:
    """A deliberately **weak** verifier: 1.0 if ``str(answer)`` appears anywhere in the answer tag.

    Do not train with it. Chapter 5 trains a policy on it to show reward hacking: an answer
    such as ``'1213141516'`` "contains" 12, 13, 14, 15 and 16, so the policy learns to write
    long strings of digits, and this reward climbs while :func:`accuracy_reward` does not.

    >>> import grpo_lab as gl
    >>> gl.rewards.contains_reward("<think></think><answer>1213141516</answer>", 14)
    1.0
    >>> gl.accuracy_reward("<think></think><answer>1213141516</answer>", 14)
    0.0
    """
    needle, max_chars = check_contains_arguments(completion, answer, max_chars)
    text = extract_answer(completion, max_chars=max_chars)
    return float(text is not None and needle in text)


def check_overlong_arguments(lengths, max_len, cache_len):
    """Validate :func:`overlong_penalty`'s arguments: ``(lengths as float64, max_len,
    cache_len)``; lengths are integer token counts >= 0, 1 <= cache_len <= max_len."""
    max_len = check_int("max_len", max_len, minimum=1)
    cache_len = check_int("cache_len", cache_len, minimum=1, maximum=max_len,
                          why=" (the soft zone lies inside max_len)")
    arr, _ = as_float_array("lengths", lengths, shape_doc=" of completion lengths",
                            min_size=0)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"lengths: expected integer token counts, got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"lengths: expected lengths >= 0, got {arr.min()}")
    return arr.astype(np.float64), max_len, cache_len


def overlong_penalty(lengths, *, max_len: int, cache_len: int) -> np.ndarray:
    r"""DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to the reward.

    .. math::

        R_{length}(y) = \begin{cases}
            0 & |y| \le L_{max} - L_{cache} \\
            \dfrac{(L_{max} - L_{cache}) - |y|}{L_{cache}} & L_{max} - L_{cache} < |y| \le L_{max} \\
            -1 & L_{max} < |y|
        \end{cases}

    =========  =======  ================================================================
    Symbol     Shape    Meaning
    =========  =======  ================================================================
    lengths    (...)    completion lengths |y| in tokens, non-negative integers
    max_len    scalar   L_max, the longest completion that is not fully punished
    cache_len  scalar   L_cache, the soft zone before L_max (DAPO: 4096 of L_max 20480)
    return     (...)    float64 penalties in [-1, 0]
    =========  =======  ================================================================

    The penalty ramps linearly from 0 to -1 over the last ``cache_len`` tokens, so a long
    answer is nudged shorter before it is cut off, instead of a cliff at ``max_len``.

    >>> import grpo_lab as gl
    >>> gl.overlong_penalty([10, 16, 18, 20, 21], max_len=20, cache_len=4)
    array([ 0. ,  0. , -0.5, -1. , -1. ])
    """
    length, max_len, cache_len = check_overlong_arguments(lengths, max_len, cache_len)
    soft_start = max_len - cache_len                            # L_max - L_cache
    ramp = (soft_start - length) / cache_len                    # 0 at soft_start, -1 at max_len
    return np.where(length <= soft_start, 0.0, np.where(length <= max_len, ramp, -1.0))  # (...)


def check_reward_components(rewards, weights):
    """rewards (K, B, G) and weights (K,), validated; returns float64 copies."""
    r, _ = as_float_array("rewards", rewards, ndim=3,
                          shape_doc=" of shape (K, B, G): K reward functions")
    w, _ = as_float_array("weights", weights, ndim=1, shape_doc=" of shape (K,)")
    if w.shape[0] != r.shape[0]:
        raise ValueError(f"weights: expected one weight per reward function, K = {r.shape[0]} "
                         f"(rewards has shape {r.shape}), got {w.shape[0]}")
    return r.astype(np.float64), w.astype(np.float64)


def weighted_sum(rewards, weights) -> np.ndarray:
    r"""Combine K rewards into one: :math:`r = \sum_k w_k r^{(k)}`, shape (K, B, G) -> (B, G).

    R1 adds its accuracy and format rewards with equal weights. The catch: a reward with a
    wider spread dominates the group's ranking, whatever its weight says.

    >>> import grpo_lab as gl
    >>> acc = [[1, 0, 0, 1]]; fmt = [[1, 1, 0, 1]]
    >>> gl.weighted_sum([acc, fmt], [1.0, 0.5])
    array([[1.5, 0.5, 0. , 1.5]])
    """
    r, w = check_reward_components(rewards, weights)   # (K, B, G), (K,)
    total = weighted_sum_math(r, w)                    # (B, G)
    if not all_finite(total):
        raise ValueError(f"rewards, weights: expected weighted sums within float64's range, got "
                         f"one past 1.8e308 (weights up to {np.abs(w).max():.4g} times rewards up "
                         f"to {np.abs(r).max():.4g})")
    return total


def weighted_sum_math(r, w):
    """:func:`weighted_sum` on checked float64 arrays ``r`` (K, B, G) and ``w`` (K,): the sum
    runs on ``r / 2**a`` and ``w / 2**b`` (exact, each below 1), so no product or partial sum
    passes float64's range; the result is inf only where the weighted sum itself does not fit."""
    x, a = power_of_two_rescale_math(r)                # (K, B, G) |x| < 1, r = x 2**a
    v, b = power_of_two_rescale_math(w)                # (K,)      |v| < 1, w = v 2**b
    return scale_by_power_of_two_math(np.tensordot(v, x, axes=1), a + b)   # (B, G)


def check_normalise_then_sum_arguments(rewards, weights, eps, ddof, batch):
    """:func:`check_reward_components`, ``eps`` and ``ddof`` as :func:`grpo_lab.group_advantages`
    checks them for groups of G, and ``batch`` a bool; returns ``(r, w, eps, ddof, batch)``."""
    r, w = check_reward_components(rewards, weights)
    eps, _, ddof, _ = check_group_advantages_options(r.shape[1:], eps, "group", ddof, "mean")
    if not isinstance(batch, (bool, np.bool_)):
        raise TypeError(f"batch: expected True or False, got {describe(batch)}")
    return r, w, eps, ddof, bool(batch)


def normalise_then_sum(rewards, weights, *, eps: float = 1e-8, ddof: int = 0,
                       batch: bool = True) -> np.ndarray:
    r"""Group-normalise each reward, sum with weights, then normalise over the whole batch.

    TRL's ``multi_objective_aggregation="normalize_then_sum"`` (GDPO's decoupled
    normalisation), in three steps, (K, B, G) -> (B, G):

    .. math::

        A^{(k)} = \operatorname{norm}_{\text{group}}\bigl(r^{(k)}\bigr), \qquad
        s = \sum_k w_k A^{(k)}, \qquad
        A = \frac{s - \operatorname{mean}_{B G}(s)}{\operatorname{std}_{B G}(s) + \varepsilon}

    =========  ==========  =========================================================
    Symbol     Shape       Meaning
    =========  ==========  =========================================================
    rewards    (K, B, G)   K reward functions, each scored on B groups of G
    weights    (K,)        w_k; only their ratios matter once ``batch`` rescales
    eps        scalar      added to every std (TRL: 1e-4)
    ddof       int         0: population std (the book's); 1: Bessel's, as TRL's nanstd
    batch      bool        False stops after the weighted sum (GDPO's first two steps)
    return     (B, G)      advantages: feed them to the loss, not to group_advantages
    =========  ==========  =========================================================

    Each reward first speaks in units of its own group spread, so the weights mean what they
    say and a reward that is constant within a group adds exactly 0 there; the last step puts
    the sum on unit scale across all B*G completions, whatever K and the weights. TRL
    (``trl/trainer/grpo_trainer.py``, the ``normalize_then_sum`` branch, lines 2790-2799 at
    TRL 1.16.0; tests/reference proves it) is
    ``normalise_then_sum(rewards, weights, eps=1e-4, ddof=1)``.

    >>> import grpo_lab as gl
    >>> acc = [[1, 0, 0, 1]]; fmt = [[1, 1, 0, 1]]
    >>> gl.normalise_then_sum([acc, fmt], [1.0, 0.5], batch=False).round(3)
    array([[ 1.289, -0.711, -1.866,  1.289]])
    >>> gl.normalise_then_sum([acc, fmt], [1.0, 0.5]).round(3)
    array([[ 0.953, -0.526, -1.38 ,  0.953]])
    """
    r, w, eps, ddof, batch = check_normalise_then_sum_arguments(rewards, weights, eps, ddof,
                                                                batch)   # (K, B, G), (K,)
    adv = np.stack([group_advantages_math(r_k, eps, "group", ddof) for r_k in r])   # (K, B, G)
    # The weights in units of 2**b (exact, |v| < 1): the sum cannot overflow, |A| <= sqrt(G).
    v, b = power_of_two_rescale_math(w)                                # (K,) w = v 2**b
    small = np.tensordot(v, adv, axes=1)                              # (B, G) s / 2**b
    if not batch:
        summed = scale_by_power_of_two_math(small, b)                 # (B, G) s = sum_k w_k A_k
        if not all_finite(summed):
            raise ValueError(f"weights: expected weights whose sum of group-normalised rewards "
                             f"(each at most sqrt(G)) fits in float64, got {np.abs(w).max():.4g}")
        return summed
    flat = small.reshape(1, -1)         # one "group" of B*G, in units of 2**b, eps in them too
    adv = group_advantages_math(flat, scale_by_power_of_two_math(eps, -b), "group", ddof)
    return adv.reshape(small.shape)                                   # (B, G)
