"""The deck's numbers: every number a card quotes is computed here, never typed into a card.

A card's text (``grpo_lab/deck/cards/*.toml``) writes a computed number as a placeholder,
``{{name}}`` or ``{{name:.3f}}`` (a Python format spec after the colon). A provider computes
it with the package's own functions::

    from grpo_lab.deck.registry import provides

    @provides("p_equal", "a_plus")
    def _advantages():
        p = gl.group_stats.zero_spread_probability(8, 0.9)
        return {"p_equal": p, "a_plus": ...}

A provider takes no argument and returns a dict with exactly the names it declares; each name
has one provider. :func:`compute_numbers` imports the provider modules, calls each provider
once and checks both rules. :func:`fill` puts the numbers into a text and raises on a name
that no provider computes. Literal numbers a card may state (settings and inputs, such as a
clip range of 0.2 or G = 64: facts, not results) are listed in the card's ``given``; see
:func:`literal_numbers`.
"""

from __future__ import annotations

import importlib
import re
from typing import Callable

# the modules whose providers make up the deck's numbers
PROVIDER_MODULES = ("grpo_lab.deck.numbers", "grpo_lab.deck.numbers_more")

PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)(?::([^{}]*))?\}\}")
# a number written in a text: 12, 0.2, 1e-8, 3.4e38, 65,504 (not inside a placeholder)
LITERAL = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")

_PROVIDERS: dict[str, Callable[[], dict]] = {}
_DECLARED: dict[Callable[[], dict], tuple[str, ...]] = {}


def provides(*names: str):
    """Register the decorated zero-argument function as the provider of ``names``."""
    if not names:
        raise ValueError("provides: name at least one number")
    for name in names:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"provides: {name!r} is not a valid number name")
        if name in _PROVIDERS:
            raise ValueError(f"provides: {name!r} already has a provider "
                             f"({_PROVIDERS[name].__module__}.{_PROVIDERS[name].__qualname__})")

    def register(func):
        for name in names:
            _PROVIDERS[name] = func
        _DECLARED[func] = tuple(names)
        return func

    return register


def compute_numbers() -> dict:
    """Every number of the deck, by name: each provider called once, its keys checked."""
    for module in PROVIDER_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:          # a module that exists but fails to import: say so
                raise
    numbers: dict = {}
    for func, names in _DECLARED.items():
        out = func()
        if not isinstance(out, dict) or set(out) != set(names):
            got = sorted(out) if isinstance(out, dict) else type(out).__name__
            raise ValueError(f"{func.__module__}.{func.__qualname__} declares {sorted(names)} "
                             f"but returned {got}")
        numbers.update(out)
    return numbers


def _check_text(text) -> str:
    if not isinstance(text, str):
        kind = type(text).__name__ if text is not None else "NoneType None"
        raise TypeError(f"text: expected a str, got {kind}")
    return text


def placeholders(text: str) -> list[tuple[str, str | None]]:
    """The (name, format spec) of each placeholder in ``text``, in order."""
    return [(m.group(1), m.group(2)) for m in PLACEHOLDER.finditer(_check_text(text))]


def fill(text: str, numbers: dict) -> str:
    """``text`` with each ``{{name[:spec]}}`` replaced by ``format(numbers[name], spec)``; a
    name no provider computes is a ``ValueError`` naming ``text``."""
    text = _check_text(text)
    if not isinstance(numbers, dict):
        raise TypeError(f"numbers: expected a dict of the deck's numbers by name, got "
                        f"{type(numbers).__name__}")

    def one(match):
        name, spec = match.group(1), match.group(2) or ""
        if name not in numbers:
            raise ValueError(f"text: quotes {{{{{name}}}}}, which no provider computes")
        return format(numbers[name], spec)

    return PLACEHOLDER.sub(one, text)


def literal_numbers(text: str) -> list[str]:
    """The numbers written literally in ``text`` (placeholders removed first)."""
    return LITERAL.findall(PLACEHOLDER.sub(" ", _check_text(text)))
