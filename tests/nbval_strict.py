"""A pytest plugin for nbval: a chapter cell that timed out fails, and so does every later cell.

Loaded for the whole repository by the root ``conftest.py``; ``python -m pytest -p
tests.nbval_strict`` loads it anywhere (tests/site/test_timeouts.py does, on a notebook made
for the purpose).
"""

import copy
import html
import math
import re

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A chapter cell that timed out fails, and so does every cell after it.

    nbval interrupts a cell that runs past ``--nbval-cell-timeout``; a cell that catches the
    interrupt (a training loop that stops cleanly on Ctrl-C) then passes, and nbval marks every
    later cell of the notebook xfail, so a chapter cut short would count as green. Here both
    become failures that say why.
    """
    outcome = yield
    report = outcome.get_result()
    notebook = getattr(item, "parent", None)
    if call.when == "call" and getattr(notebook, "timed_out", False):
        report.outcome = "failed"
        if hasattr(report, "wasxfail"):
            del report.wasxfail
        report.longrepr = (f"{item.nodeid}: a cell of this notebook ran past the cell timeout "
                           f"(--nbval-cell-timeout), so this cell's result does not count")


# --- what the site shows from a chapter's stored outputs is current --------------------------
#
# The test run's site is built from the chapters' stored outputs (tests/conftest.py), so what
# only the site shows must be proven current here, where nbval executes each chapter: the alt
# text of the figures in the cells nbval checks, and each static slider's start frame (its
# alt text: the figure's title, panels and axes; scripts/execute_chapters.py stores them).
# Both are read from the kernel's fresh outputs (tests/site/kernel_startup.py describes them).

FRAME_ALT = re.compile(r'<img class="gl-frames-figure"[^>]*?\salt="([^"]*)"')
RERUN = "re-execute it with python scripts/execute_chapters.py"


def figure_alts(outputs) -> list:
    return [(o.get("metadata") or {}).get("image/png", {}).get("alt")
            for o in outputs if "image/png" in (o.get("data") or {})]


def stored_frame_alt(outputs):
    for o in outputs:
        page = (o.get("data") or {}).get("text/html", "")
        page = "".join(page) if isinstance(page, list) else page
        found = FRAME_ALT.search(page)
        if found:
            return html.unescape(found.group(1))
    return None


def stale_site_outputs(cell, fresh, checked) -> list:
    """What the stored ``cell`` shows on the site that its ``fresh`` outputs contradict."""
    stored = cell.get("outputs", [])
    problems = []
    frame = stored_frame_alt(stored)
    fresh_alts = [a for a in figure_alts(fresh) if a]
    if "gl.book." in "".join(cell.get("source", "")) and "_explorer(" in "".join(
            cell.get("source", "")):
        if frame is None:
            problems.append("a slider cell stores no static frames (the site shows none)")
        elif fresh_alts and not frame.startswith(fresh_alts[0]):
            problems.append(f"the slider's stored start frame shows {frame[:160]!r}; "
                            f"now it shows {fresh_alts[0][:160]!r}")
    elif checked and fresh_alts:
        old = figure_alts(stored)
        if len(old) == len(figure_alts(fresh)) and old != figure_alts(fresh):
            problems.append(f"stored figure alt texts {old} differ from fresh "
                            f"{figure_alts(fresh)}")
    return problems


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    fresh = getattr(item, "test_outputs", None)
    cell = getattr(item, "cell", None)
    if fresh is not None and cell is not None and hasattr(item, "options"):
        problems = stale_site_outputs(cell, fresh, bool(item.options.get("check")))
        if problems:
            pytest.fail(f"{item.nodeid}: the site shows this cell's stored outputs, which are "
                        f"stale: {'; '.join(problems)}; {RERUN} {item.nodeid.split('::')[0]}",
                        pytrace=False)
    return result


# --- a glued float's last digits are the CPU's, not the chapter's ----------------------------
#
# A glued number (myst-nb's glue, stored as its repr) is compared by nbval as text, so its 17th
# digit must match. That digit depends on the CPU: NumPy picks its SIMD loops (AVX2, AVX-512)
# at run time, and a different loop sums in a different order. Seen on an AMD EPYC with
# AVX-512 against chapters executed on another CPU: chapter 2's first_dev, a finite-difference
# gradient, 0.8795419188597773 stored and 0.8795419188354221 fresh (2.8e-11 relative); chapter
# 4's seq_w_std 3.17320284147494 and 3.1732028414749456. The prose shows two to four digits of
# each. So a glued float counts as current when it equals the stored one to GLUE_REL_TOL
# relative; anything else glued (text, an int, a float further off) must match exactly.

GLUE = "application/papermill.record/text/plain"
GLUE_REL_TOL = 1e-9


def _glued(output):
    name = ((output.get("metadata") or {}).get("scrapbook") or {}).get("name")
    text = (output.get("data") or {}).get(GLUE)
    return (name, text) if name is not None and isinstance(text, str) else (None, None)


def _float(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def settle_glued_floats(test: list, ref: list) -> list:
    """``test`` (a cell's fresh outputs) with each glued float that equals the stored one of
    the same name in ``ref`` to GLUE_REL_TOL relative given the stored text; the rest as is."""
    stored = dict(_glued(o) for o in ref)
    settled = []
    for output in test:
        name, text = _glued(output)
        old = stored.get(name) if name is not None else None
        new_value, old_value = _float(text or ""), _float(old or "")
        if (old is not None and text != old and new_value is not None and old_value is not None
                and math.isclose(new_value, old_value, rel_tol=GLUE_REL_TOL, abs_tol=0.0)):
            output = copy.deepcopy(output)
            output["data"][GLUE] = old
        settled.append(output)
    return settled


try:
    from nbval.plugin import IPyNbCell
except ImportError:           # nbval not installed: nothing to compare
    IPyNbCell = None

if IPyNbCell is not None and not hasattr(IPyNbCell.compare_outputs, "settles_glue"):
    _compare_outputs = IPyNbCell.compare_outputs

    def compare_outputs(self, test, ref, skip_compare=None):
        return _compare_outputs(self, settle_glued_floats(test, ref), ref, skip_compare)

    compare_outputs.settles_glue = True
    IPyNbCell.compare_outputs = compare_outputs
