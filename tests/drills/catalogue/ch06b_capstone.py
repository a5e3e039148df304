"""Chapter 6b's capstone: the whole GRPO step on a Hugging Face model.

Right answers written five ways (the package's plain step, a loop over rows, the tokenizer's
own padding with indexing and an argmax mask, cross-entropy log-probs with an expm1 k3, and
old_logp from the trainer's own forward before the update), and wrong ones as readers write
them: one base step below, written apart from the checker's ``step_variant``, with one line
changed per mistake. torch is imported inside the functions.
"""

from __future__ import annotations

import functools

from .entry import Drill, Wrong


def _rows(tok, prompts, G):
    return [tok.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"]
            for p in prompts for _ in range(G)]


def _step(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, eps,
          max_new_tokens, micro_size, max_grad_norm, seed, bug=None):
    """A reader's step; ``bug`` names the one line written wrong."""
    import torch
    eos = policy.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos)
    if bug == "tok_eos":
        eos = [tok.eos_token_id]
    rows = _rows(tok, prompts, G)
    P = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (P - len(r)) + r for r in rows])
    attn = torch.tensor([[0] * (P - len(r)) + [1] * len(r) for r in rows])
    torch.manual_seed(seed)
    with torch.no_grad():
        out = policy.generate(input_ids=ids, attention_mask=attn, do_sample=True,
                              temperature=1.0, top_k=50 if bug == "top_k" else 0, top_p=1.0,
                              max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                              eos_token_id=policy.generation_config.eos_token_id,
                              output_scores=True, return_dict_in_generate=True)
    y = out.sequences[:, P:]                                              # (N, T)
    N, T = y.shape
    ended = torch.isin(y, torch.tensor(eos))
    if bug == "before_eos":
        mask = (ended.long().cumsum(1) == 0).float()
    elif bug == "pad_ne":
        mask = (y != tok.pad_token_id).float()
    elif bug == "row_cumsum":
        e = torch.isin(out.sequences, torch.tensor(eos)).long()
        mask = ((e.cumsum(1) - e) == 0).float()[:, P:]
    else:
        mask = ((ended.long().cumsum(1) - ended.long()) == 0).float()    # (N, T)
    texts = tok.batch_decode(y, skip_special_tokens=True)
    per_row = [a for _ in range(G) for a in answers] if bug == "tiled" else \
        [a for a in answers for _ in range(G)]
    r = torch.tensor(reward_fn(texts, per_row), dtype=torch.float64)
    if bug == "wrong_axis":
        g = r.view(G, -1)
        adv = ((g - g.mean(0)) / (g.std(0) + 1e-4)).reshape(-1)
    else:
        g = r.view(-1, G)                                                 # (B, G)
        std = g.std(1, keepdim=True, unbiased=bug != "population")
        adv = ((g - g.mean(1, keepdim=True)) / (std + (0 if bug == "no_eps" else 1e-4))).view(-1)
    x = torch.cat([ids, y], 1)
    x_attn = torch.cat([attn, mask.long()], 1)
    sampler = torch.stack(out.scores, 1).log_softmax(-1).gather(2, y[..., None]).squeeze(2)

    def logp_of(model, sl):
        kw = {} if bug == "no_attention" else {"attention_mask": x_attn[sl]}
        z = model(x[sl], **kw).logits
        z = z[:, P:] if bug == "no_shift" else z[:, P - 1:-1]             # (n, T, V)
        return z.log_softmax(-1).gather(2, y[sl, :, None]).squeeze(2)

    with torch.no_grad():
        ref_logp = logp_of(ref, slice(None))
    if bug != "no_zero_grad":
        optimizer.zero_grad()
    total = 0.0
    losses = []
    for s in range(0, N, micro_size):
        sl = slice(s, s + micro_size)
        logp = logp_of(policy, sl)
        old = {"sampler": sampler[sl], "no_detach": logp}.get(bug, logp.detach())
        ratio = (logp - old).exp()
        A = adv[sl] if bug == "adv_rows" else adv[sl].unsqueeze(1)
        surr = torch.min(ratio * A, ratio.clamp(1 - eps, 1 + eps) * A)
        d = ref_logp[sl] - logp
        if bug == "kl_flipped":
            d = -d
        k = logp - ref_logp[sl] if bug == "k1" else d.exp() - d - 1
        m = mask[sl]
        if bug == "numel":
            loss = ((-surr + beta * k) * m).sum() / mask.numel()
        elif bug == "micro_norm":
            loss = ((-surr + beta * k) * m).sum() / m.sum()
        else:
            loss = ((-surr + beta * k) * m).sum() / mask.sum()
        loss.backward()
        if bug == "clip_inside":
            torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
        if bug == "step_inside":
            optimizer.step()
        losses.append(loss.item())
        total = total + (loss if bug == "tensor_total" else loss.item())
    if bug not in ("no_clip", "clip_inside"):
        torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    if bug != "step_inside":
        optimizer.step()
    return losses[-1] if bug == "last_loss" else total


# --- right answers -------------------------------------------------------------------------------

def _right_plain(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, eps,
                 max_new_tokens, micro_size, max_grad_norm, seed):
    """The package's plain step itself."""
    import grpo_lab.hf as glh
    return glh.grpo_step_plain(policy, ref, optimizer, tok, prompts, answers, reward_fn, G=G,
                               beta=beta, eps=eps, max_new_tokens=max_new_tokens,
                               micro_size=micro_size, max_grad_norm=max_grad_norm, seed=seed)


def _right_rows(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, eps,
                max_new_tokens, micro_size, max_grad_norm, seed):
    """One row at a time: its forward, its mask from a Python loop, its loss term."""
    import torch
    stop = policy.generation_config.eos_token_id
    stop = {stop} if isinstance(stop, int) else set(stop)
    rows = _rows(tok, prompts, G)
    P = max(len(r) for r in rows)
    ids = torch.full((len(rows), P), tok.pad_token_id)
    attn = torch.zeros(len(rows), P, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, P - len(r):] = torch.tensor(r)
        attn[i, P - len(r):] = 1
    policy.eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        seq = policy.generate(input_ids=ids, attention_mask=attn, do_sample=True,
                              temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              pad_token_id=tok.pad_token_id, eos_token_id=list(stop))
    y = seq[:, P:]
    N, T = y.shape
    mask = torch.zeros(N, T)
    for i in range(N):
        for t in range(T):
            mask[i, t] = 1.0
            if int(y[i, t]) in stop:
                break
    texts = [tok.decode(row, skip_special_tokens=True) for row in y]
    rewards = reward_fn(texts, [a for a in answers for _ in range(G)])
    adv = torch.zeros(N, dtype=torch.float64)
    for b in range(N // G):
        group = torch.tensor(rewards[b * G:(b + 1) * G], dtype=torch.float64)
        adv[b * G:(b + 1) * G] = (group - group.mean()) / (group.std() + 1e-4)

    def row_logp(model, i):
        x = torch.cat([ids[i], y[i]])[None]
        a = torch.cat([attn[i], mask[i].long()])[None]
        z = model(x, attention_mask=a).logits[0, P - 1:P - 1 + T]            # (T, V)
        return torch.log_softmax(z, dim=-1)[torch.arange(T), y[i]]          # (T,)

    with torch.no_grad():
        ref_logp = [row_logp(ref, i) for i in range(N)]
    policy.train()
    optimizer.zero_grad()
    n_tokens = mask.sum()
    total = 0.0
    for start in range(0, N, micro_size):
        loss = 0.0
        for i in range(start, min(start + micro_size, N)):
            logp = row_logp(policy, i)
            ratio = torch.exp(logp - logp.detach())
            clipped = torch.clamp(ratio, 1 - eps, 1 + eps)
            surr = torch.minimum(ratio * adv[i], clipped * adv[i])
            d = ref_logp[i] - logp
            loss = loss + ((beta * (torch.exp(d) - d - 1) - surr) * mask[i]).sum() / n_tokens
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm=max_grad_norm)
    optimizer.step()
    return total


def _right_indexing(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, eps,
                    max_new_tokens, micro_size, max_grad_norm, seed):
    """The tokenizer pads (left), indexing instead of gather, the mask from argmax."""
    import torch
    eos = policy.generation_config.eos_token_id
    eos = torch.tensor([eos] if isinstance(eos, int) else eos)
    batch = tok.apply_chat_template([p for p in prompts for _ in range(G)],
                                    add_generation_prompt=True, return_dict=True, padding=True,
                                    return_tensors="pt")
    ids, attn = batch["input_ids"], batch["attention_mask"]
    P = ids.shape[1]
    torch.manual_seed(seed)
    with torch.no_grad():
        y = policy.generate(input_ids=ids, attention_mask=attn, do_sample=True, top_k=0,
                            top_p=1.0, temperature=1.0, max_new_tokens=max_new_tokens,
                            pad_token_id=tok.pad_token_id, eos_token_id=eos.tolist())[:, P:]
    N, T = y.shape
    hit = torch.isin(y, eos)
    first = torch.where(hit.any(1), hit.int().argmax(1), torch.full((N,), T))     # (N,)
    mask = (torch.arange(T)[None] <= first[:, None]).to(torch.float32)           # (N, T)
    r = torch.as_tensor(reward_fn(tok.batch_decode(y, skip_special_tokens=True),
                                  [a for a in answers for _ in range(G)]), dtype=torch.float64)
    r = r.reshape(len(prompts), G)
    adv = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-4)
    adv = adv.flatten()
    x = torch.cat([ids, y], dim=1)
    xm = torch.cat([attn, mask.long()], dim=1)
    rows_T = torch.arange(T)

    def lp(model, sel):
        z = model(input_ids=x[sel], attention_mask=xm[sel]).logits[:, P - 1:P - 1 + T]
        z = z.log_softmax(-1)
        n = z.shape[0]
        return z[torch.arange(n)[:, None], rows_T[None, :], y[sel]]              # (n, T)

    with torch.no_grad():
        ref_lp = lp(ref, slice(0, N))
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for s in range(0, N, micro_size):
        sel = slice(s, min(N, s + micro_size))
        cur = lp(policy, sel)
        ratio = (cur - cur.detach()).exp()
        a = adv[sel].unsqueeze(-1)
        obj = torch.min(ratio * a, torch.clip(ratio, 1 - eps, 1 + eps) * a)
        diff = ref_lp[sel] - cur
        per_tok = -obj + beta * (diff.exp() - diff - 1)
        loss = (per_tok * mask[sel]).sum() / mask.sum()
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    return total


def _right_expm1(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, eps,
                 max_new_tokens, micro_size, max_grad_norm, seed):
    """Log-probs as minus the cross-entropy, k3 as expm1(d) - d, the per-token loss summed
    by micro-batch with the global count folded into a weight."""
    import torch
    import torch.nn.functional as F
    stop = policy.generation_config.eos_token_id
    stop = torch.tensor(stop if isinstance(stop, (list, tuple)) else [stop])
    rows = _rows(tok, prompts, G)
    P = max(len(r) for r in rows)
    ids = torch.stack([F.pad(torch.tensor(r), (P - len(r), 0), value=tok.pad_token_id)
                       for r in rows])
    attn = torch.stack([F.pad(torch.ones(len(r), dtype=torch.long), (P - len(r), 0))
                        for r in rows])
    torch.manual_seed(seed)
    with torch.no_grad():
        seq = policy.generate(input_ids=ids, attention_mask=attn, do_sample=True,
                              temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              pad_token_id=tok.pad_token_id, eos_token_id=stop.tolist())
    y = seq[:, P:]
    is_stop = torch.isin(y, stop).int()
    mask = (torch.cumsum(is_stop, 1) - is_stop < 1).float()
    rewards = torch.tensor(reward_fn(tok.batch_decode(y, skip_special_tokens=True),
                                     [a for a in answers for _ in range(G)]),
                           dtype=torch.float64)
    grouped = rewards.unflatten(0, (-1, G))
    adv = ((grouped - grouped.mean(1, keepdim=True))
           / (grouped.std(1, keepdim=True) + 1e-4)).flatten()
    full = torch.cat([ids, y], 1)
    full_attn = torch.cat([attn, mask.long()], 1)

    def logprobs(model, idx):
        z = model(full[idx], attention_mask=full_attn[idx]).logits[:, P - 1:-1]   # (n, T, V)
        return -F.cross_entropy(z.transpose(1, 2), y[idx], reduction="none")     # (n, T)

    with torch.no_grad():
        ref_logp = logprobs(ref, slice(None))
    weight = 1.0 / mask.sum()
    optimizer.zero_grad()
    total = 0.0
    for idx in torch.arange(len(y)).split(micro_size):
        logp = logprobs(policy, idx)
        ratio = torch.exp(logp - logp.detach())
        A = adv[idx][:, None]
        pg = -torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)
        d = ref_logp[idx] - logp
        k3 = torch.expm1(d) - d
        loss = ((pg + beta * k3) * mask[idx]).sum() * weight
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(list(policy.parameters()), max_grad_norm)
    optimizer.step()
    return total


def _right_old_forward(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta,
                       eps, max_new_tokens, micro_size, max_grad_norm, seed):
    """old_logp from the trainer's own forward before the update (pi_old, one update per
    batch, so equal to logp.detach()); numpy advantages; model.zero_grad."""
    import numpy as np
    import torch
    eos = policy.generation_config.eos_token_id
    eos_list = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    rows = _rows(tok, prompts, G)
    P = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (P - len(r)) + r for r in rows])
    attn = (torch.arange(P)[None] >= torch.tensor([P - len(r) for r in rows])[:, None]).long()
    torch.manual_seed(seed)
    with torch.no_grad():
        out = policy.generate(input_ids=ids, attention_mask=attn, do_sample=True,
                              temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              pad_token_id=tok.pad_token_id, eos_token_id=eos)
    y = out[:, P:]
    e = torch.isin(y, torch.tensor(eos_list)).long()
    mask = (e.cumsum(-1) - e).eq(0).float()
    r = np.asarray(reward_fn(tok.batch_decode(y, skip_special_tokens=True),
                             list(np.repeat(answers, G))), dtype=np.float64).reshape(-1, G)
    adv = torch.from_numpy(((r - r.mean(1, keepdims=True))
                            / (r.std(1, ddof=1, keepdims=True) + 1e-4)).ravel())
    x = torch.cat([ids, y], 1)
    xa = torch.cat([attn, mask.long()], 1)

    def logp_of(model, rows_):
        z = model(x[rows_], attention_mask=xa[rows_]).logits[:, P - 1:-1]
        return torch.gather(torch.log_softmax(z, -1), -1, y[rows_].unsqueeze(-1))[..., 0]

    with torch.no_grad():
        ref_logp = logp_of(ref, slice(None))
        old_logp = logp_of(policy, slice(None))                 # pi_old: before the update
    policy.zero_grad()
    total = 0.0
    for s in range(0, len(y), micro_size):
        rows_ = slice(s, s + micro_size)
        logp = logp_of(policy, rows_)
        ratio = torch.exp(logp - old_logp[rows_])
        A = adv[rows_, None]
        surr = torch.min(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)
        kl = torch.exp(ref_logp[rows_] - logp) - (ref_logp[rows_] - logp) - 1
        loss = torch.sum((beta * kl - surr) * mask[rows_]) / torch.sum(mask)
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    return total


def _wrong(bug):
    fn = functools.partial(_step, bug=bug)
    fn.__name__ = f"step_with_{bug}"
    return fn


DRILLS = [
    Drill("check_grpo_step", "6b", rights=(_right_plain, _right_rows, _right_indexing,
                                         _right_expm1, _right_old_forward), wrongs=(
        Wrong("no shift (logits[:, P:] score the token they were fed)", _wrong("no_shift"),
              "no shift"),
        Wrong("padding counted: the masked sum divided by every position", _wrong("numel"),
              "padding entered the mean"),
        Wrong("a per-micro-batch normaliser (each micro-batch's own token count)",
              _wrong("micro_norm"), "divided by its own token count"),
        Wrong("old_logp from the sampler (generate's scores)", _wrong("sampler"),
              "old_logp came from the sampler"),
        Wrong("old_logp = logp without detach", _wrong("no_detach"), "without .detach()"),
        Wrong("the KL's sign flipped (exp(logp - ref))", _wrong("kl_flipped"),
              "KL's sign is flipped"),
        Wrong("k1 instead of k3", _wrong("k1"), "that is k1"),
        Wrong("no zero_grad: the previous call's gradient accumulates", _wrong("no_zero_grad"),
              "gradient of the previous call"),
        Wrong("advantages grouped over the wrong axis (r.view(G, -1))", _wrong("wrong_axis"),
              "grouped over the wrong axis"),
        Wrong("advantages (n,) against (n, T): broadcast over the tokens", _wrong("adv_rows"),
              "adv[rows, None]"),
        Wrong("the population std (unbiased=False)", _wrong("population"), "population std"),
        Wrong("no eps in the advantages' denominator", _wrong("no_eps"), "std + 1e-4"),
        Wrong("no gradient clip", _wrong("no_clip"), "no gradient clip"),
        Wrong("the clip inside the micro-batch loop", _wrong("clip_inside"),
              "clipped after each micro-batch"),
        Wrong("an optimizer step per micro-batch", _wrong("step_inside"),
              "stepped once per micro-batch"),
        Wrong("the mask excludes the EOS", _wrong("before_eos"), "the EOS is left out"),
        Wrong("the mask from y != pad_token_id (pad == eos drops the EOS)", _wrong("pad_ne"),
              "y != pad_token_id"),
        Wrong("the EOS count over prompt and completion (pad == eos)", _wrong("row_cumsum"),
              "EOS count ran over the prompt"),
        Wrong("only tok.eos_token_id ends a completion", _wrong("tok_eos"),
              "eos ids may be a list"),
        Wrong("no attention mask in the forward (left padding attended)",
              _wrong("no_attention"), "left padding was attended"),
        Wrong("the answers tiled (answers * G)", _wrong("tiled"), "answers were tiled"),
        Wrong("sampled with HF's default top_k = 50", _wrong("top_k"), "samples differ"),
        Wrong("total += loss: a tensor holding the graph", _wrong("tensor_total"),
              "requires grad"),
        Wrong("the last micro-batch's loss returned", _wrong("last_loss"),
              "last micro-batch's loss"),
    )),
]
