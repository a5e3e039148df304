"""Chapter 2's figures: GAE, the clipped objective and its explorer, the length bias, and the
PPO vs GRPO learning curves (its drill checkers are proven in tests/drills)."""

import matplotlib
import numpy as np
import pytest

import grpo_lab as gl

matplotlib.use("Agg")


# --- figures --------------------------------------------------------------------------------

def test_clip_objective_figure_titles_state_the_bounds():
    fig = gl.book.ch02.clip_objective_figure(0.2, 0.28, 3.0)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["A > 0: the gain stops at r = 1.28",
                      "A < 0: the penalty stops at r = 0.8 and above r = 3"]
    # the drawn objective is -gl.clipped_surrogate_loss: at r = 4, A = -1 it is -3 (dual-clip)
    line = fig.axes[1].get_lines()[2]
    assert line.get_ydata()[-1] == pytest.approx(-3.0)
    assert gl.book.ch02.clip_objective_figure(0.1).axes[0].get_title().endswith("r = 1.1")


def test_clip_explorer_redraws_when_a_slider_moves():
    box = gl.book.ch02.clip_explorer()
    box.controls["eps_high"].value = 0.5
    assert box.figure.axes[0].get_title() == "A > 0: the gain stops at r = 1.5"
    box.controls["use_dual"].value = False
    assert box.controls["dual_clip"].disabled
    assert box.figure.axes[1].get_title() == "A < 0: the penalty stops at r = 0.8"


def test_length_bias_figure_plots_the_aggregation_weights():
    fig = gl.book.ch02.length_bias_figure(lengths=(2, 8), max_len=8)
    ax_tok, ax_seq = fig.axes
    grpo_tok = ax_tok.get_lines()[0].get_ydata()
    np.testing.assert_allclose(grpo_tok, [1 / 4, 1 / 16])        # 1 / (N * L)
    dapo_seq = ax_seq.get_lines()[1].get_ydata()
    np.testing.assert_allclose(dapo_seq, [2 / 10, 8 / 10])        # L / sum L


def test_gae_figure_draws_one_line_per_lambda():
    fig = gl.book.ch02.gae_figure([0, 0, 1.0], [0.5, 0.5, 0.5, 0.0], lams=(0.0, 1.0))
    lines = fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), [0, 0, 0.5])
    np.testing.assert_allclose(lines[1].get_ydata(), [0.5, 0.5, 0.5])


def test_learning_curves_figure():
    from dataclasses import replace
    hs = gl.hidden_string
    res = hs.run_toy(replace(hs.ToyConfig(), iterations=2, epochs=1), seeds=range(2),
                     trace_memory=False)
    fig = gl.book.ch02.learning_curves_figure(res)
    assert fig.axes[0].get_title().startswith("Same sample budget; final reward PPO ")
    assert fig.axes[0].get_xlabel().startswith("completions sampled")


def test_learning_curves_title_states_each_methods_final_reward():
    samples = np.array([0, 100, 200])
    results = {"ppo": {"samples": samples, "reward": np.array([[0.1, 0.2, 0.3],
                                                               [0.1, 0.2, 0.5]])},
               "grpo": {"samples": samples, "reward": np.array([[0.1, 0.5, 0.9],
                                                                [0.1, 0.6, 0.7]])}}
    ax = gl.book.ch02.learning_curves_figure(results).axes[0]
    assert ax.get_title() == "Same sample budget; final reward PPO 0.40 ± 0.10 vs GRPO 0.80 ± 0.10"
    mean_lines = [line for line in ax.get_lines() if line.get_linewidth() == 2]
    np.testing.assert_allclose(mean_lines[1].get_ydata(), [0.1, 0.55, 0.8])   # GRPO's mean
    assert ax.get_ylim() == (0, 1.02) and "fraction of tokens" in ax.get_ylabel()


def test_learning_curves_moved_out_of_the_toy_task_with_a_message():
    with pytest.raises(AttributeError, match=r"gl\.book\.ch02\.learning_curves_figure"):
        gl.hidden_string.learning_curves_figure  # noqa: B018


def test_clip_explorer_figure_is_the_objective_with_dual_clip_switched():
    on = gl.book.ch02.clip_explorer_figure(0.2, 0.28, 3.0, True)
    off = gl.book.ch02.clip_explorer_figure(0.2, 0.28, 3.0, False)
    assert [ax.get_title() for ax in on.axes] == \
        [ax.get_title() for ax in gl.book.ch02.clip_objective_figure(0.2, 0.28, 3.0).axes]
    assert off.axes[1].get_title() == "A < 0: the penalty stops at r = 0.8"


def test_figures_redraw_into_the_figure_they_are_given():
    fig = gl.book.ch02.gae_figure([0, 1.0], [0.5, 0.5, 0.0])
    assert gl.book.ch02.length_bias_figure(lengths=(2, 8), max_len=8, fig=fig) is fig
    assert len(fig.axes) == 2                     # the old single axis was cleared
    assert gl.book.ch02.clip_objective_figure(0.2, fig=fig) is fig
