r"""TRL's batch captured in one step, and its loss, gradient and advantages recomputed by the book.

Taught in chapter 6b, section "The same run in TRL" (``chapters/06b_real_model.ipynb``).

:class:`BatchCapture` hooks three of TRL 1.16.0's ``GRPOTrainer`` methods on one trainer
instance (``trl/trainer/grpo_trainer.py``); nothing else of TRL is changed:

=====================================  ========================================================
TRL method                             what is recorded
=====================================  ========================================================
``_generate_and_score_completions``    each generation batch, in generation order (before TRL
                                       shuffles it): completions, masks, ``advantages``
``_compute_loss``                      at optimizer step ``step``: the inputs (prompt and
                                       completion ids and masks, ``advantages``,
                                       ``old_per_token_logps``, ``ref_per_token_logps``,
                                       ``num_items_in_batch``), the weights before the update,
                                       the loss, and its gradient with respect to every
                                       parameter (``torch.autograd.grad``, before TRL's clip)
``_get_per_token_logps_and_entropies`` inside that loss: TRL's ``logp`` and entropy
=====================================  ========================================================

TRL's private methods change between releases (this is written against 1.16.0, pinned in
requirements.txt); :func:`cross_check` refuses another version.

:func:`cross_check` then rebuilds the model from the recorded weights, computes ``logp`` with
:func:`grpo_lab.hf.completion_logprobs` (the model's ordinary forward and logits, not TRL's
fused LM head), the loss with ``glt.grpo_loss`` and its gradient with autograd, and the
advantages with ``glt.group_advantages`` from the rewards TRL's reward function returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_lab import torch as glt
from grpo_lab.hf.logprobs import completion_logprobs
from grpo_lab.hf.step import StepConfig
from grpo_lab.hf.trl_run import TRL_VERSION, TRLRun
from grpo_lab.numerics.validate import check_int, describe

__all__ = ["BatchCapture", "CrossCheck", "cross_check"]


def _copy(x):
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


class BatchCapture:
    """Records TRL's batch at optimizer step ``step`` (0-based; with ``num_iterations=2``, step
    1 is the second update on the first batch, where ``old_logp`` differs from ``logp``).

    After training: ``inputs`` (dict of tensors), ``logp`` and ``entropy`` (N, T), ``loss``
    (float), ``grads`` and ``state`` (dicts by parameter name), ``generations`` (each
    generation batch's output, in order).
    """

    def __init__(self, step: int = 0):
        self.step = check_int("step", step, minimum=0)
        self.inputs = self.logp = self.entropy = self.loss = self.grads = self.state = None
        self.generations = []
        self._inside = False

    def attach(self, trainer) -> "BatchCapture":
        """Wrap the three methods on ``trainer`` (the instance only; the class is untouched)."""
        for name in ("_generate_and_score_completions", "_compute_loss",
                     "_get_per_token_logps_and_entropies"):
            if not callable(getattr(trainer, name, None)):
                raise TypeError(f"trainer: expected TRL {TRL_VERSION}'s GRPOTrainer, with "
                                f"{name}, got {describe(trainer)}")
        generate, compute_loss = trainer._generate_and_score_completions, trainer._compute_loss
        logps = trainer._get_per_token_logps_and_entropies

        def generate_hook(inputs):
            out = generate(inputs)
            self.generations.append({k: _copy(v) for k, v in out.items()})
            return out

        def loss_hook(model, inputs):
            if trainer._step != self.step:
                return compute_loss(model, inputs)
            self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.inputs = {k: _copy(v) for k, v in inputs.items()}
            self._inside = True
            try:
                loss = compute_loss(model, inputs)
            finally:
                self._inside = False
            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            grads = torch.autograd.grad(loss, [p for _, p in named], retain_graph=True,
                                        allow_unused=True)
            self.grads = {n: torch.zeros_like(p) if g is None else g.detach().clone()
                          for (n, p), g in zip(named, grads)}
            self.loss = float(loss.detach())
            return loss

        def logps_hook(*args, **kwargs):
            out = logps(*args, **kwargs)
            if self._inside and kwargs.get("compute_entropy"):
                self.logp, self.entropy = _copy(out[0]), _copy(out[1])
            return out

        trainer._generate_and_score_completions = generate_hook
        trainer._compute_loss = loss_hook
        trainer._get_per_token_logps_and_entropies = logps_hook
        return self


@dataclass
class CrossCheck:
    """:func:`cross_check`'s result: TRL's loss and the book's, and the largest absolute
    difference of each quantity (``logp`` (N, T), the gradient over every parameter, the
    advantages over every generation batch, the entropy)."""
    trl_loss: float
    loss: float
    loss_diff: float
    logp_diff: float
    grad_diff: float
    grad_max: float                # the largest |gradient| entry, for scale
    adv_diff: float
    entropy_diff: float


def cross_check(run: TRLRun, capture: BatchCapture, config: StepConfig) -> CrossCheck:
    r"""Recompute TRL's captured step with grpo_lab's own functions and compare.

    .. math::

        \mathcal L = \frac{\sum_{i,t} m_{i,t}\big(-\min(r_{i,t} A_i,
        \operatorname{clip}(r_{i,t}) A_i) + \beta\, r_{i,t}\, k_3(i,t)\big)}{n}

    with TRL's ``dapo`` normaliser n, the generation batch's token count
    (``num_items_in_batch``), of which this micro-batch's share is its weight
    (:func:`grpo_lab.hf.micro_weights`); for the other losses TRL divides by its accumulation
    steps. The advantages are ``glt.group_advantages(rewards, eps=1e-4, ddof=1)`` of each
    generation's rewards.
    """
    import trl

    if trl.__version__ != TRL_VERSION:
        raise RuntimeError(f"trl: expected version {TRL_VERSION} (the private methods hooked "
                           f"here change between releases), got {trl.__version__}")
    if not isinstance(capture, BatchCapture) or capture.inputs is None:
        raise ValueError(f"capture: expected a BatchCapture that recorded a step (was its step "
                         f"reached?), got {describe(capture)}")
    trainer, x = run.trainer, capture.inputs
    args = trainer.args
    model = type(trainer.model)(trainer.model.config)                    # unpatched forward
    model.load_state_dict(capture.state)
    model.to(x["prompt_ids"].device).train()                              # TRL's device
    ids = torch.cat([x["prompt_ids"], x["completion_ids"]], dim=1)       # (n, P + T)
    mask = torch.cat([x["prompt_mask"], x["completion_mask"]], dim=1)    # (n, P + T)
    m = x["completion_mask"]                                             # (n, T)
    logp, entropy = completion_logprobs(model, ids, mask, m.shape[1], temperature=args.temperature,
                                        entropy=True)                    # (n, T)
    old = x.get("old_per_token_logps")
    loss, _ = glt.grpo_loss(logp, logp.detach() if old is None else old,
                            x.get("ref_per_token_logps"), x["advantages"], m,
                            eps_low=args.epsilon, eps_high=args.epsilon_high, beta=args.beta,
                            kl="k3", agg=args.loss_type,
                            kl_bias_correction=args.use_bias_correction_kl)
    ga, spg = args.gradient_accumulation_steps, args.steps_per_generation
    if args.loss_type == "dapo":                       # this micro-batch's share of the tokens
        weight = float(m.sum()) / (float(x["num_items_in_batch"]) * ga / spg)
    else:
        weight = 1.0 / ga
    loss = loss * weight
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named])
    grad_diff = max(float((g - capture.grads[n]).abs().max()) for (n, _), g in zip(named, grads))
    grad_max = max(float(g.abs().max()) for g in capture.grads.values())
    G = config.group_size
    adv_diff = 0.0
    for gen, (_, rewards) in zip(capture.generations, run.rewards):
        r = torch.as_tensor(rewards, dtype=torch.float32).view(-1, G)    # (B, G)
        ours = glt.group_advantages(r, **config.advantages).reshape(-1)  # (N,)
        adv_diff = max(adv_diff, float((ours - gen["advantages"].cpu()).abs().max()))
    keep = m.bool()
    return CrossCheck(
        trl_loss=capture.loss, loss=float(loss.detach()),
        loss_diff=abs(float(loss.detach()) - capture.loss),
        logp_diff=float((logp.detach() - capture.logp)[keep].abs().max()),
        grad_diff=grad_diff, grad_max=grad_max, adv_diff=adv_diff,
        entropy_diff=float((entropy.detach() - capture.entropy)[keep].abs().max()))
