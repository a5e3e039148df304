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
from grpo_lab.hf.accumulate import accumulate, micro_batches, micro_weights
from grpo_lab.hf.batch import Completions, encode_prompts, sample
from grpo_lab.hf.importance import IS_MODES, is_weights, weighted_advantages
from grpo_lab.hf.logprobs import completion_logprobs
from grpo_lab.hf.reference import logp_mismatch, old_logprobs, reference_logprobs
from grpo_lab.hf.reward import FORMAT_WEIGHT, addition_rewards
from grpo_lab.hf.tokenizer import prompt_messages
from grpo_lab.numerics.validate import check_choice, check_int, check_real, describe
from grpo_lab.production.presets import PRESETS

__all__ = ["StepConfig", "StepOutput", "grpo_step"]


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
        if self.is_mode is not None:
            check_choice("is_mode", self.is_mode, IS_MODES)
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
    ``sampling/sampling_logp_difference/mean`` and ``/max``.
    """
    if not isinstance(config, StepConfig):
        raise TypeError(f"config: expected a gl.hf.StepConfig, got {describe(config)}")
    cfg = config.validate()
    if not isinstance(terms, (list, tuple)) or not terms:
        raise TypeError(f"terms: expected a non-empty list of prompts' terms, got "
                        f"{describe(terms)}")
    if cfg.beta > 0 and ref_model is None:
        raise ValueError(f"ref_model: expected the frozen reference (gl.hf.frozen_copy) for "
                         f"beta = {cfg.beta}, got None")
    if not hasattr(optimizer, "step") or not hasattr(optimizer, "zero_grad"):
        raise TypeError(f"optimizer: expected a torch optimizer, got {describe(optimizer)}")
    B, G, tau = len(terms), cfg.group_size, cfg.temperature
    # 1-2: prompts, sampling (eval mode: the sampler is not the training forward)
    ids, pmask = encode_prompts(tokenizer, [prompt_messages(t) for t in terms], repeat=G)
    ids, pmask = ids.to(model.device), pmask.to(model.device)                # (N, P)
    model.eval()
    batch = sample(model, ids, pmask, max_new_tokens=cfg.max_new_tokens, temperature=tau,
                   seed=seed)
    mask = batch.completion_mask                                              # (N, T)
    # 3: rewards and advantages, the book's group_advantages
    texts = tokenizer.batch_decode(batch.completion_ids, skip_special_tokens=True)
    answers = [sum(t) for t in terms for _ in range(G)]                       # (N,)
    rewards = torch.tensor(addition_rewards(texts, answers, format_weight=cfg.format_weight),
                           dtype=torch.float32, device=model.device).view(B, G)   # (B, G)
    adv = glt.group_advantages(rewards, **cfg.advantages).reshape(-1)         # (N,)
    # 4: old_logp only when it differs from logp.detach(), ref_logp only with a KL term
    old = None
    if cfg.num_iterations > 1 or cfg.is_mode is not None:
        old = old_logprobs(model, batch, temperature=tau)                     # (N, T)
    ref = reference_logprobs(ref_model, batch, temperature=tau) if cfg.beta > 0 else None
    a = adv
    if cfg.is_mode is not None:
        w = is_weights(old, batch.sampler_logp, mask, mode=cfg.is_mode,
                       clip_min=cfg.is_clip_min, clip_max=cfg.is_clip_max)
        a = weighted_advantages(adv, w)                                       # (N, T) or (N,)  
    # 5: updates, each accumulated over micro-batches with the global normaliser
    slices = micro_batches(mask.shape[0], cfg.micro_size or mask.shape[0])
    weights = micro_weights(mask, slices, cfg.agg)
    params = [p for p in model.parameters() if p.requires_grad]
    T = batch.completion_ids.shape[1]
    model.train()
    for _ in range(cfg.num_iterations):
        diags, entropies = [], []

        def loss_of(rows):
            logp, h = completion_logprobs(model, batch.input_ids[rows], batch.attention_mask[rows],
                                          T, temperature=tau, entropy=True)   # (n, T) each
            loss, diag = glt.grpo_loss(
                logp, logp.detach() if old is None else old[rows],
                None if ref is None else ref[rows], a[rows], mask[rows], eps_low=cfg.eps_low,
                eps_high=cfg.eps_high, beta=cfg.beta, kl=cfg.kl, agg=cfg.agg,
                kl_bias_correction=cfg.kl_bias_correction)
            diags.append((diag, float(mask[rows].sum())))
            entropies.append(float((h.detach() * mask[rows]).sum()))
            return loss

        optimizer.zero_grad()
        loss = accumulate(loss_of, slices, weights)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm if cfg.max_grad_norm
                                                   else float("inf"))
        optimizer.step()
    model.eval()
    return StepOutput(_metrics(rewards, batch, diags, entropies, loss, grad_norm, old), batch,
                      rewards, adv)


def _metrics(rewards, batch, diags, entropies, loss, grad_norm, old):
    """The last update's numbers, token means over the whole batch (TRL's global_masked_mean)."""
    n = sum(count for _, count in diags)

    def mean(key):
        vals = [(d[key], c) for d, c in diags if d[key] is not None]
        return sum(v * c for v, c in vals) / n if vals else 0.0

    std = rewards.std(dim=1).cpu()                                             # (B,) Bessel
    out = {
        "reward": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "frac_reward_zero_std": float(np.mean(np.isclose(std.numpy(), 0.0))),
        "completions/mean_length": float(batch.completion_mask.sum(dim=1).float().mean()),
        "completions/clipped_ratio": float(batch.truncated.float().mean()),
        "entropy": sum(entropies) / n,
        "kl": mean("mean_kl"),
        "clip_ratio/low_mean": mean("clip_frac_low"),
        "clip_ratio/high_mean": mean("clip_frac_high"),
        "clip_ratio/region_mean": mean("clip_frac"),
        "loss": loss,
        "grad_norm": float(grad_norm),
    }
    if old is not None:
        gap = logp_mismatch(old, batch.sampler_logp, batch.completion_mask)
        out["sampling/sampling_logp_difference/mean"] = gap["mean"]
        out["sampling/sampling_logp_difference/max"] = gap["max"]
    return out
