"""A tiny autoregressive policy: a character tokenizer and a small causal transformer.

Taught in chapter 6 (``chapters/06_training_loop.ipynb``); :mod:`grpo_lab.train` trains it.
Built in code (no downloads): 108 tokens, two layers, about 100k parameters. It plays the part
of the LLM: it reads a prompt, samples a completion token by token, and gives the
log-probability of every token it sampled, which is all GRPO needs from a model.

==========  ==========  ==========================================================
Symbol      Shape       Meaning
==========  ==========  ==========================================================
prompts     (N, P)      token ids of N prompts, all of length P
tokens      (N, T)      sampled completion ids, padded with PAD after EOS
mask        (N, T)      True for a completion's tokens, up to and including EOS
logp        (N, T)      log pi(token_t | prompt, tokens_<t); 0 at padding
==========  ==========  ==========================================================
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from grpo_lab.numerics.validate import check_int, check_real, describe
from grpo_lab.rl.rewards import ANSWER, THINK

__all__ = ["VOCAB", "PAD", "EOS", "MAX_NUMBER_TOKEN", "FORMAT_TOKENS", "Tokenizer", "TinyGPT",
           "check_policy_arguments", "completion_logp", "draw", "sample"]

#: Numbers up to 99 are single tokens (GPT-4's tokenizer, cl100k, groups up to 3 digits), and
#: so are the tags, as special tokens are in an LLM's tokenizer.
MAX_NUMBER_TOKEN = 99
VOCAB = ("<pad>", "<eos>", "+", "=", *THINK, *ANSWER,
         *(str(n) for n in range(MAX_NUMBER_TOKEN + 1)))
PAD, EOS = 0, 1
#: The shortest well-formed completion, ``<think></think><answer>N</answer>`` and EOS.
FORMAT_TOKENS = 6


class Tokenizer:
    """Text <-> token ids over :data:`VOCAB`; decoding stops at EOS and skips PAD.

    A run of digits is cut into numbers of at most two digits from the left ("123" -> "12",
    "3"), the way LLM tokenizers chunk digits; a tag is one token.

    >>> import grpo_lab.rl.tiny_policy as tp
    >>> tok = tp.Tokenizer()
    >>> ids = tok.encode("3+14=<think></think><answer>17</answer>")
    >>> [tok.vocab[i] for i in ids]
    ['3', '+', '14', '=', '<think>', '</think>', '<answer>', '17', '</answer>']
    >>> tok.decode(ids + [tp.EOS, 5])
    '3+14=<think></think><answer>17</answer>'
    """

    def __init__(self):
        self.vocab = VOCAB
        self.index = {s: i for i, s in enumerate(VOCAB)}
        self._tags = tuple(THINK + ANSWER)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {describe(text)}")
        ids, i = [], 0
        while i < len(text):
            tag = next((t for t in self._tags if text.startswith(t, i)), None)
            if tag:
                piece = tag
            elif text[i] in "0123456789":
                piece = text[i:i + 2] if text[i + 1:i + 2] in tuple("0123456789") else text[i]
                if len(piece) == 2 and piece[0] == "0":
                    piece = "0"                 # "05" is two tokens: 0, 5
            else:
                piece = text[i]
            if piece not in self.index:
                raise ValueError(f"text: expected digits, '+', '=' and the four tags, got "
                                 f"{piece!r} at position {i}")
            ids.append(self.index[piece])
            i += len(piece)
        return ids

    def decode(self, ids) -> str:
        out = []
        for i in (int(t) for t in ids):
            if i == EOS:
                break
            if i != PAD:
                out.append(self.vocab[i])
        return "".join(out)


def check_policy_arguments(d_model, n_layer, n_head, max_len):
    """Validate :class:`TinyGPT`'s sizes; returns ``(d_model, n_layer, n_head, max_len)``."""
    d_model = check_int("d_model", d_model, minimum=1)
    n_layer = check_int("n_layer", n_layer, minimum=1)
    n_head = check_int("n_head", n_head, minimum=1)
    if d_model % n_head:
        raise ValueError(f"n_head: expected a divisor of d_model = {d_model}, got {n_head}")
    return d_model, n_layer, n_head, check_int("max_len", max_len, minimum=2)


class _Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP, each with a residual."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x, past=None):
        """``past``: the keys and values of the tokens before ``x`` (sampling with a KV
        cache feeds one new token at a time); returns ``(x, (k, v))``, all tokens so far."""
        N, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)                  # 3 x (N, L, D)
        q, k, v = (t.view(N, L, self.n_head, D // self.n_head).transpose(1, 2)
                   for t in (q, k, v))                                     # (N, nh, L, hs)
        mask = None
        if past is not None:                # new token i sees the S cached ones and itself
            S = past[0].shape[2]
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
            if L > 1:
                mask = torch.ones(L, S + L, dtype=torch.bool, device=x.device).tril(S)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           is_causal=past is None)         # (N, nh, L, hs)
        x = x + self.proj(y.transpose(1, 2).reshape(N, L, D))             # (N, L, D)
        return x + self.mlp(self.ln2(x)), (k, v)


class TinyGPT(nn.Module):
    """A small decoder-only transformer over :data:`VOCAB`; ``forward(ids) -> logits``.

    Args:
        d_model: width, usually 32 to 128. n_layer, n_head: depth and attention heads.
        max_len: the longest prompt + completion it can read (positions are learned).
    """

    def __init__(self, *, d_model: int = 64, n_layer: int = 2, n_head: int = 4,
                 max_len: int = 32, positions: bool = True):
        super().__init__()
        d_model, n_layer, n_head, self.max_len = check_policy_arguments(d_model, n_layer,
                                                                        n_head, max_len)
        self.tok_emb = nn.Embedding(len(VOCAB), d_model)
        self.pos_emb = nn.Embedding(self.max_len, d_model) if positions else None
        self.blocks = nn.ModuleList(_Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, len(VOCAB))

    def forward(self, ids: torch.Tensor, *, cache: list | None = None) -> torch.Tensor:
        """Logits (N, L, V) for token ids (N, L).

        ``cache``, a list, makes this an incremental decoder: pass ``[]`` with the prompts
        (it is filled with each block's keys and values), then the same list with the next
        tokens (one at a time when sampling). Each token is then read once, not once per later
        token; the logits are the same.
        """
        N, L = ids.shape
        start = cache[0][0].shape[2] if cache else 0                       # tokens cached
        if start + L > self.max_len:
            raise ValueError(f"ids: expected at most max_len = {self.max_len} tokens, got "
                             f"{start + L}")
        x = self.tok_emb(ids)                                              # (N, L, D)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(start, start + L, device=ids.device))  # + (L, D)
        filled = bool(cache)
        for i, block in enumerate(self.blocks):
            x, kv = block(x, cache[i] if filled else None)
            if cache is not None:
                cache[i:i + 1] = [kv]                                      # (N, nh, start+L, hs)
        return self.head(self.ln_f(x))                                     # (N, L, V)


@torch.no_grad()
def sample(model: TinyGPT, prompts: torch.Tensor, max_new_tokens: int, *,
           temperature: float = 1.0, generator: torch.Generator | None = None,
           entropy: bool = False):
    """Sample one completion per prompt row: returns ``(tokens, mask, logp)``, each (N, T).

    ``temperature=0`` is greedy decoding. Otherwise tokens are drawn from
    softmax(logits / temperature), and ``logp`` is the log-probability under *that*
    distribution, the one actually sampled: pass the same ``temperature`` to
    :func:`completion_logp` and the first ratio is exactly 1 (TRL divides the logits by the
    temperature in both places too). Recording the temperature-1 log-probs instead makes every
    run at temperature != 1 silently off-policy. Greedy decoding records the temperature-1
    log-probs. After EOS a row is padded with PAD and its mask is False. ``entropy=True``
    also returns the entropy of each sampled token's distribution, (N, T), 0 at padding.
    """
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    temperature = check_real("temperature", temperature, minimum=0.0)
    N = prompts.shape[0]
    done = torch.zeros(N, dtype=torch.bool, device=prompts.device)
    zero = torch.zeros(N, device=prompts.device)
    tokens, mask, logps, entropies = [], [], [], []
    cache = []                                          # keys and values: each token once
    logits = model(prompts, cache=cache)[:, -1, :]                         # (N, V)
    for t in range(max_new_tokens):
        if t:
            logits = model(nxt[:, None], cache=cache)[:, -1, :]            # (N, V)
        logits = logits.float()
        if temperature > 0:
            logits = logits / temperature                                  # what is sampled
        logprobs = F.log_softmax(logits, dim=-1)                           # (N, V)
        if temperature == 0:
            nxt = logits.argmax(dim=-1)                                    # (N,)
        else:
            nxt = draw(logprobs.exp(), generator)                          # (N,)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        tokens.append(nxt)
        mask.append(~done)
        logps.append(torch.where(done, zero, logprobs.gather(1, nxt[:, None]).squeeze(1)))
        if entropy:
            h = -(logprobs.exp() * logprobs).sum(-1)                       # (N,)
            entropies.append(torch.where(done, zero, h))
        done = done | (nxt == EOS)
        if bool(done.all()):
            break
    out = (torch.stack(tokens, 1), torch.stack(mask, 1), torch.stack(logps, 1))
    return out + (torch.stack(entropies, 1),) if entropy else out


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs`` (N, V), drawn by inverting the cumulative distribution.

    One uniform number u per row, and the token is the first whose cumulative probability
    passes u times the row's total: token v is drawn with probability p_v / sum(p), and a
    token of probability 0 never (its cumulative sum equals its left neighbour's). The sums
    and u are float64, so that tokens far below float32's resolution keep their chance. It
    gives the distribution ``torch.multinomial(probs, 1)`` gives, from N random numbers
    instead of one per vocabulary entry (on CPU, several times faster here). Like
    ``multinomial``, it refuses a row that is not a distribution: a negative or non-finite
    entry, or a total of 0 (a NaN in the logits of a diverged policy ends up here).
    """
    cdf = probs.to(torch.float64).cumsum(dim=-1)                           # (N, V)
    total = cdf[:, -1:]                                                    # (N, 1)
    if not (bool(torch.isfinite(total).all()) and bool((total > 0).all())
            and bool((probs >= 0).all())):
        raise ValueError("probs: expected non-negative, finite rows with a positive total "
                         "(a distribution over the vocabulary), got a row that is not one")
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device,
                   dtype=torch.float64) * total                            # (N, 1) in [0, total)
    nxt = torch.searchsorted(cdf, u, right=True).squeeze(1)                # first cdf > u
    return nxt.clamp_(max=probs.shape[1] - 1)                              # (N,)


def completion_logp(model: TinyGPT, prompts: torch.Tensor, tokens: torch.Tensor,
                    mask: torch.Tensor, *, temperature: float = 1.0, entropy: bool = False,
                    prompt_repeats: int = 1):
    """log pi(token_t | prompt, tokens_<t) for every completion token, (N, T); 0 at padding.

    One forward pass over prompt + completion (teacher forcing), with gradient: this is the
    ``logp`` of the GRPO loss. ``temperature`` divides the logits, as in :func:`sample`: the
    loss must score the distribution the tokens were drawn from. ``entropy=True`` also
    returns each position's entropy, (N, T), 0 at padding, with gradient (an entropy bonus).

    ``prompt_repeats=G`` shares the prompt: ``prompts`` then has N / G rows, each the prompt of
    G consecutive completions (a GRPO group), and its keys and values are computed once and
    reused by the G completions, as inference engines cache a shared prefix. Same result.
    """
    P = prompts.shape[1]
    if prompt_repeats == 1:
        ids = torch.cat([prompts, tokens], dim=1)                          # (N, P + T)
        # The shift: the logits at position j score the token at j + 1, so positions P - 1
        # to P + T - 2 score the T completion tokens (the last token scores nothing needed).
        logits = model(ids[:, :-1])[:, P - 1:, :]                          # (N, T, V)
    else:
        cache = []
        first = model(prompts, cache=cache)[:, -1:, :]                     # (B, 1, V)
        cache[:] = [(k.repeat_interleave(prompt_repeats, 0),
                     v.repeat_interleave(prompt_repeats, 0)) for k, v in cache]   # (N, nh, P, hs)
        rest = model(tokens[:, :-1], cache=cache)                          # (N, T - 1, V)
        logits = torch.cat([first.repeat_interleave(prompt_repeats, 0), rest], dim=1)
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logprobs = F.log_softmax(logits, dim=-1)                               # (N, T, V)
    logp = logprobs.gather(2, tokens[..., None]).squeeze(2)                # (N, T) sampled
    logp = torch.where(mask, logp, torch.zeros_like(logp))                 # 0 after EOS
    if not entropy:
        return logp
    h = -(logprobs.exp() * logprobs).sum(-1)                               # (N, T)
    return logp, torch.where(mask, h, torch.zeros_like(h))
