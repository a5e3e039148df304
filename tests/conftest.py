"""Shared test settings, and the one book build that the site and browser tests share."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# The property tests run at least 200 examples each; no deadline, since CI machines are shared.
settings.register_profile("grpo_lab", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "grpo_lab"))


def build_site(out: Path) -> Path:
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else shutil.which("jupyter-book"), "build", str(ROOT),
           "--path-output", str(out), "-W", "-n", "--keep-going"]
    start = time.perf_counter()
    # the chapters' stored outputs, not a second execution (nbval runs each chapter in this
    # run and tests/nbval_strict.py checks the frames and alt text they store; _ext item 15)
    env = dict(os.environ, GRPO_LAB_STORED_OUTPUTS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    print(f"\nbook built in {time.perf_counter() - start:.1f} s into {out}")
    (out / "built").write_text("ok")
    return out / "_build" / "html"


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """Build the book once per test run, as the README does (warnings are errors, nitpicky
    references), into a fresh folder; return ``_build/html``.

    The chapters are not executed a second time: the build renders their stored outputs
    (``GRPO_LAB_STORED_OUTPUTS=1``), which scripts/execute_chapters.py writes with the static
    slider frames and alt text, and which nbval proves current in the same run (its
    tagged outputs; tests/nbval_strict.py: the stored alt text and the sliders' start frame).
    Under pytest-xdist the workers share one build: the first to ask
    builds it under a file lock in the run's common temporary folder, the others wait for it
    and read it; meanwhile the other workers run the rest."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return build_site(tmp_path_factory.mktemp("book"))
    shared = tmp_path_factory.getbasetemp().parent / "book"     # common to this run's workers
    shared.mkdir(exist_ok=True)
    with FileLock(str(shared) + ".lock"):
        if not (shared / "built").exists():
            return build_site(shared)
    return shared / "_build" / "html"
