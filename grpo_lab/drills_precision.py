"""Chapter 4's drill checkers, by the name chapter 4 calls them: an alias of ``gl.drills``.

``gl.drills`` is the one home of every checker (``gl.drills.check_log_softmax`` is this
module's ``check_log_softmax``); this module stays so that ``gl.drills_precision.check_...``
keeps working.
"""

from .drills.precision import check_log_softmax, check_sequence_logprob_sum

__all__ = ["check_log_softmax", "check_sequence_logprob_sum"]
