"""The doctor's rules: each a small function of TRL's logged series that returns the evidence
(one line of text) when its cause shows in the log, else ``None``.

Taught in chapter 6c, "The doctor" (``chapters/06c_clinic.ipynb``). Every threshold below is
set between the values the clinic's staged runs log (:mod:`grpo_lab.clinic`: TRL 1.16.0's
``GRPOTrainer`` on the book's in-code model, seeded, 2 CPU cores), with room on both sides:
each constant's comment gives the sick run's value and the healthy runs' value it separates.
The series are compared over the run's first and last thirds (``_early``, ``_late``), so one
noisy step decides nothing.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.doctor.log import series

__all__ = ["THRESHOLDS", "entropy_collapse", "kl_blowup", "length_blowup", "length_collapse",
           "lr_too_high", "nan", "reward_flat", "reward_hacking", "truncation", "zero_std"]

#: Each threshold, with the clinic's values it separates (filled from the staged runs: see
#: the docstring of each rule and chapter 6c's dashboard guide).
THRESHOLDS = {
    # mean completions/clipped_ratio at or above. Clinic: truncation 0.92, healthy 0.10.
    "truncation": 0.5,
    # mean frac_reward_zero_std at or above. Clinic: zero_std 1.0, truncation 0.96,
    # healthy 0.0.
    "zero_std": 0.75,
    # late entropy / early entropy at or below. Clinic: healthy 0.80; no staged run collapses
    # within 12 steps on this model (a step large enough throws it to high entropy first).
    "entropy_collapse": 0.25,
    # largest kl (nats per token, k3) at or above. Clinic: kl_blowup 4.0, lr_too_high 11.7,
    # length_collapse 4.1; healthy 0.41, nan's healed 0.76, reward_hacking 1.07, length 1.4.
    "kl_blowup": 2.0,
    # peak entropy / first entropy at or above, with the reward ending below its start.
    # Clinic: lr_too_high 3.0, kl_blowup 3.0; healthy 1.43, length runs 1.8 and 1.9 (their
    # reward rises).
    "lr_entropy": 2.0,
    # late - early reward at or below this times the mean reward_std. Clinic: reward_flat
    # (weights that do not move) about 0; healthy +0.07 with reward_std 0.27 (0.26 of it).
    "reward_flat": 0.05,
    # reward-flat needs at least this many rows with a reward (a third of them is 2 rows).
    "flat_min_rows": 6,
    # late / early mean length at or below. Clinic: length_collapse 0.45; kl_blowup 0.64,
    # healthy 0.98.
    "length_collapse": 0.55,
    # late / early mean length at or above. Clinic: length_blowup 1.75; healthy 0.98,
    # reward_hacking 1.0.
    "length_blowup": 1.4,
    # one reward's rise and another's fall, each at least this times its own mean logged std.
    # Clinic: reward_hacking +0.84 and -0.39; healthy: no reward falls by as much.
    "hack": 0.25,
}
_NON_FINITE_KEYS = ("loss", "grad_norm", "reward", "reward_std", "kl", "entropy")


def _finite(x: np.ndarray) -> np.ndarray:
    return x[np.isfinite(x)]


def _early(x: np.ndarray) -> float:
    """Mean of the first third of the finite values (at least one value); NaN when none."""
    x = _finite(x)
    return float(np.mean(x[:max(1, len(x) // 3)])) if len(x) else float("nan")


def _late(x: np.ndarray) -> float:
    """Mean of the last third of the finite values (at least one value); NaN when none."""
    x = _finite(x)
    return float(np.mean(x[-max(1, len(x) // 3):])) if len(x) else float("nan")


def _steps(rows, key):
    return [row.get("step", i) for i, row in enumerate(rows) if key in row]


def nan(rows) -> str | None:
    """NaN, Infinity or null in the loss, the gradient norm, a reward, the KL or the entropy."""
    keys = list(_NON_FINITE_KEYS) + sorted({k for r in rows for k in r
                                            if k.startswith("rewards/") and k.endswith("/mean")})
    found = []
    for key in keys:
        x = series(rows, key)
        bad = ~np.isfinite(x)
        if bad.any():
            first = _steps(rows, key)[int(np.argmax(bad))]
            found.append(f"{key} is {x[bad][0]} from step {first} ({int(bad.sum())} of "
                         f"{len(x)} rows)")
    return "; ".join(found[:3]) if found else None


def truncation(rows) -> str | None:
    """Most completions hit ``max_completion_length``: no EOS, often no answer, reward 0."""
    clipped = _finite(series(rows, "completions/clipped_ratio"))
    if len(clipped) and np.mean(clipped) >= THRESHOLDS["truncation"]:
        length = _finite(series(rows, "completions/mean_length"))
        at = f", mean length {np.mean(length):.1f} tokens" if len(length) else ""
        return (f"completions/clipped_ratio is {np.mean(clipped):.2f} on average: most "
                f"completions end without EOS{at}")
    return None


def zero_std(rows) -> str | None:
    """Most groups have all-equal rewards: their advantages are 0, the step learns nothing."""
    frac = _finite(series(rows, "frac_reward_zero_std"))
    if len(frac) and np.mean(frac) >= THRESHOLDS["zero_std"]:
        return (f"frac_reward_zero_std is {np.mean(frac):.2f} on average: in most groups "
                f"every completion got the same reward")
    return None


def entropy_collapse(rows) -> str | None:
    """The policy's entropy falls to a small part of its start: sampling stops exploring."""
    h = series(rows, "entropy")
    early, late = _early(h), _late(h)
    if early > 0 and late / early <= THRESHOLDS["entropy_collapse"]:
        return f"entropy falls from {early:.3f} to {late:.3f} nats per token"
    return None


def kl_blowup(rows) -> str | None:
    """The KL to the reference grows past what a small step allows: the policy ran away."""
    kl = _finite(series(rows, "kl"))
    if len(kl) and kl.max() >= THRESHOLDS["kl_blowup"]:
        return (f"kl reaches {kl.max():.3g} nats per token (from {kl[0]:.3g}), "
                f"above {THRESHOLDS['kl_blowup']}")
    return None


def lr_too_high(rows) -> str | None:
    """One step throws the policy towards uniform (the entropy at least doubles its start)
    and the reward ends below where it began: each update moved the weights too far."""
    h = _finite(series(rows, "entropy"))
    r = _finite(series(rows, "reward"))
    if len(h) < 2 or len(r) < 2 or h[0] <= 0:
        return None
    jump = h.max() / h[0]
    if jump >= THRESHOLDS["lr_entropy"] and _late(r) < r[0]:
        return (f"entropy jumps from {h[0]:.2f} to {h.max():.2f} nats at step "
                f"{_steps(rows, 'entropy')[int(np.argmax(series(rows, 'entropy') == h.max()))]}"
                f" and the reward ends at {_late(r):.3f}, below its start {r[0]:.3f}")
    return None


def reward_flat(rows) -> str | None:
    """The reward does not rise although the groups disagree (the gradient has a signal)."""
    r = _finite(series(rows, "reward"))
    spread = _finite(series(rows, "reward_std"))
    if len(r) < THRESHOLDS["flat_min_rows"] or not len(spread) or np.mean(spread) <= 0:
        return None
    if zero_std(rows) is not None:          # the groups agree: zero-std is the cause, not this
        return None
    gain = _late(r) - _early(r)
    if gain <= THRESHOLDS["reward_flat"] * np.mean(spread):
        return (f"reward goes from {_early(r):.3f} to {_late(r):.3f} over {len(r)} steps "
                f"while reward_std is {np.mean(spread):.3f}")
    return None


def length_collapse(rows) -> str | None:
    """The completions shrink to a small part of their starting length."""
    n = series(rows, "completions/mean_length")
    early, late = _early(n), _late(n)
    if early > 0 and late / early <= THRESHOLDS["length_collapse"]:
        return f"completions/mean_length falls from {early:.1f} to {late:.1f} tokens"
    return None


def length_blowup(rows) -> str | None:
    """The completions grow to several times their starting length (towards the maximum)."""
    n = series(rows, "completions/mean_length")
    early, late = _early(n), _late(n)
    if early > 0 and late / early >= THRESHOLDS["length_blowup"]:
        clipped = _finite(series(rows, "completions/clipped_ratio"))
        end = f", clipped_ratio ends at {_late(clipped):.2f}" if len(clipped) else ""
        return f"completions/mean_length grows from {early:.1f} to {late:.1f} tokens{end}"
    return None


def reward_hacking(rows) -> str | None:
    """One logged reward rises while another falls: the policy found a way to score that the
    task does not reward (needs two reward functions, each logged as ``rewards/<name>/mean``)."""
    names = sorted({k[len("rewards/"):-len("/mean")] for r in rows for k in r
                    if k.startswith("rewards/") and k.endswith("/mean")})
    moves = {}
    for name in names:
        mean = series(rows, f"rewards/{name}/mean")
        std = _finite(series(rows, f"rewards/{name}/std"))
        scale = float(np.mean(std)) if len(std) and np.mean(std) > 0 else float("nan")
        moves[name] = ((_late(mean) - _early(mean)) / scale, _early(mean), _late(mean))
    up = [n for n, (m, *_) in moves.items() if m >= THRESHOLDS["hack"]]
    down = [n for n, (m, *_) in moves.items() if m <= -THRESHOLDS["hack"]]
    if up and down:
        u, d = max(up, key=lambda n: moves[n][0]), min(down, key=lambda n: moves[n][0])
        return (f"rewards/{u}/mean rises {moves[u][1]:.2f} -> {moves[u][2]:.2f} while "
                f"rewards/{d}/mean falls {moves[d][1]:.2f} -> {moves[d][2]:.2f}")
    return None
