r"""A small Hugging Face causal LM built in code (Llama or Qwen2), and saving it to a folder.

Taught in chapter 6b, section "The model and the prompt template"
(``chapters/06b_real_model.ipynb``). The model is the same class a reader fine-tunes
(``LlamaForCausalLM``, ``Qwen2ForCausalLM``): rotary positions, RMSNorm, SwiGLU,
multi-head attention (one KV head per query head here; Qwen2.5 shares each KV head among
several query heads, grouped-query attention, a memory saving this size does not need), a KV
cache in ``generate``. Only its size is small: two layers of width 64 and the
tokenizer's 102 pieces, about 140k parameters, initialised from a seed. Nothing is downloaded.

Why save it (:func:`save_local`): TRL's ``GRPOTrainer`` with ``beta > 0`` builds the frozen
reference model by loading ``model.config._name_or_path`` again, so a model that exists only
in memory must first be written to a folder that this field names.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, PreTrainedModel, Qwen2Config,
                          Qwen2ForCausalLM)

from grpo_lab.hf.checks import check_eos, check_model, check_tokenizer
from grpo_lab.hf.tokenizer import stop_ids_math
from grpo_lab.numerics.validate import check_choice, check_int, describe

__all__ = ["ARCHITECTURES", "build_model", "check_model_arguments", "check_save_arguments",
           "save_local"]

#: The architectures :func:`build_model` makes: config class and model class.
ARCHITECTURES = {"llama": (LlamaConfig, LlamaForCausalLM),
                 "qwen2": (Qwen2Config, Qwen2ForCausalLM)}


def check_model_arguments(tokenizer, arch, hidden_size, n_layer, n_head, max_positions, seed,
                          eos_token_id=None):
    """Validate :func:`build_model`'s arguments; returns them checked (ints as ints, the EOS
    ids as a tuple: ``eos_token_id``, or the tokenizer's stop ids)."""
    tokenizer = check_tokenizer("tokenizer", tokenizer)
    eos = check_eos("eos_token_id", stop_ids_math(tokenizer) if eos_token_id is None
                    else eos_token_id)
    if max(eos) >= len(tokenizer):
        raise ValueError(f"eos_token_id: expected ids below the tokenizer's {len(tokenizer)} "
                         f"pieces, got {max(eos)}")
    arch = check_choice("arch", arch, tuple(ARCHITECTURES))
    hidden_size = check_int("hidden_size", hidden_size, minimum=2)
    n_layer = check_int("n_layer", n_layer, minimum=1)
    n_head = check_int("n_head", n_head, minimum=1)
    if hidden_size % n_head or (hidden_size // n_head) % 2:
        raise ValueError(f"n_head: expected a divisor of hidden_size = {hidden_size} leaving an "
                         f"even head size (rotary positions turn pairs), got {n_head}")
    max_positions = check_int("max_positions", max_positions, minimum=2)
    return tokenizer, arch, hidden_size, n_layer, n_head, max_positions, check_int(
        "seed", seed, minimum=0), eos


def build_model(tokenizer, *, arch: str = "llama", hidden_size: int = 64, n_layer: int = 2,
                n_head: int = 4, max_positions: int = 64, seed: int = 0,
                eos_token_id=None) -> PreTrainedModel:
    """A freshly initialised causal LM over ``tokenizer``'s vocabulary, in float32 on the CPU.

    =============  ======  ================================================================
    Argument       Type    Meaning
    =============  ======  ================================================================
    tokenizer      HF      gives the vocabulary size and the pad / eos ids
    arch           str     "llama" (LlamaForCausalLM) or "qwen2" (Qwen2ForCausalLM)
    hidden_size    int     width d, usually 32 to 128 here (4096 in Llama-2 7B)
    n_layer        int     decoder layers, 2 here (32 in Llama-2 7B)
    n_head         int     attention heads; hidden_size / n_head must be even (RoPE)
    max_positions  int     the longest prompt + completion, in tokens
    seed           int     the initial weights are a function of the seed alone
    eos_token_id   int or  the stop ids ``generate`` ends a row at; None: the tokenizer's
                   list    (:func:`grpo_lab.hf.stop_ids`: a list for the BPE tokenizer)
    =============  ======  ================================================================

    The MLP is 4 d wide (SwiGLU), the input and output embeddings are tied, and the model's
    generation config carries the tokenizer's pad and eos ids, so ``generate`` stops at EOS.

    >>> import grpo_lab.hf as glh
    >>> tok = glh.build_tokenizer()
    >>> model = glh.build_model(tok, seed=0)
    >>> type(model).__name__, sum(p.numel() for p in model.parameters())
    ('LlamaForCausalLM', 137920)
    """
    tokenizer, arch, d, n_layer, n_head, max_positions, seed, eos = check_model_arguments(
        tokenizer, arch, hidden_size, n_layer, n_head, max_positions, seed, eos_token_id)
    config_class, model_class = ARCHITECTURES[arch]
    config = config_class(vocab_size=len(tokenizer), hidden_size=d, intermediate_size=4 * d,
                          num_hidden_layers=n_layer, num_attention_heads=n_head,
                          num_key_value_heads=n_head, max_position_embeddings=max_positions,
                          pad_token_id=tokenizer.pad_token_id,
                          eos_token_id=eos[0] if len(eos) == 1 else list(eos),
                          bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id
                          is not None else tokenizer.eos_token_id, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):         # seeded without moving the caller's RNG
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = eos[0] if len(eos) == 1 else list(eos)
    return model


def check_save_arguments(model, tokenizer, folder):
    """Validate :func:`save_local`'s arguments; the folder is made (with its parents) here, so
    a path that cannot be a folder is refused before anything is written."""
    model = check_model("model", model)
    if not hasattr(tokenizer, "save_pretrained"):
        raise TypeError(f"tokenizer: expected a Hugging Face tokenizer, got {describe(tokenizer)}")
    if not isinstance(folder, (str, Path)):
        raise TypeError(f"folder: expected a str or pathlib.Path, got {describe(folder)}")
    if str(folder).strip() == "":
        raise ValueError("folder: expected a folder path, got an empty string (it would write "
                         "into the current directory)")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"folder: expected a folder, got {str(folder)!r}, which is a file")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"folder: expected a folder that can be made, got {str(folder)!r} "
                         f"({err.strerror})") from None
    if not os.access(folder, os.W_OK):
        raise ValueError(f"folder: expected a writable folder, got {str(folder)!r}")
    return model, tokenizer, folder


def save_local(model, tokenizer, folder) -> Path:
    """Write ``model`` and ``tokenizer`` to ``folder`` and point ``model.config._name_or_path``
    at it, so that ``from_pretrained(folder)`` (TRL's reference model) loads this model.

    Returns the folder as a ``Path``. Nothing leaves the machine.
    """
    model, tokenizer, folder = check_save_arguments(model, tokenizer, folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model.config._name_or_path = str(folder)
    return folder
