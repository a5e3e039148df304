"""The checks ``gl.hf``'s public functions make at their door, built on the one validation layer.

:mod:`grpo_lab.numerics.validate` checks numbers, arrays and tensors of numbers; a step on a
Hugging Face model also takes token ids, a model, a tokenizer, EOS ids and row slices. Their
checks live here, written with the layer's own pieces (``describe``, ``check_int``, ...) and in
its words: ``<argument>: expected <what>, got <what came>``, a ``TypeError`` for the wrong kind
of object, a ``ValueError`` for the right kind with a wrong value. Each takes the argument's
``name`` first, so the count of ``tests/hf/test_validate_once.py`` sees which argument it was
about. A public function of ``gl.hf`` calls them once, at its door, then runs its ``*_math``
twin, which checks nothing; one public function composing others calls the twins.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from transformers import PreTrainedModel

from grpo_lab.numerics.validate import check_int, describe

__all__ = ["check_bool", "check_eos", "check_ids", "check_model", "check_slices",
           "check_tokenizer", "check_vocab", "is_integer", "vocab_size"]


def is_integer(x) -> bool:
    """A Python or NumPy integer, not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def check_bool(name: str, value) -> bool:
    """True or False (a NumPy bool too); not 0 / 1, not a string."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {describe(value)}")
    return bool(value)


def check_model(name: str, model) -> PreTrainedModel:
    """A transformers ``PreTrainedModel`` (what ``gl.hf.build_model`` makes)."""
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"{name}: expected a transformers PreTrainedModel (gl.hf.build_model), "
                        f"got {describe(model)}")
    return model


def vocab_size(model) -> int:
    """The number of rows of the model's input embedding: ids at or past it do not exist."""
    return int(model.get_input_embeddings().num_embeddings)


def check_tokenizer(name: str, tokenizer, *, chat: bool = False):
    """A Hugging Face tokenizer with integer pad and eos ids (and a chat template if ``chat``)."""
    if not callable(tokenizer) or not callable(getattr(tokenizer, "decode", None)) \
            or not hasattr(tokenizer, "pad_token_id"):
        raise TypeError(f"{name}: expected a Hugging Face tokenizer (gl.hf.build_tokenizer), "
                        f"got {describe(tokenizer)}")
    for attr in ("pad_token_id", "eos_token_id"):
        if not is_integer(getattr(tokenizer, attr, None)):
            raise ValueError(f"{name}: expected a tokenizer with a pad and an eos token, got "
                             f"{attr} = {getattr(tokenizer, attr, None)!r}")
    if chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{name}: expected a tokenizer with a chat template (chat messages "
                         f"are rendered with it), got none")
    return tokenizer


def check_ids(name: str, ids, ndim: int = 2, *, vocab: int | None = None) -> torch.Tensor:
    """Token ids: a non-empty integer tensor of ``ndim`` dimensions, every id in [0, vocab)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor of token ids, got {describe(ids)}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor of token ids, got dtype {ids.dtype}")
    if ids.dim() != ndim or ids.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty {ndim}-D tensor of token ids, got "
                         f"{describe(ids)}")
    if ids.device.type == "meta":
        raise ValueError(f"{name}: expected a tensor with values, got {describe(ids)}")
    if bool((ids < 0).any()):
        raise ValueError(f"{name}: expected token ids >= 0, got {int(ids.min())}")
    if vocab is not None and bool((ids >= vocab).any()):
        raise ValueError(f"{name}: expected token ids below the model's vocabulary size "
                         f"{vocab}, got {int(ids.max())}")
    return ids


def check_vocab(name: str, model, ids: torch.Tensor) -> None:
    """Every id of ``ids`` (already checked) is a row of ``model``'s embedding, on its device."""
    V = vocab_size(model)
    if bool((ids >= V).any()):
        raise ValueError(f"{name}: expected token ids below the model's vocabulary size {V}, "
                         f"got {int(ids.max())}")
    if ids.device != model.device:
        raise ValueError(f"{name}: expected a tensor on the model's device {model.device}, got "
                         f"{describe(ids)} (move it with .to(model.device))")


def check_eos(name: str, eos_id) -> tuple[int, ...]:
    """One EOS id or several (Qwen2.5-Instruct and Llama-3-Instruct ship a list in their
    generation config), as a non-empty tuple of ids >= 0."""
    if isinstance(eos_id, torch.Tensor):
        if eos_id.dtype.is_floating_point or eos_id.dtype in (torch.bool, torch.complex64,
                                                              torch.complex128) \
                or eos_id.dim() > 1:
            raise TypeError(f"{name}: expected an integer id or a list of them, got "
                            f"{describe(eos_id)}")
        eos_id = eos_id.tolist()
    if is_integer(eos_id):
        return (check_int(name, eos_id, minimum=0),)
    if isinstance(eos_id, (list, tuple)) and eos_id and all(is_integer(e) for e in eos_id):
        return tuple(check_int(name, e, minimum=0) for e in eos_id)
    raise TypeError(f"{name}: expected an integer id or a non-empty list of them, got "
                    f"{describe(eos_id)}")


def check_slices(name: str, slices, n_rows: int | None = None) -> list[slice]:
    """Micro-batches: a non-empty list of contiguous row slices ``slice(start, stop)``, each
    with ``0 <= start < stop`` (``None`` ends: 0 and ``n_rows``; without ``n_rows`` a
    ``None`` stop is kept), no step but 1; with
    ``n_rows``, they must cover each row of ``range(n_rows)`` exactly once and no slice may
    reach past it. Returned with both ends as ints (a strided, negative or past-the-end
    slice is refused: Python would read it, but its rows are not what its ends say)."""
    if not isinstance(slices, (list, tuple)) or not slices or \
            not all(isinstance(s, slice) for s in slices):
        raise TypeError(f"{name}: expected a non-empty list of slices (gl.hf.micro_batches), "
                        f"got {describe(slices)}")
    out = []
    for k, s in enumerate(slices):
        ends = (s.start, s.stop, s.step)
        if any(e is not None and not is_integer(e) for e in ends):
            raise TypeError(f"{name}: expected slices of integers, got {s} at index {k}")
        if s.step not in (None, 1):
            raise ValueError(f"{name}: expected contiguous slices (step 1), got {s} at index {k}")
        start = 0 if s.start is None else int(s.start)
        if s.stop is None and n_rows is None:                   # read to the end, whatever N is
            if start < 0:
                raise ValueError(f"{name}: expected 0 <= start, got {s} at index {k}")
            out.append(slice(start, None))
            continue
        stop = n_rows if s.stop is None else int(s.stop)
        if start < 0 or stop <= start or (n_rows is not None and stop > n_rows):
            within = "" if n_rows is None else f" <= {n_rows} rows"
            raise ValueError(f"{name}: expected 0 <= start < stop{within}, got {s} at index {k}")
        out.append(slice(start, stop))
    if n_rows is not None:
        rows = sorted(i for s in out for i in range(s.start, s.stop))
        if rows != list(range(n_rows)):
            raise ValueError(f"{name}: expected micro-batches covering each of the {n_rows} rows "
                             f"once, got {list(slices)}")
    return out
