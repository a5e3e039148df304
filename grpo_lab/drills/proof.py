"""The proof of the checkers, counted: each checker run on its catalogue of right answers it
must accept and wrong answers it must reject with the hint that names the mistake.

The catalogue lives in the repository's tests (``tests/drills/catalogue/``), not in the
installed package: readers install the checkers, not the wrong answers that prove them. So
:func:`proof_table` takes the catalogue's folder and loads it from there::

    rows = gl.drills.proof_table("../tests/drills/catalogue")   # from chapters/

A catalogue is a package whose ``CATALOGUE`` maps a drill's name to an entry with
``checker`` (a name in ``gl.drills``), ``chapter``, ``rights`` (functions) and ``wrongs``
(entries with ``mistake``, ``fn`` and ``hint``, the words its verdict must contain, and
optionally ``limit_s``: a shorter limit for a function known never to return, whose verdict
any limit gives).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from grpo_lab.drills import harness

__all__ = ["Proof", "load_catalogue", "prove", "proof_table"]


@dataclass(frozen=True)
class Proof:
    """How a checker did on its catalogue: one verdict per right and per wrong answer."""
    drill: str
    checker: str
    chapter: int
    rights_accepted: int
    rights: int
    wrongs_named: int          # rejected, and the verdict contains the expected hint
    wrongs: int
    failures: tuple            # (mistake, verdict) for every miss

    @property
    def ok(self) -> bool:
        return self.rights_accepted == self.rights and self.wrongs_named == self.wrongs


def load_catalogue(path) -> dict:
    """The ``CATALOGUE`` of the catalogue package in folder ``path``."""
    path = Path(path).resolve()
    init = path / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(f"path: expected the catalogue's folder (with __init__.py), "
                                f"got {str(path)!r}")
    name = "_grpo_lab_drill_catalogue"
    if name in sys.modules and Path(sys.modules[name].__file__).resolve() == init:
        return sys.modules[name].CATALOGUE
    spec = importlib.util.spec_from_file_location(name, init,
                                                  submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    if not isinstance(getattr(module, "CATALOGUE", None), dict):
        del sys.modules[name]
        raise ValueError(f"path: expected the catalogue's folder, a package that defines "
                         f"CATALOGUE, got {str(path)!r}")
    return module.CATALOGUE


def _verdict_of(checker, fn) -> tuple[bool, str]:
    """Run a checker quietly and return (its answer, the verdict it would have printed)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        ok = checker(fn)
    return ok, buffer.getvalue().strip()


def prove(name: str, drill, *, limit_s: float = 1.0) -> Proof:
    """Run drill ``name``'s checker on its catalogue entry ``drill`` (quietly), each call of a
    catalogued function limited to ``limit_s`` seconds (a wrong answer's own ``limit_s``, where
    it has a shorter one), and tally the verdicts."""
    from grpo_lab import drills

    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  imported here, not halfway inside a time-limited call
    checker = getattr(drills, drill.checker)
    failures, accepted, named = [], 0, 0
    saved, harness.TIME_LIMIT_S = harness.TIME_LIMIT_S, limit_s
    try:
        for fn in drill.rights:
            ok, said = _verdict_of(checker, fn)
            accepted += ok
            if not ok:
                failures.append((f"right answer {getattr(fn, '__name__', fn)}", said))
        for wrong in drill.wrongs:
            own = getattr(wrong, "limit_s", None)
            harness.TIME_LIMIT_S = limit_s if own is None else min(own, limit_s)
            ok, said = _verdict_of(checker, wrong.fn)
            hit = not ok and said.startswith("NOT YET: ") and wrong.hint in said
            named += hit
            if not hit:
                failures.append((wrong.mistake, said))
    finally:
        harness.TIME_LIMIT_S = saved
    return Proof(name, drill.checker, drill.chapter, accepted, len(drill.rights), named,
                 len(drill.wrongs), tuple(failures))


def proof_table(path, *, limit_s: float = 1.0) -> list[Proof]:
    """:func:`prove` for every drill of the catalogue in folder ``path``, in the book's order."""
    catalogue = load_catalogue(path)
    return [prove(name, drill, limit_s=limit_s) for name, drill in catalogue.items()]
