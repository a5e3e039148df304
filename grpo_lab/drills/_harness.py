"""What every checker does the same way: call the reader's function safely, and say a verdict.

A checker never raises because of the reader's code. :func:`call` runs the function on copies
of the inputs and turns every way it can go wrong (an exception, a modified input, ``None``,
a tuple, a string, a complex array) into a one-line *problem* that the checker prints as
``NOT YET: ...``; only a usable float array (or number) comes back for the checker to compare.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import describe, is_float_dtype

__all__ = ["call", "verdict"]

def verdict(verbose: bool, fn):
    """A ``say(ok, message) -> ok`` that prints ``PASS: message`` or ``NOT YET: message``.

    Checks the checker's own arguments first: those are the caller's, not the drill's, so a
    wrong one is an error (a TypeError naming it), not a verdict.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected the function to check (a callable, e.g. "
                        f"my_group_advantages), got {describe(fn)}")
    if not isinstance(verbose, (bool, np.bool_)):
        raise TypeError(f"verbose: expected True or False, got {describe(verbose)}")

    def say(ok: bool, message: str) -> bool:
        if verbose:
            print(("PASS: " if ok else "NOT YET: ") + message)
        return ok
    return say


def _copy(arg, dtype):
    """A fresh array for an array-like argument (so the reader may not touch ours), else as is."""
    if isinstance(arg, (list, np.ndarray)):
        return np.array(arg) if dtype is None else np.array(arg, dtype=dtype)
    return arg


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "biu" or b.dtype.kind in "biu":
        return np.array_equal(a, b)
    return np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True)


def call(fn, *args, dtype=np.float64, returns: str = "the array", broadcast_hint: str = ""):
    """Run ``fn(*args)`` on copies; return ``(output, None)`` or ``(None, problem)``.

    ``dtype``: the dtype the array arguments are handed over in (float64), or ``None`` to keep
    each argument's own dtype (the low-precision drills). The output comes back as a float64
    array, or in its own float dtype when ``dtype`` is None. ``returns`` names what the
    function should return, for the messages; ``broadcast_hint`` is added to the message of
    an exception about broadcasting (the drill's usual cause of one).
    """
    given = [_copy(a, dtype) for a in args]
    before = [g.copy() if isinstance(g, np.ndarray) else None for g in given]
    try:
        with np.errstate(all="ignore"):          # the reader's overflow is diagnosed, not warned
            out = fn(*given)
    except Exception as exc:  # the reader's bug, reported rather than raised
        hint = broadcast_hint if "broadcast" in str(exc) else ""
        return None, f"raised {type(exc).__name__}: {exc}{hint}"
    for g, b in zip(given, before):
        if b is not None and not _same(g, b):
            return None, ("modified its input (an in-place `-=`, `*=` or `[...] =`?): work "
                          "on a copy and leave the caller's arrays alone")
    if out is None:
        return None, f"returned None: return {returns}"
    if isinstance(out, tuple):
        return None, f"returned a tuple of {len(out)}; return only {returns}"
    if isinstance(out, (str, bytes, dict, set)):
        return None, f"returned a {type(out).__name__}, expected {returns} (numbers)"
    try:
        arr = np.asarray(out)
    except (TypeError, ValueError) as exc:      # ragged lists and the like
        return None, f"returned {type(out).__name__} that is not an array ({exc})"
    if not (is_float_dtype(arr.dtype) or arr.dtype.kind in "biu"):
        return None, f"returned dtype {arr.dtype}, expected a float array ({returns})"
    if dtype is not None or not is_float_dtype(arr.dtype):
        arr = arr.astype(np.float64)
    return arr, None
