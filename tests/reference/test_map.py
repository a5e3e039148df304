"""Chapter 8's knob map and the presets against the pinned releases' own files (issue 17).

* every citation ``KEY:LINE ANCHOR`` of ``knobs.toml``: the anchor stands on that line of the
  file in the release's wheel (a dotted key of the YAML file stands at that line);
* every default a row states (``defaults``) is the release's default, read from GRPOConfig's
  dataclass fields (with ``ast``), verl's generated YAML and OpenRLHF's ``add_argument`` calls,
  and the row's text prints it;
* the presets' fields are those defaults;
* two facts the map states that are behaviour, not a default: verl with n = 1 hands out the raw
  score, OpenRLHF with n = 1 hands out NaN.
"""

from __future__ import annotations

import ast
import functools
import re

import numpy as np
import pytest
import yaml

import grpo_lab as gl
torch = pytest.importorskip("torch")

from tests.reference import trainers as tr  # noqa: E402 (needs torch)
from tests.reference import wheels

SYSTEM_OF = {"trl": "TRL", "verl": "verl", "openrlhf": "OpenRLHF"}


# --- the releases' defaults ---------------------------------------------------------------------

@functools.cache
def trl_defaults() -> dict:
    """``GRPOConfig``'s own fields: ``name: type = field(default=...)``, read with ``ast``."""
    text = wheels.read("trl", "trl/trainer/grpo_config.py")
    cls = next(n for n in ast.parse(text).body
               if isinstance(n, ast.ClassDef) and n.name == "GRPOConfig")
    out = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call):
            kw = {k.arg: k.value for k in node.value.keywords}
            if "default" in kw:
                out[node.target.id] = ast.literal_eval(kw["default"])
    return out


@functools.cache
def verl_defaults() -> dict:
    """The generated trainer YAML, flattened to dotted keys."""
    data = yaml.safe_load(wheels.read("verl", "verl/trainer/config/_generated_ppo_trainer.yaml"))

    def flatten(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from flatten(v, f"{prefix}{k}.")
            yield f"{prefix}{k}", v
    return dict(flatten(data))


@functools.cache
def openrlhf_defaults() -> dict:
    """Every ``parser.add_argument("--flag", ..., default=...)`` of ``train_ppo_ray.py``."""
    out = {}
    for node in ast.walk(ast.parse(wheels.read("openrlhf", "openrlhf/cli/train_ppo_ray.py"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            kw = {k.arg: k.value for k in node.keywords}
            flag = node.args[0].value if node.args and isinstance(node.args[0],
                                                                  ast.Constant) else None
            if isinstance(flag, str) and "default" in kw:
                try:
                    out[flag] = ast.literal_eval(kw["default"])
                except ValueError:                                  # e.g. a computed default
                    out[flag] = f"<{ast.unparse(kw['default'])}>"
    return out


DEFAULTS = {"trl": trl_defaults, "verl": verl_defaults, "openrlhf": openrlhf_defaults}


def _stated(value):
    """How a row's text prints a default: None, booleans as True/true/on, numbers as written."""
    if value == "None" or value is None:
        return r"(None|null)"
    if isinstance(value, bool):
        return r"(True|true|on)" if value else r"(False|false|off)"
    return re.escape(str(value))


ROWS_DEFAULTS = [(row.concept, system, name, value) for row in gl.presets.KNOB_MAP
                 for system, name, value in row.defaults]


@pytest.mark.parametrize("concept, system, name, value", ROWS_DEFAULTS,
                         ids=[f"{s}:{n}" for _, s, n, _ in ROWS_DEFAULTS])
def test_each_default_the_map_states_is_the_release_default(concept, system, name, value):
    real = DEFAULTS[system]()
    assert name in real, f"{concept}: {SYSTEM_OF[system]} has no default {name!r}"
    expected = None if value == "None" else value
    assert real[name] == expected and type(real[name]) is type(expected), \
        f"{concept}: the map says {name} = {value!r}, the release has {real[name]!r}"
    row = next(r for r in gl.presets.KNOB_MAP if r.concept == concept)
    text = getattr(row, system)[0]
    short = name.removeprefix("--").removeprefix("actor_rollout_ref.").removeprefix("algorithm.")
    pattern = rf"{re.escape(short)}[`=:\s(]+\"?{_stated(value)}"
    assert re.search(pattern, text), f"{concept}: {SYSTEM_OF[system]}'s text does not print " \
                                     f"{short} = {value!r}: {text!r}"


def test_the_map_states_at_least_one_default_per_system_for_most_rows():
    assert len(ROWS_DEFAULTS) >= 40
    assert {s for _, s, _, _ in ROWS_DEFAULTS} == set(DEFAULTS)


CITES = [(row.concept, system, cite) for row in gl.presets.KNOB_MAP
         for system, (_, cites) in zip(("trl", "verl", "openrlhf"), row.cells()[1:])
         for cite in cites]


@pytest.mark.parametrize("concept, system, cite", CITES,
                         ids=[f"{c.key}:{c.line}" for _, _, c in CITES])
def test_every_citation_names_the_line_it_read(concept, system, cite):
    source = gl.presets.SOURCES[cite.key]
    assert source.package == system and source.version == wheels.PINS[system][0]
    text = wheels.read(source.package, source.path)
    if source.path.endswith(".yaml"):
        assert wheels.yaml_line(text, cite.anchor) == cite.line, (concept, cite)
    else:
        lines = text.splitlines()
        assert cite.line <= len(lines) and cite.anchor in lines[cite.line - 1], \
            f"{concept}: {cite.key} line {cite.line} of {source.path} does not hold " \
            f"{cite.anchor!r}"


def test_every_row_cites_file_and_line_for_every_system():
    for row in gl.presets.KNOB_MAP:
        for text, cites in row.cells()[1:]:
            assert cites and all(c.line > 0 and c.anchor for c in cites), row.concept


# --- the presets are the releases' defaults --------------------------------------------------------

def test_the_trl_preset_is_grpoconfig():
    d, p = trl_defaults(), gl.presets.PRESETS["trl"]
    assert (p.eps_low, p.eps_high if d["epsilon_high"] else d["epsilon"]) == (d["epsilon"],) * 2
    assert p.dual_clip == d["delta"] is None
    assert (p.beta, p.agg, p.level) == (d["beta"], d["loss_type"], d["importance_sampling_level"])
    assert (p.num_iterations, p.mask_truncated) == (d["num_iterations"],
                                                     d["mask_truncated_completions"])
    assert (p.group_size, p.kl_bias_correction) == (d["num_generations"],
                                                     d["use_bias_correction_kl"])
    assert p.advantages["scale"] == d["scale_rewards"]


def test_the_verl_preset_is_the_generated_config():
    d, p = verl_defaults(), gl.presets.PRESETS["verl"]
    actor = "actor_rollout_ref.actor."
    assert (p.eps_low, p.eps_high, p.dual_clip) == (d[actor + "clip_ratio_low"],
                                                    d[actor + "clip_ratio_high"],
                                                    d[actor + "clip_ratio_c"])
    assert d[actor + "use_kl_loss"] is False and d["algorithm.use_kl_in_reward"] is False
    assert p.kl_in == "off" and d[actor + "kl_loss_type"] == "low_var_kl" and p.kl == "k3"
    assert d[actor + "loss_agg_mode"] == "token-mean" and p.agg == "dapo"
    assert d[actor + "policy_loss.loss_mode"] == "vanilla" and p.level == "token"
    assert p.num_iterations == d[actor + "ppo_epochs"]
    assert p.group_size == d["actor_rollout_ref.rollout.n"]
    assert p.steps_per_rollout == d["data.train_batch_size"] // d[actor + "ppo_mini_batch_size"]
    assert p.advantages["scale"] == ("group" if d["algorithm.norm_adv_by_std_in_grpo"] else "none")


def test_the_openrlhf_preset_is_the_flags():
    d, p = openrlhf_defaults(), gl.presets.PRESETS["openrlhf"]
    assert (p.eps_low, p.eps_high, p.dual_clip) == (d["--actor.eps_clip"],
                                                    d["--actor.eps_clip"], d["--actor.dual_clip"])
    assert d["--algo.kl.use_loss"] is False and p.kl_in == "reward"
    assert (p.beta, p.kl) == (d["--algo.kl.init_coef"], d["--algo.kl.estimator"])
    assert d["--actor.loss_agg_mode"] == "token-mean" and p.agg == "dapo"
    assert d["--actor.policy_loss_type"] == "ppo" and p.level == "token"
    assert p.num_iterations == d["--train.max_epochs"]
    assert p.group_size == d["--rollout.n_samples_per_prompt"]
    assert p.steps_per_rollout == d["--rollout.batch_size"] * p.group_size // d["--train.batch_size"]


# --- behaviour the map states ------------------------------------------------------------------------

def test_verl_with_one_sample_per_prompt_uses_the_raw_score():
    rewards = torch.tensor([[0.3], [1.0], [0.0]], dtype=torch.float64)      # (B, 1)
    adv = tr.verl_advantages(rewards, torch.ones(3, 4, dtype=torch.bool))
    assert np.allclose(adv.numpy(), [0.3 / (1 + 1e-6), 1.0 / (1 + 1e-6), 0.0])


def test_openrlhf_with_one_sample_per_prompt_gives_nan(recwarn):
    adv = tr.openrlhf_baseline(torch.tensor([[0.3], [1.0]], dtype=torch.float64))
    assert torch.isnan(adv).all()


def test_trl_refuses_scale_rewards_mean():
    with pytest.raises(ValueError, match="Invalid value for scale_rewards: mean"):
        tr.trl_advantages(torch.tensor([[1.0], [0.0]], dtype=torch.float64), 2,
                          scale_rewards="mean")
