"""Chapter 2's drill checkers (accept right answers, name wrong ones) and figure functions."""

import matplotlib
import numpy as np
import pytest

import grpo_lab as gl

matplotlib.use("Agg")


# --- check_gae ------------------------------------------------------------------------------

def gae_right(rewards, values, gamma, lam):
    T = rewards.shape[-1]
    delta = rewards + gamma * values[..., 1:] - values[..., :-1]
    adv = np.zeros_like(delta)
    running = 0.0
    for t in reversed(range(T)):
        running = delta[..., t] + gamma * lam * running
        adv[..., t] = running
    return adv


def _decay(rewards, values, gamma, lam):
    delta = rewards + gamma * values[..., 1:] - values[..., :-1]
    adv, running = np.zeros_like(delta), 0.0
    for t in reversed(range(rewards.shape[-1])):
        running = delta[..., t] + lam * running                   # gamma missing
        adv[..., t] = running
    return adv


def gae_td_only(rewards, values, gamma, lam):
    return rewards + gamma * values[..., 1:] - values[..., :-1]


def gae_forward(rewards, values, gamma, lam):
    delta = rewards + gamma * values[..., 1:] - values[..., :-1]
    adv, running = np.zeros_like(delta), 0.0
    for t in range(rewards.shape[-1]):
        running = delta[..., t] + gamma * lam * running
        adv[..., t] = running
    return adv


def gae_tuple(rewards, values, gamma, lam):
    adv = gae_right(rewards, values, gamma, lam)
    return adv, adv + values[..., :-1]


def gae_in_place(rewards, values, gamma, lam):
    rewards += 0.0 * rewards
    values[..., -1] = 0.0
    return gae_right(rewards, values, gamma, lam)


def test_check_gae_accepts_the_right_answer_and_the_package(capsys):
    assert gl.drills.check_gae(gae_right)
    assert gl.drills.check_gae(lambda r, v, g, l: gl.gae(r, v, g, l)[0])
    assert capsys.readouterr().out.startswith("PASS: ")


@pytest.mark.parametrize("fn, words", [
    (_decay, "lambda only (gamma missing from the decay)"),
    (gae_td_only, "the TD error alone"),
    (gae_forward, "accumulated forwards in time"),
    (gae_tuple, "it returned a tuple of 2; return only the advantages"),
    (gae_in_place, "it modified an input array"),
    (lambda r, v, g, l: gae_right(r, v, g, l).mean(), "returned shape ()"),
    (lambda r, v, g, l: 1 / 0, "raised ZeroDivisionError"),
])
def test_check_gae_names_the_mistake(fn, words, capsys):
    assert not gl.drills.check_gae(fn)
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and words in out, out


# --- check_clipped_surrogate -------------------------------------------------------------------

def surrogate_right(logp, old_logp, adv, eps=0.2):
    ratio = np.exp(np.clip(logp - old_logp, -20, 20))
    return -np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)


def surrogate_unclamped(logp, old_logp, adv, eps=0.2):
    ratio = np.exp(logp - old_logp)
    return -np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)


def test_check_clipped_surrogate_accepts_the_right_answer_and_the_package(capsys):
    assert gl.drills.check_clipped_surrogate(surrogate_right)
    assert gl.drills.check_clipped_surrogate(
        lambda lp, old, a, eps=0.2: gl.clipped_surrogate_loss(lp, old, a, eps_low=eps))
    assert "PASS: both clip sides" in capsys.readouterr().out


@pytest.mark.parametrize("fn, words", [
    (lambda lp, o, a, eps=0.2: -surrogate_right(lp, o, a), "the sign is flipped"),
    (lambda lp, o, a, eps=0.2: np.minimum(-np.exp(lp - o) * a,
                                          -np.clip(np.exp(lp - o), 0.8, 1.2) * a), "optimistic"),
    (lambda lp, o, a, eps=0.2: -np.clip(np.exp(lp - o), 0.8, 1.2) * a, "only the clipped term"),
    (lambda lp, o, a, eps=0.2: -np.exp(lp - o) * a, "no clipping at all"),
    (lambda lp, o, a, eps=0.2: -np.minimum((lp - o) * a, np.clip(lp - o, 0.8, 1.2) * a),
     "the ratio is logp - old_logp"),
    (lambda lp, o, a, eps=0.2: surrogate_right(lp, o, a).mean(), "returned shape ()"),
    (lambda lp, o, a, eps=0.2: -np.minimum(np.exp(lp - o) * a,
                                           np.clip(np.exp(lp - o), 0.8, 1.2) * a)
     if lp.shape == (1, 5) else surrogate_right(lp, o, a, eps=0.3), "a (4, 6) batch is not"),
    (surrogate_unclamped, "Clamp the log-ratio before exp"),
])
def test_check_clipped_surrogate_names_the_mistake(fn, words, capsys):
    assert not gl.drills.check_clipped_surrogate(fn)
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: ") and words in out, out


# --- figures --------------------------------------------------------------------------------

def test_clip_objective_figure_titles_state_the_bounds():
    fig = gl.widgets.clip_objective_figure(0.2, 0.28, 3.0)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["A > 0: the gain stops at r = 1.28",
                      "A < 0: the penalty stops at r = 0.8 and above r = 3"]
    # the drawn objective is -gl.clipped_surrogate_loss: at r = 4, A = -1 it is -3 (dual-clip)
    line = fig.axes[1].get_lines()[2]
    assert line.get_ydata()[-1] == pytest.approx(-3.0)
    assert gl.widgets.clip_objective_figure(0.1).axes[0].get_title().endswith("r = 1.1")


def test_clip_explorer_redraws_when_a_slider_moves():
    box = gl.widgets.clip_explorer()
    box.controls["eps_high"].value = 0.5
    assert box.figure.axes[0].get_title() == "A > 0: the gain stops at r = 1.5"
    box.controls["use_dual"].value = False
    assert box.controls["dual_clip"].disabled
    assert box.figure.axes[1].get_title() == "A < 0: the penalty stops at r = 0.8"


def test_length_bias_figure_plots_the_aggregation_weights():
    fig = gl.widgets.length_bias_figure(lengths=(2, 8), max_len=8)
    ax_tok, ax_seq = fig.axes
    grpo_tok = ax_tok.get_lines()[0].get_ydata()
    np.testing.assert_allclose(grpo_tok, [1 / 4, 1 / 16])        # 1 / (N * L)
    dapo_seq = ax_seq.get_lines()[1].get_ydata()
    np.testing.assert_allclose(dapo_seq, [2 / 10, 8 / 10])        # L / sum L


def test_gae_figure_draws_one_line_per_lambda():
    fig = gl.widgets.gae_figure([0, 0, 1.0], [0.5, 0.5, 0.5, 0.0], lams=(0.0, 1.0))
    lines = fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), [0, 0, 0.5])
    np.testing.assert_allclose(lines[1].get_ydata(), [0.5, 0.5, 0.5])


def test_learning_curves_figure():
    from dataclasses import replace
    hs = gl.hidden_string
    res = hs.run(replace(hs.TrainConfig(), iterations=2, epochs=1), seeds=range(2),
                 trace_memory=False)
    fig = hs.learning_curves_figure(res)
    assert fig.axes[0].get_title().startswith("Same sample budget; final reward PPO ")
    assert fig.axes[0].get_xlabel().startswith("completions sampled")
