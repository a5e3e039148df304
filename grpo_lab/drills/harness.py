"""What every drill checker does the same way: run the reader's function safely, name the
mistake, and say a verdict.

A checker never raises because of the reader's code. :func:`run` calls the function on copies
of the inputs and turns an exception or a modified input into a one-line *problem*;
:func:`as_array` turns an output that is not a usable float array (``None``, a tuple, a
string, a complex array, ...) into one too; :func:`call` does both and also checks the shape,
so that a checker reads as its cases::

    out, problem = call(fn, rewards, where="a batch of 3 groups", shape=(3, 4))
    if problem:
        return say(False, problem)        # "on a batch of 3 groups your function raised ..."
    hint = named_mistake(out, {"the statistics were taken over axis 0": axis0, ...})

:func:`verdict` gives the ``say(ok, message)`` that prints ``PASS: ...`` or ``NOT YET: ...``.
Torch tensors (chapter 6's drill) are handed over as they are, so that the checker can read
their gradient; a tensor that comes back is read as a NumPy array.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import describe, is_float_dtype

__all__ = ["as_array", "call", "named_mistake", "run", "verdict"]


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


def _is_tensor(x) -> bool:
    return all(hasattr(x, name) for name in ("detach", "clone", "dtype", "device"))


def _numpy(x) -> np.ndarray:
    """A tensor's values as a NumPy array (bfloat16, which NumPy lacks, as float32)."""
    x = x.detach().cpu()
    return (x.float() if str(x.dtype) == "torch.bfloat16" else x).numpy()


def _same(a, b) -> bool:
    a, b = (_numpy(a), _numpy(b)) if _is_tensor(a) else (a, b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "biu" or b.dtype.kind in "biu":
        return np.array_equal(a, b)
    return np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True)


def run(fn, *args, dtype=np.float64):
    """Run ``fn(*args)``; return ``(its output, None)`` or ``(None, problem)``.

    Array-like arguments are handed over as fresh NumPy arrays in ``dtype`` (float64), or in
    their own dtype when ``dtype`` is None, so the reader cannot touch the checker's copies.
    Tensors are handed over as they are (the checker builds new ones for each call) and
    compared afterwards with a snapshot. Anything else goes as it is.
    """
    given = [(np.array(a) if dtype is None else np.array(a, dtype=dtype))
             if isinstance(a, (list, np.ndarray)) else a for a in args]
    before = [g.copy() if isinstance(g, np.ndarray) else g.detach().clone()
              if _is_tensor(g) else None for g in given]
    try:
        with np.errstate(all="ignore"):          # the reader's overflow is diagnosed, not warned
            out = fn(*given)
    except Exception as exc:  # the reader's bug, reported rather than raised
        return None, f"raised {type(exc).__name__}: {exc}"
    for g, b in zip(given, before):
        if b is not None and not _same(g, b):
            return None, ("modified its input (an in-place `-=`, `*=`, `[...] =` or a torch "
                          "`x.op_()`?): work on a copy and leave the caller's arrays alone")
    return out, None


def as_array(out, *, returns: str = "the array", keep_dtype: bool = False):
    """The reader's output as a float array: ``(array, None)`` or ``(None, problem)``.

    The array is float64, or keeps its own float dtype with ``keep_dtype`` (the low-precision
    drills). ``returns`` names what the function should return, for the messages.
    """
    if out is None:
        return None, f"returned None: return {returns}"
    if isinstance(out, tuple):
        return None, f"returned a tuple of {len(out)}; return only {returns}"
    if isinstance(out, (str, bytes, dict, set)):
        return None, f"returned a {type(out).__name__}, expected {returns} (numbers)"
    try:
        arr = _numpy(out) if _is_tensor(out) else np.asarray(out)
    except (TypeError, ValueError, RuntimeError) as exc:      # ragged lists and the like
        return None, f"returned {type(out).__name__} that is not an array ({exc})"
    if not (is_float_dtype(arr.dtype) or arr.dtype.kind in "biu"):
        return None, f"returned dtype {arr.dtype}, expected a float array ({returns})"
    if not keep_dtype or not is_float_dtype(arr.dtype):
        arr = arr.astype(np.float64)
    return arr, None


def call(fn, *args, where: str, shape=None, shape_hint: str = "", dtype=np.float64,
         returns: str = "the array", broadcast_hint: str = "", keep: list | None = None):
    """:func:`run` then :func:`as_array`: ``(array, None)`` or ``(None, the verdict's text)``.

    ``where`` names the case ("the worked example"): a problem comes back as ``on <where>
    your function <problem>``. ``shape``: the shape the output must have, or ``()`` for one
    number (any size-1 output, returned 0-d); a wrong one is a problem, followed by
    ``shape_hint``. ``dtype``: as in :func:`run`; with ``None`` the output keeps its float
    dtype too. ``broadcast_hint`` follows an exception about broadcasting (the drill's usual
    cause of one). ``keep``: a list that gets the output as it came (a tensor, whose gradient
    chapter 6's checker reads).
    """
    out, problem = run(fn, *args, dtype=dtype)
    if keep is not None:
        keep.append(out)
    if problem is None:
        out, problem = as_array(out, returns=returns, keep_dtype=dtype is None)
    if problem is not None:
        if problem.startswith("raised") and ("broadcast" in problem
                                             or "must match the size" in problem):
            problem += broadcast_hint
        return None, f"on {where} your function {problem}"
    if shape == () and out.size == 1:
        return out.reshape(()), None
    if shape is not None and out.shape != tuple(shape):
        return None, (f"on {where} it returned shape {out.shape}, expected {tuple(shape)}"
                      f"{shape_hint}")
    return out, None


def named_mistake(out, mistakes, *, rtol: float = 1e-6, atol: float = 1e-9):
    """The hint of the first usual mistake whose value ``out`` matches, else None.

    ``mistakes``: ``{hint: the value that mistake gives}`` (or ``(hint, value)`` pairs); a
    value may be a scalar, or any shape that broadcasts to ``out``'s.
    """
    pairs = mistakes.items() if isinstance(mistakes, dict) else mistakes
    for hint, wrong in pairs:
        try:
            wrong = np.broadcast_to(np.asarray(wrong, dtype=np.float64), np.shape(out))
        except ValueError:
            continue
        if np.allclose(out, wrong, rtol=rtol, atol=atol):
            return hint
    return None
