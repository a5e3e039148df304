"""Chapter 9 keeps its promises: every drill's stub fails its checker and its hidden solution
passes it (run here, and stored for nbval to compare on re-execution), and the question deck
covers the book with collapsed answers, Chinese terms and computed numbers."""

import ast
import contextlib
import importlib.util
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

import grpo_lab as gl

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "chapters" / "09_interview_drills.ipynb"
CELLS = json.loads(CHAPTER.read_text())["cells"]
DRILLS = ("group_advantages", "clipped_surrogate", "gae", "aggregate_loss", "kl_k3",
          "format_reward")                                           # the six
CJK = re.compile(r"[\u4e00-\u9fff]")


def source(cell):
    return "".join(cell["source"])


def stored_text(cell):
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


def drill_cells(name):
    """The cells that call gl.drills.check_<name>: (stubs, solutions)."""
    calls = [c for c in CELLS if c["cell_type"] == "code"
             and f"gl.drills.check_{name}(my_" in source(c)]
    solutions = [c for c in calls if "hide-input" in c["metadata"].get("tags", [])]
    stubs = [c for c in calls if c not in solutions]
    return stubs, solutions


def run_cell(cell):
    """Execute a drill cell as the chapter does; return (the checker's answer, its verdict)."""
    tree = ast.parse(source(cell))
    *body, last = tree.body
    namespace = {"np": np, "gl": gl, "re": re}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(ast.Module(body=body, type_ignores=[]), str(CHAPTER), "exec"), namespace)
        answer = eval(compile(ast.Expression(last.value), str(CHAPTER), "eval"), namespace)
    return answer, out.getvalue()


@pytest.mark.parametrize("name", DRILLS)
def test_each_drill_has_a_failing_stub_and_a_hidden_passing_solution(name):
    stubs, solutions = drill_cells(name)
    assert len(stubs) == 1 and len(solutions) == 1, (len(stubs), len(solutions))
    for cell, verdict in ((stubs[0], "NOT YET: "), (solutions[0], "PASS: ")):
        assert "nbval-check-output" in cell["metadata"].get("tags", []), "nbval must compare it"
        assert stored_text(cell).startswith(verdict), stored_text(cell)
    assert CELLS.index(stubs[0]) < CELLS.index(solutions[0])


@pytest.mark.parametrize("name", DRILLS)
def test_running_the_cells_gives_the_stored_verdicts(name):
    stubs, solutions = drill_cells(name)
    answer, said = run_cell(stubs[0])
    assert answer is False and said == stored_text(stubs[0])
    answer, said = run_cell(solutions[0])
    assert answer is True and said == stored_text(solutions[0])


def test_the_proof_is_complete_and_lives_in_the_tests_not_in_the_package():
    """Every checker of gl.drills has its entry in tests/drills/catalogue, with at least five
    right answers and ten wrong ones; tests/drills/test_checkers_against_catalogue.py runs
    each of them against its checker, one test per answer (accepted, or named with its hint),
    so they are not run a second time here. The catalogue is a test fixture: the installed
    package does not ship it, and chapter 9 reads it by its path only, to count it."""
    from tests.drills.catalogue import CATALOGUE

    checkers = [c for c in gl.drills.__all__ if c.startswith("check_")]
    assert sorted(CATALOGUE) == sorted(c.removeprefix("check_") for c in checkers)
    for name, drill in CATALOGUE.items():
        assert len(drill.rights) >= 5 and len(drill.wrongs) >= 10, name
    assert importlib.util.find_spec("grpo_lab.drills.catalogue") is None
    calls = [source(c) for c in CELLS if c["cell_type"] == "code" and "catalogue" in source(c)]
    assert calls and all("gl.drills.proof_table(catalogue)" in s for s in calls), calls


def deck_cards():
    """(question, answer) of each card of the deck chapter 9 shows (its English side);
    tests/deck checks that the stored rendering holds each one, numbered in order."""
    return [(c.question, c.answer) for c in gl.deck.load_cards()]


def test_the_deck_has_thirty_questions_with_chinese_terms():
    cards = deck_cards()
    assert len(cards) >= 30
    for title, body in cards:
        terms = re.search(r"\*\*术语 \(terms\):\*\* (.+)", body)
        assert terms and CJK.search(terms.group(1)), f"{title}: no Chinese terms"
        assert len(body.split()) > 40, f"{title}: the answer is too short to be a model answer"


@pytest.mark.parametrize("topic", [
    "derive", "shapes", "NaN", "memory", "k3", "float16", "reward hacking", "aggregation",
    "DAPO", "Dr. GRPO", "GSPO", "GAE", "clip", "process supervision", "memory-bound"])
def test_the_deck_covers_the_book(topic):
    cards = deck_cards()
    assert any(topic.lower() in (title + body).lower() for title, body in cards), topic


def test_every_number_pasted_into_an_answer_is_computed_in_a_checked_cell():
    markdown = "\n".join(source(c) for c in CELLS if c["cell_type"] == "markdown")
    used = set(re.findall(r"\{glue:text\}`(\w+)", markdown))
    glued = {}
    for c in CELLS:
        for key in re.findall(r'glue\("(\w+)"', source(c)):
            glued[key] = c
    assert used and used == set(glued), (used ^ set(glued))
    for key, cell in glued.items():
        assert "nbval-check-output" in cell["metadata"].get("tags", []), key
        records = [o for o in cell["outputs"] if o.get("output_type") == "display_data"
                   and "application/papermill.record/text/plain" in o.get("data", {})]
        assert records, f"{key}: the stored outputs hold no glued values"


def test_the_cheat_sheet_is_in_the_toc_and_fits_on_a_page():
    toc = (ROOT / "_toc.yml").read_text()
    assert re.search(r"file:\s*cheatsheet\b", toc)
    assert re.search(r"file:\s*chapters/09_interview_drills\b", toc)
    sheet = (ROOT / "cheatsheet.md").read_text()
    assert len(sheet.splitlines()) < 200
    for must in ("group_advantages", "k_3", "dr_grpo", "DAPO", "GSPO", "float32", "优势"):
        assert must in sheet, must


def test_intro_lists_the_chapter():
    assert "(chapters/09_interview_drills.ipynb)" in (ROOT / "intro.md").read_text()
