"""Chapter 1's explorer: the figure says what it measured, the sliders redraw it, and the static
site's grid shows the chapter's claims (G matters; the spread divides out under scale='group')."""

import matplotlib
import pytest

import grpo_lab as gl
from grpo_lab.book import ch01, sliders

matplotlib.use("Agg")


def test_advantage_figure_states_the_exact_all_equal_share_and_the_scale():
    fig = ch01.advantage_explorer_figure(G=4, pass_rate=0.9, n_groups=500)
    exact = gl.group_stats.zero_spread_probability(4, 0.9)
    assert f"exact: {100 * exact:.1f}%" in fig._suptitle.get_text()
    assert fig.axes[0].get_title().startswith("G=4:")
    fig2 = ch01.advantage_explorer_figure(G=4, kind="continuous", scale="none",
                                          spread=100.0, n_groups=500)
    assert "scale='none'" in fig2.axes[0].get_xlabel()
    lo, hi = fig2.axes[0].get_xlim()
    assert hi - lo > 100  # advantages in reward units grow with the spread


def test_advantage_explorer_sliders_redraw_the_figure():
    box = ch01.advantage_explorer(G=8)
    fig = box.figure
    assert fig.axes[0].get_title().startswith("G=8:")
    box.controls["G"].value = 32
    assert fig.axes[0].get_title().startswith("G=32:")
    box.controls["kind"].value = "continuous"
    assert box.controls["pass_rate"].disabled
    assert "continuous" in fig._suptitle.get_text()
    before = fig.axes[0].get_xlim()
    box.controls["scale"].value = "none"
    box.controls["spread"].value = 1000.0
    assert fig.axes[0].get_xlim()[1] > 10 * before[1]


def test_advantage_figure_redraws_into_the_figure_it_is_given():
    fig = ch01.advantage_explorer_figure(G=4, n_groups=100)
    assert ch01.advantage_explorer_figure(G=16, n_groups=100, fig=fig) is fig
    assert len(fig.axes) == 2 and fig.axes[0].get_title().startswith("G=16:")


def test_chapter_one_grid_moves_the_figure_with_G_and_with_spread_when_unscaled():
    frames = sliders.render_frames(ch01.advantage_explorer_figure,
                                   {"G": [4, 16], "spread": [1.0, 10.0],
                                    "scale": ["group", "none"]},
                                   {"G": 4, "spread": 1.0, "scale": "group", "n_groups": 300})
    assert frames.frame(G=4, spread=1.0, scale="group") != frames.frame(G=16, spread=1.0,
                                                                       scale="group")
    assert frames.frame(G=4, spread=1.0, scale="none") != frames.frame(G=4, spread=10.0,
                                                                      scale="none")
    # the std divides the spread out: the chapter's claim, visible as one shared frame
    assert frames.frame(G=4, spread=1.0, scale="group") == frames.frame(G=4, spread=10.0,
                                                                       scale="group")


def test_chapter_one_explorer_offers_its_grid_on_the_site():
    box = ch01.advantage_explorer(static=False)
    assert set(ch01.ADVANTAGE_GRID) <= set(box.controls)
    for name, options in ch01.ADVANTAGE_GRID.items():
        assert box.controls[name].value in options, name


@pytest.mark.parametrize("name", ["clip_objective_figure", "gae_figure", "length_bias_figure"])
def test_chapter_two_figures_are_not_in_chapter_one(name):
    assert not hasattr(ch01, name) and callable(getattr(gl.book.ch02, name))
