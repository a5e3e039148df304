r"""The GRPO step on a Hugging Face causal LM, and the same run in TRL: ``gl.hf``.

Taught in chapter 6b (``chapters/06b_real_model.ipynb``, "A real model and a real engine"),
right after chapter 6's own loop. ``import grpo_lab`` never imports torch or transformers;
this subpackage does, on first use of ``gl.hf``. Everything is built in code: no weights, no
data and no tokenizer are downloaded.

===============================  ==============================================================
Name                             Where it is taught (chapter 6b's sections)
===============================  ==============================================================
``build_tokenizer``              the model and the prompt template: a character tokenizer
``prompt_messages``              chapter 6's prompt as chat messages (``CHAT_TEMPLATE``,
                                 ``R1_ZERO_SYSTEM``)
``build_model``, ``save_local``  a small Llama / Qwen2 causal LM; a folder TRL can reload
``left_pad``, ``encode_prompts`` prompts, padding and the attention mask
``sample``                       sampling with ``generate``: temperature, EOS, max length
``completion_mask``              the completion mask: prompt, padding, post-EOS tokens
``next_token_logprobs``          log-probs and the one-position shift
``token_logprobs``               log pi(y) from logits, without a full log-softmax copy
``completion_logprobs``          the completion's log-probs from one forward pass
``token_entropy``                entropy from logits, stable at large and -inf logits
===============================  ==============================================================

Each formula has its plain face beside it (``left_pad_plain``, ``completion_mask_plain``,
``token_logprobs_plain``, ``next_token_logprobs_plain``, ``token_entropy_plain``), tested
equal to the hardened one in ``tests/hf``.
"""

from __future__ import annotations

from grpo_lab.hf.batch import (Completions, completion_mask, completion_mask_plain,
                               encode_prompts, left_pad, left_pad_plain, sample)
from grpo_lab.hf.logprobs import (completion_logprobs, next_token_logprobs,
                                  next_token_logprobs_plain, token_entropy, token_entropy_plain,
                                  token_logprobs, token_logprobs_plain)
from grpo_lab.hf.model import ARCHITECTURES, build_model, save_local
from grpo_lab.hf.tokenizer import (CHAT_TEMPLATE, EOS, PAD, R1_ZERO_SYSTEM, VOCAB,
                                   build_tokenizer, prompt_messages)

__all__ = ["ARCHITECTURES", "CHAT_TEMPLATE", "EOS", "PAD", "R1_ZERO_SYSTEM", "VOCAB",
           "Completions", "build_model", "build_tokenizer", "completion_logprobs",
           "completion_mask", "completion_mask_plain", "encode_prompts", "left_pad",
           "left_pad_plain", "next_token_logprobs", "next_token_logprobs_plain",
           "prompt_messages", "sample", "save_local", "token_entropy", "token_entropy_plain",
           "token_logprobs", "token_logprobs_plain"]
