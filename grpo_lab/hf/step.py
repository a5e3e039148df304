r"""One GRPO step on a Hugging Face causal LM, composed from ``gl.hf`` and ``grpo_lab.torch``.

Taught in chapter 6b, section "A short warm start, then GRPO on the real model", "One step,
from the book's functions" (``chapters/06b_real_model.ipynb``). The book's math is reused,
never rewritten here: the advantages are ``glt.group_advantages``, the loss is
``glt.grpo_loss``; this module only wires them to a real model, as :mod:`grpo_lab.rl.train`
wires them to the tiny policy.

1. **prompts**: chapter 6's sums through the chat template, each repeated G times, padded
   left (:func:`grpo_lab.hf.encode_prompts`);
2. **sample** with ``generate`` (:func:`grpo_lab.hf.sample`): completions, their mask, the
   sampler's log-probs;
3. **score** the decoded text (:func:`grpo_lab.hf.addition_rewards`) and take
   ``glt.group_advantages`` of each group of G;
4. **old_logp** recomputed by the trainer when it is needed (several updates per batch, or an
   IS correction), **ref_logp** from the frozen reference when beta > 0
   (:mod:`grpo_lab.hf.reference`); the IS weight, if any, times the advantages
   (:mod:`grpo_lab.hf.importance`);
5. for each of ``num_iterations`` updates: **logp** with gradient, ``glt.grpo_loss`` per
   micro-batch weighted by its share of the batch's normaliser (:mod:`grpo_lab.hf.accumulate`),
   the global gradient-norm clip, one optimizer step.

:class:`StepConfig` holds the knobs, named as in the book; :meth:`StepConfig.from_preset`
takes them from ``gl.presets`` (TRL's defaults), and :func:`grpo_lab.hf.grpo_config` turns
them into TRL's ``GRPOConfig``, so both runs read the same numbers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from grpo_lab import torch as glt
from grpo_lab.core.surrogate import check_clip_range
from grpo_lab.hf.accumulate import accumulate_math, micro_batches, micro_weights_math
from grpo_lab.hf.batch import Completions, encode_prompts_math, sample_math
from grpo_lab.hf.checks import (check_eos, check_model, check_tokenizer, is_integer,
                                vocab_size)
from grpo_lab.hf.importance import IS_MODES, is_weights_math, weighted_advantages_math
from grpo_lab.hf.logprobs import completion_logits, token_entropy_math, token_logprobs_math
from grpo_lab.hf.reference import batch_logprobs_math, logp_mismatch_math
from grpo_lab.hf.reward import FORMAT_WEIGHT, addition_rewards
from grpo_lab.hf.tokenizer import check_prompt_arguments, prompt_messages
from grpo_lab.numerics.validate import check_choice, check_int, check_real, describe
from grpo_lab.production.presets import PRESETS
from grpo_lab.torch.loss import grpo_loss_math, loss_arguments

__all__ = ["ADVANTAGE_KEYS", "StepConfig", "StepOutput", "check_step_arguments", "grpo_step",
           "grpo_step_math"]

#: The options of ``glt.group_advantages`` a StepConfig's ``advantages`` may set.
ADVANTAGE_KEYS = ("eps", "scale", "ddof", "baseline")


@dataclass
class StepConfig:
    """The knobs of one GRPO step. The defaults are TRL 1.16.0's (``gl.presets.PRESETS["trl"]``)
    except ``beta`` (0.04, DeepSeekMath's, so the reference is used) and the lengths, which fit
    chapter 6's task."""

    group_size: int = 8                    # G, TRL's num_generations
    max_new_tokens: int = 8                # <think></think><answer>NN</answer><eos> is 8
    temperature: float = 1.0
    eps_low: float = 0.2                   # TRL's epsilon
    eps_high: float | None = None          # TRL's epsilon_high (None: eps_low)
    beta: float = 0.04                     # KL weight; TRL's default is 0.0
    kl: str = "k3"                         # TRL writes k3 out in _compute_loss
    kl_bias_correction: bool = True        # TRL's use_bias_correction_kl: the KL times r
    agg: str = "dapo"                      # TRL's loss_type
    advantages: dict = field(default_factory=lambda: dict(eps=1e-4, ddof=1))  # TRL's std
    num_iterations: int = 1                # mu, updates per batch
    micro_size: int | None = None          # rows per micro-batch; None: the whole batch
    max_grad_norm: float = 1.0             # the global gradient-norm clip
    is_mode: str | None = None             # an IS_MODES value, or None: no correction
    is_clip_min: float | None = None
    is_clip_max: float | None = 3.0
    format_weight: float = FORMAT_WEIGHT

    def __post_init__(self):
        self.validate()

    def validate(self) -> "StepConfig":
        """Check every field; ValueError / TypeError naming it. Returns self."""
        check_int("group_size", self.group_size, minimum=2)
        check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        check_int("num_iterations", self.num_iterations, minimum=1)
        if self.micro_size is not None:
            check_int("micro_size", self.micro_size, minimum=1)
        check_real("temperature", self.temperature, minimum=0.0, allow_equal=False)
        check_clip_range(self.eps_low, self.eps_high)
        for name in ("beta", "max_grad_norm", "format_weight"):
            check_real(name, getattr(self, name), minimum=0.0)
        check_choice("kl", self.kl, tuple(glt.KL_ESTIMATORS))
        check_choice("agg", self.agg, glt.AGGREGATIONS)
        if not isinstance(self.kl_bias_correction, bool):
            raise TypeError(f"kl_bias_correction: expected True or False, got "
                            f"{self.kl_bias_correction!r}")
        if not isinstance(self.advantages, dict):
            raise TypeError(f"advantages: expected a dict of group_advantages options, got "
                            f"{describe(self.advantages)}")
        unknown = sorted(set(map(str, self.advantages)) - set(ADVANTAGE_KEYS))
        if unknown:
            raise ValueError(f"advantages: expected keys among {', '.join(ADVANTAGE_KEYS)} "
                             f"(glt.group_advantages' options), got {unknown[0]!r}")
        try:                                      # the values, by group_advantages' own checks
            glt.group_advantages(torch.tensor([[0.0, 1.0]]), **self.advantages)
        except (TypeError, ValueError) as err:
            raise type(err)(f"advantages: expected valid group_advantages options, got "
                            f"{self.advantages} ({err})") from None
        if self.is_mode is not None:
            check_choice("is_mode", self.is_mode, IS_MODES)
        lo = None if self.is_clip_min is None else check_real("is_clip_min", self.is_clip_min,
                                                               minimum=0.0)
        hi = None if self.is_clip_max is None else check_real("is_clip_max", self.is_clip_max,
                                                               minimum=0.0, allow_equal=False)
        if lo is not None and hi is not None and lo >= hi:
            raise ValueError(f"is_clip_min: expected a bound below is_clip_max = {hi}, got {lo}")
        return self

    @classmethod
    def from_preset(cls, name: str = "trl", **overrides) -> "StepConfig":
        """The knobs of ``gl.presets.PRESETS[name]`` (its advantages, clip, KL, aggregation,
        updates per batch, group size), then ``overrides``.

        >>> import grpo_lab.hf as glh
        >>> cfg = glh.StepConfig.from_preset("trl", beta=0.04)
        >>> cfg.agg, cfg.advantages, cfg.beta, cfg.group_size
        ('dapo', {'eps': 0.0001, 'ddof': 1}, 0.04, 8)
        """
        p = PRESETS[check_choice("name", name, tuple(PRESETS))]
        adv = {k: v for k, v in p.advantages.items() if (k, v) not in
               (("scale", "group"), ("baseline", "mean"))}            # group_advantages' defaults
        knobs = dict(advantages=adv, eps_low=p.eps_low, eps_high=p.eps_high,
                     beta=p.beta if p.kl_in == "loss" else 0.0, kl=p.kl,
                     kl_bias_correction=p.kl_bias_correction, agg=p.agg,
                     num_iterations=p.num_iterations)
        if p.group_size and p.group_size > 1:
            knobs["group_size"] = p.group_size
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"overrides: expected StepConfig fields, got {unknown[0]!r}")
        return cls(**{**knobs, **overrides})


    @classmethod
    def from_grpo_config(cls, args) -> "StepConfig":
        """The knobs of TRL's ``GRPOConfig`` ``args`` (:func:`grpo_lab.hf.step_config_fields`;
        the inverse of :func:`grpo_lab.hf.grpo_config`). A field the book's step does not run
        is refused by name."""
        from grpo_lab.hf.trl_map import step_config_fields
        return cls(**step_config_fields(args))


@dataclass
class StepOutput:
    """What :func:`grpo_step` returns: the logged ``metrics`` (TRL's names), the sampled
    ``batch``, the ``rewards`` (B, G) and the advantages ``adv`` (N,)."""
    metrics: dict
    batch: Completions
    rewards: torch.Tensor
    adv: torch.Tensor


def grpo_step(model, optimizer, tokenizer, terms, config: StepConfig, *, ref_model=None,
              seed: int | None = None) -> StepOutput:
    r"""One GRPO step on ``model`` for the prompts ``terms`` (B sums, G samples each).

    ==========  ==========  ==============================================================
    Argument    Type        Meaning
    ==========  ==========  ==============================================================
    model       HF model    the policy; sampled in eval mode, trained in train mode
    optimizer   torch       its optimizer (TRL: AdamW)
    tokenizer   HF          :func:`grpo_lab.hf.build_tokenizer`
    terms       B tuples    chapter 6's prompts, e.g. ``task.batch(B, rng)``
    config      StepConfig  the knobs
    ref_model   HF model    the frozen reference (:func:`grpo_lab.hf.frozen_copy`);
                            needed when ``config.beta > 0``
    seed        int         the sampling draw
    ==========  ==========  ==============================================================

    The metrics, named as TRL logs them: ``reward``, ``reward_std``, ``frac_reward_zero_std``,
    ``completions/mean_length``, ``completions/clipped_ratio`` (share truncated), ``entropy``,
    ``kl``, ``clip_ratio/low_mean``, ``clip_ratio/high_mean``, ``clip_ratio/region_mean``,
    ``loss``, ``grad_norm``; with ``old_logp`` computed, also
    ``sampling/sampling_logp_difference/mean`` and ``/max``. With ``num_iterations`` mu > 1
    the step makes mu optimizer updates on one batch, and the loss, KL, clip, entropy and
    gradient metrics describe the last of them (TRL logs each update as its own step; the
    first is the on-policy one, ratio 1). The entropy is computed under ``no_grad``: a
    metric keeps nothing for the backward pass.

    Its stages are named calls, read top to bottom: :func:`sample_group` (prompts and
    sampling), :func:`score_group` (rewards and advantages), :func:`step_logprobs` (old_logp,
    ref_logp, the IS weight), :func:`update` (mu updates over micro-batches).
    """
    return grpo_step_math(*check_step_arguments(model, optimizer, tokenizer, terms, config,
                                                ref_model, seed))


def check_step_arguments(model, optimizer, tokenizer, terms, config, ref_model, seed):
    """Validate :func:`grpo_step`'s arguments, every one before any sampling."""
    if not isinstance(config, StepConfig):
        raise TypeError(f"config: expected a gl.hf.StepConfig, got {describe(config)}")
    cfg = config.validate()
    model = check_model("model", model)
    gen = model.generation_config
    check_eos("model.generation_config.eos_token_id", gen.eos_token_id)
    if not is_integer(gen.pad_token_id):
        raise ValueError(f"model: expected a generation config with a pad_token_id "
                         f"(gl.hf.build_model sets it), got {gen.pad_token_id!r}")
    if not hasattr(optimizer, "step") or not hasattr(optimizer, "zero_grad"):
        raise TypeError(f"optimizer: expected a torch optimizer, got {describe(optimizer)}")
    tokenizer = check_tokenizer("tokenizer", tokenizer, chat=True)
    if len(tokenizer) > vocab_size(model):
        raise ValueError(f"tokenizer: expected at most the model's {vocab_size(model)} pieces "
                         f"(its embedding's rows), got {len(tokenizer)}")
    if isinstance(terms, (str, bytes)) or not isinstance(terms, (list, tuple)) or not terms:
        raise TypeError(f"terms: expected a non-empty list of prompts' terms, got "
                        f"{describe(terms)}")
    terms = [check_prompt_arguments(t, None)[0] for t in terms]
    if cfg.beta > 0 and ref_model is None:
        raise ValueError(f"ref_model: expected the frozen reference (gl.hf.frozen_copy) for "
                         f"beta = {cfg.beta}, got None")
    if ref_model is not None:
        ref_model = check_model("ref_model", ref_model)
        if vocab_size(ref_model) != vocab_size(model) or ref_model.device != model.device:
            raise ValueError(f"ref_model: expected the policy's vocabulary ({vocab_size(model)}) "
                             f"and device ({model.device}), got {vocab_size(ref_model)} on "
                             f"{ref_model.device}")
    seed = None if seed is None else check_int("seed", seed, minimum=0)
    return model, optimizer, tokenizer, terms, cfg, ref_model, seed


def grpo_step_math(model, optimizer, tokenizer, terms, cfg, ref_model, seed) -> StepOutput:
    """:func:`grpo_step` on checked arguments: the five stages."""
    batch = sample_group(model, tokenizer, terms, cfg, seed)                   # 1-2
    rewards, adv = score_group(tokenizer, batch, terms, cfg)                   # 3: (B, G), (N,)
    old, ref, a = step_logprobs(model, ref_model, batch, adv, cfg)             # 4
    last = update(model, optimizer, batch, old, ref, a, cfg)                   # 5
    return StepOutput(step_metrics(rewards, batch, last, old), batch, rewards, adv)


def sample_group(model, tokenizer, terms, cfg, seed) -> Completions:
    """Stages 1-2: each prompt through the chat template G times, padded left, sampled in eval
    mode (the sampler is not the training forward) with the model's stop ids."""
    prompts = [prompt_messages(t) for t in terms]
    ids, pmask = encode_prompts_math(tokenizer, prompts, cfg.group_size)      # (N, P)
    gen = model.generation_config
    model.eval()
    return sample_math(model, ids.to(model.device), pmask.to(model.device), cfg.max_new_tokens,
                       cfg.temperature, seed, check_eos("eos", gen.eos_token_id),
                       int(gen.pad_token_id))


def score_group(tokenizer, batch, terms, cfg):
    """Stage 3: chapter 5's reward of each decoded completion, (B, G), and the book's
    ``glt.group_advantages`` of each group, (N,)."""
    B, G = len(terms), cfg.group_size
    texts = tokenizer.batch_decode(batch.completion_ids, skip_special_tokens=True)
    answers = [sum(t) for t in terms for _ in range(G)]                       # (N,)
    rewards = torch.tensor(addition_rewards(texts, answers, format_weight=cfg.format_weight),
                           dtype=torch.float32, device=batch.completion_ids.device).view(B, G)
    return rewards, glt.group_advantages(rewards, **cfg.advantages).reshape(-1)


def step_logprobs(model, ref_model, batch, adv, cfg):
    """Stage 4: ``old_logp`` only when it differs from ``logp.detach()`` (several updates, or
    an IS correction), ``ref_logp`` only with a KL term, and the advantages times the IS
    weight if any: ``(old, ref, a)``."""
    tau, mask = cfg.temperature, batch.completion_mask
    old = None
    if cfg.num_iterations > 1 or cfg.is_mode is not None:
        old = batch_logprobs_math(model, batch, tau)                          # (N, T)
    ref = batch_logprobs_math(ref_model, batch, tau) if cfg.beta > 0 else None
    a = adv
    if cfg.is_mode is not None:
        w = is_weights_math(old, batch.sampler_logp.to(old.dtype), mask.to(old.dtype),
                            cfg.is_mode, cfg.is_clip_min, cfg.is_clip_max)
        a = weighted_advantages_math(adv, w, adv.dtype)                       # (N, T) or (N,)
    return old, ref, a


def micro_loss(model, batch, rows, old, ref, a, cfg):
    """One micro-batch's ``glt.grpo_loss`` (with grad; its math on the knobs the door checked),
    its diagnostics, and its entropy sum (under ``no_grad``: a metric)."""
    mask, T = batch.completion_mask[rows], batch.completion_ids.shape[1]
    x, m = batch.input_ids[rows], batch.attention_mask[rows]
    logits = completion_logits(model, x, m, T)                                # (n, T, V)
    logp = token_logprobs_math(logits, x[:, -T:], cfg.temperature)           # (n, T)
    logp = torch.where(m[:, -T:].bool(), logp, torch.zeros_like(logp))        # 0 after EOS
    loss, diag = grpo_loss_math(loss_arguments(                               # checked at the door
        logp, logp.detach() if old is None else old[rows], None if ref is None else ref[rows],
        a[rows], mask, eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta, kl=cfg.kl,
        agg=cfg.agg, kl_bias_correction=cfg.kl_bias_correction))
    with torch.no_grad():
        entropy = float((token_entropy_math(logits.detach(), cfg.temperature) * mask).sum())
    return loss, diag, entropy


def update(model, optimizer, batch, old, ref, a, cfg) -> dict:
    """Stage 5: ``num_iterations`` optimizer updates, each accumulated over micro-batches with
    the global normaliser, clipped, stepped. Returns the last update's numbers."""
    mask = batch.completion_mask
    slices = micro_batches(mask.shape[0], cfg.micro_size or mask.shape[0])
    weights = micro_weights_math(mask.bool(), slices, cfg.agg)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    for _ in range(cfg.num_iterations):
        parts = []                                   # (diag, entropy sum, tokens) per micro-batch

        def loss_of(rows):
            loss, diag, entropy = micro_loss(model, batch, rows, old, ref, a, cfg)
            parts.append((diag, entropy, float(mask[rows].sum())))
            return loss

        optimizer.zero_grad()
        loss = accumulate_math(loss_of, slices, weights)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm or float("inf"))
        optimizer.step()
    model.eval()
    return {"parts": parts, "loss": loss, "grad_norm": float(grad_norm)}


def step_metrics(rewards, batch, last, old) -> dict:
    """The metrics of :func:`grpo_step`: of the batch (rewards, lengths), and of the last
    update (token means over the whole batch, TRL's global_masked_mean)."""
    parts = last["parts"]
    n = sum(count for _, _, count in parts)

    def mean(key):
        vals = [(d[key], c) for d, _, c in parts if d[key] is not None]
        return sum(v * c for v, c in vals) / n if vals else 0.0

    std = rewards.std(dim=1).cpu()                                             # (B,) Bessel
    out = {
        "reward": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "frac_reward_zero_std": float(np.mean(np.isclose(std.numpy(), 0.0))),
        "completions/mean_length": float(batch.completion_mask.sum(dim=1).float().mean()),
        "completions/clipped_ratio": float(batch.truncated.float().mean()),
        "entropy": sum(h for _, h, _ in parts) / n,
        "kl": mean("mean_kl"),
        "clip_ratio/low_mean": mean("clip_frac_low"),
        "clip_ratio/high_mean": mean("clip_frac_high"),
        "clip_ratio/region_mean": mean("clip_frac"),
        "loss": last["loss"],
        "grad_norm": last["grad_norm"],
    }
    if old is not None:
        gap = logp_mismatch_math(old, batch.sampler_logp, batch.completion_mask.bool())
        out["sampling/sampling_logp_difference/mean"] = gap["mean"]
        out["sampling/sampling_logp_difference/max"] = gap["max"]
    return out
