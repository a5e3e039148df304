"""Chapter 7's helpers: roofline arithmetic and traffic counts (its figures are tested in
tests/book/test_ch07_figures.py, its drill checkers in tests/drills/test_ch07_drills.py)."""

import numpy as np
import pytest

from grpo_lab.perf import roofline as rl


def test_roof_is_bandwidth_bound_below_the_ridge_and_flat_above():
    bandwidth, peak = 100e9, 1e12                                   # ridge at 10 flop/byte
    assert rl.attainable(1.0, peak, bandwidth) == pytest.approx(100e9)
    assert rl.attainable(100.0, peak, bandwidth) == pytest.approx(1e12)
    assert rl.attainable(10.0, peak, bandwidth) == pytest.approx(1e12)


def test_minimal_bytes():
    assert rl.advantages_min_bytes(262144, 64) == 2 * 262144 * 64 * 4       # 128 MiB
    # 3 float32 log-probs + a bool mask in, a float32 gradient out, per token; adv per row
    assert rl.loss_min_bytes(2, 3) == 2 * 3 * 17 + 2 * 4


def test_trace_counts_the_ops_and_bytes_of_eager_torch():
    torch = pytest.importorskip("torch")
    x = torch.ones(1000, dtype=torch.float32)

    def two_ops():
        return (x + 1.0) * 2.0
    count = rl.trace_torch_traffic(two_ops, full_size=4000)
    assert count.ops == 2 and count.full_size_outputs == 2
    assert count.bytes_read == 2 * 4000 and count.bytes_written == 2 * 4000


def test_eager_loss_moves_far_more_than_the_minimum():
    torch = pytest.importorskip("torch")
    import grpo_lab.torch as glt
    from grpo_lab.perf.baselines import loss_inputs
    logp, old, ref, adv, mask = loss_inputs((16, 64), "cpu")
    leaf = logp.clone().requires_grad_()

    def step():
        loss, _ = glt.grpo_loss(leaf, old, ref, adv, mask)
        loss.backward()
    count = rl.trace_torch_traffic(step, full_size=logp.numel() * 4)
    assert count.full_size_outputs > 20
    assert count.bytes_moved > 10 * rl.loss_min_bytes(16, 64)


def test_matmul_flops_is_positive_and_finite():
    flops = rl.measure_matmul_flops(n=64, repeats=2)
    assert np.isfinite(flops) and flops > 0


@pytest.mark.parametrize("call, name", [
    (lambda: rl.attainable(None, 1e12, 1e11), "intensity"),
    (lambda: rl.attainable([1.0, float("nan")], 1e12, 1e11), "intensity"),
    (lambda: rl.attainable([-1.0], 1e12, 1e11), "intensity"),
    (lambda: rl.attainable(1.0, "fast", 1e11), "peak_flops"),
    (lambda: rl.attainable(1.0, 1e12, 0.0), "bandwidth"),
    (lambda: rl.advantages_min_bytes(0, 8), "B"),
    (lambda: rl.advantages_min_bytes(4, 2.5), "G"),
    (lambda: rl.advantages_min_bytes(4, 8, itemsize=None), "itemsize"),
    (lambda: rl.loss_min_bytes(-1, 8), "N"),
    (lambda: rl.loss_min_bytes(4, "8"), "T"),
    (lambda: rl.loss_min_bytes(4, 8, per_sequence_adv="yes"), "per_sequence_adv"),
])
def test_roofline_arguments_are_checked_by_name(call, name):
    with pytest.raises((TypeError, ValueError), match=rf"^{name}:"):
        call()
