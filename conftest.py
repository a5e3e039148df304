"""Collection settings for the whole repository (pytest's testpaths: grpo_lab, tests, chapters).

The torch modules' doctests need torch, which the NumPy core does not: without torch they
are not collected (the tests that need torch skip themselves with ``importorskip``).
"""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("torch") is None:
    collect_ignore.append("grpo_lab/loss_fused.py")
