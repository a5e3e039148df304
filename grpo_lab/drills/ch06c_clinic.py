"""Diagnosis drills for chapter 6c, the clinic: a run's logged metrics, a cause to name.

Each mystery is one of the clinic's staged failures (:data:`grpo_lab.clinic.STAGES`), run in
TRL's real ``GRPOTrainer`` with a seed the chapter does not print. The reader reads its
dashboard and names the cause with one of the doctor's ids (:data:`grpo_lab.doctor.CAUSES`,
or ``healthy``). The checker grades the answer against the staged cause and answers, like a
colleague at the next desk, with what the log shows: on a right answer, the evidence; on a
wrong one, the metric that cause would move and its value in this log (the doctor's rule and
threshold, :mod:`grpo_lab.doctor.rules`); where that cause's rule fires too, why it is a
symptom of the staged cause, not the cause.

=====================================  ==========================================================
function                               what it does
=====================================  ==========================================================
``mystery_log(k)``                     runs mystery ``k`` (1 to 4) in TRL; returns its
                                       ``log_history`` (needs TRL and torch)
``check_diagnosis(k, answer, log)``    grades ``answer`` (a cause id) for mystery ``k`` on its
                                       ``log``; prints ``PASS: ...`` or ``NOT YET: ...``, returns
                                       True or False; never raises because of the answer
=====================================  ==========================================================

The checker reads only the log (NumPy and the doctor): it needs no TRL. Proven by a catalogue
of right spellings and wrong diagnoses (``tests/drills/catalogue/ch06c_clinic.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.doctor import CAUSES, rows_of, series
from grpo_lab.doctor.rules import THRESHOLDS
from grpo_lab.drills.harness import echo
from grpo_lab.numerics.validate import check_int, describe

__all__ = ["MYSTERIES", "Mystery", "check_diagnosis", "mystery_log", "normalise"]


@dataclass(frozen=True)
class Mystery:
    """A staged failure (a name of ``grpo_lab.clinic.STAGES``), its seed, the cause id that
    names it, and ``why``: how the other causes its log shows follow from it."""
    stage: str
    seed: int
    cause: str
    why: str


#: The chapter's four mysteries (reading this spoils them).
MYSTERIES = {
    1: Mystery("zero_std", 11, "zero-std", "sampling at a temperature near 0 gives every "
               "completion of a group the same text, so the same reward"),
    2: Mystery("truncation", 23, "truncation", "a completion cut before its </answer> scores 0, "
               "so whole groups score 0 together: the all-equal groups follow from the "
               "truncation (raise max_completion_length, and they go)"),
    3: Mystery("nan", 37, "nan", "one infinite reward makes the group's mean and std "
               "infinite, and every advantage of that group NaN"),
    4: Mystery("reward_hacking", 41, "reward-hacking", "the policy is paid by a proxy (a big "
               "number in <answer>), so it writes big numbers and drifts from the format; the "
               "longer, odd completions it writes are cut at the limit more often: truncation "
               "follows from the hacking"),
}

#: Other ways to write a cause id (after :func:`normalise`).
SYNONYMS = {"all-equal-groups": "zero-std", "zero-advantage": "zero-std",
            "zero-variance": "zero-std", "truncated": "truncation",
            "max-completion-length": "truncation", "kl-blow-up": "kl-blowup",
            "kl-explosion": "kl-blowup", "learning-rate-too-high": "lr-too-high",
            "flat-reward": "reward-flat", "length-blow-up": "length-blowup",
            "length-explosion": "length-blowup", "reward-hack": "reward-hacking",
            "inf": "nan", "infinity": "nan", "nan-reward": "nan", "inf-reward": "nan"}
_IDS = tuple(CAUSES) + ("healthy",)


def normalise(answer: str) -> str:
    """A cause id from the way a reader writes it: case, spaces and underscores do not
    matter, ``'KL blow-up'`` is ``'kl-blowup'``; an unknown answer comes back as written."""
    key = "-".join(answer.strip().strip(".").lower().replace("_", " ").replace("-", " ").split())
    key = SYNONYMS.get(key, key)
    return key if key in _IDS else answer


def mystery_log(k: int) -> list:
    """Run mystery ``k`` in TRL's ``GRPOTrainer`` (a few seconds); its ``log_history``."""
    from grpo_lab import clinic

    m = MYSTERIES[check_int("k", k, minimum=1, maximum=len(MYSTERIES))]
    return clinic.stage(m.stage, seed=m.seed)


# --- what the log shows for each cause: the doctor's metric, its value, the doctor's line ------

def _mean(rows, key):
    x = series(rows, key)
    x = x[np.isfinite(x)]
    return float(np.mean(x)) if len(x) else float("nan")


def _third(rows, key, late):
    x = series(rows, key)
    x = x[np.isfinite(x)]
    if not len(x):
        return float("nan")
    n = max(1, len(x) // 3)
    return float(np.mean(x[-n:] if late else x[:n]))


def _shows(cause: str, rows) -> str:
    """What ``rows`` show of the metric ``cause`` reads, with the doctor's threshold."""
    t = THRESHOLDS
    if cause == "nan":
        bad = [k for k in ("loss", "grad_norm", "reward", "reward_std", "kl", "entropy")
               if (~np.isfinite(series(rows, k))).any()]
        return (f"{', '.join(bad)} hold NaN or Infinity" if bad else
                "loss, grad_norm, reward, kl and entropy are finite on every step")
    if cause == "truncation":
        return (f"completions/clipped_ratio averages {_mean(rows, 'completions/clipped_ratio'):.2f}"
                f" (the doctor's line: {t['truncation']})")
    if cause == "zero-std":
        return (f"frac_reward_zero_std averages {_mean(rows, 'frac_reward_zero_std'):.2f} "
                f"(the doctor's line: {t['zero_std']})")
    if cause == "entropy-collapse":
        return (f"entropy goes from {_third(rows, 'entropy', False):.3f} to "
                f"{_third(rows, 'entropy', True):.3f} nats per token (a collapse ends below "
                f"{t['entropy_collapse']} of its start)")
    if cause == "kl-blowup":
        kl = series(rows, "kl")
        kl = kl[np.isfinite(kl)]
        top = f"{kl.max():.3g}" if len(kl) else "not logged"
        return f"kl peaks at {top} nats per token (a blow-up passes {t['kl_blowup']})"
    if cause == "lr-too-high":
        h = series(rows, "entropy")
        h = h[np.isfinite(h)]
        jump = f"{h.max() / h[0]:.2f}" if len(h) and h[0] > 0 else "nan"
        return (f"the entropy peaks at {jump} times its start (too high a step throws it past "
                f"{t['lr_entropy']} times) and the reward ends at "
                f"{_third(rows, 'reward', True):.3f}")
    if cause == "reward-flat":
        return (f"reward goes from {_third(rows, 'reward', False):.3f} to "
                f"{_third(rows, 'reward', True):.3f} while reward_std is "
                f"{_mean(rows, 'reward_std'):.3f}")
    if cause in ("length-collapse", "length-blowup"):
        early = _third(rows, "completions/mean_length", False)
        late = _third(rows, "completions/mean_length", True)
        line = t["length_collapse"] if cause == "length-collapse" else t["length_blowup"]
        return (f"completions/mean_length goes from {early:.1f} to {late:.1f} tokens (ratio "
                f"{late / early:.2f}; the doctor's line: {line})")
    if cause == "reward-hacking":
        names = sorted({k[len("rewards/"):-len("/mean")] for r in rows for k in r
                        if k.startswith("rewards/") and k.endswith("/mean")})
        moves = [f"rewards/{n}/mean {_third(rows, f'rewards/{n}/mean', False):.2f} -> "
                 f"{_third(rows, f'rewards/{n}/mean', True):.2f}" for n in names]
        return ("; ".join(moves) if len(names) > 1 else
                f"the run logs {len(names)} reward function (rewards/<name>/mean): nothing to "
                f"rise while another falls")
    raise AssertionError(cause)                   # pragma: no cover  (every id is above)


def _flat(rows) -> bool:
    """The reward does not rise by the doctor's margin (whatever the groups' spread)."""
    gain = _third(rows, "reward", True) - _third(rows, "reward", False)
    return not gain > THRESHOLDS["reward_flat"] * max(_mean(rows, "reward_std"), 0.0)


def _evidence(cause, rows):
    """The doctor's own evidence line when its rule fires on ``rows``, else None."""
    return CAUSES[cause].rule(rows) if cause in CAUSES else None


def check_diagnosis(k, answer, log, *, verbose=True) -> bool:
    """Grade ``answer``, a cause id (``'zero-std'``, ``'truncation'``, ... or ``'healthy'``),
    for mystery ``k`` on its ``log`` (TRL's ``log_history``, from :func:`mystery_log`)."""
    m = MYSTERIES[check_int("k", k, minimum=1, maximum=len(MYSTERIES))]
    if not isinstance(log, list):
        raise TypeError(f"log: expected the mystery's log_history (a list of dicts), got "
                        f"{describe(log)}")
    if not isinstance(verbose, (bool, np.bool_)):
        raise TypeError(f"verbose: expected True or False, got {describe(verbose)}")
    rows = rows_of(log)

    def say(ok, message):
        if verbose:
            echo(("PASS: " if ok else "NOT YET: ") + message)
        return ok

    if not isinstance(answer, str):
        return say(False, f"answer with a cause id, a str such as 'zero-std' (one of "
                          f"{', '.join(_IDS)}), not {describe(answer)}")
    given = normalise(answer)
    found = _evidence(m.cause, rows) or _shows(m.cause, rows)
    if given == m.cause:
        return say(True, f"{m.cause}: {found}. The cause: {m.why}. "
                         f"Read: {CAUSES[m.cause].read}")
    if given not in _IDS:
        return say(False, f"{answer!r} is not one of the doctor's cause ids: answer with one of "
                          f"{', '.join(_IDS)}")
    if given == "healthy":
        return say(False, f"this run is not healthy: {_shows(m.cause, rows)}; a healthy run "
                          f"stays inside the dashboard guide's ranges")
    if _evidence(given, rows) is not None or (given == "reward-flat" and _flat(rows)):
        return say(False, f"{given}: the log shows it ({_shows(given, rows)}), but it is a "
                          f"symptom here, not the cause; look at what else moves: "
                          f"{_shows(m.cause, rows)}")
    return say(False, f"not {given}: {_shows(given, rows)} in this log; look at the other "
                      f"panels of the dashboard")
