r"""The frozen reference model, and ``old_logp`` recomputed by the trainer beside the sampler's.

Taught in chapter 6b, sections "The reference model" and "`old_logp`, the sampler's log-probs
and the IS correction" (``chapters/06b_real_model.ipynb``).

A GRPO step needs the sampled tokens' log-probs under three policies:

==========  ===============================  ===============================================
Name        Computed by                      Used for
==========  ===============================  ===============================================
logp        the policy, with gradient        the ratio's numerator: what the step changes
old_logp    the policy before the step,      the ratio's denominator. With one update per
            no gradient                      batch (TRL's ``num_iterations=1``) it equals
                                             ``logp.detach()`` and TRL skips computing it
ref_logp    the frozen reference, no grad    the KL penalty (only when beta > 0)
==========  ===============================  ===============================================

and a fourth, ``sampler_logp``, from the engine that drew the tokens (:func:`grpo_lab.hf.sample`
here, vLLM in production). The trainer does not reuse it as ``old_logp``: it was computed by
another program (a KV cache, other kernels, often bf16), and the ratio must compare the policy
with itself. The gap between the two is measured by :func:`logp_mismatch` and corrected by
:mod:`grpo_lab.hf.importance`.

The reference, in production, is either a second copy of the initial weights (what
:func:`frozen_copy` makes, and what TRL loads from ``config._name_or_path``), or, when the
policy is trained with LoRA, the same network with its adapters disabled (TRL:
``use_adapter(model, adapter_name=None)`` around the forward pass): no second copy at all.
"""

from __future__ import annotations

import torch
from grpo_lab.hf.batch import Completions
from grpo_lab.hf.checks import check_ids, check_model, check_vocab
from grpo_lab.hf.logprobs import completion_logprobs_math
from grpo_lab.numerics.validate import as_float_array, as_mask, check_real, check_shape, describe

__all__ = ["batch_logprobs_math", "check_batch_arguments", "frozen_copy", "logp_mismatch",
           "logp_mismatch_math", "old_logprobs", "reference_logprobs"]


def frozen_copy(model):
    """A frozen copy of ``model``: same class, config and weights, in eval mode, no gradients.

    Built as a new model from the config and loaded with the state dict (not ``deepcopy``,
    which would also copy any method a trainer patched onto the instance). The copy shares
    nothing with the original: training the policy leaves it where it was.

    >>> import torch, grpo_lab.hf as glh
    >>> policy = glh.build_model(glh.build_tokenizer(), seed=0)
    >>> ref = glh.frozen_copy(policy)
    >>> ref.training, any(p.requires_grad for p in ref.parameters())
    (False, False)
    >>> w, w_ref = policy.lm_head.weight, ref.lm_head.weight
    >>> torch.equal(w, w_ref), w is w_ref
    (True, False)
    """
    model = check_model("model", model)
    ref = type(model)(model.config)
    ref.load_state_dict(model.state_dict())
    ref.generation_config = model.generation_config
    return ref.to(model.device).eval().requires_grad_(False)


def check_batch_arguments(model_name, model, batch, temperature):
    """Validate :func:`old_logprobs` / :func:`reference_logprobs`' arguments: a model, the
    Completions of :func:`grpo_lab.hf.sample` whose ids it can read, a temperature > 0."""
    model = check_model(model_name, model)
    if not isinstance(batch, Completions):
        raise TypeError(f"batch: expected the Completions that gl.hf.sample returns, got "
                        f"{describe(batch)}")
    ids = check_ids("batch", batch.input_ids)
    check_vocab("batch", model, ids)
    temperature = check_real("temperature", temperature, minimum=0.0, allow_equal=False)
    return model, batch, temperature


def batch_logprobs_math(model, batch, temperature):
    """The completion's log-probs of a checked ``batch`` under ``model``, (N, T), no grad."""
    with torch.no_grad():
        return completion_logprobs_math(model, batch.input_ids, batch.attention_mask,
                                        batch.completion_ids.shape[1], temperature)


@torch.no_grad()
def old_logprobs(model, batch, *, temperature: float = 1.0) -> torch.Tensor:
    r"""``old_logp``, (N, T): the policy's log-probs of ``batch``'s tokens before any update,
    recomputed by the trainer's forward pass (no gradient), 0 after EOS.

    >>> import torch, grpo_lab.hf as glh
    >>> tok = glh.build_tokenizer()
    >>> model = glh.build_model(tok, seed=0)
    >>> ids, mask = glh.encode_prompts(tok, ["1+2="], repeat=2)
    >>> batch = glh.sample(model, ids, mask, max_new_tokens=4, seed=0)
    >>> old = glh.old_logprobs(model, batch)
    >>> old.shape, old.requires_grad
    (torch.Size([2, 4]), False)
    """
    return batch_logprobs_math(*check_batch_arguments("model", model, batch, temperature))


@torch.no_grad()
def reference_logprobs(ref_model, batch, *, temperature: float = 1.0) -> torch.Tensor:
    """``ref_logp``, (N, T): the frozen reference's log-probs of ``batch``'s tokens, 0 after EOS.

    The same forward pass as :func:`old_logprobs`, on the reference model; TRL divides its
    logits by the sampling temperature too.
    """
    return batch_logprobs_math(*check_batch_arguments("ref_model", ref_model, batch,
                                                      temperature))


def logp_mismatch(old_logp, sampler_logp, mask) -> dict:
    r"""How far the sampler's log-probs are from the trainer's, over the completion tokens.

    .. math::  \text{mean} = \frac{\sum m\,|\log\pi_{old} - \log\pi_{sampler}|}{\sum m},
               \qquad \text{max} = \max_{m=1} |\log\pi_{old} - \log\pi_{sampler}|

    TRL logs the same two numbers as ``sampling/sampling_logp_difference/mean`` and ``/max``
    (with vLLM). Returns ``{"mean": float, "max": float}``.

    >>> import torch, grpo_lab.hf as glh
    >>> old, smp = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -2.0]])
    >>> glh.logp_mismatch(old, smp, torch.ones(1, 2))
    {'mean': 0.25, 'max': 0.5}
    """
    old, _ = as_float_array("old_logp", old_logp, ndim=2, backend="torch")
    smp, _ = as_float_array("sampler_logp", sampler_logp, ndim=2, backend="torch")
    check_shape("sampler_logp", smp, old.shape, " (the shape of old_logp)")
    m = as_mask("mask", mask, tuple(old.shape), " (the shape of old_logp)", backend="torch")
    if not bool(m.any()):
        raise ValueError("mask: expected at least one completion token, got none")
    return logp_mismatch_math(old, smp, m)


def logp_mismatch_math(old, smp, m):
    """:func:`logp_mismatch` on checked tensors and a bool mask with a True."""
    gap = (old.detach().double() - smp.detach().double()).abs()[m]           # valid tokens
    return {"mean": float(gap.mean()), "max": float(gap.max())}
