"""Run first by every IPython kernel of a test run (``PYTHONSTARTUP``, set by the root
conftest.py): each matplotlib figure a chapter shows carries its alt text in its output
metadata, as in the book build's kernel (_ext/grpo_site.py) and scripts/execute_chapters.py,
so that tests/nbval_strict.py can check the alt text the chapter stores against a fresh one."""

if __name__ == "__main__":   # IPython runs a startup file as __main__; an import does nothing
    __import__("grpo_lab.book.frames", fromlist=["describe_figures"]).describe_figures()
