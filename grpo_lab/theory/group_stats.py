"""How noisy a group's statistics are: simulated reward groups and their mean and std.

Taught in chapter 1, section "Why G matters". The sliders of ``gl.book.ch01`` draw from here.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import check_choice, check_int, check_real

__all__ = ["REWARD_KINDS", "check_group_sampling_arguments", "group_noise", "sample_rewards",
           "true_reward_std", "zero_spread_probability"]

REWARD_KINDS = ("pass/fail", "continuous")


def check_group_sampling_arguments(G, kind, pass_rate, spread, *, n_groups=1, ddof=0):
    """``(n_groups, G, kind, pass_rate, spread, ddof)``, checked: ``n_groups`` groups of
    ``G >= 2`` rewards of ``kind``, a probability ``pass_rate``, a ``spread > 0`` and a ``ddof``
    that leaves ``G - ddof > 0``."""
    n_groups = check_int("n_groups", n_groups, minimum=1)
    G = check_int("G", G, minimum=2, why=" (a group needs two completions)")
    kind = check_choice("kind", kind, REWARD_KINDS)
    pass_rate = check_real("pass_rate", pass_rate, minimum=0.0)
    if pass_rate > 1.0:
        raise ValueError(f"pass_rate: expected a probability in [0, 1], got {pass_rate}")
    spread = check_real("spread", spread, minimum=0.0, allow_equal=False)
    ddof = check_int("ddof", ddof, minimum=0, maximum=G - 1, why=" so that G - ddof > 0")
    return n_groups, G, kind, pass_rate, spread, ddof


def sample_rewards(n_groups, G, *, kind="pass/fail", pass_rate=0.5, spread=1.0, seed=0):
    """Draw ``n_groups`` groups of ``G`` rewards, shape (n_groups, G).

    ``kind="pass/fail"``: each completion is right with probability ``pass_rate`` and earns
    ``spread`` (wrong earns 0), as with a rule-based verifier. ``kind="continuous"``: rewards
    are Normal(0, spread), as from a reward model.

    >>> sample_rewards(2, 4, pass_rate=0.5, seed=0)
    array([[0., 1., 1., 1.],
           [0., 0., 0., 0.]])
    """
    n_groups, G, kind, pass_rate, spread, _ = check_group_sampling_arguments(
        G, kind, pass_rate, spread, n_groups=n_groups)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    if kind == "pass/fail":
        return spread * (rng.random((n_groups, G)) < pass_rate).astype(np.float64)
    return rng.normal(0.0, spread, size=(n_groups, G))


def true_reward_std(*, kind="pass/fail", pass_rate=0.5, spread=1.0):
    """The population std of one reward: ``spread*sqrt(p(1-p))`` for pass/fail, else ``spread``."""
    _, _, kind, pass_rate, spread, _ = check_group_sampling_arguments(2, kind, pass_rate, spread)
    if kind == "pass/fail":
        return spread * float(np.sqrt(pass_rate * (1.0 - pass_rate)))
    return spread


def zero_spread_probability(G, pass_rate):
    r"""Chance that a pass/fail group is all right or all wrong: :math:`p^G + (1-p)^G`.

    Such a group has zero advantages and so gives no gradient at all.

    >>> round(zero_spread_probability(8, 0.9), 4)
    0.4305
    """
    _, G, _, pass_rate, _, _ = check_group_sampling_arguments(G, "pass/fail", pass_rate, 1.0)
    return pass_rate**G + (1.0 - pass_rate) ** G


def group_noise(G, *, kind="pass/fail", pass_rate=0.5, spread=1.0, ddof=0,
                n_groups=20_000, seed=0):
    """Monte Carlo summary of how well one group of ``G`` estimates the mean and the std.

    Returns a dict with ``mean_sd`` (spread of the group mean across groups),
    ``std_bias`` and ``std_sd`` (mean and spread of the group std, both relative to the true
    std), and ``zero_spread`` (share of groups whose rewards are all equal).
    """
    n_groups, G, kind, pass_rate, spread, ddof = check_group_sampling_arguments(
        G, kind, pass_rate, spread, n_groups=n_groups, ddof=ddof)
    seed = check_int("seed", seed, minimum=0)
    r = sample_rewards(n_groups, G, kind=kind, pass_rate=pass_rate, spread=spread, seed=seed)
    sigma = true_reward_std(kind=kind, pass_rate=pass_rate, spread=spread)
    std = r.std(axis=1, ddof=ddof)                      # (n_groups,)
    rel = std / sigma if sigma > 0 else np.zeros_like(std)
    return {
        "mean_sd": float(r.mean(axis=1).std()),
        "std_bias": float(rel.mean() - 1.0) if sigma > 0 else 0.0,
        "std_sd": float(rel.std()),
        "zero_spread": float(np.mean(np.ptp(r, axis=1) == 0)),
    }
