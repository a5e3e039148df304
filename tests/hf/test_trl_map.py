"""The public mapping from TRL 1.16.0's GRPOConfig to the book's knobs, and the functions the
book lacked (glt token selection): read, refused by name, inverted, plain faces equal."""

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

import grpo_lab.hf as glh  # noqa: E402
from grpo_lab.torch import token_selection as ts  # noqa: E402


def cfg(tmp_path, **fields):
    return trl.GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **fields)


def test_trl_defaults_read_as_the_book_knobs(tmp_path):
    k = glh.trl_knobs(cfg(tmp_path))
    assert (k.surrogate, k.agg, k.level, k.eps_low, k.eps_high, k.beta) == \
        ("clip", "dapo", "token", 0.2, 0.2, 0.0)                # TRL's dapo, beta 0
    assert k.kl_bias_correction and k.scale == "group" and k.is_mode is None
    assert k.advantages == dict(eps=1e-4, ddof=1, scale="group")


def test_delta_becomes_eps_high_and_dual_clip(tmp_path):
    # coef_1 = min(r, delta) in both terms (grpo_trainer.py:3115-3116)
    k = glh.trl_knobs(cfg(tmp_path, epsilon_high=0.28, delta=1.1))
    assert k.eps_high == pytest.approx(0.1) and k.dual_clip == pytest.approx(1.28)
    k = glh.trl_knobs(cfg(tmp_path, epsilon_high=0.28, delta=2.0))
    assert k.eps_high == 0.28 and k.dual_clip == 2.0


def test_cispo_cap_is_epsilon_high_itself(tmp_path):
    assert glh.trl_knobs(cfg(tmp_path, loss_type="cispo", epsilon_high=5.0)).cispo_cap == 5.0
    with pytest.raises(ValueError, match="^epsilon_high:.*3110"):   # TRL's default: cap 0.2
        glh.trl_knobs(cfg(tmp_path, loss_type="cispo"))


@pytest.mark.parametrize("field, value", [("entropy_coef", 0.01), ("sync_ref_model", True),
                                          ("use_adaptive_entropy", True)])
def test_a_field_the_book_does_not_model_is_refused_by_name(tmp_path, field, value):
    with pytest.raises(ValueError, match=f"^{field}:"):
        glh.trl_knobs(cfg(tmp_path, **{field: value}))


def test_sapo_at_the_sequence_level_and_not_a_config_are_refused(tmp_path):
    with pytest.raises(ValueError, match="^importance_sampling_level:"):
        glh.trl_knobs(cfg(tmp_path, loss_type="sapo", importance_sampling_level="sequence"))
    with pytest.raises(TypeError, match="^args:"):
        glh.trl_knobs({"loss_type": "grpo"})


@pytest.mark.parametrize("fields", [
    dict(), dict(loss_type="grpo", beta=0.04, use_bias_correction_kl=False),
    dict(loss_type="luspo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    dict(loss_type="cispo", epsilon_high=5.0), dict(loss_type="vespo", vespo_k_pos=1.5),
    dict(epsilon_high=0.28, delta=1.1), dict(epsilon_high=0.28, delta=3.0),
    dict(scale_rewards="batch", top_entropy_quantile=0.2, mask_truncated_completions=True),
    dict(multi_objective_aggregation="normalize_then_sum", reward_weights=[1.0, 0.5]),
    dict(gradient_accumulation_steps=2, per_device_train_batch_size=4, steps_per_generation=4)])
def test_grpo_config_fields_is_the_inverse(tmp_path, fields):
    k = glh.trl_knobs(cfg(tmp_path, **fields))
    assert glh.trl_knobs(cfg(tmp_path, **glh.grpo_config_fields(k))) == k


def test_step_config_round_trip_and_refusals(tmp_path):
    step = glh.StepConfig.from_preset("trl", beta=0.04, eps_high=0.28, num_iterations=2,
                                      micro_size=16, max_new_tokens=6)
    args = glh.grpo_config(step, output_dir=tmp_path, prompts_per_step=4)
    back = glh.StepConfig.from_grpo_config(args)
    for name in ("group_size", "max_new_tokens", "eps_low", "eps_high", "beta", "kl",
                 "kl_bias_correction", "agg", "advantages", "num_iterations", "micro_size"):
        assert getattr(back, name) == getattr(step, name), name
    with pytest.raises(ValueError, match="^scale_rewards:"):
        glh.StepConfig.from_grpo_config(cfg(tmp_path, scale_rewards="batch"))
    with pytest.raises(ValueError, match="^loss_type:"):
        glh.StepConfig.from_grpo_config(cfg(tmp_path, loss_type="sapo"))


def test_token_selection_plain_faces_equal_the_hardened():
    g = torch.Generator().manual_seed(0)
    h = torch.rand(6, 5, generator=g) * 3
    m = (torch.rand(6, 5, generator=g) > 0.3).float()
    m[:, 0] = 1
    assert torch.equal(ts.high_entropy_mask(h, m, 0.2), ts.high_entropy_mask_plain(h, m, 0.2))
    assert int(ts.high_entropy_mask(h, m, 1.0).sum()) == int(m.sum())
    lp, old = -torch.rand(6, 5, generator=g), -torch.rand(6, 5, generator=g)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, -2.0, 0.0])
    assert torch.equal(ts.off_policy_sequence_mask(adv, lp, old, m, 0.05),
                       ts.off_policy_sequence_mask_plain(adv, lp, old, m, 0.05))
    assert torch.allclose(ts.vespo_weight(lp, old, adv, m),
                          ts.vespo_weight_plain(lp, old, adv, m, 2.0, 3.0, 3.0, 2.0), atol=1e-6)
    # the weight peaks at w = k / lambda and is 1 at w = 1
    assert float(ts.vespo_weight(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1),
                                 torch.ones(1, 2))) == pytest.approx(1.0)
    # no inf or NaN from a huge ratio: TRL's clamps
    big = ts.vespo_weight(torch.full((1, 3), 400.0) * -1e-3, torch.full((1, 3), -900.0),
                          torch.ones(1), torch.ones(1, 3))
    assert torch.isfinite(big).all()


def test_token_selection_refuses_bad_input():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="^quantile:"):
        ts.high_entropy_mask(z, torch.ones(2, 3), 1.5)
    with pytest.raises(ValueError, match="^mask:"):
        ts.high_entropy_mask(z, torch.ones(2, 4), 0.5)
    with pytest.raises(ValueError, match="^adv:"):
        ts.off_policy_sequence_mask(torch.zeros(3), z, z, torch.ones(2, 3), 0.1)
    with pytest.raises(ValueError, match="^delta:"):
        ts.off_policy_sequence_mask(torch.zeros(2), z, z, torch.ones(2, 3), -1.0)
    with pytest.raises(ValueError, match="^lam_pos:"):
        ts.vespo_weight(z, z, torch.zeros(2), torch.ones(2, 3), lam_pos=0.0)
