r"""The GRPO step on a Hugging Face causal LM, and the same run in TRL: ``gl.hf``.

Taught in chapter 6b (``chapters/06b_real_model.ipynb``, "A real model and a real engine"),
right after chapter 6's own loop. ``import grpo_lab`` never imports torch or transformers;
this subpackage does, on first use of ``gl.hf``. Everything is built in code: no weights, no
data and no tokenizer are downloaded.

===============================  ==============================================================
Name                             Where it is taught (chapter 6b's sections)
===============================  ==============================================================
``build_tokenizer``              the model and the prompt template: a character tokenizer
``stop_ids``                     the ids a completion stops at (``STOP_TOKENS``)
``build_bpe_tokenizer``          a byte-level BPE like a real LLM's: ``tag_pieces``,
                                 ``retokenized``, ``bos_count`` show what changes
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
``saved_logit_tensors``          what a log-prob's backward keeps, measured
                                 (``logprob_memory_table``)
``frozen_copy``                  the reference model: a frozen copy of the policy
``reference_logprobs``           ref_logp from the frozen reference
``old_logprobs``                 old_logp recomputed by the trainer beside the sampler's
``logp_mismatch``                how far the sampler's log-probs are from the trainer's
``is_weights``                   IS corrections: TIS, MIS / IcePop, sequence-level, TRL's
                                 default sequence mask with its cap (``IS_MODES``)
``weighted_advantages``          the IS weight folded into the advantages
``micro_batches``                micro-batching and gradient accumulation ...
``micro_weights``                ... with the global token count as normaliser
``micro_mean_weights``           ... and the bug: a per-micro-batch mean
``accumulate``                   forward + backward per micro-batch, one gradient
``format_text``, ``warm_start``  a short supervised warm start on the format (as chapter 6)
``addition_rewards``             chapter 5's verifiers on decoded text (``trl_reward_function``
                                 gives TRL's signature)
``StepConfig``, ``grpo_step``    one GRPO step on the real model from the book's functions
``grpo_config``, ``run_trl``     the same run in TRL 1.16.0's GRPOTrainer (``TRL_VERSION``):
                                 the StepConfig as a GRPOConfig, offline, on the CPU
``BatchCapture``                 TRL's batch, loss and gradient captured in one step
``cross_check``                  ... recomputed with glt.grpo_loss / glt.group_advantages
``trl_knobs``, ``trl_loss``      TRL's GRPOConfig as the book's knobs, and TRL's loss and
``trl_advantages``               advantages from the book's functions (chapter 8; the
                                 matrix: ``python -m grpo_lab.hf.trl_matrix``)
===============================  ==============================================================

``import grpo_lab.hf`` imports torch and transformers; TRL and datasets are imported only
when a TRL run starts.

Each formula has its plain face beside it (``left_pad_plain``, ``completion_mask_plain``,
``token_logprobs_plain``, ``next_token_logprobs_plain``, ``token_entropy_plain``,
``token_truncated_is_plain``, ``sequence_masked_is_plain``), tested
equal to the hardened one in ``tests/hf``.
"""

from __future__ import annotations

from grpo_lab.hf.accumulate import (MICRO_WEIGHTS, accumulate, micro_batches, micro_mean_weights,
                                    micro_weights)
from grpo_lab.hf.bpe import (BPE_CHAT_TEMPLATE, bos_count, bpe_corpus, build_bpe_tokenizer,
                             retokenized, tag_pieces)
from grpo_lab.hf.batch import (Completions, completion_mask, completion_mask_plain,
                               encode_prompts, left_pad, left_pad_plain, sample)
from grpo_lab.hf.importance import (IS_MODES, is_weights, sequence_masked_is_plain,
                                    token_truncated_is_plain, weighted_advantages)
from grpo_lab.hf.memory import logprob_memory_table, saved_logit_tensors
from grpo_lab.hf.logprobs import (completion_logprobs, next_token_logprobs,
                                  next_token_logprobs_plain, token_entropy, token_entropy_plain,
                                  token_logprobs, token_logprobs_plain)
from grpo_lab.hf.model import ARCHITECTURES, build_model, save_local
from grpo_lab.hf.reference import frozen_copy, logp_mismatch, old_logprobs, reference_logprobs
from grpo_lab.hf.reward import FORMAT_WEIGHT, addition_rewards, trl_reward_function
from grpo_lab.hf.plain_step import grpo_step_plain
from grpo_lab.hf.step import StepConfig, StepOutput, grpo_step
from grpo_lab.hf.tokenizer import (CHAT_TEMPLATE, EOS, PAD, R1_ZERO_SYSTEM, STOP_TOKENS, VOCAB,
                                   build_tokenizer, prompt_messages, stop_ids)
from grpo_lab.hf.trl_check import BatchCapture, CrossCheck, cross_check
from grpo_lab.hf.trl_map import (TRLKnobs, grpo_config_fields, step_config_fields,
                                 trl_advantages, trl_knobs, trl_loss)
from grpo_lab.hf.trl_run import (TRL_VERSION, TRLRun, addition_dataset, grpo_config, offline,
                                 run_trl, shared_folder, trl_trainer)
from grpo_lab.hf.warmstart import ANSWER_KINDS, format_text, warm_start

__all__ = ["ANSWER_KINDS", "ARCHITECTURES", "BPE_CHAT_TEMPLATE", "bos_count", "bpe_corpus",
           "build_bpe_tokenizer", "retokenized", "tag_pieces", "CHAT_TEMPLATE", "EOS", "FORMAT_WEIGHT", "IS_MODES",
           "MICRO_WEIGHTS", "PAD", "R1_ZERO_SYSTEM", "STOP_TOKENS", "TRL_VERSION", "VOCAB", "BatchCapture",
           "Completions", "CrossCheck", "StepConfig", "StepOutput", "TRLRun", "accumulate",
           "addition_dataset", "addition_rewards", "build_model", "build_tokenizer",
           "completion_logprobs", "completion_mask", "completion_mask_plain", "cross_check",
           "encode_prompts", "format_text", "frozen_copy", "grpo_config", "grpo_step", "grpo_step_plain",
           "is_weights", "left_pad", "left_pad_plain", "logp_mismatch", "logprob_memory_table", "micro_batches",
           "micro_mean_weights", "micro_weights", "next_token_logprobs",
           "next_token_logprobs_plain", "offline", "old_logprobs", "prompt_messages",
           "reference_logprobs", "run_trl", "sample", "save_local", "saved_logit_tensors",
           "sequence_masked_is_plain", "stop_ids",
           "token_entropy", "token_entropy_plain", "token_logprobs", "token_logprobs_plain",
           "token_truncated_is_plain", "trl_reward_function", "warm_start", "weighted_advantages",
           "TRLKnobs", "grpo_config_fields", "shared_folder", "step_config_fields",
           "trl_advantages", "trl_knobs", "trl_loss", "trl_trainer"]
