"""Chapter 6's figures: a run's eight curves, drawn from its history alone (no torch needed), with
a title that states the held-out accuracy at the start and at the last evaluation."""

import math

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.book import ch06

NAN = math.nan


def history():
    """Step 0 is the start after the warm-up (no GRPO metrics yet); held-out every 2 steps."""
    rows = [{"step": 0, "held_out_accuracy": 0.1, "held_out_format": 0.9}]
    for step in range(1, 5):
        rows.append({"step": step, "reward": 0.5 + 0.1 * step, "train_accuracy": 0.1 * step,
                     "format": 1.0, "length": 6.0, "clip_frac": 0.01 * step, "kl": 0.001 * step,
                     "zero_spread": 0.5 - 0.1 * step, "entropy": 0.4 - 0.05 * step,
                     "kl_max": 0.01 * step, "approx_kl": 0.002,
                     "held_out_accuracy": 0.3 * step / 2 if step % 2 == 0 else NAN})
    return rows


def test_title_states_the_start_and_final_held_out_accuracy():
    fig = ch06.training_curves_figure(history())
    assert fig._suptitle.get_text() == "GRPO on addition: held-out accuracy 10% -> 60%"
    assert ch06.training_curves_figure(history(), title="mine")._suptitle.get_text() == "mine"


def test_eight_panels_with_labelled_axes_and_the_measured_points_only():
    fig = ch06.training_curves_figure(history())
    assert len(fig.axes) == 8
    assert all(ax.get_xlabel() == "GRPO step" and ax.get_ylabel() for ax in fig.axes)
    train, held = fig.axes[0].get_lines()
    np.testing.assert_allclose(train.get_xdata(), [1, 2, 3, 4])      # step 0 has no sample
    np.testing.assert_allclose(held.get_xdata(), [0, 2, 4])          # evaluated steps only
    np.testing.assert_allclose(held.get_ydata(), [0.1, 0.3, 0.6])
    by_label = {ax.get_ylabel(): ax for ax in fig.axes}
    np.testing.assert_allclose(by_label["entropy (nats per token)"].get_lines()[0].get_ydata(),
                               [0.35, 0.3, 0.25, 0.2])
    np.testing.assert_allclose(by_label["groups with zero spread"].get_lines()[0].get_ydata(),
                               [0.4, 0.3, 0.2, 0.1])
    kl = by_label["KL to reference (nats)"]
    assert kl.get_yscale() == "log" and len(kl.get_lines()) == 2   # the mean and the largest


def test_compare_runs_draws_one_line_per_run_and_panel_per_metric():
    a, b = history(), [{**h, "entropy": 0.1} for h in history()]
    fig = ch06.compare_runs_figure({"healthy": a, "collapse": b},
                                   ("held_out_accuracy", "entropy"))
    assert len(fig.axes) == 2
    held, ent = fig.axes
    assert [line.get_label() for line in held.get_lines()] == ["healthy", "collapse"]
    np.testing.assert_allclose(held.get_lines()[0].get_xdata(), [0, 2, 4])
    np.testing.assert_allclose(ent.get_lines()[1].get_ydata(), [0.1] * 5)
    assert ent.get_ylabel() == "entropy (nats/token)"


def test_a_given_figure_is_cleared_and_reused():
    fig = ch06.training_curves_figure(history())
    assert ch06.training_curves_figure(history()[:3], fig=fig) is fig
    assert len(fig.axes) == 8 and fig._suptitle.get_text().endswith("10% -> 30%")


def test_the_old_name_on_train_says_where_the_figure_went():
    pytest.importorskip("torch")
    with pytest.raises(AttributeError, match=r"gl\.book\.ch06\.training_curves_figure"):
        gl.train.plot_history  # noqa: B018
