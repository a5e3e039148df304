r"""The fused GRPO loss as one compiled sweep over the tokens (Numba), on CPU.

Taught in chapter 7 (``chapters/07_performance.ipynb``), next to the torch version it speeds
up, :mod:`grpo_lab.perf.loss_fused`: :func:`grpo_lab.perf.loss_fused.grpo_loss_fused` calls
:func:`loss_one_pass` for float32 and float64 tensors on CPU, and takes its blocked torch
route otherwise (or where Numba is missing: :func:`kernel_or_none` returns None).

The torch version makes some fifteen passes over each block, one per operation. Here each
token is read once (``logp``, ``old_logp``, ``ref_logp``, the mask, and the advantage when
it is per token), everything the loss needs is computed from it in registers, and one number
is written: d loss / d logp. The per-token loss and the diagnostics are sums, kept in float64
accumulators, so nothing else of size (N, T) is made.

The step that decides the speed is ``exp``. A compiled loop that calls the C library's
``exp`` does one token at a time; without a vector math library, Numba cannot do better. So
the kernel computes ``exp`` itself (:func:`exp_expm1`), from additions and multiplications
the compiler can run on 8 tokens at once (AVX-512) or 4 (AVX2):

.. math::

    e^x = 2^n\, e^{r},\qquad n = \operatorname{round}(x / \ln 2),\quad r = x - n \ln 2
    \in [-\tfrac{\ln 2}{2}, \tfrac{\ln 2}{2}],\qquad
    e^{r} - 1 = \sum_{k=1}^{13} \frac{r^k}{k!}\ (\text{error} < 10^{-17})

and :math:`e^x - 1 = 2^n (e^r - 1) + (2^n - 1)`, which keeps the relative precision of
``expm1`` near 0 (k3 needs it: ``expm1(r) - r`` is tiny there). :math:`2^n` is an integer
shift, exact for :math:`|x| \le 21` (:data:`EXP_LIMIT`): this covers the log-ratio, which the
loss clamps to [-20, 20] (:data:`grpo_lab.torch.MAX_LOG_RATIO`; ``approx_kl`` needs -21: below
it k3 exceeds the clip at 20 anyway), but not the KL's ``ref - logp``, which nothing bounds.
A k3 argument beyond 21 nats (one of the policy and the reference e^21 times likelier than the
other: in practice never) stops the kernel, and the call takes the torch route, whose ``exp``
covers every float.

The numerics are the eager loss's (:func:`grpo_lab.torch.grpo_loss`) in float64: the
log-ratios are taken in the input dtype, as the eager loss takes them, and for float32 the
ratio is rounded to float32 before it is compared with the clip bounds (float32 values too),
so that a token on the edge of the clip is clipped (or not) as in the eager loss.
"""

from __future__ import annotations

import decimal
import math

import numpy as np

__all__ = ["EXP_LIMIT", "exp_expm1", "kernel_or_none", "loss_one_pass", "loss_rows",
           "token_terms"]

#: :func:`exp_expm1` is good to 2 ulp for ``|x| <= EXP_LIMIT`` (``2**n`` for |n| <= 30).
EXP_LIMIT = 21.0

_LOG2_E = 1.0 / math.log(2.0)
_LN2_DIGITS = decimal.Context(prec=50).ln(decimal.Decimal(2))           # ln 2 beyond float64
# ln 2 in two parts (Cody and Waite): _LN2_HI has its low 20 bits zero, so n * _LN2_HI is exact
# for |n| <= 2**20, and _LN2_LO holds the rest of ln 2 (beyond float64's ln 2, whose error
# times n = 30 would cost 7 ulp); r = x - n ln 2 is then accurate to about 2**-53.
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
_LN2_LO = float(_LN2_DIGITS - decimal.Decimal(_LN2_HI))   # the rest of ln 2, to 50 digits
_SHIFT = 31                                   # 2**n = (1 << (n + 31)) * 2**-31, for |n| <= 30
_UNSHIFT = 2.0 ** -_SHIFT
_KL_CODES = {None: 0, "k1": 1, "k2": 2, "k3": 3}

_KERNEL = []          # the compiled kernel, once built (or None without numba)


def exp_expm1(x):
    r"""``(e^x, e^x - 1)`` for ``|x| <= 21``, from additions and multiplications only."""
    n = math.floor(x * _LOG2_E + 0.5)                    # the nearest integer to x / ln 2
    r = (x - n * _LN2_HI) - n * _LN2_LO                  # |r| <= ln 2 / 2: e^x = 2^n e^r
    q = r * (1.0 + r * (1 / 2 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120 + r * (   # e^r - 1,
        1 / 720 + r * (1 / 5040 + r * (1 / 40320 + r * (1 / 362880 + r * (       # Horner
            1 / 3628800 + r * (1 / 39916800 + r * (1 / 479001600 + r / 6227020800))))))))))))
    s = float(1 << (n + _SHIFT)) * _UNSHIFT              # 2^n, exact: an integer shift
    return s * q + s, s * q + (s - 1.0)                  # 2^n e^r; 2^n (e^r - 1) + (2^n - 1)


def token_terms(lp, old, ref, a, lo_neg, hi_pos, beta, kl, single, cap, ratio_floor):
    """One token: ``(loss, d loss / d lp, low, high, ratio, kl, approx_kl, wild)``.

    ``lp``, ``old``, ``ref`` in the input dtype, the rest float64. ``wild`` is 1.0 where the
    k3 argument ``ref - lp`` is beyond :data:`EXP_LIMIT`, and the result is then not used.
    """
    lr = lp - old                                        # log pi / pi_old, in the input dtype
    y = min(max(np.float64(lr), -cap - 1.0), cap)        # exp(y) gives the ratio and approx_kl
    e_y, em1_y = exp_expm1(y)
    ratio = max(e_y, ratio_floor)                        # e^clamp(lr, -cap, cap): exp grows
    if single:
        ratio = np.float64(np.float32(ratio))            # the eager loss's float32 ratio
    lo = lo_neg if a < 0 else 0.0                        # clip_bounds: where the clip bites
    hi = hi_pos if a > 0 else math.inf
    loss = -a * min(max(ratio, lo), hi)                  # -A clamp(r, lo, hi)
    through = lo <= ratio <= hi and abs(lr) <= cap       # r let through, lr not clamped
    grad = -a * ratio if through else 0.0                # d (-A r) / d lp = -A r, else 0
    low = 1.0 if ratio < lo else 0.0                     # clipped below / above
    high = 1.0 if ratio > hi else 0.0
    approx_kl = min(em1_y - min(np.float64(lr), cap), cap)  # k3(lr) clipped, diagnostic_sums
    k, wild = 0.0, 0.0
    r = np.float64(ref - lp)                             # log pi_ref / pi, in the input dtype
    if kl == 3:                                          # k3 = e^r - 1 - r; d/d lp = -(e^r - 1)
        wild = 1.0 if abs(r) > EXP_LIMIT else 0.0
        em1_r = exp_expm1(min(max(r, -EXP_LIMIT), EXP_LIMIT))[1]
        k, dk = em1_r - r, -em1_r
    elif kl == 2:                                        # k2 = r^2 / 2; d/d lp = -r
        k, dk = 0.5 * r * r, -r
    else:                                                # k1 = -r; d/d lp = 1 (kl 0: unused)
        k, dk = -r, 1.0
    if kl != 0 and beta != 0:                            # the KL term of the loss
        loss += beta * k
        grad += beta * dk
    return loss, grad, low, high, ratio, k, approx_kl, wild


def loss_rows(lp, old, ref, adv, m, grad, w, per_token, lo_neg, hi_pos, beta, kl, single,
              cap, ratio_floor, sums):
    """The row loop (compiled by :func:`kernel_or_none`): writes ``grad``, adds into ``sums``.

    ===========  ========  ==================================================================
    Symbol       Shape     Meaning
    ===========  ========  ==================================================================
    lp, old      (N, T)    logp and old_logp, float32 or float64 (the working dtype)
    ref          (N, T)    ref_logp (any (N, T) array of that dtype when ``kl`` is 0)
    adv          (N, 1)    the advantages, per row; (N, T) per token (``per_token``)
    m            (N, T)    the mask, 0.0 / 1.0
    grad         (N, T)    output: d loss / d lp
    w            (N,)      each row's aggregation weight (float64)
    lo_neg       scalar    1 - eps_low: the clip's floor where A < 0 (in the working dtype)
    hi_pos       scalar    1 + eps_high: its ceiling where A > 0
    beta, kl     scalars   the KL weight; 0 (no reference), 1, 2 or 3 for k1, k2, k3
    single       bool      float32: round the ratio to float32, as the eager loss does
    cap          scalar    MAX_LOG_RATIO; ``ratio_floor = e^-cap``
    sums         (6,)      output (float64, zeroed): the loss, then the sums of clip_frac_low,
                           clip_frac_high, mean_ratio, mean_kl, approx_kl over valid tokens
    ===========  ========  ==================================================================

    Returns -1, or the first row with a wild token (then ``grad`` and ``sums`` are unfinished,
    and the caller takes another route).
    """
    N, T = lp.shape
    for i in range(N):
        a_i, w_i = np.float64(adv[i, 0]), w[i]
        s_loss = s_low = s_high = s_ratio = s_kl = s_akl = s_wild = 0.0
        for t in range(T):
            a = np.float64(adv[i, t]) if per_token else a_i
            loss, g, low, high, ratio, k, akl, wild = token_terms(
                lp[i, t], old[i, t], ref[i, t], a, lo_neg, hi_pos, beta, kl, single, cap,
                ratio_floor)
            mt = np.float64(m[i, t])                    # 1.0 valid, 0.0 padding
            grad[i, t] = g * (mt * w_i)                 # d loss / d lp = w_i m (...)
            s_loss += mt * loss                         # the row's sums over valid tokens
            s_low += mt * low
            s_high += mt * high
            s_ratio += mt * ratio
            s_kl += mt * k
            s_akl += mt * akl
            s_wild += mt * wild                         # padding's values do not matter
        if s_wild > 0:
            return i
        sums[0] += w_i * s_loss                         # the loss: sum_i w_i sum_t m l
        sums[1] += s_low
        sums[2] += s_high
        sums[3] += s_ratio
        sums[4] += s_kl
        sums[5] += s_akl
    return -1


#: Let the compiler reorder the sums (so it can add eight lanes at once) and fuse a multiply
#: with an add; NaN and inf keep their meaning.
FASTMATH = {"reassoc", "contract"}


def kernel_or_none():
    """The compiled :func:`loss_rows` (Numba, cached on disk), or None without Numba."""
    if not _KERNEL:
        try:
            import numba
        except ImportError:
            _KERNEL.append(None)
        else:
            from numba.extending import register_jitable
            for helper in (exp_expm1, token_terms):    # compiled into the loop that calls them
                register_jitable(fastmath=FASTMATH, inline="always")(helper)
            _KERNEL.append(numba.njit(cache=True, nogil=True, fastmath=FASTMATH)(loss_rows))
    return _KERNEL[0]


def loss_one_pass(lp, old, ref, adv, m, grad, w, eps_bounds, beta, kl, cap):
    """Run the kernel on checked, C-contiguous NumPy arrays of one dtype; returns the (7,)
    float64 array ``[loss, *DIAGNOSTICS sums]`` (clip_frac = low + high), or None without
    Numba. ``eps_bounds``: ``(1 - eps_low, 1 + eps_high)`` as values of the working dtype."""
    kernel = kernel_or_none()
    if kernel is None:
        return None
    sums = np.zeros(6)
    bad = kernel(lp, old, lp if ref is None else ref, adv, m, grad, w, adv.shape[1] > 1,
           eps_bounds[0], eps_bounds[1], float(beta), _KL_CODES[None if ref is None else kl],
           lp.dtype == np.float32, float(cap), math.exp(-cap), sums)
    if bad >= 0:
        return None
    loss, low, high, ratio, k, akl = sums
    return np.array([loss, low, high, low + high, ratio, k, akl])
