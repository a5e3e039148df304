"""Shared test settings, and the one book build that the site and browser tests share."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from filelock import FileLock
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# The property tests run at least 200 examples each; no deadline, since CI machines are shared.
settings.register_profile("grpo_lab", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "grpo_lab"))


def stored_outputs_config(folder: Path) -> Path:
    """The book's _config.yml with execution off, written into ``folder``.

    Its two paths that Jupyter Book reads relative to the config file (the local extension and
    the favicon) are made absolute, so the copy builds the same site from outside the root."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["execute"]["execute_notebooks"] = "off"
    sphinx = config.setdefault("sphinx", {})
    sphinx["local_extensions"] = {name: str((ROOT / where).resolve())
                                  for name, where in sphinx.get("local_extensions", {}).items()}
    favicon = config.get("html", {}).get("favicon")
    if favicon:
        config["html"]["favicon"] = str((ROOT / favicon).resolve())
    path = folder / "_config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def build_site(out: Path, config: Path) -> Path:
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else shutil.which("jupyter-book"), "build", str(ROOT),
           "--config", str(config), "--path-output", str(out), "-W", "-n", "--keep-going"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    print(f"\nbook built in {time.perf_counter() - start:.1f} s into {out}")
    (out / "built").write_text("ok")
    return out / "_build" / "html"


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """Build the book once per test run, as the README does (warnings are errors, nitpicky
    references), into a fresh folder; return ``_build/html``.

    The build renders the chapters as stored and does not execute them a second time: in this
    same run nbval re-executes every chapter top to bottom and compares its checked outputs,
    tests/book/test_show_source_outputs.py compares every stored listing with the code, and
    tests/site/test_repo.py checks that each stored chapter is one complete run (every code cell
    executed, in order, no error). Executing them again here cost ~6 minutes of CI's ~16. The
    README's build command, which executes every chapter, is tested on one core by
    ``python -m pytest -m slow_one_core`` (tests/site/test_one_core.py).

    Under pytest-xdist the workers share one build: the first to ask builds it under a file
    lock in the run's common temporary folder, the others wait for it and read it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return build_site(tmp_path_factory.mktemp("book"),
                          stored_outputs_config(tmp_path_factory.mktemp("config")))
    shared = tmp_path_factory.getbasetemp().parent / "book"     # common to this run's workers
    shared.mkdir(exist_ok=True)
    with FileLock(str(shared) + ".lock"):
        if not (shared / "built").exists():
            return build_site(shared, stored_outputs_config(tmp_path_factory.mktemp("config")))
    return shared / "_build" / "html"
