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
from transformers import GenerationConfig

from grpo_lab.hf.checks import (check_eos, check_ids, check_model, check_tokenizer, check_vocab,
                                is_integer)
from grpo_lab.numerics.validate import INT_RANGE, check_int, check_real, describe

__all__ = ["Completions", "check_ids", "completion_mask", "completion_mask_math",
           "completion_mask_plain", "encode_prompts", "encode_prompts_math", "left_pad",
           "left_pad_math", "left_pad_plain", "check_sample_arguments", "sample", "sample_math"]


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
    rows, pad_id = check_left_pad_arguments(rows, pad_id)
    return left_pad_math(rows, pad_id)


def check_left_pad_arguments(rows, pad_id):
    """Validate :func:`left_pad`'s arguments: ``rows`` as lists of Python ints >= 0.

    Each id must be an integer (a NumPy integer, or a 1-D integer tensor's entries): a float
    id is refused, not floored (1.5 is not id 1), and so are a bool and a nested row."""
    pad_id = check_int("pad_id", pad_id, minimum=0)
    if isinstance(rows, (str, bytes, torch.Tensor, dict)) or not hasattr(rows, "__len__") \
            or not hasattr(rows, "__iter__") or len(rows) == 0:
        raise TypeError(f"rows: expected a non-empty list of token-id lists, got {describe(rows)}")
    out = []
    for i, r in enumerate(rows):
        if isinstance(r, torch.Tensor):
            if r.dim() != 1 or r.dtype.is_floating_point or r.dtype.is_complex \
                    or r.dtype == torch.bool:
                raise TypeError(f"rows: expected each row to be a list of integer ids, got "
                                f"{describe(r)} at row {i}")
            r = r.tolist()
        if isinstance(r, (str, bytes, dict)) or not hasattr(r, "__iter__"):
            raise TypeError(f"rows: expected each row to be a list of integer ids, got "
                            f"{describe(r)} at row {i}")
        r = list(r)
        if not r:
            raise ValueError(f"rows: expected at least one token in every row, got none in "
                             f"row {i}")
        for t, x in enumerate(r):
            if not is_integer(x):
                raise TypeError(f"rows: expected integer token ids, got {describe(x)} at row "
                                f"{i}, position {t}")
            if not 0 <= int(x) <= INT_RANGE[1]:
                raise ValueError(f"rows: expected token ids in [0, 2**63 - 1], got {x} at row "
                                 f"{i}, position {t}")
        out.append([int(x) for x in r])
    return out, pad_id


def left_pad_math(rows, pad_id):
    """:func:`left_pad` on checked rows (lists of ints >= 0)."""
    P = max(len(r) for r in rows)
    ids = torch.full((len(rows), P), pad_id, dtype=torch.long)             # (N, P)
    mask = torch.zeros((len(rows), P), dtype=torch.long)                   # (N, P)
    for i, r in enumerate(rows):
        ids[i, P - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, P - len(r):] = 1
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
    tokenizer, prompts, repeat = check_encode_arguments(tokenizer, prompts, repeat)
    return encode_prompts_math(tokenizer, prompts, repeat)


def check_encode_arguments(tokenizer, prompts, repeat):
    """Validate :func:`encode_prompts`' arguments: a tokenizer, and prompts each a str or a
    list of ``{"role": str, "content": str}`` messages."""
    repeat = check_int("repeat", repeat, minimum=1)
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise TypeError(f"prompts: expected a non-empty list of prompts (message lists or "
                        f"str), got {describe(prompts)}")
    chat = False
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            continue
        if not isinstance(p, (list, tuple)) or not p or not all(isinstance(m, dict) for m in p):
            raise TypeError(f"prompts: expected each prompt to be a str or a non-empty list of "
                            f"{{'role', 'content'}} dicts, got {describe(p)} at index {i}")
        for m in p:
            if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ValueError(f"prompts: expected each message to have a str 'role' and a "
                                 f"str 'content', got {m!r} at index {i}")
        chat = True
    return check_tokenizer("tokenizer", tokenizer, chat=chat), prompts, repeat


def _token_ids(tokenizer, p, i):
    """One prompt's ids; a piece the tokenizer cannot encode is a ValueError naming it."""
    try:
        if isinstance(p, str):
            return list(tokenizer(p, add_special_tokens=False)["input_ids"])
        return list(tokenizer.apply_chat_template(
            list(p), tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"])
    except Exception as err:        # tokenizers' bare Exception ("Missing [UNK] token"), Jinja's
        raise ValueError(f"prompts: expected text the tokenizer can encode, got {p!r} at index "
                         f"{i} ({type(err).__name__}: {err})") from None


def encode_prompts_math(tokenizer, prompts, repeat):
    """:func:`encode_prompts` on checked arguments."""
    rows = [_token_ids(tokenizer, p, i) for i, p in enumerate(prompts)]
    if not all(rows):
        empty = next(i for i, r in enumerate(rows) if not r)
        raise ValueError(f"prompts: expected every prompt to encode to at least one token, got "
                         f"none at index {empty}")
    ids, mask = left_pad_math(rows, tokenizer.pad_token_id)                 # (B, P)
    return ids.repeat_interleave(repeat, dim=0), mask.repeat_interleave(repeat, dim=0)  # (N, P)


def completion_mask_plain(completion_ids, eos_id):
    """The completion mask, plainly: 1 until the first EOS (``eos_id``, or any of a list of
    them), EOS included, then 0."""
    eos_ids = eos_id if isinstance(eos_id, (list, tuple)) else [eos_id]
    mask = torch.zeros_like(completion_ids)
    for i, row in enumerate(completion_ids.tolist()):
        for t, token in enumerate(row):
            mask[i, t] = 1
            if token in eos_ids:
                break
    return mask


def completion_mask(completion_ids, eos_id) -> torch.Tensor:
    r"""1 for every token up to and including the first EOS of its row, 0 after it.

    .. math::  m_{i,t} = \mathbb 1\Big[\sum_{s<t} \mathbb 1[y_{i,s} \in E] = 0\Big]

    ===============  ======  ==========================================================
    Symbol           Shape   Meaning
    ===============  ======  ==========================================================
    completion_ids   (N, T)  sampled tokens; what follows the first EOS is padding
    eos_id           int     the end-of-sequence id, or a list of them: the set E
                     / list  (Qwen2.5-Instruct stops at ``<|im_end|>`` or
                             ``<|endoftext|>``; its generation config lists both)
    return           (N, T)  int64 0 / 1; a row without EOS (truncated at T) is all 1
    ===============  ======  ==========================================================

    The EOS is scored (its log-prob is in the loss: stopping is a decision the policy makes);
    what comes after it is not. Equal to TRL's mask (``sequence_indices <= eos_idx``), whose
    ``is_eos`` is ``torch.isin(completion_ids, eos_token_ids)``.

    >>> import torch, grpo_lab.hf as glh
    >>> ids = torch.tensor([[7, 1, 0, 0], [7, 8, 9, 6], [1, 5, 1, 0]])      # EOS = 1
    >>> glh.completion_mask(ids, eos_id=1).tolist()
    [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    >>> glh.completion_mask(ids, eos_id=[1, 9]).tolist()                     # E = {1, 9}
    [[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]]
    """
    ids = check_ids("completion_ids", completion_ids)
    return completion_mask_math(ids, check_eos("eos_id", eos_id))


def completion_mask_math(ids, eos):
    """:func:`completion_mask` on checked ids and a tuple of EOS ids."""
    is_eos = torch.isin(ids, torch.tensor(eos, device=ids.device)).long()  # (N, T) y in E
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


def check_sample_arguments(model, prompt_ids, prompt_mask, max_new_tokens, temperature, seed,
                           eos_id):
    """Validate :func:`sample`'s arguments; returns them checked, EOS ids as a tuple and the
    pad id (the model's generation config's)."""
    model = check_model("model", model)
    ids = check_ids("prompt_ids", prompt_ids)
    check_vocab("prompt_ids", model, ids)
    mask = check_ids("prompt_mask", prompt_mask)
    if mask.shape != ids.shape or bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError(f"prompt_mask: expected 0 / 1 of the shape of prompt_ids "
                         f"{tuple(ids.shape)}, got {describe(mask)}")
    if not bool(mask.any(dim=1).all()):
        raise ValueError(f"prompt_mask: expected at least one prompt token in every row, got "
                         f"none in row {int((~mask.any(dim=1)).nonzero()[0])}")
    check_vocab("prompt_mask", model, mask)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    temperature = check_real("temperature", temperature, minimum=0.0)
    seed = None if seed is None else check_int("seed", seed, minimum=0)
    gen = model.generation_config
    if eos_id is None:
        if gen.eos_token_id is None:
            raise ValueError("eos_id: expected an id (or the model's generation_config."
                             "eos_token_id), got None in both")
        eos = check_eos("model.generation_config.eos_token_id", gen.eos_token_id)
    else:
        eos = check_eos("eos_id", eos_id)
    if not is_integer(gen.pad_token_id):
        raise ValueError(f"model: expected a generation config with a pad_token_id "
                         f"(gl.hf.build_model sets it), got {gen.pad_token_id!r}")
    V = model.get_input_embeddings().num_embeddings
    if max(eos) >= V:
        raise ValueError(f"eos_id: expected ids below the model's vocabulary size {V}, got "
                         f"{max(eos)}")
    return model, ids, mask, max_new_tokens, temperature, seed, eos, int(gen.pad_token_id)


@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, *, max_new_tokens: int, temperature: float = 1.0,
           seed: int | None = None, eos_id=None) -> Completions:
    r"""Sample one completion per row with ``model.generate``: an EOS stops a row,
    ``max_new_tokens`` truncates it.

    ``temperature`` divides the logits (0: greedy); no top-k or top-p, so every token of the
    vocabulary can be drawn and ``sampler_logp`` is :math:`\log\operatorname{softmax}(z/\tau)`
    at the drawn token, the distribution the loss must score (TRL divides by the same
    temperature when it recomputes log-probs). ``eos_id`` is one stop id or a list of them
    (None: the model's ``generation_config.eos_token_id``, which a real instruct model ships
    as a list); the pad id is the generation config's (:func:`grpo_lab.hf.build_model` sets
    both). ``seed`` makes the draw repeatable without moving the caller's random state. The
    prompts must be on the model's device (:func:`encode_prompts` makes CPU tensors:
    ``.to(model.device)``).

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
    return sample_math(*check_sample_arguments(model, prompt_ids, prompt_mask, max_new_tokens,
                                               temperature, seed, eos_id))


def sample_math(model, ids, mask, max_new_tokens, temperature, seed, eos, pad):
    """:func:`sample` on checked arguments (``eos`` a tuple of ids, ``pad`` an id)."""
    config = GenerationConfig(do_sample=temperature > 0, temperature=temperature or None,
                              top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              pad_token_id=pad, eos_token_id=list(eos),
                              output_scores=True, return_dict_in_generate=True)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    completion_ids = out.sequences[:, ids.shape[1]:]                          # (N, T)
    scores = torch.stack(out.scores, dim=1).float()                           # (N, T, V) z / tau
    logp = torch.log_softmax(scores, dim=-1).gather(2, completion_ids[..., None]).squeeze(2)
    m = completion_mask_math(completion_ids, eos)                             # (N, T)
    truncated = ~torch.isin(completion_ids, torch.tensor(eos, device=ids.device)).any(dim=1)
    completion_ids = completion_ids.masked_fill(m == 0, pad)
    return Completions(ids, mask, completion_ids, m, logp * m, truncated)
