"""Collection settings for the whole repository (pytest's testpaths: grpo_lab, tests, chapters).

The torch modules' doctests need torch, which the NumPy core does not: without torch they
are not collected (the tests that need torch skip themselves with ``importorskip``); the same
for ``grpo_lab/hf`` (chapter 6b) without transformers and TRL.
``grpo_lab/bench.py``, ``grpo_lab/train.py`` and ``grpo_lab/sweep.py`` are command-line entry
points that stand for ``grpo_lab.perf.bench``, ``grpo_lab.rl.train`` and ``grpo_lab.rl.sweep``
(collected there).
"""

import importlib.util

collect_ignore = ["grpo_lab/bench.py", "grpo_lab/train.py", "grpo_lab/sweep.py"]
if importlib.util.find_spec("torch") is None:
    collect_ignore += ["grpo_lab/perf/loss_fused.py", "grpo_lab/torch", "grpo_lab/rl/train.py",
                       "grpo_lab/rl/tiny_policy.py", "grpo_lab/perf/baselines.py",
                       "tests/reference"]
if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "trl")):
    collect_ignore += ["grpo_lab/hf"]


# A chapter cell that times out fails loudly (tests/nbval_strict.py).
pytest_plugins = ["tests.nbval_strict"]
