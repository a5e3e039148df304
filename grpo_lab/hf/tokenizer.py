r"""A character-level Hugging Face tokenizer for chapter 6's addition task, built in code.

Taught in chapter 6b, section "The model and the prompt template"
(``chapters/06b_real_model.ipynb``). Nothing is downloaded: the vocabulary is written here and
the tokenizer is assembled from the ``tokenizers`` library's parts, the way a real one is:

===============  ===========================================================================
Part             Here
===============  ===========================================================================
model            ``WordLevel``: one id per piece of :data:`VOCAB`
pre-tokenizer    ``Split`` on a regular expression: each tag is one piece, else one character
decoder          ``Fuse``: the pieces are joined with nothing between them
padding          on the left (``padding_side="left"``): a batch of prompts ends together, so
                 the first generated token of every row sits in the same column
special tokens   ``<pad>`` (id 0) and ``<eos>`` (id 1); the tags are ordinary tokens, so that
                 ``decode(..., skip_special_tokens=True)``, which TRL calls, keeps them
chat template    :data:`CHAT_TEMPLATE`, DeepSeek-R1-Zero's "User: ... Assistant:" layout
===============  ===========================================================================

A real LLM's tokenizer differs in size (150k pieces learned by BPE), not in kind: the same
``PreTrainedTokenizerFast`` object, padding side, special tokens and chat template.
"""

from __future__ import annotations

import string

from jinja2 import TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from grpo_lab.numerics.validate import check_int, describe
from grpo_lab.hf.checks import check_tokenizer, is_integer
from grpo_lab.rl.parsing import ANSWER, THINK

__all__ = ["CHAT_TEMPLATE", "EOS", "EOS_TOKEN", "PAD", "PAD_TOKEN", "R1_ZERO_SYSTEM",
           "STOP_TOKENS", "VOCAB", "stop_ids", "stop_ids_math",
           "build_tokenizer", "check_chat_template", "check_prompt_arguments",
           "check_tokenizer_arguments", "prompt_messages"]

PAD_TOKEN, EOS_TOKEN = "<pad>", "<eos>"
#: The pieces: padding, end of sequence, the four tags, then every printable ASCII character
#: (so any prompt template in English can be written) and the newline.
VOCAB = (PAD_TOKEN, EOS_TOKEN, *THINK, *ANSWER, "\n", *string.printable[:95])
PAD, EOS = 0, 1

#: DeepSeek-R1's template for R1-Zero (DeepSeek-AI 2025, table 1), the system text before
#: "User: <prompt>\nAssistant: ". Shown in chapter 6b; the training prompts leave it out, since
#: a 2-layer model cannot read it and it would make every prompt 12 times longer.
R1_ZERO_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within "
    "<think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning "
    "process here </think> <answer> answer here </answer>.")

#: A Jinja chat template: a system message's text and a newline, "User: " and the question and
#: a newline, "Assistant: " and the answer and EOS; ``add_generation_prompt=True`` ends the
#: text with "Assistant: ", where the model starts writing (its first token is ``<think>``).
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] + '\n' }}"
    "{% elif m['role'] == 'user' %}{{ 'User: ' + m['content'] + '\n' }}"
    "{% else %}{{ 'Assistant: ' + m['content'] + eos_token + '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}")

# A tag is one piece; anything else is one character, newline included ([\s\S], not ".").
_PIECE = Regex("|".join(THINK + ANSWER) + r"|[\s\S]")


def check_chat_template(name: str, template) -> str:
    """A Jinja chat template that compiles and renders a user message, as transformers will
    render it (its sandbox, ``trim_blocks`` and ``lstrip_blocks``): a broken template is
    refused here, by name, not at the first ``apply_chat_template``."""
    if not isinstance(template, str) or not template:
        raise TypeError(f"{name}: expected a non-empty Jinja str, got {describe(template)}")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    try:
        env.from_string(template).render(
            messages=[{"role": "user", "content": "1+2="}], add_generation_prompt=True,
            bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    except TemplateSyntaxError as err:
        raise ValueError(f"{name}: expected a Jinja template that compiles, got a syntax error "
                         f"at line {err.lineno}: {err.message}") from None
    except Exception as err:                        # Jinja's UndefinedError, a raise_exception
        raise ValueError(f"{name}: expected a Jinja template that renders a user message, got "
                         f"{type(err).__name__}: {err}") from None
    return template


def check_tokenizer_arguments(chat_template, model_max_length):
    """Validate :func:`build_tokenizer`'s arguments."""
    return (check_chat_template("chat_template", chat_template),
            check_int("model_max_length", model_max_length, minimum=2))


def build_tokenizer(*, chat_template: str = CHAT_TEMPLATE,
                    model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """The task's tokenizer: :data:`VOCAB` as a ``WordLevel`` model, left padding, a chat template.

    =================  ======  ============================================================
    Argument           Type    Meaning
    =================  ======  ============================================================
    chat_template      str     Jinja template for ``apply_chat_template`` (TRL needs one for
                               conversational prompts); :data:`CHAT_TEMPLATE` by default
    model_max_length   int     the longest text it encodes without a warning
    =================  ======  ============================================================

    A character outside :data:`VOCAB` is refused when encoded (tokenizers' "Missing [UNK]
    token" error): there is no unknown token, because silent ``<unk>`` ids are how a prompt
    goes wrong without anyone seeing it.

    >>> from grpo_lab.hf.tokenizer import build_tokenizer, prompt_messages
    >>> tok = build_tokenizer()
    >>> ids = tok("7+5=<answer>12</answer>")["input_ids"]
    >>> [tok.convert_ids_to_tokens(i) for i in ids]
    ['7', '+', '5', '=', '<answer>', '1', '2', '</answer>']
    >>> tok.decode(ids)
    '7+5=<answer>12</answer>'
    >>> tok.apply_chat_template(prompt_messages((7, 5)), tokenize=False, add_generation_prompt=True)
    'User: 7+5=\\nAssistant: '
    >>> tok(["1+2=", "10+20="], padding=True)["attention_mask"]    # padded on the left
    [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    """
    chat_template, model_max_length = check_tokenizer_arguments(chat_template, model_max_length)
    core = Tokenizer(models.WordLevel({s: i for i, s in enumerate(VOCAB)}, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Split(_PIECE, behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD_TOKEN,
                                   eos_token=EOS_TOKEN, padding_side="left",
                                   chat_template=chat_template,
                                   model_max_length=model_max_length)


#: The tokens that end a completion when the vocabulary has them: Qwen2.5-Instruct's
#: generation config lists ``<|im_end|>`` (end of a turn) and ``<|endoftext|>``.
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


def stop_ids(tokenizer) -> tuple[int, ...]:
    """The ids a completion stops at: the tokenizer's EOS, then any of :data:`STOP_TOKENS` in
    its vocabulary (TRL 1.16.0 does the same: the generation config's list, with the
    tokenizer's EOS put first when missing; ``trl/trainer/grpo_trainer.py:409-416``).

    >>> import grpo_lab.hf as glh
    >>> glh.stop_ids(glh.build_tokenizer())
    (1,)
    """
    return stop_ids_math(check_tokenizer("tokenizer", tokenizer))


def stop_ids_math(tokenizer) -> tuple[int, ...]:
    """:func:`stop_ids` of a checked tokenizer."""
    vocab = tokenizer.get_vocab()
    ids = [tokenizer.eos_token_id] + [vocab[t] for t in STOP_TOKENS if t in vocab]
    return tuple(dict.fromkeys(i for i in ids if i is not None))


def check_prompt_arguments(terms, system):
    """Validate :func:`prompt_messages`' arguments: ``terms`` as a tuple of Python ints."""
    if isinstance(terms, (str, bytes)) or not hasattr(terms, "__iter__") \
            or not hasattr(terms, "__len__"):
        raise TypeError(f"terms: expected a sequence of integers such as (2, 4, 1, 3), got "
                        f"{describe(terms)}")
    terms = tuple(terms)
    if not terms or not all(is_integer(t) and t >= 0 for t in terms):
        raise ValueError(f"terms: expected non-negative integers such as (2, 4, 1, 3), got "
                         f"{terms!r}")
    if system is not None and not isinstance(system, str):
        raise TypeError(f"system: expected a str or None, got {describe(system)}")
    return tuple(int(t) for t in terms), system


def prompt_messages(terms, *, system: str | None = None) -> list[dict]:
    """Chapter 6's prompt for ``terms`` as chat messages: ``[{"role": "user", ...}]``.

    ``system`` (e.g. :data:`R1_ZERO_SYSTEM`) adds a system message before it.

    >>> from grpo_lab.hf.tokenizer import prompt_messages
    >>> prompt_messages((2, 4, 1, 3))
    [{'role': 'user', 'content': '2+4+1+3='}]
    """
    terms, system = check_prompt_arguments(terms, system)
    user = {"role": "user", "content": "+".join(str(t) for t in terms) + "="}
    return ([{"role": "system", "content": system}] if system else []) + [user]
