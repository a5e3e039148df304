"""Show the package's own source in a chapter, so the book and the code cannot drift."""

from __future__ import annotations

import inspect

__all__ = ["show_source"]


def show_source(obj, *, docstring: bool = True):
    """Return the source of a package function or class as a highlighted code block.

    In Jupyter and on the built site it renders as Python with syntax colours; printed, it is
    the plain text. ``docstring=False`` drops the docstring to keep the listing short.

    >>> import grpo_lab as gl
    >>> "def group_advantages" in gl.show_source(gl.group_advantages).data
    True
    """
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        raise TypeError(f"obj: expected a function or class, got {type(obj).__name__}")
    from IPython.display import Code

    src = inspect.getsource(obj)
    if not docstring and obj.__doc__:
        doc_start = src.find('"""')
        doc_end = src.find('"""', doc_start + 3)
        if doc_start != -1 and doc_end != -1:
            line_start = src.rfind("\n", 0, doc_start) + 1
            src = src[:line_start] + src[doc_end + 3:].lstrip("\n")
    return Code(src, language="python")
