r"""The loss from hidden states, benched: fused (this package), Liger-Kernel's, TRL's, and eager.

Taught in chapter 7 (``chapters/07_performance.ipynb``); :mod:`grpo_lab.perf.bench` calls
:func:`bench_fused_linear`. At (N, T, H, V) = (8, 1024, 512, 65536), float32, a size where every
peer's tiling is active (N*T = 8192 tokens, more than TRL's 4096-token tile; V = 65536, two of
TRL's 32768-column tiles and sixteen of Liger's 4096), one step is the
LM head, the log-probs of the sampled tokens, the GRPO loss (DAPO aggregation, old_logp None,
beta 0: the settings Liger's and this loss share by default) and the backward pass into the
hidden states and the head:

* ``fused``: :func:`grpo_lab.torch.fused_linear.fused_linear_grpo_loss`;
* ``liger``: ``liger_kernel.chunked_loss.LigerFusedLinearGRPOLoss(compiled=False)`` (its
  torch code path, which runs on a CPU), when Liger-Kernel is installed. Liger 0.8.5
  (``liger_kernel/chunked_loss/fused_linear_ppo.py``) computes the gradients in its forward
  pass, a chunk of ``chunk_size`` sequences (default 1) at a time, with
  ``torch.autograd.grad`` on each chunk's loss (line 334); the chunk's log-probs come from
  ``_ChunkedSelectiveLogProbFunction`` (line 136), which streams tiles of 2048 rows x 4096
  vocabulary columns through an online logsumexp (lines 9-10, 35-68) and, in its backward,
  makes each tile of logits again (lines 103-129): four products per token. Every position
  is scored, padding included;
* ``trl``: :func:`trl_linear_grpo_loss`, TRL 1.16.0's own fused LM head: the log-probs from
  ``trl.kernels.ChunkedLogProbFunction`` (what ``trl.trainer.utils::add_fused_lm_head``
  installs on every GRPOTrainer model): tiles of 4096 tokens x 32768 vocabulary columns. On a
  GPU the tiles run in Triton; on a CPU (``_use_triton`` False, what this bench measures
  unless ``--device cuda``) they are folded in torch and every position is scored. Then
  :func:`grpo_lab.torch.grpo_loss`; its backward makes each tile of logits a second time;
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

LINEAR_SIZE = (8, 1024, 512, 65536)             # (N, T, H, V): every peer tiles (issue 36)
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
    """TRL 1.16.0's path: ``trl.kernels.ChunkedLogProbFunction`` as ``add_fused_lm_head``'s
    forward calls it (``trl/trainer/utils.py:1640-1659``), asked for the log-probs only, then
    :func:`grpo_lab.torch.grpo_loss` with old_logp the detached log-probs and beta 0.

    On a Triton device (``_use_triton``) only the valid positions are scored and scattered back;
    elsewhere (a CPU) every one of the N*T rows is, labels clamped at 0, padding zeroed after.
    (GRPOTrainer also asks for the entropy, for its metrics; leaving it out only makes TRL's
    row faster.)"""
    from trl.kernels import ChunkedLogProbFunction
    from trl.kernels.chunked_logprob import _use_triton

    import grpo_lab.torch as glt
    N, T, H = hidden.shape
    compact = _use_triton(hidden.device)
    rows = hidden[mask] if compact else hidden.reshape(N * T, H)        # (n, H)
    labels = ids[mask] if compact else ids.reshape(N * T)               # (n,)
    logp, *_ = ChunkedLogProbFunction.apply(rows, weight, None, labels, 1.0, TRL_CHUNK, None,
                                            1.0, ("log_probs",))           # (n,)
    if compact:
        logp = logp.new_zeros(mask.shape).masked_scatter(mask, logp)    # (N, T)
    else:
        logp = logp.view(N, T).masked_fill(~mask, 0.0)                  # (N, T)
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
    load_start = list(os.getloadavg())                 # the machine's load, with the figures
    torch.set_num_threads(threads)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    inputs = linear_inputs(size, seed, device)
    step = step_function(impl, inputs)
    loss = float(step())                                             # warm-up
    peak = peak_bytes_torch(step, device)
    times, cpu_times = [], []             # wall clock; this process's CPU time (load-proof)
    for _ in range(repeats):
        sync()
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        sync()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return {"bench": "fused linear GRPO fwd+bwd", "shape": list(size), "impl": impl,
            "device": device, "median_s": statistics.median(times), "times_s": times,
            "cpu_times_s": cpu_times,
            "peak_extra_bytes": peak, "loss": loss, "threads": threads,
            "load_average_start": load_start, "load_average_end": list(os.getloadavg())}


def bench_fused_linear(size=LINEAR_SIZE, repeats=3, seed=0, threads=1, impls=IMPLS,
                       device="cpu", jobs=1):
    """Each implementation in a fresh process; their rows (JSON-ready), in ``impls`` order.

    ``jobs`` 1 runs the processes one after the other; ``jobs`` > 1 runs that many side by
    side, so that on a shared machine whose load drifts every peer is measured under the same
    load (each row records the load average when its process started and ended). An
    implementation that cannot run (Liger-Kernel or TRL not installed) gives a row with
    ``error``.
    """
    jobs = check_int("jobs", jobs, minimum=1, maximum=len(impls))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    waiting, running, done = list(impls), {}, {}
    while waiting or running:
        while waiting and len(running) < jobs:
            impl = waiting.pop(0)
            cmd = [sys.executable, "-m", "grpo_lab.perf.bench_linear", impl, *map(str, size),
                   str(repeats), str(seed), str(threads), device]
            running[impl] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True, env=env)
        impl = next(iter(running))
        out, err = running.pop(impl).communicate()
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if not lines:
            tail = (err.strip().splitlines() or ["no output"])[-1]
            done[impl] = {"bench": "fused linear GRPO fwd+bwd", "shape": list(size),
                          "impl": impl, "device": device, "error": tail}
        else:
            done[impl] = json.loads(lines[-1])
    return [done[impl] for impl in impls]


if __name__ == "__main__":   # python -m grpo_lab.perf.bench_linear IMPL N T H V REPEATS SEED THREADS DEV
    impl, *numbers, dev = sys.argv[1:]
    N, T, H, V, repeats, seed, threads = map(int, numbers)
    print(json.dumps(measure_one(impl, (N, T, H, V), repeats, seed, threads, dev)))
