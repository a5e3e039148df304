"""Shared test settings."""

import os

from hypothesis import settings

# The property tests run at least 200 examples each; no deadline, since CI machines are shared.
settings.register_profile("grpo_lab", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "grpo_lab"))
