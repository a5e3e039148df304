"""Chapter 8's "What the map leaves out for production": every verl and OpenRLHF default it
states is read here from the pinned release, every `file:line` it cites holds the name it
quotes there, and the TRL defaults it prints are GRPOConfig's. Skipped without the pinned
wheels (failed in CI, where tests/reference requires them)."""

import dataclasses
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from tests.reference import wheels

CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "08_production_knobs.ipynb"
HEADING = "## What the map leaves out for production"
VERL_YAML = "verl/trainer/config/_generated_ppo_trainer.yaml"
OPENRLHF_CLI = "openrlhf/cli/train_ppo_ray.py"

# (package, path in the wheel, line, the text that must stand on it): the section's citations.
CITED = {
    "core_algos.py:1258": ("verl", "verl/trainer/ppo/core_algos.py", 1258,
                           "ppo_kl = verl_F.masked_mean(-negative_approx_kl, response_mask)"),
    "core_algos.py:1372": ("verl", "verl/trainer/ppo/core_algos.py", 1372, '"actor/pg_clipfrac"'),
    "core_algos.py:1373": ("verl", "verl/trainer/ppo/core_algos.py", 1373, '"actor/ppo_kl"'),
    "workers/utils/losses.py:141": ("verl", "verl/workers/utils/losses.py", 141,
                                    'metrics["kl_loss"]'),
    "ray_trainer.py:1597": ("verl", "verl/trainer/ppo/ray_trainer.py", 1597, '"actor/entropy"'),
    "metric_utils.py:576": ("verl", "verl/trainer/ppo/metric_utils.py", 576,
                            '"response_length/clip_ratio"'),
    "models/loss.py:258": ("openrlhf", "openrlhf/models/loss.py", 258,
                           "ppo_kl = masked_mean(-raw_policy_log_ratio.detach()"),
    "ppo_actor.py:312": ("openrlhf", "openrlhf/trainer/ray/ppo_actor.py", 312,
                         'experience.info["ppo_clip_ratio"]'),
    "ppo_actor.py:313": ("openrlhf", "openrlhf/trainer/ray/ppo_actor.py", 313,
                         'experience.info["ppo_kl"]'),
    "ppo_actor.py:373": ("openrlhf", "openrlhf/trainer/ray/ppo_actor.py", 373,
                         'metrics["entropy_loss"]'),
    "experience_maker.py:226": ("openrlhf", "openrlhf/trainer/ppo_utils/experience_maker.py", 226,
                                'samples.info["kl"]'),
    "experience_maker.py:266": ("openrlhf", "openrlhf/trainer/ppo_utils/experience_maker.py",
                                266, 'experience.info["group_reward_std"]'),
    "samples_generator.py:281": ("openrlhf", "openrlhf/trainer/ppo_utils/samples_generator.py",
                                 281, '"response_clip_ratio"'),
    "grpo_trainer.py:2304": ("trl", "trl/trainer/grpo_trainer.py", 2304,
                             '"completions/clipped_ratio"'),
    "grpo_trainer.py:2830": ("trl", "trl/trainer/grpo_trainer.py", 2830, '"frac_reward_zero_std"'),
    "grpo_trainer.py:3268": ("trl", "trl/trainer/grpo_trainer.py", 3268, '["kl"]'),
    "grpo_trainer.py:3270": ("trl", "trl/trainer/grpo_trainer.py", 3270, '["entropy"]'),
    "grpo_trainer.py:3277": ("trl", "trl/trainer/grpo_trainer.py", 3277, '"clip_ratio/low_mean"'),
    "grpo_config.py:423": ("trl", "trl/trainer/grpo_config.py", 423, "learning_rate: float"),
}


def _pinned(package):
    try:
        return wheels.package_root(package)
    except wheels.ReferenceUnavailable as err:
        if wheels.required():
            raise
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def text():
    cells = nbformat.read(CHAPTER, as_version=4).cells
    start = next(i for i, c in enumerate(cells) if c.source.startswith(HEADING))
    return cells[start].source, cells[start + 1]


def test_every_citation_of_the_section_holds_what_it_quotes(text):
    md, _ = text
    for package in ("trl", "verl", "openrlhf"):
        _pinned(package)
    cited = set()
    for name, lines in re.findall(r"`([\w/]+\.py):(\d+(?:, \d+)*)`", md):   # "a.py:12, 34"
        cited |= {f"{name}:{n}" for n in lines.split(", ")}
    assert set(CITED) <= cited, sorted(set(CITED) - cited)       # the section cites each one
    for key, (package, rel, line, anchor) in CITED.items():
        lines = wheels.read(package, rel).splitlines()
        assert anchor in lines[line - 1], (key, anchor, lines[line - 1])


def test_verl_optimiser_and_length_defaults_are_the_releases(text):
    md, _ = text
    _pinned("verl")
    raw = wheels.read("verl", VERL_YAML)
    data = yaml.safe_load(raw)
    optim = data["actor_rollout_ref"]["actor"]["optim"]
    assert (optim["lr"], optim["lr_scheduler_type"], optim["lr_warmup_steps_ratio"],
            optim["weight_decay"], list(optim["betas"]), optim["clip_grad"]) == \
        (1e-6, "constant", 0.0, 0.01, [0.9, 0.999], 1.0)
    for phrase in ("`lr: 1.0e-06`", "`constant`", "`lr_warmup_steps_ratio: 0.0`",
                   "`weight_decay: 0.01`", "(0.9, 0.999)"):
        assert phrase in md, phrase
    lines = raw.splitlines()
    assert "lr: 1.0e-06" in lines[12 - 1] and "lr_scheduler_type: constant" in lines[23 - 1]
    d = data["data"]
    assert (d["max_prompt_length"], d["max_response_length"], d["truncation"]) == \
        (512, 512, "error")
    assert "max_prompt_length: 512" in lines[504 - 1] and "truncation: error" in lines[523 - 1]
    assert "`data.truncation: error`" in md and "are 512 each" in md


def test_openrlhf_optimiser_and_length_defaults_are_the_releases(text):
    md, _ = text
    _pinned("openrlhf")
    lines = wheels.read("openrlhf", OPENRLHF_CLI).splitlines()
    expected = {502: 'adam.lr", type=float, default=1e-6 if prefix == "actor"',
                503: 'adam.betas", type=float, nargs=2, default=(0.9, 0.95)',
                505: 'adam.weight_decay", type=float, default=0.0',
                507: 'lr_scheduler", type=str, default="cosine_with_min_lr"',
                508: 'lr_warmup_ratio", type=float, default=0.03',
                509: 'min_lr_ratio", type=float, default=0.1',
                398: '"--data.max_len", type=int, default=2048'}
    for line, anchor in expected.items():
        assert anchor in lines[line - 1], (line, lines[line - 1])
    assert "default=None" in "".join(lines[399:404])                 # --rollout.max_new_tokens
    for phrase in ("`--actor.adam.lr 1e-6`", "**(0.9, 0.95)**", "`cosine_with_min_lr`",
                   "`--actor.lr_warmup_ratio 0.03`", "`--actor.min_lr_ratio 0.1`",
                   "`--data.max_len 2048`", "`cli/train_ppo_ray.py:502-509`"):
        assert phrase in md, phrase


def test_the_trl_defaults_printed_are_grpo_configs(text):
    trl = pytest.importorskip("trl")
    _, code = text
    printed = "".join(o.get("text", "") for o in code.outputs)
    fields = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    for name in ("learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay",
                 "adam_beta1", "adam_beta2", "max_grad_norm", "max_completion_length",
                 "mask_truncated_completions"):
        assert re.search(rf"GRPOConfig\.{name}\s+{re.escape(repr(fields[name]))}\n", printed), name
    assert (fields["learning_rate"], fields["lr_scheduler_type"], fields["warmup_steps"],
            fields["weight_decay"]) == (1e-6, "linear", 0, 0.0)
