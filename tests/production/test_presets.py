"""The presets (chapter 8): each preset reproduces the formula of the code it cites, its fields
are grpo_lab options, and default_loss is checked by hand. The knob map: test_knobs.py."""

import numpy as np
import pytest

import grpo_lab as gl

P = gl.presets.PRESETS
ONE_RIGHT = np.array([[1.0, 0.0, 0.0, 0.0]])


# --- the advantages each system's code computes, written out from the cited lines -------------

def _trl(r):        # T2: (r - mean) / (torch.std(r) + 1e-4), torch.std is Bessel's
    return (r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, ddof=1, keepdims=True) + 1e-4)


def _verl(r):       # V2: (r - mean) / (torch.std(r) + epsilon), epsilon = 1e-6
    return (r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, ddof=1, keepdims=True) + 1e-6)


def _openrlhf(r):   # O3: (r - mean) / (r.std(-1) + 1e-9)
    return (r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, ddof=1, keepdims=True) + 1e-9)


@pytest.mark.parametrize("name, formula", [("trl", _trl), ("verl", _verl),
                                           ("openrlhf", _openrlhf)])
def test_preset_advantages_are_the_cited_formula(name, formula):
    rng = np.random.default_rng(0)
    r = np.vstack([ONE_RIGHT, rng.normal(size=(3, 4)), [[0.5, 0.5, 0.5, 0.5 + 1e-5]]])
    # rtol 1e-9: the plain formula loses ~5 digits to cancellation on the last, tiny-spread row
    np.testing.assert_allclose(gl.group_advantages(r, **P[name].advantages), formula(r),
                               rtol=1e-9, atol=1e-15)


def test_one_right_answer_in_four_gets_each_systems_hand_worked_advantage():
    # Bessel std of (1, 0, 0, 0) is 0.5 (population: sqrt(3)/4), the deviation 0.75.
    expect = {"grpo_lab": 0.75 / (np.sqrt(3) / 4 + 1e-8), "trl": 0.75 / 0.5001,
              "verl": 0.75 / (0.5 + 1e-6), "openrlhf": 0.75 / (0.5 + 1e-9)}
    for name, value in expect.items():
        adv = gl.group_advantages(ONE_RIGHT, **P[name].advantages)
        assert adv[0, 0] == pytest.approx(value, rel=1e-12)
        assert adv[0, 1:] == pytest.approx([-value / 3] * 3, rel=1e-12)


def test_a_tiny_spread_is_where_the_eps_conventions_part():
    # std 5e-6: TRL's 1e-4 shrinks the advantages 21-fold, OpenRLHF's 1e-9 keeps them whole.
    r = np.array([[0.5, 0.5, 0.5, 0.5 + 1e-5]])
    top = {n: gl.group_advantages(r, **P[n].advantages)[0, 3] for n in ("trl", "openrlhf")}
    assert top["openrlhf"] == pytest.approx(1.5, rel=1e-3)
    assert top["trl"] == pytest.approx(7.5e-6 / (5e-6 + 1e-4), rel=1e-3)   # 0.0714


# --- the presets are well formed --------------------------------------------------------------

@pytest.mark.parametrize("name", list(P))
def test_preset_fields_are_grpo_lab_options(name):
    p = P[name]
    assert p.name == name
    gl.group_advantages(ONE_RIGHT, **p.advantages)                  # accepted as keywords
    assert p.agg in gl.AGGREGATIONS and p.level in gl.LEVELS
    assert p.kl in ("k1", "k2", "k3") and p.kl_in in ("loss", "reward", "off")
    assert (p.beta == 0.0) == (p.kl_in == "off" or name == "trl")
    assert 0 < p.eps_low <= 1 and p.eps_high >= p.eps_low
    assert p.dual_clip is None or p.dual_clip > 1
    assert p.num_iterations >= 1
    assert p.sources and all(k in gl.presets.SOURCES for k in p.sources)
    assert p.version.count("\n") == len(p.sources) - 1


def test_the_systems_differ_in_eps_aggregation_dual_clip_and_kl_placement():
    # The differences the chapter measures; a change here must be a deliberate re-read.
    assert [P[n].advantages["eps"] for n in ("trl", "verl", "openrlhf")] == [1e-4, 1e-6, 1e-9]
    assert all(P[n].advantages["ddof"] == 1 for n in ("trl", "verl", "openrlhf"))
    # All three count the tokens of the whole optimiser step: TRL's dapo (issue 17).
    assert (P["trl"].agg, P["verl"].agg, P["openrlhf"].agg) == ("dapo", "dapo", "dapo")
    assert (P["trl"].group_size, P["verl"].group_size, P["openrlhf"].group_size) == (8, 1, 1)
    assert (P["trl"].steps_per_rollout, P["verl"].steps_per_rollout,
            P["openrlhf"].steps_per_rollout) == (1, 4, 8)           # only TRL is on-policy
    assert P["trl"].kl_bias_correction and not P["verl"].kl_bias_correction
    assert P["verl"].dual_clip == 3.0 and P["trl"].dual_clip is None
    assert (P["trl"].kl_in, P["verl"].kl_in, P["openrlhf"].kl_in) == ("loss", "off", "reward")


# --- default_loss by hand ---------------------------------------------------------------------

def test_grpo_lab_steps_per_rollout_and_map_row_follow_chapter_6s_loop():
    # Chapter 6's loop is gl.train with TrainConfig's defaults: its inner_iters, beta and
    # eps_high are what the preset and the map's grpo_lab cell must state (issue 41).
    pytest.importorskip("torch")
    from grpo_lab.rl.train_config import TrainConfig
    cfg = TrainConfig()
    assert P["grpo_lab"].steps_per_rollout == cfg.inner_iters
    row = next(r for r in gl.presets.KNOB_MAP if r.concept.startswith("Optimiser steps"))
    text = row.grpo_lab[0]                                         # (text, citations)
    for field in (f"`inner_iters={cfg.inner_iters}`", f"`beta={cfg.beta}`",
                  f"`eps_high={cfg.eps_high}`"):
        assert field in text, (field, text)
    assert (P["grpo_lab"].beta, P["grpo_lab"].eps_high) != (cfg.beta, cfg.eps_high)


def test_default_loss_on_policy_is_the_aggregated_minus_advantage():
    logp = np.full((2, 3), -1.0)                       # ratio 1 everywhere
    mask = np.array([[1, 0, 0], [1, 1, 1]])
    a = 0.5 / (np.sqrt(0.5) + 1e-4)                    # TRL's advantage of the right answer
    assert gl.presets.default_loss("trl", [[1.0, 0.0]], logp, logp, mask) == \
        pytest.approx((-a + 3 * a) / 4, rel=1e-12)    # dapo: every token counts once
    b = 0.5 / (np.sqrt(0.5) + 1e-6)
    assert gl.presets.default_loss("verl", [[1.0, 0.0]], logp, logp, mask) == \
        pytest.approx((-b + 3 * b) / 4, rel=1e-12)    # token-mean
    c = 0.5 / (0.5 + 1e-8)                             # population std 0.5
    ref = logp - 0.1                                   # k3 of a 0.1 log-ratio, beta 0.04
    k3 = np.exp(-0.1) + 0.1 - 1
    assert gl.presets.default_loss("grpo_lab", [[1.0, 0.0]], logp, logp, mask, ref_logp=ref) == \
        pytest.approx((-c + c) / 2 + 0.04 * k3, rel=1e-12)   # grpo: mean per row, then rows


def test_verl_dual_clip_caps_a_runaway_negative_token():
    # One wrong answer's token has ratio 5: -A * 5 without dual-clip, -A * 3 with verl's c = 3.
    old = np.zeros((2, 1))
    logp = np.log([[1.0], [5.0]])
    mask = np.ones((2, 1))
    a_trl, a_verl = 0.5 / (np.sqrt(0.5) + 1e-4), 0.5 / (np.sqrt(0.5) + 1e-6)
    trl = gl.presets.default_loss("trl", [[1.0, 0.0]], logp, old, mask)
    verl = gl.presets.default_loss("verl", [[1.0, 0.0]], logp, old, mask)
    assert trl == pytest.approx((-a_trl + 5 * a_trl) / 2, rel=1e-12)
    assert verl == pytest.approx((-a_verl + 3 * a_verl) / 2, rel=1e-12)


def test_openrlhf_kl_in_the_reward_lowers_the_reward_to_go_of_earlier_tokens():
    # k1 = old - ref = 1 on the first token of row 0: its reward-to-go gains -0.01 at t = 0.
    # Ratio 1, token-mean: -(A - 0.01 + A - A - A) / 4 = 0.0025.
    logp = np.zeros((2, 2))
    ref = np.array([[-1.0, 0.0], [0.0, 0.0]])
    loss = gl.presets.default_loss("openrlhf", [[1.0, 0.0]], logp, logp, np.ones((2, 2)),
                                   ref_logp=ref)
    assert loss == pytest.approx(0.0025, abs=1e-15)


def test_openrlhf_kl_is_clamped_to_ten():
    # k1 = 50 is clamped to 10 (O4): the first token's advantage drops by 0.01 * 10 = 0.1.
    logp = np.zeros((2, 1))
    ref = np.array([[-50.0], [0.0]])
    loss = gl.presets.default_loss("openrlhf", [[1.0, 0.0]], logp, logp, np.ones((2, 1)),
                                   ref_logp=ref)
    assert loss == pytest.approx(0.1 / 2, rel=1e-12)


@pytest.mark.parametrize("args, kwargs, error, words", [
    (("nemo", [[1.0, 0.0]]), {}, ValueError, "name: expected one of 'grpo_lab', 'trl'"),
    (("openrlhf", [[1.0, 0.0]]), {}, ValueError, "ref_logp: expected an (N, T) array"),
    (("trl", [[1.0, 0.0, 1.0]]), {}, ValueError, "rewards: expected B*G = 2 rewards"),
    (("trl", [[1.0, 0.0]]), {"ref_logp": np.zeros((2, 2))}, ValueError,
     "ref_logp: expected shape (2, 3)"),
])
def test_default_loss_error_names_the_bad_argument(args, kwargs, error, words):
    logp = np.zeros((2, 3))
    with pytest.raises(error) as info:
        gl.presets.default_loss(*args, logp, logp, np.ones((2, 3)), **kwargs)
    assert words in str(info.value)


def test_default_loss_refuses_a_mask_of_another_shape():
    logp = np.zeros((2, 3))
    with pytest.raises(ValueError, match="mask: expected shape"):
        gl.presets.default_loss("trl", [[1.0, 0.0]], logp, logp, np.ones((2, 2)))


def test_default_loss_refuses_old_logp_of_another_shape():
    logp = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"old_logp: expected shape \(2, 3\) \(the shape of logp"):
        gl.presets.default_loss("trl", [[1.0, 0.0]], logp, np.zeros((2, 2)), np.ones((2, 3)))
    with pytest.raises(TypeError, match="old_logp: expected a numeric array"):
        gl.presets.default_loss("trl", [[1.0, 0.0]], logp, None, np.ones((2, 3)))


def test_default_loss_shows_one_check_then_the_steps():
    """The source chapter 8 shows: one validation call, then the steps, no private name."""
    import inspect

    body = inspect.getsource(gl.presets.default_loss).split('"""')[-1]
    lines = [line.strip() for line in body.strip().splitlines()]
    assert lines[0].startswith("p, r, lp, old, m, ref = check_default_loss_arguments(")
    assert len(lines) <= 16
    assert not any(word.startswith("_") for line in lines
                   for word in line.replace("(", " ").replace(".", " ").split())
