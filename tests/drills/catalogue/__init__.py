"""The proof of the checkers: for every drill, right answers written the ways people write
them, and realistic wrong ones.

A checker is only as good as the mistakes it catches. Each :class:`Drill` lists the answers a
checker must accept (at least five: loops, torch, float32, another valid formula or guard
placement, the package's own function) and at least ten wrong ones that people really write:
a wrong axis, a missing ``keepdims``, the other std convention, eps in the wrong place, a
missing clip side, verl's dual-clip, a sign error, padding counted in a mean, an input changed
in place, float32 results passed off as float64, a regex without ``re.DOTALL``, a loss
detached from its gradient, an endless loop... Each :class:`Wrong` carries the words its
verdict must contain, so that a test (tests/drills/test_checkers_against_catalogue.py) can
check that the checker rejects it *for the right reason*; :func:`prove` tallies the verdicts
(``gl.drills.proof_table`` does it for a whole catalogue, for chapter 9's table). One module per
chapter, as in ``grpo_lab/drills/``. It lives under ``tests/``: readers install the checkers,
not the wrong answers that prove them. The modules import each other relatively, so that
``gl.drills.load_catalogue`` can load this folder from a path.

>>> import grpo_lab as gl
>>> sorted(CATALOGUE) == sorted(name.removeprefix("check_") for name in gl.drills.__all__
...                             if name.startswith("check_"))
True
>>> all(len(d.rights) >= 5 and len(d.wrongs) >= 10 for d in CATALOGUE.values())
True
"""

from __future__ import annotations

from grpo_lab.drills.proof import Proof
from grpo_lab.drills.proof import prove as _prove

from . import (ch01_advantages, ch02_aggregation, ch02_ppo, ch03_kl, ch04_precision,
               ch05_rewards, ch06_training, ch06b_capstone, ch06b_real_model, ch07_performance,
               ch08_process)
from .entry import ENDLESS_LOOP, ENDLESS_LOOP_LIMIT_S, Drill, Wrong

__all__ = ["CATALOGUE", "ENDLESS_LOOP", "ENDLESS_LOOP_LIMIT_S", "Drill", "Proof", "Wrong",
           "prove"]

#: Every drill, by the checker's name without ``check_``, in the order of the book.
CATALOGUE = {d.checker.removeprefix("check_"): d for module in (
    ch01_advantages, ch02_ppo, ch02_aggregation, ch03_kl, ch04_precision, ch05_rewards,
    ch06_training, ch06b_real_model, ch06b_capstone, ch07_performance, ch08_process)
    for d in module.DRILLS}


def prove(name: str, *, limit_s: float = 1.0) -> Proof:
    """Run drill ``name``'s checker on its whole catalogue (quietly) and tally the verdicts."""
    return _prove(name, CATALOGUE[name], limit_s=limit_s)
