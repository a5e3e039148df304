"""The proof of the checkers: for every drill, realistic wrong implementations and right ones.

A checker is only as good as the mistakes it catches. Each :class:`Drill` lists the answers a
checker must accept (a hand-written solution and the package's own function) and at least five
wrong ones that people really write: a wrong axis, a missing ``keepdims``, the other std
convention, a missing clip side, a sign error, padding counted in a mean, an input changed in
place, a regex without ``re.DOTALL``, a loss detached from its gradient... Each :class:`Wrong`
carries the words its verdict must contain, so that a test
(tests/drills/test_checkers_against_catalogue.py) can check that the checker rejects it *for the
right reason*; :func:`prove` tallies the verdicts. One module per chapter, as in
``grpo_lab/drills/``. It lives under ``tests/``: readers install the checkers, not the wrong
answers that prove them.

>>> import grpo_lab as gl
>>> sorted(CATALOGUE) == sorted(name.removeprefix("check_") for name in gl.drills.__all__)
True
>>> min(len(d.wrongs) for d in CATALOGUE.values()) >= 5
True
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from grpo_lab import drills
from tests.drills.catalogue import (ch01_advantages, ch02_ppo, ch03_kl, ch04_precision,
                                    ch05_rewards, ch06_training, ch07_performance, ch08_process)
from tests.drills.catalogue.entry import Drill, Wrong

__all__ = ["CATALOGUE", "Drill", "Proof", "Wrong", "prove"]

#: Every drill, by the checker's name without ``check_``, in the order of the book.
CATALOGUE = {d.checker.removeprefix("check_"): d for module in (
    ch01_advantages, ch02_ppo, ch03_kl, ch04_precision, ch05_rewards, ch06_training,
    ch07_performance, ch08_process) for d in module.DRILLS}


@dataclass(frozen=True)
class Proof:
    """How a checker did on its catalogue: one verdict per right and per wrong answer."""
    drill: str
    rights_accepted: int
    rights: int
    wrongs_named: int          # rejected, and the verdict contains the expected hint
    wrongs: int
    failures: tuple            # (mistake, verdict) for every miss

    @property
    def ok(self) -> bool:
        return self.rights_accepted == self.rights and self.wrongs_named == self.wrongs


def _verdict_of(checker, fn) -> tuple[bool, str]:
    """Run a checker quietly and return (its answer, the verdict it would have printed)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        ok = checker(fn)
    return ok, buffer.getvalue().strip()


def prove(name: str) -> Proof:
    """Run drill ``name``'s checker on its whole catalogue (quietly) and tally the verdicts."""
    drill = CATALOGUE[name]
    checker = getattr(drills, drill.checker)
    failures, accepted, named = [], 0, 0
    for fn in drill.rights:
        ok, said = _verdict_of(checker, fn)
        accepted += ok
        if not ok:
            failures.append((f"right answer {getattr(fn, '__name__', fn)}", said))
    for wrong in drill.wrongs:
        ok, said = _verdict_of(checker, wrong.fn)
        hit = not ok and said.startswith("NOT YET: ") and wrong.hint in said
        named += hit
        if not hit:
            failures.append((wrong.mistake, said))
    return Proof(name, accepted, len(drill.rights), named, len(drill.wrongs), tuple(failures))
