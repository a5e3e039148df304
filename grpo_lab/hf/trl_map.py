r"""TRL's ``GRPOConfig`` read as the book's knobs, and TRL's loss and advantages from the book.

Taught in chapter 8, section "TRL, option by option" (``chapters/08_production_knobs.ipynb``).
:func:`trl_knobs` reads every field of TRL 1.16.0's ``GRPOConfig`` that changes the loss, the
advantages or which tokens count, and refuses, naming it, a field the book does not model;
:func:`grpo_config_fields` is its inverse. :func:`trl_advantages` and :func:`trl_loss` then
compute what TRL computes from the book's public functions only; ``tests/hf/test_trl_matrix.py``
proves them equal to TRL's real trainer, option by option. Line numbers are those of
``trl/trainer/grpo_trainer.py`` (GT) and ``trl/trainer/grpo_config.py`` (GC) at 1.16.0.

=====================================  ==========================================================
GRPOConfig field(s)                    the book's knob (:class:`TRLKnobs`)
=====================================  ==========================================================
num_generations, temperature           group_size G, temperature
loss_type                              surrogate (clip, cispo, sapo, vespo) and agg (grpo, bnpo,
                                       dapo, dr_grpo, luspo): GT 3108-3139, 3153-3181
epsilon, epsilon_high, delta           eps_low; eps_high = min(epsilon_high, delta - 1) and
                                       dual_clip = max(delta, 1 + epsilon_high) (GT 3113-3120)
epsilon_high under cispo               cispo_cap: TRL clamps at epsilon_high *itself* (GT 3110)
importance_sampling_level              level, token or sequence (GT 3084-3093)
beta, use_bias_correction_kl           beta, kl_bias_correction (k3 only; GT 3097-3105)
scale_rewards                          advantages' scale: group, batch, none (GT 2761-2788)
multi_objective_aggregation,           normalize_then_sum (gl.normalise_then_sum), reward_weights
reward_weights                         (GT 2761, 2790-2799)
max_completion_length                  max_len, dr_grpo's divisor (GT 3164)
top_entropy_quantile                   entropy_quantile (glt.token_selection.high_entropy_mask,
                                       GT 3049-3052)
mask_truncated_completions             mask_truncated (GT 2487-2495)
off_policy_mask_threshold              off_policy_threshold
                                       (glt.token_selection.off_policy_sequence_mask)
use_vllm + vllm_importance_sampling_*  is_mode, is_clip_min, is_clip_max (gl.hf.is_weights;
                                       GT 2660-2707, applied at 3146-3147)
sapo_temperature_*, vespo_*            sapo_tau_pos/neg, vespo (k_pos, lam_pos, k_neg, lam_neg)
num_iterations, steps_per_generation,  num_iterations, steps_per_generation, accumulation
gradient_accumulation_steps            (the dapo normaliser, GT 3168-3174)
=====================================  ==========================================================

Refused (the book does not model them): ``entropy_coef`` != 0 and ``use_adaptive_entropy``
(an entropy bonus), ``sync_ref_model`` (a moving reference), ``use_liger_kernel``, a non-zero
``router_aux_loss_coef``, ``loss_type="cispo"`` with a cap below 1 (see :class:`TRLKnobs`),
``loss_type="sapo"`` at the sequence level, and ``loss_type="vespo"`` with vLLM's IS ratios.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_lab import torch as glt
from grpo_lab.hf.importance import is_weights
from grpo_lab.numerics.validate import check_int, describe
from grpo_lab.rl.rewards import normalise_then_sum
from grpo_lab.torch.neighbours import cispo_loss, sapo_loss
from grpo_lab.torch.token_selection import (high_entropy_mask, off_policy_sequence_mask,
                                            vespo_weight)

__all__ = ["REFUSED", "TRL_LOSS_TYPES", "TRLKnobs", "grpo_config_fields", "step_config_fields",
           "trl_advantages", "trl_knobs", "trl_loss"]

#: TRL 1.16.0's ``loss_type`` values: (the book's surrogate, the book's aggregation).
TRL_LOSS_TYPES = {"grpo": ("clip", "grpo"), "bnpo": ("clip", "bnpo"),
                  "dr_grpo": ("clip", "dr_grpo"), "dapo": ("clip", "dapo"),
                  "luspo": ("clip", "luspo"), "cispo": ("cispo", "dapo"),
                  "sapo": ("sapo", "grpo"), "vespo": ("vespo", "dapo")}
#: Fields the book does not model, with the value at which they are harmless.
REFUSED = {"entropy_coef": 0.0, "use_adaptive_entropy": False, "sync_ref_model": False,
           "use_liger_kernel": False}
#: TRL's std guard and std (GT 2787, ``nanstd`` is Bessel's).
TRL_STD = dict(eps=1e-4, ddof=1)


@dataclass(frozen=True)
class TRLKnobs:
    """A ``GRPOConfig``'s knobs in the book's names (:func:`trl_knobs`).

    ``surrogate`` is the per-token policy term: ``"clip"`` (``glt.grpo_loss``), ``"cispo"``
    (``glt.neighbours.cispo_loss`` with the cap ``cispo_cap``), ``"sapo"``
    (``glt.neighbours.sapo_loss``) or ``"vespo"`` (``glt.token_selection.vespo_weight``).
    ``agg`` is the normaliser; ``luspo`` sums each sequence's tokens and averages over
    sequences (Dr. GRPO's with max_len 1). TRL's CISPO cap is ``epsilon_high`` itself, so its
    default (``epsilon_high`` unset = ``epsilon`` = 0.2) scales every weight to at most 0.2;
    MiniMax-M1 caps at 1 + eps_high with eps_high of several units, and the book refuses a cap
    below 1.
    """
    surrogate: str = "clip"
    agg: str = "dapo"
    level: str = "token"
    group_size: int = 8
    temperature: float = 1.0
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = None
    cispo_cap: float | None = None
    sapo_tau: tuple = (1.0, 1.05)
    vespo: tuple = (2.0, 3.0, 3.0, 2.0)
    beta: float = 0.0
    kl_bias_correction: bool = True
    max_len: int = 512
    scale: str = "group"
    normalize_then_sum: bool = False
    reward_weights: tuple | None = None
    entropy_quantile: float = 1.0
    mask_truncated: bool = False
    off_policy_threshold: float | None = None
    is_mode: str | None = None
    is_clip_min: float | None = None
    is_clip_max: float | None = 3.0
    num_iterations: int = 1
    steps_per_generation: int = 1
    accumulation: int = 1
    micro_size: int = 8

    @property
    def advantages(self) -> dict:
        """``glt.group_advantages``' options: TRL's std and guard, and the scale."""
        return {**TRL_STD, "scale": self.scale}


def _refuse(name, value, why):
    raise ValueError(f"{name}: {why}, got {value!r}")


def trl_knobs(args) -> TRLKnobs:
    """Read a TRL 1.16.0 ``GRPOConfig`` as :class:`TRLKnobs`; ValueError naming a field the
    book does not model (:data:`REFUSED`), TypeError for something that is not a GRPOConfig.

    >>> import tempfile
    >>> from trl import GRPOConfig
    >>> args = GRPOConfig(tempfile.gettempdir(), report_to="none", use_cpu=True,
    ...                   loss_type="cispo", epsilon_high=5.0)
    >>> trl_knobs(args).cispo_cap                       # TRL clamps at epsilon_high itself
    5.0
    """
    from trl import GRPOConfig

    if not isinstance(args, GRPOConfig):
        raise TypeError(f"args: expected a trl.GRPOConfig, got {describe(args)}")
    for name, harmless in REFUSED.items():
        if getattr(args, name) != harmless:
            _refuse(name, getattr(args, name), f"expected {harmless!r}: the book does not model "
                    f"it (grpo_config.py)")
    if args.router_aux_loss_coef:
        _refuse("router_aux_loss_coef", args.router_aux_loss_coef, "expected None or 0 (an "
                "MoE router loss the book does not model)")
    if args.loss_type not in TRL_LOSS_TYPES:
        _refuse("loss_type", args.loss_type, f"expected one of {sorted(TRL_LOSS_TYPES)}")
    surrogate, agg = TRL_LOSS_TYPES[args.loss_type]
    eh = args.epsilon if args.epsilon_high is None else args.epsilon_high      # GT __init__
    eps_high, dual, cap = eh, None, None
    if args.delta is not None:                       # coef_1 capped at delta, GT 3115-3116
        eps_high, dual = min(eh, args.delta - 1), max(args.delta, 1 + eh)
    if surrogate == "cispo":
        if eh < 1:
            _refuse("epsilon_high", eh, "expected the CISPO cap itself, >= 1, under "
                    "loss_type='cispo' (TRL clamps the weight at epsilon_high, grpo_trainer.py:"
                    "3110, and unset it is epsilon: every weight <= 0.2); MiniMax-M1's cap is "
                    "1 + eps_high, e.g. epsilon_high=5.0")
        cap = eh
    if surrogate in ("sapo", "cispo") and args.importance_sampling_level != "token":
        _refuse("importance_sampling_level", args.importance_sampling_level,
                f"expected 'token' under loss_type={args.loss_type!r} (the book's "
                f"{surrogate.upper()} weight is per token)")
    is_mode = None
    if args.use_vllm and args.vllm_importance_sampling_correction:
        if surrogate == "vespo":
            _refuse("use_vllm", True, "expected False under loss_type='vespo' (VESPO folds "
                    "vLLM's ratios into its weight; the book does not model it)")
        is_mode = args.vllm_importance_sampling_mode
    weights = None if args.reward_weights is None else tuple(float(w) for w in args.reward_weights)
    micro = check_int("per_device_train_batch_size", args.per_device_train_batch_size, minimum=1)
    return TRLKnobs(
        surrogate=surrogate, agg=agg, level=args.importance_sampling_level,
        group_size=args.num_generations, temperature=float(args.temperature),
        eps_low=float(args.epsilon), eps_high=float(eps_high),
        dual_clip=None if dual is None else float(dual), cispo_cap=cap,
        sapo_tau=(args.sapo_temperature_pos, args.sapo_temperature_neg),
        vespo=(args.vespo_k_pos, args.vespo_lambda_pos, args.vespo_k_neg, args.vespo_lambda_neg),
        beta=float(args.beta), kl_bias_correction=bool(args.use_bias_correction_kl),
        max_len=args.max_completion_length, scale=args.scale_rewards,
        normalize_then_sum=args.multi_objective_aggregation == "normalize_then_sum",
        reward_weights=weights, entropy_quantile=float(args.top_entropy_quantile),
        mask_truncated=bool(args.mask_truncated_completions),
        off_policy_threshold=args.off_policy_mask_threshold, is_mode=is_mode,
        is_clip_min=args.vllm_importance_sampling_clip_min if is_mode else None,
        is_clip_max=args.vllm_importance_sampling_clip_max if is_mode else 3.0,
        num_iterations=args.num_iterations, steps_per_generation=args.steps_per_generation,
        accumulation=args.gradient_accumulation_steps, micro_size=micro)


#: Knobs a :class:`grpo_lab.hf.StepConfig` cannot hold: (knob, its plain value, the field named).
_NOT_IN_STEP = (("surrogate", "clip", "loss_type"), ("level", "token", "importance_sampling_level"),
                ("dual_clip", None, "delta"), ("scale", "group", "scale_rewards"),
                ("normalize_then_sum", False, "multi_objective_aggregation"),
                ("entropy_quantile", 1.0, "top_entropy_quantile"),
                ("mask_truncated", False, "mask_truncated_completions"),
                ("off_policy_threshold", None, "off_policy_mask_threshold"),
                ("steps_per_generation", None, "steps_per_generation"))


def step_config_fields(args) -> dict:
    """The :class:`grpo_lab.hf.StepConfig` fields of a ``GRPOConfig`` (what
    ``StepConfig.from_grpo_config`` builds): ValueError naming the GRPOConfig field whose
    value the book's own step does not run (the matrix's :func:`trl_loss` does)."""
    k = trl_knobs(args)
    for knob, plain, name in _NOT_IN_STEP:
        value = getattr(k, knob)
        if knob == "steps_per_generation":
            plain = k.accumulation
        if value != plain and not (knob == "dual_clip" and value is None):
            _refuse(name, getattr(args, name), f"expected {plain!r} for gl.hf.grpo_step (the "
                    f"book's step does not run it; gl.hf.trl_loss does)")
    if k.agg not in ("grpo", "bnpo", "dapo", "dr_grpo"):
        _refuse("loss_type", args.loss_type, "expected grpo, bnpo, dapo or dr_grpo for "
                "gl.hf.grpo_step")
    return dict(group_size=k.group_size, max_new_tokens=k.max_len, temperature=k.temperature,
                eps_low=k.eps_low, eps_high=k.eps_high, beta=k.beta, kl="k3",
                kl_bias_correction=k.kl_bias_correction, agg=k.agg, advantages=dict(TRL_STD),
                num_iterations=k.num_iterations,
                micro_size=None if k.accumulation == 1 else k.micro_size,
                max_grad_norm=float(args.max_grad_norm), is_mode=k.is_mode,
                is_clip_min=k.is_clip_min, is_clip_max=k.is_clip_max)


def grpo_config_fields(knobs: TRLKnobs) -> dict:
    """The ``GRPOConfig`` fields that give ``knobs`` back through :func:`trl_knobs` (its
    inverse). ``delta`` is written only when ``dual_clip`` is set."""
    if not isinstance(knobs, TRLKnobs):
        raise TypeError(f"knobs: expected a gl.hf.TRLKnobs, got {describe(knobs)}")
    k = knobs
    loss_type = next(n for n, pair in TRL_LOSS_TYPES.items() if pair == (k.surrogate, k.agg))
    out = dict(loss_type=loss_type, importance_sampling_level=k.level,
               num_generations=k.group_size, temperature=k.temperature, epsilon=k.eps_low,
               epsilon_high=k.cispo_cap if k.surrogate == "cispo" else k.eps_high,
               beta=k.beta, use_bias_correction_kl=k.kl_bias_correction,
               max_completion_length=k.max_len, scale_rewards=k.scale,
               multi_objective_aggregation="normalize_then_sum" if k.normalize_then_sum
               else "sum_then_normalize",
               reward_weights=None if k.reward_weights is None else list(k.reward_weights),
               top_entropy_quantile=k.entropy_quantile,
               mask_truncated_completions=k.mask_truncated,
               off_policy_mask_threshold=k.off_policy_threshold,
               sapo_temperature_pos=k.sapo_tau[0], sapo_temperature_neg=k.sapo_tau[1],
               vespo_k_pos=k.vespo[0], vespo_lambda_pos=k.vespo[1], vespo_k_neg=k.vespo[2],
               vespo_lambda_neg=k.vespo[3], num_iterations=k.num_iterations,
               steps_per_generation=k.steps_per_generation,
               gradient_accumulation_steps=k.accumulation, per_device_train_batch_size=k.micro_size)
    if k.dual_clip is not None:    # delta = dual_clip reads back as (eps_high, dual_clip)
        out.update(delta=k.dual_clip, epsilon_high=k.eps_high)
    if k.is_mode is not None:
        out.update(use_vllm=True, vllm_importance_sampling_correction=True,
                   vllm_importance_sampling_mode=k.is_mode,
                   vllm_importance_sampling_clip_min=k.is_clip_min,
                   vllm_importance_sampling_clip_max=k.is_clip_max)
    return out


def trl_advantages(knobs: TRLKnobs, rewards) -> torch.Tensor:
    r"""TRL's advantages (N,) from each reward function's rewards (N, K), gathered over every
    process, with the book's functions: ``glt.group_advantages`` of the weighted sum
    (``sum_then_normalize``, GT 2761-2788) or ``gl.normalise_then_sum`` (GT 2790-2799)."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.dim() != 2:
        raise ValueError(f"rewards: expected (N, K) rewards, one column per reward function, "
                         f"got {describe(r)}")
    G, K = knobs.group_size, r.shape[1]
    w = torch.ones(K, dtype=torch.float64) if knobs.reward_weights is None else \
        torch.tensor(knobs.reward_weights, dtype=torch.float64)                # (K,)
    if knobs.normalize_then_sum:
        per = r.T.reshape(K, -1, G).numpy()                                    # (K, B, G)
        adv = torch.from_numpy(normalise_then_sum(per, w.numpy(), **TRL_STD))  # (B, G)
    else:
        adv = glt.group_advantages((r * w).sum(1).view(-1, G), **knobs.advantages)  # (B, G)
    return adv.reshape(-1)                                                     # (N,)


def _policy_term(k, logp, old, a, adv, m):
    """The per-token policy loss of the neighbours (N, T), and the ratio the KL is weighted by."""
    if k.surrogate == "cispo":
        pg = cispo_loss(logp, old, a, eps_low=None, eps_high=k.cispo_cap - 1)
    elif k.surrogate == "sapo":
        pg = sapo_loss(logp, old, a, tau_pos=k.sapo_tau[0], tau_neg=k.sapo_tau[1])
    else:                                                               # vespo
        kp, lp_, kn, ln = k.vespo
        phi = vespo_weight(logp, old, adv[:, 0], m, k_pos=kp, lam_pos=lp_, k_neg=kn, lam_neg=ln)
        pg = -phi[:, None] * (a[:, None] if a.dim() == 1 else a) * logp    # (N, T)
    if k.level == "token":
        ratio = glt.probability_ratio(logp - old)                       # (N, T)
    else:
        ratio = glt.sequence_ratio(logp, old, m)[:, None]               # (N, 1)
    return pg, ratio


def trl_loss(knobs: TRLKnobs, logp, inputs: dict, *, entropy=None,
             num_processes: int = 1) -> torch.Tensor:
    r"""The loss TRL's ``_compute_loss`` returns for one micro-batch, from the book's functions.

    =============  ========  ===========================================================
    Argument       Shape     Meaning
    =============  ========  ===========================================================
    knobs          -         :func:`trl_knobs` of the trainer's ``GRPOConfig``
    logp           (n, T)    log pi_theta of the micro-batch, with its gradient
                             (:func:`grpo_lab.hf.completion_logprobs`)
    inputs         dict      what ``_compute_loss`` received: ``completion_mask``,
                             ``advantages``, and as TRL passes them ``old_per_token_logps``,
                             ``ref_per_token_logps``, ``sampling_per_token_logps``,
                             ``num_items_in_batch``
    entropy        (n, T)    the policy's entropy (needed with ``entropy_quantile < 1``)
    num_processes  int       TRL's processes (the dapo normaliser is per process)
    =============  ========  ===========================================================

    The masks and the IS weight multiply the advantage (each >= 0, the KL term untouched);
    a completion masked whole (``mask_truncated``) adds 0 to the sum and, under the
    per-sequence means, 1 to N. The result is the book's loss of the micro-batch times its
    share of the accumulation window: its tokens over the window's (``dapo``, ``cispo``,
    ``vespo``: ``num_items_in_batch / processes * accumulation / steps_per_generation``,
    GT 3168-3174), else 1 / accumulation (so TRL's ``bnpo`` is
    :func:`grpo_lab.hf.micro_mean_weights`, a per-micro-batch mean).
    """
    if not isinstance(knobs, TRLKnobs):
        raise TypeError(f"knobs: expected a gl.hf.TRLKnobs, got {describe(knobs)}")
    P = check_int("num_processes", num_processes, minimum=1)
    k, m_all = knobs, inputs["completion_mask"]
    rows = m_all.sum(1) > 0                                             # (n,) not masked whole
    n = m_all.shape[0]
    if not bool(rows.any()):
        return logp.sum() * 0.0
    old_all = inputs.get("old_per_token_logps")
    old_all = logp.detach() if old_all is None else old_all
    sel = (lambda x: x if bool(rows.all()) else x[rows])
    lp, old, m = sel(logp), sel(old_all), sel(m_all).to(logp.dtype)     # (n', T)
    ref = inputs.get("ref_per_token_logps")
    ref = None if ref is None else sel(ref)
    adv = sel(inputs["advantages"]).reshape(-1, 1).to(logp.dtype)       # (n', 1)
    keep = torch.ones_like(adv)                                         # which tokens count
    if k.off_policy_threshold is not None:
        sampler = sel(inputs.get("sampling_per_token_logps", old_all))
        keep = keep * off_policy_sequence_mask(adv, lp.detach(), sampler, m,
                                               k.off_policy_threshold)[:, None]
    if k.entropy_quantile < 1:
        keep = keep * high_entropy_mask(sel(entropy), m, k.entropy_quantile).to(lp.dtype)
    if k.is_mode is not None:
        w = is_weights(old, sel(inputs["sampling_per_token_logps"]), m, mode=k.is_mode,
                       clip_min=k.is_clip_min, clip_max=k.is_clip_max)
        keep = keep * (w if w.dim() == 2 else w.reshape(-1, 1))
    a = adv * keep                                                      # (n', 1) or (n', T)
    a = a[:, 0] if a.shape[1] == 1 else a                               # (n',) or (n', T)
    agg, max_len = k.agg, k.max_len
    if k.surrogate == "clip":
        loss, _ = glt.grpo_loss(lp, old, ref, a, m, eps_low=k.eps_low, eps_high=k.eps_high,
                                beta=k.beta, kl="k3", agg="dr_grpo" if agg == "luspo" else agg,
                                level=k.level, dual_clip=k.dual_clip,
                                max_len=max_len if agg in ("dr_grpo", "luspo") else None,
                                kl_bias_correction=k.kl_bias_correction)
        if agg == "luspo":                                              # sum_t, mean over rows
            loss = loss * max_len
    else:
        pg, ratio = _policy_term(k, lp, old, a, adv, m)
        if k.beta != 0:
            kl = glt.kl_k3(lp, ref)
            pg = pg + k.beta * (ratio * kl if k.kl_bias_correction else kl)
        loss = glt.aggregate_loss(pg, m, agg)
    if agg in ("grpo", "dr_grpo", "luspo"):                             # empty rows count in N
        loss = loss * (float(rows.sum()) / n)
    if agg == "dapo":                                                   # this micro-batch's share
        window = float(inputs["num_items_in_batch"]) / P * k.accumulation / k.steps_per_generation
        return loss * (float(m.sum()) / window)
    return loss / k.accumulation
