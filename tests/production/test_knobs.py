"""The knob map (chapter 8) as data: knobs.toml loads into rows with every field, every cell
cites a source of its own system, every grpo_lab option it names exists, a bad file is refused
naming the row, the file ships in the wheel, and the chapter prints the package's map."""

import dataclasses
import inspect
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import grpo_lab as gl
from grpo_lab.production import knobs

ROOT = Path(__file__).resolve().parents[2]
KNOBS = ROOT / "grpo_lab" / "production" / knobs.KNOBS_FILE


# --- the loader ---------------------------------------------------------------------------------

def test_every_row_has_a_concept_options_and_a_cited_text_per_system():
    rows = gl.presets.knob_table()
    assert rows and all(isinstance(row, gl.presets.Row) for row in rows)
    for row in rows:
        assert isinstance(row.concept, str) and row.concept.strip()
        assert isinstance(row.options, tuple) and all(isinstance(o, str) for o in row.options)
        assert len(row.cells()) == len(knobs.SYSTEMS) == 4
        for system, (text, cites) in zip(knobs.SYSTEMS, row.cells()):
            assert getattr(row, system) == (text, cites)
            assert isinstance(text, str) and text.strip(), (row.concept, system)
            assert isinstance(cites, tuple) and cites, (row.concept, system)
            assert all(isinstance(c, gl.presets.Cite) and c.key in gl.presets.SOURCES
                       for c in cites), (row.concept, cites)


def test_every_source_has_the_fields_of_a_source():
    for key, source in gl.presets.knob_sources().items():
        assert isinstance(source, gl.presets.Source)
        for name in ("system", "repo", "package", "version", "path", "what"):
            assert isinstance(getattr(source, name), str), (key, name)
        assert source.repo.count("/") == 1 and source.path and source.what, key


def test_the_module_constants_are_the_packaged_file():
    assert gl.presets.KNOB_MAP == gl.presets.knob_table() == gl.presets.knob_table(KNOBS)
    assert gl.presets.SOURCES == gl.presets.knob_sources() == gl.presets.knob_sources(str(KNOBS))
    assert [row.concept for row in gl.presets.KNOB_MAP] == \
        [knob["concept"] for knob in tomllib.loads(KNOBS.read_text())["knob"]]


def test_rows_and_sources_are_read_only():
    row, source = gl.presets.KNOB_MAP[0], gl.presets.SOURCES["T1"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.concept = "changed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        source.version = "0.0.0"
    assert isinstance(gl.presets.KNOB_MAP, tuple)


def test_the_loader_reads_the_file_it_is_given(tmp_path):
    edited = tmp_path / "knobs.toml"
    edited.write_text(KNOBS.read_text().replace(
        'concept = "KL clamp"', 'concept = "KL clamp (edited)"'))
    concepts = [row.concept for row in gl.presets.knob_table(edited)]
    assert "KL clamp (edited)" in concepts and "KL clamp" not in concepts
    assert "KL clamp" in [row.concept for row in gl.presets.KNOB_MAP]    # the package's own


# --- the grpo_lab options a row names exist -------------------------------------------------------

def _option(option):
    """'group_advantages(eps)' -> ('group_advantages', 'eps'); 'grpo_loss' -> ('grpo_loss', None)."""
    match = re.fullmatch(r"(\w+)(?:\((\w+)\))?", option)
    assert match, f"an option is 'function' or 'function(keyword)', got {option!r}"
    return match.group(1), match.group(2)


@pytest.mark.parametrize("row", gl.presets.KNOB_MAP, ids=lambda row: row.concept)
def test_every_grpo_lab_option_named_exists(row):
    for option in row.options:
        name, keyword = _option(option)
        function = getattr(gl, name, None)
        assert callable(function), f"{row.concept}: gl.{name} does not exist"
        if keyword is not None:
            assert keyword in inspect.signature(function).parameters, \
                f"{row.concept}: gl.{name} has no argument {keyword!r}"
        text = row.grpo_lab[0]
        assert (keyword or name) in text, f"{row.concept}: {option} is not in {text!r}"


def test_the_rows_name_the_options_the_chapter_teaches():
    named = {_option(o) for row in gl.presets.KNOB_MAP for o in row.options}
    for option in [("group_advantages", "eps"), ("group_advantages", "ddof"),
                   ("group_advantages", "scale"), ("group_advantages", "baseline"),
                   ("grpo_loss", "beta"), ("grpo_loss", "kl"), ("grpo_loss", "agg"),
                   ("clipped_surrogate_loss", "dual_clip"), ("kl_k3", "clamp"),
                   ("grpo_loss", "dual_clip"), ("grpo_loss", "max_len"),
                   ("grpo_loss", "kl_clamp"), ("grpo_loss", "kl_bias_correction"),
                   ("kl_k3_plus", None), ("kl_grad_logp", None), ("kl_shaped_rewards", None),
                   ("normalise_then_sum", "batch")]:
        assert option in named, option


def test_a_misspelt_option_would_be_caught():
    with pytest.raises(AssertionError, match="has no argument 'epsilon'"):
        test_every_grpo_lab_option_named_exists(dataclasses.replace(
            gl.presets.KNOB_MAP[0], options=("group_advantages(epsilon)",)))


# --- a bad file is refused, naming the row -------------------------------------------------------

def _edited(tmp_path, old, new):
    text = KNOBS.read_text()
    assert old in text, old
    path = tmp_path / "knobs.toml"
    path.write_text(text.replace(old, new))                      # every occurrence
    return path


@pytest.mark.parametrize("old, new, words", [
    ('concept = "KL clamp"\noptions = ["grpo_loss(kl_clamp)", "kl_k3(clamp)"]\n',
     'concept = "KL clamp"\n', "number 15 ('KL clamp'): expected exactly the fields"),
    ('verl = "no switch; the seq-mean modes skip rows with no token"', 'verl = " "',
     "('Masking truncated completions'): expected a non-empty text"),
    ('trl = "no filter: it logs', 'trl = "no filter | it logs',
     "('Dynamic sampling (dropping groups without spread)'): expected a non-empty text without "
     "'|'"),
    ('options = ["grpo_loss(beta)"]', 'options = "grpo_loss(beta)"',
     "('KL coefficient'): expected options to be a list"),
    ('trl = ["T1:681 beta: float = field("]', 'trl = ["T9:681 beta: float = field("]',
     "('KL coefficient'): expected sources = {grpo_lab, trl, verl, openrlhf}, each a non-empty"),
    ('trl = ["T1:681 beta: float = field("]', 'trl = ["T1 beta"]',
     "('KL coefficient'): expected sources = {grpo_lab, trl, verl, openrlhf}, each a non-empty "
     "list of citations 'KEY:LINE ANCHOR'"),
    ('trl = ["T1:681 beta: float = field("]', 'trl = []',
     "expected sources = {grpo_lab, trl, verl, openrlhf}"),
    ('version = "0.11.2"\npath = "openrlhf/models/utils.py"', 'path = "openrlhf/models/utils.py"',
     "knobs: expected [sources.O4] to have exactly the string fields"),
    ('defaults = { trl = { beta = 0.0 }', 'defaults = { trl = {}, x = { beta = 0.0 }',
     "('KL coefficient'): expected defaults = {system = {name = value}}"),
    ("[[knob]]", "[[knobs]]", "knobs: expected one [[knob]] table per concept"),
    ('concept = "Dual-clip"', 'concept = "Dual-clip', "knobs.toml to be valid TOML, got: "),
])
def test_a_malformed_file_is_refused_naming_the_row(tmp_path, old, new, words):
    path = _edited(tmp_path, old, new)
    for load in (gl.presets.knob_table, gl.presets.knob_sources):
        with pytest.raises(ValueError) as info:
            load(path)
        assert words in str(info.value)


def test_the_path_must_be_a_path():
    with pytest.raises(TypeError, match="path: expected None .* a str or a path-like, got int"):
        gl.presets.knob_table(3)


# --- the facts in the file --------------------------------------------------------------------------

def test_sources_name_a_pinned_release_and_their_own_system():
    releases = {"TRL": ("trl", "1.16.0"), "verl": ("verl", "0.9.1"),
                "OpenRLHF": ("openrlhf", "0.11.2")}
    for key, s in gl.presets.SOURCES.items():
        if key == "grpo_lab":
            assert s.version == "" and s.short == s.path
            continue
        assert {"T": "TRL", "V": "verl", "O": "OpenRLHF"}[key[0]] == s.system
        assert (s.package, s.version) == releases[s.system], key
        assert s.short == f"{s.path} @ {s.package} {s.version}"


def test_a_citation_is_key_line_and_anchor():
    assert gl.presets.parse_cite("T2:2787 / (std + 1e-4)") == gl.presets.Cite("T2", 2787,
                                                                             "/ (std + 1e-4)")
    assert gl.presets.parse_cite("grpo_lab") == gl.presets.Cite("grpo_lab")
    assert str(gl.presets.Cite("V1", 85, "a.b")) == "V1 l. 85"
    for bad in ("T2", "T2:0 x", "T2:12", "T2 12 x", ""):
        with pytest.raises(ValueError, match=r"^text: expected a citation 'KEY:LINE ANCHOR' .*"
                                             rf"got {re.escape(repr(bad))}$"):
            gl.presets.parse_cite(bad)
    # issue 37, a regression: the error on None (or another non-str) names the argument, text
    for bad, got in ((None, "NoneType None"), (3, "int 3"), (["T2:1 x"], "a list of length 1")):
        with pytest.raises(TypeError, match=rf"^text: expected a citation 'KEY:LINE ANCHOR' "
                                            rf"\(or 'grpo_lab'\) as a str, got {re.escape(got)}$"):
            gl.presets.parse_cite(bad)


# The rows of issue 17: the first map's 14 concepts and the 7 rows it added (group size,
# optimiser steps, IS correction, dynamic sampling, bias-corrected KL, k3+, KL-in-reward order)
# and two more (several rewards; which tokens a token mean counts).
CONCEPTS = ["estimator", "group size", "scaling", "batch", "several rewards", "leave-one-out",
            "clip", "dual-clip", "kl estimator", "bias correction", "straight-through",
            "kl coefficient", "reward or in the loss", "before or after", "kl clamp",
            "aggregation", "which tokens", "gspo", "optimiser steps", "importance-sampling",
            "dynamic sampling", "truncated"]


def test_the_map_has_one_row_per_concept_of_the_issue():
    concepts = [row.concept.lower() for row in gl.presets.KNOB_MAP]
    assert len(concepts) == len(CONCEPTS)
    for word in CONCEPTS:
        assert any(word in c for c in concepts), word


def test_every_cell_cites_a_source_of_its_own_system():
    prefix = {1: "T", 2: "V", 3: "O"}
    for row in gl.presets.KNOB_MAP:
        cells = row.cells()
        assert cells[0][1] == (gl.presets.Cite("grpo_lab"),), row.concept
        for col, (text, cites) in enumerate(cells[1:], start=1):
            assert text.strip(), row.concept
            assert "|" not in text, (row.concept, "a pipe ends a Markdown table cell")
            assert cites and all(c.key.startswith(prefix[col]) and c.key in gl.presets.SOURCES
                                 and c.line > 0 for c in cites), (row.concept, cites)


def test_knob_map_markdown_is_a_table_with_every_source():
    md = gl.presets.knob_map_markdown()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 6 * len(gl.presets.KNOB_MAP)   # per concept: header, rule, 4 systems
    assert all(line.count(" | ") == 1 for line in table)   # two columns, no stray pipes
    assert all(f"**{row.concept}**" in md for row in gl.presets.KNOB_MAP)
    for key, s in gl.presets.SOURCES.items():
        assert f"**{key}**" in md and s.path in md and f"{s.package} {s.version}" in md
    for row in gl.presets.KNOB_MAP:                           # every line cited is printed
        for text, cites in row.cells()[1:]:
            assert all(f" {c.line}" in md for c in cites)


def test_the_chapter_prints_the_package_map():
    """Chapter 8's map is a Markdown cell written from knob_map_markdown(): they must agree."""
    path = ROOT / "chapters" / "08_production_knobs.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
             if c["cell_type"] == "markdown"]
    assert any(gl.presets.knob_map_markdown().strip() in c for c in cells), \
        "re-author the chapter: its map no longer matches grpo_lab/production/knobs.toml"


# --- the file ships with the package ---------------------------------------------------------------

def test_the_knobs_file_ships_in_the_wheel(tmp_path):
    """Build a wheel from a copy of the package, as pip would, and find knobs.toml in it.

    A data file is left out of a wheel unless pyproject.toml lists it as package data; without
    it an installed grpo_lab could not import ``gl.presets``.
    """
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "grpo_lab", tmp_path / "grpo_lab",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = ("import sys; from setuptools import build_meta; "
             "print(build_meta.build_wheel(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", build, str(tmp_path / "dist")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = tmp_path / "dist" / proc.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as zf:
        member = f"grpo_lab/production/{knobs.KNOBS_FILE}"
        assert member in zf.namelist(), \
            f"{member} is not in the wheel: list it under [tool.setuptools.package-data]"
        assert zf.read(member) == KNOBS.read_bytes()


# --- issue 24: a file that cannot be read names the file ------------------------------------------

@pytest.mark.parametrize("make, error, words", [
    (lambda tmp: _write(tmp / "latin1.toml", 'concept = "caf\xe9"\n'.encode("latin-1")),
     ValueError, "latin1.toml to be UTF-8 text (TOML), got the byte b'\\xe9' at offset 14"),
    (lambda tmp: _write(tmp / "bom16.toml", "x = 1\n".encode("utf-16")),
     ValueError, "bom16.toml to be UTF-8 text (TOML), got the byte b'\\xff' at offset 0"),
    (lambda tmp: tmp / "missing.toml", ValueError, "path: expected a readable TOML file, got "),
    (lambda tmp: tmp, ValueError, "path: expected a readable TOML file, got "),
])
def test_a_file_that_cannot_be_read_is_refused_naming_it(tmp_path, make, error, words):
    """Before: a file that is not UTF-8 raised UnicodeDecodeError, which names no file."""
    path = make(tmp_path)
    for load in (gl.presets.knob_table, gl.presets.knob_sources):
        with pytest.raises(error) as info:
            load(path)
        assert words in str(info.value) and str(path) in str(info.value), str(info.value)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path
