"""What every drill checker does the same way: run the reader's function safely and read its
answer back.

A checker never raises, and never hangs, because of the reader's code. :func:`run` calls the
function on fresh copies of the inputs, in a worker thread with a time limit
(:data:`TIME_LIMIT_S`), and turns an exception, a time-out or a modified input into a one-line
*problem*; :func:`as_answer` turns whatever came back (an array, a tensor that requires grad, a
Python float, ``None``, a generator, a complex array...) into an :class:`Answer`, the values in
float64 with the dtype they came in, or into a problem; :func:`call` does both and checks the
shape::

    answer, problem = call(fn, rewards, where="a batch of 3 groups", shape=(3, 4))
    if problem:
        return say(False, problem)        # "on a batch of 3 groups your function raised ..."

:func:`verdict` gives the ``say(ok, message)`` that prints ``PASS: ...`` or ``NOT YET: ...``.

The time limit runs the function in a daemon thread and, past the limit, raises an exception
inside it (``PyThreadState_SetAsyncExc``): a Python loop stops at once; a call stuck inside
one C function stops when that returns. It works the same in Jupyter and under pytest, on any
thread (a signal would need the main thread). The global state the checker touches is put back
afterwards: torch's default dtype, grad mode and thread count, and tracemalloc's tracing.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from dataclasses import dataclass

import numpy as np

from grpo_lab.numerics.command_line import echo
from grpo_lab.numerics.validate import describe, is_float_dtype

__all__ = ["TEXT_LIMIT", "TIMED_OUT", "TIME_LIMIT_S", "Answer", "as_answer", "call",
           "exception_text", "in_thread", "run", "text_of", "verdict"]

#: Seconds one call of the reader's function may take before it is stopped: far above what any
#: drill needs (milliseconds), far below a reader's patience.
TIME_LIMIT_S = 5.0


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
        if verbose:              # the message may quote the reader's text: any encoding
            echo(("PASS: " if ok else "NOT YET: ") + message)
        return ok
    return say


# --- running the reader's function --------------------------------------------------------------

class _TimedOut(BaseException):
    """Raised inside the reader's function past the time limit (not an Exception, so that a
    reader's ``except Exception`` cannot swallow it)."""


#: What :func:`in_thread` gives as the exception when the time limit stopped the function.
TIMED_OUT = TimeoutError("the time limit stopped the function")


def _stop(thread: threading.Thread) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                               ctypes.py_object(_TimedOut))


def _torch_state():
    """(getter, setter) pairs of the torch globals a checker or a reader's function may touch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    return [(torch.get_default_dtype, torch.set_default_dtype),
            (torch.is_grad_enabled, torch.set_grad_enabled),
            (torch.get_num_threads, torch.set_num_threads)]


def in_thread(work, limit_s: float | None = None):
    """``work()`` in a worker thread: ``(its result, None)``, ``(None, the exception it raised)``
    or, past ``limit_s`` seconds (default :data:`TIME_LIMIT_S`), ``(None, TIMED_OUT)``, the
    thread stopped. torch's global settings are restored afterwards, whatever ``work`` did.
    """
    limit_s = TIME_LIMIT_S if limit_s is None else limit_s
    saved = [(get, set_, get()) for get, set_ in _torch_state()]
    box: dict = {}

    def body():
        try:
            with np.errstate(all="ignore"):       # the reader's overflow is diagnosed, not warned
                box["out"] = work()
        except _TimedOut:
            box["exc"] = TIMED_OUT
        except BaseException as exc:  # noqa: BLE001 - the reader's bug, reported not raised
            box["exc"] = exc

    thread = threading.Thread(target=body, name="grpo_lab drill", daemon=True)
    thread.start()
    try:
        thread.join(limit_s)
        if thread.is_alive():
            _stop(thread)
            thread.join(0.5)
            box.setdefault("exc", TIMED_OUT)
    except KeyboardInterrupt:                     # the reader pressed stop: stop the worker too
        _stop(thread)
        raise
    finally:
        for get, set_, value in saved:
            if get() != value:
                set_(value)
    return box.get("out"), box.get("exc")


# --- text of the reader's objects ---------------------------------------------------------------

#: The most characters of a reader's text a verdict quotes (a message can be megabytes).
TEXT_LIMIT = 500


def _type_name(obj) -> str:
    """The name of ``obj``'s class, even when a metaclass makes ``__name__`` misbehave."""
    try:
        name = type(obj).__name__
        return name if isinstance(name, str) else "object"
    except Exception:  # noqa: BLE001 - the reader's class
        return "object"


def text_of(obj) -> str:
    """``str(obj)`` of an object the reader made, never raising: a ``__str__`` (or the
    ``__repr__`` of an exception's arguments) that raises or returns a non-str gives a stand-in
    naming the class; a long text is cut to :data:`TEXT_LIMIT` characters."""
    try:
        text = str(obj)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the reader's __str__
        return f"<a {_type_name(obj)} whose str() raised {_type_name(exc)}>"
    text = str.__str__(text)                          # a str subclass's own methods stay out
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "..."


def exception_text(exc) -> str:
    """``"ValueError: its message"`` for an exception the reader's code raised (see
    :func:`text_of`); the class alone when the message is empty."""
    message = text_of(exc)
    return f"{_type_name(exc)}: {message}" if message else _type_name(exc)


def _is_tensor(x) -> bool:
    return all(hasattr(x, name) for name in ("detach", "clone", "dtype", "device"))


def _copy(x, dtype):
    if isinstance(x, (list, np.ndarray)):
        return np.array(x) if dtype is None else np.array(x, dtype=dtype)
    return x.detach().clone().requires_grad_(x.requires_grad) if _is_tensor(x) else x


def _snapshot(x):
    if isinstance(x, np.ndarray):
        return x.copy()
    return x.detach().clone() if _is_tensor(x) else None


def _values(x):
    if _is_tensor(x):
        x = x.detach().cpu()
        return (x.double() if x.dtype.is_floating_point else x).numpy()
    return x


def _same(a, b) -> bool:
    a, b = _values(a), _values(b)
    if a.shape != b.shape:
        return False
    if not is_float_dtype(a.dtype):
        return np.array_equal(a, b)
    return np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True)


def run(fn, *args, dtype=np.float64, kwargs=None, limit_s=None, given_to: list | None = None):
    """Run ``fn(*args, **kwargs)``; return ``(its output, None)`` or ``(None, problem)``.

    Array-like arguments are handed over as fresh NumPy arrays in ``dtype`` (float64), or in
    their own dtype when ``dtype`` is None; tensors as fresh clones (keeping requires_grad);
    anything else as it is. Each is compared with a snapshot afterwards. ``given_to``: a list
    that gets the arguments as handed over (chapter 6's checker reads logp's gradient).
    """
    kwargs = dict(kwargs or {})
    given = [_copy(a, dtype) for a in args]
    if given_to is not None:
        given_to.extend(given)
    before = [_snapshot(g) for g in given]
    out, exc = in_thread(lambda: fn(*given, **kwargs), limit_s)
    if exc is TIMED_OUT:
        return None, (f"did not finish within {TIME_LIMIT_S if limit_s is None else limit_s:g} "
                      "s (an endless loop? the drill's inputs are small)")
    if exc is not None:
        return None, f"raised {exception_text(exc)}"
    for g, b in zip(given, before):
        if b is not None and not _same(g, b):
            return None, ("modified its input (an in-place `-=`, `*=`, `[...] =` or a torch "
                          "`x.op_()`?): work on a copy and leave the caller's arrays alone")
    return out, None


# --- reading the answer back --------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """The reader's output: ``values`` in float64 (NaN kept), and the ``dtype`` it came in:
    ``"float64"``, ``"float32"``, ``"float16"``, ``"bfloat16"``, ``"int"`` or ``"bool"``;
    ``raw``, the output as it came, and ``given``, the arguments as they were handed over."""
    values: np.ndarray
    dtype: str
    raw: object = None
    given: tuple = ()

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))


def _dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name in ("float64", "float32", "float16", "bfloat16", "bool"):
        return name
    if name in ("double", "float", "half"):
        return {"double": "float64", "float": "float32", "half": "float16"}[name]
    return "int" if np.dtype(name).kind in "iu" else name


def as_answer(out, *, returns: str = "the array"):
    """The reader's output as an :class:`Answer`: ``(answer, None)`` or ``(None, problem)``.

    ``returns`` names what the function should return, for the messages.
    """
    if out is None:
        return None, f"returned None: return {returns}"
    if isinstance(out, tuple):
        return None, f"returned a tuple of {len(out)}; return only {returns}"
    if isinstance(out, (str, bytes, dict, set)) or callable(out):
        return None, f"returned a {_type_name(out)}, expected {returns} (numbers)"
    try:
        if _is_tensor(out):
            t = out.detach().cpu()                    # a tensor that requires grad is fine here
            if t.is_complex():
                return None, f"returned a {t.dtype} tensor, expected {returns} (real numbers)"
            name = _dtype_name(t.dtype)
            arr = (t.double() if t.dtype.is_floating_point else t).numpy()
        else:
            arr = np.asarray(out)
            name = _dtype_name(arr.dtype) if (is_float_dtype(arr.dtype)
                                              or arr.dtype.kind in "biu") else None
            if name is None:
                kind = "a generator" if hasattr(out, "__next__") else f"dtype {arr.dtype}"
                return None, f"returned {kind}, expected a float array ({returns})"
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - ragged lists, exotic objects
        return None, f"returned {_type_name(out)} that is not an array ({text_of(exc)})"
    if name == "float128" or name == "longdouble":
        name = "float64"
    with np.errstate(all="ignore"):
        return Answer(arr.astype(np.float64), name, out), None


def call(fn, *args, where: str, shape=None, shape_hint: str = "", dtype=np.float64,
         returns: str = "the array", broadcast_hint: str = "", keep: list | None = None,
         kwargs=None):
    """:func:`run` then :func:`as_answer`: ``(answer, None)`` or ``(None, the verdict's text)``.

    ``where`` names the case ("the worked example"): a problem comes back as ``on <where>
    your function <problem>``. ``shape``: the shape the output must have, or ``()`` for one
    number (any size-1 output, read as 0-d); a wrong one is a problem, followed by
    ``shape_hint``. ``dtype``: as in :func:`run`. ``broadcast_hint`` follows an exception about
    broadcasting (the drill's usual cause of one). ``keep``: a list that gets the output as it
    came (a tensor, whose gradient chapter 6's checker reads). ``kwargs`` go to ``fn``.
    """
    given = []
    out, problem = run(fn, *args, dtype=dtype, kwargs=kwargs, given_to=given)
    if keep is not None:
        keep.append(out)
    answer = None
    if problem is None:
        answer, problem = as_answer(out, returns=returns)
        answer = answer and Answer(answer.values, answer.dtype, out, tuple(given))
    if problem is not None:
        if problem.startswith("raised") and ("broadcast" in problem
                                             or "must match the size" in problem):
            problem += broadcast_hint
        return None, f"on {where} your function {problem}"
    values = answer.values
    if shape == () and values.size == 1:
        return Answer(values.reshape(()), answer.dtype, answer.raw, answer.given), None
    if shape is not None and values.shape != tuple(shape):
        return None, (f"on {where} it returned shape {values.shape}, expected {tuple(shape)}"
                      f"{shape_hint}")
    return answer, None

