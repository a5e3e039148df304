r"""A realistic math verifier: the last ``\boxed{}``, LaTeX answers and answer equivalence,
built on Hugging Face's ``math-verify`` (0.9.0), beside chapter 5's strict verifier.

Taught in chapter 6b (``chapters/06b_real_model.ipynb``) as ``gl.math_verifier``; chapter 5
counts what each verifier gets right and wrong on a table of LaTeX answers.

Chapter 5's ``gl.accuracy_reward`` reads one ``<answer>`` tag and compares an ASCII decimal
exactly: nothing else counts, which is what a tiny task wants and what a policy cannot game.
Real math answers are LaTeX (``\frac{1}{2}``, ``\sqrt{2}/2``, ``x = 3``), so R1-style math
training scores them with a symbolic verifier: ``math_verify.parse`` extracts candidate
answers and turns them into SymPy objects; ``math_verify.verify`` says whether two are
equivalent (floats to ``float_rounding`` decimals, then symbolic simplification, sets,
intervals, relations).

===================  ========================================================================
Name                 Meaning
===================  ========================================================================
last_boxed           the plain extraction: the text of the last ``\boxed{...}``, or None
answer_latex         an answer's text as the verifier reads it: exponent-form decimals
                     written out, then ``$$...$$`` around it unless it has math delimiters
read_answer          math-verify's reading of one answer (a reference, or a tag's content)
math_reward          1.0 if the completion's answer is equivalent to the reference, else 0.0
in_main_thread       whether a call here can use the timeout (a SIGALRM timer)
grading_cost         seconds per math_reward call on given completions, and how many parsed
===================  ========================================================================

**An answer is read the way the reference is.** math-verify finds LaTeX only between
delimiters (``$...$``, ``\(...\)``, ``\[...\]``, ``\boxed{}``) or as a bare
``\frac{digits}{digits}``; bare ``\frac{\sqrt{2}}{2}`` is read as its last number, 2, and
``2^{10}`` as 2 or 10. So the reference and, with ``in_answer_tag=True``, the tag's content go
through one function, :func:`answer_latex`, before ``parse``.

**A decimal in exponent form is the decimal it is written as** (chapter 5's rule for float
references): ``1e-7`` is 0.0000001 and ``1.0e20`` is 10**20, never ``1 e - 7`` with Euler's e,
which is how LaTeX reads it. This holds in the reference, in the tag and in a whole completion.

**The timeout works only in the main thread.** A pathological answer has no bound
(``\boxed{9^{9^{9^{9}}}}``: SymPy tries to compare a number whose digit count itself has about
370 million digits), so each parse and each comparison runs under a deadline made of a SIGALRM
timer. Python delivers signals to the main thread only: called from any other thread,
:func:`math_reward` refuses with a ``ValueError`` naming ``timeout_s``; ``timeout_s=None`` is
the explicit opt-out, for a caller that bounds the time itself (a process pool with a
deadline). math-verify's own timeout (``math_verify/utils.py``, ``timeout``, lines 58-67)
calls ``signal.alarm(n)`` and then ``signal.alarm(0)``, which cancels any alarm the caller had
pending; this module switches that off and keeps its own deadline, which saves the caller's
SIGALRM handler and pending timer and puts both back (the time spent here counted off).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import signal
import threading
import time
from decimal import Decimal

import numpy as np

from grpo_lab.numerics.validate import check_int, describe
from grpo_lab.rl.parsing import MAX_CHARS, check_completion, extract_answer

__all__ = ["BOXED", "EXPONENT_FORM", "MAX_TIMEOUT_S", "answer_latex", "grading_cost",
           "in_main_thread", "last_boxed", "math_reward", "read_answer"]

BOXED = "\\boxed{"
#: A decimal in exponent form, standing alone (not inside a word or a longer number); the
#: exponent has at most 3 digits, so writing it out gives at most about a thousand characters.
EXPONENT_FORM = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?[eE][+-]?\d{1,3}(?![\w.])")
#: The longest deadline a call may ask for: a day. A bound on one parse, not a schedule.
MAX_TIMEOUT_S = 24 * 3600
#: math-verify's default float tolerance, in decimals (``verify(float_rounding=6)``).
FLOAT_ROUNDING = 6
_DELIMITERS = ("$", "\\(", "\\[", BOXED)


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


def answer_latex(text: str) -> str:
    r"""An answer's text as the verifier hands it to ``math_verify.parse``: each decimal in
    exponent form written out (``1e-7`` -> ``0.0000001``), then ``$$...$$`` around the whole
    unless it already has math delimiters (``$``, ``\(``, ``\[``, ``\boxed{``).

    >>> import grpo_lab as gl
    >>> gl.math_verifier.answer_latex(r"\frac{\sqrt{2}}{2}"), gl.math_verifier.answer_latex("1e-7")
    ('$$\\frac{\\sqrt{2}}{2}$$', '$$0.0000001$$')
    >>> gl.math_verifier.answer_latex(r"so \boxed{2^{10}}")
    'so \\boxed{2^{10}}'
    """
    text = EXPONENT_FORM.sub(lambda m: format(Decimal(m.group(0)), "f"), text)
    return text if any(d in text for d in _DELIMITERS) else f"$${text}$$"


def in_main_thread() -> bool:
    """True where the timeout can work (a SIGALRM timer needs the main thread)."""
    return threading.current_thread() is threading.main_thread()


class _Expired(BaseException):
    """Raised by the deadline's timer; a BaseException, so that no ``except Exception`` in
    math-verify or SymPy swallows it and carries on."""


@contextlib.contextmanager
def _deadline(timeout_s):
    """Raise :class:`_Expired` in the block after ``timeout_s`` seconds (None: no bound).

    The caller's SIGALRM handler and pending timer (``signal.alarm`` and ``setitimer`` share
    one) are saved and put back, the time spent here counted off; a caller's alarm due before
    this deadline cuts the block short there (it is the earlier of the two) and still fires,
    just after the block.
    """
    if timeout_s is None:
        yield
        return
    old_handler = signal.getsignal(signal.SIGALRM)
    old_delay, old_interval = signal.getitimer(signal.ITIMER_REAL)
    start = time.monotonic()

    def expire(signum, frame):
        raise _Expired

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, min(timeout_s, old_delay) if old_delay else timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay:                                  # the caller's own alarm, still pending
            left = old_delay - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), old_interval)


class _TimeoutSwitchedOff(logging.Filter):
    """math-verify logs a warning the first time its own timeout is off; here it is off
    because :func:`_deadline` bounds the call instead, so that one message is dropped."""

    def filter(self, record):
        return not record.getMessage().startswith("Timeout is disabled")


@functools.lru_cache(maxsize=1)
def _math_verify():
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_TimeoutSwitchedOff())
    # One parse outside any deadline: the first builds math-verify's regular expressions and
    # the LaTeX parser, seconds on a loaded machine, which no answer should be charged for.
    math_verify.verify(math_verify.parse("$$1$$", parsing_timeout=None),
                       math_verify.parse("$$1$$", parsing_timeout=None), timeout_seconds=None)
    return math_verify


def _check_timeout(timeout_s):
    if timeout_s is None:
        return None
    timeout_s = check_int("timeout_s", timeout_s, minimum=1, maximum=MAX_TIMEOUT_S,
                          why=" seconds for each parse and each comparison (a day at most)")
    if not in_main_thread():
        raise ValueError(
            f"timeout_s: the verifier's timeout is a SIGALRM timer, which works only in the main "
            f"thread; this call came from thread {threading.current_thread().name!r}. Call it "
            f"from the main thread, or pass timeout_s=None and bound the time yourself (a "
            f"process pool with a deadline): without it nothing stops a pathological answer")
    return timeout_s


def _reference_text(answer) -> str:
    if isinstance(answer, (bool, np.bool_)) or not isinstance(
            answer, (str, int, float, np.integer, np.floating)):
        raise TypeError(f"answer: expected the reference as a str (LaTeX or a number) or a "
                        f"number, got {describe(answer)}")
    if isinstance(answer, (float, np.floating)):
        if not np.isfinite(answer):
            raise ValueError(f"answer: expected a finite number, got {answer}")
        # Chapter 5's rule: the shortest decimal that rounds back to this float (its repr),
        # written out: 1e-07 is 0.0000001, not "1e-07", which LaTeX reads as 1 e - 7.
        return np.format_float_positional(answer, unique=True, trim="-")
    text = str(int(answer)) if isinstance(answer, (int, np.integer)) else answer.strip()
    if not text:
        raise ValueError("answer: expected a reference answer, got an empty str")
    return text


def _undefined(parsed) -> bool:
    """True if math-verify read NaN or complex infinity anywhere in an answer: SymPy's nan or
    zoo (``\\frac{0}{0}``, ``\\frac{1}{0}``), a symbol named NaN (``\\text{NaN}`` is read
    as one) or the bare text ``nan``. No such answer is right."""
    import sympy

    def nan_name(name):
        return re.sub(r"\\text|[\s${}]", "", str(name)).lower() == "nan"

    return any(nan_name(x) if isinstance(x, str) else isinstance(x, sympy.Basic) and (
        x.has(sympy.nan, sympy.zoo) or any(nan_name(v) for v in x.free_symbols))
        for x in parsed)


def read_answer(text: str, timeout_s: int | None = 5) -> list:
    r"""math-verify's reading of one answer (a reference, or the content of an answer tag):
    ``math_verify.parse(answer_latex(text))``, a list of SymPy objects and strings (empty if
    it read nothing); ``[]`` after ``timeout_s`` seconds.

    >>> import grpo_lab as gl
    >>> gl.math_verifier.read_answer(r"\frac{\sqrt{2}}{2}")[0]
    sqrt(2)/2
    """
    check_completion(text, MAX_CHARS)
    return _read(answer_latex(text), _check_timeout(timeout_s))


def _read(latex: str, timeout_s) -> list:
    math_verify = _math_verify()                # imported outside the deadline: SymPy is slow
    try:
        with _deadline(timeout_s):
            return math_verify.parse(latex, parsing_timeout=None)
    except _Expired:
        return []


@functools.lru_cache(maxsize=4096)
def _parsed_reference(text: str, timeout_s):
    gold = _read(answer_latex(text), timeout_s)
    if not gold:
        raise ValueError(f"answer: math-verify could not read the reference {text!r} (within "
                         f"timeout_s = {timeout_s} s); write it as LaTeX, e.g. "
                         f"'\\frac{{1}}{{2}}' or '12'")
    if _undefined(gold):
        raise ValueError(f"answer: math-verify reads the reference {text!r} as undefined (NaN "
                         f"or complex infinity); expected a number or an expression")
    return gold


def _float_rounding(reference: str) -> int:
    """Decimals to compare floats to: math-verify's 6, plus the zeros a small decimal reference
    starts with (``0.0000001``: 6 + 6), so it is not equal to every number below 5e-7."""
    match = re.fullmatch(r"\$*\s*[+-]?0\.(0*)[1-9]\d*\s*\$*", reference)
    return FLOAT_ROUNDING + (len(match.group(1)) if match else 0)


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
                   float       finite number; read by :func:`answer_latex`, parsed once (cached)
    in_answer_tag  bool        grade only the text of the one ``<answer>`` tag (chapter 5's
                               ``extract_answer``), read exactly as the reference is; no tag,
                               or two, is 0.0
    timeout_s      int, None   seconds (1 to a day) for each parse and each comparison, a
                               SIGALRM timer (main thread only; the caller's own alarm and
                               handler are kept); None switches it off
    max_chars      int         a longer completion scores 0 without being read
    return         float       1.0 or 0.0; a timed-out parse or comparison is 0.0
    =============  ==========  =================================================================

    **Extraction, in math-verify 0.9.0's order** (``math_verify/parser.py``: the priorities
    at lines 220-235 and 327-356, tried lowest first at line 607; within one priority the
    match that *ends last* wins, line 620): 0, "final answer is X. I hope"; 50, "final answer
    ... is X" **and** ``\boxed{X}`` together, so a "final answer is $4$" written after a
    ``\boxed{3}`` wins over it; 100, "answer: X"; 200, "answer ... X"; 300, any other LaTeX
    between delimiters, a bare ``\frac{a}{b}`` or a bare number, the last first. A completion
    with no box is still graded, on what it wrote last. With ``in_answer_tag=True`` the tag's
    content is the answer: :func:`answer_latex` wraps it like the reference, so bare LaTeX
    (``\frac{\sqrt{2}}{2}``, ``2^{10}``) is read whole.

    **Equivalence** (``math_verify.verify``): floats to 6 decimals, more for a small decimal
    reference (``0.0000001`` is compared to 12, so ``2e-7`` is not ``1e-7``), then SymPy
    (``\frac{2}{4}`` is 0.5, ``x = 3`` is 3). A completion that names two answers
    (``\boxed{3} or \boxed{4}``) is read as the set {3, 4}, which is not 4. An answer read as
    NaN or complex infinity (``\frac{0}{0}``, ``\text{NaN}``) scores 0.0 whatever the
    reference; a reference read so is refused.

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
    >>> reward(r"<answer>\frac{\sqrt{2}}{2}</answer>", r"\frac{1}{\sqrt{2}}", in_answer_tag=True)
    1.0
    """
    max_chars = check_completion(completion, max_chars)
    reference = _reference_text(answer)
    if not isinstance(in_answer_tag, (bool, np.bool_)):
        raise TypeError(f"in_answer_tag: expected True or False, got {describe(in_answer_tag)}")
    timeout_s = _check_timeout(timeout_s)
    gold = _parsed_reference(reference, timeout_s)
    if len(completion) > max_chars:
        return 0.0
    if in_answer_tag:
        text = extract_answer(completion, max_chars=max_chars)   # None unless one tag
        if text is None:
            return 0.0
        pred = _read(answer_latex(text), timeout_s)
    else:
        pred = _read(EXPONENT_FORM.sub(lambda m: format(Decimal(m.group(0)), "f"), completion),
                     timeout_s)
    return _grade(gold, pred, _float_rounding(answer_latex(reference)), timeout_s)


def _grade(gold, pred, float_rounding, timeout_s) -> float:
    if not pred or _undefined(pred):
        return 0.0
    math_verify = _math_verify()
    try:
        with _deadline(timeout_s):
            return float(math_verify.verify(gold, pred, float_rounding=float_rounding,
                                            timeout_seconds=None))
    except _Expired:
        return 0.0


def grading_cost(completions, answer, *, in_answer_tag: bool = True,
                 timeout_s: int | None = 5) -> tuple[float, float]:
    r"""Seconds per :func:`math_reward` call over ``completions`` (each graded once, the
    reference parsed before the clock starts), and the fraction of them whose answer
    math-verify read (a cost measured on failed parses measures nothing).

    For a chapter's cost cell: ``grading_cost([f"<answer>\\frac{{{k}}}{{{2 * k}}}</answer>"
    for k in range(1, 41)], "0.5")``.
    """
    if isinstance(completions, str) or not isinstance(completions, (list, tuple)) \
            or not completions:
        raise TypeError(f"completions: expected a non-empty list of str, got "
                        f"{describe(completions)}")
    for i, text in enumerate(completions):
        if not isinstance(text, str):
            raise TypeError(f"completions[{i}]: expected a str, got {describe(text)}")
    math_reward(completions[0], answer, in_answer_tag=in_answer_tag, timeout_s=timeout_s)
    read = 0
    start = time.perf_counter()
    for text in completions:
        math_reward(text, answer, in_answer_tag=in_answer_tag, timeout_s=timeout_s)
    seconds = (time.perf_counter() - start) / len(completions)
    for text in completions:
        body = extract_answer(text) if in_answer_tag else text
        read += bool(body is not None and _read(answer_latex(body) if in_answer_tag else body,
                                                _check_timeout(timeout_s)))
    return seconds, read / len(completions)
