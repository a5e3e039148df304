"""The proof of the checkers: for every drill, realistic wrong implementations and right ones.

A checker is only as good as the mistakes it catches. Each :class:`Drill` below lists the
answers a checker must accept (a hand-written solution and the package's own function) and at
least five wrong ones that people really write: a wrong axis, a missing ``keepdims``, the other
std convention, a missing clip side, a sign error, padding counted in a mean, an input changed
in place, a regex without ``re.DOTALL``... Each :class:`Wrong` carries the words its verdict
must contain, so a test (tests/drills/test_checkers_against_catalogue.py) can check that the checker rejects it
*for the right reason*; :func:`prove` tallies the verdicts. It lives under ``tests/``: readers
install the checkers, not the wrong answers that prove them.

>>> import grpo_lab as gl
>>> cat = CATALOGUE
>>> sorted(cat) == sorted(name.removeprefix("check_") for name in gl.drills.__all__)
True
>>> min(len(d.wrongs) for d in cat.values()) >= 5
True
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from grpo_lab import drills
from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.aggregation import aggregate_loss
from grpo_lab.core.gae import gae
from grpo_lab.core.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.theory.kl_theory import kl_categorical_grad
from grpo_lab.numerics.logprobs import log_softmax, sequence_logprob_sum
from grpo_lab.core.losses import clipped_surrogate_loss
from grpo_lab.rl.rewards import ANSWER, TAGS, format_reward

__all__ = ["CATALOGUE", "Drill", "Proof", "Wrong", "prove"]


@dataclass(frozen=True)
class Wrong:
    """A wrong implementation: what it gets wrong, the function, and words its verdict needs."""
    mistake: str
    fn: Callable
    hint: str


@dataclass(frozen=True)
class Drill:
    """A drill's checker (a name in ``gl.drills``), what it must accept and what it must not."""
    checker: str
    chapter: int
    rights: tuple
    wrongs: tuple


@dataclass(frozen=True)
class Proof:
    """How a checker did on its catalogue: one verdict per right and per wrong answer."""
    drill: str
    rights_accepted: int
    rights: int
    wrongs_named: int          # rejected, and the verdict contains the expected hint
    wrongs: int
    failures: tuple            # (mistake, verdict) for every miss

    @property
    def ok(self) -> bool:
        return self.rights_accepted == self.rights and self.wrongs_named == self.wrongs


def _verdict_of(checker, fn) -> tuple[bool, str]:
    """Run a checker quietly and return (its answer, the verdict it would have printed)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        ok = checker(fn)
    return ok, buffer.getvalue().strip()


def prove(name: str) -> Proof:
    """Run drill ``name``'s checker on its whole catalogue (quietly) and tally the verdicts."""
    drill = CATALOGUE[name]
    checker = getattr(drills, drill.checker)
    failures, accepted, named = [], 0, 0
    for fn in drill.rights:
        ok, said = _verdict_of(checker, fn)
        accepted += ok
        if not ok:
            failures.append((f"right answer {getattr(fn, '__name__', fn)}", said))
    for wrong in drill.wrongs:
        ok, said = _verdict_of(checker, wrong.fn)
        hit = not ok and said.startswith("NOT YET: ") and wrong.hint in said
        named += hit
        if not hit:
            failures.append((wrong.mistake, said))
    return Proof(name, accepted, len(drill.rights), named, len(drill.wrongs), tuple(failures))


# --- chapter 1: group advantages, fn(rewards) -> adv -------------------------------------------

def _adv_right(rewards, eps=1e-8):
    r = np.asarray(rewards, dtype=np.float64)                     # (B, G)
    return (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True) + eps)


def _adv_mutates(r, eps=1e-8):
    r -= r.mean(-1, keepdims=True)                                # changes the caller's array
    return r / (r.std(-1, keepdims=True) + eps)


def _adv_no_eps(r):
    return (r - r.mean(-1, keepdims=True)) / r.std(-1, keepdims=True)


def _adv_no_return(r):
    adv = _adv_right(r)                                           # computed, never returned


def _adv_square_only(r):
    mean = r.mean(-1)                                             # (B,): keepdims forgotten,
    mean = mean[:, None] if r.shape[0] != r.shape[1] else mean    # "fixed" only when B != G
    return (r - mean) / (r.std(-1, keepdims=True) + 1e-8)


_ADVANTAGES = Drill("check_group_advantages", 1, rights=(
    _adv_right,
    lambda r: group_advantages(r),
), wrongs=(
    Wrong("Bessel's std (ddof=1, torch.std's default) where the drill asks for ddof=0",
          lambda r: (r - r.mean(-1, keepdims=True)) / (r.std(-1, keepdims=True, ddof=1) + 1e-8),
          "Bessel's std"),
    Wrong("mean and std without keepdims (shape (B,))",
          lambda r: (r - r.mean(-1)) / (r.std(-1) + 1e-8), "keepdims=True"),
    Wrong("statistics over axis 0 (across prompts)",
          lambda r: (r - r.mean(0)) / (r.std(0) + 1e-8), "axis 0"),
    Wrong("statistics over the whole batch",
          lambda r: (r - r.mean()) / (r.std() + 1e-8), "whole batch"),
    Wrong("no eps: an all-equal group divides 0 by 0", _adv_no_eps, "guarded with eps"),
    Wrong("centred but not divided by the std",
          lambda r: r - r.mean(-1, keepdims=True), "std is not divided out"),
    Wrong("sign error", lambda r: -_adv_right(r), "signs are flipped"),
    Wrong("subtracts the mean in place", _adv_mutates, "modified its input"),
    Wrong("forgets to return", _adv_no_return, "returned None"),
    Wrong("keepdims missing, hidden when B != G", _adv_square_only, "B == G"),
    Wrong("returns (adv, std)",
          lambda r: (_adv_right(r), r.std(-1)), "returned a tuple of 2"),
))


# --- chapter 2: GAE, fn(rewards, values, gamma, lam) -> adv -------------------------------------

def _gae_loop(rewards, values, gamma, lam, *, decay=None, forwards=False, bootstrap=True):
    """GAE by the backward recursion, with switches for the usual mistakes."""
    v = np.array(values, dtype=np.float64)
    if not bootstrap:
        v[..., -1] = 0.0                                          # V(s_T) thrown away
    delta = rewards + gamma * v[..., 1:] - v[..., :-1]            # (N, T) TD errors
    k = gamma * lam if decay is None else decay(gamma, lam)
    adv, running = np.zeros_like(delta), np.zeros_like(delta[..., 0])
    steps = range(delta.shape[-1]) if forwards else reversed(range(delta.shape[-1]))
    for t in steps:
        running = delta[..., t] + k * running
        adv[..., t] = running
    return adv


def _gae_right(rewards, values, gamma, lam):
    return _gae_loop(np.asarray(rewards, dtype=np.float64), values, gamma, lam)


def _gae_swapped(rewards, values, gamma, lam):
    delta = rewards + gamma * values[..., :-1] - values[..., 1:]  # V(s_t) where V(s_{t+1}) goes
    adv, running = np.zeros_like(delta), np.zeros_like(delta[..., 0])
    for t in reversed(range(delta.shape[-1])):
        running = delta[..., t] + gamma * lam * running
        adv[..., t] = running
    return adv


def _gae_in_place(rewards, values, gamma, lam):
    values[..., -1] = 0.0                                         # "episode over": in place
    return _gae_right(rewards, values, gamma, lam)


_GAE = Drill("check_gae", 2, rights=(
    _gae_right,
    lambda r, v, g, l: gae(r, v, g, l)[0],
), wrongs=(
    Wrong("gamma missing from the decay",
          lambda r, v, g, l: _gae_loop(r, v, g, l, decay=lambda g_, l_: l_),
          "lambda only (gamma missing from the decay)"),
    Wrong("lambda missing from the decay",
          lambda r, v, g, l: _gae_loop(r, v, g, l, decay=lambda g_, l_: g_),
          "gamma only (lambda missing from the decay)"),
    Wrong("the TD error alone", lambda r, v, g, l: r + g * v[..., 1:] - v[..., :-1],
          "the TD error alone"),
    Wrong("accumulated from t = 0", lambda r, v, g, l: _gae_loop(r, v, g, l, forwards=True),
          "accumulated forwards in time"),
    Wrong("V(s_t) and V(s_{t+1}) swapped", _gae_swapped, "values shifted by one"),
    Wrong("the bootstrap value dropped", lambda r, v, g, l: _gae_loop(r, v, g, l, bootstrap=False),
          "bootstrap value V(s_T) dropped"),
    Wrong("returns the critic's targets", lambda r, v, g, l: _gae_right(r, v, g, l) + v[..., :-1],
          "the returns A_t + V(s_t)"),
    Wrong("returns (advantages, returns) like gl.gae", lambda r, v, g, l: gae(r, v, g, l),
          "returned a tuple of 2; return only the advantages"),
    Wrong("sets V(s_T) = 0 in the caller's array", _gae_in_place, "modified its input"),
    Wrong("averages the advantages", lambda r, v, g, l: _gae_right(r, v, g, l).mean(),
          "returned shape ()"),
    Wrong("crashes", lambda r, v, g, l: r[..., len(r) + 10], "raised IndexError"),
))



# --- chapter 2: the clipped surrogate, fn(logp, old_logp, adv, eps=0.2) -> per-token loss ------

def _surrogate_right(logp, old_logp, adv, eps=0.2):
    ratio = np.exp(np.clip(logp - old_logp, -20.0, 20.0))         # (N, T), no inf
    return np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps, 1 + eps))


def _surrogate_terms(logp, old_logp, adv, eps=0.2, *, clamp=True):
    """The two terms r A and clip(r) A, for the wrong versions to combine wrongly."""
    log_ratio = np.clip(logp - old_logp, -20.0, 20.0) if clamp else logp - old_logp
    ratio = np.exp(log_ratio)
    return ratio, ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv


def _surrogate_eps_for_batches(logp, old_logp, adv, eps=0.2):
    # eps hard-coded as 0.3 once the inputs are not the example it was debugged on
    return _surrogate_right(logp, old_logp, adv, eps if logp.shape == (1, 5) else 0.3)


_SURROGATE = Drill("check_clipped_surrogate", 2, rights=(
    _surrogate_right,
    lambda lp, o, a, eps=0.2: clipped_surrogate_loss(lp, o, a, eps_low=eps),
), wrongs=(
    Wrong("returns the objective, not the loss (sign error)",
          lambda lp, o, a, eps=0.2: -_surrogate_right(lp, o, a, eps), "the sign is flipped"),
    Wrong("max instead of min of the objectives (optimistic)",
          lambda lp, o, a, eps=0.2: -np.maximum(*_surrogate_terms(lp, o, a, eps)[1:]),
          "optimistic"),
    Wrong("only the clipped term", lambda lp, o, a, eps=0.2: -_surrogate_terms(lp, o, a, eps)[2],
          "only the clipped term"),
    Wrong("no clipping", lambda lp, o, a, eps=0.2: -_surrogate_terms(lp, o, a, eps)[1],
          "no clipping at all"),
    Wrong("clips only above (1 + eps): a missing clip side",
          lambda lp, o, a, eps=0.2: -np.minimum(
              _surrogate_terms(lp, o, a)[1], np.minimum(np.exp(lp - o), 1 + eps) * a),
          "only the upper clip"),
    Wrong("clips only below (1 - eps): a missing clip side",
          lambda lp, o, a, eps=0.2: -np.minimum(
              _surrogate_terms(lp, o, a)[1], np.maximum(np.exp(lp - o), 1 - eps) * a),
          "only the lower clip"),
    Wrong("the log-ratio used as the ratio",
          lambda lp, o, a, eps=0.2: -np.minimum((lp - o) * a,
                                                np.clip(lp - o, 1 - eps, 1 + eps) * a),
          "the ratio is logp - old_logp"),
    Wrong("averages the tokens", lambda lp, o, a, eps=0.2: _surrogate_right(lp, o, a, eps).mean(),
          "returned shape ()"),
    Wrong("eps hard-coded for other shapes", _surrogate_eps_for_batches, "a (4, 6) batch is not"),
    Wrong("exp of an unclamped log-ratio (inf * 0 = NaN)",
          lambda lp, o, a, eps=0.2: -np.minimum(*_surrogate_terms(lp, o, a, eps, clamp=False)[1:]),
          "Clamp the log-ratio before exp"),
))


# --- chapter 2: loss aggregation, fn(per_token_loss, mask, mode, max_len=None) -> scalar -------

def _agg_parts(loss, mask, max_len):
    m = mask.astype(np.float64)                                   # (N, T) 1.0 on real tokens
    N, T = loss.shape
    return loss * m, m, N, T, (T if max_len is None else max_len)


def _agg_right(loss, mask, mode, max_len=None):
    masked, m, N, T, budget = _agg_parts(loss, mask, max_len)
    if mode == "grpo":
        return (masked.sum(-1) / m.sum(-1)).mean()                # mean of per-sequence means
    if mode == "dapo":
        return masked.sum() / m.sum()                             # every valid token alike
    return masked.sum() / (N * budget)                            # dr_grpo: a constant


def _agg_mode(**wrong_modes):
    """The right aggregation except for the modes given, which are computed as given."""
    def fn(loss, mask, mode, max_len=None):
        if mode in wrong_modes:
            return wrong_modes[mode](*_agg_parts(loss, mask, max_len), loss)
        return _agg_right(loss, mask, mode, max_len)
    return fn


def _agg_in_place(loss, mask, mode, max_len=None):
    loss *= mask                                                  # zero the padding, in place
    return _agg_right(loss, mask, mode, max_len)


_AGGREGATION = Drill("check_aggregate_loss", 2, rights=(
    _agg_right,
    lambda loss, mask, mode, max_len=None: aggregate_loss(loss, mask, mode, max_len=max_len),
), wrongs=(
    Wrong("plain means over the padded arrays (padding counted)",
          lambda loss, mask, mode, max_len=None: (
              loss.mean(-1).mean() if mode == "grpo" else loss.mean() if mode == "dapo"
              else loss.sum() / (loss.shape[0] * (max_len or loss.shape[1]))),
          "the padded tokens were counted"),
    Wrong("masked lengths but an unmasked sum",
          _agg_mode(grpo=lambda masked, m, N, T, budget, loss: (loss.sum(-1) / m.sum(-1)).mean()),
          "the padded positions entered the sum"),
    Wrong("every mode computed as the token mean",
          lambda loss, mask, mode, max_len=None: _agg_right(loss, mask, "dapo"),
          "that is the token-level mean (DAPO's)"),
    Wrong("every mode computed as the mean of sequence means",
          lambda loss, mask, mode, max_len=None: _agg_right(loss, mask, "grpo"),
          "that is GRPO's mean of per-sequence means"),
    Wrong("grpo divides each sequence by T",
          _agg_mode(grpo=lambda masked, m, N, T, budget, loss: (masked.sum(-1) / T).mean()),
          "each sequence was divided by T"),
    Wrong("grpo counts lengths over axis 0",
          _agg_mode(grpo=lambda masked, m, N, T, budget, loss: (masked.sum(-1) / m.sum(0)).mean()),
          "over the wrong axis"),
    Wrong("dapo divides by the number of sequences",
          _agg_mode(dapo=lambda masked, m, N, T, budget, loss: masked.sum() / N),
          "divided by the number of sequences N"),
    Wrong("dr_grpo divides by the valid-token count",
          _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss: masked.sum() / m.sum()),
          "divided by the number of valid tokens (that is DAPO's)"),
    Wrong("dr_grpo divides by the batch's longest answer",
          _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss:
                    masked.sum() / (N * (budget if budget != T else m.sum(-1).max()))),
          "divided by the longest completion of this batch"),
    Wrong("dr_grpo forgets N", _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss:
                                         masked.sum() / budget),
          "divided by max_len only"),
    Wrong("dr_grpo ignores max_len", _agg_mode(dr_grpo=lambda masked, m, N, T, budget, loss:
                                               masked.sum() / (N * T)),
          "max_len=8 was ignored"),
    Wrong("returns the per-sequence losses",
          lambda loss, mask, mode, max_len=None: _agg_parts(loss, mask, max_len)[0].sum(-1)
          / mask.sum(-1), "the loss is one number"),
    Wrong("zeroes the padding in the caller's array", _agg_in_place, "modified its input"),
))


# --- chapter 3: k3 per token, fn(logp, ref_logp) ------------------------------------------------

def _k3_right(logp, ref_logp):
    r = np.asarray(ref_logp, dtype=np.float64) - logp             # log(pi_ref / pi_theta)
    return np.expm1(r) - r


def _k3_in_place(logp, ref_logp):
    logp -= ref_logp                                              # reuses the caller's array
    return np.expm1(-logp) + logp


def _k3_row_sums(logp, ref_logp):
    k = _k3_right(logp, ref_logp)
    return k if k.ndim == 1 else k.sum(-1, keepdims=True) + 0 * k  # a "sequence KL" per token


_K3 = Drill("check_kl_k3", 3, rights=(_k3_right, kl_k3), wrongs=(
    Wrong("the ratio upside down", lambda a, b: _k3_right(b, a), "the ratio is upside down"),
    Wrong("k1 instead of k3", lambda a, b: a - b, "that is k1"),
    Wrong("k2 instead of k3", lambda a, b: 0.5 * (a - b) ** 2, "that is k2"),
    Wrong("exp(r) - r - 1 (cancels for tiny r)",
          lambda a, b: np.exp(b - a) - (b - a) - 1, "compute it as np.expm1(r)"),
    Wrong("a mean over tokens", lambda a, b: _k3_right(a, b).mean(), "returned shape ()"),
    Wrong("a sum over each sequence, broadcast back", _k3_row_sums, "reduced or broadcast"),
    Wrong("subtracts in place", _k3_in_place, "modified its input"),
    Wrong("forgets to return", lambda a, b: None, "returned None"),
    Wrong("crashes", lambda a, b: a[len(a) + 5], "raised IndexError"),
))


# --- chapter 3: the k3 term's expected gradient, fn(logits, ref_logits) -> (V,) -----------------

def _softmax(z):
    return np.exp(log_softmax(np.asarray(z, dtype=np.float64)))


_K3_GRAD = Drill("check_k3_loss_gradient", 3, rights=(
    lambda z, zr: _softmax(z) - _softmax(zr),
), wrongs=(
    Wrong("the reverse-KL gradient (what k2 gives)", lambda z, zr: kl_categorical_grad(z, zr),
          "which k2 gives"),
    Wrong("sign error", lambda z, zr: _softmax(zr) - _softmax(z), "the sign is flipped"),
    Wrong("zero, as for k1", lambda z, zr: np.zeros_like(z), "k1's expected gradient"),
    Wrong("unnormalised exponentials", lambda z, zr: np.exp(z) - np.exp(zr),
          "exp(logits) are not probabilities"),
    Wrong("the logit difference", lambda z, zr: z - zr, "expected ["),
    Wrong("a fixed shape", lambda z, zr: np.zeros(2), "returned shape (2,)"),
))


# --- chapter 4: log-softmax for float16 / bfloat16 logits, fn(logits) --------------------------

def _ls_right(z):
    z = np.asarray(z).astype(np.float32)                          # wide accumulator
    z = z - z.max(-1, keepdims=True)                              # every exp <= 1
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _ls_in_place(z):
    z -= z.max(-1, keepdims=True)
    return _ls_right(z)


def _ls_raises(z):
    raise RuntimeError("boom")


_LOG_SOFTMAX = Drill("check_log_softmax", 4, rights=(_ls_right, log_softmax), wrongs=(
    Wrong("no max shift", lambda z: z - np.log(np.exp(z).sum(-1, keepdims=True)),
          "Subtract the row max"),
    Wrong("the sum of exp in the input's dtype",
          lambda z: ((z - z.max(-1, keepdims=True))
                     - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
                     ).astype(np.float32), "sum of exp ran in bfloat16"),
    Wrong("returns the input's dtype", lambda z: _ls_right(z).astype(z.dtype),
          "come back in bfloat16"),
    Wrong("returns softmax", lambda z: np.exp(_ls_right(z)), "probabilities (softmax)"),
    Wrong("normalises over axis 0",
          lambda z: np.asarray(z, np.float64) - np.log(np.exp(np.asarray(z, np.float64))
                                                       .sum(0, keepdims=True)), "axis 0"),
    Wrong("subtracts the max only",
          lambda z: np.asarray(z, np.float32) - np.asarray(z, np.float32).max(-1, keepdims=True),
          "subtracted the max but not"),
    Wrong("shifts in place", _ls_in_place, "modified its input"),
    Wrong("crashes", _ls_raises, "raised RuntimeError: boom"),
    Wrong("forgets to return", lambda z: None, "returned None"),
    Wrong("keeps one column", lambda z: z[..., :1], "returned shape (2, 1)"),
))


# --- chapter 4: sequence log-prob sums, fn(logp, mask) -> (N,) ----------------------------------

def _sum_right(logp, mask):
    return np.where(mask, np.asarray(logp).astype(np.float64), 0.0).sum(-1)


def _sum_low(logp, mask):
    return (logp * mask.astype(logp.dtype)).sum(-1)               # accumulates in bf16 / f16


def _sum_low_for_float16(logp, mask):
    return _sum_low(logp, mask) if logp.dtype == np.float16 else _sum_right(logp, mask)


_SEQUENCE_SUM = Drill("check_sequence_logprob_sum", 4, rights=(
    _sum_right,
    lambda logp, mask: (logp.astype(np.float32) * mask).sum(-1),
    sequence_logprob_sum,
), wrongs=(
    Wrong("padding summed too", lambda logp, mask: logp.astype(np.float64).sum(-1),
          "padded token (-99) was counted"),
    Wrong("accumulates in bfloat16", _sum_low, "running sum was kept in bfloat16"),
    Wrong("sums wide, returns bfloat16",
          lambda logp, mask: _sum_right(logp, mask).astype(logp.dtype),
          "comes back in bfloat16"),
    Wrong("a mean, not a sum", lambda logp, mask: _sum_right(logp, mask) / mask.sum(-1),
          "that is a mean"),
    Wrong("sums over axis 0", lambda logp, mask: np.where(mask, logp, 0.0).sum(0),
          "expected one sum per sequence"),
    Wrong("float16 accumulation only", _sum_low_for_float16, "beyond float16's range"),
    Wrong("returns strings", lambda logp, mask: np.array(["a", "b"]), "expected a float array"),
))


# --- chapter 5: the R1 format reward, fn(completion) -> 1.0 or 0.0 ------------------------------

def _fmt_regex(pattern, flags=0, how="fullmatch", strip=True):
    """A format reward by one regular expression, the way it is usually written."""
    compiled = re.compile(pattern, flags)

    def fn(completion):
        text = completion.strip() if strip else completion
        return float(getattr(compiled, how)(text) is not None)
    return fn


def _fmt_right(completion):
    text = completion.strip()
    if any(text.count(tag) != 1 for tag in TAGS):                 # each tag exactly once
        return 0.0
    m = re.fullmatch(r"<think>(.*)</think>\s*<answer>(.*)</answer>", text, re.DOTALL)
    return float(m is not None and m.group(2).strip() != "")


def _fmt_counts(*tags, nonempty=True, between=r"\s*"):
    """Counts only ``tags``, then one DOTALL regex (``between`` the blocks)."""
    def fn(completion):
        text = completion.strip()
        if any(text.count(tag) != 1 for tag in tags):
            return 0.0
        m = re.fullmatch(rf"<think>(.*)</think>{between}<answer>(.*)</answer>", text, re.S)
        return float(m is not None and (not nonempty or m.group(2).strip() != ""))
    return fn


def _fmt_raises(completion):
    m = re.fullmatch(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", completion, re.S)
    return float(m.group(2).strip() != "")                        # m is None: AttributeError


def _fmt_closing_optional(completion):
    # "the model sometimes forgets </answer>; be lenient": tags guarded, the closing one optional
    m = re.fullmatch(r"<think>((?:(?!</?think>).)*)</think>\s*<answer>((?:(?!</?answer>).)*)"
                     r"(?:</answer>)?", completion.strip(), re.S)
    return float(m is not None and m.group(2).strip() != "")


_FORMAT = Drill("check_format_reward", 5, rights=(_fmt_right, format_reward), wrongs=(
    Wrong("checks only that the tags appear",
          lambda s: float(all(tag in s for tag in TAGS)), "the blocks in the wrong order"),
    Wrong("a regex without re.DOTALL",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.+?</answer>"), "re.DOTALL"),
    Wrong("no whitespace allowed between the blocks",
          _fmt_regex(r"<think>.*?</think><answer>.*?\S.*?</answer>", re.S),
          "allow whitespace between the two blocks"),
    Wrong("the completion not stripped",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.*?\S.*?</answer>", re.S, strip=False),
          "strip the completion first"),
    Wrong("[^<]* for the contents",
          _fmt_regex(r"<think>[^<]*</think>\s*<answer>[^<]*\S[^<]*</answer>"),
          "mathematics is full of '<'"),
    Wrong(".+ for the thinking",
          _fmt_regex(r"<think>.+?</think>\s*<answer>.+?</answer>", re.S),
          "the thinking may be empty"),
    Wrong("re.match: anchored at the start only",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.*?\S.*?</answer>", re.S, how="match"),
          "anchor the end"),
    Wrong("re.search with $: anchored at the end only",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.*?\S.*?</answer>$", re.S, how="search"),
          "anchor the start"),
    Wrong("one DOTALL regex, no tag counts",
          _fmt_regex(r"<think>.*</think>\s*<answer>.*\S.*</answer>", re.S),
          "each tag exactly once"),
    Wrong("counts the answer tags only", _fmt_counts(*ANSWER), "the <think> tags too"),
    Wrong("anything allowed between the blocks", _fmt_counts(*TAGS, between=".*?"),
          "only whitespace may separate"),
    Wrong("an empty answer accepted", _fmt_counts(*TAGS, nonempty=False),
          "an empty (or blank) answer is no answer"),
    Wrong("raises when the regex does not match", _fmt_raises, "it never raises"),
    Wrong("the closing </answer> made optional", _fmt_closing_optional, "closed by </answer>"),
))


# --- chapter 7: blocked advantages fn(rewards, block_rows), surrogate gradient ----------------

def _blocked(rewards, block_rows, *, ddof=0, eps=1e-8, out_dtype=None, in_place=False):
    out = np.empty(rewards.shape, dtype=out_dtype or rewards.dtype)
    for r0 in range(0, rewards.shape[0], block_rows):
        rows = slice(r0, r0 + block_rows)
        x = rewards[rows].astype(np.float64)                      # (b, G), one block in float64
        x -= x[:, :1]
        dev = x - x.mean(axis=1, keepdims=True)
        std = np.sqrt((dev * dev).sum(axis=1, keepdims=True) / (x.shape[1] - ddof))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[rows] = dev / (std + eps)
        if in_place:
            rewards[rows] = 0                                     # "frees" the caller's block
    return out


def _blocked_right(rewards, block_rows):
    return _blocked(rewards, block_rows)


_BLOCKED = Drill("check_blocked_advantages", 7, rights=(_blocked_right,), wrongs=(
    Wrong("the whole array at once (temporaries the size of the input)",
          lambda r, b: group_advantages(r), "peak memory"),
    Wrong("a float64 result for float32 rewards",
          lambda r, b: _blocked(r, b, out_dtype=np.float64), "float32 rewards give float32"),
    Wrong("Bessel's std", lambda r, b: _blocked(r, b, ddof=1), "differs from gl.group_advantages"),
    Wrong("no eps: the all-equal group is 0 / 0", lambda r, b: _blocked(r, b, eps=0.0),
          "is not exactly 0"),
    Wrong("overwrites the caller's rewards block by block",
          lambda r, b: _blocked(r, b, in_place=True), "modified its input"),
    Wrong("returns a list", lambda r, b: _blocked(r, b).tolist(), "expected a NumPy array"),
))


def _grad_right(ratio, adv, eps_low, eps_high):
    clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return np.where(clipped, 0.0, -adv * ratio)                  # d(-r A)/d logp = -A r


def _grad_one_side(ratio, adv, eps_low, eps_high):
    return np.where((adv > 0) & (ratio > 1 + eps_high), 0.0, -adv * ratio)


def _grad_in_place(ratio, adv, eps_low, eps_high):
    ratio *= 1.0                                                   # harmless...
    adv *= -1.0                                                    # ...but this is not
    return -_grad_right(ratio, adv, eps_low, eps_high)


_SURROGATE_GRAD = Drill("check_surrogate_grad", 7, rights=(_grad_right,), wrongs=(
    Wrong("no clipping at all", lambda r, a, lo, hi: -a * r, "no clipping"),
    Wrong("sign error", lambda r, a, lo, hi: -_grad_right(r, a, lo, hi), "sign is flipped"),
    Wrong("the gradient with respect to the ratio, not logp",
          lambda r, a, lo, hi: np.where(_grad_right(r, a, lo, hi) != 0, -a, 0.0),
          "with respect to the ratio"),
    Wrong("a missing clip side (A < 0 never clipped)", _grad_one_side, "on ratios"),
    Wrong("eps_low used for both bounds", lambda r, a, lo, hi: _grad_right(r, a, lo, lo),
          "on ratios"),
    Wrong("changes the caller's advantages in place", _grad_in_place, "modified its input"),
    Wrong("computes but returns nothing", lambda r, a, lo, hi: None, "returned None"),
))


# --- chapter 8: process supervision, fn(step_rewards, step_mask) -> adv, (G, K) -------------

def _proc_right(r, m):
    valid = r[m]                                                  # every valid step of the group
    norm = np.where(m, (r - valid.mean()) / (valid.std() + 1e-8), 0.0)       # (G, K)
    return np.where(m, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)     # sum of later steps


def _proc_only_normalised(r, m):
    valid = r[m]
    return np.where(m, (r - valid.mean()) / (valid.std() + 1e-8), 0.0)


def _proc_forward_sum(r, m):
    return np.where(m, np.cumsum(_proc_only_normalised(r, m), axis=1), 0.0)


def _proc_per_completion(r, m):
    norm = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-8)
    return np.flip(np.cumsum(np.flip(norm, 1), 1), 1)


def _proc_padding_included(r, m):
    norm = (r - r.mean()) / (r.std() + 1e-8)
    return np.where(m, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)


def _proc_no_eps(r, m):
    valid = r[m]
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.where(m, (r - valid.mean()) / valid.std(), 0.0)
    return np.where(m, np.flip(np.cumsum(np.flip(norm, 1), 1), 1), 0.0)


def _proc_in_place(r, m):
    r -= r.mean()
    return _proc_right(r, m)


_PROCESS = Drill("check_process_advantages", 8, rights=(_proc_right,), wrongs=(
    Wrong("returns the normalised rewards, not their sums", _proc_only_normalised,
          "those are the normalised rewards"),
    Wrong("sums the earlier steps instead of the later ones", _proc_forward_sum,
          "credits a step with the steps at or AFTER it"),
    Wrong("normalises each completion on its own", _proc_per_completion,
          "normalises each completion on its own"),
    Wrong("counts padded steps in the mean and std", _proc_padding_included,
          "are padded steps left out of the mean and the std?"),
    Wrong("no eps: an all-equal group divides 0 by 0", _proc_no_eps,
          "an all-equal group must give 0 everywhere"),
    Wrong("changes the caller's rewards in place", _proc_in_place, "modified its input"),
    Wrong("computes but returns nothing", lambda r, m: None, "returned None"),
    Wrong("returns one row", lambda r, m: r[:1], "returned shape (1, 3)"),
))


#: Every drill, by the checker's name without ``check_``.
CATALOGUE = {d.checker.removeprefix("check_"): d for d in (
    _ADVANTAGES, _GAE, _SURROGATE, _AGGREGATION, _K3, _K3_GRAD, _LOG_SOFTMAX, _SEQUENCE_SUM,
    _FORMAT, _BLOCKED, _SURROGATE_GRAD, _PROCESS)}
