"""One case of a drill checker and its tolerance: what the reader's function is called with,
what the package's reference gives, and how far an answer may be from it.

The tolerance of an entry is ``k * (sens + u * scale) + slack * |expected| + atol``, plus
``u * bound`` where the answer is graded at float64:

====================  ==========================================================================
``u``                 the unit roundoff of the precision graded: the answer's own dtype (float64,
                      or float32 for a float32 answer) where the statement leaves it open, the
                      statement's where it fixes one
``scale``             the size of the terms the entry is built from (``|expected|`` by default)
``sens``              how much the reference moves when its float inputs move by ``u``
                      (the conditioning: near-tied rewards, a tiny log-ratio)
``k``                 16 units of slack, as a sum of a few rounded terms needs
``bound``             at float64, an error bound in units of ``u`` that covers every valid
                      formulation of the statement where they round differently (a log-softmax
                      by ``np.logaddexp.reduce`` is not one by a max shift:
                      :func:`log_softmax_error`); a worst case already, so ``k`` does not
                      multiply it. At float32 and below the cases themselves say which
                      formulations keep enough digits (logits near 1000 in float32)
``slack``             a relative difference the statement allows (a guard eps of 1e-8 in a
                      count's denominator, as verl's ``masked_mean``)
``atol``              an absolute tolerance the statement sets (1e-3 nats; 1e-6 for "an
                      all-equal group gives 0")
====================  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import ml_dtypes
import numpy as np

from grpo_lab.drills.harness import Answer

__all__ = ["SCALAR_TYPE", "UNIT_ROUNDOFF", "Case", "Mistake", "close", "full", "grade_dtype",
           "log_softmax_error", "tolerance"]

#: Unit roundoff (half the spacing at 1) of the dtypes an answer may come in.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11,
                 "bfloat16": 2.0**-8}
#: The scalar type of each dtype narrower than float64, to show or round a value in it.
SCALAR_TYPE = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@dataclass
class Case:
    """One call of the reader's function: ``fn(*args, **kwargs)`` should give ``expected``.

    ``inputs``: the named inputs, for the messages and the mistakes. ``reference``: the
    package's function of ``args`` (for the sensitivity), with ``perturb`` the positions of
    the float arrays in ``args`` that it perturbs. ``show(index)``: the inputs behind one
    entry, as text (default: each same-shaped input at that index, and the scalars).
    ``atol``: an absolute tolerance the statement sets (1e-3 nats; 1e-6 for "an all-equal
    group gives 0"), a number or per entry, added to the rest. ``bound``: a worst-case error,
    in units of ``u``, of the valid formulations, for float64 grading (a number or per entry).
    """
    where: str
    args: tuple
    expected: np.ndarray
    inputs: dict = field(default_factory=dict)
    kwargs: dict = field(default_factory=dict)
    scale: object = None
    reference: Callable | None = None
    perturb: tuple = ()
    show: Callable | None = None
    atol: object = 0.0
    bound: object = 0.0
    _sens: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.expected = np.asarray(self.expected, dtype=np.float64)

    def sensitivity(self, dtype: str) -> np.ndarray:
        """How far the reference moves when its float inputs move by ``u`` (relative), taken
        to first order: three random-sign perturbations of 1e-9, scaled down to ``u``."""
        if self.reference is None or not self.perturb:
            return np.zeros(self.expected.shape)
        if dtype not in self._sens:
            rng, step = np.random.default_rng(0), 1e-9
            worst = np.zeros(self.expected.shape)
            for _ in range(3):
                args = list(self.args)
                for i in self.perturb:
                    a = np.asarray(args[i], dtype=np.float64)
                    args[i] = a * (1 + step * rng.choice([-1.0, 1.0], a.shape))
                with np.errstate(all="ignore"):
                    moved = np.abs(np.asarray(self.reference(*args), np.float64) - self.expected)
                worst = np.fmax(worst, np.nan_to_num(moved, nan=0.0, posinf=0.0))
            self._sens[dtype] = worst * (UNIT_ROUNDOFF[dtype] / step)
        return self._sens[dtype]

    def entry_inputs(self, index) -> str:
        if self.show is not None:
            return self.show(index)
        parts = []
        for name, x in self.inputs.items():
            x = np.asarray(x)
            if x.ndim == 0:
                parts.append(f"{name} = {_plain(x)}")
            elif x.shape == self.expected.shape and index != ():
                parts.append(f"{name}{list(index)} = {_plain(x[index])}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Mistake:
    """A usual wrong answer: its ``hint``, and ``value(case)`` the value it gives on a case
    (None where the mistake does not apply)."""
    hint: str
    value: Callable


def _plain(x) -> str:
    x = np.asarray(x)
    if x.ndim == 0:
        v = x.item()
        return repr(float(v)) if isinstance(v, float) else repr(v)
    body = ", ".join(_plain(v) for v in x.ravel()[:8])
    return f"[{body}{', ...' if x.size > 8 else ''}]"


def full(value, dtype: str = "float64") -> str:
    """``value`` at full precision in ``dtype``: every digit that dtype holds, no more.

    >>> full(0.1 + 0.2), full(0.1 + 0.2, "float32"), full(0.1 + 0.2, "bfloat16")
    ('0.30000000000000004', '0.3', '0.300781')
    """
    value = float(value)
    if dtype in SCALAR_TYPE:
        return str(SCALAR_TYPE[dtype](value))
    return repr(value)


def grade_dtype(answer: Answer, fixed: str | None = None) -> str:
    """The precision an answer is graded at: ``fixed`` where the statement sets one, else the
    answer's own float dtype (ints and bools are exact, graded as float64)."""
    if fixed is not None:
        return fixed
    return answer.dtype if answer.dtype in UNIT_ROUNDOFF else "float64"


def tolerance(case: Case, dtype: str, *, k: float = 16.0, slack: float = 0.0) -> np.ndarray:
    """Per-entry tolerance of ``case`` at precision ``dtype`` (see the module's table)."""
    u = UNIT_ROUNDOFF[dtype]
    scale = np.abs(case.expected) if case.scale is None else np.abs(case.scale)
    scale = np.broadcast_to(scale, case.expected.shape)
    bound = u * np.asarray(case.bound, dtype=np.float64) if dtype == "float64" else 0.0
    return (k * (case.sensitivity(dtype) + u * scale) + bound + slack * np.abs(case.expected)
            + case.atol)


def log_softmax_error(logits, axis: int = -1) -> np.ndarray:
    """A bound, in units of the unit roundoff ``u``, on the error of ``log_softmax(logits)``
    entry by entry, over the formulations a careful answer uses: a shift by the row's max then
    ``log(sum(exp))`` (NumPy, torch), and ``np.logaddexp.reduce`` in any order.

    The max shift rounds ``z - m`` (``|z - m| <= 2 max|z|``), sums V exponentials at most 1
    (V + 1 roundings of a sum >= 1, so as many ``u`` of its log) and rounds ``log`` and the
    final subtraction (``log V`` and ``|logp|``). ``np.logaddexp.reduce`` folds the row one
    entry at a time: V - 1 steps, each rounding a partial logsumexp of size at most
    ``max|z| + log V``, plus a couple of ``u`` for its ``exp`` and ``log1p``. The bound is the
    sum of both: ``|logp| + (V + 3) * (max|z| + log V + 2)``.

    >>> z = np.array([0.0, 1.0, 2.0])
    >>> bool((log_softmax_error(z) > 6 * (2 + np.log(3))).all())
    True
    """
    z = np.asarray(logits, dtype=np.float64)
    V = z.shape[axis]
    with np.errstate(all="ignore"):
        top = np.abs(z).max(axis=axis, keepdims=True)
        lse = np.logaddexp.reduce(z, axis=axis, keepdims=True)
        logp = z - lse
    return np.abs(logp) + (V + 3) * (top + np.log(V) + 2)


def close(got, want, tol) -> np.ndarray:
    """Entrywise ``|got - want| <= tol``, with NaN equal to NaN and inf to the same inf.

    >>> close([1.0, np.nan, np.inf, 2.0], [1.0 + 1e-12, np.nan, np.inf, np.nan], 1e-9).tolist()
    [True, True, True, False]
    """
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(invalid="ignore"):
        return (np.abs(got - want) <= tol) | (got == want) | (np.isnan(got) & np.isnan(want))
