"""Chapter 8's drill checker, by the name chapter 8 calls it: an alias of ``gl.drills``.

``gl.drills`` is the one home of every checker (``gl.drills.check_process_advantages`` is
this module's ``check_process_advantages``).
"""

from .drills.process import check_process_advantages

__all__ = ["check_process_advantages"]
