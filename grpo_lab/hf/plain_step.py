r"""The whole GRPO step on a Hugging Face causal LM, written plainly: torch and transformers only.

Taught in chapter 6b, section "The whole step, written plainly"
(``chapters/06b_real_model.ipynb``), before the hardened :func:`grpo_lab.hf.grpo_step`. No
guard and no helper of the package: every line is a line of the paper's algorithm
(DeepSeekMath, Algorithm 1 with one update per batch), in the order a trainer runs them.
``tests/hf/test_plain_step.py`` proves it equal to ``gl.hf.grpo_step`` on a fixed seed (the
same samples, rewards, advantages and updated weights, with
``StepConfig(kl_bias_correction=False)``: this is DeepSeekMath's plain $k_3$; TRL's default
weights it by the ratio, chapter 3).

=============  ==========  ===================================================================
Symbol         Shape       Meaning
=============  ==========  ===================================================================
``B``, ``G``               prompts, completions per prompt; ``N = B * G`` rows
``ids``        (N, P)      the prompts through the chat template, each repeated G times,
                           padded on the left
``y``          (N, T)      the sampled completions (pad after each one's first EOS)
``mask``       (N, T)      1 up to and including the first EOS, then 0
``adv``        (N,)        the group advantage of each completion
``logp``       (n, T)      log pi_theta(y_t) of a micro-batch, with gradient
``ref_logp``   (N, T)      log pi_ref(y_t), without gradient
=============  ==========  ===================================================================
"""

from __future__ import annotations

import torch

__all__ = ["grpo_step_plain"]


def grpo_step_plain(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G=8, beta=0.04,
                    eps=0.2, tau=1.0, max_new_tokens=8, micro_size=8, max_grad_norm=1.0,
                    std_eps=1e-4, seed=0):
    """One GRPO step: ``prompts`` are B chat-message lists, ``answers`` their B answers,
    ``reward_fn(texts, answers) -> N floats``. Returns the loss summed over micro-batches."""
    eos = policy.generation_config.eos_token_id                  # an id, or a list of them
    rows = [tok.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"]
            for p in prompts for _ in range(G)]                   # each prompt G times
    P = max(len(r) for r in rows)
    ids = torch.tensor([[tok.pad_token_id] * (P - len(r)) + r for r in rows])       # (N, P) left pad
    attn = torch.tensor([[0] * (P - len(r)) + [1] * len(r) for r in rows])          # (N, P)
    policy.eval()                                                 # 1. sample G per prompt
    torch.manual_seed(seed)
    with torch.no_grad():
        out = policy.generate(input_ids=ids, attention_mask=attn, do_sample=True, temperature=tau,
                              top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              pad_token_id=tok.pad_token_id, eos_token_id=eos)
    y = out[:, P:]                                                # (N, T)
    is_eos = torch.isin(y, torch.tensor(eos))                     # 2. mask: up to the first EOS
    mask = ((is_eos.cumsum(1) - is_eos.long()) == 0).float()      # (N, T)
    texts = tok.batch_decode(y, skip_special_tokens=True)         # 3. rewards, advantages
    r = torch.tensor(reward_fn(texts, [a for a in answers for _ in range(G)])).view(-1, G)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + std_eps)).view(-1)   # (N,)
    x, x_attn = torch.cat([ids, y], 1), torch.cat([attn, mask.long()], 1)             # (N, P + T)

    def logprobs(model, rows):                                    # 4. shifted: z_{p} scores y_{p+1}
        z = model(x[rows], attention_mask=x_attn[rows]).logits[:, P - 1:-1] / tau      # (n, T, V)
        return z.log_softmax(-1).gather(2, y[rows, :, None]).squeeze(2)               # (n, T)

    with torch.no_grad():
        ref_logp = logprobs(ref, slice(None))                     # (N, T)
    policy.train()
    optimizer.zero_grad()
    n_tokens, total = mask.sum(), 0.0                             # dapo: the whole batch's tokens
    for start in range(0, len(y), micro_size):                    # 5. micro-batches
        rows = slice(start, start + micro_size)
        logp = logprobs(policy, rows)
        old_logp = logp.detach()                                  # one update per batch: pi_old = pi_theta
        ratio = torch.exp(logp - old_logp)                        # 1, with the gradient of pi_theta
        A = adv[rows, None]                                       # (n, 1) over the tokens
        surrogate = torch.min(ratio * A, ratio.clamp(1 - eps, 1 + eps) * A)
        d = ref_logp[rows] - logp                                 # log(pi_ref / pi_theta)
        k3 = torch.exp(d) - d - 1
        loss = ((-surrogate + beta * k3) * mask[rows]).sum() / n_tokens
        loss.backward()                                           # gradients add up in .grad
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()                                              # 6. one update
    return total
