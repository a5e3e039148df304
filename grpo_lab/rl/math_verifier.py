r"""A realistic math verifier: the last ``\boxed{}``, LaTeX fractions and answer equivalence,
built on Hugging Face's ``math-verify`` (0.9.0), beside chapter 5's strict verifier.

Taught in chapter 6b (``chapters/06b_real_model.ipynb``) as ``gl.math_verifier``.

Chapter 5's ``gl.accuracy_reward`` reads one ``<answer>`` tag and compares an ASCII decimal
exactly: nothing else counts, which is what a tiny task wants and what a policy cannot game.
Real math answers are LaTeX (``\frac{1}{2}``, ``\sqrt{2}/2``, ``x = 3``), so R1-style math
training scores them with a symbolic verifier: ``math_verify.parse`` extracts candidate
answers (a ``\boxed{}`` first, then "final answer is ...", then any LaTeX or bare number) and
turns them into SymPy objects; ``math_verify.verify`` says whether two are equivalent
(numbers to ``float_rounding = 6`` decimals, then symbolic simplification, sets, intervals,
relations).

===================  ========================================================================
Name                 Meaning
===================  ========================================================================
last_boxed           the plain extraction: the text of the last ``\boxed{...}``, or None
math_reward          1.0 if math-verify finds the completion's answer equivalent to the
                     reference, else 0.0; its timeout needs the main thread
in_main_thread       whether a call here can use the timeout (signal.alarm)
===================  ========================================================================

**The timeout works only in the main thread.** math-verify bounds each parse and each
comparison with ``signal.alarm`` (``math_verify/utils.py``, ``timeout``), and Python delivers
signals to the main thread only: called from any other thread, ``parse`` and ``verify`` raise
``ValueError`` ("doesn't support threaded environment"), unless the timeout is switched off,
and then nothing bounds a pathological answer (``\boxed{9^{9^{9^{9}}}}``: SymPy tries to
compare a number of 370 million digits). :func:`math_reward` refuses such a call with a
``ValueError`` naming ``timeout_s``; ``timeout_s=None`` is the explicit opt-out, for a caller
that bounds the time itself (a process pool with a deadline).
"""

from __future__ import annotations

import functools
import threading

from grpo_lab.numerics.validate import check_int, describe
from grpo_lab.rl.parsing import MAX_CHARS, check_completion, extract_answer

__all__ = ["BOXED", "in_main_thread", "last_boxed", "math_reward"]

BOXED = "\\boxed{"


def last_boxed(completion: str, *, max_chars: int = MAX_CHARS) -> str | None:
    r"""The text inside the last ``\boxed{...}`` (braces balanced), stripped; None if none.

    The plain extraction a math grader starts from: find the last ``\boxed{`` and read to its
    matching ``}``, counting nested braces (``\boxed{\frac{1}{2}}`` holds ``\frac{1}{2}``).
    An unclosed box, or a completion longer than ``max_chars``, gives None. One linear scan.

    >>> import grpo_lab as gl
    >>> gl.math_verifier.last_boxed(r"so 3. No: \boxed{4}, i.e. \boxed{\frac{8}{2}}")
    '\\frac{8}{2}'
    >>> gl.math_verifier.last_boxed(r"\boxed{4") is None
    True
    """
    max_chars = check_completion(completion, max_chars)
    start = completion.rfind(BOXED) if len(completion) <= max_chars else -1
    if start < 0:
        return None
    depth, i = 1, start + len(BOXED)
    for j in range(i, len(completion)):
        depth += {"{": 1, "}": -1}.get(completion[j], 0)
        if depth == 0:
            return completion[i:j].strip()
    return None                                          # "\boxed{4": never closed


def in_main_thread() -> bool:
    """True where math-verify's timeout can work (``signal.alarm`` needs the main thread)."""
    return threading.current_thread() is threading.main_thread()


def _check_timeout(timeout_s):
    if timeout_s is None:
        return None
    timeout_s = check_int("timeout_s", timeout_s, minimum=1)   # signal.alarm counts seconds
    if not in_main_thread():
        raise ValueError(
            f"timeout_s: math-verify's timeout uses signal.alarm, which works only in the main "
            f"thread; this call came from thread {threading.current_thread().name!r}. Call it "
            f"from the main thread, or pass timeout_s=None and bound the time yourself (a "
            f"process pool with a deadline): without it nothing stops a pathological answer")
    return timeout_s


def _reference_text(answer) -> str:
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise TypeError(f"answer: expected the reference as a str (LaTeX or a number) or a "
                        f"number, got {describe(answer)}")
    text = str(answer).strip()
    if not text:
        raise ValueError("answer: expected a reference answer, got an empty str")
    return text


@functools.lru_cache(maxsize=4096)
def _parsed_reference(text: str, timeout_s):
    import math_verify

    gold = math_verify.parse(text if "$" in text or BOXED in text else f"${text}$",
                             parsing_timeout=timeout_s)
    if not gold:
        raise ValueError(f"answer: math-verify could not read the reference {text!r}; write "
                         f"it as LaTeX, e.g. '\\frac{{1}}{{2}}' or '12'")
    return gold


def math_reward(completion: str, answer, *, in_answer_tag: bool = False,
                timeout_s: int | None = 5, max_chars: int = MAX_CHARS) -> float:
    r"""1.0 if the completion's final answer is equivalent to ``answer`` by math-verify, else 0.0.

    .. math::

        r_{math}(o) = \mathbb 1[\,\mathrm{verify}(\mathrm{parse}(a^\star),
                                               \mathrm{parse}(o))\,]

    =============  ==========  =================================================================
    Symbol         Type        Meaning
    =============  ==========  =================================================================
    completion     str         the policy's decoded text, trusted for nothing
    answer         str, int,   the reference a*: LaTeX (``\frac{1}{2}``, ``\{1, 2\}``) or a
                   float       number; read as ``$answer$`` and parsed once (cached)
    in_answer_tag  bool        grade only the text of the one ``<answer>`` tag (chapter 5's
                               ``extract_answer``); no tag, or two, is 0.0
    timeout_s      int, None   seconds for each parse and each comparison (math-verify's
                               ``signal.alarm``: main thread only); None switches it off
    max_chars      int         a longer completion scores 0 without being read
    return         float       1.0 or 0.0; a timed-out parse or comparison is 0.0
    =============  ==========  =================================================================

    Extraction is math-verify's default: a ``\boxed{}`` (or "final answer is ...") first, then
    any LaTeX, then the last bare number, so a completion with no box is still graded, on what
    it wrote last. Equivalence: numbers to 6 decimals, then SymPy (``\frac{2}{4}`` is 0.5,
    ``x = 3`` is 3). A completion that names two answers (``\boxed{3} or \boxed{4}``) is read
    as the set {3, 4}, which is not 4.

    With the R1 format, grade inside the tag (``in_answer_tag=True``): math-verify alone reads
    the whole text, so a number written while thinking (``<think>is it 12?</think><answer>5
    </answer>``) is graded as the answer, and a policy learns to scatter guesses in its
    reasoning.

    >>> import grpo_lab as gl
    >>> gl.math_verifier.math_reward(r"so \boxed{\frac{2}{4}}", "0.5")
    1.0
    >>> gl.math_verifier.math_reward(r"\boxed{3} or \boxed{4}", 4)
    0.0
    >>> text = "<think>is it 12?</think><answer>5</answer>"
    >>> reward = gl.math_verifier.math_reward
    >>> reward(text, 12), reward(text, 12, in_answer_tag=True)
    (1.0, 0.0)
    """
    max_chars = check_completion(completion, max_chars)
    reference = _reference_text(answer)
    if not isinstance(in_answer_tag, bool):
        raise TypeError(f"in_answer_tag: expected True or False, got {describe(in_answer_tag)}")
    timeout_s = _check_timeout(timeout_s)
    import math_verify

    gold = _parsed_reference(reference, timeout_s)
    if len(completion) > max_chars:
        return 0.0
    if in_answer_tag:
        completion = extract_answer(completion, max_chars=max_chars)     # None unless one tag
        if completion is None:
            return 0.0
    pred = math_verify.parse(completion, parsing_timeout=timeout_s)
    return float(math_verify.verify(gold, pred, timeout_seconds=timeout_s))
