"""A chapter that runs past its time fails loudly: under nbval and in the book build.

Both are tried on a notebook made for the purpose, whose first cell sleeps and, like a training
loop that stops cleanly on Ctrl-C, swallows the interrupt a timeout sends.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = """import time
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped early, as train() does on Ctrl-C")"""


def _notebook(path: Path) -> Path:
    cells = [{"cell_type": "code", "execution_count": i + 1, "id": f"c{i}", "metadata": {},
              "outputs": [], "source": src} for i, src in enumerate([SLEEPER, "print(1 + 1)"])]
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                      "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def test_a_cell_past_the_nbval_timeout_fails_it_and_every_later_cell(tmp_path):
    nb = _notebook(tmp_path / "slow.ipynb")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.nbval_strict", "-p", "no:cacheprovider",
         "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=3", "-o", "addopts=",
         "--rootdir", str(tmp_path), str(nb)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "2 failed" in out and "xfail" not in out and "xpass" not in out, out[-3000:]
    assert "ran past the cell timeout" in out


@pytest.mark.site
def test_a_chapter_past_the_build_timeout_fails_the_build_and_so_does_the_next_build(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    _notebook(book / "slow.ipynb")
    (book / "_config.yml").write_text(
        "title: t\nexecute:\n  execute_notebooks: cache\n  timeout: 3\n  allow_errors: false\n"
        "sphinx:\n  local_extensions:\n    grpo_site: " + str(ROOT / "_ext") + "\n")
    (book / "_toc.yml").write_text("format: jb-book\nroot: slow\n")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else shutil.which("jupyter-book"), "build", str(book),
           "-W", "-n", "--keep-going"]
    for attempt in (1, 2):       # the second build must not reuse the failed first one
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode != 0, f"build {attempt} passed:\n{proc.stdout[-3000:]}"
        assert "slow" in proc.stdout + proc.stderr
