"""Chapter 8's knob map, read from the data file ``knobs.toml`` that ships with the package.

Taught in chapter 8 (``chapters/08_production_knobs.ipynb``); reached as ``gl.presets.*``.

The map is facts, not code: for each concept of a GRPO step, the grpo_lab option and the
setting of TRL 1.16.0, verl 0.9.1 and OpenRLHF 0.11.2, every cell citing the file and line it
was read at. The facts live in ``grpo_lab/production/knobs.toml`` (its header describes the
fields); ``tests/reference`` checks every citation and every stated default against the
pinned releases. This module reads them into small frozen records and writes the Markdown
table the chapter shows:

* :func:`knob_sources`: the files read, ``{key: Source}``;
* :func:`knob_table`: the rows, one :class:`Row` per concept, in the order a GRPO step uses
  them;
* :func:`knob_map_markdown`: the map and its sources as one Markdown table with a legend;
* :data:`SOURCES` and :data:`KNOB_MAP`: the packaged file's sources and rows, read once.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from grpo_lab.numerics.validate import describe

__all__ = ["KNOBS_FILE", "KNOB_MAP", "SOURCES", "SYSTEMS", "Cite", "Row", "Source",
           "check_knobs_data", "knob_map_markdown", "knob_sources", "knob_table", "parse_cite",
           "read_knobs"]

KNOBS_FILE = "knobs.toml"                             # beside this module, in the package
SYSTEMS = ("grpo_lab", "trl", "verl", "openrlhf")     # the map's columns, in order
_SOURCE_FIELDS = ("system", "repo", "package", "version", "path", "what")
_CITE = re.compile(r"(?P<key>[A-Za-z]\w*):(?P<line>[1-9]\d*) (?P<anchor>\S.*)")


@dataclass(frozen=True)
class Source:
    """One file of a pinned release that was read: which release, which file."""

    system: str      # "TRL", "verl", "OpenRLHF" or "grpo_lab"
    repo: str        # owner/name on GitHub
    package: str     # the PyPI package ("grpo_lab" for this package)
    version: str     # the release read, e.g. "1.16.0" ("" for this package)
    path: str        # the file inside the release's wheel
    what: str        # what was read in it

    @property
    def short(self) -> str:
        """``path @ trl 1.16.0``: the file and the release."""
        return f"{self.path} @ {self.package} {self.version}" if self.version else self.path


@dataclass(frozen=True)
class Cite:
    """One citation: ``anchor``, text that stands on line ``line`` of source ``key``
    (``line`` 0 and no anchor for this package's own cells)."""

    key: str
    line: int = 0
    anchor: str = ""

    def __str__(self) -> str:
        return f"{self.key} l. {self.line}" if self.line else self.key


def parse_cite(text: str) -> Cite:
    """``"T2:2787 / (std_rewards + 1e-4)"`` -> ``Cite("T2", 2787, "/ (std_rewards + 1e-4)")``;
    ``"grpo_lab"`` -> ``Cite("grpo_lab")``."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected a citation 'KEY:LINE ANCHOR' (or 'grpo_lab') as a str, "
                        f"got {describe(text)}")
    if text == "grpo_lab":
        return Cite("grpo_lab")
    match = _CITE.fullmatch(text)
    if match is None:
        raise ValueError(f"text: expected a citation 'KEY:LINE ANCHOR' (or 'grpo_lab'), "
                         f"got {text!r}")
    return Cite(match["key"], int(match["line"]), match["anchor"])


@dataclass(frozen=True)
class Row:
    """One concept of the map: the grpo_lab option and each system's setting, with sources.

    Each cell is ``(text, cites)``, the cites :class:`Cite` records of keys of
    :data:`SOURCES`. ``options`` names the grpo_lab functions the grpo_lab cell speaks of, as
    ``"function"`` or ``"function(keyword)"``. ``defaults`` holds ``(system, name, value)``
    for each release default the row's text states (``"None"`` stands for None).
    """

    concept: str
    grpo_lab: tuple[str, tuple[Cite, ...]]
    trl: tuple[str, tuple[Cite, ...]]
    verl: tuple[str, tuple[Cite, ...]]
    openrlhf: tuple[str, tuple[Cite, ...]]
    options: tuple[str, ...] = ()
    defaults: tuple[tuple[str, str, object], ...] = ()

    def cells(self):
        return (self.grpo_lab, self.trl, self.verl, self.openrlhf)


def read_knobs(path=None) -> dict:
    """The parsed data file: the packaged ``knobs.toml``, or the TOML file at ``path``."""
    if path is None:
        where, file = KNOBS_FILE, resources.files(__package__).joinpath(KNOBS_FILE)
    elif isinstance(path, (str, os.PathLike)):
        where, file = str(path), Path(path)
    else:
        raise TypeError(f"path: expected None (the packaged {KNOBS_FILE}), a str or a "
                        f"path-like, got {type(path).__name__}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:              # names neither the file nor the argument
        raise ValueError(f"knobs: expected {where} to be UTF-8 text (TOML), got the byte "
                         f"{err.object[err.start:err.start + 1]!r} at offset {err.start}, "
                         f"which is not UTF-8") from None
    except OSError as err:
        raise ValueError(f"path: expected a readable TOML file, got {where!r}: "
                         f"{err.strerror or err}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"knobs: expected {where} to be valid TOML, got: {err}") from None


def _strings(value) -> bool:
    """A list of non-empty strings (the empty list included)."""
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _check_source(key, fields) -> None:
    if not isinstance(fields, dict) or set(fields) != set(_SOURCE_FIELDS) \
            or not all(isinstance(v, str) for v in fields.values()):
        raise ValueError(f"knobs: expected [sources.{key}] to have exactly the string fields "
                         f"{', '.join(_SOURCE_FIELDS)}, got {fields!r}")


def _cited_keys(cites):
    """The source keys of a list of citation strings, or None if one is malformed."""
    try:
        return [parse_cite(c).key for c in cites]
    except (TypeError, ValueError):
        return None


def _check_knob(i, knob, sources) -> None:
    where = f"knobs: [[knob]] number {i + 1} ({knob.get('concept', '?')!r})"
    fields = {"concept", "options", "sources", *SYSTEMS}
    if not fields <= set(knob) <= fields | {"defaults"}:
        raise ValueError(f"{where}: expected exactly the fields {', '.join(sorted(fields))} "
                         f"(and maybe defaults), got {', '.join(sorted(knob))}")
    texts = [knob[s] for s in ("concept", *SYSTEMS)]
    if not all(isinstance(t, str) and t.strip() and "|" not in t for t in texts):
        raise ValueError(f"{where}: expected a non-empty text without '|' (it would end a "
                         f"Markdown table cell) for concept and every system, got {texts!r}")
    if not _strings(knob["options"]):
        raise ValueError(f"{where}: expected options to be a list of grpo_lab names, "
                         f"got {knob['options']!r}")
    cited = knob["sources"]
    if not isinstance(cited, dict) or set(cited) != set(SYSTEMS) \
            or not all(cited[s] and _strings(cited[s]) and _cited_keys(cited[s]) is not None
                       and set(_cited_keys(cited[s])) <= set(sources) for s in SYSTEMS):
        raise ValueError(f"{where}: expected sources = {{{', '.join(SYSTEMS)}}}, each a "
                         f"non-empty list of citations 'KEY:LINE ANCHOR' of keys of [sources] "
                         f"({', '.join(sources)}), got {cited!r}")
    defaults = knob.get("defaults", {})
    if not isinstance(defaults, dict) or not set(defaults) <= set(SYSTEMS[1:]) \
            or not all(isinstance(d, dict) and d for d in defaults.values()):
        raise ValueError(f"{where}: expected defaults = {{system = {{name = value}}}} for "
                         f"systems among {', '.join(SYSTEMS[1:])}, got {defaults!r}")


def check_knobs_data(data: dict) -> dict:
    """Validate a parsed knobs file: its ``[sources]`` and its ``[[knob]]`` rows; returns it.

    Every source has exactly the fields of :class:`Source`; every row has a concept, its
    options, a text for each of :data:`SYSTEMS` (no ``|``, which would end a Markdown table
    cell) and, for each, the keys of the sources it cites, all of them keys of ``[sources]``.
    A bad file is a ``ValueError`` naming the row.
    """
    if not isinstance(data.get("sources"), dict) or not data["sources"]:
        raise ValueError(f"knobs: expected a [sources.KEY] table per file read, got "
                         f"{sorted(data)}")
    if not isinstance(data.get("knob"), list) or not data["knob"]:
        raise ValueError(f"knobs: expected one [[knob]] table per concept, got {sorted(data)}")
    for key, fields in data["sources"].items():
        _check_source(key, fields)
    for i, knob in enumerate(data["knob"]):
        _check_knob(i, knob, data["sources"])
    return data


def knob_sources(path=None) -> dict[str, Source]:
    """The files the map rests on, ``{key: Source}``, from ``knobs.toml`` (or ``path``).

    >>> import grpo_lab as gl
    >>> gl.presets.knob_sources()["T1"].short
    'trl/trainer/grpo_config.py @ trl 1.16.0'
    """
    data = check_knobs_data(read_knobs(path))
    return {key: Source(**fields) for key, fields in data["sources"].items()}


def knob_table(path=None) -> tuple[Row, ...]:
    """The map, one :class:`Row` per concept, from ``knobs.toml`` (or the file at ``path``).

    >>> import grpo_lab as gl
    >>> row = gl.presets.knob_table()[0]
    >>> row.concept
    'Advantage estimator; std convention and its eps'
    >>> row.options, [str(c) for c in row.verl[1]]
    (('group_advantages(eps)', 'group_advantages(ddof)'), ['V1 l. 861', 'V2 l. 321', 'V2 l. 326'])
    """
    data = check_knobs_data(read_knobs(path))
    return tuple(Row(concept=knob["concept"], options=tuple(knob["options"]),
                     defaults=tuple((system, name, value)
                                    for system, d in knob.get("defaults", {}).items()
                                    for name, value in d.items()),
                     **{s: (knob[s], tuple(parse_cite(c) for c in knob["sources"][s]))
                        for s in SYSTEMS})
                 for knob in data["knob"])


#: The packaged file's sources and rows, read once when the module is imported.
SOURCES: dict[str, Source] = knob_sources()
KNOB_MAP: tuple[Row, ...] = knob_table()


MAP_COLUMNS = ("grpo_lab", "TRL", "verl", "OpenRLHF")   # the order of Row.cells()


def _cites_markdown(cites) -> str:
    """``T2 l. 2770, 2787; T3 l. 1041``: the lines of each file, in the order cited."""
    by_key: dict[str, list[str]] = {}
    for c in cites:
        by_key.setdefault(c.key, []).extend([str(c.line)] if c.line else [])
    return "; ".join(f"{k} l. {', '.join(lines)}" if lines else k for k, lines in by_key.items())


def knob_map_markdown() -> str:
    """The map as Markdown: one small table per concept, a row per system, each setting
    tagged with the files and lines it was read at (it fits a laptop and a phone); the
    sources below."""
    tables = []
    for row in KNOB_MAP:
        lines = [f"**{row.concept}**", "", "| System | Setting [file l. line] |", "| --- | --- |"]
        for system, (text, cites) in zip(MAP_COLUMNS, row.cells()):
            lines.append(f"| {system} | {text} [{_cites_markdown(cites)}] |")
        tables.append("\n".join(lines))
    legend = ["**Sources** (the release each cell describes; line numbers are those of the "
              "file in the release's wheel on PyPI):", ""]
    for key, s in SOURCES.items():
        where = (f"`{s.path}` in [{s.package} {s.version}](https://pypi.org/project/"
                 f"{s.package}/{s.version}/)" if s.version else f"`{s.path}`")
        legend.append(f"- **{key}** ({s.system}, {s.repo}): {where}: {s.what}")
    return "\n\n".join(tables) + "\n\n" + "\n".join(legend) + "\n"
