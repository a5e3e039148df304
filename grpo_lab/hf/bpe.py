r"""A byte-level BPE tokenizer shaped like a real LLM's, trained in code on chapter 6's task.

Taught in chapter 6b, section "The model and the prompt template"
(``chapters/06b_real_model.ipynb``), beside the character tokenizer of
:mod:`grpo_lab.hf.tokenizer`. Nothing is downloaded: the corpus is generated here from
chapter 6's sums (:func:`bpe_corpus`) and the merges are learned by ``tokenizers``' own
``BpeTrainer``. What differs from the character tokenizer is the kind, not only the size:

==================  ========================================================================
Part                Here, as in Qwen2.5 / Llama-3
==================  ========================================================================
model               byte-level BPE: any text encodes (256 byte pieces), merges learned
pre-tokenizer       Qwen2's split (letters with one leading non-letter, single digits,
                    punctuation runs), then bytes as printable characters
special tokens      ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (EOS),
                    ``<|begin_of_text|>`` (BOS, added by the post-processor)
chat template       Qwen's ``<|im_start|>role\ncontent<|im_end|>\n``, opened by the BOS
stop ids            ``<|im_end|>`` and ``<|endoftext|>``: :func:`grpo_lab.hf.stop_ids`
==================  ========================================================================

What a reader meets with it, each a small function the chapter calls:

* the tags are not tokens: ``<think>`` is several pieces (:func:`tag_pieces`); a reward
  that reads text is unaffected, a rule on token ids is not;
* decode then encode is not the identity on ids (:func:`retokenized`): the same text has
  many segmentations and the sampler may draw any of them, so a trainer scores the sampled
  ``completion_ids`` and never re-tokenizes the decoded completion (TRL keeps them);
* a template that writes the BOS and a tokenizer that adds one make two (:func:`bos_count`):
  ``apply_chat_template(tokenize=True)`` adds none of its own, ``tokenizer(text)`` does.
"""

from __future__ import annotations

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from grpo_lab.hf.checks import check_tokenizer
from grpo_lab.hf.tokenizer import R1_ZERO_SYSTEM, check_chat_template
from grpo_lab.hf.warmstart import format_text_math
from grpo_lab.numerics.validate import check_int, describe
from grpo_lab.rl.parsing import ANSWER, THINK
from grpo_lab.rl.task import AdditionTask

__all__ = ["BOS_TOKEN", "BPE_CHAT_TEMPLATE", "BPE_SPECIAL_TOKENS", "bos_count", "bpe_corpus",
           "build_bpe_tokenizer", "retokenized", "tag_pieces"]

BOS_TOKEN = "<|begin_of_text|>"
#: pad, turn start, EOS (end of turn), BOS: ids 0 to 3, before the 256 byte pieces.
BPE_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", BOS_TOKEN)

#: Qwen2.5's chat layout, opened by a BOS as Llama-3's template is.
BPE_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Qwen2's pre-tokenizer pattern (tokenizer.json of Qwen2.5): contractions, letters with one
# leading non-letter, one digit at a time, punctuation runs, newlines, spaces.
_QWEN_SPLIT = Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bpe_corpus(n: int = 400, *, seed: int = 0) -> list[str]:
    """``n`` texts of chapter 6's task: prompts, formatted answers, roles and the R1-Zero
    system text, seeded. The tokenizer's merges are learned from them."""
    n = check_int("n", n, minimum=1)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    task = AdditionTask(n_terms=2, max_term=9, held_out=0.2, seed=0)
    texts = [R1_ZERO_SYSTEM, "user\n", "assistant\n"]
    for terms in task.batch(n, rng):
        texts.append("+".join(map(str, terms)) + "=")
        texts.append(format_text_math(int(sum(terms))))
    return texts


def build_bpe_tokenizer(*, vocab_size: int = 320, n_texts: int = 400, seed: int = 0,
                        chat_template: str = BPE_CHAT_TEMPLATE,
                        model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE of ``vocab_size`` pieces trained on :func:`bpe_corpus`, with Qwen's
    chat template, a BOS, left padding and two stop tokens.

    ================  =====  ===============================================================
    Argument          Type   Meaning
    ================  =====  ===============================================================
    vocab_size        int    pieces in all: 4 special + 256 bytes + the merges (>= 261)
    n_texts, seed     int    the corpus (:func:`bpe_corpus`)
    chat_template     str    Jinja; :data:`BPE_CHAT_TEMPLATE` by default
    ================  =====  ===============================================================

    >>> import grpo_lab.hf as glh
    >>> tok = glh.build_bpe_tokenizer()
    >>> tok.eos_token, tok.pad_token, tok.bos_token, glh.stop_ids(tok)
    ('<|im_end|>', '<|endoftext|>', '<|begin_of_text|>', (2, 0))
    >>> tok.decode(tok("7+5=<answer>12</answer>")["input_ids"], skip_special_tokens=True)
    '7+5=<answer>12</answer>'
    """
    vocab_size = check_int("vocab_size", vocab_size, minimum=len(BPE_SPECIAL_TOKENS) + 257,
                           maximum=100_000)
    corpus = bpe_corpus(n_texts, seed=seed)
    chat_template = check_chat_template("chat_template", chat_template)
    model_max_length = check_int("model_max_length", model_max_length, minimum=2)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(_QWEN_SPLIT, behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(BPE_SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = core.token_to_id(BOS_TOKEN)
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B", special_tokens=[(BOS_TOKEN, bos)])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS_TOKEN, eos_token="<|im_end|>",
        pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"],
        padding_side="left", chat_template=chat_template, model_max_length=model_max_length)


def tag_pieces(tokenizer, text: str = THINK[0]) -> list[str]:
    """The pieces ``text`` encodes to (no special tokens added): one for the character
    tokenizer's tags, several for a BPE's.

    >>> import grpo_lab.hf as glh
    >>> glh.tag_pieces(glh.build_tokenizer(), "<think>")
    ['<think>']
    """
    tokenizer = check_tokenizer("tokenizer", tokenizer)
    if not isinstance(text, str) or not text:
        raise TypeError(f"text: expected a non-empty str, got {describe(text)}")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.convert_ids_to_tokens(ids)


def retokenized(tokenizer, text: str = ANSWER[0]) -> dict:
    """The same text as two id sequences: spelled byte by byte (a segmentation a sampler can
    draw, one piece per step) and as the tokenizer encodes it. ``{"text", "sampled",
    "decoded", "re_encoded", "same_text", "same_ids"}``: same text, different ids.

    >>> import grpo_lab.hf as glh
    >>> r = glh.retokenized(glh.build_bpe_tokenizer(), "<answer>")
    >>> r["same_text"], r["same_ids"], len(r["sampled"]), len(r["re_encoded"]) < 8
    (True, False, 8, True)
    """
    tokenizer = check_tokenizer("tokenizer", tokenizer)
    if not isinstance(text, str) or not text:
        raise TypeError(f"text: expected a non-empty str, got {describe(text)}")
    byte_piece = pre_tokenizers.ByteLevel.alphabet()
    vocab = tokenizer.get_vocab()
    if not all(p in vocab for p in byte_piece):
        raise ValueError("tokenizer: expected a byte-level BPE (256 byte pieces), got one "
                         "without them (the character tokenizer has no byte pieces)")
    sampled = [vocab[_byte_piece(b)] for b in text.encode()]               # one byte a step
    decoded = tokenizer.decode(sampled)
    re_encoded = tokenizer(decoded, add_special_tokens=False)["input_ids"]
    return {"text": text, "sampled": sampled, "decoded": decoded, "re_encoded": re_encoded,
            "same_text": decoded == text, "same_ids": list(sampled) == list(re_encoded)}


def _byte_piece(b: int) -> str:
    """GPT-2's printable character for byte ``b`` (the byte-level pre-tokenizer's alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    extra = [x for x in range(256) if x not in printable]
    return chr(b) if b in printable else chr(256 + extra.index(b))


def bos_count(tokenizer, messages) -> dict:
    """How many BOS tokens a prompt holds, tokenized two ways: ``apply_chat_template(...,
    tokenize=True)`` (the template's own BOS) and ``tokenizer(rendered text)`` (the template's
    and the post-processor's: two). TRL 1.16.0 tokenizes conversational prompts the first way.

    >>> import grpo_lab.hf as glh
    >>> glh.bos_count(glh.build_bpe_tokenizer(), glh.prompt_messages((1, 2)))
    {'apply_chat_template': 1, 'tokenizer(text)': 2}
    """
    tokenizer = check_tokenizer("tokenizer", tokenizer, chat=True)
    if tokenizer.bos_token_id is None:
        raise ValueError("tokenizer: expected a tokenizer with a BOS token, got none")
    if not isinstance(messages, list) or not messages or \
            not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        raise TypeError(f"messages: expected a non-empty list of {{'role', 'content'}} dicts, "
                        f"got {describe(messages)}")
    direct = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                           return_dict=True)["input_ids"]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    twice = tokenizer(text)["input_ids"]
    bos = tokenizer.bos_token_id
    return {"apply_chat_template": list(direct).count(bos), "tokenizer(text)": twice.count(bos)}
