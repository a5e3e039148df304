"""The torch mirror costs no more than TRL's way of writing the same thing (issue 13).

Time on a shared machine is noise, so these pin what time follows from and what does not
vary: the peak memory of a call and the bytes its kernels stream (``python -m grpo_lab.bench``
times them, interleaved, and shows the ratios). The loss: within 1.2x of the TRL-style eager
loss in both, forward plus backward. The advantages: less memory than TRL's two-liner, and
fewer full-size tensors written (on CPU a fresh (B, G) tensor costs more than the arithmetic).
"""

import pytest

torch = pytest.importorskip("torch")

import grpo_lab.torch as glt  # noqa: E402
from grpo_lab.perf.baselines import loss_inputs, trl_style_advantages, trl_style_loss  # noqa: E402
from grpo_lab.perf.measure import forward_backward, peak_bytes_torch  # noqa: E402
from grpo_lab.perf.roofline import trace_torch_traffic  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_loss_needs_at_most_1_2x_the_memory_and_traffic_of_trl_style(dtype):
    logp, old, ref, adv, mask = (t.to(dtype) if t.is_floating_point() else t
                                 for t in loss_inputs((128, 2048)))
    leaf = logp.clone().requires_grad_()
    trl, mirror = (forward_backward(fn, leaf, old, ref, adv, mask) for fn in (trl_style_loss, glt.grpo_loss))
    peak_trl, peak_mirror = peak_bytes_torch(trl, "cpu"), peak_bytes_torch(mirror, "cpu")
    assert peak_mirror <= 1.2 * peak_trl, (peak_mirror / peak_trl)
    traffic_trl, traffic_mirror = trace_torch_traffic(trl), trace_torch_traffic(mirror)
    assert traffic_mirror.bytes_moved <= 1.2 * traffic_trl.bytes_moved


@pytest.mark.parametrize("B, G", [(4096, 64), (16384, 8)])
def test_the_advantages_need_less_memory_and_fewer_full_size_tensors_than_trl(B, G):
    rewards = torch.randn(B * G, generator=torch.Generator().manual_seed(0))
    full = rewards.numel() * rewards.element_size()
    trl = lambda: trl_style_advantages(rewards, G)                      # noqa: E731
    mirror = lambda: glt.group_advantages(rewards.view(B, G))           # noqa: E731
    assert peak_bytes_torch(mirror, "cpu") < 0.5 * peak_bytes_torch(trl, "cpu")
    written = [trace_torch_traffic(fn, full_size=full).full_size_outputs for fn in (trl, mirror)]
    assert written[1] < written[0], written
