"""What a chapter needs beyond the light install, said in one line instead of a traceback.

The light install (README, "Reading chapters 1-5 with the light install") has the NumPy core,
matplotlib, ipywidgets and JupyterLab, enough for chapters 1-3 and most of 4-5. A chapter that
also needs torch, transformers or TRL calls ``gl.needs(...)`` in its first code cell; where a
module is missing it stops the chapter with one line that names the modules and the command
that installs them, rather than an ImportError deep in a later cell.
"""

from __future__ import annotations

import importlib.util

__all__ = ["FULL_INSTALL", "MissingExtra", "needs"]

#: the command that installs everything the book uses (the README's)
FULL_INSTALL = "python -m pip install -r requirements.txt"


class MissingExtra(SystemExit):
    """Raised by :func:`needs`: a SystemExit, which Jupyter shows as its message alone."""


def needs(*modules: str, chapter: str = "this chapter") -> None:
    """Stop with a one-line message if any of ``modules`` (import names) is not installed.

    >>> needs("numpy")
    >>> needs("surely_not_installed_xyz", chapter="chapter 0")
    Traceback (most recent call last):
    ...
    grpo_lab.book.needs.MissingExtra: chapter 0 needs surely_not_installed_xyz, which this Python does not have (the light install leaves it out): install everything with  python -m pip install -r requirements.txt
    """
    if not modules or not all(isinstance(m, str) and m for m in modules):
        raise TypeError(f"modules: expected one or more module names, got {modules!r}")
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(f"{chapter} needs {', '.join(missing)}, which this Python does not "
                           f"have (the light install leaves it out): install everything with  "
                           f"{FULL_INSTALL}")
