"""Read a TRL run's logged metrics from a file, whatever its name: the doctor's input.

Taught in chapter 6c, "The doctor" (``chapters/06c_clinic.ipynb``). Three shapes are read:

=====================================  ========================================================
file                                   what it holds
=====================================  ========================================================
``trainer_state.json``                 a JSON object whose ``log_history`` is the list below
                                       (``TrainerState.save_to_json`` in transformers)
a JSON list                            ``trainer.state.log_history``: one dict per logging step
JSON lines                             one such dict per line
=====================================  ========================================================

What TRL 1.16.0 writes into them and this module reads as it comes: ``NaN`` and
``Infinity`` (Python's ``json`` writes and reads both), ``null`` (a metric that had no value,
read as NaN), rows without reward data (with ``num_iterations`` > 1 a step may reuse the
batch of an earlier one), and the final summary row (``train_runtime``, ``train_loss``:
dropped, it is not a step). The standard library and NumPy only: no torch, no TRL.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

__all__ = ["DoctorError", "TRL_METRICS", "read_log", "rows_of", "series"]

#: The step metrics TRL 1.16.0's ``GRPOTrainer`` logs (``trl/trainer/grpo_trainer.py``,
#: ``_generate_and_score_completions`` and ``compute_loss``; ``loss``, ``grad_norm``,
#: ``learning_rate`` come from transformers' ``Trainer``). A row holding none of them is not
#: a TRL step. ``rewards/<name>/mean`` and ``rewards/<name>/std`` are matched by prefix.
TRL_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
               "completions/min_length", "completions/max_length", "completions/clipped_ratio",
               "completions/mean_terminated_length", "entropy", "kl", "clip_ratio/low_mean",
               "clip_ratio/high_mean", "clip_ratio/region_mean", "loss", "grad_norm")
_SUMMARY = ("train_runtime", "train_loss", "train_samples_per_second")


class DoctorError(ValueError):
    """A log the doctor cannot read: its message is the one line the command prints."""


def _is_step(row) -> bool:
    return (isinstance(row, dict) and not any(k in row for k in _SUMMARY)
            and any(k in TRL_METRICS or str(k).startswith("rewards/") for k in row))


def rows_of(data) -> list:
    """The step rows of parsed JSON: ``{"log_history": [...]}``, ``[...]`` of dicts.

    Raises :class:`DoctorError` when there is no step row with a TRL metric.
    """
    if isinstance(data, dict) and "log_history" in data:
        data = data["log_history"]
        if not isinstance(data, list):
            raise DoctorError(f"log_history: expected a list of TRL's logged dicts, got "
                              f"{type(data).__name__}")
        if not data:
            raise DoctorError("log_history is empty: the run logged no step (did it train? "
                              "logging_steps must be <= max_steps)")
    elif isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DoctorError(f"expected TRL's log: a trainer_state.json, a JSON list of logged "
                          f"dicts or JSON lines, got a JSON {type(data).__name__}")
    rows = [row for row in data if _is_step(row)]
    if not rows:
        raise DoctorError(f"no TRL metric in {len(data)} logged rows: expected keys such as "
                          f"'reward', 'loss', 'frac_reward_zero_std'")
    return rows


def read_log(path) -> list:
    """The step rows of the TRL log at ``path`` (a str or ``os.PathLike``), in file order.

    Raises :class:`DoctorError` (one line) for a missing path, a folder, an empty file,
    text that is neither JSON nor JSON lines, or a log with no TRL metric.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DoctorError(f"{path}: no such file")
    if os.path.isdir(path):
        raise DoctorError(f"{path}: is a folder; expected a file (its trainer_state.json, "
                          f"in a checkpoint-N folder)")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise DoctorError(f"{path}: cannot be read as UTF-8 text ({type(err).__name__})") from None
    if not text.strip():
        raise DoctorError(f"{path}: the file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    data.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DoctorError(f"{path}: not JSON and not JSON lines (line {number}: "
                                      f"{err.msg})") from None
    try:
        return rows_of(data)
    except DoctorError as err:
        raise DoctorError(f"{path}: {err}") from None


def _number(value) -> float:
    if value is None:                                     # TRL's null: no value this step
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def series(rows, key: str) -> np.ndarray:
    """The values of ``key`` over the rows that logged it, float64, shape (n,); ``null`` is NaN.

    >>> series([{"reward": 0.5}, {"loss": 0.0}, {"reward": None}], "reward")
    array([0.5, nan])
    """
    return np.array([_number(row[key]) for row in rows if key in row], dtype=np.float64)
