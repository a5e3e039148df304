"""Chapter 6's figure: a run's six curves, drawn from its history alone (no torch needed), with
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
                     "zero_spread": 0.5 - 0.1 * step,
                     "held_out_accuracy": 0.3 * step / 2 if step % 2 == 0 else NAN})
    return rows


def test_title_states_the_start_and_final_held_out_accuracy():
    fig = ch06.training_curves_figure(history())
    assert fig._suptitle.get_text() == "GRPO on addition: held-out accuracy 10% -> 60%"
    assert ch06.training_curves_figure(history(), title="mine")._suptitle.get_text() == "mine"


def test_six_panels_with_labelled_axes_and_the_measured_points_only():
    fig = ch06.training_curves_figure(history())
    assert len(fig.axes) == 6
    assert all(ax.get_xlabel() == "GRPO step" and ax.get_ylabel() for ax in fig.axes)
    train, held = fig.axes[0].get_lines()
    np.testing.assert_allclose(train.get_xdata(), [1, 2, 3, 4])      # step 0 has no sample
    np.testing.assert_allclose(held.get_xdata(), [0, 2, 4])          # evaluated steps only
    np.testing.assert_allclose(held.get_ydata(), [0.1, 0.3, 0.6])
    np.testing.assert_allclose(fig.axes[5].get_lines()[0].get_ydata(), [0.4, 0.3, 0.2, 0.1])


def test_a_given_figure_is_cleared_and_reused():
    fig = ch06.training_curves_figure(history())
    assert ch06.training_curves_figure(history()[:3], fig=fig) is fig
    assert len(fig.axes) == 6 and fig._suptitle.get_text().endswith("10% -> 30%")


def test_the_old_name_on_train_says_where_the_figure_went():
    pytest.importorskip("torch")
    with pytest.raises(AttributeError, match=r"gl\.book\.ch06\.training_curves_figure"):
        gl.train.plot_history  # noqa: B018
