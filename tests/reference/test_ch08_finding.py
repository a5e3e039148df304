"""Chapter 8's all-equal float32 finding is the trainers' own: ``gl.book.ch08``'s three
re-implementations equal the real code of TRL 1.16.0, verl 0.9.1 and OpenRLHF 0.11.2 bit for
bit, on all-equal groups (the finding) and on random ones, in float32 and float64."""

import numpy as np
import pytest

import grpo_lab as gl
torch = pytest.importorskip("torch")

from tests.reference import trainers as tr  # noqa: E402 (needs torch)

W = gl.book.ch08


def _groups():
    rng = np.random.default_rng(17)
    for dtype in (torch.float32, torch.float64):
        for G in (2, 4, 8, 16):
            for value in (0.1, 0.7, 0.9, 0.3):                       # all equal, not dyadic
                yield f"{dtype}-G{G}-all-{value}", torch.full((2 * G,), value, dtype=dtype), G
            for value in (0.1, 0.7):                                  # one tied group of four
                mixed = torch.from_numpy(rng.choice([0.0, 1.0], size=(4, G))).to(dtype)
                mixed[0] = value
                yield f"{dtype}-G{G}-tied-{value}-in-a-batch", mixed.reshape(-1), G
            for B in (1, 3):
                r = torch.from_numpy(rng.normal(size=B * G)).to(dtype)
                yield f"{dtype}-G{G}-B{B}-random", r, G
                ties = torch.from_numpy(rng.choice([0.1, 0.7, 1.0], size=B * G)).to(dtype)
                yield f"{dtype}-G{G}-B{B}-ties", ties, G


GROUPS = list(_groups())


def _real(name, rewards, G):
    if name == "trl":
        return tr.trl_advantages(rewards[:, None], G)
    if name == "verl":
        mask = torch.ones(rewards.shape[0], 3, dtype=torch.bool)
        return tr.verl_advantages(rewards.reshape(-1, G), mask)
    old = torch.zeros(rewards.shape[0], 3, dtype=rewards.dtype)     # no KL: k1(old, old) = 0
    return tr.openrlhf_advantages(rewards.reshape(-1, G), old, old,
                                  torch.ones(rewards.shape[0], 3, dtype=torch.bool))


@pytest.mark.parametrize("name", ["trl", "verl", "openrlhf"])
@pytest.mark.parametrize("case, rewards, G", GROUPS, ids=[g[0] for g in GROUPS])
def test_the_chapters_reimplementation_is_the_real_code_bit_for_bit(name, case, rewards, G):
    ours = W.SYSTEM_ADVANTAGES[name](rewards.clone(), G)
    real = _real(name, rewards.clone(), G)
    if name == "openrlhf":                                           # (N, T): every token
        assert torch.equal(real, ours[:, None].to(real.dtype).expand_as(real)), case
    else:
        assert ours.dtype == real.dtype and torch.equal(ours, real), (case, ours, real)


def test_the_finding_holds_for_the_real_code_here():
    """On this machine's torch, in a batch of 4 prompts whose first group ties at 0.7 (G = 8),
    the real code gives that group the advantages of the chapter's table: non-zero for all
    three trainers, while grpo_lab gives exact zeros."""
    table = W.all_equal_table(values=(0.7,), sizes=(8,), prompts=4, seed=0)
    row = table[(0.7, 8)]
    batch = np.random.default_rng(0).choice([0.0, 1.0], size=(4, 8))
    batch[0] = 0.7
    r = torch.from_numpy(batch).float().reshape(-1)
    real = {n: float(_real(n, r.clone(), 8)[:8].abs().max()) for n in W.SYSTEM_ADVANTAGES}
    assert real == {n: row[n] for n in W.SYSTEM_ADVANTAGES}
    assert row["grpo_lab"] == 0.0 and all(v > 0 for v in real.values())
