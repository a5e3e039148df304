"""Chapter 6c's dashboard and guide, on the clinic's stored TRL logs (no TRL run)."""

import json
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
from grpo_lab.book import ch06c  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "doctor" / "fixtures"


def log(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_the_dashboard_draws_one_panel_per_metric_and_marks_non_finite_values():
    import matplotlib.pyplot as plt
    fig = ch06c.dashboard_figure(log("nan"), log("nan_healthy"), ("reward", "loss", "kl"),
                                 title="an infinite reward")
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ["reward", "loss", "kl"]
    labels = [line.get_label() for line in visible[0].get_lines()]
    assert labels == ["sick", "sick: non-finite", "healed"]          # inf rewards marked
    healed = visible[0].get_lines()[2].get_ydata()
    assert len(healed) == 12 and np.isfinite(healed).all()
    plt.close(fig)
    with pytest.raises(TypeError, match="keys: expected"):
        ch06c.dashboard_figure(log("nan"), keys="reward", title="x")
    with pytest.raises(TypeError, match="sick: expected TRL's log_history"):
        ch06c.dashboard_figure({"reward": 1}, title="x")


def test_healthy_ranges_span_every_healthy_step_and_moved_by_names_the_sick_runs():
    healthy = [log("truncation_healthy"), log("nan_healthy")]
    ranges = ch06c.healthy_ranges(healthy, ("completions/clipped_ratio", "reward", "absent"))
    clipped = [r["completions/clipped_ratio"] for h in healthy for r in h
               if "completions/clipped_ratio" in r]
    assert ranges["completions/clipped_ratio"] == (min(clipped), max(clipped))
    assert "absent" not in ranges
    sick = {"truncation": log("truncation"), "zero_std": log("zero_std"), "nan": log("nan")}
    moved = ch06c.moved_by("completions/clipped_ratio", sick, ranges)
    assert "truncation" in moved and "zero_std" not in moved
    assert "nan" in ch06c.moved_by("reward", sick, ranges)             # Infinity leaves it


def test_the_guide_has_a_row_per_metric_with_verls_name_and_line():
    ranges = ch06c.healthy_ranges([log("truncation_healthy")], tuple(ch06c.GUIDE))
    table = ch06c.guide_table(ranges, {"truncation": log("truncation")})
    guide, verl = table.split("\n\n")                    # two tables: they fit at 1280 px
    rows, names = guide.splitlines()[2:], verl.splitlines()[2:]
    assert len(rows) == len(names) == len(ch06c.GUIDE)
    row = next(r for r in rows if r.startswith("| `completions/clipped_ratio`"))
    assert "`truncation`" in row
    row = next(r for r in names if r.startswith("| `completions/clipped_ratio`"))
    assert "response_length/clip_ratio" in row and "metric_utils.py:576" in row
