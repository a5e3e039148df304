"""Drill checker for chapter 6, the training loop: the loss of one inner iteration, in torch.

The drill: ``my_loss(logp, old_logp, ref_logp, adv, mask, eps, beta)``, with tensors logp,
old_logp, ref_logp (N, T) float64, adv (N,) one advantage per completion and mask (N, T) bool,
returns the loss as a 0-d tensor: the per-token clipped surrogate plus beta * k3, reduced the
``grpo`` way (mean over each completion's tokens, then over the completions). It is compared
with ``gl.torch.grpo_loss(..., kl="k3", agg="grpo")`` in value and in its gradient with respect
to logp, on ragged batches whose ratios have left 1 on both sides of the clip range and whose
padded positions hold garbage. Torch is imported when the checker runs, not before.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.core.kl import kl_k1, kl_k3
from grpo_lab.drills.harness import call, named_mistake, verdict

__all__ = ["check_grpo_loss"]

_ADV_HINT = (" (adv has one value per completion, shape (N,); per-token terms are (N, T): "
             "broadcast it over the tokens as adv[:, None])")


def _worked_example():
    """N = 4 completions of lengths 5, 3, 2, 4 (T = 5); eps = 0.2, beta = 0.04."""
    log_ratio = np.array([[0.0, 0.1, 0.3, -0.4, 0.5], [-0.3, 0.2, 0.05, 0, 0],
                          [0.15, -0.1, 0, 0, 0], [0.4, -0.5, 0.0, 0.1, 0]])    # (N, T)
    mask = np.arange(5) < np.array([5, 3, 2, 4])[:, None]                      # (N, T) bool
    old = np.log(np.linspace(0.1, 0.6, 20)).reshape(4, 5)                     # (N, T)
    logp = old + log_ratio
    ref = logp + np.array([0.2, -0.3, 0.1, 0.5, -0.1])                         # (N, T)
    logp, old, ref = (np.where(mask, x, pad) for x, pad in ((logp, -2.0), (old, -3.0),
                                                              (ref, -0.5)))  # garbage padding
    return "the worked example", logp, old, ref, np.array([1.0, -0.5, 2.0, -1.5]), mask, 0.2, 0.04


def _random_batch():
    """N = 3 completions of lengths 6, 1, 4 (T = 6), with eps = 0.3 and beta = 0.1."""
    rng = np.random.default_rng(6)
    mask = np.arange(6) < np.array([6, 1, 4])[:, None]                          # (N, T) bool
    old = np.log(rng.uniform(0.05, 0.9, size=(3, 6)))                           # (N, T)
    logp = old + rng.normal(0.0, 0.4, size=(3, 6))
    ref = logp + rng.normal(0.0, 0.3, size=(3, 6))
    return ("a batch with eps=0.3 and beta=0.1", logp, old, ref, rng.normal(size=3), mask,
            0.3, 0.1)


def _mistakes(logp, old, ref, adv, mask, eps, beta):
    """The usual wrong losses of one case: (hint, the value it gives) pairs, in numpy."""
    def agg(per_token, mode="grpo", m=mask):
        return aggregate_loss(per_token, m, mode)

    ratio, a = np.exp(logp - old), adv[:, None]                      # (N, T), (N, 1)
    unclipped, clipped = -a * ratio, -a * np.clip(ratio, 1 - eps, 1 + eps)
    pg, k3 = np.maximum(unclipped, clipped), kl_k3(logp, ref)        # (N, T), (N, T)
    padding = ("the padded tokens entered the loss: multiply by the mask before summing, and "
               "divide each completion by its own length, mask.sum(1)")
    return [
        ("that is the token mean over the whole batch (dapo); grpo averages each completion's "
         "tokens first, then the completions", agg(pg + beta * k3, "dapo")),
        ("that divides by N * T (dr_grpo's constant); grpo divides each completion by its own "
         "length, mask.sum(1)", agg(pg + beta * k3, "dr_grpo")),
        (padding, agg(pg + beta * k3, m=np.ones_like(mask))),
        (padding, ((pg + beta * k3).sum(1) / mask.sum(1)).mean()),
        ("the sign is flipped: that is the objective, min(r A, clip(r) A) - beta k3; the loss "
         "to minimise is its negative", -agg(pg + beta * k3)),
        ("the KL term is missing: add beta * k3 to every token's loss", agg(pg)),
        ("the KL term has the wrong sign: the loss adds + beta * k3", agg(pg - beta * k3)),
        ("the k3 ratio is upside down: r = ref_logp - logp, k3 = exp(r) - r - 1",
         agg(pg + beta * kl_k3(ref, logp))),
        ("that penalty is k1 = logp - ref_logp, not k3", agg(pg + beta * kl_k1(logp, ref))),
        ("optimistic: the min of the two losses is the max of the objectives; the loss is "
         "the larger of -A r and -A clip(r) (torch.maximum)",
         agg(np.minimum(unclipped, clipped) + beta * k3)),
        ("no clipping: -A r alone ignores eps; take the larger of -A r and -A clip(r)",
         agg(unclipped + beta * k3)),
    ]


def _hard_coded(logp, old, ref, adv, mask, eps, beta):
    """The loss with the worked example's eps = 0.2 and beta = 0.04, whatever was passed."""
    ratio, a = np.exp(logp - old), adv[:, None]
    pg = np.maximum(-a * ratio, -a * np.clip(ratio, 0.8, 1.2))
    return aggregate_loss(pg + 0.04 * kl_k3(logp, ref), mask, "grpo")


def check_grpo_loss(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, old_logp, ref_logp, adv, mask, eps, beta) -> loss``, a 0-d tensor.

    The loss is ``-min(r A, clip(r, 1 - eps, 1 + eps) A) + beta * k3`` per token, averaged
    over each completion's tokens, then over the completions (``agg="grpo"``); its value and
    its gradient with respect to logp must equal those of ``gl.torch.grpo_loss``.
    """
    say = verdict(verbose, fn)
    import grpo_lab.torch as glt              # says how to install torch when it is missing
    import torch

    for name, *arrays, eps, beta in (_worked_example(), _random_batch()):
        logp, old, ref, adv, mask = (torch.tensor(x) for x in arrays)  # float64; mask bool
        lp = logp.clone().requires_grad_(True)
        want, _ = glt.grpo_loss(lp, old, ref, adv, mask, eps_low=eps, beta=beta, kl="k3",
                                agg="grpo")
        want.backward()
        expected, grad = float(want.detach()), lp.grad

        logp.requires_grad_(True)
        kept = []
        out, problem = call(fn, logp, old, ref, adv, mask, eps, beta, where=name, shape=(),
                            keep=kept, shape_hint="; the loss is one number",
                            returns="the loss (a 0-d tensor)", broadcast_hint=_ADV_HINT)
        if problem:
            return say(False, problem)
        got = float(out)
        if not np.isclose(got, expected, rtol=1e-9, atol=1e-12):
            mistakes = _mistakes(*arrays, eps, beta)
            if name != "the worked example":
                mistakes.append(("right with the worked example's eps=0.2 and beta=0.04 but not "
                                 f"with eps={eps} and beta={beta}: use the arguments eps and "
                                 "beta, not constants", _hard_coded(*arrays, eps, beta)))
            hint = named_mistake(got, mistakes, rtol=1e-9, atol=1e-12)
            if hint is None and np.isclose(got, expected, rtol=1e-5):
                hint = ("close, but only to float32 precision: keep the float64 inputs' dtype "
                        "(no .float() or float32 constants)")
            return say(False, f"on {name} you gave {got:.6f}, expected {expected:.6f}"
                              + (f": {hint}" if hint else ""))

        # the value is right: now its gradient, the reason the loss exists
        loss = kept[0]
        if not isinstance(loss, torch.Tensor):
            return say(False, f"on {name} the value is right, but it came back as "
                              f"{type(loss).__name__}: the loss must stay a tensor, so that "
                              "loss.backward() reaches logp (no .item(), float() or .numpy())")
        if loss.grad_fn is None:
            return say(False, f"on {name} the value is right, but the loss does not reach logp "
                              "through autograd (no grad_fn): was logp detached, or the loss "
                              "computed under torch.no_grad()?")
        try:
            loss.reshape(()).backward()
        except Exception as exc:  # the reader's bug, reported rather than raised
            return say(False, f"on {name} loss.backward() raised {type(exc).__name__}: {exc}")
        if logp.grad is None or not torch.allclose(logp.grad, grad, rtol=1e-7, atol=1e-10):
            return say(False, f"on {name} the value is right but its gradient is not: part of "
                              "the loss does not reach logp (a .detach(), .data or .item() "
                              "inside it?)")
    return say(True, "clipped surrogate + beta k3, mean per completion, then over all; value "
                     "and gradient match gl.torch.grpo_loss")
