"""A pytest plugin for nbval: a chapter cell that timed out fails, and so does every later cell.

Loaded for the whole repository by the root ``conftest.py``; ``python -m pytest -p
tests.nbval_strict`` loads it anywhere (tests/site/test_timeouts.py does, on a notebook made
for the purpose).
"""

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
