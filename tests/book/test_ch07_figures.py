"""Chapter 7's figures: time against a memory copy, and the roofline. One convention: fig=None
draws a new figure, a given fig is cleared and reused, and the figure is returned."""

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.book import ch07

REPORT = {"results": [
    {"bench": "group_advantages", "shape": [8, 4], "impl": "copy", "ratio_to_copy": 1.0},
    {"bench": "group_advantages", "shape": [8, 4], "impl": "numpy reference (x)",
     "ratio_to_copy": 40.0},
    {"bench": "group_advantages", "shape": [8, 4], "impl": "numpy fast (y)",
     "ratio_to_copy": 5.0},
    {"bench": "fused linear GRPO fwd+bwd", "shape": [2, 3, 4, 5], "impl": "fused",
     "median_s": 0.1}]}                                # no copy: not a bar


def test_figures_draw_and_state_their_finding():
    fig = ch07.ratio_figure(REPORT)
    assert "8x closer" in fig.axes[0].get_title()
    assert len(fig.axes[0].patches) == 2                            # the copy is the axis line
    fig = ch07.roofline_figure(20e9, 100e9, {"a": (0.5, 1e9)})
    assert fig.axes[0].get_xscale() == "log" and "flop per byte" in fig.axes[0].get_xlabel()


def test_ratio_bars_are_the_ratios_to_the_copy():
    fig = ch07.ratio_figure(REPORT)
    ax = fig.axes[0]
    assert sorted(p.get_width() for p in ax.patches) == [5.0, 40.0]
    assert ax.get_xscale() == "log" and "memory copy" in ax.get_xlabel()


def test_the_roof_bends_at_the_ridge_point_and_the_points_sit_where_given():
    bandwidth, peak = 20e9, 100e9                                   # ridge at 5 flop/byte
    fig = ch07.roofline_figure(bandwidth, peak, {"a": (0.5, 1e9)}, title="T")
    ax = fig.axes[0]
    roof, point = ax.get_lines()[0], ax.get_lines()[2]
    np.testing.assert_allclose(roof.get_ydata(),
                               np.minimum(peak, roof.get_xdata() * bandwidth) / 1e9)
    assert ax.get_lines()[1].get_xdata()[0] == pytest.approx(5.0)  # the dotted ridge line
    assert (point.get_xdata()[0], point.get_ydata()[0]) == (0.5, 1.0)  # GFLOP/s
    assert ax.get_title() == "T" and ax.get_ylabel() == "attained GFLOP/s"


def test_a_given_figure_is_cleared_and_reused():
    fig = ch07.roofline_figure(20e9, 100e9, {"a": (0.5, 1e9)})
    assert ch07.ratio_figure(REPORT, fig=fig) is fig
    assert len(fig.axes) == 1 and "closer to the copy" in fig.axes[0].get_title()
    assert ch07.roofline_figure(20e9, 100e9, {}, fig=fig) is fig and len(fig.axes) == 1


@pytest.mark.parametrize("name", ["ratio_figure", "roofline_figure"])
def test_the_old_names_on_roofline_say_where_the_figures_went(name):
    with pytest.raises(AttributeError, match=rf"gl\.book\.ch07\.{name}, which takes fig="):
        getattr(gl.roofline, name)


def test_step_figure_shows_each_stage_share_and_names_the_largest():
    times = {"generation": 0.03, "loss": 0.01, "policy backward": 0.06}
    fig = ch07.step_figure(times)
    ax = fig.axes[0]
    widths = [p.get_width() for p in ax.patches]
    assert widths == pytest.approx([30.0, 10.0, 60.0])              # percent, in stage order
    assert "policy backward takes the most time" in ax.get_title()
    assert "100 ms" in ax.get_xlabel()
    assert ch07.step_figure(times, fig=fig, title="T") is fig and fig.axes[0].get_title() == "T"


def test_decode_figure_marks_the_ridges_and_the_crossovers_the_model_computes():
    from grpo_lab.perf import cost_model as cm
    fig = ch07.decode_figure(64, T=256, prompt_len=64)
    left, right = fig.axes[:2]
    ridges = sorted(line.get_ydata()[0] for line in left.get_lines()
                    if line.get_linestyle() == ":")
    assert ridges == pytest.approx(sorted([cm.ridge_point(gl.roofline.H100_SXM, cm.EFFICIENCY),
                                           cm.ridge_point(gl.roofline.H200_SXM, cm.EFFICIENCY)]))
    context = 64 + cm.completion_lengths(64, 256).mean() / 2
    cross = cm.crossover_batch(cm.QWEN25_7B, gl.roofline.H200_SXM, context, cm.EFFICIENCY)
    assert f"H200 SXM b > {cross:.0f}" in left.get_title()
    # the bars of each GPU add up to the model's step total
    cost = cm.grpo_step_cost(cm.QWEN25_7B, gl.roofline.H100_SXM, prompts=8, G=8, T=256,
                             prompt_len=64)
    h100 = sum(p.get_width() for p in right.patches if p.get_y() + p.get_height() / 2 == 1)
    assert h100 == pytest.approx(sum(cost.values()))
    assert "arithmetic" in right.get_xlabel() and "Rollout" in right.get_title()
    assert ch07.decode_figure(128, T=64, fig=fig) is fig


def test_decode_explorer_is_a_slider_over_the_batch():
    ex = ch07.decode_explorer(64, )
    assert list(ex.controls) == ["batch"] and 64 in ex.controls["batch"].options
    assert ex.controls["batch"].options[0] == 8 and ex.controls["batch"].options[-1] == 1024
