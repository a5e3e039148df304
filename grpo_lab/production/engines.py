r"""The commands the book prints for other engines, as data its tests hand to those engines.

Taught in chapter 6b, "How it scales" (``chapters/06b_real_model.ipynb``). A command printed
on a page and never run rots; here each one is a value the chapter prints and a test passes
through the engine's own code:

- :data:`VERL_OVERRIDES`, verl 0.9.1's Hydra overrides for the chapter's run, composed with
  verl's own trainer config (``verl/trainer/config/ppo_trainer.yaml``) and checked by its
  ``validate_config`` (``verl/utils/config.py:88``) in ``tests/reference/test_engine_commands.py``;
- :data:`TRL_TWIN`, the TRL 1.16.0 ``GRPOConfig`` fields of the run the verl command matches;
- :func:`verl_updates_per_rollout`, how many optimizer updates verl takes per rollout batch.

``import grpo_lab`` reads this module without torch; nothing here imports verl.
"""

from __future__ import annotations

from grpo_lab.numerics.validate import check_int

__all__ = ["TRL_TWIN", "VERL_OVERRIDES", "verl_command", "verl_updates_per_rollout"]

#: The prompts of one rollout batch (verl's ``data.train_batch_size``, TRL's generation batch
#: over ``num_generations``): 64 prompts x G = 8 is 512 completions over 16 GPUs.
PROMPTS = 64
#: G, verl's ``rollout.n``, TRL's ``num_generations``.
GROUP_SIZE = 8

#: verl 0.9.1's overrides, in the order the chapter prints them. Each line's comment says what
#: it matches in TRL (:data:`TRL_TWIN`); ``tests/reference/test_engine_commands.py`` composes
#: them with verl's config and runs ``validate_config``.
VERL_OVERRIDES = (
    ("algorithm.adv_estimator", "grpo"),                       # default gae: ask for GRPO
    ("algorithm.norm_adv_by_std_in_grpo", "true"),             # scale_rewards="group"
    ("data.train_batch_size", str(PROMPTS)),                   # prompts per rollout (default 1024)
    ("actor_rollout_ref.model.path", "./grpo_lab_6b_model"),
    ("actor_rollout_ref.rollout.name", "vllm"),
    ("actor_rollout_ref.rollout.n", str(GROUP_SIZE)),          # num_generations (default 1)
    ("actor_rollout_ref.rollout.tensor_model_parallel_size", "1"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.5"),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "8"),   # old_logp's forward
    ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "8"),       # ref_logp's forward
    ("actor_rollout_ref.actor.strategy", "fsdp2"),
    ("actor_rollout_ref.actor.loss_agg_mode", "token-mean"),   # loss_type="dapo"
    ("actor_rollout_ref.actor.clip_ratio_low", "0.2"),         # epsilon
    ("actor_rollout_ref.actor.clip_ratio_high", "0.2"),        # epsilon_high
    ("actor_rollout_ref.actor.use_kl_loss", "true"),
    ("actor_rollout_ref.actor.kl_loss_type", "low_var_kl+"),   # k3, gradient of k2: see below
    ("actor_rollout_ref.actor.kl_loss_coef", "0.04"),          # beta
    ("actor_rollout_ref.actor.ppo_epochs", "1"),               # num_iterations
    ("actor_rollout_ref.actor.ppo_mini_batch_size", str(PROMPTS)),  # prompts: one update
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4"),
    ("algorithm.rollout_correction.rollout_is", "sequence"),   # sequence-level IS weight ...
    ("algorithm.rollout_correction.rollout_is_threshold", "3.0"),  # ... truncated at 3
    ("trainer.n_gpus_per_node", "8"),
    ("trainer.nnodes", "2"),
)

#: The TRL 1.16.0 run the verl command matches, as ``GRPOConfig`` keyword arguments (16 GPUs:
#: 2 nodes x 8). TRL's default IS mode is ``sequence_mask`` (ratios above the cap are set to 0,
#: ``grpo_trainer.py:2686-2702``); verl's masking twin, IcePop's ``"lower_upper"`` threshold,
#: needs a positive lower bound (``rollout_corr_helper.py:123-125``) where TRL's default has
#: none, so both runs use truncation here: TRL's ``sequence_truncate`` clamps the sequence's
#: ratio at 3 (``grpo_trainer.py:2680-2685``), verl's ``rollout_is="sequence"`` with a single
#: threshold does the same (``rollout_corr_helper.py:594-596``).
TRL_TWIN = dict(
    num_generations=GROUP_SIZE, per_device_train_batch_size=PROMPTS * GROUP_SIZE // 16,
    steps_per_generation=1, gradient_accumulation_steps=1, num_iterations=1,
    loss_type="dapo", scale_rewards="group", epsilon=0.2, epsilon_high=0.2,
    beta=0.04, use_bias_correction_kl=True,
    use_vllm=True, vllm_importance_sampling_correction=True,
    vllm_importance_sampling_mode="sequence_truncate", vllm_importance_sampling_clip_max=3.0,
)


def verl_command(overrides=VERL_OVERRIDES, *, width: int = 92) -> str:
    """The shell command ``python3 -m verl.trainer.main_ppo`` with ``overrides``, wrapped for
    the page: each continuation line holds as many overrides as fit in ``width`` characters."""
    check_int("width", width, minimum=20)
    lines, current = [], "   "
    for key, value in overrides:
        item = f"{key}={value}"
        if len(current) > 3 and len(current) + 1 + len(item) + 2 > width:
            lines.append(current)
            current = "   "
        current += " " + item
    lines.append(current)
    return " \\\n".join(["python3 -m verl.trainer.main_ppo", *lines])


def verl_updates_per_rollout(train_batch_size, ppo_mini_batch_size, ppo_epochs) -> int:
    r"""Optimizer updates verl 0.9.1 takes per rollout batch.

    ``data.train_batch_size`` and ``actor.ppo_mini_batch_size`` both count **prompts**: the
    trainer multiplies the mini-batch by ``rollout.n`` before it splits the rollout's
    ``train_batch_size * n`` sequences (``verl/trainer/ppo/ray_trainer.py:1352-1353``), and
    makes ``ppo_epochs`` passes (l. 1354), so

    .. math:: \text{updates} = \text{ppo\_epochs}\cdot
              \frac{\text{train\_batch\_size}}{\text{ppo\_mini\_batch\_size}}

    (``n`` cancels). verl's defaults, 1024 prompts and 256 a mini-batch, take 4; the
    chapter's old command left ``train_batch_size`` at 1024 with a mini-batch of 16: 64.

    >>> verl_updates_per_rollout(1024, 16, 1)
    64
    """
    check_int("train_batch_size", train_batch_size, minimum=1)
    check_int("ppo_mini_batch_size", ppo_mini_batch_size, minimum=1)
    check_int("ppo_epochs", ppo_epochs, minimum=1)
    if train_batch_size % ppo_mini_batch_size:
        raise ValueError(f"train_batch_size ({train_batch_size}) must be a multiple of "
                         f"ppo_mini_batch_size ({ppo_mini_batch_size}): verl splits the "
                         f"rollout into whole mini-batches")
    return ppo_epochs * (train_batch_size // ppo_mini_batch_size)
