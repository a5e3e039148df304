"""Chapter 3's drill checkers, by the name chapter 3 calls them: an alias of ``gl.drills``.

``gl.drills`` is the one home of every checker (``gl.drills.check_kl_k3`` is this module's
``check_kl_k3``); this module stays so that ``gl.drills_kl.check_kl_k3`` keeps working.
"""

from .drills.kl import check_k3_loss_gradient, check_kl_k3

__all__ = ["check_kl_k3", "check_k3_loss_gradient"]
