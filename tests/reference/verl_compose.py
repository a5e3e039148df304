"""Run in a child process by ``tests/reference/verl_config.py``: compose verl 0.9.1's trainer
config with Hydra overrides, exactly as ``python3 -m verl.trainer.main_ppo`` does, and pass it
through verl's own ``validate_config``.

argv: VERL_ROOT (the unpacked wheel, holding ``verl/``), then the overrides. Prints one JSON
object: ``{"ok": true, "config": {...}}`` with the values the tests read, or
``{"ok": false, "error": "..."}`` with verl's own message.

The child's ``sys.path`` starts with the pinned Hydra, OmegaConf and antlr4 4.9.3 of
``verl_config.config_env`` (Hydra's grammar needs antlr 4.9, math-verify's the project's
4.13: they cannot share one environment). ``verl/__init__.py`` and
``verl/utils/profiler/__init__.py`` are not executed: the first imports Ray and the data
protocol, the second the profilers and Ray's single controller, none of which a config check
reaches. Every other module, the config dataclasses and their ``__post_init__`` / ``validate``
included, is verl's own file.
"""

import importlib
import json
import sys
import types
import warnings


def _bare_package(name, root):
    module = types.ModuleType(name)
    module.__path__ = [f"{root}/{name.replace('.', '/')}"]
    sys.modules[name] = module
    return module


def main(root, overrides):
    _bare_package("verl", root)
    profiler = _bare_package("verl.utils.profiler", root)
    profiler.ProfilerConfig = importlib.import_module("verl.utils.profiler.config").ProfilerConfig

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from verl.utils.config import validate_config

    # need_reference_policy / need_critic, as main_ppo calls them (main_ppo.py:177-181): their
    # module imports Ray's single controller, so the two functions are executed from its file
    # with the one name they read from elsewhere (GAE, a str enum member, compares as "gae").
    from tests.reference import wheels
    ns = {"DictConfig": OmegaConf, "warnings": warnings,
          "AdvantageEstimator": types.SimpleNamespace(GAE="gae")}
    for name in ("need_reference_policy", "need_critic"):
        wheels.run(wheels.function("verl", "verl/trainer/ppo/utils.py", name), ns)
    need_reference_policy, need_critic = ns["need_reference_policy"], ns["need_critic"]

    with initialize_config_dir(config_dir=f"{root}/verl/trainer/config", version_base=None):
        config = compose("ppo_trainer", overrides=list(overrides))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # need_critic warns that GRPO has no critic
        use_ref, use_critic = need_reference_policy(config), need_critic(config)
    try:
        validate_config(config, use_reference_policy=use_ref, use_critic=use_critic)
    except (AssertionError, ValueError, TypeError) as err:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    arr, algo = config.actor_rollout_ref, config.algorithm
    return {"ok": True, "use_reference_policy": bool(use_ref), "use_critic": bool(use_critic),
            "config": {
                "train_batch_size": config.data.train_batch_size,
                "rollout_n": arr.rollout.n,
                "ppo_mini_batch_size": arr.actor.ppo_mini_batch_size,
                "ppo_epochs": arr.actor.ppo_epochs,
                "loss_agg_mode": arr.actor.loss_agg_mode,
                "clip_ratio_low": arr.actor.clip_ratio_low,
                "clip_ratio_high": arr.actor.clip_ratio_high,
                "clip_ratio_c": arr.actor.clip_ratio_c,
                "use_kl_loss": arr.actor.use_kl_loss,
                "kl_loss_type": arr.actor.kl_loss_type,
                "kl_loss_coef": arr.actor.kl_loss_coef,
                "adv_estimator": algo.adv_estimator,
                "norm_adv_by_std_in_grpo": algo.norm_adv_by_std_in_grpo,
                "rollout_correction": OmegaConf.to_container(algo.rollout_correction),
                "use_remove_padding": arr.model.use_remove_padding,
                "n_gpus": config.trainer.n_gpus_per_node * config.trainer.nnodes,
            }}


if __name__ == "__main__":
    result = main(sys.argv[1], sys.argv[2:])
    print("VERL-COMPOSE " + json.dumps(result))
