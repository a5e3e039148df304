"""Drill checker for chapter 6, the training loop: the loss of one inner iteration, in torch.

The drill: ``my_loss(logp, old_logp, ref_logp, adv, mask, eps, beta)``, with tensors logp
(requires grad), old_logp, ref_logp (N, T) float64, adv (N,) float64, one advantage per
completion, mask (N, T) bool, and eps, beta Python floats, returns the loss as a 0-d tensor:
the per-token clipped surrogate plus beta * k3 (k3 = expm1(-d) + d, d = logp - ref_logp, the
form chapter 3's drill asks for), reduced the ``grpo`` way (mean over each completion's
tokens, then over the completions). It is compared
with ``gl.torch.grpo_loss(..., kl="k3", agg="grpo")`` in value and in its gradient with respect
to logp, on ragged batches whose ratios have left 1 on both sides of the clip range, whose
padded positions hold garbage, with N == T (where an advantage broadcast along the tokens goes
unnoticed), beta = 0, one completion, and A < 0 far past the clip (where verl's dual-clip would
differ). The inputs are float64, so the loss is graded at float64 precision, with room for a
guard eps of 1e-8 beside each length. Torch is imported when the checker runs, not before.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.core.kl import kl_k1, kl_k3
from grpo_lab.drills.cases import Case, Mistake, close, full
from grpo_lab.drills.grading import check_cases
from grpo_lab.drills.harness import exception_text, in_thread, verdict

__all__ = ["check_grpo_loss"]

_ADV_HINT = (" (adv has one value per completion, shape (N,); per-token terms are (N, T): "
             "broadcast it over the tokens as adv[:, None])")
_GUARD = 2e-8            # relative: a guard eps of 1e-8 beside each length, with room


def _batch(seed, lengths, eps, beta, spread=0.4, adv=None):
    rng = np.random.default_rng(seed)
    N, T = len(lengths), max(lengths)
    mask = np.arange(T) < np.array(lengths)[:, None]                             # (N, T) bool
    old = np.log(rng.uniform(0.05, 0.9, size=(N, T)))                            # (N, T)
    logp = old + rng.normal(0.0, spread, size=(N, T))
    ref = logp + rng.normal(0.0, 0.3, size=(N, T))
    logp, old, ref = (np.where(mask, x, pad) for x, pad in ((logp, -2.0), (old, -3.0),
                                                              (ref, -0.5)))   # garbage padding
    return logp, old, ref, rng.normal(size=N) if adv is None else np.asarray(adv), mask, eps, beta


def _worked_example():
    """N = 4 completions of lengths 5, 3, 2, 4 (T = 5); eps = 0.2, beta = 0.04."""
    log_ratio = np.array([[0.0, 0.1, 0.3, -0.4, 0.5], [-0.3, 0.2, 0.05, 0, 0],
                          [0.15, -0.1, 0, 0, 0], [0.4, -0.5, 0.0, 0.1, 0]])    # (N, T)
    mask = np.arange(5) < np.array([5, 3, 2, 4])[:, None]                      # (N, T) bool
    old = np.log(np.linspace(0.1, 0.6, 20)).reshape(4, 5)                     # (N, T)
    logp = old + log_ratio
    ref = logp + np.array([0.2, -0.3, 0.1, 0.5, -0.1])                         # (N, T)
    logp, old, ref = (np.where(mask, x, pad) for x, pad in ((logp, -2.0), (old, -3.0),
                                                              (ref, -0.5)))
    return logp, old, ref, np.array([1.0, -0.5, 2.0, -1.5]), mask, 0.2, 0.04


def _terms(logp, old, ref, adv, mask, eps, beta, a=None):
    """The surrogate and k3 per token, in NumPy: (N, T) each."""
    ratio, a = np.exp(logp - old), adv[:, None] if a is None else a
    return np.maximum(-a * ratio, -a * np.clip(ratio, 1 - eps, 1 + eps)), kl_k3(logp, ref)


def _mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(*c.inputs["arrays"]))

    def agg(x, mask, mode="grpo"):
        return aggregate_loss(x, mask, mode)

    def slip(f):
        def value(logp, old, ref, adv, mask, eps, beta):
            ratio, a = np.exp(logp - old), adv[:, None]
            return f(ratio, a, eps, beta, kl_k3(logp, ref), mask, logp, ref)
        return value

    padding = ("the padded tokens entered the loss: multiply by the mask before summing, and "
               "divide each completion by its own length, mask.sum(1)")
    clip = lambda r, e: np.clip(r, 1 - e, 1 + e)                    # noqa: E731
    pg = lambda r, a, e: np.maximum(-a * r, -a * clip(r, e))        # noqa: E731
    return [
        m("that is the token mean over the whole batch (dapo); grpo averages each completion's "
          "tokens first, then the completions", slip(lambda r, a, e, b, k, mk, lp, rf: agg(
              pg(r, a, e) + b * k, mk, "dapo"))),
        m("that divides by N * T (dr_grpo's constant); grpo divides each completion by its own "
          "length, mask.sum(1)", slip(lambda r, a, e, b, k, mk, lp, rf: agg(
              pg(r, a, e) + b * k, mk, "dr_grpo"))),
        m(padding, slip(lambda r, a, e, b, k, mk, lp, rf: (pg(r, a, e) + b * k).mean())),
        m(padding, slip(lambda r, a, e, b, k, mk, lp, rf: (
            (pg(r, a, e) + b * k).sum(1) / mk.sum(1)).mean())),
        m("the sign is flipped: that is the objective, min(rho A, clip(rho) A) - beta k3; the loss "
          "to minimise is its negative", slip(lambda r, a, e, b, k, mk, lp, rf: -agg(
              pg(r, a, e) + b * k, mk))),
        m("the KL term is missing: add beta * k3 to every token's loss",
          slip(lambda r, a, e, b, k, mk, lp, rf: None if b == 0 else agg(pg(r, a, e), mk))),
        m("the KL term has the wrong sign: the loss adds + beta * k3",
          slip(lambda r, a, e, b, k, mk, lp, rf: agg(pg(r, a, e) - b * k, mk))),
        m("the k3 ratio is upside down: d = logp - ref_logp, k3 = exp(-d) + d - 1",
          slip(lambda r, a, e, b, k, mk, lp, rf: agg(pg(r, a, e) + b * kl_k3(rf, lp), mk))),
        m("that penalty is k1 = logp - ref_logp, not k3",
          slip(lambda r, a, e, b, k, mk, lp, rf: agg(pg(r, a, e) + b * kl_k1(lp, rf), mk))),
        m("optimistic: the min of the two losses is the max of the objectives; the loss is "
          "the larger of -A rho and -A clip(rho) (torch.maximum)", slip(
              lambda r, a, e, b, k, mk, lp, rf: agg(np.minimum(-a * r, -a * clip(r, e))
                                                    + b * k, mk))),
        m("no clipping: -A rho alone ignores eps; take the larger of -A rho and -A clip(rho)",
          slip(lambda r, a, e, b, k, mk, lp, rf: agg(-a * r + b * k, mk))),
        m("that is verl's dual-clip (c = 3): the loss of a token with A < 0 is capped at -3 A; "
          "the drill is the plain clipped surrogate", slip(lambda r, a, e, b, k, mk, lp, rf: agg(
              np.where(a < 0, np.minimum(pg(r, a, e), -3 * a), pg(r, a, e)) + b * k, mk))),
        m("right with the worked example's eps=0.2 and beta=0.04 but not with the eps and beta "
          "passed: use the arguments, not constants", slip(
              lambda r, a, e, b, k, mk, lp, rf: None if (e, b) == (0.2, 0.04) else agg(
                  pg(r, a, 0.2) + 0.04 * k, mk))),
        m("adv (N,) was multiplied with (N, T) terms: with N == T it lines up with the tokens, "
          "silently; broadcast it as adv[:, None]", slip(
              lambda r, a, e, b, k, mk, lp, rf: None if mk.shape[0] != mk.shape[1] else agg(
                  pg(r, a[:, 0][None, :], e) + b * k, mk))),
    ]


def _cases():
    rows = [("the worked example", _worked_example()),
            ("a batch with eps=0.3 and beta=0.1", _batch(6, [6, 1, 4], 0.3, 0.1)),
            ("a 4 x 4 batch (N == T)", _batch(8, [4, 2, 3, 1], 0.2, 0.05)),
            ("beta = 0", _batch(9, [3, 5], 0.25, 0.0)),
            ("one completion of 3 tokens", _batch(10, [3], 0.2, 0.04)),
            ("A < 0 with ratios far above 1 + eps", _batch(
                11, [4, 4, 2], 0.2, 0.02, spread=1.5, adv=[-1.0, -2.0, 0.5]))]
    for where, arrays in rows:
        logp, old, ref, adv, mask, eps, beta = arrays
        pg, k3 = _terms(*arrays)
        yield Case(where, arrays, _reference(*arrays)[0],
                   inputs={"arrays": arrays, "eps": eps, "beta": beta},
                   scale=aggregate_loss(np.abs(pg) + beta * np.abs(k3), mask, "grpo"),
                   show=lambda i, eps=eps, beta=beta, mask=mask: (
                       f"lengths {mask.sum(1).tolist()}, eps = {eps}, beta = {beta}"))


def _reference(logp, old, ref, adv, mask, eps, beta):
    """gl.torch.grpo_loss's value and its gradient with respect to logp, in NumPy."""
    import grpo_lab.torch as glt              # says how to install torch when it is missing
    import torch

    with torch.enable_grad():                     # even if the reader switched it off
        lp = torch.tensor(logp, requires_grad=True)
        loss, _ = glt.grpo_loss(lp, *(torch.tensor(x) for x in (old, ref, adv, mask)),
                                eps_low=eps, beta=beta, kl="k3", agg="grpo")
        loss.backward()
    return float(loss.detach()), lp.grad.numpy()


def _tensors(case):
    import torch

    logp, old, ref, adv, mask, eps, beta = case.inputs["arrays"]
    tensors = [torch.tensor(x) for x in (logp, old, ref, adv, mask)]   # float64; mask bool
    tensors[0].requires_grad_(True)
    return Case(case.where, (*tensors, eps, beta), case.expected, inputs=case.inputs,
                scale=case.scale, show=case.show)


def _gradient(case, answer):
    """The value is right: now its gradient, the reason the loss exists."""
    import torch

    tol = case.scale * 16 * 2.0**-53 + _GUARD * abs(float(case.expected))
    if not close(answer.values, case.expected, tol).all():
        return None                                      # a wrong value is said first
    loss, logp = answer.raw, answer.given[0]
    if not isinstance(loss, torch.Tensor):
        return (f"on {case.where} the value is right, but it came back as "
                f"{type(loss).__name__}: the loss must stay a tensor, so that loss.backward() "
                "reaches logp (no .item(), float() or .numpy())")
    if loss.grad_fn is None:
        return (f"on {case.where} the value is right, but the loss does not reach logp "
                "through autograd (no grad_fn): was logp detached, or the loss computed under "
                "torch.no_grad()?")
    _, exc = in_thread(lambda: loss.reshape(()).backward())
    if exc is not None:
        return f"on {case.where} loss.backward() raised {exception_text(exc)}"
    want = _reference(*case.inputs["arrays"])[1]                      # (N, T)
    got = None if logp.grad is None else logp.grad.detach().double().numpy()
    grad_tol = 64 * 2.0**-53 * np.abs(want).max() + _GUARD * np.abs(want)
    if got is None or not close(got, want, grad_tol).all():
        i = tuple(int(j) for j in np.argwhere(~close(got, want, grad_tol))[0]) if (
            got is not None) else None
        detail = "" if i is None else (f" (d loss / d logp{list(i)} is {full(got[i])}, "
                                       f"expected {full(want[i])})")
        return (f"on {case.where} the value is right but its gradient is not{detail}"
                + _gradient_note(case, got, want, grad_tol))
    return None


def _gradient_note(case, got, want, tol) -> str:
    """What a wrong gradient shows, from the gradient itself: the policy term's gradient
    alone (the KL term cut off from logp), the KL term's alone, or none where some is
    expected; else no cause is named."""
    if got is None:
        return ": logp has no gradient after loss.backward()"
    logp, old, ref, adv, mask, eps, beta = case.inputs["arrays"]
    policy = _reference(logp, old, ref, adv, mask, eps, 0.0)[1]        # (N, T), beta = 0
    kl = want - policy
    if beta and close(got, policy, tol).all() and not close(kl, 0, tol).all():
        return (": it is the policy term's gradient alone, so the KL term's value is in the "
                "loss but it does not reach logp (a .detach(), .data or .item() on its input?)")
    if close(got, kl, tol).all() and not close(policy, 0, tol).all():
        return (": it is the KL term's gradient alone, so the policy term's value is in the "
                "loss but it does not reach logp (a .detach(), .data or .item() on its input?)")
    zero = (got == 0) & ~close(want, 0, tol)
    if zero.any():
        return (f": {int(zero.sum())} entries get exactly 0 where the loss depends on them, so "
                "their part of the loss does not reach logp")
    return ": the loss's value and the path autograd takes from it to logp disagree"


def check_grpo_loss(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, old_logp, ref_logp, adv, mask, eps, beta) -> loss``, a 0-d tensor.

    The loss is ``-min(rho A, clip(rho, 1 - eps, 1 + eps) A) + beta * k3`` per token, with
    ``rho = exp(logp - old_logp)`` the ratio and ``k3 = expm1(-d) + d``, ``d = logp - ref_logp``,
    averaged over each completion's tokens, then over the completions (``agg="grpo"``); its
    value and its gradient with respect to logp must equal those of ``gl.torch.grpo_loss``.
    """
    say = verdict(verbose, fn)
    import grpo_lab.torch  # noqa: F401  says how to install torch when it is missing

    cases = [_tensors(case) for case in _cases()]
    return check_cases(fn, cases, say, mistakes=_mistakes(), extra=_gradient, fixed="float64",
                       slack=_GUARD, dtype=None, shape_hint="; the loss is one number",
                       returns="the loss (a 0-d tensor)", broadcast_hint=_ADV_HINT,
                       signature="my_loss(logp, old_logp, ref_logp, adv, mask, eps, beta)",
                       passed="clipped surrogate + beta k3, mean per completion, then over "
                              "all; value and gradient match gl.torch.grpo_loss on 6 batches "
                              "(N == T, beta = 0, one completion, A < 0 far past the clip)")
