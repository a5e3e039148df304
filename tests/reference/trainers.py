"""The three trainers' GRPO computations, run from their real code (see ``wheels``).

Each function takes torch tensors and the trainer's own settings and returns what the trainer
computes; nothing here re-implements a formula. Where the code is a module-level function it is
called; where it is inline in a method, the exact lines are cut out between two anchors and run
with the few attributes of ``self`` that they read.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import torch

from tests.reference import wheels

TRL_TRAINER = "trl/trainer/grpo_trainer.py"
VERL_CORE = "verl/trainer/ppo/core_algos.py"
ORL_MAKER = "openrlhf/trainer/ppo_utils/experience_maker.py"


# --- TRL 1.16.0 ------------------------------------------------------------------------------------

@functools.cache
def trl_code():
    """TRL's ``nanstd`` and the two inline blocks of ``GRPOTrainer``, compiled."""
    nanstd = wheels.run(wheels.function("trl", "trl/trainer/utils.py", "nanstd"),
                        {"torch": torch})["nanstd"]
    adv = wheels.block("trl", TRL_TRAINER,
                       'if self.multi_objective_aggregation == "sum_then_normalize":',
                       "# Slice to keep only the local part of the data")
    loss = wheels.block("trl", TRL_TRAINER, "log_ratio = per_token_logps - old_per_token_logps",
                        "# Entropy bonus: add entropy regularization")
    return nanstd, adv, loss


def trl_advantages(rewards_per_func, G, *, scale_rewards="group",
                   aggregation="sum_then_normalize", weights=None):
    """``GRPOTrainer._generate_and_score_completions``' advantage block: (N, K) -> (N,)."""
    nanstd, code, _ = trl_code()
    K = rewards_per_func.shape[1]
    self = SimpleNamespace(multi_objective_aggregation=aggregation, scale_rewards=scale_rewards,
                           reward_funcs=[None] * K,
                           reward_weights=torch.ones(K, dtype=rewards_per_func.dtype)
                           if weights is None else weights)
    ns = wheels.run(code, {"torch": torch, "nanstd": nanstd, "self": self, "device": "cpu",
                           "rewards_per_func": rewards_per_func, "num_generations": G,
                           "unscorable_mask": torch.isnan(rewards_per_func).all(dim=1)})
    return ns["advantages"]


def trl_loss(logp, old_logp, ref_logp, adv, mask, *, beta=0.0, loss_type="dapo",
             epsilon=0.2, epsilon_high=None, delta=None, importance_sampling_level="token",
             use_bias_correction_kl=True, max_completion_length=512):
    """``GRPOTrainer._compute_loss`` from the log-ratio to the loss: ``(loss, per_token_loss)``.

    One process, no gradient accumulation, training mode, no vLLM and no entropy masks: the
    defaults of a single-GPU run. ``adv`` is (N,), as the trainer stores it.
    """
    _, _, code = trl_code()
    args = SimpleNamespace(use_bias_correction_kl=use_bias_correction_kl, delta=delta,
                           steps_per_generation=1)
    self = SimpleNamespace(
        importance_sampling_level=importance_sampling_level, beta=beta, loss_type=loss_type,
        epsilon_low=epsilon, epsilon_high=epsilon if epsilon_high is None else epsilon_high,
        args=args, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, accelerator=SimpleNamespace(num_processes=1),
        max_completion_length=max_completion_length)
    m = mask.to(logp.dtype)
    inputs = {"ref_per_token_logps": ref_logp, "num_items_in_batch": m.sum()}
    ns = wheels.run(code, {"torch": torch, "self": self, "inputs": inputs, "mask": m,
                           "per_token_logps": logp, "old_per_token_logps": old_logp,
                           "advantages": adv.unsqueeze(1), "entropy_mask": None})
    trl_loss.last_ratio = ns["coef_1"]            # the importance weights it used, (N, T|1)
    return ns["loss"], ns["per_token_loss"]


# --- verl 0.9.1 -------------------------------------------------------------------------------------

class _Config(dict):
    """verl's ActorConfig as the policy losses read it: attributes, ``.get``, global batch info."""

    __getattr__ = dict.__getitem__


@functools.cache
def verl_core():
    """``verl/trainer/ppo/core_algos.py`` with stand-ins for its config and utility imports."""
    tf = wheels.run(wheels.function("verl", "verl/utils/torch_functional.py", "masked_sum")
                    + wheels.function("verl", "verl/utils/torch_functional.py", "masked_mean"),
                    {"torch": torch})
    verl_F = wheels.stub("verl.utils.torch_functional", masked_sum=tf["masked_sum"],
                         masked_mean=tf["masked_mean"])
    utils = wheels.stub("verl.utils", as_torch_index=None, group_mean_std=None,
                        torch_functional=verl_F)
    config = wheels.stub("verl.trainer.config", AlgoConfig=type("AlgoConfig", (), {}))
    workers = wheels.stub("verl.workers.config", ActorConfig=_Config)
    modules = {
        "omegaconf": wheels.stub("omegaconf", DictConfig=dict),
        "verl": wheels.stub("verl", utils=utils),
        "verl.utils": utils, "verl.utils.torch_functional": verl_F,
        "verl.utils.import_utils": wheels.stub("verl.utils.import_utils",
                                               deprecated=lambda *a, **k: (lambda f: f)),
        "verl.trainer": wheels.stub("verl.trainer", config=config),
        "verl.trainer.config": config,
        "verl.workers": wheels.stub("verl.workers", config=workers),
        "verl.workers.config": workers,
    }
    return wheels.load("verl", VERL_CORE, "_reference_verl_core_algos", modules)


def verl_actor_config(**overrides):
    """The actor settings the losses read, at verl 0.9.1's defaults unless overridden."""
    return _Config({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
                    "clip_ratio_c": 3.0, "global_batch_info": {}, **overrides})


def verl_advantages(rewards, mask, *, estimator="grpo", norm_adv_by_std_in_grpo=True):
    """verl's outcome advantages for rewards (B, G): (B*G,) (the rows' first token)."""
    core = verl_core()
    B, G = rewards.shape
    scores = torch.zeros(mask.shape, dtype=rewards.dtype)
    last = mask.sum(-1) - 1                                       # the reward sits on the EOS
    scores[torch.arange(B * G), last] = rewards.reshape(-1)
    index = np.repeat(np.arange(B), G)
    if estimator == "grpo":
        adv, _ = core.compute_grpo_outcome_advantage(
            scores, mask.to(rewards.dtype), index, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    else:
        adv, _ = core.compute_rloo_outcome_advantage(scores, mask.to(rewards.dtype), index)
    return adv[:, 0]


@functools.cache
def verl_apply_kl_penalty():
    """``apply_kl_penalty`` of ``verl/trainer/ppo/ray_trainer.py`` (its module is not loaded)."""
    core = verl_core()
    code = wheels.function("verl", "verl/trainer/ppo/ray_trainer.py", "apply_kl_penalty")
    ns = wheels.run(code, {"torch": torch, "core_algos": core, "DataProto": object,
                           "masked_mean": core.verl_F.masked_mean})
    return ns["apply_kl_penalty"]


def verl_kl_in_reward(rewards, old_logp, ref_logp, mask, *, kl_coef=0.001, kl_penalty="kl"):
    """verl's ``use_kl_in_reward``: token rewards minus beta * KL, then GRPO's advantages."""
    core = verl_core()
    B, G = rewards.shape
    scores = torch.zeros(mask.shape, dtype=rewards.dtype)
    scores[torch.arange(B * G), mask.sum(-1) - 1] = rewards.reshape(-1)

    class Batch(dict):
        batch_size = (B * G,)

    data = SimpleNamespace(batch=Batch(response_mask=mask.to(rewards.dtype),
                                       token_level_scores=scores, old_log_probs=old_logp,
                                       ref_log_prob=ref_logp))
    data, _ = verl_apply_kl_penalty()(data, core.FixedKLController(kl_coef), kl_penalty)
    adv, _ = core.compute_grpo_outcome_advantage(
        data.batch["token_level_rewards"], mask.to(rewards.dtype), np.repeat(np.arange(B), G))
    return data.batch["token_level_rewards"].sum(-1), adv[:, 0]


# --- OpenRLHF 0.11.2 --------------------------------------------------------------------------------

@functools.cache
def openrlhf_modules():
    """``openrlhf/models/utils.py`` and ``loss.py`` (deepspeed stood in for), and the inline
    baseline block and reward-to-go of ``experience_maker.py``."""
    root = wheels.package_root("openrlhf") / "openrlhf"
    pkg = {"openrlhf": wheels.package_stub("openrlhf", root),
           "openrlhf.models": wheels.package_stub("openrlhf.models", root / "models"),
           "deepspeed": wheels.stub("deepspeed")}
    utils = wheels.load("openrlhf", "openrlhf/models/utils.py", "openrlhf.models.utils", pkg)
    loss = wheels.load("openrlhf", "openrlhf/models/loss.py", "openrlhf.models.loss",
                       {**pkg, "openrlhf.models.utils": utils})
    baseline = wheels.block("openrlhf", ORL_MAKER,
                            'if args.algo.advantage.estimator == "rloo":',
                            'elif args.algo.advantage.estimator == "flash_reinforce":')
    returns = wheels.run(wheels.function("openrlhf", ORL_MAKER,
                                         "RemoteExperienceMaker.get_cumulative_returns"),
                         {"torch": torch})["get_cumulative_returns"]
    return utils, loss, baseline, returns


def openrlhf_baseline(rewards, estimator="group_norm"):
    """The group baseline of ``compute_advantages_and_returns``: rewards (B, G) -> (B, G)."""
    _, _, code, _ = openrlhf_modules()
    args = SimpleNamespace(algo=SimpleNamespace(advantage=SimpleNamespace(estimator=estimator)),
                           rollout=SimpleNamespace(n_samples_per_prompt=rewards.shape[1]))
    return wheels.run(code, {"torch": torch, "args": args, "rewards": rewards})["rewards"]


def openrlhf_advantages(rewards, old_logp, ref_logp, mask, *, init_coef=0.01, estimator="k1",
                        reward_clip_range=(-10, 10)):
    """Per-token advantages of ``group_norm``: baseline, then KL in the reward, reward-to-go."""
    utils, _, _, returns = openrlhf_modules()
    r = openrlhf_baseline(rewards).reshape(-1)                       # (N,)
    kl = utils.compute_approx_kl(old_logp, ref_logp, kl_estimator=estimator)
    reward = utils.compute_reward(r, init_coef, kl, action_mask=mask,
                                  reward_clip_range=reward_clip_range)
    return returns(None, reward, mask, 1.0)


def openrlhf_policy_loss(logp, old_logp, adv, mask, **kwargs):
    """``PolicyLoss(**kwargs)(...)``'s loss; kwargs of the constructor and of ``forward``."""
    _, loss, _, _ = openrlhf_modules()
    forward = {k: kwargs.pop(k) for k in ("dp_size", "batch_num_tokens", "global_batch_size")
               if k in kwargs}
    return loss.PolicyLoss(**kwargs)(logp, old_logp, adv, action_mask=mask, **forward)[0]
