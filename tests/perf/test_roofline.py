"""Chapter 7's helpers: roofline arithmetic, traffic counts, figures, and the two drill checkers."""

import matplotlib
import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.perf import roofline as rl

matplotlib.use("Agg")


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
    from grpo_lab import loss_fused as lf
    from grpo_lab.perf.bench import _loss_inputs
    logp, old, ref, adv, mask = _loss_inputs((16, 64), "cpu")
    leaf = logp.clone().requires_grad_()

    def step():
        loss, _ = lf.grpo_loss_eager(leaf, old, ref, adv, mask)
        loss.backward()
    count = rl.trace_torch_traffic(step, full_size=logp.numel() * 4)
    assert count.full_size_outputs > 20
    assert count.bytes_moved > 10 * rl.loss_min_bytes(16, 64)


def test_matmul_flops_is_positive_and_finite():
    flops = rl.measure_matmul_flops(n=64, repeats=2)
    assert np.isfinite(flops) and flops > 0


def test_figures_draw_and_state_their_finding():
    report = {"results": [
        {"bench": "group_advantages", "shape": [8, 4], "impl": "copy", "ratio_to_copy": 1.0},
        {"bench": "group_advantages", "shape": [8, 4], "impl": "numpy reference (x)",
         "ratio_to_copy": 40.0},
        {"bench": "group_advantages", "shape": [8, 4], "impl": "numpy fast (y)",
         "ratio_to_copy": 5.0}]}
    fig = rl.ratio_figure(report)
    assert "8x closer" in fig.axes[0].get_title()
    assert len(fig.axes[0].patches) == 2                            # the copy is the axis line
    fig = rl.roofline_figure(20e9, 100e9, {"a": (0.5, 1e9)})
    assert fig.axes[0].get_xscale() == "log" and "flop per byte" in fig.axes[0].get_xlabel()


# --- drill checkers: the solution passes, the classic mistakes do not --------------------------

def blocked(rewards, block_rows):
    out = np.empty_like(rewards)
    for r0 in range(0, rewards.shape[0], block_rows):
        x = rewards[r0:r0 + block_rows].astype(np.float64)
        x -= x[:, :1]
        dev = x - x.mean(axis=1, keepdims=True)
        out[r0:r0 + block_rows] = dev / (np.sqrt((dev * dev).mean(axis=1, keepdims=True)) + 1e-8)
    return out


def test_blocked_drill(capsys):
    assert gl.drills.check_blocked_advantages(blocked)
    assert not gl.drills.check_blocked_advantages(lambda r, b: gl.group_advantages(r))
    assert "peak memory" in capsys.readouterr().out
    assert not gl.drills.check_blocked_advantages(lambda r, b: blocked(r.astype(np.float64), b))
    assert "float32 rewards give float32" in capsys.readouterr().out
    assert not gl.drills.check_blocked_advantages(
        lambda r, b: blocked(r, b) * (1 + 1e-3))


def surrogate_grad(ratio, adv, eps_low, eps_high):
    clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return np.where(clipped, 0.0, -adv * ratio)


def test_surrogate_grad_drill(capsys):
    assert gl.drills.check_surrogate_grad(surrogate_grad)
    assert not gl.drills.check_surrogate_grad(lambda r, a, lo, hi: -a * r)
    assert "no clipping" in capsys.readouterr().out
    assert not gl.drills.check_surrogate_grad(lambda r, a, lo, hi: -surrogate_grad(r, a, lo, hi))
    assert "sign is flipped" in capsys.readouterr().out
