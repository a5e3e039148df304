"""Execute chapters in place the way the site shows them, so the site is built from what is stored.

The test run builds the site from the chapters' stored outputs (``GRPO_LAB_STORED_OUTPUTS=1``,
tests/conftest.py) instead of executing every chapter a second time after nbval. So a stored
chapter must carry what only the book build's kernel used to draw:

- the static sliders' frames: the kernel runs with ``GRPO_LAB_STATIC_FRAMES=1``, so each
  ``gl.book.chNN.*_explorer(...)`` cell stores its frame player (``text/html``) beside the live
  widget (``gl.sliders``);
- every figure's alt text: the kernel runs ``gl.book.frames.describe_figures`` first (an
  IPython ``PYTHONSTARTUP`` file), so each figure stores its alt text in its output metadata.

Then the hidden solutions are collapsed again (scripts/collapse_solutions.py). Otherwise it is
``jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600``, the
same kernel, timeout and widget state; nbval still re-executes each chapter in every test run
(tests/nbval_strict.py checks that the stored frames and alt texts are current).

    python scripts/execute_chapters.py chapters/05_rewards.ipynb [more chapters ...]
    python scripts/execute_chapters.py --all

tests/site/test_stored_outputs.py fails on a chapter executed without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600  # nbval's --nbval-cell-timeout and the book's execute timeout
STARTUP = ('__import__("grpo_lab.book.frames", fromlist=["describe_figures"])'
           '.describe_figures()\n')


def execute(path: Path) -> float:
    """Execute ``path`` in place (frames and alt text stored), collapse its solutions;
    return the seconds it took."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        startup = Path(folder) / "startup.py"
        startup.write_text(STARTUP, encoding="utf-8")
        env = dict(os.environ, GRPO_LAB_STATIC_FRAMES="1", PYTHONSTARTUP=str(startup))
        subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook",
                        "--execute", "--inplace",
                        f"--ExecutePreprocessor.timeout={TIMEOUT_S}", str(path)],
                       check=True, env=env)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "collapse_solutions.py"), str(path)],
                   check=True)
    return time.perf_counter() - start


def main(argv) -> int:
    if argv == ["--all"]:
        argv = sorted(str(p) for p in (ROOT / "chapters").glob("*.ipynb"))
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    paths = [Path(name) for name in argv]
    wrong = [str(p) for p in paths if p.suffix != ".ipynb" or not p.is_file()]
    if wrong:
        print(f"expected chapter notebooks (.ipynb), got {wrong}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"{path}: executed in {execute(path):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
