"""Show the package's own source in a chapter, so the book and the code cannot drift."""

from __future__ import annotations

import ast
import inspect
import textwrap

__all__ = ["show_source"]


def show_source(obj, *, docstring: bool = True, methods: bool = True):
    """Return the source of a package function or class as a highlighted code block.

    In Jupyter and on the built site it renders as Python with syntax colours; printed, it is
    the plain text. ``docstring=False`` drops the docstring to keep the listing short;
    ``methods=False`` shows a class as its fields and their comments, without its methods
    (a dataclass of settings, say, without the checks of ``validate``).

    >>> import grpo_lab as gl
    >>> "def group_advantages" in gl.show_source(gl.group_advantages).data
    True
    """
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        raise TypeError(f"obj: expected a function or class, got {type(obj).__name__}")
    if not isinstance(methods, bool) or (not methods and not inspect.isclass(obj)):
        raise TypeError(f"methods: expected True, or False for a class, got {methods!r} for "
                        f"{type(obj).__name__} {obj.__name__}")
    from IPython.display import Code

    src = inspect.getsource(obj)
    if not methods:
        src = without_methods(src)
    if not docstring and obj.__doc__:
        doc_start = src.find('"""')
        doc_end = src.find('"""', doc_start + 3)
        if doc_start != -1 and doc_end != -1:
            line_start = src.rfind("\n", 0, doc_start) + 1
            src = src[:line_start] + src[doc_end + 3:].lstrip("\n")
    return Code(src, language="python")


def without_methods(src: str) -> str:
    r"""A class's source without its methods (each ``def`` with its decorators and body).

    >>> src = "class A:\n    x: int = 1  # one\n\n    @property\n    def f(self):\n        pass\n"
    >>> print(without_methods(src), end="")
    class A:
        x: int = 1  # one
    """
    lines = textwrap.dedent(src).splitlines(keepends=True)
    (cls,) = ast.parse("".join(lines)).body
    drop = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            drop.update(range(first - 1, node.end_lineno))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    while kept and not kept[-1].strip():
        kept.pop()
    return "".join(kept)
