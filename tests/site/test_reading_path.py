"""Issue 32: every chapter opens with its reading path (the core sections and the time they
take, then the depth sections), and the intro gives a 1-day, a 1-week and a 3-week path."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
BOX = re.compile(r":::\{admonition\} Reading path\n:class: tip\n(?P<body>.+?)\n:::", re.S)


def markdown_cells(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_chapter_opens_with_its_core_path_and_its_time(path):
    first = markdown_cells(path)[0]
    box = BOX.search(first)
    assert box, f"{path.name}: no 'Reading path' box in the opening cell"
    body = box.group("body")
    hours = re.search(r"\*\*Core path \(about (\d+(?:\.\d+)?(?:[-–]\d+)?) h\):\*\*", body)
    assert hours, f"{path.name}: the core path does not say its time in hours"
    assert "**Depth, for later:**" in body, f"{path.name}: no depth sections named"
    core = body.split("**Depth, for later:**")[0]
    assert len(re.findall(r'<a href="#[^"]+">', core)) >= 2, f"{path.name}: core links"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_linked_depth_section_is_marked_as_depth(path):
    """A depth section named in the box starts with the depth line, when it is a heading of
    this chapter whose id the link names."""
    cells = markdown_cells(path)
    body = BOX.search(cells[0]).group("body") if BOX.search(cells[0]) else ""
    depth = body.split("**Depth, for later:**")[-1] if "**Depth, for later:**" in body else ""
    marked = sum(c.count("*Depth: skip on a first reading.*") for c in cells)
    if re.search(r'<a href="#', depth):
        assert marked >= 1, f"{path.name}: depth sections named, none marked in the text"


def test_the_intro_gives_three_paths_for_interview_preparation():
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")
    section = intro.split("## Reading paths")[1].split("\n## ")[0]
    for name in ("1 day", "1 week", "3 weeks"):
        assert f"**{name}" in section, name
    for chapter in CHAPTERS:
        assert f"chapters/{chapter.name}" in section, chapter.name   # every chapter placed


GUARDS = "The package's guards"
CORE_BREAKS = 2    # plain-code-breaks cells a chapter may keep on its core path (issue 40)


def cells_by_section(path):
    """(section title, cell) for every cell, the title being the last '## ' heading above."""
    section, out = None, []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            section = (re.findall(r"^## (.+)$", source, re.M) or [section])[-1]
        out.append((section, cell["cell_type"], source))
    return out


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_plain_code_breaking_sits_in_one_guards_section(path):
    """Issue 40: the hardening detours ("the plain code breaks on X, the package guards it")
    gathered in one depth section per chapter, "The package's guards", with at most two kept
    on the core path. A detour cell is one that runs the plain code under np.errstate (it
    warns, then breaks). Chapter 4 is about low precision, so its detours are its subject."""
    cells = cells_by_section(path)
    titles = [s for s, kind, src in cells if kind == "markdown" and f"## {GUARDS}" in src]
    assert len(titles) <= 1, f"{path.name}: {len(titles)} guards sections"
    outside = [src.splitlines()[0] for s, kind, src in cells
               if kind == "code" and "np.errstate" in src and s != GUARDS]
    if path.stem != "04_low_precision":
        assert len(outside) <= CORE_BREAKS, f"{path.name}: detours on the core path: {outside}"
    if titles:
        opening = next(src for s, kind, src in cells if s == GUARDS and kind == "markdown")
        assert "*Depth: skip on a first reading.*" in opening, f"{path.name}: guards unmarked"
        box = BOX.search(markdown_cells(path)[0]).group("body")
        core, depth = box.split("**Depth, for later:**")
        assert "#the-package-s-guards" in depth and "#the-package-s-guards" not in core, path


# Where a chapter may speak of the book's tests: chapter 9's proof of its checkers (the
# catalogue of right and wrong answers is the drills' subject there).
ASIDE = re.compile(r"`tests/|\bCI\b|\bnbval\b|\bpytest\b|\bthe tests? (?:check|show|prove)", re.I)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_test_or_ci_aside_in_the_prose(path):
    """Issue 40: test and CI asides ("a test greps the chapters", "`tests/x.py` checks it")
    are noise in a chapter's prose; the fact lives in the docstring of the test that backs it.
    running.md, which is about the tests, is not a chapter."""
    found = [m.group(0) + " in: " + src[max(0, m.start() - 60):m.end() + 40].replace("\n", " ")
             for src in markdown_cells(path) for m in ASIDE.finditer(src)
             if not (path.stem == "09_interview_drills" and "catalogue" in src)]
    assert not found, f"{path.name}: {found}"
