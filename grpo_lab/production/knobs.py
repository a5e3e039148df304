"""Chapter 8's knob map, read from the data file ``knobs.toml`` that ships with the package.

Taught in chapter 8 (``chapters/08_production_knobs.ipynb``); reached as ``gl.presets.*``.

The map is facts, not code: for each concept of a GRPO step, the grpo_lab option and the
setting of TRL, verl and OpenRLHF, every cell citing the files it was read in. The facts live
in ``grpo_lab/production/knobs.toml`` (its header describes the fields); this module reads
them into small frozen records and writes the Markdown table the chapter shows:

* :func:`knob_sources`: the files read, ``{key: Source}``;
* :func:`knob_table`: the rows, one :class:`Row` per concept, in the order a GRPO step uses
  them;
* :func:`knob_map_markdown`: the map and its sources as one Markdown table with a legend;
* :data:`SOURCES` and :data:`KNOB_MAP`: the packaged file's sources and rows, read once.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["KNOBS_FILE", "KNOB_MAP", "SOURCES", "SYSTEMS", "Row", "Source",
           "check_knobs_data", "knob_map_markdown", "knob_sources", "knob_table", "read_knobs"]

KNOBS_FILE = "knobs.toml"                             # beside this module, in the package
SYSTEMS = ("grpo_lab", "trl", "verl", "openrlhf")     # the map's columns, in order
_SOURCE_FIELDS = ("system", "repo", "path", "commit", "what")


@dataclass(frozen=True)
class Source:
    """One file that was read: where it lives and at which commit."""

    system: str      # "TRL", "verl", "OpenRLHF" or "grpo_lab"
    repo: str        # owner/name on GitHub
    path: str        # the file inside the repository
    commit: str      # the 40-hex commit of the copy read ("" for this package)
    what: str        # what was read in it

    @property
    def short(self) -> str:
        """``path @ 1234567``: how a row cites it."""
        return f"{self.path} @ {self.commit[:7]}" if self.commit else self.path


@dataclass(frozen=True)
class Row:
    """One concept of the map: the grpo_lab option and each system's setting, with sources.

    Each cell is ``(text, source keys)``; the keys are those of :data:`SOURCES`. ``options``
    names the grpo_lab functions the grpo_lab cell speaks of, as ``"function"`` or
    ``"function(keyword)"``.
    """

    concept: str
    grpo_lab: tuple[str, tuple[str, ...]]
    trl: tuple[str, tuple[str, ...]]
    verl: tuple[str, tuple[str, ...]]
    openrlhf: tuple[str, tuple[str, ...]]
    options: tuple[str, ...] = ()

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
        return tomllib.loads(file.read_text(encoding="utf-8"))
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


def _check_knob(i, knob, sources) -> None:
    where = f"knobs: [[knob]] number {i + 1} ({knob.get('concept', '?')!r})"
    fields = {"concept", "options", "sources", *SYSTEMS}
    if set(knob) != fields:
        raise ValueError(f"{where}: expected exactly the fields {', '.join(sorted(fields))}, "
                         f"got {', '.join(sorted(knob))}")
    texts = [knob[s] for s in ("concept", *SYSTEMS)]
    if not all(isinstance(t, str) and t.strip() and "|" not in t for t in texts):
        raise ValueError(f"{where}: expected a non-empty text without '|' (it would end a "
                         f"Markdown table cell) for concept and every system, got {texts!r}")
    if not _strings(knob["options"]):
        raise ValueError(f"{where}: expected options to be a list of grpo_lab names, "
                         f"got {knob['options']!r}")
    cited = knob["sources"]
    if not isinstance(cited, dict) or set(cited) != set(SYSTEMS) \
            or not all(cited[s] and _strings(cited[s]) and set(cited[s]) <= set(sources)
                       for s in SYSTEMS):
        raise ValueError(f"{where}: expected sources = {{{', '.join(SYSTEMS)}}}, each a "
                         f"non-empty list of keys of [sources] ({', '.join(sources)}), "
                         f"got {cited!r}")


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
    'trl/trainer/grpo_config.py @ 006d32c'
    """
    data = check_knobs_data(read_knobs(path))
    return {key: Source(**fields) for key, fields in data["sources"].items()}


def knob_table(path=None) -> tuple[Row, ...]:
    """The map, one :class:`Row` per concept, from ``knobs.toml`` (or the file at ``path``).

    >>> import grpo_lab as gl
    >>> row = gl.presets.knob_table()[0]
    >>> row.concept
    'Advantage estimator; std convention and its eps'
    >>> row.options, row.verl[1]
    (('group_advantages(eps)', 'group_advantages(ddof)'), ('V1', 'V2'))
    """
    data = check_knobs_data(read_knobs(path))
    return tuple(Row(concept=knob["concept"], options=tuple(knob["options"]),
                     **{s: (knob[s], tuple(knob["sources"][s])) for s in SYSTEMS})
                 for knob in data["knob"])


#: The packaged file's sources and rows, read once when the module is imported.
SOURCES: dict[str, Source] = knob_sources()
KNOB_MAP: tuple[Row, ...] = knob_table()


MAP_COLUMNS = ("grpo_lab", "TRL", "verl", "OpenRLHF")   # the order of Row.cells()


def knob_map_markdown() -> str:
    """The map as Markdown: one small table per concept, a row per system, each setting
    tagged with its sources (it fits a laptop and a phone); the sources below."""
    tables = []
    for row in KNOB_MAP:
        lines = [f"**{row.concept}**", "", "| System | Setting [sources] |", "| --- | --- |"]
        for system, (text, keys) in zip(MAP_COLUMNS, row.cells()):
            lines.append(f"| {system} | {text} [{', '.join(keys)}] |")
        tables.append("\n".join(lines))
    legend = ["**Sources** (the version each cell describes):", ""]
    for key, s in SOURCES.items():
        where = f"`{s.path}` at commit `{s.commit[:10]}`" if s.commit else f"`{s.path}`"
        legend.append(f"- **{key}** ({s.system}, {s.repo}): {where}: {s.what}")
    return "\n\n".join(tables) + "\n\n" + "\n".join(legend) + "\n"
