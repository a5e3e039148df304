"""Chapter 6c: the diagnosis drills. For each mystery, the spellings of its cause a reader
may write (all accepted) and every other diagnosis (each rejected with a hint that names what
the log shows for it).

Not in ``CATALOGUE``: these checkers grade a cause id on a log, not a function, so
``gl.drills.proof_table``'s function drills leave them out; ``tests/clinic/
test_diagnosis_drills.py`` proves them on the clinic's stored logs of the same stages.
"""

from __future__ import annotations

from dataclasses import dataclass

from .entry import Wrong

#: What the verdict on each wrong cause id must say (the metric that cause reads).
SHOWS = {"nan": "are finite on every step", "truncation": "completions/clipped_ratio averages",
         "zero-std": "frac_reward_zero_std averages", "entropy-collapse": "entropy goes from",
         "kl-blowup": "kl peaks at", "lr-too-high": "the entropy peaks at",
         "reward-flat": "reward goes from", "length-collapse": "completions/mean_length goes",
         "length-blowup": "completions/mean_length goes", "reward-hacking": "rewards/",
         "healthy": "this run is not healthy"}


@dataclass(frozen=True)
class Diagnosis:
    """Mystery ``k``: the stored log of its stage (``tests/doctor/fixtures/<log>.json``), the
    answers that must pass and the wrong ones."""
    k: int
    log: str
    rights: tuple
    wrongs: tuple


def _wrongs(cause, symptoms=()):
    out = [Wrong(f"says {other}", other,
                 "symptom here, not the cause" if other in symptoms else SHOWS[other])
           for other in SHOWS if other != cause]
    out += [Wrong("a cause id the doctor does not know", "overfitting",
                  "is not one of the doctor's cause ids"),
            Wrong("a metric's name, not a cause", "frac_reward_zero_std",
                  "is not one of the doctor's cause ids"),
            Wrong("not a str", 3, "answer with a cause id")]
    return tuple(out)


DIAGNOSES = (
    Diagnosis(1, "zero_std", ("zero-std", "ZERO_STD", " zero std ", "all-equal groups",
                              "Zero-Std."), _wrongs("zero-std", ("reward-flat",))),
    Diagnosis(2, "truncation", ("truncation", "Truncation", "truncated", "TRUNCATION ",
                                "max_completion_length"),
              _wrongs("truncation", ("zero-std", "reward-flat"))),
    Diagnosis(3, "nan", ("nan", "NaN", "inf", "Infinity", "nan reward"), _wrongs("nan")),
    Diagnosis(4, "reward_hacking", ("reward-hacking", "reward hacking", "Reward_Hacking",
                                    "reward hack", "REWARD-HACKING"), _wrongs("reward-hacking")),
)
