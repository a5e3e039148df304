r"""The doctor: read a TRL GRPO run's log and name what went wrong.

Taught in chapter 6c, "The doctor" (``chapters/06c_clinic.ipynb``)::

    python -m grpo_lab.doctor output_dir/checkpoint-500/trainer_state.json

It reads TRL 1.16.0's logged metrics (:mod:`grpo_lab.doctor.log`: a ``trainer_state.json``, a
JSON list of ``trainer.state.log_history`` or JSON lines, whatever the file is named) and
prints one finding per line, ``cause-id: what in the log shows it (read: <clinic section>)``,
or ``healthy: ...`` alone. Each cause is one small rule of :mod:`grpo_lab.doctor.rules`,
its thresholds set between the clinic's staged runs. Bad input is one line on stderr and
exit status 2. The standard library and NumPy only: it runs wherever the log is.

=====================  ==============================================================
cause id               what the rule reads
=====================  ==============================================================
``nan``                NaN, Infinity or null in loss, grad_norm, reward, kl, entropy
``truncation``         completions/clipped_ratio mostly at the limit
``zero-std``           frac_reward_zero_std near 1
``entropy-collapse``   entropy falling to a small part of its start
``kl-blowup``          kl past 1 nat per token
``lr-too-high``        grad_norm spiking with the entropy rising
``reward-flat``        reward not rising while reward_std says the groups disagree
``length-collapse``    completions/mean_length shrinking
``length-blowup``      completions/mean_length growing several times
``reward-hacking``     one rewards/<name>/mean rising while another falls
=====================  ==============================================================

verl's names: verl 0.9.1 logs ``critic/score/mean``, ``response_length/mean``,
``response_length/clip_ratio``, ``actor/entropy``, ``actor/grad_norm`` and ``actor/pg_loss``
for quantities TRL logs too (:data:`VERL_NAMES` cites where); so the rules truncation,
entropy-collapse, length-collapse, length-blowup, lr-too-high and nan
can read a verl log, while zero-std, kl-blowup and reward-hacking need metrics verl names
otherwise or not at all. The doctor reads TRL's names only, and :data:`VERL_NAMES` maps verl's onto them for a reader
who renames the keys of a verl log first (:func:`from_verl`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from grpo_lab.doctor import rules
from grpo_lab.doctor.log import DoctorError, TRL_METRICS, read_log, rows_of, series

__all__ = ["CAUSES", "Cause", "DoctorError", "Finding", "TRL_METRICS", "VERL_NAMES",
           "VERL_SOURCES",
           "diagnose", "from_verl", "main", "read_log", "report", "rows_of", "series"]


@dataclass(frozen=True)
class Cause:
    """One cause the doctor names: its ``rule`` (rows -> evidence or None), the clinic
    section to ``read``, and what it ``means``."""
    rule: object
    read: str
    means: str


#: The cause ids, in the order the doctor prints its findings.
CAUSES = {
    "nan": Cause(rules.nan, "The clinic: NaN", "a non-finite number reached the loss or a "
                 "logged metric: an infinite or NaN reward, or a run that diverged"),
    "truncation": Cause(rules.truncation, "The clinic: truncation", "completions stop at "
                        "max_completion_length before they answer"),
    "zero-std": Cause(rules.zero_std, "The clinic: all-equal groups", "every completion of "
                      "a group gets the same reward: zero advantage, no gradient"),
    "entropy-collapse": Cause(rules.entropy_collapse, "chapter 6: Entropy: how fast the policy stops exploring",
                              "the policy turns deterministic and stops exploring"),
    "kl-blowup": Cause(rules.kl_blowup, "The clinic: KL blow-up", "the policy runs far from "
                       "the reference within a few steps"),
    "lr-too-high": Cause(rules.lr_too_high, "The clinic: learning rate too high", "each "
                         "step moves the weights too far; the run degrades"),
    "reward-flat": Cause(rules.reward_flat, "The clinic: flat reward", "the groups disagree "
                         "but the reward does not rise: too small a step, or nothing learned"),
    "length-collapse": Cause(rules.length_collapse, "The clinic: length collapse",
                             "completions shrink: a reward or a loss favours short ones"),
    "length-blowup": Cause(rules.length_blowup, "The clinic: length blow-up", "completions "
                           "grow towards the maximum: a reward or a loss favours long ones"),
    "reward-hacking": Cause(rules.reward_hacking, "The clinic: reward hacking", "one reward "
                            "rises while the task's falls: the policy games the proxy"),
}


@dataclass(frozen=True)
class Finding:
    """One line of the doctor's report: ``cause: evidence (read: section)``."""
    cause: str
    evidence: str
    read: str

    def __str__(self) -> str:
        return f"{self.cause}: {self.evidence} (read: {self.read})"


def diagnose(rows) -> list:
    """The findings of every cause whose rule fires on ``rows`` (step dicts, as from
    :func:`read_log` or ``trainer.state.log_history``); ``[Finding("healthy", ...)]`` alone
    when none does."""
    rows = rows_of(list(rows) if isinstance(rows, tuple) else rows)
    found = [Finding(cause_id, evidence, cause.read) for cause_id, cause in CAUSES.items()
             if (evidence := cause.rule(rows)) is not None]
    if not found:
        return [Finding("healthy", f"no rule fires on {len(rows)} logged steps",
                        "The clinic: The dashboard guide")]
    return found


def report(rows) -> str:
    """The doctor's printout for ``rows``: one finding per line."""
    return "\n".join(str(f) for f in diagnose(rows))


#: verl 0.9.1's names for quantities TRL also logs, each read from the wheel:
#: ``critic/score/mean``, ``response_length/mean``, ``response_length/clip_ratio``
#: (``verl/trainer/ppo/metric_utils.py:556,573,576``), ``actor/entropy``
#: (``verl/trainer/ppo/ray_trainer.py:1597``), ``actor/grad_norm`` (``ray_trainer.py:1788``),
#: ``actor/pg_loss`` (``verl/workers/utils/losses.py:119``, the policy term only). Not mapped:
#: ``actor/ppo_kl`` (``core_algos.py:1373``) is the KL between the old and the current policy,
#: not TRL's ``kl`` to the reference; verl's KL to the reference is the loss metric
#: ``kl_loss`` (``losses.py:141``), which the doctor leaves unmapped (its prefix was not
#: checked); verl logs no ``frac_reward_zero_std``.
VERL_NAMES = {
    "critic/score/mean": "reward",
    "response_length/mean": "completions/mean_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
    "actor/entropy": "entropy",
    "actor/grad_norm": "grad_norm",
    "actor/pg_loss": "loss",
}

#: Where verl 0.9.1 logs each name of :data:`VERL_NAMES` (file:line in the wheel).
VERL_SOURCES = {
    "critic/score/mean": "verl/trainer/ppo/metric_utils.py:556",
    "response_length/mean": "verl/trainer/ppo/metric_utils.py:573",
    "response_length/clip_ratio": "verl/trainer/ppo/metric_utils.py:576",
    "actor/entropy": "verl/trainer/ppo/ray_trainer.py:1597",
    "actor/grad_norm": "verl/trainer/ppo/ray_trainer.py:1788",
    "actor/pg_loss": "verl/workers/utils/losses.py:119",
}


def from_verl(rows) -> list:
    """verl's logged dicts with their keys renamed to TRL's (:data:`VERL_NAMES`); other
    keys are kept as they are."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"rows: expected a list of dicts, got {type(rows).__name__}")
    return [{VERL_NAMES.get(k, k): v for k, v in row.items()} for row in rows]


_USAGE = "usage: python -m grpo_lab.doctor PATH  (trainer_state.json, a JSON list or JSON lines)"


def main(argv=None) -> int:
    """``python -m grpo_lab.doctor PATH``: print the findings; 0 when read, 2 on bad input."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        stream = sys.stdout if argv and argv[0] in ("-h", "--help") else sys.stderr
        print(_USAGE, file=stream)
        return 0 if stream is sys.stdout else 2
    try:
        rows = read_log(argv[0])
    except DoctorError as err:
        print(f"grpo_lab.doctor: {err}", file=sys.stderr)
        return 2
    print(report(rows))
    return 0
