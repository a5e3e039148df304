r"""Per-token log-probs with the one-position shift, and the entropy, from a causal LM's logits.

Taught in chapter 6b, sections "Log-probs and the one-position shift" and "Entropy from
logits" (``chapters/06b_real_model.ipynb``). The NumPy counterparts of chapter 4
(:func:`grpo_lab.token_logprobs`) take logits already aligned with their tokens; here the
logits come from the model, one position early.

The shift: a causal LM's output at position p is its distribution for the token at p + 1.
So the logits of positions ``0 .. L-2`` score the tokens ``1 .. L-1``, and the completion's
T tokens, which sit at positions ``P .. P+T-1``, are scored by the logits at ``P-1 .. P+T-2``.

==========  ============  ===============================================================
Symbol      Shape         Meaning
==========  ============  ===============================================================
logits      (N, L, V)     the model's output z; V = vocabulary size
input_ids   (N, L)        the tokens it read, L = P + T
labels      (N, L')       the tokens to score, aligned with ``logits[:, :L']``
logp        (N, T)        log pi(y_t | prompt, y_<t), 0 where the attention mask is 0
entropy     (N, T)        H_t = -sum_v pi_v log pi_v of the distribution at each position
==========  ============  ===============================================================
"""

from __future__ import annotations

import torch

from grpo_lab.hf.checks import check_bool, check_ids, check_model, check_vocab
from grpo_lab.numerics.validate import check_int, check_real, describe

__all__ = ["check_completion_arguments", "check_logits", "completion_logits",
           "completion_logprobs", "completion_logprobs_math", "next_token_logprobs",
           "next_token_logprobs_plain", "scaled_logits", "token_entropy", "token_entropy_math",
           "token_entropy_plain", "token_logprobs", "token_logprobs_math",
           "token_logprobs_plain"]


def check_logits(name: str, logits, *, finite: bool = True) -> torch.Tensor:
    """A floating tensor with a vocabulary axis last (at least 2-D); ``finite=False`` lets
    ``-inf`` through (a masked vocabulary entry) but never NaN or ``+inf``."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor of logits (..., V), got "
                        f"{describe(logits)}")
    if not logits.dtype.is_floating_point:
        raise TypeError(f"{name}: expected a floating tensor of logits, got dtype {logits.dtype}")
    if logits.dim() < 2 or logits.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty tensor of logits (..., V), at least "
                         f"2-D, got {describe(logits)}")
    z = logits.detach()                         # a check records nothing for autograd
    bad = torch.isnan(z) | (z == float("inf")) if not finite else ~torch.isfinite(z)
    if bool(bad.any()):
        where = tuple(bad.nonzero()[0].tolist())
        allowed = "finite logits" if finite else "logits that are finite or -inf"
        raise ValueError(f"{name}: expected {allowed}, got {logits[where].item()} at index {where}")
    return logits


def check_labels(logits, labels):
    """The token ids ``labels`` for ``logits`` (..., V): integer ids of the logits' shape
    without V, each below V; a ValueError naming ``labels`` otherwise."""
    labels = check_ids("labels", labels, ndim=logits.dim() - 1)
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"labels: expected shape {tuple(logits.shape[:-1])} (the logits' "
                         f"shape without V), got {describe(labels)}")
    if bool((labels >= logits.shape[-1]).any()):
        raise ValueError(f"labels: expected ids below the vocabulary size V = "
                         f"{logits.shape[-1]}, got {int(labels.max())}")
    return labels


def token_logprobs_plain(logits, labels):
    """log softmax(z)[y], plainly: the whole (N, L, V) log-softmax, then one entry per position."""
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def token_logprobs(logits, labels, *, temperature: float = 1.0) -> torch.Tensor:
    r"""The log-probability of each label under softmax(logits / temperature), float32 or wider.

    .. math::  \log \pi(y) = u_y - \log \sum_v e^{u_v},
               \qquad u = (z - \max_v z_v) / \tau

    ===========  ==========  ==========================================================
    Symbol       Shape       Meaning
    ===========  ==========  ==========================================================
    logits       (..., V)    z; bfloat16 / float16 are widened to float32 first
    labels       (...)       token ids y, aligned with the logits (no shift here)
    temperature  scalar      tau > 0, the sampling temperature (TRL divides by it too)
    return       (...)       log pi(y) <= 0, in float32 (float64 for float64 logits)
    ===========  ==========  ==========================================================

    The guard, with the input that needs it: at tau != 1 the logits are shifted by their max
    *before* the division, so z / tau cannot overflow (z = 3e38 at tau = 0.5 is inf in
    float32; z - max is <= 0 and stays finite). The shift changes nothing else: a softmax
    does not see a constant added to every logit.

    What the backward pass keeps (measured by :func:`grpo_lab.hf.saved_logit_tensors` with
    ``torch.autograd.graph.saved_tensors_hooks``): ``gather`` and ``logsumexp`` both save
    their input, one (N, L, V) tensor between them: the logits themselves at tau = 1, the
    scaled copy u at tau != 1, a float32 copy for bfloat16 logits (twice the logits' bytes).
    The plain face :func:`token_logprobs_plain` keeps one too, its log-softmax: gathering
    first does not halve the memory. What does is never holding (N, L, V) at all: TRL's
    chunked LM head (chapter 7).

    Why float32: PyTorch's ``logsumexp`` on bfloat16 already accumulates in float32; the error
    of bfloat16 log-probs is the rounding of the output (8 bits of mantissa: about 0.4% of
    log pi) and of the logits the bfloat16 LM-head matmul produced. Widening here removes the
    first; TRL's ``cast_lm_head_to_fp32`` (GRPOConfig) removes the second.

    >>> import torch, grpo_lab.hf as glh
    >>> z = torch.tensor([[2.0, 0.0, 0.0]])            # one position, V = 3
    >>> round(float(glh.token_logprobs(z, torch.tensor([0]))), 4)   # 2 - log(e^2 + 2)
    -0.2395
    """
    z = check_logits("logits", logits)
    y = check_labels(z, labels)
    temperature = check_real("temperature", temperature, minimum=0.0, allow_equal=False)
    return token_logprobs_math(z, y, temperature)


def scaled_logits(z, temperature):
    """``z / tau`` in float32 or wider, shifted by the max first when tau != 1 (no overflow)."""
    z = z.float() if z.dtype in (torch.float16, torch.bfloat16) else z    # float32 or wider
    if temperature != 1.0:
        z = (z - z.detach().amax(dim=-1, keepdim=True)) / temperature     # (..., V) <= 0
    return z


def token_logprobs_math(z, y, temperature):
    """:func:`token_logprobs` on checked logits and labels."""
    u = scaled_logits(z, temperature)                                       # (..., V)
    picked = u.gather(-1, y.unsqueeze(-1)).squeeze(-1)                      # (...) u_y
    return picked - torch.logsumexp(u, dim=-1)                              # (...)


def next_token_logprobs_plain(logits, input_ids):
    """The shift, plainly: the logits at p score the token at p + 1."""
    return token_logprobs_plain(logits[:, :-1], input_ids[:, 1:])


def next_token_logprobs(logits, input_ids, *, temperature: float = 1.0) -> torch.Tensor:
    r"""log pi(x_{p+1} | x_{<=p}) for p = 0 .. L-2: the one-position shift, (N, L-1).

    .. math::  \ell_{i,p} = \log \operatorname{softmax}(z_{i,p} / \tau)[x_{i,p+1}]

    ==========  =========  =============================================================
    Symbol      Shape      Meaning
    ==========  =========  =============================================================
    logits      (N, L, V)  the model's output for the L tokens it read
    input_ids   (N, L)     those tokens; the first is never scored (nothing predicts it)
    return      (N, L-1)   column p holds the log-prob of token p + 1
    ==========  =========  =============================================================

    Forgetting the shift scores each token with the distribution *it* produced, which is
    mostly a distribution over the next token: no error is raised, the loss is just wrong.

    >>> import torch, grpo_lab.hf as glh
    >>> z = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]]))   # L = 3, V = 2
    >>> x = torch.tensor([[0, 1, 1]])
    >>> glh.next_token_logprobs(z, x).exp()          # p(x1 = 1) at p = 0, p(x2 = 1) at p = 1
    tensor([[0.5000, 0.1000]])
    """
    z = check_logits("logits", logits)
    if z.dim() != 3:
        raise ValueError(f"logits: expected a 3-D tensor (N, L, V), got {describe(z)}")
    x = check_ids("input_ids", input_ids)
    if tuple(x.shape) != tuple(z.shape[:2]):
        raise ValueError(f"input_ids: expected shape {tuple(z.shape[:2])} (the logits' N, L), "
                         f"got {describe(x)}")
    if z.shape[1] < 2:
        raise ValueError(f"logits: expected at least 2 positions (the first token is never "
                         f"scored), got {describe(z)}")
    if bool((x[:, 1:] >= z.shape[-1]).any()):
        raise ValueError(f"input_ids: expected ids below the vocabulary size V = "
                         f"{z.shape[-1]}, got {int(x[:, 1:].max())}")
    temperature = check_real("temperature", temperature, minimum=0.0, allow_equal=False)
    return token_logprobs_math(z[:, :-1], x[:, 1:], temperature)            # (N, L-1)


def token_entropy_plain(logits):
    """H = -sum_v p_v log p_v, plainly (NaN where a logit is -inf: 0 * -inf)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def token_entropy(logits, *, temperature: float = 1.0) -> torch.Tensor:
    r"""The entropy of softmax(logits / temperature) at every position, in nats, float32 or wider.

    .. math::  H = -\sum_v \pi_v \log \pi_v = \log\sum_v e^{u_v} - \sum_v \pi_v u_v,
               \qquad u = (z - \max_v z_v) / \tau

    ===========  ==========  ==========================================================
    Symbol       Shape       Meaning
    ===========  ==========  ==========================================================
    logits       (..., V)    z, finite or -inf (a vocabulary entry masked out)
    temperature  scalar      tau > 0
    return       (...)       H in [0, log V]; differentiable (an entropy bonus)
    ===========  ==========  ==========================================================

    The two guards, each with the input that needs it: the logits are shifted by their max
    before the division by tau (so z / tau cannot overflow, even at z = 3e38 and tau = 0.5),
    and the two terms of the difference stay below log V however large the logits are; and an
    entry at -inf (probability exactly 0) contributes 0, where the plain face
    :func:`token_entropy_plain` computes 0 * -inf = NaN.

    >>> import torch, grpo_lab.hf as glh
    >>> z = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -float("inf"), -float("inf")]])
    >>> glh.token_entropy(z)                        # log 4 and log 2
    tensor([1.3863, 0.6931])
    """
    z = check_logits("logits", logits, finite=False)
    temperature = check_real("temperature", temperature, minimum=0.0, allow_equal=False)
    if bool(torch.isinf(z).all(dim=-1).any()):
        raise ValueError("logits: expected at least one finite logit per position (a "
                         "distribution), got a position where all are -inf")
    return token_entropy_math(z, temperature)


def token_entropy_math(z, temperature):
    """:func:`token_entropy` on checked logits (finite or -inf, one finite per position)."""
    z = z.float() if z.dtype in (torch.float16, torch.bfloat16) else z
    u = (z - z.detach().amax(dim=-1, keepdim=True)) / temperature          # (..., V) <= 0
    lse = torch.logsumexp(u, dim=-1, keepdim=True)                          # (..., 1) in [0, log V]
    p = torch.exp(u - lse)                                                  # (..., V)
    u = torch.where(p > 0, u, torch.zeros_like(u))     # 0 * -inf -> 0, in the gradient too
    return lse.squeeze(-1) - (p * u).sum(dim=-1)                            # (...)


def completion_logprobs(model, input_ids, attention_mask, n_completion: int, *,
                        temperature: float = 1.0, entropy: bool = False):
    r"""The completion's per-token log-probs from one forward pass: ``logp``, (N, T), with grad.

    ==============  ========  ==========================================================
    Symbol          Shape     Meaning
    ==============  ========  ==========================================================
    input_ids       (N, P+T)  ``cat(prompt_ids, completion_ids)``
    attention_mask  (N, P+T)  ``cat(prompt_mask, completion_mask)``
    n_completion    int       T, the completion's columns (the last T of input_ids)
    temperature     scalar    the sampling temperature: score what was sampled
    entropy         bool      also return each position's entropy, (N, T)
    ==============  ========  ==========================================================

    The model computes logits for the last T + 1 positions only (``logits_to_keep``), the
    shift drops the last one, and the result is 0 wherever the attention mask is 0 (after an
    EOS), as in TRL's ``_get_per_token_logps_and_entropies``. It is called three times in a
    step: with gradient for ``logp``, and under ``no_grad`` for ``old_logp`` and ``ref_logp``
    (:mod:`grpo_lab.hf.reference`). The model's logits are checked once (a NaN from a diverged
    model is named, not trained on).

    >>> import torch, grpo_lab.hf as glh
    >>> tok = glh.build_tokenizer()
    >>> model = glh.build_model(tok, seed=0)
    >>> ids, mask = glh.encode_prompts(tok, ["1+2="])
    >>> out = glh.sample(model, ids, mask, max_new_tokens=4, seed=0)
    >>> logp = glh.completion_logprobs(model, out.input_ids, out.attention_mask, 4)
    >>> bool(torch.allclose(logp, out.sampler_logp, atol=1e-5))    # trainer vs sampler
    True
    """
    return completion_logprobs_math(*check_completion_arguments(
        model, input_ids, attention_mask, n_completion, temperature, entropy))


def check_completion_arguments(model, input_ids, attention_mask, n_completion, temperature,
                               entropy):
    """Validate :func:`completion_logprobs`' arguments; returns them checked."""
    model = check_model("model", model)
    x = check_ids("input_ids", input_ids)
    check_vocab("input_ids", model, x)
    m = check_ids("attention_mask", attention_mask)
    if m.shape != x.shape or bool((m > 1).any()):
        raise ValueError(f"attention_mask: expected 0 / 1 of the shape of input_ids "
                         f"{tuple(x.shape)}, got {describe(m)}")
    check_vocab("attention_mask", model, m)
    T = check_int("n_completion", n_completion, minimum=1, maximum=x.shape[1] - 1,
                  why=" (the prompt needs at least one token)")
    temperature = check_real("temperature", temperature, minimum=0.0, allow_equal=False)
    return model, x, m, T, temperature, check_bool("entropy", entropy)


def completion_logits(model, x, m, T):
    """The logits that score the last T tokens, (N, T, V): one forward pass, the shift, and a
    check that the model's output is finite (a diverged model's NaN is named, not trained on)."""
    logits = model(input_ids=x, attention_mask=m, logits_to_keep=T + 1,
                   use_cache=False).logits[:, :-1]                          # (N, T, V)
    bad = ~torch.isfinite(logits.detach())
    if bool(bad.any()):
        where = tuple(bad.nonzero()[0].tolist())
        raise ValueError(f"model: expected finite logits, got {logits[where].item()} at "
                         f"(row, position, token) {where}: the weights have diverged")
    return logits


def completion_logprobs_math(model, x, m, T, temperature, entropy=False):
    """:func:`completion_logprobs` on checked arguments."""
    logits = completion_logits(model, x, m, T)                              # (N, T, V)
    labels = x[:, -T:]                                                      # (N, T)
    keep = m[:, -T:].bool()                                                 # (N, T)
    logp = token_logprobs_math(logits, labels, temperature)                 # (N, T)
    logp = torch.where(keep, logp, torch.zeros_like(logp))                  # 0 after EOS
    if not entropy:
        return logp
    h = token_entropy_math(logits, temperature)                             # (N, T)
    return logp, torch.where(keep, h, torch.zeros_like(h))
