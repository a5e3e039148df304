"""The bench's probes measure: interleaved timings, and the temporaries a call allocates."""

import numpy as np
import pytest

from grpo_lab.perf import measure


def test_round_robin_warms_up_then_interleaves():
    calls = []
    times = measure.time_round_robin({"a": lambda: calls.append("a"),
                                      "b": lambda: calls.append("b")}, repeats=3)
    assert calls == ["a", "b"] * 4                      # one warm-up round, then three
    assert all(len(t) == 3 and min(t) >= 0 for t in times.values())


def test_numpy_peak_sees_a_temporary():
    def allocate():
        big = np.ones(1 << 20)           # 8 MiB, freed before returning
        return float(big.sum())
    assert 8 << 20 <= measure.peak_bytes_numpy(allocate) < 9 << 20


def test_torch_cpu_peak_sees_a_temporary():
    torch = pytest.importorskip("torch")

    def allocate():
        big = torch.ones(1 << 20, dtype=torch.float64)      # 8 MiB, freed before returning
        return float(big.sum())
    assert 8 << 20 <= measure.peak_bytes_torch(allocate, "cpu") < 9 << 20


def test_rows_are_medians_and_ratios_to_the_copy_of_the_same_round():
    times = {"copy": [1.0, 2.0, 4.0], "slow": [3.0, 4.0, 40.0]}      # ratios 3, 2, 10
    rows = measure.result_rows("b", (2, 3), times, {"slow": 48}, 24, dict.fromkeys(times, "cpu"))
    slow = rows[1]
    assert slow["median_s"] == 4.0 and slow["ratio_to_copy"] == 3.0
    assert slow["peak_extra_bytes"] == 48 and slow["peak_extra_vs_output"] == 2.0
    assert rows[0]["ratio_to_copy"] == 1.0 and rows[0]["peak_extra_vs_output"] is None
