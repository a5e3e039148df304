r"""The loss from hidden states, benched: fused (this package), Liger-Kernel's, TRL's, and eager.

Taught in chapter 7 (``chapters/07_performance.ipynb``); :mod:`grpo_lab.perf.bench` calls
:func:`bench_fused_linear`. At (N, T, H, V) = (8, 512, 512, 32000), float32, one step is the
LM head, the log-probs of the sampled tokens, the GRPO loss (DAPO aggregation, old_logp None,
beta 0: the settings Liger's and this loss share by default) and the backward pass into the
hidden states and the head:

* ``fused``: :func:`grpo_lab.torch.fused_linear.fused_linear_grpo_loss`;
* ``liger``: ``liger_kernel.chunked_loss.LigerFusedLinearGRPOLoss(compiled=False)`` (its
  torch code path, which runs on a CPU), when Liger-Kernel is installed. Liger 0.8.5 also
  computes the gradients in its forward pass, chunk by chunk (``torch.func.grad_and_value``),
  and scores every position, padding included;
* ``trl``: :func:`trl_linear_grpo_loss`, TRL 1.16.0's own fused LM head: the log-probs from
  ``trl.kernels.ChunkedLogProbFunction`` (what ``trl.trainer.utils::add_fused_lm_head``
  installs on every GRPOTrainer model; on a CPU its tiles are folded in torch and every
  position is scored, ``_use_triton`` being False), then :func:`grpo_lab.torch.grpo_loss`;
  its backward makes each tile of logits a second time;
* ``eager``: :func:`eager_linear_grpo_loss`, the (N, T, V) logits, ``log_softmax``, a gather
  and :func:`grpo_lab.torch.grpo_loss`: the unchunked composition (TRL before its fused head).

Each runs in a fresh Python process (``python -m grpo_lab.perf.bench_linear IMPL``), so that
no allocator cache or page left over by another decides its memory. There it runs once (the
warm-up), then once under the profiler for the peak of torch's allocations
(:func:`grpo_lab.perf.measure.peak_bytes_torch`), then ``repeats`` timed times, and prints
one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from grpo_lab.numerics.validate import check_int

__all__ = ["IMPLS", "LINEAR_SIZE", "QUICK_LINEAR_SIZE", "TRL_CHUNK", "bench_fused_linear",
           "eager_linear_grpo_loss", "linear_inputs", "measure_one", "step_function",
           "trl_linear_grpo_loss", "RECORD"]

LINEAR_SIZE = (8, 512, 512, 32000)              # (N, T, H, V), from issue 19
QUICK_LINEAR_SIZE = (4, 64, 64, 2000)
IMPLS = ("fused", "liger", "trl", "eager")
TRL_CHUNK = 32768       # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE: vocabulary columns a tile


def __getattr__(name):
    if name == "RECORD":          # the full-size run, measured once (grpo_lab/perf/linear_record.py)
        from grpo_lab.perf.linear_record import RECORD
        return RECORD
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def eager_linear_grpo_loss(hidden, weight, ids, adv, mask, *, loss_type="dapo"):
    """The eager baseline: all (N, T, V) logits, their log-softmax, the sampled tokens' log-probs,
    then :func:`grpo_lab.torch.grpo_loss` with old_logp the detached log-probs and beta 0."""
    import torch

    import grpo_lab.torch as glt
    logits = hidden @ weight.T                                       # (N, T, V)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[..., None]).squeeze(-1)  # (N, T)
    return glt.grpo_loss(logp, logp.detach(), None, adv, mask, beta=0.0, agg=loss_type)


def trl_linear_grpo_loss(hidden, weight, ids, adv, mask, *, loss_type="dapo"):
    """TRL 1.16.0's path: ``trl.kernels.ChunkedLogProbFunction`` over every position (as
    ``add_fused_lm_head``'s forward calls it off Triton devices: all N*T rows, labels clamped at
    0, padding zeroed after), asked for the log-probs only, then :func:`grpo_lab.torch.grpo_loss`
    with old_logp the detached log-probs and beta 0. (GRPOTrainer also asks for the entropy, for
    its metrics; leaving it out only makes TRL's row faster.)"""
    from trl.kernels import ChunkedLogProbFunction

    import grpo_lab.torch as glt
    N, T, H = hidden.shape
    logp, *_ = ChunkedLogProbFunction.apply(hidden.reshape(N * T, H), weight, None,
                                            ids.reshape(N * T), 1.0, TRL_CHUNK, None, 1.0,
                                            ("log_probs",))             # (N*T,)
    logp = logp.view(N, T).masked_fill(~mask, 0.0)                      # (N, T)
    return glt.grpo_loss(logp, logp.detach(), None, adv, mask, beta=0.0, agg=loss_type)


def linear_inputs(size, seed=0, device="cpu"):
    """Seeded ``(hidden, weight, ids, adv, mask)`` at (N, T, H, V), float32; hidden and weight
    require grad; the mask keeps a prefix of T/4 to T tokens of each row."""
    import torch
    N, T, H, V = size
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    hidden = torch.randn(N, T, H, generator=gen).requires_grad_()    # (N, T, H)
    weight = (H ** -0.5 * torch.randn(V, H, generator=gen)).requires_grad_()   # (V, H)
    ids = torch.randint(0, V, (N, T), generator=gen)                 # (N, T)
    adv = torch.randn(N, generator=gen)                              # (N,)
    lengths = torch.randint(max(1, T // 4), T + 1, (N,), generator=gen)
    mask = torch.arange(T)[None, :] < lengths[:, None]               # (N, T)
    if device != "cpu":
        hidden, weight = (t.detach().to(device).requires_grad_() for t in (hidden, weight))
        ids, adv, mask = (t.to(device) for t in (ids, adv, mask))
    return hidden, weight, ids, adv, mask


def step_function(impl, inputs):
    """A callable that runs one step of ``impl`` (loss, then backward) and returns the loss."""
    hidden, weight, ids, adv, mask = inputs
    if impl == "fused":
        from grpo_lab.torch.fused_linear import fused_linear_grpo_loss

        def loss_fn():
            return fused_linear_grpo_loss(hidden, weight, ids, adv, mask)[0]
    elif impl == "liger":
        from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss
        liger = LigerFusedLinearGRPOLoss(beta=0.0, compiled=hidden.device.type == "cuda",
                                         use_ref_model=False, loss_type="dapo")

        def loss_fn():
            return liger(hidden, weight, ids, mask.long(), adv)[0]
    elif impl == "trl":
        def loss_fn():
            return trl_linear_grpo_loss(hidden, weight, ids, adv, mask)[0]
    elif impl == "eager":
        def loss_fn():
            return eager_linear_grpo_loss(hidden, weight, ids, adv, mask)[0]
    else:
        raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")

    def step():
        hidden.grad = weight.grad = None
        loss = loss_fn()
        loss.backward()
        return loss.detach()
    return step


def measure_one(impl, size, repeats, seed=0, threads=1, device="cpu"):
    """In this process: warm-up, peak, then ``repeats`` timings; a JSON-ready dict.

    The peak is that of torch's allocations (:func:`grpo_lab.perf.measure.peak_bytes_torch`:
    the profiler on CPU, the caching allocator's counter on CUDA).
    """
    import torch

    from grpo_lab.perf.measure import peak_bytes_torch
    torch.set_num_threads(threads)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    inputs = linear_inputs(size, seed, device)
    step = step_function(impl, inputs)
    loss = float(step())                                             # warm-up
    peak = peak_bytes_torch(step, device)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return {"bench": "fused linear GRPO fwd+bwd", "shape": list(size), "impl": impl,
            "device": device, "median_s": statistics.median(times), "times_s": times,
            "peak_extra_bytes": peak, "loss": loss, "threads": threads}


def bench_fused_linear(size=LINEAR_SIZE, repeats=3, seed=0, threads=1, impls=IMPLS,
                       device="cpu"):
    """Each implementation in a fresh process, one after the other; their rows (JSON-ready).

    An implementation that cannot run (Liger-Kernel or TRL not installed) gives a row with
    ``error``.
    """
    rows = []
    for impl in impls:
        cmd = [sys.executable, "-m", "grpo_lab.perf.bench_linear", impl, *map(str, size),
               str(repeats), str(seed), str(threads), device]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({"bench": "fused linear GRPO fwd+bwd", "shape": list(size),
                         "impl": impl, "device": device, "error": tail})
        else:
            rows.append(json.loads(lines[-1]))
    return rows


if __name__ == "__main__":   # python -m grpo_lab.perf.bench_linear IMPL N T H V REPEATS SEED THREADS DEV
    impl, *numbers, dev = sys.argv[1:]
    N, T, H, V, repeats, seed, threads = map(int, numbers)
    print(json.dumps(measure_one(impl, (N, T, H, V), repeats, seed, threads, dev)))
