r"""What the backward pass of a log-prob keeps: the (N, L, V) tensors autograd saves, measured.

Taught in chapter 6b, section "Log-probs and the one-position shift"
(``chapters/06b_real_model.ipynb``). A claim about activation memory is checked, not argued:
``torch.autograd.graph.saved_tensors_hooks`` sees every tensor an operation saves for its
backward, and :func:`saved_logit_tensors` keeps those that carry the vocabulary axis, one per
storage (``gather`` and ``logsumexp`` saving the same input count once).

The measurement, on ``gl.hf.token_logprobs`` and its plain face (run
:func:`logprob_memory_table`):

=====================  ============  =====================================================
form                   tau           (N, L, V) tensors kept for the backward
=====================  ============  =====================================================
plain (log_softmax)    1             1: the log-softmax output (new memory)
hardened               1             1: the logits themselves (no new memory)
hardened               0.7           1: the scaled copy (z - max) / tau (new memory)
hardened, bf16 logits  any           1: a float32 copy, twice the logits' bytes (new)
=====================  ============  =====================================================

So gathering one entry before the logsumexp saves nothing against the plain face at
tau != 1; it avoids one new tensor only at tau = 1, where it keeps the logits the model made.
The saving that matters is not to hold (N, L, V) at all: a chunked LM head (chapter 7; TRL's
fused head), which computes the log-probs chunk by chunk from the hidden states.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.graph import saved_tensors_hooks

from grpo_lab.hf.logprobs import check_logits, token_logprobs, token_logprobs_plain
from grpo_lab.numerics.validate import check_int, check_real, describe

__all__ = ["logprob_memory_table", "saved_logit_tensors"]


def saved_logit_tensors(fn, logits, *args, **kwargs) -> list[dict]:
    """Run ``fn(logits, *args, **kwargs)`` and list the tensors with the logits' last axis
    (V) that autograd saved for the backward pass, one per storage: ``{"shape", "dtype",
    "bytes", "is_logits"}`` (``is_logits``: the storage of ``logits`` itself, which the
    model made anyway; any other is memory the log-prob added).

    >>> import torch, grpo_lab.hf as glh
    >>> z = torch.randn(2, 3, 10, requires_grad=True)
    >>> [t["is_logits"] for t in glh.saved_logit_tensors(glh.token_logprobs, z,
    ...                                                   torch.zeros(2, 3, dtype=torch.long))]
    [True]
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable fn(logits, ...), got {describe(fn)}")
    z = check_logits("logits", logits)
    if not z.requires_grad:
        raise ValueError(f"logits: expected a tensor that requires grad (else nothing is saved "
                         f"for a backward), got {describe(z)}")
    V, seen = z.shape[-1], {}

    def pack(t):
        if t.dim() >= 1 and t.shape[-1] == V and t.numel() >= z.numel():
            key = t.untyped_storage().data_ptr()
            seen.setdefault(key, {"shape": tuple(t.shape), "dtype": str(t.dtype).replace(
                "torch.", ""), "bytes": t.numel() * t.element_size(),
                "is_logits": key == z.untyped_storage().data_ptr()})
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        fn(z, *args, **kwargs)
    return list(seen.values())


def logprob_memory_table(N: int = 4, L: int = 16, V: int = 1000, *, seed: int = 0) -> list[dict]:
    """The table of the module's docstring, measured: for the plain face and the hardened
    ``token_logprobs``, float32 and bfloat16 logits, tau 1 and 0.7, the number of (N, L, V)
    tensors the backward keeps, how many are new memory, and their bytes."""
    N, L, V = (check_int(n, v, minimum=1) for n, v in (("N", N), ("L", L), ("V", V)))
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    base = torch.randn(N, L, V, generator=gen)
    labels = torch.randint(0, V, (N, L), generator=gen)
    forms = {"plain": lambda z, y, tau: token_logprobs_plain(z if tau == 1 else z / tau, y),
             "hardened": lambda z, y, tau: token_logprobs(z, y, temperature=tau)}
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for tau in (1.0, 0.7):
            for form, fn in forms.items():
                z = base.to(dtype).requires_grad_(True)
                saved = saved_logit_tensors(fn, z, labels, check_real("tau", tau, minimum=0.0))
                new = [t for t in saved if not t["is_logits"]]
                rows.append({"form": form, "dtype": str(dtype).replace("torch.", ""),
                             "tau": tau, "saved": len(saved), "new": len(new),
                             "new_bytes": int(np.sum([t["bytes"] for t in new])),
                             "logits_bytes": z.numel() * z.element_size()})
    return rows
