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
