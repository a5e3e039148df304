"""What one catalogue entry is: a drill's checker with the answers it must accept and reject."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["ENDLESS_LOOP", "ENDLESS_LOOP_LIMIT_S", "Drill", "Wrong", "endless_loop"]

#: The catalogued mistake whose function never returns, and the call limit it is stopped at:
#: any limit gives its verdict ("did not finish"), so the proof spins as little as it may.
ENDLESS_LOOP, ENDLESS_LOOP_LIMIT_S = "an endless loop", 0.1


@dataclass(frozen=True)
class Wrong:
    """A wrong implementation: what it gets wrong, the function, and words its verdict needs;
    ``limit_s``, where set, limits each call of it in the proof (an answer that never returns)."""
    mistake: str
    fn: Callable
    hint: str
    limit_s: float | None = None


def endless_loop(fn: Callable) -> Wrong:
    """The endless loop ``fn`` as a wrong answer: stopped after ENDLESS_LOOP_LIMIT_S."""
    return Wrong(ENDLESS_LOOP, fn, "did not finish", limit_s=ENDLESS_LOOP_LIMIT_S)


@dataclass(frozen=True)
class Drill:
    """A drill's checker (a name in ``gl.drills``), what it must accept and what it must not."""
    checker: str
    chapter: int
    rights: tuple
    wrongs: tuple
