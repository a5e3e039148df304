"""Chapter 8's figures draw what they say: each system's advantages and losses, and process
against outcome supervision."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import grpo_lab as gl  # noqa: E402

W = gl.book.ch08


def test_advantage_bars_are_each_systems_advantages():
    groups = [[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.50001]]
    fig = W.advantages_by_system_figure(groups)
    axes = fig.axes
    assert len(axes) == 2
    for ax, rewards in zip(axes, groups):
        heights = np.array([p.get_height() for p in ax.patches]).reshape(len(gl.presets.PRESETS), 4)
        for row, name in zip(heights, gl.presets.PRESETS):
            expect = gl.group_advantages([rewards], **gl.presets.PRESETS[name].advantages)[0]
            np.testing.assert_allclose(row, expect)
    plt.close(fig)


def test_loss_bars_show_the_numbers_given():
    fig = W.losses_by_system_figure({"trl": 0.2, "verl": -0.1}, {"grpo": 0.3, "dapo": 0.1})
    left, right = fig.axes
    assert [p.get_height() for p in left.patches] == [0.2, -0.1]
    assert [t.get_text() for t in left.get_xticklabels()] == ["TRL", "verl"]
    assert [p.get_height() for p in right.patches] == [0.3, 0.1]
    plt.close(fig)


def test_process_vs_outcome_heat_maps():
    steps = [[1.0, 0.0], [1.0, 1.0]]
    mask = [[1, 1], [1, 0]]
    lengths = [[2, 1], [2, 0]]
    fig = W.process_vs_outcome_figure(steps, mask, lengths, [0.0, 1.0])
    outcome, process = (ax.images[0].get_array() for ax in fig.axes[:2])
    expect = gl.steps_to_tokens(gl.process_advantages([steps], [mask]), [lengths])[0]
    np.testing.assert_allclose(process.filled(np.nan)[0], expect[0])
    assert np.isnan(process.filled(np.nan)[1, 2])                  # padding is blank
    np.testing.assert_allclose(outcome.filled(np.nan)[:, 0],
                               gl.group_advantages([[0.0, 1.0]])[0])
    plt.close(fig)


def test_all_equal_table_and_figure():
    """grpo_lab gives exact zeros to an all-equal group; each line of the figure is a column of
    the table (tests/reference proves the three trainers' columns are their real code)."""
    pytest.importorskip("torch")
    table = W.all_equal_table(values=(0.1, 0.7), sizes=(2, 8), prompts=3)
    assert set(table) == {(0.1, 2), (0.1, 8), (0.7, 2), (0.7, 8)}
    assert all(row["grpo_lab"] == 0.0 for row in table.values())
    assert all(set(row) == {"trl", "verl", "openrlhf", "grpo_lab"} for row in table.values())
    assert all(v == 0.0 for row in (table[(0.1, 2)], table[(0.7, 2)]) for v in row.values())
    fig = W.all_equal_figure(table)
    assert len(fig.axes) == 2
    for ax, value in zip(fig.axes, (0.1, 0.7)):
        lines = {line.get_label(): line.get_ydata() for line in ax.get_lines()}
        for name in ("trl", "verl", "openrlhf", "grpo_lab"):
            np.testing.assert_array_equal(lines[gl.presets.PRESETS[name].system],
                                          [table[(value, G)][name] for G in (2, 8)])
    plt.close(fig)


def test_the_reimplementations_keep_a_spread_group_right():
    """On a group with spread the three re-implementations are each system's formula."""
    torch = pytest.importorskip("torch")
    r = torch.tensor([1.0, 0.0, 0.5, 0.25], dtype=torch.float64)
    for name, f in W.SYSTEM_ADVANTAGES.items():
        expect = gl.group_advantages(r.numpy()[None], **gl.presets.PRESETS[name].advantages)[0]
        np.testing.assert_allclose(f(r, 4).numpy(), expect, rtol=1e-7)
