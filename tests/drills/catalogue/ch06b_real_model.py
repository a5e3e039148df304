"""Chapter 6b: a real model's step. Log-probs with the shift and the completion mask, the
entropy from logits, a gradient-accumulation step, a sequence-level IS weight.

Written with tensor methods, torch imported inside the functions, so that this module imports
without torch; the checkers hand over torch tensors.
"""

from __future__ import annotations

import math

from .entry import Drill, Wrong, endless_loop


# --- 1. log-probs with the shift and the mask ---------------------------------------------------

def _mask(input_ids, prompt_len, eos_id):
    """The completion's tokens up to and including the first EOS, as (N, L) bool."""
    comp = input_ids[:, prompt_len:] == eos_id                            # (N, C)
    before = comp.long().cumsum(1) - comp.long()                          # EOS strictly before
    mask = input_ids.new_zeros(input_ids.shape, dtype=comp.dtype)
    mask[:, prompt_len:] = before == 0
    return mask


def _lp_right(logits, input_ids, prompt_len, eos_id):
    logp = logits[:, :-1].log_softmax(-1)                                 # (N, L-1, V)
    tok = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)             # (N, L-1)
    out = tok.new_zeros(input_ids.shape)
    out[:, 1:] = tok
    return out * _mask(input_ids, prompt_len, eos_id)


def _lp_logsumexp(logits, input_ids, prompt_len, eos_id):
    """z[token] - logsumexp(z), the positions lined up by padding the front with zeros."""
    import torch
    z = logits[:, :-1]
    tok = z.gather(-1, input_ids[:, 1:, None]).squeeze(-1) - z.logsumexp(-1)
    tok = torch.cat([tok.new_zeros(tok.shape[0], 1), tok], dim=1)        # (N, L)
    return tok.where(_mask(input_ids, prompt_len, eos_id), 0.0)


def _lp_loop(logits, input_ids, prompt_len, eos_id):
    """One row, one position at a time, stopping after the first EOS."""
    out = logits.new_zeros(input_ids.shape)
    for n in range(input_ids.shape[0]):
        for t in range(prompt_len, input_ids.shape[1]):
            out[n, t] = logits[n, t - 1].log_softmax(-1)[input_ids[n, t]]
            if int(input_ids[n, t]) == eos_id:
                break
    return out


def _lp_float64(logits, input_ids, prompt_len, eos_id):
    """In float64 throughout, the mask from argmax of the EOS position."""
    import torch
    logp = logits.double().log_softmax(-1)
    out = torch.zeros(input_ids.shape, dtype=torch.float64)
    out[:, 1:] = logp[:, :-1].gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    comp = input_ids[:, prompt_len:] == eos_id
    C = comp.shape[1]
    first = torch.where(comp.any(1), comp.int().argmax(1), torch.full_like(comp[:, 0], C,
                                                                              dtype=torch.long))
    keep = torch.arange(C)[None, :] <= first[:, None]                     # (N, C)
    out[:, :prompt_len] = 0.0
    out[:, prompt_len:] *= keep
    return out


def _lp_package_style(logits, input_ids, prompt_len, eos_id):
    """TRL's selective_log_softmax idea: gather the logit, subtract the row's logsumexp, one
    row at a time (no (N, L, V) log-softmax held)."""
    rows = []
    for z, ids in zip(logits[:, :-1], input_ids[:, 1:]):
        rows.append(z.gather(-1, ids[:, None]).squeeze(-1) - z.logsumexp(-1))
    import torch
    tok = torch.stack(rows)
    return torch.nn.functional.pad(tok, (1, 0)) * _mask(input_ids, prompt_len, eos_id)


def _lp_no_shift(logits, input_ids, prompt_len, eos_id):
    tok = logits.log_softmax(-1).gather(-1, input_ids[..., None]).squeeze(-1)   # no shift
    return tok * _mask(input_ids, prompt_len, eos_id)


def _lp_rolled(logits, input_ids, prompt_len, eos_id):
    import torch
    shifted = torch.roll(logits, -1, dims=1)                      # "shift by one", wrong way
    tok = shifted.log_softmax(-1).gather(-1, input_ids[..., None]).squeeze(-1)
    return tok * _mask(input_ids, prompt_len, eos_id)


def _lp_ahead_sliced(logits, input_ids, prompt_len, eos_id):
    """logits[:, 1:] against input_ids[:, :-1]: the shift the wrong way, by slicing."""
    out = logits.new_zeros(input_ids.shape)
    out[:, :-1] = logits[:, 1:].log_softmax(-1).gather(-1, input_ids[:, :-1, None]).squeeze(-1)
    return out * _mask(input_ids, prompt_len, eos_id)


def _lp_ahead_padded(logits, input_ids, prompt_len, eos_id):
    """The same wrong slices, the front padded with a 0 as the right answer does."""
    import torch
    tok = logits[:, 1:].log_softmax(-1).gather(-1, input_ids[:, :-1, None]).squeeze(-1)
    return torch.nn.functional.pad(tok, (1, 0)) * _mask(input_ids, prompt_len, eos_id)


def _lp_float32_buffer(logits, input_ids, prompt_len, eos_id):
    """torch.zeros without dtype=: a float32 buffer, whatever the logits' dtype."""
    import torch
    out = torch.zeros(input_ids.shape)                                    # float32
    out[:, 1:] = logits[:, :-1].log_softmax(-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return out * _mask(input_ids, prompt_len, eos_id)


def _lp_eps(logits, input_ids, prompt_len, eos_id):
    p = logits[:, :-1].softmax(-1)
    out = logits.new_zeros(input_ids.shape)
    out[:, 1:] = (p + 1e-10).log().gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return out * _mask(input_ids, prompt_len, eos_id)


def _lp_over_positions(logits, input_ids, prompt_len, eos_id):
    out = logits.new_zeros(input_ids.shape)
    out[:, 1:] = logits[:, :-1].log_softmax(1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return out * _mask(input_ids, prompt_len, eos_id)


def _eos_counted_over_the_row(input_ids, prompt_len, eos_id):
    """cumsum over the whole row: with pad == eos the left padding counts as an EOS."""
    e = (input_ids == eos_id).long()
    mask = (e.cumsum(1) - e) == 0
    mask[:, :prompt_len] = False
    return mask


def _lp_with_mask(make_mask):
    def fn(logits, input_ids, prompt_len, eos_id):
        out = logits.new_zeros(input_ids.shape)
        out[:, 1:] = logits[:, :-1].log_softmax(-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
        return out * make_mask(input_ids, prompt_len, eos_id)
    return fn


def _prompt_too(input_ids, prompt_len, eos_id):
    mask = _mask(input_ids, prompt_len, eos_id)
    mask[:, :prompt_len] = True                                          # the attention mask's way
    return mask


def _all_completion(input_ids, prompt_len, eos_id):
    mask = input_ids.new_zeros(input_ids.shape, dtype=bool)
    mask[:, prompt_len:] = True
    return mask


def _eos_dropped(input_ids, prompt_len, eos_id):
    comp = input_ids[:, prompt_len:] == eos_id
    mask = input_ids.new_zeros(input_ids.shape, dtype=bool)
    mask[:, prompt_len:] = comp.long().cumsum(1) == 0                    # inclusive cumsum
    return mask


def _not_eos(input_ids, prompt_len, eos_id):
    return _all_completion(input_ids, prompt_len, eos_id) & (input_ids != eos_id)


def _lp_log_softmax_of_probs(logits, input_ids, prompt_len, eos_id):
    logp = logits[:, :-1].softmax(-1).log()                              # underflows to -inf
    out = logp.new_zeros(input_ids.shape)
    out[:, 1:] = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return out.where(_mask(input_ids, prompt_len, eos_id), 0.0)


def _lp_naive_exp(logits, input_ids, prompt_len, eos_id):
    e = logits[:, :-1].exp()                                             # overflows near 1000
    p = e / e.sum(-1, keepdim=True)
    out = logits.new_zeros(input_ids.shape)
    out[:, 1:] = p.gather(-1, input_ids[:, 1:, None]).squeeze(-1).log()
    return out.where(_mask(input_ids, prompt_len, eos_id), 0.0)


def _lp_argmax(logits, input_ids, prompt_len, eos_id):
    out = logits.new_zeros(input_ids.shape)
    out[:, 1:] = logits[:, :-1].log_softmax(-1).max(-1).values          # the greedy token's
    return out * _mask(input_ids, prompt_len, eos_id)


def _lp_half(logits, input_ids, prompt_len, eos_id):
    return _lp_right(logits.half(), input_ids, prompt_len, eos_id)      # "saves memory"


def _lp_in_place(logits, input_ids, prompt_len, eos_id):
    logits -= logits.max(-1, keepdim=True).values                        # the caller's logits
    return _lp_right(logits, input_ids, prompt_len, eos_id)


def _lp_completion_only(logits, input_ids, prompt_len, eos_id):
    return _lp_right(logits, input_ids, prompt_len, eos_id)[:, prompt_len:]   # (N, C)


def _hangs(*args):
    while True:
        pass


def _lp_logaddexp_reversed(logits, input_ids, prompt_len, eos_id):
    """In NumPy, float64: np.logaddexp.reduce over the vocabulary, last token first (it
    rounds unlike a max shift, within the bound the checker allows at float64)."""
    import numpy as np
    z = logits.double().numpy()[:, :-1]                                   # (N, L-1, V)
    lse = np.logaddexp.reduce(z[..., ::-1], axis=-1)                      # (N, L-1)
    ids = input_ids.numpy()[:, 1:]
    tok = np.take_along_axis(z, ids[..., None], -1)[..., 0] - lse
    out = np.zeros(tuple(input_ids.shape))
    out[:, 1:] = tok
    return out * _mask(input_ids, prompt_len, eos_id).numpy()


_LOGPROBS = Drill("check_completion_logprobs", "6b", rights=(
    _lp_right, _lp_logsumexp, _lp_loop, _lp_float64, _lp_package_style,
    _lp_logaddexp_reversed), wrongs=(
    Wrong("no shift: logits[:, t] scored against token t", _lp_no_shift, "no shift"),
    Wrong("torch.roll(logits, -1): the shift the wrong way", _lp_rolled, "the wrong way"),
    Wrong("logits[:, 1:] against input_ids[:, :-1], into columns :-1", _lp_ahead_sliced,
          "the wrong way"),
    Wrong("logits[:, 1:] against input_ids[:, :-1], the front padded", _lp_ahead_padded,
          "the wrong way"),
    Wrong("log_softmax over the positions (dim 1)", _lp_over_positions, "over the positions"),
    Wrong("the EOS cumsum over the whole row (pad == eos: the padding counts)",
          _lp_with_mask(_eos_counted_over_the_row), "the EOS count ran over the whole row"),
    Wrong("log(softmax + 1e-10)", _lp_eps, "log(softmax + 1e-10)"),
    Wrong("a float32 buffer (torch.zeros without dtype=) for float64 logits",
          _lp_float32_buffer, "the logits' dtype"),
    Wrong("the prompt in the mask (attention-mask style)", _lp_with_mask(_prompt_too),
          "the prompt's tokens are in the mask"),
    Wrong("post-EOS tokens in the mask (every completion column)",
          _lp_with_mask(_all_completion), "the tokens after the first EOS are in the mask"),
    Wrong("the EOS left out (inclusive cumsum == 0)", _lp_with_mask(_eos_dropped),
          "the EOS itself is left out"),
    Wrong("mask = input_ids != eos_id", _lp_with_mask(_not_eos), "input_ids != eos_id"),
    Wrong("log(softmax(z)), which underflows to -inf", _lp_log_softmax_of_probs,
          "the log of a softmax that underflowed"),
    Wrong("exp(z) / sum exp(z) without the max shift, overflowing near 1000", _lp_naive_exp,
          "overflowed"),
    Wrong("the greedy token's log-prob, not the sampled one's", _lp_argmax,
          "the most likely token"),
    Wrong("computed in float16", _lp_half, "float16"),
    Wrong("float32 log-softmax returned as float64 (outside the float64 bound)",
          lambda z, ids, P, e: _lp_right(z.float(), ids, P, e).double(),
          "is within what float32 rounding gives here"),
    Wrong("logits -= max in place on the caller's logits", _lp_in_place, "modified its input"),
    Wrong("returns the completion columns only, (N, C)", _lp_completion_only,
          "one log-prob per position of input_ids"),
    endless_loop(_hangs),
))


# --- 2. the entropy from logits ------------------------------------------------------------------

def _ent_right(logits, mask):
    """The chapter's solution: p log p with 0 log 0 = 0 by torch.xlogy (a masked logit, -inf,
    has p = 0 and adds nothing)."""
    import torch
    p = logits.softmax(-1)                                                # (N, T, V)
    H = -torch.xlogy(p, p).sum(-1)                                        # (N, T)
    return (H * mask).sum() / mask.sum()


def _ent_logsumexp(logits, mask):
    """H = logsumexp(z) - sum_v p_v z_v, with a masked logit's -inf set to 0 first
    (its p is 0, so it adds nothing; left as -inf, p * z is 0 * -inf = NaN)."""
    p = logits.softmax(-1)
    H = logits.logsumexp(-1) - (p * logits.nan_to_num(neginf=0.0)).sum(-1)
    return H[mask].mean()


def _ent_float64(logits, mask):
    return _ent_right(logits.double(), mask.double())


def _ent_torch_distribution(logits, mask):
    import torch
    H = torch.distributions.Categorical(logits=logits).entropy()          # (N, T)
    return H.masked_select(mask).mean()


def _ent_loop(logits, mask):
    """One token at a time in float64, the masked-out entries skipped; a Python float."""
    total, count = 0.0, 0
    for n in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            if bool(mask[n, t]):
                logp = logits[n, t].double().log_softmax(-1)
                logp = logp[logp > -math.inf]                             # 0 log 0 = 0
                total += float(-(logp.exp() * logp).sum())
                count += 1
    return total / count


def _ent_where(logits, mask):
    """p log p with 0 log 0 taken as 0, by torch.where."""
    p = logits.softmax(-1)
    plogp = (p * logits.log_softmax(-1)).where(p > 0, 0.0)
    return -(plogp.sum(-1) * mask).sum() / mask.sum()


def _ent_item(logits, mask):
    """The statement allows a float: .item() of the logits' dtype's result."""
    return _ent_right(logits, mask).item()


def _ent_of(token_entropy, reduce):
    def fn(logits, mask):
        return reduce(token_entropy(logits), mask)
    return fn


def _H(logits):
    import torch
    p = logits.softmax(-1)
    return -torch.xlogy(p, p).sum(-1)


def _ent_log_softmax_exp(logits, mask):
    """The old solution, and TRL 1.16.0's entropy_from_logits on its torch path
    (trl/trainer/utils.py:638-639): -(exp(logp) * logp), NaN at a masked logit (0 * -inf)."""
    logp = logits.log_softmax(-1)
    H = -(logp.exp() * logp).sum(-1)                                      # (N, T)
    return (H * mask).sum() / mask.sum()


def _ent_trl_form(logits, mask):
    """logsumexp(z) - sum p z, with -inf left in z: 0 * -inf = NaN."""
    p = logits.softmax(-1)
    H = logits.logsumexp(-1) - (p * logits).sum(-1)
    return H[mask].mean()


def _ent_eps(eps):
    def fn(logits, mask):
        p = logits.softmax(-1)
        H = -(p * (p + eps).log()).sum(-1)                                # "guards" log(0)
        return (H * mask).sum() / mask.sum()
    return fn


def _ent_wrong_axis_sum(logits, mask):
    p = logits.softmax(-1)
    H = -(p * logits.log_softmax(-1)).nan_to_num().sum(1)                 # (N, V), over T
    return (H * mask).sum() / mask.sum()


def _ent_softmax_over_positions(logits, mask):
    import torch
    p = logits.softmax(1)                                                 # over T, not V
    H = -torch.xlogy(p, p).sum(-1)
    return (H * mask).sum() / mask.sum()


def _ent_naive(logits, mask):
    p = logits.softmax(-1)
    H = -(p * p.log()).sum(-1)                                             # 0 * -inf = NaN
    return (H * mask).sum() / mask.sum()


def _ent_naive_exp(logits, mask):
    e = logits.exp()                                                       # overflows near 1000
    p = e / e.sum(-1, keepdim=True)
    logp = logits - e.sum(-1, keepdim=True).log()
    return -((p * logp).sum(-1) * mask).sum() / mask.sum()


def _ent_of_mean(logits, mask):
    p = (logits.softmax(-1) * mask[..., None]).sum((0, 1)) / mask.sum()   # (V,)
    return -(p * p.log()).sum()


def _ent_in_place(logits, mask):
    logits.sub_(logits.max(-1, keepdim=True).values)
    return _ent_right(logits, mask)


def _ent_trl_logaddexp(logits, mask):
    """TRL's logsumexp(z) - sum p z in float64 NumPy, p from that same np.logaddexp.reduce, a
    masked logit's p z taken as 0: ~1.9e-11 off near logits of 1000, within the bound the
    checker allows at float64."""
    import numpy as np
    z, keep = logits.double().numpy(), mask.numpy().astype(bool)
    lse = np.logaddexp.reduce(z, axis=-1)                                 # (N, T)
    p = np.exp(z - lse[..., None])
    pz = np.where(p > 0, p * np.where(np.isfinite(z), z, 0.0), 0.0)
    return (lse - pz.sum(-1))[keep].mean()


_ENTROPY = Drill("check_masked_entropy", "6b", rights=(
    _ent_right, _ent_logsumexp, _ent_float64, _ent_torch_distribution, _ent_loop, _ent_where,
    _ent_trl_logaddexp, _ent_item),
    wrongs=(
    Wrong("the wrong sign (sum p log p)", _ent_of(lambda z: -_H(z),
                                                  lambda H, m: (H * m).sum() / m.sum()),
          "the sign is flipped"),
    Wrong("no mask (mean over every position)", _ent_of(_H, lambda H, m: H.mean()),
          "the padded positions entered the mean"),
    Wrong("masked sum over N * T", _ent_of(_H, lambda H, m: (H * m).sum() / m.numel()),
          "divide by mask.sum()"),
    Wrong("masked sum over the number of rows N",
          _ent_of(_H, lambda H, m: (H * m).sum() / m.shape[0]), "the number of rows"),
    Wrong("the mean of per-sequence means",
          _ent_of(_H, lambda H, m: ((H * m).sum(1) / m.sum(1)).mean()),
          "the mean of each sequence's mean entropy"),
    Wrong("the sum, not the mean", _ent_of(_H, lambda H, m: (H * m).sum()),
          "that is the sum over the masked tokens"),
    Wrong("in bits (log2)", _ent_of(lambda z: _H(z) / math.log(2),
                                    lambda H, m: (H * m).sum() / m.sum()), "in bits"),
    Wrong("-mean_v log p_v (the cross-entropy from uniform)",
          _ent_of(lambda z: -z.log_softmax(-1).mean(-1), lambda H, m: (H * m).sum() / m.sum()),
          "the cross-entropy from the uniform distribution"),
    Wrong("the entropy of the average distribution", _ent_of_mean,
          "the entropy of the tokens' average distribution"),
    Wrong("p * log(p) with p from softmax (0 * -inf = NaN)", _ent_naive, "0 * -inf = NaN"),
    Wrong("-(exp(logp) * logp), NaN at a masked logit (the old solution)",
          _ent_log_softmax_exp, "0 * -inf = NaN at a masked logit"),
    Wrong("logsumexp(z) - sum p z with -inf left in z", _ent_trl_form,
          "0 * -inf = NaN at a masked logit"),
    Wrong("p * log(p + 1e-10), an eps in the log", _ent_eps(1e-10), "log(p + 1e-10)"),
    Wrong("p * log(p + 1e-8), an eps in the log", _ent_eps(1e-8), "log(p + 1e-08)"),
    Wrong("the token entropy summed over the positions (dim 1), not the vocabulary",
          _ent_wrong_axis_sum, "a sum over the wrong axis"),
    Wrong("softmax over the positions (dim 1), not the vocabulary",
          _ent_softmax_over_positions, "over the positions"),
    Wrong("exp(z) without the max shift (overflows near 1000)", _ent_naive_exp,
          "exp of an unshifted logit overflows to inf"),
    Wrong("returns the per-token entropies (N, T)", lambda logits, mask: _H(logits) * mask,
          "the drill asks for one number"),
    Wrong("computed in float16", lambda logits, mask: _ent_right(logits.half(), mask.half()),
          "float16"),
    Wrong("float32 entropy returned as float64 (outside the float64 bound)",
          lambda logits, mask: _ent_right(logits.float(), mask.float()).double(),
          "is within what float32 rounding gives here"),
    Wrong("a float32 result for float64 logits",
          lambda logits, mask: _ent_right(logits.float(), mask), "the logits' dtype"),
    Wrong("logits.sub_(max) on the caller's logits", _ent_in_place, "modified its input"),
    endless_loop(_hangs),
))


# --- 3. gradient accumulation --------------------------------------------------------------------

def _acc_right(model, input_ids, mask, micro_batch_size, loss_fn):
    n_tokens = mask.sum()                                                 # the whole batch's
    total = 0.0
    for i in range(0, input_ids.shape[0], micro_batch_size):
        per_token = loss_fn(model, input_ids[i:i + micro_batch_size])     # (m, T)
        loss = (per_token * mask[i:i + micro_batch_size]).sum() / n_tokens
        loss.backward()
        total += loss.item()
    return total


def _acc_split(model, input_ids, mask, micro_batch_size, loss_fn):
    """torch.split, the count as a float, the total kept as a detached tensor."""
    n_tokens = mask.double().sum()
    total = 0
    for ids, m in zip(input_ids.split(micro_batch_size), mask.split(micro_batch_size)):
        loss = loss_fn(model, ids).where(m, 0.0).sum() / n_tokens
        loss.backward()
        total = total + loss.detach()
    return total


def _acc_weighted_means(model, input_ids, mask, micro_batch_size, loss_fn):
    """Each micro-batch's token mean, weighted by its share of the batch's tokens."""
    n_tokens = int(mask.sum())
    total = 0.0
    for i in range(0, len(input_ids), micro_batch_size):
        m = mask[i:i + micro_batch_size]
        mean = (loss_fn(model, input_ids[i:i + micro_batch_size]) * m).sum() / m.sum()
        loss = mean * (int(m.sum()) / n_tokens)
        loss.backward()
        total += loss.item()
    return total


def _acc_zero_grad_first(model, input_ids, mask, micro_batch_size, loss_fn):
    model.zero_grad(set_to_none=True)
    return _acc_right(model, input_ids, mask, micro_batch_size, loss_fn)


def _acc_rows_loop(model, input_ids, mask, micro_batch_size, loss_fn):
    """Micro-batches from a list of row indices."""
    rows = list(range(input_ids.shape[0]))
    total, n = 0.0, float(mask.sum())
    while rows:
        chunk, rows = rows[:micro_batch_size], rows[micro_batch_size:]
        per_token = loss_fn(model, input_ids[chunk])
        loss = (per_token * mask[chunk]).sum() / n
        loss.backward()
        total += loss.item()
    return total


def _acc_micro(scale, *, normaliser="global", skip_last=False, zero_inside=False,
               backward=True, last_only=False, pad=False, seq_mean=False):
    """The usual slips of an accumulation loop, one switch each."""
    def fn(model, input_ids, mask, micro_batch_size, loss_fn):
        N = input_ids.shape[0]
        starts = list(range(0, N, micro_batch_size))
        if skip_last and N % micro_batch_size:
            starts = starts[:-1]
        total = 0.0
        for i in starts:
            if zero_inside:
                model.zero_grad()
            m = mask[i:i + micro_batch_size]
            per_token = loss_fn(model, input_ids[i:i + micro_batch_size])
            summed = per_token.sum() if pad else (per_token * m).sum()
            if seq_mean:
                loss = ((per_token * m).sum(1) / m.sum(1)).sum() / N
            elif normaliser == "global":
                loss = summed / mask.sum()
            elif normaliser == "micro":
                loss = summed / m.sum()
            else:
                loss = summed / mask.numel()
            loss = loss * scale(len(starts))
            if backward:
                loss.backward()
            total = loss.item() if last_only else total + loss.item()
        return total
    return fn


def _acc_one_backward(model, input_ids, mask, micro_batch_size, loss_fn):
    losses = []
    for i in range(0, input_ids.shape[0], micro_batch_size):
        per_token = loss_fn(model, input_ids[i:i + micro_batch_size])
        losses.append((per_token * mask[i:i + micro_batch_size]).sum() / mask.sum())
    total = sum(losses)
    total.backward()                                      # every graph held until here
    return total.item()


def _acc_whole_batch(model, input_ids, mask, micro_batch_size, loss_fn):
    loss = (loss_fn(model, input_ids) * mask).sum() / mask.sum()
    loss.backward()
    return loss.item()


def _acc_running_total_backward(model, input_ids, mask, micro_batch_size, loss_fn):
    import torch
    total = torch.zeros((), dtype=torch.float64)
    for i in range(0, input_ids.shape[0], micro_batch_size):
        per_token = loss_fn(model, input_ids[i:i + micro_batch_size])
        total = total + (per_token * mask[i:i + micro_batch_size]).sum() / mask.sum()
        total.backward(retain_graph=True)                 # the earlier micro-batches again
    return total.item()


def _acc_with_step(each):
    """An SGD step inside: after the loop, or after every micro-batch's backward."""
    def fn(model, input_ids, mask, micro_batch_size, loss_fn):
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        total = 0.0
        for i in range(0, input_ids.shape[0], micro_batch_size):
            per_token = loss_fn(model, input_ids[i:i + micro_batch_size])
            loss = (per_token * mask[i:i + micro_batch_size]).sum() / mask.sum()
            loss.backward()
            total += loss.item()
            if each:
                opt.step()
        if not each:
            opt.step()
        return total
    return fn


def _acc_rows(model, input_ids, mask, micro_batch_size, loss_fn):
    """Divided by the number of rows N, as a per-sequence mean would be."""
    total = 0.0
    for i in range(0, input_ids.shape[0], micro_batch_size):
        per_token = loss_fn(model, input_ids[i:i + micro_batch_size])
        loss = (per_token * mask[i:i + micro_batch_size]).sum() / input_ids.shape[0]
        loss.backward()
        total += loss.item()
    return total


_one = lambda K: 1.0                                      # noqa: E731

_ACCUMULATE = Drill("check_accumulated_gradient", "6b", rights=(
    _acc_right, _acc_split, _acc_weighted_means, _acc_zero_grad_first, _acc_rows_loop),
    wrongs=(
    Wrong("each micro-batch's token mean, summed (no scaling)",
          _acc_micro(_one, normaliser="micro"), "each micro-batch's token mean, summed"),
    Wrong("each micro-batch's token mean / K (per-micro-batch mean, CS336's scaling)",
          _acc_micro(lambda K: 1.0 / K, normaliser="micro"),
          "divided by the number of micro-batches"),
    Wrong("the global count and then / K as well", _acc_micro(lambda K: 1.0 / K),
          "then divided again by the number of micro-batches"),
    Wrong("multiplied by K", _acc_micro(lambda K: float(K)),
          "multiplied by the number of micro-batches"),
    Wrong("padding counted in the sum", _acc_micro(_one, pad=True),
          "the padded tokens entered the loss"),
    Wrong("divided by N * T", _acc_micro(_one, normaliser="numel"), "divided by every position"),
    Wrong("divided by the number of rows N", _acc_rows, "the number of rows"),
    Wrong("an SGD step after the loop", _acc_with_step(each=False), "an optimizer step"),
    Wrong("an SGD step after every micro-batch", _acc_with_step(each=True),
          "an optimizer step"),
    Wrong("the sequence mean (grpo) instead of the token mean", _acc_micro(_one, seq_mean=True),
          "the mean of each sequence's token mean"),
    Wrong("the last partial micro-batch dropped", _acc_micro(_one, skip_last=True),
          "the last, partial micro-batch was dropped"),
    Wrong("returns the last micro-batch's loss only", _acc_micro(_one, last_only=True),
          "the last micro-batch's loss only"),
    Wrong("zero_grad() inside the loop", _acc_micro(_one, zero_inside=True),
          "zero_grad() ran inside the loop"),
    Wrong("no backward at all", _acc_micro(_one, backward=False), "have no gradient"),
    Wrong("one backward on the summed losses after the loop", _acc_one_backward,
          "every graph was held"),
    Wrong("the whole batch in one forward", _acc_whole_batch, "rows at once"),
    Wrong("backward on the running total each micro-batch (retain_graph)",
          _acc_running_total_backward, "the gradient is not"),
    endless_loop(_hangs),
))


# --- 4. a sequence-level IS weight ---------------------------------------------------------------

def _is_right(old_logp, sampler_logp, mask, cap):
    log_ratio = ((old_logp - sampler_logp) * mask).sum(-1)                # (N,)
    return log_ratio.exp().clamp(max=cap)


def _is_log_space(old_logp, sampler_logp, mask, cap):
    """Capped in log space: exp never overflows."""
    s = (old_logp - sampler_logp).where(mask, 0.0).sum(-1)
    return s.clamp(max=math.log(cap)).exp()


def _is_minimum(old_logp, sampler_logp, mask, cap):
    import torch
    s = ((old_logp - sampler_logp) * mask.double()).sum(1)
    return torch.minimum(s.exp(), torch.tensor(cap, dtype=s.dtype))


def _is_loop(old_logp, sampler_logp, mask, cap):
    out = []
    for o, s, m in zip(old_logp, sampler_logp, mask):
        total = float((o[m] - s[m]).sum())
        out.append(cap if total >= math.log(cap) else math.exp(total))
    return out


def _is_trl_style(old_logp, sampler_logp, mask, cap):
    """TRL's sequence_truncate, with clip_min None: (N, 1), then the column taken."""
    import torch
    diff = (old_logp - sampler_logp) * mask
    ratio = torch.exp(diff.sum(dim=-1, keepdim=True))
    return torch.clamp(ratio, min=None, max=cap)[:, 0]


def _is_no_cap(old_logp, sampler_logp, mask, cap):
    return ((old_logp - sampler_logp) * mask).sum(-1).exp()


def _is_token_product(old_logp, sampler_logp, mask, cap):
    r = (old_logp - sampler_logp).exp().clamp(max=cap)                    # token-level TIS
    return r.where(mask, 1.0).prod(-1)


def _is_token_mean(old_logp, sampler_logp, mask, cap):
    r = (old_logp - sampler_logp).exp().clamp(max=cap)
    return (r * mask).sum(-1) / mask.sum(-1)


def _is_mask_mode(old_logp, sampler_logp, mask, cap):
    ratio = ((old_logp - sampler_logp) * mask).sum(-1).exp()
    return ratio.masked_fill(ratio > cap, 0.0)                            # TRL's sequence_mask


def _is_geometric(old_logp, sampler_logp, mask, cap):
    s = ((old_logp - sampler_logp) * mask).sum(-1) / mask.sum(-1)
    return s.exp().clamp(max=cap)


def _is_two_sided(old_logp, sampler_logp, mask, cap):
    return ((old_logp - sampler_logp) * mask).sum(-1).exp().clamp(1 / cap, cap)


def _is_log_cap(old_logp, sampler_logp, mask, cap):
    return ((old_logp - sampler_logp) * mask).sum(-1).clamp(max=cap).exp()


def _is_axis0(old_logp, sampler_logp, mask, cap):
    return ((old_logp - sampler_logp) * mask).sum(0).exp().clamp(max=cap)


def _is_float32_log_cap(old_logp, sampler_logp, mask, cap):
    """Capped in log space at torch.tensor(cap).log(), a float32 0-d tensor."""
    import torch
    s = ((old_logp - sampler_logp) * mask).sum(-1)                        # float64
    return s.clamp(max=torch.tensor(cap).log()).exp()


def _is_float32_buffer(old_logp, sampler_logp, mask, cap):
    """One weight at a time into torch.zeros(N), which is float32."""
    import torch
    out = torch.zeros(old_logp.shape[0])
    for n in range(old_logp.shape[0]):
        out[n] = ((old_logp[n] - sampler_logp[n]) * mask[n]).sum().exp().clamp(max=cap)
    return out


def _is_in_place(old_logp, sampler_logp, mask, cap):
    old_logp.sub_(sampler_logp)
    return (old_logp * mask).sum(-1).exp().clamp(max=cap)


_IS_WEIGHT = Drill("check_sequence_is_weight", "6b", rights=(
    _is_right, _is_log_space, _is_minimum, _is_loop, _is_trl_style), wrongs=(
    Wrong("no cap", _is_no_cap, "no cap"),
    Wrong("token-level truncation, then the product", _is_token_product,
          "the product of the per-token truncated ratios"),
    Wrong("token-level truncation, then the mean", _is_token_mean,
          "the mean of the per-token truncated ratios"),
    Wrong("the ratio upside down", lambda o, s, m, c: _is_right(s, o, m, c), "upside down"),
    Wrong("padding in the sum", lambda o, s, m, c: (o - s).sum(-1).exp().clamp(max=c),
          "the padded tokens entered the sum"),
    Wrong("the geometric mean (GSPO's length-normalised ratio)", _is_geometric,
          "geometric mean"),
    Wrong("TRL's sequence_mask (0 above the cap)", _is_mask_mode, "sequence_mask"),
    Wrong("a lower bound 1 / cap as well", _is_two_sided, "a lower bound"),
    Wrong("the cap applied to the log-ratio", _is_log_cap, "applied to the log-ratio"),
    Wrong("cap hard-coded at 3", lambda o, s, m, c: _is_right(o, s, m, 3.0),
          "use the cap passed"),
    Wrong("summed over axis 0", _is_axis0, "summed over axis 0"),
    Wrong("log(cap) taken in float32 (torch.tensor(cap).log())", _is_float32_log_cap,
          "log(cap) rounded to float32"),
    Wrong("a float32 buffer (torch.zeros(N)) for float64 log-probs", _is_float32_buffer,
          "the log-probs' dtype"),
    Wrong("returns (N, 1)", lambda o, s, m, c: _is_right(o, s, m, c)[:, None],
          "one weight per sequence"),
    Wrong("old_logp.sub_(sampler_logp) in place", _is_in_place, "modified its input"),
    endless_loop(_hangs),
))


DRILLS = (_LOGPROBS, _ENTROPY, _ACCUMULATE, _IS_WEIGHT)
