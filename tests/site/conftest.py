"""The site tests' own setting: GRPO_LAB_SITE=/path/to/_build/html runs them against a site
built already (say, from the notebooks' stored outputs while working on its pages) instead of
building the book; unset, they use the build of tests/conftest.py."""

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def site(request):
    built = os.environ.get("GRPO_LAB_SITE")
    if not built:
        return request.getfixturevalue("site")
    path = Path(built)
    if not (path / "index.html").is_file():
        pytest.fail(f"GRPO_LAB_SITE={built}: expected a built site (its index.html)")
    return path
