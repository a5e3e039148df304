"""Collection settings for the whole repository (pytest's testpaths: grpo_lab, tests, chapters).

The torch modules' doctests need torch, which the NumPy core does not: without torch they
are not collected (the tests that need torch skip themselves with ``importorskip``); the same
for ``grpo_lab/hf`` (chapter 6b) without transformers and TRL.
``grpo_lab/bench.py``, ``grpo_lab/train.py`` and ``grpo_lab/sweep.py`` are command-line entry
points that stand for ``grpo_lab.perf.bench``, ``grpo_lab.rl.train`` and ``grpo_lab.rl.sweep``
(collected there).

Two workers (pytest-xdist, ``-n auto --dist loadfile`` in pyproject.toml): CI's machine has two
cores and most tests use one. Each test file is one unit of work, so a notebook's cells run in
order in one kernel (nbval) and a module's fixtures are built once; the book is built once for
all workers (tests/conftest.py, fixture ``site``, under a file lock), from the chapters' stored
outputs: nbval executes each chapter once per run. The longest units go first (the browser
test, the chapters), so no worker is left with a long tail.
(``--dist loadgroup`` would group by mark, but xdist 3.8.0 writes the group into
``item._nodeid``, which pytest 9 no longer reads: it split a chapter's cells across workers.)
"""

import importlib.util
import os

import pytest

collect_ignore = ["grpo_lab/bench.py", "grpo_lab/train.py", "grpo_lab/sweep.py"]
if importlib.util.find_spec("torch") is None:
    collect_ignore += ["grpo_lab/perf/loss_fused.py", "grpo_lab/torch", "grpo_lab/rl/train.py",
                       "grpo_lab/rl/tiny_policy.py", "grpo_lab/perf/baselines.py",
                       "tests/reference"]
if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "trl")):
    collect_ignore += ["grpo_lab/hf"]


# A chapter cell that times out fails loudly (tests/nbval_strict.py).
pytest_plugins = ["tests.nbval_strict"]

MAX_WORKERS = 4

# OpenMP's idle threads sleep instead of spinning while tests run. Two workers, each running
# torch on two threads (chapter 6 sets two), oversubscribe two cores, and spinning threads burn
# the time the others need: a 30-step training run beside one busy process took 22.5 s spinning
# and 11.7 s passive (on a quiet machine 9.5 s and 12.7 s). Only the waiting changes, not the
# arithmetic: the two runs' histories are identical but for their wall times. Set before torch
# is imported, and inherited by nbval's kernels and every subprocess.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# nbval's kernels describe every figure they show (alt text in the output metadata), as the
# kernel of scripts/execute_chapters.py does, so tests/nbval_strict.py can compare the stored
# alt text, which the site shows, with a fresh one.
os.environ["PYTHONSTARTUP"] = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           "tests", "site", "kernel_startup.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """As many workers as CPUs this process may run on (``taskset -c 0`` gives one), at most
    MAX_WORKERS; xdist's own count would read the machine's physical cores instead."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, MAX_WORKERS))


def builds_the_site(item) -> bool:
    return "site" in getattr(item, "fixturenames", ())


LONGEST = ("chapters/06_training_loop.ipynb",                    # ~2 min (the 450-step run)
           "chapters/06c_clinic.ipynb", "tests/hf/test_trl_matrix.py",      # ~1 min each
           "tests/drills/test_checkers_against_catalogue.py",
           "tests/site/test_timeouts.py")  # ~35 s (two builds, a kernel); last, it was the tail
BROWSER = "tests/site/test_browser.py"  # the longest unit that reads the site: it builds it


def pytest_collection_modifyitems(config, items):
    """The browser test first (its worker builds the site from the stored outputs, about a
    minute, then browses it), the longest units and the chapters next, the other files that
    read the site after them (the site is built by then, so no worker waits on its lock), the
    rest last. pyproject.toml's --no-loadscope-reorder keeps this order: by default xdist
    sorts the files by how many tests each holds, which put the site and the chapters last."""
    site_files = {item.nodeid.split("::")[0] for item in items if builds_the_site(item)}

    def rank(item):
        path = item.nodeid.split("::")[0]
        return (0 if path == BROWSER else 1 if path in LONGEST
                else 2 if path.startswith("chapters/") else 3 if path in site_files else 4)
    items.sort(key=rank)                                                  # a stable sort
