r"""A GRPO batch on a Hugging Face model: left-padded prompts, sampling, the completion mask.

Taught in chapter 6b, sections "Prompts, padding and the attention mask", "Sampling with
generate" and "The completion mask" (``chapters/06b_real_model.ipynb``).

==================  ==========  ==============================================================
Symbol              Shape       Meaning
==================  ==========  ==============================================================
prompt_ids          (N, P)      prompt tokens, padded on the left to the longest prompt P;
                                N = B*G, each prompt repeated for its G completions in a row
prompt_mask         (N, P)      1 for a prompt token, 0 for left padding
completion_ids      (N, T)      sampled tokens, EOS, then padding; T = the longest completion
completion_mask     (N, T)      1 up to and including the first EOS, 0 after it
sampler_logp        (N, T)      log-prob of each sampled token under the distribution it was
                                drawn from (the sampler's own numbers, 0 where masked)
==================  ==========  ==============================================================

The model reads ``cat(prompt_ids, completion_ids)`` with ``cat(prompt_mask, completion_mask)``
as its attention mask: padding on the left of a prompt, and everything after EOS, is never
attended to and never scored. TRL builds the same tensors (``GRPOTrainer._generate_single_turn``
masks after the first EOS the way :func:`completion_mask` does; ``_generate`` pads prompts left
and completions right).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel

from grpo_lab.numerics.validate import check_int, check_real, describe

__all__ = ["Completions", "check_ids", "completion_mask", "completion_mask_plain",
           "encode_prompts", "left_pad", "left_pad_plain", "sample"]


def check_ids(name: str, ids, ndim: int = 2) -> torch.Tensor:
    """Token ids: an integer tensor of ``ndim`` dimensions, with no negative id."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor of token ids, got {describe(ids)}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor of token ids, got dtype {ids.dtype}")
    if ids.dim() != ndim or ids.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty {ndim}-D tensor of token ids, got "
                         f"{describe(ids)}")
    if bool((ids < 0).any()):
        raise ValueError(f"{name}: expected token ids >= 0, got {int(ids.min())}")
    return ids


def left_pad_plain(rows, pad_id):
    """Left padding, plainly: ``P - len(row)`` pads before each row; the mask marks the rest."""
    P = max(len(r) for r in rows)
    ids = [[pad_id] * (P - len(r)) + list(r) for r in rows]
    mask = [[0] * (P - len(r)) + [1] * len(r) for r in rows]
    return torch.tensor(ids), torch.tensor(mask)


def left_pad(rows, pad_id: int):
    r"""Token-id lists of different lengths as one (N, P) tensor padded on the left, and its mask.

    .. math::  \text{ids}_{i,p} = \begin{cases}\text{pad} & p < P - n_i\\
               \text{row}_i[p - (P - n_i)] & \text{else}\end{cases},\qquad
               \text{mask}_{i,p} = \mathbb 1[p \ge P - n_i]

    ======  ==========  ==========================================================
    Symbol  Shape       Meaning
    ======  ==========  ==========================================================
    rows    N lists     token ids of each prompt, n_i >= 1 of them
    pad_id  int         the tokenizer's pad id (never attended to, whatever it is)
    ids     (N, P)      P = max n_i; int64
    mask    (N, P)      1 for a real token, 0 for padding; int64 (what HF models take)
    ======  ==========  ==========================================================

    Why the left: generation appends to the right end of every row, so with left padding the
    last prompt token of every row is in column P - 1 and the first sampled token in column P.

    >>> import grpo_lab.hf as glh
    >>> ids, mask = glh.left_pad([[5, 6, 7], [8]], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7], [0, 0, 8]], [[1, 1, 1], [0, 0, 1]])
    """
    pad_id = check_int("pad_id", pad_id, minimum=0)
    if isinstance(rows, (str, bytes, torch.Tensor)) or not hasattr(rows, "__len__") or not rows:
        raise TypeError(f"rows: expected a non-empty list of token-id lists, got {describe(rows)}")
    rows = [list(r) for r in rows]
    if any(len(r) == 0 for r in rows):
        empty = next(i for i, r in enumerate(rows) if not r)
        raise ValueError(f"rows: expected at least one token in every row, got none in row {empty}")
    P = max(len(r) for r in rows)
    ids = torch.full((len(rows), P), pad_id, dtype=torch.long)             # (N, P)
    mask = torch.zeros((len(rows), P), dtype=torch.long)                   # (N, P)
    for i, r in enumerate(rows):
        ids[i, P - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, P - len(r):] = 1
    check_ids("rows", ids)
    return ids, mask


def encode_prompts(tokenizer, prompts, *, repeat: int = 1):
    """Prompts (chat messages, or plain strings) -> ``(prompt_ids, prompt_mask)``, (N, P).

    A prompt that is a list of messages goes through the tokenizer's chat template with
    ``add_generation_prompt=True`` (TRL's ``_tokenize_prompts`` does the same); a str is
    tokenized as it is. ``repeat=G`` repeats each prompt G times in a row, one row per
    completion of its group, as TRL's sampler does.

    >>> import grpo_lab.hf as glh
    >>> tok = glh.build_tokenizer()
    >>> ids, mask = glh.encode_prompts(tok, [glh.prompt_messages((1, 2)), "3+4+5="], repeat=2)
    >>> ids.shape, mask.sum(dim=1).tolist()
    (torch.Size([4, 22]), [22, 22, 6, 6])
    """
    repeat = check_int("repeat", repeat, minimum=1)
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise TypeError(f"prompts: expected a non-empty list of prompts (message lists or "
                        f"str), got {describe(prompts)}")
    rows = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            rows.append(tokenizer(p, add_special_tokens=False)["input_ids"])
        elif isinstance(p, (list, tuple)) and all(isinstance(m, dict) for m in p):
            rows.append(list(tokenizer.apply_chat_template(
                list(p), tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]))
        else:
            raise TypeError(f"prompts: expected each prompt to be a str or a list of "
                            f"{{'role', 'content'}} dicts, got {describe(p)} at index {i}")
    ids, mask = left_pad(rows, tokenizer.pad_token_id)                      # (B, P)
    return ids.repeat_interleave(repeat, dim=0), mask.repeat_interleave(repeat, dim=0)  # (N, P)


def completion_mask_plain(completion_ids, eos_id):
    """The completion mask, plainly: 1 until the first EOS, EOS included, then 0."""
    mask = torch.zeros_like(completion_ids)
    for i, row in enumerate(completion_ids.tolist()):
        for t, token in enumerate(row):
            mask[i, t] = 1
            if token == eos_id:
                break
    return mask


def completion_mask(completion_ids, eos_id: int) -> torch.Tensor:
    r"""1 for every token up to and including the first EOS of its row, 0 after it.

    .. math::  m_{i,t} = \mathbb 1\Big[\sum_{s<t} \mathbb 1[y_{i,s} = \text{eos}] = 0\Big]

    ===============  ======  ==========================================================
    Symbol           Shape   Meaning
    ===============  ======  ==========================================================
    completion_ids   (N, T)  sampled tokens; what follows the first EOS is padding
    eos_id           int     the end-of-sequence id
    return           (N, T)  int64 0 / 1; a row without EOS (truncated at T) is all 1
    ===============  ======  ==========================================================

    The EOS is scored (its log-prob is in the loss: stopping is a decision the policy makes);
    what comes after it is not. Equal to TRL's mask (``sequence_indices <= eos_idx``).

    >>> import torch, grpo_lab.hf as glh
    >>> ids = torch.tensor([[7, 1, 0, 0], [7, 8, 9, 6], [1, 5, 1, 0]])      # EOS = 1
    >>> glh.completion_mask(ids, eos_id=1).tolist()
    [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    """
    ids = check_ids("completion_ids", completion_ids)
    eos_id = check_int("eos_id", eos_id, minimum=0)
    is_eos = (ids == eos_id).long()                                         # (N, T)
    eos_before = is_eos.cumsum(dim=1) - is_eos                              # EOS strictly before t
    return (eos_before == 0).long()                                         # (N, T)


@dataclass
class Completions:
    """What :func:`sample` returns: the batch's tensors (see the module's table), and
    ``truncated`` (N,), True where a row reached T tokens without an EOS."""
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    sampler_logp: torch.Tensor
    truncated: torch.Tensor

    @property
    def input_ids(self) -> torch.Tensor:
        """``cat(prompt_ids, completion_ids)``, (N, P + T): what the trainer's forward reads."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """``cat(prompt_mask, completion_mask)``, (N, P + T)."""
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, *, max_new_tokens: int, temperature: float = 1.0,
           seed: int | None = None) -> Completions:
    r"""Sample one completion per row with ``model.generate``: EOS stops a row, ``max_new_tokens``
    truncates it.

    ``temperature`` divides the logits (0: greedy); no top-k or top-p, so every token of the
    vocabulary can be drawn and ``sampler_logp`` is :math:`\log\operatorname{softmax}(z/\tau)`
    at the drawn token, the distribution the loss must score (TRL divides by the same
    temperature when it recomputes log-probs). The pad and eos ids are the model's generation
    config's (:func:`grpo_lab.hf.build_model` sets them). ``seed`` makes the draw repeatable
    without moving the caller's random state. The prompts must be on the model's device
    (:func:`encode_prompts` makes CPU tensors: ``.to(model.device)``).

    ``generate`` reads the prompt once and then each new token once (its KV cache); its
    numbers are the sampler's, computed along a different path from the trainer's full forward,
    which is why a trainer recomputes ``old_logp`` (:func:`grpo_lab.hf.old_logprobs`).

    >>> import grpo_lab.hf as glh
    >>> tok = glh.build_tokenizer()
    >>> model = glh.build_model(tok, seed=0)
    >>> ids, mask = glh.encode_prompts(tok, ["1+2="], repeat=3)
    >>> out = glh.sample(model, ids, mask, max_new_tokens=5, seed=0)
    >>> out.completion_ids.shape, out.completion_mask.shape, out.truncated.tolist()
    (torch.Size([3, 5]), torch.Size([3, 5]), [True, True, True])
    """
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"model: expected a transformers PreTrainedModel, got {describe(model)}")
    ids = check_ids("prompt_ids", prompt_ids)
    mask = check_ids("prompt_mask", prompt_mask)
    if mask.shape != ids.shape or bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError(f"prompt_mask: expected 0 / 1 of the shape of prompt_ids "
                         f"{tuple(ids.shape)}, got {describe(mask)}")
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    temperature = check_real("temperature", temperature, minimum=0.0)
    seed = None if seed is None else check_int("seed", seed, minimum=0)
    gen = model.generation_config
    config = GenerationConfig(do_sample=temperature > 0, temperature=temperature or None,
                              top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              pad_token_id=gen.pad_token_id, eos_token_id=gen.eos_token_id,
                              output_scores=True, return_dict_in_generate=True)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    completion_ids = out.sequences[:, ids.shape[1]:]                          # (N, T)
    scores = torch.stack(out.scores, dim=1).float()                           # (N, T, V) z / tau
    logp = torch.log_softmax(scores, dim=-1).gather(2, completion_ids[..., None]).squeeze(2)
    m = completion_mask(completion_ids, gen.eos_token_id)                     # (N, T)
    truncated = ~(completion_ids == gen.eos_token_id).any(dim=1)              # (N,)
    completion_ids = completion_ids.masked_fill(m == 0, gen.pad_token_id)
    return Completions(ids, mask, completion_ids, m, logp * m, truncated)
