"""What PPO and GRPO hold in memory during training, model by model, worked out in bytes.

Taught in chapter 2 (``chapters/02_ppo_to_grpo.ipynb``): the critic GRPO drops is a second
trainable model, with its own gradients and optimizer states.

The accounting is the usual one for mixed-precision Adam (Rajbhandari et al. 2020, ZeRO,
section 3.1): a trainable model holds bf16 weights (2 bytes a parameter), bf16 gradients (2),
and, in fp32, a master copy of the weights (4) and Adam's two moments (4 + 4): 16 bytes a
parameter. A frozen model (the reference policy, a reward model) holds only its bf16 weights:
2 bytes a parameter. Activations, the KV cache of generation and framework overhead come on
top and depend on batch and sequence length; they are left out.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.validate import check_choice, check_int, describe

__all__ = ["BYTES_PER_PARAM", "ROLES", "check_training_memory_arguments", "training_memory"]

#: Bytes per parameter of each kind of state, for bf16 mixed-precision Adam.
BYTES_PER_PARAM = {
    "weights": 2,           # bf16 weights, used in the forward and backward pass
    "gradients": 2,         # bf16 gradients
    "master_weights": 4,    # fp32 copy that the optimizer updates
    "optimizer": 8,         # fp32 Adam first and second moments
}

#: The models each method holds: (role, trainable).
ROLES = {
    "ppo": (("policy", True), ("critic", True), ("reference", False), ("reward_model", False)),
    "grpo": (("policy", True), ("reference", False), ("reward_model", False)),
}


def check_training_memory_arguments(method, n_params, reward_model, reference):
    """``(method, n_params, reward_model, reference)`` for :func:`training_memory`."""
    method = check_choice("method", method, tuple(ROLES))
    n_params = check_int("n_params", n_params, minimum=1)
    for name, flag in (("reward_model", reward_model), ("reference", reference)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name}: expected True or False, got {describe(flag)}")
    return method, n_params, bool(reward_model), bool(reference)


def training_memory(method, n_params, *, reward_model=True, reference=True):
    """Bytes each model of ``method`` holds, for models of ``n_params`` parameters each.

    ============  ======  =======================================================
    Argument      Type    Meaning
    ============  ======  =======================================================
    method        str     ``"ppo"`` or ``"grpo"``
    n_params      int     parameters of each model (the critic and the reward
                          model are usually the policy's size, or close to it)
    reward_model  bool    False for rule-based rewards (a math checker, a unit
                          test): no reward model in memory
    reference     bool    False when the KL weight beta is 0 (DAPO, Dr. GRPO):
                          no reference model is needed
    return        dict    ``{role: {state: bytes}}``, e.g.
                          ``{"policy": {"weights": ..., "optimizer": ...}, ...}``
    ============  ======  =======================================================

    >>> import grpo_lab as gl
    >>> mem = gl.training_memory("ppo", 7_000_000_000)
    >>> {role: sum(states.values()) / 1e9 for role, states in mem.items()}   # GB
    {'policy': 112.0, 'critic': 112.0, 'reference': 14.0, 'reward_model': 14.0}
    >>> sum(sum(s.values()) for s in gl.training_memory("grpo", 7_000_000_000).values()) / 1e9
    140.0
    """
    method, n_params, reward_model, reference = check_training_memory_arguments(
        method, n_params, reward_model, reference)
    out = {}
    for role, trainable in ROLES[method]:
        if (role == "reward_model" and not reward_model) or (role == "reference" and not reference):
            continue
        kinds = BYTES_PER_PARAM if trainable else {"weights": BYTES_PER_PARAM["weights"]}
        out[role] = {kind: b * n_params for kind, b in kinds.items()}
    return out
