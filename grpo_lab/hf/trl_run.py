r"""The same experiment in TRL 1.16.0's real ``GRPOTrainer``: same model, tokenizer, reward, knobs.

Taught in chapter 6b, section "The same run in TRL" (``chapters/06b_real_model.ipynb``).
Nothing here re-implements TRL: :func:`grpo_config` translates a :class:`grpo_lab.hf.StepConfig`
(itself read from ``gl.presets``, TRL's defaults) into TRL's ``GRPOConfig``, and
:func:`run_trl` hands TRL the book's model, tokenizer, task and reward and returns what TRL
logged. :mod:`grpo_lab.hf.trl_check` then proves TRL's loss, gradient and advantages equal to
the book's functions on TRL's own batch.

What the run needs, each a fact of TRL 1.16.0 (``trl/trainer/grpo_trainer.py``,
``trl/trainer/grpo_config.py``):

* the tokenizer is passed (``processing_class``), with a chat template: the prompts are
  conversational (``[{"role": "user", ...}]``) and TRL renders them with it;
* with ``beta > 0`` TRL builds the reference by loading ``model.config._name_or_path``
  (``GRPOTrainer.__init__``), so the in-code model is saved to a local folder first
  (:func:`grpo_lab.hf.save_local`);
* TRL turns ``gradient_checkpointing`` (transformers 5 calls it ``activation_checkpointing``)
  and ``bf16`` on by default (GRPOConfig's note); both are
  turned off (a 2-layer float32 model has nothing to save, and the CPU has no fast bf16);
* ``report_to="none"``, ``use_cpu=True``, ``HF_HUB_OFFLINE=1``: nothing leaves the machine;
* the learning rate is constant (TRL's default scheduler decays it linearly to 0).

The run's size: ``prompts_per_step`` B prompts x G completions per optimizer step
(``per_device_train_batch_size = B*G``), ``max_steps`` steps. With ``num_iterations`` mu > 1,
each batch of completions feeds mu steps, the first on-policy, the others with ``old_logp``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from grpo_lab.hf.model import save_local
from grpo_lab.hf.reward import trl_reward_function
from grpo_lab.hf.step import StepConfig
from grpo_lab.hf.tokenizer import prompt_messages
from grpo_lab.numerics.validate import check_choice, check_int, check_real, describe
from grpo_lab.rl.task import AdditionTask

__all__ = ["TRL_VERSION", "TRLRun", "addition_dataset", "grpo_config", "offline", "run_trl",
           "shared_folder", "trl_trainer"]

#: The TRL release whose code this module and its cross-check were written against.
TRL_VERSION = "1.16.0"
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1"}


def offline() -> dict:
    """Set the Hugging Face libraries' offline switches (unless already set); returns them."""
    for key, value in _OFFLINE.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in _OFFLINE}


def addition_dataset(task, *, split: str = "train"):
    """Chapter 6's prompts as a ``datasets.Dataset``: a conversational ``prompt`` column and an
    ``answer`` column (TRL passes every extra column to the reward function by name)."""
    from datasets import Dataset

    if not isinstance(task, AdditionTask):
        raise TypeError(f"task: expected a grpo_lab.task.AdditionTask, got {describe(task)}")
    terms = task.train if check_choice("split", split, ("train", "held_out")) == "train" \
        else task.held_out
    return Dataset.from_dict({"prompt": [prompt_messages(t) for t in terms],
                              "answer": [task.answer(t) for t in terms]})


def grpo_config(config: StepConfig, *, output_dir, max_steps: int = 10,
                prompts_per_step: int = 8, learning_rate: float = 1e-3, seed: int = 0,
                device: str = "cpu", **overrides):
    """TRL's ``GRPOConfig`` for the knobs of ``config``: each field where TRL has one.

    ==================  ==============================  ========================================
    StepConfig          GRPOConfig                      note
    ==================  ==============================  ========================================
    group_size          num_generations                 G
    max_new_tokens      max_completion_length
    temperature         temperature                     top_k 0, top_p 1.0: TRL's defaults
    eps_low, eps_high   epsilon, epsilon_high
    beta                beta                            k3 is TRL's only estimator
    kl_bias_correction  use_bias_correction_kl
    agg                 loss_type
    advantages          scale_rewards="group"           TRL's (r - mean) / (std + 1e-4), Bessel
    num_iterations      num_iterations                  mu
    micro_size          per_device_train_batch_size,    rows per micro-batch; the accumulation
                        gradient_accumulation_steps     steps make up B*G rows
    max_grad_norm       max_grad_norm
    is_mode             (vLLM only)                     refused: no vLLM here
    ==================  ==============================  ========================================

    ``overrides`` are passed to ``GRPOConfig`` last (any of its fields).
    """
    from trl import GRPOConfig

    if not isinstance(config, StepConfig):
        raise TypeError(f"config: expected a gl.hf.StepConfig, got {describe(config)}")
    cfg = config.validate()
    if cfg.kl != "k3":
        raise ValueError(f"config.kl: expected 'k3', TRL's only KL estimator, got {cfg.kl!r}")
    adv = {**dict(eps=1e-4, ddof=1, scale="group", baseline="mean"), **cfg.advantages}
    if adv != dict(eps=1e-4, ddof=1, scale="group", baseline="mean"):
        raise ValueError(f"config.advantages: expected TRL's (r - mean) / (std + 1e-4) with "
                         f"Bessel's std, {{'eps': 1e-4, 'ddof': 1}}, got {cfg.advantages}")
    if cfg.is_mode is not None:
        raise ValueError(f"config.is_mode: expected None (TRL applies its IS correction only "
                         f"with vLLM, use_vllm=True), got {cfg.is_mode!r}")
    B = check_int("prompts_per_step", prompts_per_step, minimum=1)
    N = B * cfg.group_size
    micro = cfg.micro_size or N
    if N % micro:
        raise ValueError(f"config.micro_size: expected a divisor of B*G = {N} rows (TRL "
                         f"accumulates whole micro-batches), got {micro}")
    check_choice("device", device, ("cpu", "cuda"))
    return GRPOConfig(
        output_dir=str(output_dir), num_generations=cfg.group_size,
        per_device_train_batch_size=micro, gradient_accumulation_steps=N // micro,
        max_completion_length=cfg.max_new_tokens, temperature=cfg.temperature,
        epsilon=cfg.eps_low, epsilon_high=cfg.eps_high, beta=cfg.beta,
        use_bias_correction_kl=cfg.kl_bias_correction, loss_type=cfg.agg,
        scale_rewards="group", num_iterations=cfg.num_iterations,
        max_grad_norm=cfg.max_grad_norm,
        learning_rate=check_real("learning_rate", learning_rate, minimum=0.0, allow_equal=False),
        lr_scheduler_type="constant", max_steps=check_int("max_steps", max_steps, minimum=1),
        logging_steps=1, report_to="none", use_cpu=device == "cpu", bf16=False, fp16=False,
        activation_checkpointing=False, save_strategy="no", disable_tqdm=True,
        seed=check_int("seed", seed, minimum=0), **overrides)


def shared_folder(prefix: str = "grpo_lab_trl_") -> str:
    """A new temporary folder that every process of one ``torchrun`` / ``accelerate`` launch
    names alike: under ``torchrun`` the launch's ``TORCHELASTIC_RUN_ID`` and ``MASTER_PORT``
    name it, so rank 1 reads the model rank 0 wrote; on one process, ``tempfile.mkdtemp``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return tempfile.mkdtemp(prefix=prefix)
    run = os.environ.get("TORCHELASTIC_RUN_ID", "run") + "_" + os.environ.get("MASTER_PORT", "0")
    path = os.path.join(tempfile.gettempdir(), prefix + run.replace(os.sep, "_"))
    os.makedirs(path, exist_ok=True)
    return path


def trl_trainer(model, tokenizer, dataset, reward_funcs, *, folder, max_steps: int = 2,
                seed: int = 0, learning_rate: float = 1e-3, **fields):
    """TRL's ``GRPOTrainer`` on the in-code model with ``GRPOConfig(**fields)`` over the book's
    fixed settings (offline, CPU, float32, no checkpointing, constant learning rate).

    With ``beta > 0`` TRL loads its reference from ``model.config._name_or_path``: rank 0
    saves the model to ``folder/model`` and every other process waits for it (one folder the
    ranks share: :func:`shared_folder`) before it builds its trainer.
    """
    offline()
    from accelerate import PartialState
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    defaults = dict(output_dir=os.path.join(str(folder), "trainer"), report_to="none",
                    use_cpu=True, bf16=False, fp16=False, activation_checkpointing=False,
                    save_strategy="no", disable_tqdm=True, logging_steps=1,
                    lr_scheduler_type="constant", max_steps=check_int("max_steps", max_steps,
                                                                      minimum=1),
                    seed=check_int("seed", seed, minimum=0), learning_rate=learning_rate)
    args = GRPOConfig(**{**defaults, **fields})
    if args.beta != 0:
        state = PartialState()
        if state.is_main_process:
            save_local(model, tokenizer, os.path.join(str(folder), "model"))
        state.wait_for_everyone()
        if not state.is_main_process:
            model.config._name_or_path = os.path.join(str(folder), "model")
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args,
                          train_dataset=dataset, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    return trainer


@dataclass
class TRLRun:
    """What :func:`run_trl` returns: TRL's per-step ``history`` (``trainer.state.log_history``,
    one dict per optimizer step), the training's wall ``seconds`` (not seeded: never compare
    it), the ``trainer`` itself, and ``rewards``: each generation's ``(texts, rewards)``."""
    history: list
    seconds: float
    trainer: object
    rewards: list


def run_trl(model, tokenizer, task, config: StepConfig, *, max_steps: int = 10,
            prompts_per_step: int = 8, learning_rate: float = 1e-3, seed: int = 0,
            folder=None, capture=None, device: str = "cpu", **overrides) -> TRLRun:
    """Train ``model`` with TRL's ``GRPOTrainer`` on ``task`` for ``max_steps`` steps.

    ==================  ==========  ============================================================
    Argument            Type        Meaning
    ==================  ==========  ============================================================
    model, tokenizer    HF          :func:`grpo_lab.hf.build_model` / ``build_tokenizer``
                                    (warm-started: :func:`grpo_lab.hf.warm_start`); trained
                                    in place
    task                Task        chapter 6's :class:`grpo_lab.task.AdditionTask`
    config              StepConfig  the knobs (:func:`grpo_config` maps them)
    folder              path        where the model is saved for TRL's reference (by default
                                    a temporary folder, removed when the run ends)
    capture             object      with ``attach(trainer)``: a
                                    :class:`grpo_lab.hf.BatchCapture` records one step's batch
    ==================  ==========  ============================================================

    The reward is :func:`grpo_lab.hf.trl_reward_function` (chapter 5's verifiers). Offline
    (:func:`offline`); TRL's console printer is removed (the history has every number).
    """
    offline()
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    if capture is not None and not callable(getattr(capture, "attach", None)):
        raise TypeError(f"capture: expected an object with attach(trainer) (gl.hf.BatchCapture), "
                        f"got {describe(capture)}")
    settings = dict(max_steps=max_steps, prompts_per_step=prompts_per_step,
                    learning_rate=learning_rate, seed=seed, device=device, **overrides)
    grpo_config(config, output_dir="unused", **settings)     # every knob checked, nothing made yet
    owned = folder is None                                   # a folder of our own is removed after
    folder = tempfile.mkdtemp(prefix="grpo_lab_trl_") if owned else folder
    try:
        args = grpo_config(config, output_dir=os.path.join(str(folder), "trainer"), **settings)
        save_local(model, tokenizer, os.path.join(str(folder), "model"))  # TRL reloads the reference
        record = []
        trainer = GRPOTrainer(model=model, reward_funcs=trl_reward_function(
            format_weight=config.format_weight, record=record), args=args,
            train_dataset=addition_dataset(task), processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)
        if capture is not None:
            capture.attach(trainer)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    finally:
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
    history = [row for row in trainer.state.log_history if "loss" in row and "step" in row]
    return TRLRun(history, seconds, trainer, record)
