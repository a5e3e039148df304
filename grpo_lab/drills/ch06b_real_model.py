"""Drill checkers for chapter 6b, a real model's GRPO step: per-token log-probs with the shift
and the completion mask, the entropy from logits, a gradient-accumulation step whose gradient
is the full batch's, and a sequence-level importance-sampling weight.

The inputs are torch tensors (the chapter's model is a Hugging Face causal LM); torch is
imported when a checker runs, not before. The answers are graded against NumPy references in
float64, at the precision of the answer's dtype (a float32 answer to float32 logits is graded
at float32's). At float64 the log-probs' and the entropy's tolerances add a bound on how the
valid formulations round: a log-softmax by ``np.logaddexp.reduce`` as much as by a max
shift, and TRL's ``logsumexp(z) - sum p z`` for the entropy. The hints name the usual
mistakes: no shift or the shift the wrong way, the prompt or post-EOS tokens in the mask, the
EOS left out, a log of a softmax that underflowed, the entropy's sign, padding in a mean, a
per-micro-batch mean, a gradient zeroed inside the loop, a token-level weight where the
sequence's is asked, no cap.

=====================================  ===========================================================
checker                                the reader writes
=====================================  ===========================================================
``check_completion_logprobs(fn)``      ``fn(logits, input_ids, prompt_len, eos_id) -> logp``,
                                       (N, L): log pi(token t | tokens < t) on completion tokens
                                       up to and including the first EOS, 0 elsewhere
``check_masked_entropy(fn)``           ``fn(logits, mask) -> H``: the mean entropy (nats) of
                                       softmax(logits) over the tokens where mask is True;
                                       a -inf logit (masked out) adds 0 log 0 = 0
``check_accumulated_gradient(fn)``     ``fn(model, input_ids, mask, micro_batch_size, loss_fn)
                                       -> loss``: the token mean of the whole batch's loss,
                                       backward micro-batch by micro-batch, its gradient left in
                                       the parameters' ``.grad`` equal to the full batch's, no
                                       optimizer step
``check_sequence_is_weight(fn)``       ``fn(old_logp, sampler_logp, mask, cap) -> (N,)``:
                                       min(exp(sum_t mask (old_logp - sampler_logp)), cap)
=====================================  ===========================================================
"""

from __future__ import annotations

import re

import numpy as np

from grpo_lab.drills.cases import (Case, Mistake, close, full, grade_dtype, log_softmax_error,
                                   tolerance)
from grpo_lab.drills.grading import check_cases
from grpo_lab.drills.harness import verdict

__all__ = ["check_accumulated_gradient", "check_completion_logprobs", "check_masked_entropy",
           "check_sequence_is_weight", "completion_mask", "completion_logprobs_reference"]


def _torch():
    import grpo_lab.torch  # noqa: F401  says how to install torch when it is missing
    import torch
    return torch


def _log_softmax(z):
    z = np.asarray(z, dtype=np.float64)
    return z - np.logaddexp.reduce(z, axis=-1, keepdims=True)


def _numpy(x):
    return x.detach().cpu().double().numpy() if hasattr(x, "detach") else np.asarray(x)


# --- 1. per-token log-probs with the shift and the completion mask -----------------------------

def completion_mask(input_ids, prompt_len: int, eos_id: int) -> np.ndarray:
    """(N, L) bool: the completion's tokens (columns ``prompt_len`` on) up to and including
    the first EOS; all of them if there is none (a truncated completion)."""
    ids = np.asarray(input_ids)
    comp = ids[:, prompt_len:] == eos_id                                   # (N, C)
    seen = np.cumsum(comp, axis=1) - comp                                  # EOS strictly before
    mask = np.zeros(ids.shape, dtype=bool)                                 # (N, L)
    mask[:, prompt_len:] = seen == 0
    return mask


def completion_logprobs_reference(logits, input_ids, prompt_len: int, eos_id: int):
    """The drill's answer in NumPy: ``logp[n, t] = log_softmax(logits[n, t - 1])[ids[n, t]]``
    on the completion mask, 0 elsewhere (column 0 has no logits before it)."""
    z, ids = _log_softmax(_numpy(logits)), np.asarray(input_ids)          # (N, L, V), (N, L)
    logp = np.zeros(ids.shape)
    logp[:, 1:] = np.take_along_axis(z[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]  # the shift
    return np.where(completion_mask(ids, prompt_len, eos_id), logp, 0.0)


def _lp_batch(seed, N, P, C, V, eos, pad, lengths, *, dtype="float64", spread=1.0, offset=0.0,
              after="pad", rare=False):
    """Left-padded prompts of width P, completions of width C: lengths[i] tokens then EOS
    (None: truncated, no EOS), then ``after`` ("pad", or "garbage": tokens sampled on)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, V, size=(N, P + C))                              # (N, L)
    for i, n in enumerate(rng.integers(1, P + 1, size=N)):
        ids[i, :P - n] = pad                                               # left padding
    for i, n in enumerate(lengths):
        if n is not None:
            ids[i, P + n] = eos
            if after == "pad":
                ids[i, P + n + 1:] = pad
    logits = offset + spread * rng.normal(size=(N, P + C, V))              # (N, L, V)
    if rare:                   # one sampled completion token far below its position's top logit
        i, t = 0, P + 1
        logits[i, t - 1, ids[i, t]] = logits[i, t - 1].max() - 120.0
    return logits.astype(dtype), ids


def _lp_cases():
    torch = _torch()
    rows = [("the worked example", 0, 2, 3, 4, 5, 1, 0, [2, None], {}),
            ("a batch whose padding is the EOS token (pad_id == eos_id)", 1, 4, 4, 6, 7, 1, 1,
             [0, 3, None, 5], {}),
            ("float32 logits, and tokens sampled on after the EOS", 2, 3, 3, 7, 9, 1, 0,
             [1, 4, 2], {"dtype": "float32", "after": "garbage"}),
            ("float32 logits near 1000", 3, 3, 2, 5, 6, 2, 0, [3, None, 1],
             {"dtype": "float32", "offset": 1000.0}),
            ("float32 logits, a sampled token 120 nats below its position's top logit", 4, 2,
             3, 5, 6, 1, 0, [4, 2], {"dtype": "float32", "rare": True}),
            ("one truncated completion (no EOS)", 5, 1, 2, 6, 5, 4, 0, [None], {})]
    for where, seed, N, P, C, V, eos, pad, lengths, kw in rows:
        logits, ids = _lp_batch(seed, N, P, C, V, eos, pad, lengths, **kw)
        expected = completion_logprobs_reference(logits, ids, P, eos)
        wide = logits.astype(np.float64)
        spread = np.abs(wide - wide.max(-1, keepdims=True)).max(-1)        # (N, L)
        scale = np.abs(expected) + np.abs(wide).max(-1) + spread + np.log(V)
        mask = completion_mask(ids, P, eos)
        token_error = np.take_along_axis(log_softmax_error(wide[:, :-1]), ids[:, 1:, None],
                                         -1)[..., 0]                        # (N, L - 1)
        yield Case(where, (torch.from_numpy(logits), torch.from_numpy(ids), P, eos), expected,
                   inputs={"logits": wide, "ids": ids, "P": P, "eos": eos, "pad": pad},
                   scale=scale, bound=np.pad(token_error, ((0, 0), (1, 0))) * mask,
                   show=lambda i, ids=ids, P=P, eos=eos, mask=mask: (
                       f"input_ids[{i[0]}] = {ids[i[0]].tolist()}, prompt_len = {P}, eos_id = "
                       f"{eos}; position {i[1]} is {'in' if mask[i] else 'outside'} the "
                       f"completion mask"))


def _lp_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["logits"], c.inputs["ids"], c.inputs["P"],
                                         c.inputs["eos"]))

    def gathered(z, ids, shift=1):
        """log_softmax(z)[token] with the logits of position t - shift (0 where none)."""
        lp = _log_softmax(z)
        if shift == 0:
            return np.take_along_axis(lp, ids[..., None], -1)[..., 0]
        if shift == -1:                                                    # torch.roll(z, -1)
            return np.take_along_axis(np.roll(lp, -1, axis=1), ids[..., None], -1)[..., 0]
        out = np.zeros(ids.shape)
        out[:, 1:] = np.take_along_axis(lp[:, :-1], ids[:, 1:, None], -1)[..., 0]
        return out

    def masked(f_mask, f_lp=gathered):
        return lambda z, ids, P, eos: np.where(f_mask(ids, P, eos), f_lp(z, ids), 0.0)

    def to_first_eos_from(start):
        def mask(ids, P, eos):
            out = completion_mask(ids, P, eos)
            out[:, start:P] = True
            return out
        return mask

    def everything_after(ids, P, eos):
        out = np.zeros(ids.shape, bool)
        out[:, P:] = True
        return out

    def before_eos(ids, P, eos):
        return completion_mask(ids, P, eos) & (ids != eos)

    def not_eos(ids, P, eos):
        return everything_after(ids, P, eos) & (ids != eos)

    def to_second_eos(ids, P, eos):
        out = np.zeros(ids.shape, bool)
        out[:, P:] = np.cumsum(ids[:, P:] == eos, axis=1) <= 1
        return out

    right_mask = completion_mask
    wrong_way = [m(_WRONG_WAY, masked(right_mask, lambda z, ids, f=f: f(z, ids)))
                 for f in (lambda z, ids: gathered(z, ids, shift=-1), _ahead_sliced,
                           _ahead_padded)]
    over_positions = [m("that log_softmax normalises over the positions (dim 1): each "
                        "position's distribution is over the vocabulary, the last axis "
                        "(log_softmax(logits, dim=-1))",
                        masked(right_mask, lambda z, ids, f=f: f(z, ids)))
                      for f in (_over_positions_sliced, _over_positions_whole)]
    return [
        m("no shift: the logits at position t predict token t + 1, so token t's log-prob is "
          "read from logits[:, t - 1] (logits[:, :-1] against input_ids[:, 1:])",
          masked(right_mask, lambda z, ids: gathered(z, ids, shift=0))),
        *wrong_way, *over_positions,
        m("the EOS count ran over the whole row: where pad == eos, the prompt's left padding "
          "counts as an EOS before the completion, and every left-padded row's completion is "
          "masked out. Count the EOS tokens in the completion's columns only "
          "(input_ids[:, prompt_len:])", masked(_eos_seen_over_the_row)),
        m("the prompt's tokens are in the mask: only the completion (columns prompt_len on) "
          "is the policy's action", masked(to_first_eos_from(1))),
        m("the prompt's tokens are in the mask: only the completion (columns prompt_len on) "
          "is the policy's action", masked(to_first_eos_from(0))),
        m("the tokens after the first EOS are in the mask: they were never sampled as the "
          "policy's answer (padding, or a sampler that ran on); keep the completion up to and "
          "including the first EOS", masked(everything_after)),
        m("the EOS itself is left out of the mask: it is an action the policy took (stopping) "
          "and must be learned; keep it", masked(before_eos)),
        m("a mask from input_ids != eos_id drops the EOS (and, where pad == eos, everything "
          "after it, by luck): build it from the position of the first EOS",
          masked(not_eos)),
        m("the mask runs to the second EOS: count the EOS tokens strictly before each "
          "position (cumsum minus the token itself) and keep the positions where that is 0",
          masked(to_second_eos)),
        m("those are probabilities: the drill asks for log-probabilities",
          lambda z, ids, P, eos: np.where(right_mask(ids, P, eos), np.exp(gathered(z, ids)),
                                          0.0)),
        m("that is the log-prob of the most likely token, not of the token sampled: gather "
          "at input_ids", lambda z, ids, P, eos: np.where(right_mask(ids, P, eos), np.pad(
              _log_softmax(z[:, :-1]).max(-1), ((0, 0), (1, 0))), 0.0)),
        m("those are the raw logits of the sampled tokens: subtract each position's "
          "logsumexp (log_softmax) first", lambda z, ids, P, eos: np.where(
              right_mask(ids, P, eos), np.pad(np.take_along_axis(
                  z[:, :-1], ids[:, 1:, None], -1)[..., 0], ((0, 0), (1, 0))), 0.0)),
    ]


_WRONG_WAY = ("the shift goes the wrong way: token t's log-prob is read from logits[:, t - 1] "
              "(logits[:, :-1] against input_ids[:, 1:]), not from logits[:, t + 1] "
              "(torch.roll(logits, -1), or logits[:, 1:] against input_ids[:, :-1])")


def _pick(lp, ids):
    return np.take_along_axis(lp, ids[..., None], -1)[..., 0]


def _ahead_sliced(z, ids):
    """log_softmax(logits[:, 1:]) gathered at input_ids[:, :-1], into columns :-1."""
    out = np.zeros(ids.shape)
    out[:, :-1] = _pick(_log_softmax(z[:, 1:]), ids[:, :-1])
    return out


def _ahead_padded(z, ids):
    """log_softmax(logits[:, 1:]) gathered at input_ids[:, :-1], into columns 1: (as the
    right answer pads its front)."""
    out = np.zeros(ids.shape)
    out[:, 1:] = _pick(_log_softmax(z[:, 1:]), ids[:, :-1])
    return out


def _over_positions(z):
    with np.errstate(invalid="ignore"):
        return z - np.logaddexp.reduce(z, axis=1, keepdims=True)


def _over_positions_sliced(z, ids):
    """log_softmax(logits[:, :-1], dim=1), the shift right."""
    out = np.zeros(ids.shape)
    out[:, 1:] = _pick(_over_positions(z[:, :-1]), ids[:, 1:])
    return out


def _over_positions_whole(z, ids):
    """log_softmax(logits, dim=1)[:, :-1], the shift right."""
    out = np.zeros(ids.shape)
    out[:, 1:] = _pick(_over_positions(z)[:, :-1], ids[:, 1:])
    return out


def _eos_seen_over_the_row(ids, P, eos):
    """The EOS count over the whole row (prompt included), then the prompt cut off."""
    e = ids == eos
    out = np.cumsum(e, axis=1) - e == 0
    out[:, :P] = False
    return out


_LP_EPS = ("that is log(softmax + {eps}): an eps inside the log moves every log-prob (by about "
           "{eps} / p), and a p of 0 gets log({eps}) instead of its log-prob; take "
           "log_softmax(logits) (z - logsumexp(z)), which needs no eps")


def _lp_with_eps(case, eps):
    z, ids = case.inputs["logits"], case.inputs["ids"]
    P, eos = case.inputs["P"], case.inputs["eos"]
    out = np.zeros(ids.shape)
    out[:, 1:] = np.log(_pick(np.exp(_log_softmax(z[:, :-1])), ids[:, 1:]) + eps)
    return np.where(completion_mask(ids, P, eos), out, 0.0)


def _narrowest(case, answer) -> type:
    """The narrowest float dtype the answer may have computed in: its own, or its logits'."""
    given = str(np.asarray(case.args[0].detach()).dtype) if hasattr(case.args[0], "detach") \
        else "float64"
    return np.float32 if "float32" in (answer.dtype, given) else np.float64


def _lp_finite(case, answer):
    """A non-finite log-prob, and what this entry shows of where it came from: -inf from a
    probability that underflowed only where the exact log-prob is below the log of the dtype's
    smallest normal; an overflowing exp only where that position's logits are beyond exp's
    range; else neither is named."""
    bad = ~np.isfinite(answer.values)
    if not bad.any():
        return None
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    value, exact = answer.values[i], float(case.expected[i])
    dtype = _narrowest(case, answer)
    info, name = np.finfo(dtype), np.dtype(dtype).name
    text = f"on {case.where} entry {list(i)} is {value}, where the exact log-prob is {exact:.4g}"
    top = float(np.abs(case.inputs["logits"][i[0], i[1] - 1]).max()) if i[1] > 0 else 0.0
    if value == -np.inf and exact < np.log(info.tiny):
        return text + (f", below {np.log(info.tiny):.1f}, the log of the smallest normal "
                       f"{name}: that probability underflows to 0 in {name}, and -inf is the "
                       "log of a softmax that underflowed to 0. Take log_softmax (z - "
                       "logsumexp(z)), never log(softmax(z))")
    if value != -np.inf and top > np.log(info.max):
        return text + (f", and the logits at that position reach {top:.0f}, beyond "
                       f"{np.log(info.max):.1f}, the log of the largest {name}: exp of such a "
                       "logit overflowed to inf. Subtract the max before exp, or use "
                       "log_softmax")
    return text + (f": no probability underflows and no exp overflows in {name} at that "
                   "position, so look for a log of 0 or a 0 / 0 in the formula")


def check_completion_logprobs(fn, *, verbose=True) -> bool:
    """Check ``fn(logits, input_ids, prompt_len, eos_id) -> logp``, shape (N, L).

    ``logits`` (N, L, V) are the model's outputs on ``input_ids`` (N, L): left-padded prompts
    in columns ``:prompt_len``, then the completions. ``logp[n, t]`` is
    ``log softmax(logits[n, t - 1])[input_ids[n, t]]`` on the completion's tokens up to and
    including its first EOS (all of them if it has none), and 0 everywhere else.
    """
    say = verdict(verbose, fn)
    cases = list(_lp_cases())
    return check_cases(fn, cases, _in_the_inputs_dtype(say, cases, "logits"),
                       mistakes=_lp_mistakes(),
                       extra=lambda c, a: (_lp_finite(c, a) or _narrower(c, a, "logits")
                                           or _eps_in_the_log(c, a, _lp_with_eps, _LP_EPS)),
                       dtype=None, returns="the (N, L) log-probs",
                       shape_hint="; return one log-prob per position of input_ids, (N, L), "
                                  "0 outside the completion mask",
                       signature="my_completion_logprobs(logits, input_ids, prompt_len, eos_id)",
                       passed="the shift, the completion mask up to and including the first "
                              "EOS (pad == eos, tokens sampled after it, truncated), float32 "
                              "logits near 1000 and a token 120 nats down: all right")


# --- 2. the entropy from logits -------------------------------------------------------------------

def _token_entropy(z):
    """-sum_v p log p in nats, (N, T), with 0 log 0 = 0: a masked logit (-inf) has p = 0 and
    adds nothing (a plain ``p * log p`` there is 0 * -inf = NaN)."""
    lp = _log_softmax(z)                                                   # -inf where z is
    with np.errstate(invalid="ignore"):                                    # 0 * -inf, dropped
        return -np.where(np.isfinite(lp), np.exp(lp) * lp, 0.0).sum(-1)    # (N, T) nats


def _finite_top(z):
    """max |z| over each row's finite logits (a masked logit, -inf, rounds nothing)."""
    return np.where(np.isfinite(z), np.abs(z), 0.0).max(-1)


def _entropy_error(z):
    """A bound, in units of ``u``, on a token entropy's rounding over its valid formulations,
    (N, T): ``-sum p log p`` from a log-softmax off by ``E`` (:func:`log_softmax_error`) is off
    by ``sum p E (|log p| + 1)``; TRL's ``logsumexp(z) - sum p z`` with ``p`` from that same
    logsumexp is off by the logsumexp's error ``E_lse`` times ``1 + sum p |z|`` (the sum moves
    with every ``p``), plus ``V + 2`` roundings of terms up to ``|lse| + max|z|``. A masked
    logit (-inf, p = 0) adds no term and no rounding: the sums run over the finite logits and
    ``max|z|`` is theirs, so the bound stays finite."""
    z = np.asarray(z, dtype=np.float64)
    V = z.shape[-1]
    lp = _log_softmax(z)
    live = np.isfinite(z)                                                  # (N, T, V)
    lp, z = np.where(live, lp, 0.0), np.where(live, z, 0.0)                # p = 0 there
    p, top = np.where(live, np.exp(lp), 0.0), _finite_top(z)              # (N, T, V), (N, T)
    E = np.abs(lp) + (V + 3) * (top[..., None] + np.log(V) + 2)           # log_softmax_error
    lse_error = (V + 3) * (top + np.log(V) + 2)                             # (N, T)
    direct = (p * E * (np.abs(lp) + 1)).sum(-1)
    pz = (p * np.abs(z)).sum(-1)
    trl = lse_error * (1 + pz) + (V + 2) * 2 * (top + np.log(V) + 1)
    return np.maximum(direct, trl)


def _masked_mean(x, mask):
    return (x * mask).sum() / mask.sum()


#: The entropy case whose logits hold -inf (a vocabulary entry masked out; every position keeps
#: at least one finite logit).
MASKED_LOGIT_CASE = ("logits with -inf entries (vocabulary entries 1 and 4 masked out at every "
                     "position, and one position with a single finite logit, entropy 0)")


def _ent_cases():
    torch = _torch()
    rng = np.random.default_rng(7)

    def ragged(N, T, lengths):
        return np.arange(T) < np.array(lengths)[:, None]                   # (N, T) bool

    rows = [("the worked example", np.log([[[1, 1, 2, 4], [1, 1, 1, 1], [1, 9, 9, 9]],
                                            [[1, 2, 3, 4], [5, 1, 1, 1], [7, 7, 7, 7]]]),
             ragged(2, 3, [3, 2])),
            ("float32 logits, ragged lengths", rng.normal(size=(3, 5, 8)).astype(np.float32),
             ragged(3, 5, [5, 2, 3])),
            ("a 4 x 4 batch (N == T)", 2 * rng.normal(size=(4, 4, 6)), ragged(4, 4, [4, 1, 3, 2])),
            ("peaked float32 logits (spread over 200: most probabilities underflow to 0)",
             (60 * rng.normal(size=(2, 3, 7))).astype(np.float32), ragged(2, 3, [3, 2])),
            ("float32 logits near 1000", (1000 + rng.normal(size=(2, 4, 5))).astype(np.float32),
             ragged(2, 4, [4, 3])),
            ("one token", rng.normal(size=(1, 1, 3)), np.ones((1, 1), bool)),
            (MASKED_LOGIT_CASE, 2 * rng.normal(size=(3, 4, 6)), ragged(3, 4, [4, 2, 3]))]
    for where, z, mask in rows:
        z = np.asarray(z)
        if mask.shape[1] > 1:                                     # padding: a uniform guess
            z = np.where(mask[..., None], z, 0).astype(z.dtype)
        if where == MASKED_LOGIT_CASE:    # entries 1 and 4 masked out everywhere (padding too),
            z[..., [1, 4]] = -np.inf      # and position (0, 1) left one finite logit: H = 0
            z[0, 1, [0, 3, 5]] = -np.inf
        wide = z.astype(np.float64)
        H = _token_entropy(wide)
        top = _finite_top(wide)                                            # (N, T)
        spread = np.where(np.isfinite(wide), wide.max(-1, keepdims=True) - wide, 0.0).max()
        yield Case(where, (torch.from_numpy(z), torch.from_numpy(mask)), _masked_mean(H, mask),
                   inputs={"logits": wide, "mask": mask},
                   scale=_masked_mean(H, mask) + spread + top.max() + 1,
                   bound=_masked_mean(_entropy_error(wide), mask),
                   show=lambda i, mask=mask: f"lengths {mask.sum(1).tolist()}")


def _ent_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["logits"], c.inputs["mask"]))

    H = _token_entropy
    return [
        m("the sign is flipped: the entropy is -sum_v p log p, which is >= 0",
          lambda z, mk: -_masked_mean(H(z), mk)),
        m("the padded positions entered the mean: average over the tokens where mask is True",
          lambda z, mk: H(z).mean()),
        m("the sum of the masked entropies divided by every position (padding counted in the "
          "count): divide by mask.sum()", lambda z, mk: (H(z) * mk).sum() / mk.size),
        m("that is the mean of each sequence's mean entropy; the drill is the token mean over "
          "all masked tokens (TRL's entropy metric)",
          lambda z, mk: ((H(z) * mk).sum(1) / mk.sum(1)).mean()),
        m("that is the sum over the masked tokens; the drill is their mean",
          lambda z, mk: (H(z) * mk).sum()),
        m("that is in bits (log2); the drill is in nats (natural log)",
          lambda z, mk: _masked_mean(H(z), mk) / np.log(2)),
        m("that is -mean_v log p_v, the cross-entropy from the uniform distribution; the "
          "entropy weights each log p_v by p_v",
          lambda z, mk: _masked_mean(-_log_softmax(z).mean(-1), mk)),
        m("that is the entropy of the tokens' average distribution, which is larger than the "
          "average of their entropies: take each token's entropy, then the mean",
          lambda z, mk: (lambda p: -(p * np.log(p)).sum())(
              (np.exp(_log_softmax(z)) * mk[..., None]).sum((0, 1)) / mk.sum())),
        m("the masked sum was divided by the number of rows (sequences), mask.shape[0]: the "
          "token mean divides by the number of masked tokens, mask.sum()",
          lambda z, mk: (H(z) * mk).sum() / mk.shape[0]),
        m("that softmax normalises over the positions (dim 1): each token's distribution is "
          "over the vocabulary, the last axis (softmax(logits, dim=-1))",
          lambda z, mk: _masked_mean(_plogp_sum(z - np.logaddexp.reduce(z, axis=1,
                                                                          keepdims=True)), mk)),
    ]


def _eps_in_the_log(case, answer, formula, what: str):
    """The eps a reader put inside a log "against log(0)", named when the answer is that
    formula with one of the usual eps (:data:`_EPS`) at the precision graded, on this case, and
    the case tells it apart from the right value. Not a :class:`Mistake`: its offset (about
    ``eps`` per term) is below float32's rounding, so as a mistake it would stand "closer"
    than a float32 evaluation of the formula and refute that diagnosis wrongly."""
    tol = tolerance(case, grade_dtype(answer))
    if close(answer.values, case.expected, tol).all():
        return None
    for eps in _EPS:
        with np.errstate(all="ignore"):
            wrong = np.broadcast_to(formula(case, eps), case.expected.shape)
        if close(answer.values, wrong, tol).all() and not close(wrong, case.expected, tol).all():
            i = tuple(int(j) for j in np.argwhere(~close(answer.values, case.expected, tol))[0])
            return (f"on {case.where} {'the value' if i == () else f'entry {list(i)}'} is "
                    f"{full(answer.values[i], answer.dtype)}, expected {full(case.expected[i])}: "
                    + what.format(eps=f"{eps:g}"))
    return None


#: The eps a reader adds inside a log "against log(0)".
_EPS = (1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-12)

_ENT_EPS = ("that is -sum p log(p + {eps}): an eps inside the log moves every term (by about "
            "{eps} for each vocabulary entry), so it is not the entropy; for 0 log 0 = 0 take "
            "torch.xlogy(p, p), or torch.where(p > 0, p * logp, 0), which change nothing else")


def _ent_with_eps(case, eps):
    p = np.exp(_log_softmax(case.inputs["logits"]))
    return _masked_mean(-(p * np.log(p + eps)).sum(-1), case.inputs["mask"])


def _plogp_sum(lp):
    """-sum p log p over the last axis from log-probs ``lp``, 0 log 0 = 0 (NaN stays NaN)."""
    with np.errstate(invalid="ignore"):
        return -np.where(lp == -np.inf, 0.0, np.exp(lp) * lp).sum(-1)


def _ent_axis_note(problem, case) -> str:
    """A size mismatch between the vocabulary (V) and the positions (T): a per-token quantity
    reduced over the positions instead of the vocabulary."""
    N, T, V = case.args[0].shape
    sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)",
                      problem)
    if sizes is None or T == V or {int(sizes[1]), int(sizes[2])} != {T, V}:
        return ""
    return (f" (its sizes are V = {V}, the vocabulary, and T = {T}, the positions: a (N, V) "
            "tensor met the (N, T) mask, so this is a sum over the wrong axis. Each token's "
            "entropy sums over the vocabulary, the last axis: .sum(-1), giving (N, T))")


def _narrower(case, answer, name: str, arg: str = "logits"):
    """A float32 answer where the statement asks for the dtype of ``case.args[0]`` (float64)."""
    given = str(case.args[0].dtype).removeprefix("torch.")
    if answer.dtype != "float32" or given != "float64":
        return None
    return (f"on {case.where} your function returned float32 for float64 {name}: the drill "
            f"asks for the {name}' dtype (float64 here), and float32 keeps about 7 of its 16 "
            "digits. A buffer made without dtype= (torch.zeros(shape), torch.tensor(...)) is "
            f"float32, torch's default: make it with dtype={arg}.dtype, or "
            "with new_zeros, and keep every step in that dtype")


#: grading's advice to a float64 answer off by a float32 rounding, which these drills cannot
#: take where the inputs are float64: the statement fixes the output's dtype to theirs.
KEEP_FLOAT32 = (", or return the float32 result as float32, which is graded at float32's "
                "precision")


def _in_the_inputs_dtype(say, cases, name: str):
    """``say``, its advice to return a float32 result as float32 dropped on the cases whose
    inputs are float64 (the drill asks for the {name}' dtype, and :func:`_narrower` refuses
    float32 there)."""
    wide = [c.where for c in cases if str(c.args[0].dtype) == "torch.float64"]

    def said(ok, message):
        if KEEP_FLOAT32 in message and any(message.startswith(f"on {w} ") for w in wide):
            message = message.replace(KEEP_FLOAT32, f": the drill asks for the {name}' dtype, "
                                                    "float64 here")
        return say(ok, message)
    return said


def _a_float_in_the_logits_dtype(fn):
    """The reader's function, its Python float result (the statement allows "a float") read in
    the logits' dtype: a float from float32 logits holds float32's digits."""
    def answer(logits, mask):
        out = fn(logits, mask)
        if type(out) is float:                                      # .item(), float(...)
            return np.asarray(out, dtype=str(logits.dtype).removeprefix("torch."))
        return out
    return answer


def _ent_finite(case, answer):
    """A non-finite entropy, and what this case's logits show of where it came from: 0 * -inf
    only where some probability is below the dtype's smallest normal; an overflowing exp only
    where a logit is beyond exp's range; else neither is named."""
    if np.isfinite(answer.values).all():
        return None
    dtype = _narrowest(case, answer)
    info, name = np.finfo(dtype), np.dtype(dtype).name
    z, mask = case.inputs["logits"], case.inputs["mask"]
    text = f"on {case.where} the entropy is {answer.values.item()}"
    masked = np.isneginf(z)
    if masked.any() and np.isnan(answer.values).all():
        return text + (": these logits hold -inf (vocabulary entries masked out), where "
                       "p = 0 exactly and log p = -inf, so p * log p "
                       "(or the p * z of logsumexp(z) - sum p z) is 0 * -inf = NaN at a masked "
                       "logit, and the NaN "
                       "reaches the mean. Take 0 log 0 = 0: H = -torch.xlogy(p, p).sum(-1) "
                       "with p = softmax(logits), or torch.where(p > 0, p * logp, 0)")
    low = float(np.where(masked, 0.0, _log_softmax(z))[mask].min())
    top = float(np.where(masked, 0.0, np.abs(z))[mask].max())
    causes = []
    if low < np.log(info.tiny):
        causes.append(f"some probabilities here are exp({low:.0f}), below the smallest normal "
                      f"{name}, so such a p underflows to 0 and p * log(p) is then 0 * -inf = NaN")
    if top > np.log(info.max):
        causes.append(f"these logits reach {top:.0f}, beyond {np.log(info.max):.1f}, the log "
                      f"of the largest {name}, where exp of an unshifted logit overflows to inf "
                      "(and inf / inf is NaN)")
    if not causes:
        return text + (f": no probability underflows and no exp overflows in {name} on these "
                       "logits, so look for a log of 0 or a 0 / 0 in the formula")
    said = causes[0] if len(causes) == 1 else (
        "two things give NaN on these logits: " + "; or ".join(causes))
    return text + ": " + said + (". Compute p = softmax(z) (shifted by the max), then "
                                 "-torch.xlogy(p, p).sum(-1), where 0 log 0 = 0")


def check_masked_entropy(fn, *, verbose=True) -> bool:
    """Check ``fn(logits, mask) -> H``: the mean entropy, in nats, of softmax(logits) over the
    tokens where mask is True. ``logits`` (N, T, V), ``mask`` (N, T) bool; one number. The
    logits may hold -inf (a vocabulary entry masked out; every position keeps at least one
    finite logit), whose p log p counts as 0 (0 log 0 = 0).
    """
    say = verdict(verbose, fn)
    cases = list(_ent_cases())
    return check_cases(_a_float_in_the_logits_dtype(fn), cases,
                       _in_the_inputs_dtype(say, cases, "logits"),
                       mistakes=_ent_mistakes(), broadcast_hint=_ent_axis_note,
                       extra=lambda c, a: (_ent_finite(c, a) or _narrower(c, a, "logits")
                                           or _eps_in_the_log(c, a, _ent_with_eps, _ENT_EPS)),
                       dtype=None, returns="the mean entropy (one number)",
                       shape_hint="; the drill asks for one number, the mean over the masked "
                                  "tokens",
                       signature="my_entropy(logits, mask)",
                       passed="token entropies with 0 log 0 = 0, averaged over the masked "
                              "tokens: worked example, ragged float32, N == T, peaked logits, "
                              "logits near 1000 and -inf logits (masked vocabulary entries) "
                              "are all right")


# --- 3. gradient accumulation with a global normaliser -------------------------------------------

def _tiny_model(seed, V):
    """A two-parameter-tensor model in float64: embed each token, read one number per token."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Embedding(V, 3), torch.nn.Linear(3, 1)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return model


class _LossFn:
    """``loss_fn(model, input_ids) -> (n, T)`` per-token loss (garbage on padding too), which
    records every call's rows and whether a backward ran since the previous call."""

    def __init__(self, hook_param):
        self.calls, self.backwards = [], 0
        hook_param.register_hook(self._count)

    def _count(self, grad):
        self.backwards += 1
        return grad

    def __call__(self, model, input_ids):
        self.calls.append((int(input_ids.shape[0]), self.backwards))
        out = model(input_ids).squeeze(-1)                                 # (n, T)
        return (out - 0.5) ** 2 + 0.1 * out                                # a per-token loss


def _per_token(model, ids):
    torch = _torch()
    with torch.no_grad():
        out = model(torch.from_numpy(ids)).squeeze(-1)
        return ((out - 0.5) ** 2 + 0.1 * out).numpy()


def _accum_rows():
    return [("the worked example: 4 sequences in micro-batches of 2", 0, [3, 1, 4, 2], 5, 2),
            ("6 sequences in micro-batches of 4 (the last one holds 2)", 1, [5, 1, 2, 6, 3, 1],
             6, 4),
            ("5 sequences in micro-batches of 2, very unequal lengths", 2, [1, 1, 7, 7, 2], 7, 2),
            ("micro-batches of 1", 3, [2, 4, 3], 4, 1),
            ("one micro-batch holding the whole batch", 4, [3, 2], 3, 8)]


def _accum_cases():
    torch = _torch()
    for where, seed, lengths, T, m in _accum_rows():
        rng = np.random.default_rng(seed)
        V, N = 9, len(lengths)
        mask = np.arange(T) < np.array(lengths)[:, None]                   # (N, T) bool
        ids = np.where(mask, rng.integers(1, V, size=(N, T)), 0)           # pad id 0
        model = _tiny_model(seed, V)
        loss_fn = _LossFn(model[1].weight)
        per_token = _per_token(model, ids)                                 # (N, T)
        expected = _masked_mean(per_token, mask)
        weights = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
        yield Case(where, (model, torch.from_numpy(ids), torch.from_numpy(mask), m, loss_fn),
                   expected, inputs={"per_token": per_token, "mask": mask, "m": m,
                                     "seed": seed, "ids": ids, "loss_fn": loss_fn,
                                     "weights": weights},
                   scale=_masked_mean(np.abs(per_token), mask),
                   show=lambda i, mask=mask, m=m: (f"lengths {mask.sum(1).tolist()}, "
                                                   f"micro_batch_size = {m}"))


def _full_batch_grad(case, rows=None):
    """The gradient of the full batch's token-mean loss (or of the rows ``rows`` only, still
    over the whole batch's token count), flattened over the parameters."""
    torch = _torch()
    ids, mask = case.inputs["ids"], case.inputs["mask"]
    model = _tiny_model(case.inputs["seed"], 9)
    rows = slice(None) if rows is None else rows
    with torch.enable_grad():
        out = model(torch.from_numpy(ids[rows])).squeeze(-1)
        per_token = (out - 0.5) ** 2 + 0.1 * out
        loss = (per_token * torch.from_numpy(mask[rows])).sum() / int(mask.sum())
        loss.backward()
    return np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])


def _accum_mistakes():
    def micro(case):
        L, mk, m = case.inputs["per_token"], case.inputs["mask"], case.inputs["m"]
        return [(L[i:i + m], mk[i:i + m]) for i in range(0, len(L), m)]

    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["per_token"], c.inputs["mask"], micro(c)))

    total = lambda mk: mk.sum()                                          # noqa: E731
    return [
        m("each micro-batch's token mean, summed: every micro-batch weighs the same whatever "
          "its token count, and the sum is K times too large. Divide each micro-batch's token "
          "sum by the whole batch's token count",
          lambda L, mk, mb: sum(_masked_mean(x, k) for x, k in mb)),
        m("each micro-batch's token mean divided by the number of micro-batches (CS336's "
          "scaling): right only when every micro-batch holds the same number of tokens. "
          "Divide each micro-batch's token sum by the whole batch's token count",
          lambda L, mk, mb: sum(_masked_mean(x, k) for x, k in mb) / len(mb)),
        m("the global token count, then divided again by the number of micro-batches: scale "
          "once, by the whole batch's token count",
          lambda L, mk, mb: None if len(mb) == 1 else _masked_mean(L, mk) / len(mb)),
        m("the loss was multiplied by the number of micro-batches: backward adds the "
          "micro-batches' gradients, it does not average them",
          lambda L, mk, mb: None if len(mb) == 1 else _masked_mean(L, mk) * len(mb)),
        m("the padded tokens entered the loss: multiply each micro-batch's per-token loss "
          "by its mask before summing", lambda L, mk, mb: L.sum() / total(mk)),
        m("divided by every position (N * T, padding counted); the token mean divides by "
          "the number of real tokens, mask.sum()", lambda L, mk, mb: (L * mk).sum() / mk.size),
        m("divided by the number of rows (sequences), not of tokens: the token mean divides "
          "each micro-batch's token sum by the whole batch's token count, mask.sum()",
          lambda L, mk, mb: (L * mk).sum() / len(L)),
        m("each micro-batch's token sum divided by its number of rows (sequences), not of "
          "tokens: divide by the whole batch's token count, mask.sum()",
          lambda L, mk, mb: sum((x * k).sum() / len(x) for x, k in mb)),
        m("that is the mean of each sequence's token mean (grpo); the drill is the token "
          "mean over the whole batch", lambda L, mk, mb: ((L * mk).sum(1) / mk.sum(1)).mean()),
        m("the last, partial micro-batch was dropped: range(0, N, micro_batch_size) keeps it",
          lambda L, mk, mb: None if len(L) % len(mb[0][0]) == 0 else
          sum((x * k).sum() for x, k in mb[:-1]) / total(mk)),
        m("that is the last micro-batch's loss only: add the micro-batches' losses (each "
          "scaled by the whole batch's token count) and return the total",
          lambda L, mk, mb: None if len(mb) == 1 else (mb[-1][0] * mb[-1][1]).sum() / total(mk)),
    ]


def _accum_gradient(case, answer):
    """No step taken (the weights as they were); then, the value right, the gradient in the
    parameters and how it was taken."""
    model = answer.given[0]
    now = np.concatenate([p.detach().double().numpy().ravel() for p in model.parameters()])
    moved = np.flatnonzero(now != case.inputs["weights"])
    if moved.size:
        j = int(moved[0])
        return (f"on {case.where} the weights changed during the call (parameter entry {j} "
                f"went from {full(case.inputs['weights'][j])} to {full(now[j])}): an optimizer "
                "step (or an in-place update of the parameters) ran inside. The drill takes no "
                "step: it leaves the gradient in .grad, and the trainer steps once, after the "
                "last micro-batch")
    tol = 16 * 2.0**-53 * case.scale + 2e-8 * abs(float(case.expected))
    if not close(answer.values, case.expected, tol).all():
        return None                                          # a wrong value is said first
    m, loss_fn = case.inputs["m"], case.inputs["loss_fn"]
    big = [rows for rows, _ in loss_fn.calls if rows > m]
    if big:
        return (f"on {case.where} the value is right, but loss_fn ran on {big[0]} rows at "
                f"once with micro_batch_size = {m}: the point is to hold at most "
                f"micro_batch_size rows' activations; slice the batch")
    grads = [p.grad for p in model.parameters()]
    if any(g is None for g in grads):
        return (f"on {case.where} the value is right, but the parameters have no gradient: "
                "call backward() on each micro-batch's loss (leave the gradient in .grad)")
    held = [i for i, (_, seen) in enumerate(loss_fn.calls[1:], 1)
            if seen == loss_fn.calls[i - 1][1]]
    if held:
        return (f"on {case.where} the value is right, but micro-batch {held[0]} ran its "
                "forward before the previous one's backward: every graph was held until one "
                "backward at the end, as much memory as the whole batch. Call backward on "
                "each micro-batch's (scaled) loss before the next forward")
    got = np.concatenate([g.detach().double().numpy().ravel() for g in grads])
    want = _full_batch_grad(case)
    grad_tol = 64 * 2.0**-53 * np.abs(want).max() + 2e-8 * np.abs(want)
    if close(got, want, grad_tol).all():
        return None
    N = case.inputs["mask"].shape[0]
    last = slice((N - 1) // m * m, N)
    if close(got, _full_batch_grad(case, last), grad_tol).all():
        return (f"on {case.where} the value is right, but the gradient is the last "
                "micro-batch's only: zero_grad() ran inside the loop. Zero once, before it")
    j = int(np.argwhere(~close(got, want, grad_tol))[0, 0])
    return (f"on {case.where} the value is right but the gradient is not (parameter entry "
            f"{j} is {full(got[j])}, expected {full(want[j])}): each micro-batch's backward "
            "must run on exactly the loss it adds to the total, once")


_WARM = []               # one entry once torch's optimizers have been built in this process


def _warm_up_optimizers() -> None:
    """Build one torch optimizer before the reader's function is timed: the first one a
    process builds imports torch's compiler machinery (seconds on a loaded machine), which an
    answer that steps an optimizer (a mistake this checker names) must not be charged for."""
    torch = _torch()
    if not _WARM:
        _WARM.append(True)
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def check_accumulated_gradient(fn, *, verbose=True) -> bool:
    """Check ``fn(model, input_ids, mask, micro_batch_size, loss_fn) -> loss``.

    ``loss_fn(model, ids)`` gives the per-token loss (n, T) of rows ``ids`` (padding holds
    garbage). The step: for each micro-batch of at most ``micro_batch_size`` rows, its
    per-token loss times its mask, summed, divided by the *whole batch's* token count
    ``mask.sum()``, then ``backward()``; return the total (the whole batch's token-mean loss,
    a number). The gradient left in the parameters' ``.grad`` must equal the full batch's,
    and the weights stay as they were (no optimizer step).
    """
    say = verdict(verbose, fn)
    _warm_up_optimizers()
    return check_cases(fn, list(_accum_cases()), say, mistakes=_accum_mistakes(),
                       extra=_accum_gradient, fixed="float64", slack=2e-8, dtype=None,
                       returns="the whole batch's loss (one number)",
                       shape_hint="; return the whole batch's loss, one number",
                       signature="my_accumulate(model, input_ids, mask, micro_batch_size, "
                                 "loss_fn)",
                       passed="one backward per micro-batch, each scaled by the whole "
                              "batch's token count: the loss and the gradient equal the full "
                              "batch's on 5 batches (a partial last micro-batch, unequal "
                              "lengths, micro-batches of 1 and of the whole batch)")


# --- 4. a sequence-level importance-sampling weight -----------------------------------------------

def _is_weight(old, sampler, mask, cap):
    s = np.where(mask, old - sampler, 0.0).sum(-1)                        # (N,) log-ratio sums
    return np.where(s >= np.log(cap), cap, np.exp(np.minimum(s, np.log(cap))))


def _is_cases():
    torch = _torch()
    rows = [("the worked example", 0, [3, 2, 1], 0.3, 3.0),
            ("a ragged batch, cap = 2", 1, [5, 1, 3, 4], 0.4, 2.0),
            ("a 4 x 4 batch (N == T)", 2, [4, 2, 3, 1], 0.5, 3.0),
            ("near-identical samplers (ratios within 1e-6 of 1)", 3, [6, 6, 2], 1e-7, 3.0),
            ("long sequences whose log-ratios add to hundreds", 4, [300, 250], 2.0, 5.0),
            ("cap = 1.5, ratios on both sides of 1", 5, [4, 4, 4, 4, 4], 0.6, 1.5)]
    for where, seed, lengths, spread, cap in rows:
        rng = np.random.default_rng(seed)
        N, T = len(lengths), max(lengths)
        mask = np.arange(T) < np.array(lengths)[:, None]                   # (N, T) bool
        sampler = np.log(rng.uniform(0.05, 0.95, size=(N, T)))
        old = sampler + spread * rng.normal(size=(N, T))
        if where.startswith("long"):
            old[0] = sampler[0] + np.abs(old[0] - sampler[0])              # sum far above 0
        old, sampler = np.where(mask, old, -1.0), np.where(mask, sampler, -4.0)   # padding
        s = np.where(mask, old - sampler, 0.0).sum(-1)
        yield Case(where, tuple(torch.from_numpy(x) for x in (old, sampler, mask)) + (cap,),
                   _is_weight(old, sampler, mask, cap),
                   inputs={"old": old, "sampler": sampler, "mask": mask, "cap": cap},
                   scale=np.minimum(np.exp(np.minimum(s, np.log(cap))), cap) * (
                       1 + np.where(mask, np.abs(old) + np.abs(sampler), 0).sum(-1)),
                   show=lambda i, s=s, cap=cap, mask=mask: (
                       f"sum of the log-ratios = {full(s[i])}, cap = {cap}, length "
                       f"{int(mask[i].sum())}"))


def _is_mistakes():
    def m(hint, f):
        return Mistake(hint, lambda c: f(c.inputs["old"], c.inputs["sampler"], c.inputs["mask"],
                                         c.inputs["cap"]))

    def ratio(old, sampler, mask):
        return np.exp(np.where(mask, old - sampler, 0.0).sum(-1))

    return [
        m("no cap: the weight is min(ratio, cap), so that one unlikely sequence cannot "
          "dominate the batch", lambda o, s, mk, c: ratio(o, s, mk)),
        m("that is the product of the per-token truncated ratios (token-level TIS); the drill "
          "truncates the sequence's ratio once",
          lambda o, s, mk, c: (lambda v: None if np.abs(v).max() > 1e12 else v)(
              np.where(mk, np.minimum(np.exp(o - s), c), 1.0).prod(-1))),   # else incomparable
        m("that is the mean of the per-token truncated ratios (a token-level weight); the "
          "sequence's ratio is exp of the sum of its tokens' log-ratios",
          lambda o, s, mk, c: (np.where(mk, np.minimum(np.exp(o - s), c), 0).sum(-1)
                               / mk.sum(-1))),
        m("the ratio is upside down: the weight is pi_old / pi_sampler, exp(sum(old_logp - "
          "sampler_logp))", lambda o, s, mk, c: _is_weight(s, o, mk, c)),
        m("the padded tokens entered the sum: multiply the log-ratios by the mask first",
          lambda o, s, mk, c: _is_weight(o, s, np.ones_like(mk), c)),
        m("that is the geometric mean of the token ratios, exp(mean of the log-ratios) "
          "(GSPO's length-normalised ratio); the IS weight is exp of their sum",
          lambda o, s, mk, c: np.minimum(np.exp(np.where(mk, o - s, 0).sum(-1) / mk.sum(-1)),
                                         c)),
        m("weights above the cap were set to 0: that is TRL's sequence_mask mode; the drill "
          "truncates (sequence_truncate): min(ratio, cap)",
          lambda o, s, mk, c: np.where(ratio(o, s, mk) > c, 0.0, ratio(o, s, mk))),
        m("a lower bound was applied too: the drill caps from above only (ratios below 1 "
          "stay)", lambda o, s, mk, c: np.clip(ratio(o, s, mk), 1 / c, c)),
        m("the cap was applied to the log-ratio: min(sum, cap) in log space is exp(cap); cap "
          "at log(cap), or cap the ratio", lambda o, s, mk, c: np.exp(np.minimum(
              np.where(mk, o - s, 0).sum(-1), c))),
        m("right with cap = 3 only: use the cap passed",
          lambda o, s, mk, c: None if c == 3.0 else _is_weight(o, s, mk, 3.0)),
        m("the log-ratios were summed over axis 0 (across sequences); each row is a sequence",
          lambda o, s, mk, c: None if mk.shape[0] != mk.shape[1] else
          np.minimum(np.exp(np.where(mk, o - s, 0).sum(0)), c)),
    ]


def _is_finite(case, answer):
    """A non-finite weight, and what its sequence shows: exp of the summed log-ratio
    overflowing only where that sum is beyond exp's range; else neither is named."""
    bad = ~np.isfinite(answer.values)
    if not bad.any():
        return None
    n = int(np.argwhere(bad.reshape(-1))[0][0])
    value = answer.values.reshape(-1)[n]
    mask = case.inputs["mask"]
    d = np.where(mask, case.inputs["old"] - case.inputs["sampler"], 0.0)
    total, top = float(d[n].sum()), float(np.abs(d[n]).max())
    name = "float32" if answer.dtype == "float32" else "float64"
    limit = float(np.log(np.finfo(name).max))
    text = (f"on {case.where} the weight of sequence {n} is {value}, for a sum of its "
            f"log-ratios of {total:.6g}")
    if abs(total) > limit:
        return text + (f", beyond {limit:.1f}, the log of the largest {name}: exp of that sum "
                       "overflows" + (", and inf - inf or 0 * inf is NaN" if np.isnan(value)
                                      else "") + ". Cap the log-ratio at log(cap) before exp")
    if top > limit:
        return text + (f", but one token's log-ratio reaches {top:.0f}, beyond {limit:.1f}: a "
                       "product of per-token ratios overflows where their sum does not. Sum "
                       "the log-ratios, then cap the sum at log(cap) before exp")
    return text + (f": exp of that sum is finite in {name}, so look for a 0 / 0, an inf - inf "
                   "or a log of 0 in the formula")


def _float32_log_cap(case, answer):
    """The cap's log taken in float32 (``torch.tensor(cap).log()``): the capped weights come
    back ``exp(float32(log cap))``, a float32 rounding off ``cap``. Named when the answer is
    exactly that at the precision graded and the case tells it apart."""
    cap = case.inputs["cap"]
    log32 = float(np.float32(np.log(cap)))
    tol = tolerance(case, grade_dtype(answer))
    if log32 == np.log(cap) or close(answer.values, case.expected, tol).all():
        return None
    s = np.where(case.inputs["mask"], case.inputs["old"] - case.inputs["sampler"], 0.0).sum(-1)
    wrong = np.exp(np.minimum(s, log32))                                   # (N,)
    if not close(answer.values, wrong, tol).all():
        return None
    n = int(np.flatnonzero(~close(answer.values, case.expected, tol))[0])
    return (f"on {case.where} the weight of sequence {n} is {full(answer.values[n])}, expected "
            f"{full(case.expected[n])} (the cap): it was capped at exp({log32!r}), log(cap) "
            f"rounded to float32, not at log(cap) = {float(np.log(cap))!r}. "
            "torch.tensor(cap) is float32 (torch's default dtype), and so is its log: clamp "
            "the log-ratio at math.log(cap), or clamp the ratio at cap itself")


def check_sequence_is_weight(fn, *, verbose=True) -> bool:
    """Check ``fn(old_logp, sampler_logp, mask, cap) -> (N,)``: each sequence's truncated
    importance weight ``min(exp(sum_t mask * (old_logp - sampler_logp)), cap)`` (TRL's
    ``sequence_truncate`` with no lower bound). Tensors (N, T) float64, mask bool; the
    weights come back in the log-probs' dtype.
    """
    say = verdict(verbose, fn)
    cases = list(_is_cases())
    return check_cases(fn, cases, _in_the_inputs_dtype(say, cases, "log-probs"),
                       mistakes=_is_mistakes(),
                       extra=lambda c, a: (_is_finite(c, a) or _float32_log_cap(c, a)
                                           or _narrower(c, a, "log-probs", "old_logp")),
                       dtype=None, returns="the (N,) weights",
                       shape_hint="; one weight per sequence, shape (N,)",
                       signature="my_is_weight(old_logp, sampler_logp, mask, cap)",
                       passed="one truncated ratio per sequence, padding out, the cap passed "
                              "in: worked example, N == T, ratios near 1, log-ratios adding "
                              "to hundreds, ratios on both sides of 1")
