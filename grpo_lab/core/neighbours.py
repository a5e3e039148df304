r"""GRPO's neighbouring methods, each one line away from GRPO: ``gl.neighbours``.

REINFORCE++, ReMax, RLOO, CISPO, SAPO and GSPO keep GRPO's loop (sample G completions, score
them, one policy-gradient step, no critic) and change one line of it: the advantage's std or
baseline, or the importance weight. This module gathers their functions in one place, and
:func:`table` places each against GRPO for a chapter to render: what changes, the one line
that changes, where grpo_lab has it, and which pinned release uses it (``file::function``).
``tests/reference/test_neighbours.py`` runs each against that release's real code.

====================================  ============================================  ===========
name                                  method                                        module
====================================  ============================================  ===========
``reinforce_pp_advantages``           REINFORCE++ (and with baseline)               advantages
``remax_advantages``                  ReMax                                         advantages
``group_advantages`` (leave_one_out)  RLOO, kept in :func:`grpo_lab.group_advantages`
``cispo_weight``, ``cispo_loss``      CISPO (MiniMax-M1)                            losses
``sapo_gate``, ``sapo_loss``          SAPO                                          losses
``sequence_ratio``                    GSPO, kept in :func:`grpo_lab.sequence_ratio`
====================================  ============================================  ===========

The plain faces (ten lines, the paper's notation) are ``gl.paper.neighbours``; the torch twins
are ``grpo_lab.torch.neighbours``.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.neighbour_advantages import (RPP_BASELINES, reinforce_pp_advantages,
                                                remax_advantages)
from grpo_lab.core.neighbour_losses import cispo_loss, cispo_weight, sapo_gate, sapo_loss
from grpo_lab.core.paper import neighbours as paper  # noqa: F401  (gl.paper.neighbours)
from grpo_lab.core.surrogate import sequence_ratio

__all__ = ["RPP_BASELINES", "NeighbourRow", "cispo_loss", "cispo_weight", "group_advantages",
           "reinforce_pp_advantages", "remax_advantages", "sapo_gate", "sapo_loss",
           "sequence_ratio", "table"]


@dataclass(frozen=True)
class NeighbourRow:
    """One method placed against GRPO.

    ``line`` is the line of its plain face (``gl.paper.<plain>``) that differs from GRPO's,
    ``grpo_line`` the GRPO line it replaces; ``grpo_lab`` the hardened call (a name on ``gl``,
    ``gl.neighbours`` or ``gl.paper``, with the options that select it); ``users`` triples of
    (release, ``file::Class.function``, the setting that selects the method there) in the
    pinned TRL 1.16.0 / verl 0.9.1 / OpenRLHF 0.11.2.
    """

    method: str
    paper: str
    arxiv: str
    changes: str
    grpo_line: str
    line: str
    plain: str
    grpo_lab: str
    users: tuple


_ADV = "(r - mean(r)) / (std(r) + eps)                 # the group's mean and std"
_LOSS = "-min(r * A, clip(r, 1 - eps, 1 + eps) * A)     # PPO's clip, token by token"
_VERL = "verl/trainer/ppo/core_algos.py"
_EST = "algorithm.adv_estimator"                     # verl's config keys
_MODE = "actor_rollout_ref.actor.policy_loss.loss_mode"
_TRL_LOSS = "trl/trainer/grpo_trainer.py::GRPOTrainer._compute_loss"
_ORL = ("openrlhf/trainer/ppo_utils/experience_maker.py::"
        "RemoteExperienceMaker.compute_advantages_and_returns")

_ROWS = (
    NeighbourRow(
        "REINFORCE++", "Hu et al. 2025, REINFORCE++", "2501.03262",
        "normalises by the whole batch's token-weighted mean and std, not the group's; "
        "without a group baseline one sample per prompt suffices; with beta > 0 the trainers "
        "put a per-token KL in the reward and whiten the reward-to-go, so the advantage varies "
        "along the completion (this row is the beta = 0 case)",
        _ADV, "return (A - A[m].mean()) / A[m].std(ddof=1) * m",
        "paper.neighbours.reinforce_pp_advantages",
        "neighbours.reinforce_pp_advantages(rewards, mask)",
        (("verl 0.9.1", f"{_VERL}::compute_reinforce_plus_plus_outcome_advantage",
          f"{_EST}=reinforce_plus_plus"),
         ("verl 0.9.1", f"{_VERL}::compute_reinforce_plus_plus_baseline_outcome_advantage",
          f"{_EST}=reinforce_plus_plus_baseline"),
         ("openrlhf 0.11.2", _ORL, "algo.advantage.estimator=reinforce"))),
    NeighbourRow(
        "ReMax", "Li et al. 2023, ReMax", "2310.10505",
        "the baseline is the reward of the prompt's greedy completion (one more generation, "
        "no std)",
        _ADV, "return r - r_greedy[:, None]",
        "paper.neighbours.remax_advantages",
        "neighbours.remax_advantages(rewards, greedy_rewards)",
        (("verl 0.9.1", f"{_VERL}::compute_remax_outcome_advantage", f"{_EST}=remax"),)),
    NeighbourRow(
        "RLOO", "Ahmadian et al. 2024, Back to Basics", "2402.14740",
        "the baseline is the mean of the other G - 1 rewards; no std",
        _ADV, "return r - (r.sum(axis=-1, keepdims=True) - r) / (G - 1)",
        "paper.neighbours.rloo_advantages",
        "group_advantages(rewards, baseline='leave_one_out', scale='none')",
        (("verl 0.9.1", f"{_VERL}::compute_rloo_outcome_advantage", f"{_EST}=rloo"),
         ("trl 1.16.0", "trl/trainer/rloo_trainer.py::RLOOTrainer._generate_and_score_completions",
          "RLOOTrainer"),
         ("openrlhf 0.11.2", _ORL, "algo.advantage.estimator=rloo"))),
    NeighbourRow(
        "CISPO", "MiniMax 2025, MiniMax-M1", "2506.13585",
        "clips the importance weight and stops its gradient; the gradient flows through "
        "log pi, so no token's gradient is dropped",
        _LOSS, "return -np.minimum(r, 1 + eps_high) * A * logp",
        "paper.neighbours.cispo_loss",
        "neighbours.cispo_loss(logp, old_logp, adv)",
        (("trl 1.16.0", _TRL_LOSS, "loss_type=cispo, epsilon_high=5.0"),   # the cap itself
         ("verl 0.9.1", f"{_VERL}::compute_policy_loss_cispo", f"{_MODE}=cispo"))),
    NeighbourRow(
        "SAPO", "Gao et al. 2025, Soft Adaptive Policy Optimization", "2511.20347",
        "a sigmoid gate of temperature tau replaces the hard clip: gradients fade as r leaves 1",
        _LOSS, "gate = 4 / tau / (1 + np.exp(-tau * (r - 1)))",
        "paper.neighbours.sapo_loss",
        "neighbours.sapo_loss(logp, old_logp, adv)",
        (("trl 1.16.0", _TRL_LOSS, "loss_type=sapo"),
         ("verl 0.9.1", f"{_VERL}::compute_policy_loss_sapo", f"{_MODE}=sapo"))),
    NeighbourRow(
        "GSPO", "Zheng et al. 2025, Group Sequence Policy Optimization", "2507.18071",
        "one ratio per sequence, the geometric mean of its token ratios, clipped once; "
        "every token of a sequence gets the same weight",
        _LOSS, "return np.exp(((logp - old_logp) * mask).sum(axis=-1) / mask.sum(axis=-1))",
        "paper.sequence_ratio",
        "grpo_loss(..., level='sequence')",
        (("trl 1.16.0", _TRL_LOSS, "importance_sampling_level=sequence, loss_type=grpo, "
                                   "epsilon=3e-4, epsilon_high=4e-4, num_iterations=2"),
         ("verl 0.9.1", f"{_VERL}::compute_policy_loss_gspo", f"{_MODE}=gspo"))),
)


def table() -> tuple:
    """The neighbouring methods against GRPO, one :class:`NeighbourRow` each.

    >>> import grpo_lab as gl
    >>> [(row.method, row.arxiv) for row in gl.neighbours.table()][:2]
    [('REINFORCE++', '2501.03262'), ('ReMax', '2310.10505')]
    """
    return _ROWS
