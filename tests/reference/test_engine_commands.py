"""Every command or config the book prints for another engine, checked by that engine's code.

Issue 36, item 3. Chapter 6b's "How it scales" prints:

- the verl command (``gl.engines.VERL_OVERRIDES``): composed with verl 0.9.1's own Hydra config
  and passed through its ``validate_config`` (``verl_config.compose``); the updates per rollout
  batch, the KL estimator and the IS correction read from the composed config equal what the
  chapter states and what the TRL twin (``gl.engines.TRL_TWIN``) does;
- TRL's accelerate configs for ZeRO-3 and FSDP2, read by accelerate's own config loader;
- every ``GRPOConfig`` field the chapters name, looked up in TRL 1.16.0's dataclass.

The chapter's three settled points rest here too: without the two log-prob micro-batch sizes
``validate_config`` refuses the config, and verl's own ``kl_penalty`` gives ``low_var_kl+`` the
gradient of TRL's ratio-weighted k3, where ``low_var_kl`` has another.
"""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

import grpo_lab as gl
from tests.reference import trainers, verl_config

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def composed():
    return verl_config.compose(gl.engines.VERL_OVERRIDES)


def test_the_chapters_verl_command_passes_verls_validate_config(composed):
    assert composed["ok"], composed.get("error")
    assert composed["use_reference_policy"] and not composed["use_critic"]


def test_the_old_command_fails_verls_check_as_the_issue_found():
    """Without the two log-prob micro-batch sizes, verl 0.9.1 refuses the config: the check
    can fail, and fails for the reason the outside read gave."""
    old = [o for o in gl.engines.VERL_OVERRIDES if "log_prob_micro_batch_size" not in o[0]]
    verdict = verl_config.compose(old)
    assert not verdict["ok"]
    assert "log_prob_micro_batch_size" in verdict["error"]


def test_one_update_per_rollout_batch_as_the_trl_twin(composed):
    c = composed["config"]
    updates = gl.engines.verl_updates_per_rollout(c["train_batch_size"], c["ppo_mini_batch_size"],
                                                  c["ppo_epochs"])
    twin = gl.engines.TRL_TWIN
    assert updates == 1 == twin["num_iterations"] * twin["steps_per_generation"]
    assert c["rollout_n"] == twin["num_generations"]
    # the rollout batch in sequences equals TRL's generation batch over the 16 processes
    assert (c["train_batch_size"] * c["rollout_n"]
            == twin["per_device_train_batch_size"] * c["n_gpus"] * twin["steps_per_generation"])
    # verl's default batch with the chapter's old mini-batch of 16 prompts: 64 updates
    assert gl.engines.verl_updates_per_rollout(1024, 16, 1) == 64


def test_the_loss_settings_match_the_trl_twin(composed):
    c, twin = composed["config"], gl.engines.TRL_TWIN
    assert c["adv_estimator"] == "grpo" and c["norm_adv_by_std_in_grpo"] is True
    assert twin["scale_rewards"] == "group"
    assert c["loss_agg_mode"] == "token-mean" and twin["loss_type"] == "dapo"
    assert (c["clip_ratio_low"], c["clip_ratio_high"]) == (twin["epsilon"], twin["epsilon_high"])
    assert c["use_kl_loss"] and c["kl_loss_coef"] == twin["beta"]
    assert c["kl_loss_type"] == "low_var_kl+" and twin["use_bias_correction_kl"]
    rc = c["rollout_correction"]
    assert rc["rollout_is"] == "sequence" and float(rc["rollout_is_threshold"]) == 3.0
    assert rc["rollout_rs"] is None and rc["bypass_mode"] is False   # old_logp recomputed
    assert twin["vllm_importance_sampling_mode"] == "sequence_truncate"
    assert twin["vllm_importance_sampling_clip_max"] == 3.0


def test_trls_bias_corrected_k3_has_the_gradient_of_verls_low_var_kl_plus():
    """TRL's default KL (``use_bias_correction_kl=True``): ratio x k3 with the ratio
    pi_theta / pi_old carrying the gradient; verl's ``low_var_kl+``: k3's value with k2's
    gradient. With one update per batch (ratio 1) their values and per-token gradients agree;
    verl's plain ``low_var_kl`` has another gradient."""
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(6, 9, generator=gen, dtype=torch.float64) * 0.5 - 2
    base = torch.randn(6, 9, generator=gen, dtype=torch.float64) * 0.5 - 2
    core = trainers.verl_core()

    def grad(fn):
        logp = base.clone().requires_grad_(True)
        value = fn(logp)
        value.sum().backward()
        return value.detach(), logp.grad

    def trl(logp):               # grpo_trainer.py: per_token_kl * coef_1, coef_1 = exp(logp - old)
        k3 = torch.exp(ref - logp) - (ref - logp) - 1
        return k3 * torch.exp(logp - logp.detach())

    v_trl, g_trl = grad(trl)
    v_plus, g_plus = grad(lambda lp: core.kl_penalty(lp, ref, "low_var_kl+"))
    v_k3, g_k3 = grad(lambda lp: core.kl_penalty(lp, ref, "low_var_kl"))
    np.testing.assert_allclose(v_trl, v_plus, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g_trl, g_plus, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g_plus, base - ref, rtol=1e-12, atol=1e-12)   # k2's gradient
    assert (g_k3 - g_trl).abs().max() > 1e-2                                # low_var_kl's is not


def test_trls_accelerate_configs_parse_as_the_chapter_says():
    from accelerate.commands.config.config_args import load_config_from_file
    import trl

    folder = Path(trl.__file__).parent / "accelerate_configs"
    zero3 = load_config_from_file(str(folder / "zero3.yaml"))
    assert str(zero3.distributed_type).endswith("DEEPSPEED")
    assert zero3.deepspeed_config["zero_stage"] == 3
    assert zero3.deepspeed_config["zero3_init_flag"] is True
    assert str(zero3.mixed_precision).endswith("bf16")
    fsdp2 = load_config_from_file(str(folder / "fsdp2.yaml"))
    assert str(fsdp2.distributed_type).endswith("FSDP")
    fsdp = fsdp2.fsdp_config
    assert int(fsdp["fsdp_version"]) == 2
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_reshard_after_forward"] is True
    assert str(fsdp2.mixed_precision).endswith("bf16")


def _chapter_text(name):
    nb = json.loads((ROOT / "chapters" / name).read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"])


GRPOCONFIG_CALL = re.compile(r"GRPOConfig\((.*?)\)", re.S)


def test_every_grpoconfig_field_the_chapters_write_exists_in_trl():
    """Keyword arguments inside a ``GRPOConfig(...)`` the chapters print, and the back-quoted
    ``name=...`` settings they attribute to it, are fields of TRL 1.16.0's GRPOConfig."""
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    named = set()
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for call in GRPOCONFIG_CALL.findall(_chapter_text(path.name)):
            named.update(re.findall(r"\b([a-z_][a-z0-9_]*)\s*=", call))
    assert named, "no GRPOConfig(...) found in the chapters: the scan is broken"
    assert named <= fields, f"not GRPOConfig fields in TRL 1.16.0: {sorted(named - fields)}"
    assert "padding_free" not in fields                      # SFTConfig's, not GRPOConfig's
