r"""The clinic: the failures practitioners meet in GRPO runs, staged in TRL 1.16.0's real
``GRPOTrainer`` on the book's in-code model, each with the one knob that makes it healthy.

Taught in chapter 6c (``chapters/06c_clinic.ipynb``); the doctor that reads the logs is
:mod:`grpo_lab.doctor`. Every stage is a real ``trainer.train()`` of a few seconds on 2 CPU
cores, seeded, on chapter 6's addition task, from the warm start of chapter 6b; it returns
TRL's ``trainer.state.log_history`` (the step rows and the final summary row, as
``trainer_state.json`` holds them), or, where TRL refuses the run, TRL's error message.

Each stage function takes ``healthy`` (False: the failure; True: the one knob changed) and
``seed``; :data:`STAGES` lists them with the knob, the cause id the doctor should name and the
public issue where users met it.

=====================  =================================  ================================
stage                  the failure (sick)                 the one knob (healthy)
=====================  =================================  ================================
``loss_zero``          TRL's defaults: the loss logs ~0   loss_type "grpo": exactly ~0
``truncation``         max_completion_length 3            8
``zero_std``           temperature 0.05                   1.0
``reward_flat``        learning_rate 1e-9                 1e-3
``batch_size``         per_device_train_batch_size 12     16 (a multiple of G = 8)
``lr_too_high``        learning_rate 3e-2                 1e-3
``kl_blowup``          learning_rate 1e-2                 1e-3
``length_blowup``      a length reward, weight 1          weight 0
``length_collapse``    a brevity penalty, weight 1        weight 0
``nan``                reward 1/|guess - answer|          1/(1 + |guess - answer|)
``reward_none``        reward reads a missing column      reads ``answer``
``reward_crash``       reward indexes a missing column    reads ``answer``
``reward_hacking``     proxy "big answer", weight 1       format reward, weight 1
=====================  =================================  ================================
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import dataclass

from grpo_lab.numerics.validate import check_int, describe
from grpo_lab.rl.rewards import accuracy_reward, format_reward

__all__ = ["BASE", "STAGES", "Stage", "model_and_task", "stage", "train"]

#: The healthy run every stage changes: chapter 6b's knobs (TRL's defaults with beta 0.04),
#: 4 prompts x 8 completions per step, 12 steps, Adam at 1e-3, constant.
BASE = dict(steps=12, prompts_per_step=4, learning_rate=1e-3, group_size=8, max_new_tokens=8,
            temperature=1.0, beta=0.04)
_CACHE = {}
_RUNS = {}          # (knobs, seed) -> log_history: each distinct run once per process


def model_and_task():
    """The tokenizer, chapter 6's task and chapter 6b's warm-started weights (20 steps of SFT
    on random answers), built once per process: ``(tokenizer, task, state_dict)``."""
    if "warm" not in _CACHE:
        import grpo_lab.hf as glh
        from grpo_lab.rl.task import AdditionTask

        tok = glh.build_tokenizer()
        model = glh.build_model(tok, seed=0)
        task = AdditionTask(n_terms=4, max_term=4, held_out=0.2, seed=0)
        glh.warm_start(model, tok, task, steps=20, batch_size=32, lr=5e-3, seed=0)
        _CACHE["warm"] = (tok, task, {k: v.clone() for k, v in model.state_dict().items()})
    return _CACHE["warm"]


# --- reward functions (TRL's signature: prompts, completions, answer, **kwargs) -----------------

def _texts(completions):
    return [c if isinstance(c, str) else c[-1]["content"] for c in completions]


def _guess(text):
    """The integer inside ``<answer>...</answer>``, or None."""
    m = re.search(r"<answer>\s*(-?\d+)\s*</answer>", text)
    return int(m.group(1)) if m else None


def accuracy(prompts, completions, answer, **kwargs):
    """1 when the ``<answer>`` equals the sum (chapter 5's verifier), else 0."""
    return [accuracy_reward(t, a) for t, a in zip(_texts(completions), answer)]


def formatted(prompts, completions, answer, **kwargs):
    """0.5 for ``<think>...</think><answer>...</answer>`` and nothing else (chapter 5)."""
    return [0.5 * format_reward(t) for t in _texts(completions)]


def length(prompts, completions, answer, **kwargs):
    """The completion's length in characters / 20: a reward that pays for length."""
    return [len(t) / 20 for t in _texts(completions)]


def brevity(prompts, completions, answer, **kwargs):
    """Minus the completion's length in characters / 20: a penalty on length."""
    return [-len(t) / 20 for t in _texts(completions)]


def closeness(prompts, completions, answer, **kwargs):
    """1 / |guess - answer|: infinite on an exact answer (the bug); 0 without an answer."""
    out = []
    for t, a in zip(_texts(completions), answer):
        g = _guess(t)
        out.append(0.0 if g is None else (math.inf if g == a else 1.0 / abs(g - a)))
    return out


def closeness_fixed(prompts, completions, answer, **kwargs):
    """1 / (1 + |guess - answer|): 1 on an exact answer, finite always."""
    return [0.0 if (g := _guess(t)) is None else 1.0 / (1 + abs(g - a))
            for t, a in zip(_texts(completions), answer)]


def solution_column(prompts, completions, answer=None, **kwargs):
    """Reads a ``solution`` column the dataset does not have: None for every completion."""
    solution = kwargs.get("solution")
    if solution is None:
        return [None] * len(completions)
    return [accuracy_reward(t, s) for t, s in zip(_texts(completions), solution)]


def big_answer(prompts, completions, answer, **kwargs):
    """A proxy that pays for a large number in ``<answer>``: ``guess / 10``, capped at 1."""
    return [0.0 if (g := _guess(t)) is None else min(max(g, 0) / 10, 1.0)
            for t in _texts(completions)]


# --- the run -----------------------------------------------------------------------------------

def train(*, reward_funcs=(accuracy, formatted), reward_weights=None, seed: int = 0,
          steps: int | None = None, prompts_per_step: int | None = None, **knobs) -> list:
    """One real ``GRPOTrainer.train()`` from the warm start; returns TRL's ``log_history``.

    ``knobs`` override :data:`BASE` (``learning_rate``, ``group_size``, ``max_new_tokens``,
    ``temperature``, ``beta``, and the :class:`grpo_lab.hf.StepConfig` fields) or pass to TRL's
    ``GRPOConfig`` (any other field). ``reward_funcs`` are TRL reward functions; TRL logs each
    as ``rewards/<its __name__>/mean``.
    """
    import grpo_lab.hf as glh
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    seed = check_int("seed", seed, minimum=0)
    if not isinstance(reward_funcs, (list, tuple)) or not all(map(callable, reward_funcs)):
        raise TypeError(f"reward_funcs: expected a list of functions, got {describe(reward_funcs)}")
    run = {**BASE, **knobs}
    steps = run.pop("steps") if steps is None else check_int("steps", steps, minimum=1)
    B = run.pop("prompts_per_step") if prompts_per_step is None else prompts_per_step
    lr = run.pop("learning_rate")
    run.pop("steps", None), run.pop("prompts_per_step", None)
    step_fields = {k: run.pop(k) for k in list(run) if k in glh.StepConfig.__dataclass_fields__}
    glh.offline()
    tok, task, state = model_and_task()
    model = glh.build_model(tok, seed=0)
    model.load_state_dict(state)
    folder = tempfile.mkdtemp(prefix="grpo_lab_clinic_")
    args = glh.grpo_config(glh.StepConfig.from_preset("trl", **step_fields),
                           output_dir=os.path.join(folder, "trainer"), max_steps=steps,
                           prompts_per_step=B, learning_rate=lr, seed=seed,
                           reward_weights=None if reward_weights is None else list(reward_weights),
                           **run)
    glh.save_local(model, tok, os.path.join(folder, "model"))   # TRL reloads the reference
    trainer = GRPOTrainer(model=model, reward_funcs=list(reward_funcs), args=args,
                          train_dataset=glh.addition_dataset(task), processing_class=tok)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return [dict(row) for row in trainer.state.log_history]


def solution_crash(prompts, completions, answer=None, **kwargs):
    """Indexes a ``solution`` column the dataset does not have: KeyError at the first step."""
    return [accuracy_reward(t, s) for t, s in zip(_texts(completions), kwargs["solution"])]


@dataclass(frozen=True)
class Stage:
    """One staged failure: the ``sick`` knobs, the ``healthy`` knobs (one changed), what the
    ``knob`` is, the doctor's expected ``cause`` id (None where TRL refuses to run or nothing
    is wrong), the public ``issues`` where users met it."""
    sick: dict
    healthy: dict
    knob: str
    cause: str | None
    issues: tuple


_TASK = (accuracy, formatted)
#: The staged failures of issue 39, in the chapter's order.
STAGES = {
    "loss_zero": Stage({}, {"agg": "grpo"}, "loss_type 'dapo' -> 'grpo'", None,
                       ("trl#3452", "open-r1#239", "unsloth#2291")),
    "truncation": Stage({"max_new_tokens": 3}, {}, "max_completion_length 3 -> 8",
                        "truncation", ("trl#5759", "open-r1#363")),
    "zero_std": Stage({"temperature": 0.05}, {}, "temperature 0.05 -> 1.0", "zero-std",
                      ("trl#3452", "open-r1#239")),
    "reward_flat": Stage({"learning_rate": 1e-9}, {}, "learning_rate 1e-9 -> 1e-3",
                         "reward-flat", ("open-r1#474", "open-r1#403", "unsloth#1710")),
    "batch_size": Stage({"per_device_train_batch_size": 12}, {"prompts_per_step": 2},
                        "per_device_train_batch_size 12 -> 16",
                        None, ("trl#2858", "trl#3061", "unsloth#3572")),
    "lr_too_high": Stage({"learning_rate": 3e-2}, {}, "learning_rate 3e-2 -> 1e-3",
                         "lr-too-high", ("open-r1#474",)),
    "kl_blowup": Stage({"learning_rate": 1e-2}, {}, "learning_rate 1e-2 -> 1e-3", "kl-blowup",
                       ("verl#721", "OpenRLHF#931")),
    "length_blowup": Stage({"reward_funcs": _TASK + (length,), "max_new_tokens": 16},
                           {"reward_funcs": _TASK + (length,), "max_new_tokens": 16,
                            "reward_weights": (1.0, 1.0, 0.0)}, "the length reward's weight "
                           "1 -> 0", "length-blowup", ("verl#957", "verl#2776")),
    "length_collapse": Stage({"reward_funcs": _TASK + (brevity,), "max_new_tokens": 16},
                             {"reward_funcs": _TASK + (brevity,), "max_new_tokens": 16,
                              "reward_weights": (1.0, 1.0, 0.0)}, "the brevity penalty's "
                             "weight 1 -> 0", "length-collapse", ("verl#2736",)),
    "nan": Stage({"reward_funcs": (closeness,)}, {"reward_funcs": (closeness_fixed,)},
                 "1/|guess - answer| -> 1/(1 + |guess - answer|)", "nan",
                 ("verl#721", "OpenRLHF#931")),
    "reward_none": Stage({"reward_funcs": (solution_column,)}, {"reward_funcs": _TASK},
                         "the reward reads the 'answer' column", "nan", ()),
    "reward_crash": Stage({"reward_funcs": (solution_crash,)}, {"reward_funcs": _TASK},
                          "the reward reads the 'answer' column", None, ()),
    "reward_hacking": Stage({"reward_funcs": (formatted, big_answer),
                             "reward_weights": (0.0, 1.0), "learning_rate": 3e-3},
                            {"reward_funcs": (formatted, big_answer),
                             "reward_weights": (1.0, 0.0), "learning_rate": 3e-3},
                            "train on the format reward, not the proxy", "reward-hacking", ()),
}


def stage(name: str, *, healthy: bool = False, seed: int = 0):
    """Run the staged failure ``name`` of :data:`STAGES` (``healthy=True``: with its knob
    changed); returns TRL's ``log_history``, or TRL's error message (a str) where TRL refuses
    the run (``batch_size``, ``reward_crash``). A run with the same knobs and seed as an
    earlier call in this process (the healed runs that are :data:`BASE`) is not trained again:
    the rows are a copy of the first run's."""
    from grpo_lab.numerics.validate import check_choice

    s = STAGES[check_choice("name", name, tuple(STAGES))]
    if not isinstance(healthy, bool):
        raise TypeError(f"healthy: expected True or False, got {describe(healthy)}")
    knobs = dict(s.healthy if healthy else s.sick)
    if name == "batch_size" and not healthy:
        return _config_error(**knobs)
    # Several stages share a run (every healed run of a one-number knob is BASE): each distinct
    # run is trained once per process, and each caller gets its own copy of the rows.
    key = (repr(sorted((k, getattr(v, "__name__", v) if callable(v) else
                        tuple(getattr(f, "__name__", f) for f in v) if isinstance(v, tuple)
                        else v) for k, v in {"reward_funcs": _TASK, **knobs}.items())), seed)
    if key not in _RUNS:
        try:
            _RUNS[key] = train(seed=seed, **knobs)
        except KeyError as err:
            if name != "reward_crash":
                raise
            _RUNS[key] = f"{type(err).__name__}: {err}"
    run = _RUNS[key]
    return run if isinstance(run, str) else [dict(row) for row in run]


def _config_error(**fields) -> str:
    """TRL's own refusal of a ``GRPOConfig`` (G = 8 completions per prompt), as a str."""
    from trl import GRPOConfig

    try:
        GRPOConfig(output_dir=tempfile.mkdtemp(prefix="grpo_lab_clinic_"), num_generations=8,
                   gradient_accumulation_steps=1, use_cpu=True, report_to="none", **fields)
    except ValueError as err:
        return f"ValueError: {err}"
    return ""
