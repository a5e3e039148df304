"""Chapter 7's drill checkers: the solution passes, the classic mistakes do not."""

import numpy as np

import grpo_lab as gl


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
