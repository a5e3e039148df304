r"""What the KL estimators should give: closed forms and exact gradients to test them against.

Taught in chapter 3 (``chapters/03_kl_estimators.ipynb``). Two small worlds where everything
is known exactly:

* **Two unit Gaussians** (Schulman's example): tokens ``x ~ pi_theta = N(0, 1)``, reference
  ``pi_ref = N(mu, 1)``. The log-ratio ``s = log pi_ref(x) - log pi_theta(x) = mu x - mu^2/2``
  is ``N(-mu^2/2, mu^2)``, so every moment of k1, k2, k3 has a closed form.
* **One softmax over V tokens**: ``pi_theta = softmax(logits)``, ``pi_ref =
  softmax(ref_logits)``. Expectations are exact sums over the V tokens, and the gradient of a
  per-token estimator with respect to the logits is measured by central differences of the
  package's own ``kl_k*`` functions, with no autograd and no hand-written derivative.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.core.kl import kl_k3
from grpo_lab.numerics.logprobs import log_softmax, shift_by_max   # gl.log_softmax
from grpo_lab.numerics.logspace import logsumexp
from grpo_lab.numerics.validate import (as_array, as_float_array, check_choice, check_int,
                                        check_real, describe, is_float_dtype)

__all__ = ["DIRECTIONS", "check_estimator_grad_table_arguments", "check_gaussian_mu",
           "check_logits_pair", "estimator_grad_table", "estimator_output",
           "gaussian_estimator_moments", "gaussian_log_probs", "kl_categorical",
           "kl_categorical_grad", "kl_regularised_policy"]

DIRECTIONS = ("reverse", "forward")
_MAX_MU2 = 700.0   # e^700 ~ 1e304: the largest mu^2 whose k3 variance fits in float64
_MAX_MU = 1e150    # (x - mu)^2 / 2 stays below float64's 1.8e308 for any sampled x


def gaussian_estimator_moments(mu):
    r"""Exact mean and std of k1, k2, k3 for ``x ~ N(0, 1)`` against ``pi_ref = N(mu, 1)``.

    With ``s = log pi_ref(x) - log pi_theta(x) ~ N(m, v)``, ``m = -mu^2/2``, ``v = mu^2``:

    ==========  =========================  ===============================================
    estimator   mean                       variance
    ==========  =========================  ===============================================
    k1 = -s     mu^2/2 (= KL, unbiased)    mu^2
    k2 = s^2/2  mu^2/2 + mu^4/8            (2 v^2 + 4 m^2 v) / 4 = (2 mu^4 + mu^6) / 4
    k3 = e^s-1-s  mu^2/2 (unbiased)        e^{mu^2} - 1 - mu^2
    ==========  =========================  ===============================================

    (k3: ``E[e^s] = e^{m + v/2} = 1``, ``Var e^s = e^{v} - 1``, ``Cov(e^s, s) = v``.)

    Returns:
        dict with ``"kl"`` (the true KL, ``mu^2 / 2``) and, for ``"k1"``, ``"k2"``, ``"k3"``,
        a dict ``{"mean": ..., "std": ...}`` of Python floats.

    >>> m = gaussian_estimator_moments(0.1)      # Schulman's first table: std/KL 20, 1.42, 1.42
    >>> [round(m[k]["std"] / m["kl"], 2) for k in ("k1", "k2", "k3")]
    [20.0, 1.42, 1.42]
    """
    mu = check_gaussian_mu(mu, moments=True)
    kl = mu * mu / 2
    # e^v - 1 - v is k3 itself at log-ratio v: reuse its cancellation-free evaluation.
    var_k3 = float(kl_k3([0.0], [mu * mu])[0])
    return {
        "kl": kl,
        "k1": {"mean": kl, "std": abs(mu)},
        "k2": {"mean": kl + mu ** 4 / 8, "std": float(np.sqrt((2 * mu ** 4 + mu ** 6) / 4))},
        "k3": {"mean": kl, "std": float(np.sqrt(var_k3))},
    }


def gaussian_log_probs(mu, n, seed=0):
    """``n`` tokens ``x ~ pi_theta = N(0, 1)`` and their ``(logp, ref_logp)``, pi_ref = N(mu, 1).

    The normalising constant -log(2 pi)/2 is the same in both and cancels in every
    estimator, so it is left out. Seeded: the same ``seed`` gives the same tokens.

    >>> logp, ref_logp = gaussian_log_probs(1.0, 3, seed=0)
    >>> (logp - ref_logp).round(4)         # log-ratio mu^2/2 - mu x, mean KL = 0.5
    array([ 0.3743,  0.6321, -0.1404])
    """
    mu, n = check_gaussian_mu(mu), check_int("n", n, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    x = np.random.default_rng(seed).standard_normal(n)      # (n,) sampled from pi_theta
    return -0.5 * x ** 2, -0.5 * (x - mu) ** 2               # (n,), (n,)


def check_gaussian_mu(mu, *, moments=False):
    """``mu`` as a float; with ``moments``, small enough that Var k3 = e^(mu^2) - 1 - mu^2 fits
    in float64."""
    mu = check_real("mu", mu)
    if abs(mu) > _MAX_MU:
        raise ValueError(f"mu: expected |mu| <= {_MAX_MU:.3g}, so that the log-probs "
                         f"-(x - mu)^2 / 2 are float64 numbers, got {mu}")
    if moments and mu * mu > _MAX_MU2:
        raise ValueError(f"mu: expected |mu| <= {np.sqrt(_MAX_MU2):.1f}, so that Var k3 = "
                         f"e^(mu^2) - 1 - mu^2 fits in float64, got {mu}")
    return mu


_UNSET = object()   # an option the caller's function does not have (None is a value to refuse)


def check_logits_pair(logits, ref_logits, *, names=("logits", "ref_logits"), direction=_UNSET,
                      beta=_UNSET, h=_UNSET):
    """Two 1-D vectors of one length V >= 2 as float64, and the options that came with them.

    Returns ``(a, b)``, followed by ``direction`` (one of ``DIRECTIONS``), ``beta`` (> 0) and
    ``h`` (> 0) for each one that is passed, in that order (a None passed is refused).
    """
    doc = " of one value per token, shape (V,)"
    a, _ = as_float_array(names[0], logits, ndim=1, shape_doc=doc)
    b, _ = as_float_array(names[1], ref_logits, ndim=1, shape_doc=doc)
    if a.shape != b.shape:
        raise ValueError(f"{names[1]}: expected the shape of {names[0]}, {a.shape}, "
                         f"got shape {b.shape}")
    if a.size < 2:
        raise ValueError(f"{names[0]}: expected V >= 2 tokens, got shape {a.shape}")
    out = [a.astype(np.float64), b.astype(np.float64)]
    for name, x in zip(names, out):              # a softmax needs max - min to be a float
        with np.errstate(over="ignore"):
            spread = x.max() - x.min()
        if not np.isfinite(spread):
            raise ValueError(f"{name}: expected values less than {np.finfo(np.float64).max:.4g} "
                             f"apart (max - min must be a float64), got max {x.max():.4g} and "
                             f"min {x.min():.4g}")
    if direction is not _UNSET:
        out.append(check_choice("direction", direction, DIRECTIONS))
    if beta is not _UNSET:
        out.append(check_real("beta", beta, minimum=0.0, allow_equal=False))
    if h is not _UNSET:
        out.append(check_real("h", h, minimum=0.0, allow_equal=False, maximum=1.0))
    return tuple(out)


def check_estimator_grad_table_arguments(estimator, logits, ref_logits, h):
    """``(estimator, logits, ref_logits, h)`` for :func:`estimator_grad_table`."""
    if not callable(estimator):
        raise TypeError(f"estimator: expected a function such as gl.kl_k3, "
                        f"got {type(estimator).__name__}")
    return (estimator,) + check_logits_pair(logits, ref_logits, h=h)


def kl_categorical(logits, ref_logits):
    r"""Exact ``KL(pi || pi_ref) = sum_x pi(x) (log pi(x) - log pi_ref(x))`` for softmaxes.

    >>> round(kl_categorical(np.log([0.5, 0.5]), np.log([0.25, 0.75])), 4)
    0.1438
    """
    a, b = check_logits_pair(logits, ref_logits)
    logp, ref_logp = log_softmax(a), log_softmax(b)         # (V,), (V,)
    return float(np.sum(np.exp(logp) * (logp - ref_logp)))


def kl_categorical_grad(logits, ref_logits, *, direction="reverse"):
    r"""Exact gradient with respect to ``logits`` of the KL between the two softmaxes.

    ``direction="reverse"``: KL(pi_theta || pi_ref), the divergence GRPO's penalty estimates,
    gradient ``pi * (log pi - log pi_ref - KL)``. ``direction="forward"``: KL(pi_ref ||
    pi_theta), gradient ``pi - pi_ref``. Both follow from ``d log pi(x) / d logits_j =
    [x = j] - pi_j``.

    >>> kl_categorical_grad([0.0, 0.0], np.log([0.25, 0.75]), direction="forward")
    array([ 0.25, -0.25])
    """
    a, b, direction = check_logits_pair(logits, ref_logits, direction=direction)
    logp, ref_logp = log_softmax(a), log_softmax(b)         # (V,), (V,)
    p = np.exp(logp)
    if direction == "forward":
        return p - np.exp(ref_logp)
    d = logp - ref_logp
    return p * (d - np.sum(p * d))


def estimator_grad_table(estimator, logits, ref_logits, *, h=1e-5):
    r"""Per-token gradients of a KL estimator with respect to the policy's logits.

    ``J[j, x] = d/d logits_j  estimator(log pi_theta(x), log pi_ref(x))``: how token x's
    penalty moves the logits when it is a loss term, the sampled x held fixed (what autograd
    does with sampled tokens). Measured by central differences of step ``h`` (in (0, 1]) on
    each logit, so it tests the estimator function itself.

    Weighting the columns by ``pi_theta`` gives the expected gradient, ``J @ pi``: that is
    the gradient the loss term follows on average. A Monte Carlo batch of tokens ``xs``
    gives ``J[:, xs].mean(axis=1)``.

    ========  ========  =========================================================
    Symbol    Shape     Meaning
    ========  ========  =========================================================
    logits    (V,)      the policy pi_theta = softmax(logits)
    ref_logits (V,)     the reference pi_ref = softmax(ref_logits)
    return    (V, V)    J[j, x]: gradient on logit j of the estimate at token x
    ========  ========  =========================================================

    >>> import grpo_lab as gl
    >>> J = estimator_grad_table(gl.kl_k1, [0.0, 0.0], [0.0, 1.0])   # k1: d log pi(x)
    >>> J.round(6)                                                  # = [x == j] - pi_j
    array([[ 0.5, -0.5],
           [-0.5,  0.5]])
    """
    estimator, a, b, h = check_estimator_grad_table_arguments(estimator, logits, ref_logits, h)
    V = a.size
    ref_logp = np.broadcast_to(log_softmax(b), (V, V))      # (V, V), same row for every j
    steps = h * np.eye(V)                                    # (V, V), row j nudges logit j
    plus = log_softmax(a + steps)                            # (V, V): log pi(x) with j + h
    minus = log_softmax(a - steps)                           # (V, V): log pi(x) with j - h
    k_plus = estimator_output(estimator, plus, ref_logp)    # (V_j, V_x)
    k_minus = estimator_output(estimator, minus, ref_logp)  # (V_j, V_x)
    return (k_plus - k_minus) / (2 * h)


def estimator_output(estimator, logp, ref_logp):
    """``estimator(logp, ref_logp)`` as a float64 array of their shape, or an error naming
    ``estimator`` (a drill's estimator may return anything)."""
    out = as_array("estimator", estimator(logp, ref_logp), "a per-token estimate")
    if out.shape != logp.shape or not (is_float_dtype(out.dtype) or out.dtype.kind in "biu"):
        raise ValueError(f"estimator: expected it to return real numbers of the shape of its "
                         f"inputs, {logp.shape}, got {describe(out)}")
    return out.astype(np.float64)


def kl_regularised_policy(rewards, ref_logits, beta, *, direction="reverse"):
    r"""The policy that a KL-regularised objective converges to, for one softmax over V tokens.

    Maximises ``sum_x pi(x) r(x) - beta * KL`` over all distributions pi, exactly:

    * ``direction="reverse"``, KL(pi || pi_ref): what a k1 penalty in the reward (PPO-RLHF)
      or a k2 loss term optimises. The answer is the exponential tilt
      ``pi(x) = pi_ref(x) e^{r(x)/beta} / Z``.
    * ``direction="forward"``, KL(pi_ref || pi): what a k3 loss term (GRPO) optimises, since
      its expected gradient is that of the forward KL. Setting the gradient to zero gives
      ``pi(x) = beta pi_ref(x) / (lam - r(x))``, with ``lam > max r`` found by bisection so
      that the probabilities sum to 1.

    Args:
        rewards: (V,) reward of each token. ref_logits: (V,) logits of pi_ref.
        beta: the KL coefficient, > 0 (GRPO: 0.04 in DeepSeekMath; often 0.001 to 0.1).

    Returns:
        (V,) probabilities of the optimal policy, float64.

    >>> kl_regularised_policy([1.0, 0.0], [0.0, 0.0], 1.0).round(4)    # e / (e + 1)
    array([0.7311, 0.2689])
    >>> kl_regularised_policy([1.0, 0.0], [0.0, 0.0], 1.0, direction="forward").round(4)
    array([0.7071, 0.2929])
    """
    r, ref, direction, beta = check_logits_pair(
        rewards, ref_logits, names=("rewards", "ref_logits"), direction=direction, beta=beta)
    ref_logp = log_softmax(ref)                             # (V,) log pi_ref
    gap = r.max() - r                                       # (V,) >= 0, a float (checked)
    if direction == "reverse":                              # log pi_ref + r / beta, shifted
        with np.errstate(over="ignore"):                    # gap / beta past range: -inf, p 0
            tilt = shift_by_max(ref_logp - gap / beta)      # (V,) <= 0
        return np.exp(tilt - logsumexp(tilt))               # pi_ref e^{r/beta}, normalised
    # pi = beta pi_ref / (t + gap), t = lam - max r. The best tokens alone sum to 1 at
    # t = beta * (their pi_ref mass), and every term is <= pi_ref at t = beta: bisect log t
    # between the two, in logs, so that neither a tiny beta nor a tiny pi_ref rounds to 0.
    with np.errstate(divide="ignore"):
        log_gap = np.log(gap)                               # (V,) -inf for the best tokens
    log_beta = np.log(beta)
    lo, hi = log_beta + float(logsumexp(ref_logp[gap == 0])[0]), log_beta
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid == lo or mid == hi:
            break
        total = np.exp(log_beta + ref_logp - np.logaddexp(mid, log_gap)).sum()
        lo, hi = (mid, hi) if total > 1 else (lo, mid)
    pi = np.exp(log_beta + ref_logp - np.logaddexp(hi, log_gap))   # (V,)
    return pi / pi.sum()
