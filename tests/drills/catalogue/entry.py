"""What one catalogue entry is: a drill's checker with the answers it must accept and reject."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Drill", "Wrong"]


@dataclass(frozen=True)
class Wrong:
    """A wrong implementation: what it gets wrong, the function, and words its verdict needs."""
    mistake: str
    fn: Callable
    hint: str


@dataclass(frozen=True)
class Drill:
    """A drill's checker (a name in ``gl.drills``), what it must accept and what it must not."""
    checker: str
    chapter: int
    rights: tuple
    wrongs: tuple
