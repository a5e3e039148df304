"""The one door of chapter 7's cost model: every argument of every public function of
:mod:`grpo_lab.perf.cost_model`, :mod:`grpo_lab.perf.cost_memory` and the arithmetic of
:mod:`grpo_lab.perf.roofline`, checked once, by name, through :mod:`grpo_lab.numerics.validate`.

A public function calls :func:`check_cost_arguments` once with its arguments as keywords; each
name has one rule here (:data:`RULES`), so ``context`` means the same thing, and is refused
for the same reasons, in every function that takes it. Sizes (sequences, tokens, layers) are
integers: a fractional or a string size is refused, not floored or repeated. Flags are bools:
``reference="no"`` is a ``TypeError``, not True. A rate is a positive finite float: a link of
0 byte/s is refused, not replaced by NVLink. What comes out is finite and non-negative:
:func:`finite_result` refuses the rare arithmetic that overflows float64, naming the
arguments that made it.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import as_array, as_float_array, check_int, check_real, describe

__all__ = ["MAX_SEQUENCES", "MAX_TOKENS", "RULES", "check_cost_arguments", "finite_result"]

#: Sequences in one priced batch: arrays of this many lengths are built (a 16-million-sequence
#: batch is 128 MB of int64 lengths; no GRPO step is near it).
MAX_SEQUENCES = 2 ** 24
#: Tokens of one sequence (prompt or completion) or of context: the decode loop is priced
#: step by step, one array entry per step (4 million tokens; no model's context is near it).
MAX_TOKENS = 2 ** 22
_WHY_SEQ = f" (at most {MAX_SEQUENCES:,} sequences: one array entry each is built)"
_WHY_TOK = f" (at most {MAX_TOKENS:,} tokens: the decode loop is priced one step at a time)"


def _model(name, x):
    from grpo_lab.perf.cost_model import ModelConfig
    if not isinstance(x, ModelConfig):
        raise TypeError(f"{name}: expected a gl.cost_model.ModelConfig (e.g. "
                        f"gl.cost_model.QWEN25_7B), got {describe(x)}")
    return x


def _gpu(name, x):
    from grpo_lab.perf.roofline import GPU
    if not isinstance(x, GPU):
        raise TypeError(f"{name}: expected a gl.roofline.GPU (e.g. gl.roofline.H100_SXM), "
                        f"got {describe(x)}")
    return x


def _eff(name, x, allow_none=False):
    from grpo_lab.perf.cost_model import Efficiency
    if x is None and allow_none:
        return None
    if not isinstance(x, Efficiency):
        extra = " or None (the datasheet peaks)" if allow_none else ""
        raise TypeError(f"{name}: expected a gl.cost_model.Efficiency{extra}, got {describe(x)}")
    return x


def _flag(name, x):
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {describe(x)}")
    return bool(x)


def _nonnegative(name, x, what):
    """A finite real scalar or array >= 0, as float64 (``what`` says in which unit)."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}: expected {what} (a real number or array >= 0), got {describe(x)}")
    arr, _ = as_float_array(name, x, shape_doc=f" of {what}")
    if arr.dtype.kind == "b":
        raise TypeError(f"{name}: expected {what} (real numbers >= 0), got a bool array")
    arr = np.asarray(arr, dtype=np.float64)
    if (arr < 0).any():
        raise ValueError(f"{name}: expected {what} >= 0, got {arr[arr < 0].flat[0]}")
    return arr if arr.ndim else float(arr)


def _counts(name, x, minimum, maximum, why):
    """A non-empty integer scalar or array in [minimum, maximum], as int64 (floats refused)."""
    if isinstance(x, (str, bytes)) or x is None or isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}: expected integer counts, got {describe(x)}")
    arr = as_array(name, x, "integer counts")
    if arr.size == 0:
        raise ValueError(f"{name}: expected at least one count, got {describe(arr)}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer counts (a fractional count is refused, not "
                        f"floored), got {describe(arr)}")
    if (arr < minimum).any() or (arr > maximum).any():
        bad = arr[(arr < minimum) | (arr > maximum)].flat[0]
        raise ValueError(f"{name}: expected integers in [{minimum}, {maximum:,}]{why}, got {bad}")
    return arr.astype(np.int64)


def _itemsize(name, x):
    x = check_int(name, x, minimum=1)
    if x not in (1, 2, 4, 8):
        raise ValueError(f"{name}: expected bytes per element of a real dtype, 1, 2, 4 or 8, "
                         f"got {x}")
    return x


def _positive_or_none(name, x):
    return None if x is None else check_real(name, x, minimum=0.0, allow_equal=False)


def _cost(name, x):
    """A stage -> seconds dict, as :func:`grpo_step_cost` returns: finite, >= 0, not empty."""
    if not isinstance(x, dict) or not x:
        raise TypeError(f"{name}: expected a non-empty dict of stage -> seconds (what "
                        f"gl.cost_model.grpo_step_cost returns), got {describe(x)}")
    for stage, seconds in x.items():
        if not isinstance(stage, str):
            raise TypeError(f"{name}: expected stage names as str, got the key {stage!r}")
        check_real(f"{name}[{stage!r}]", seconds, minimum=0.0)
    if sum(x.values()) <= 0:
        raise ValueError(f"{name}: expected a step that takes some time, got a total of 0 s")
    return x


def _fn(name, x):
    if not callable(x):
        raise TypeError(f"{name}: expected a callable of no arguments, got {describe(x)}")
    return x


def _dtype(name, x):
    for dt in (np.float32, np.float64):
        if x is dt or (isinstance(x, (str, np.dtype)) and np.dtype(x) == dt):
            return dt
    raise TypeError(f"{name}: expected np.float32 or np.float64, got {describe(x)}")


def _lengths(name, x):
    arr = _counts(name, x, 1, MAX_TOKENS, _WHY_TOK)
    if arr.ndim != 1 or arr.size > MAX_SEQUENCES:
        raise ValueError(f"{name}: expected a 1-D array of at most {MAX_SEQUENCES:,} "
                         f"completion lengths, got {describe(arr)}")
    return arr


def _token_counts(name, x):
    arr = _counts(name, list(x) if isinstance(x, (tuple, range)) else x, 0, MAX_TOKENS, _WHY_TOK)
    if arr.ndim != 1 or arr.size > MAX_SEQUENCES:
        raise ValueError(f"{name}: expected a 1-D list of at most {MAX_SEQUENCES:,} token "
                         f"counts, got {describe(arr)}")
    return arr


def _int(lo, hi=None, why=""):
    return lambda name, x: check_int(name, x, minimum=lo, maximum=hi, why=why)


def _real(lo, hi=None, strict=False):
    return lambda name, x: check_real(name, x, minimum=lo, maximum=hi, allow_equal=not strict)


#: argument name -> its rule, one for the whole cost model.
RULES = {
    "model": _model, "gpu": _gpu, "eff": _eff,
    "eff_or_none": lambda name, x: _eff(name, x, allow_none=True),
    "flops": lambda name, x: _nonnegative(name, x, "flops"),
    "nbytes": lambda name, x: _nonnegative(name, x, "bytes"),
    "context": lambda name, x: _nonnegative(name, x, "tokens of context"),
    "intensity": lambda name, x: _nonnegative(name, x, "flop/byte values"),
    "batch": lambda name, x: _counts(name, x, 1, MAX_SEQUENCES, _WHY_SEQ),
    "lengths": _lengths, "token_counts": _token_counts,
    "pad_to": lambda name, x: None if x is None else check_int(name, x, minimum=0,
                                                                maximum=MAX_TOKENS, why=_WHY_TOK),
    "itemsize": _itemsize,
    "prompts": _int(1, MAX_SEQUENCES, _WHY_SEQ), "G": _int(1, MAX_SEQUENCES, _WHY_SEQ),
    "N": _int(1, MAX_SEQUENCES, _WHY_SEQ), "B": _int(1, MAX_SEQUENCES, _WHY_SEQ),
    "sequences": _int(0, MAX_SEQUENCES, _WHY_SEQ),
    "gpus": _int(1, 2 ** 20, " (GPUs in one job)"),
    "T": _int(1, MAX_TOKENS, _WHY_TOK), "prompt_len": _int(0, MAX_TOKENS, _WHY_TOK),
    "tokens": _int(0, MAX_SEQUENCES * MAX_TOKENS, " (tokens in flight on one GPU)"),
    "micro_tokens": _int(1, MAX_SEQUENCES * MAX_TOKENS, " (tokens in one micro-batch)"),
    "zero_stage": _int(0, 3, " (ZeRO stages 0 to 3)"),
    "shortest": _real(0.0, 1.0), "skew": _real(0.0, 1e3, strict=True),
    "memory_fraction": _real(0.0, 1.0), "other_bytes": _real(0.0),
    "sync_bytes_per_s": _positive_or_none,
    "peak_flops": _real(0.0, strict=True), "bandwidth": _real(0.0, strict=True),
    "cost": _cost, "fn": _fn, "full_size": _int(0), "dtype": _dtype,
    "n": _int(16, 8192, " (an n x n matrix product is timed)"),
    "repeats": _int(1, 1000, " (timed runs)"),
    **{flag: _flag for flag in ("reference", "old_logp", "packed", "checkpointing",
                                "prefix_sharing", "per_sequence_adv", "fp32_logits",
                                "chunked_logits")},
}


def check_cost_arguments(**named):
    """Check each keyword argument by the rule of its name; return the checked values in order.

    ``eff`` may be passed as ``eff_or_none=...`` where None means the datasheet peaks, and
    ``lengths`` of padding as ``token_counts=...`` (0 allowed); the returned values are in the
    caller's order. An unknown name is a programming error.
    """
    shown_as = {"eff_or_none": "eff", "token_counts": "lengths"}
    out = []
    for name, value in named.items():
        shown = shown_as.get(name, name)
        out.append(RULES[name](shown, value))
    return out[0] if len(out) == 1 else out


def finite_result(value, blame):
    """``value`` (a float, an array, or a dict of them) if finite and >= 0; else a ValueError
    naming ``blame`` (the arguments whose size made the arithmetic overflow float64)."""
    if isinstance(value, dict):
        for part in value.values():
            finite_result(part, blame)
        return value
    arr = np.asarray(value, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{blame}: expected sizes whose cost fits in float64 (at most 1.8e308), "
                         f"got a result that overflows")
    if (arr < 0).any():                               # pragma: no cover - the checks forbid it
        raise ValueError(f"{blame}: expected sizes that give a cost >= 0, got {arr.min()}")
    return value

