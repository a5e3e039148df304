r"""The capstone drill of chapter 6b: the whole GRPO step on a Hugging Face model, from a blank
function.

The reader writes ``my_grpo_step(policy, ref, optimizer, tok, prompts, answers, reward_fn, *,
G, beta, eps, max_new_tokens, micro_size, max_grad_norm, seed) -> loss`` with the signature and
the meaning of :func:`grpo_lab.hf.grpo_step_plain` (``std_eps`` 1e-4 and temperature 1 fixed).
:func:`check_grpo_step` runs it and ``grpo_step_plain`` on copies of one small model (the
chapter's character tokenizer, a one-layer Llama warmed up on the answer format, then warmed a
little further so that the reference model is an earlier checkpoint and the KL term has a
gradient) with SGD, and compares the weights after the step and the loss returned:

=======================================================  =======================================
case                                                     what it covers
=======================================================  =======================================
3 prompts of 3 lengths, G = 4, micro-batches 5, 5, 2     ragged prompts (left padding), EOS and
                                                         truncated completions, the model's
                                                         eos a list (``<eos>``, ``</answer>``),
                                                         the clip inactive: every scale shows
the same model stepped a second time (seed 4)            ``zero_grad`` (a gradient left over
                                                         from the first call)
pad == eos, G = 4, micro-batches 6 and 6, T = 6,         the mask where padding is the EOS, a
beta 0.5, eps 0.1, the clip active                       group with equal rewards, the clip,
                                                         the arguments passed (not defaults)
=======================================================  =======================================

Before the weights, two stages are read as they happen: the samples (``policy.generate`` is
watched: the step must sample exactly as ``grpo_step_plain`` does) and the rewards
(``reward_fn`` is watched: each answer repeated G times). When the weights differ, each usual
mistake is computed by :func:`step_variant` (a stage-wise GRPO step whose default equals
``grpo_step_plain``, proven in the tests) and named when the reader's update matches it and
not the right one: no shift, padding in the mean, a per-micro-batch normaliser, ``old_logp``
from the sampler (or ``logp`` itself, or a constant), the KL's sign or estimator, the missing
``zero_grad``, the advantages over the wrong axis or the population std, the clip skipped or
run per micro-batch, a step per micro-batch, the EOS left out of the mask...

The tolerance is measured (``tests/drills/test_ch06b_capstone.py``): beyond a float32 weight's
own rounding, right answers written five ways land within 5e-7 of the plain step's update
(relative to its largest entry), the usual mistakes 3e-3 and more away (old_logp from the
bfloat16 sampler is the closest); the tolerance, 1e-4, sits between.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass

import numpy as np

from grpo_lab.drills import harness
from grpo_lab.drills.harness import exception_text, in_thread, text_of, verdict

__all__ = ["CASES", "RIGHT", "StepCase", "Way", "check_grpo_step", "step_mistakes",
           "step_variant"]

#: SGD's learning rate: the update is ``LR`` times the (clipped) gradient.
LR = 0.5
#: The largest difference allowed between two updates, relative to the plain step's largest
#: update entry, beyond 4 float32 roundings of the weight (measured: right answers <= 5e-7,
#: mistakes >= 3e-3).
REL_TOL = 1e-4
#: The time one call may take: this many times the harness's limit (a step here takes about
#: 0.2 s; 50 s for a reader, 5 s under the catalogue's tests).
LIMIT_FACTOR = 10

SIGNATURE = ("my_grpo_step(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, "
             "eps, max_new_tokens, micro_size, max_grad_norm, seed)")


def _torch():
    import grpo_lab.torch  # noqa: F401  says how to install torch when it is missing
    import torch
    return torch


@dataclass(frozen=True)
class StepCase:
    """One call of the reader's step: its prompts (addition terms), settings and model."""
    where: str
    terms: tuple
    G: int
    beta: float
    eps: float
    max_new_tokens: int
    micro_size: int
    max_grad_norm: float
    seed: int
    pad_is_eos: bool = False      # the tokenizer pads with its EOS token
    eos_list: bool = False        # the model's eos_token_id is [<eos>, </answer>]
    again: int | None = None      # a second call on the model the first one left, this seed

    @property
    def kwargs(self) -> dict:
        return dict(G=self.G, beta=self.beta, eps=self.eps, max_new_tokens=self.max_new_tokens,
                    micro_size=self.micro_size, max_grad_norm=self.max_grad_norm, seed=self.seed)


CASES = (
    StepCase("3 prompts of 3 lengths, G = 4, micro-batches of 5, 5 and 2, the model's eos ids "
             "a list [<eos>, </answer>], the clip inactive", ((11, 4, 1), (0, 9), (10, 8)),
             G=4, beta=0.04, eps=0.2, max_new_tokens=8, micro_size=5, max_grad_norm=1e3,
             seed=7, eos_list=True, again=8),
    StepCase("pad == eos (the tokenizer pads with <eos>), 3 prompts, G = 4, micro-batches of "
             "6 and 6, beta = 0.5, eps = 0.1, max_grad_norm = 0.5 (the clip active)",
             ((1, 2, 3), (0, 9), (10, 8)), G=4, beta=0.5, eps=0.1, max_new_tokens=6,
             micro_size=6, max_grad_norm=0.5, seed=7, pad_is_eos=True),
)


# --- the world: a tokenizer and two checkpoints of one small model, built once per process -----

@functools.lru_cache(maxsize=1)
def _world():
    """(tokenizer, reference weights, policy weights): a one-layer Llama, 20 warm-start steps
    for the reference, 10 more (another seed) for the policy."""
    torch = _torch()
    import grpo_lab.hf as glh
    from grpo_lab.rl.task import AdditionTask

    tok = glh.build_tokenizer()
    task = AdditionTask(n_terms=2, max_term=9, held_out=0.2, seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            model = glh.build_model(tok, hidden_size=32, n_layer=1, n_head=2, seed=0)
            glh.warm_start(model, tok, task, steps=20, batch_size=32, lr=1e-2, seed=0)
            ref_state = copy.deepcopy(model.state_dict())
            glh.warm_start(model, tok, task, steps=10, batch_size=32, lr=1e-2, seed=1)
    finally:
        torch.set_num_threads(threads)
    model.zero_grad(set_to_none=True)
    return tok, model, ref_state


def _tokenizer(case: StepCase):
    tok = copy.deepcopy(_world()[0])
    if case.pad_is_eos:
        tok.pad_token = tok.eos_token
    return tok


def _setup(case: StepCase):
    """Fresh (policy, ref, optimizer, tok, prompts, answers) for ``case``."""
    torch = _torch()
    import grpo_lab.hf as glh
    base_tok, model, ref_state = _world()
    tok = _tokenizer(case)
    policy = copy.deepcopy(model)
    policy.generation_config.pad_token_id = tok.pad_token_id
    if case.eos_list:
        policy.generation_config.eos_token_id = [tok.eos_token_id,
                                                 tok.get_vocab()["</answer>"]]
    ref = glh.frozen_copy(policy)
    ref.load_state_dict(ref_state)
    policy.generate = _engine(policy)
    optimizer = torch.optim.SGD(policy.parameters(), lr=LR)
    prompts = [glh.prompt_messages(t) for t in case.terms]
    answers = [sum(t) for t in case.terms]
    return policy, ref, optimizer, tok, prompts, answers


def _engine(policy):
    """``policy.generate`` as an inference engine runs it: on the policy's current weights
    rounded to bfloat16 (as an engine that serves in bfloat16), so that its scores are
    pi_sampler's, close to but not the trainer's log-probs."""
    torch = _torch()
    import grpo_lab.hf as glh

    def generate(*args, **kwargs):
        sampler = glh.frozen_copy(policy)
        sampler.generation_config = copy.deepcopy(policy.generation_config)
        with torch.no_grad():
            for p in sampler.parameters():
                p.copy_(p.to(torch.bfloat16).float())
        return type(policy).generate(sampler, *args, **kwargs)
    return generate


def reward_fn(texts, answers):
    """The drill's reward: ``gl.hf.addition_rewards`` (accuracy + 0.5 format), a list."""
    import grpo_lab.hf as glh
    return [float(r) for r in glh.addition_rewards(list(texts), list(answers))]


def _flat(model):
    torch = _torch()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).double().numpy()


# --- a stage-wise GRPO step whose every stage can be done the usual wrong way -------------------

@dataclass(frozen=True)
class Way:
    """How each stage of the step is done; the defaults are ``grpo_step_plain``'s."""
    mask: str = "first_eos"     # before_eos | pad_ne | row_cumsum | tok_eos | all
    adv: str = "group"          # population | wrong_axis | batch | tiled | tokens
    shift: bool = True
    attention: bool = True
    old: str = "detach"         # sampler | ref | logp
    kl: str = "k3"              # flipped | k1 | k2 | ratio_k3 | minus
    sign: int = 1
    norm: str = "batch_tokens"  # micro_tokens | micro_mean | positions | unmasked | sequences
    zero_grad: str = "once"     # never | inside
    step: str = "once"          # per_micro
    clip: str = "after"         # none | per_micro
    total: str = "sum"          # last | mean


RIGHT = Way()


def _sample(policy, tok, prompts, G, max_new_tokens, seed):
    """The samples as ``grpo_step_plain`` draws them, and the sampler's own log-probs."""
    torch = _torch()
    eos = policy.generation_config.eos_token_id
    rows = [tok.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"]
            for p in prompts for _ in range(G)]
    P = max(len(r) for r in rows)
    ids = torch.tensor([[tok.pad_token_id] * (P - len(r)) + r for r in rows])      # (N, P)
    attn = torch.tensor([[0] * (P - len(r)) + [1] * len(r) for r in rows])         # (N, P)
    policy.eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        out = policy.generate(input_ids=ids, attention_mask=attn, do_sample=True, temperature=1.0,
                              top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                              pad_token_id=tok.pad_token_id, eos_token_id=eos,
                              output_logits=True, return_dict_in_generate=True)
    y = out.sequences[:, P:]                                                        # (N, T)
    z = torch.stack(out.logits, 1).float()                                          # (N, T, V)
    sampler_logp = z.log_softmax(-1).gather(2, y[..., None]).squeeze(2)             # (N, T)
    return ids, attn, P, y, sampler_logp, eos


def _mask(way, y, ids, eos, tok):
    torch = _torch()
    eos_ids = torch.tensor(eos if way.mask != "tok_eos" else [tok.eos_token_id])
    if way.mask == "row_cumsum":                      # the EOS count over prompt + completion
        x = torch.cat([ids, y], 1)
        e = torch.isin(x, eos_ids)
        return ((e.cumsum(1) - e.long()) == 0).float()[:, ids.shape[1]:]
    is_eos = torch.isin(y, eos_ids)
    first = ((is_eos.cumsum(1) - is_eos.long()) == 0).float()                       # (N, T)
    return {"first_eos": first, "tok_eos": first, "before_eos": first * ~is_eos,
            "pad_ne": (y != tok.pad_token_id).float(), "all": torch.ones_like(first)}[way.mask]


def _advantages(way, r, G):
    """r (N,) float64 rewards, prompt-major -> adv (N,)."""
    if way.adv == "wrong_axis":                       # r.view(G, -1): groups across prompts
        g = r.view(G, -1)
        return ((g - g.mean(0, keepdim=True)) / (g.std(0, keepdim=True) + 1e-4)).view(-1)
    if way.adv == "batch":
        return (r - r.mean()) / (r.std() + 1e-4)
    g = r.view(-1, G)                                                               # (B, G)
    std = g.std(1, keepdim=True, unbiased=way.adv != "population")
    return ((g - g.mean(1, keepdim=True)) / (std + 1e-4)).view(-1)                  # (N,)


def step_variant(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, eps,
                 max_new_tokens, micro_size, max_grad_norm, seed, way: Way = RIGHT):
    """One GRPO step done ``way``: with :data:`RIGHT`, ``grpo_step_plain`` (proven equal in
    the tests); each other :class:`Way` is one usual mistake. Returns the loss returned."""
    torch = _torch()
    ids, attn, P, y, sampler_logp, eos = _sample(policy, tok, prompts, G, max_new_tokens, seed)
    mask = _mask(way, y, ids, eos, tok)                                             # (N, T)
    texts = tok.batch_decode(y, skip_special_tokens=True)
    per_row = ([a for _ in range(G) for a in answers] if way.adv == "tiled"
               else [a for a in answers for _ in range(G)])
    r = torch.tensor(reward_fn(texts, per_row), dtype=torch.float64)                # (N,)
    adv = _advantages(way, r, G)
    x, x_attn = torch.cat([ids, y], 1), torch.cat([attn, mask.long()], 1)          # (N, P + T)
    if way.mask in ("row_cumsum", "pad_ne", "all", "before_eos", "tok_eos"):
        x_attn = torch.cat([attn, torch.ones_like(y)], 1)

    def logprobs(model, rows):
        kw = {"attention_mask": x_attn[rows]} if way.attention else {}
        z = model(x[rows], **kw).logits                                             # (n, L, V)
        z = z[:, P - 1:-1] if way.shift else z[:, P:]                               # (n, T, V)
        return z.log_softmax(-1).gather(2, y[rows, :, None]).squeeze(2)             # (n, T)

    with torch.no_grad():
        ref_logp = logprobs(ref, slice(None))
    policy.train()
    if way.zero_grad == "once":
        optimizer.zero_grad()
    n_tokens, total, losses = mask.sum(), 0.0, []
    starts = range(0, len(y), micro_size)
    for start in starts:
        rows = slice(start, start + micro_size)
        if way.zero_grad == "inside":
            optimizer.zero_grad()
        logp = logprobs(policy, rows)
        old = {"detach": logp.detach(), "sampler": sampler_logp[rows], "ref": ref_logp[rows],
               "logp": logp}[way.old]
        ratio = torch.exp(logp - old)
        A = adv[rows, None] if way.adv != "tokens" else adv[None, rows]            # (n, 1)
        surrogate = way.sign * torch.min(ratio * A, ratio.clamp(1 - eps, 1 + eps) * A)
        d = ref_logp[rows] - logp
        kl = {"k3": torch.exp(d) - d - 1, "flipped": torch.exp(-d) + d - 1, "k1": -d,
              "k2": d ** 2 / 2, "ratio_k3": ratio * (torch.exp(d) - d - 1),
              "minus": -(torch.exp(d) - d - 1)}[way.kl]
        m = mask[rows]
        per_token = -surrogate + beta * kl                                          # (n, T)
        if way.norm == "batch_tokens":
            loss = (per_token * m).sum() / n_tokens
        elif way.norm == "micro_tokens":
            loss = (per_token * m).sum() / m.sum()
        elif way.norm == "micro_mean":
            loss = (per_token * m).sum() / m.sum() / len(starts)
        elif way.norm == "positions":
            loss = (per_token * m).sum() / mask.numel()
        elif way.norm == "unmasked":
            loss = per_token.sum() / n_tokens
        else:                                                                       # sequences
            loss = ((per_token * m).sum(1) / m.sum(1)).sum() / len(y)
        loss.backward()
        losses.append(loss.item())
        if way.clip == "per_micro":
            torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
        if way.step == "per_micro":
            optimizer.step()
    if way.clip == "after":
        torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    if way.step == "once":
        optimizer.step()
    total = {"sum": sum(losses), "last": losses[-1], "mean": sum(losses) / len(losses)}
    return total[way.total]


def step_mistakes() -> list[tuple[str, Way]]:
    """The usual mistakes: (hint, the :class:`Way` that makes it), in the order they are
    named."""
    padding = ("padding entered the mean: the loss is sum(per_token * mask) / mask.sum() over "
               "the whole batch; a position outside the completion mask (prompt padding, "
               "after the EOS) adds nothing and is not counted")
    normaliser = ("each micro-batch was divided by its own token count (a per-micro-batch "
                  "mean): divide every micro-batch's masked sum by the whole batch's token "
                  "count, mask.sum() over all N rows, so that the micro-batches add up to the "
                  "full batch's token mean")
    return [
        ("no shift: the logits at position p predict token p + 1, so the completion token t "
         "is scored by the logits one position earlier (logits[:, P - 1:-1], not "
         "logits[:, P:])", Way(shift=False)),
        ("the prompts' left padding was attended: pass the attention mask (the prompt's, then "
         "the completion's) to the forward pass, as to generate", Way(attention=False)),
        (padding, Way(norm="positions")),
        (padding, Way(norm="unmasked")),
        ("the mask ran past the end of the completions: the model's eos ids may be a list "
         "(policy.generation_config.eos_token_id, here [<eos>, </answer>]) and a completion "
         "ends at the first of any (torch.isin); a mask from tok.eos_token_id alone (or none) "
         "keeps the padding after </answer>", Way(mask="tok_eos")),
        (normaliser, Way(norm="micro_tokens")),
        (normaliser, Way(norm="micro_mean")),
        ("that is the mean of each sequence's token mean (the GRPO paper's 1/|o_i|); the drill "
         "divides by the whole batch's token count, as grpo_step_plain (DAPO's token mean)",
         Way(norm="sequences")),
        ("old_logp came from the sampler (generate's scores): in the trainer it is the "
         "trainer's own forward before the update, and with one update per batch that is "
         "logp.detach(), so the ratio is 1 with the gradient of pi_theta",
         Way(old="sampler")),
        ("old_logp is not logp.detach(): with one update per batch pi_old is pi_theta, so "
         "old_logp = logp.detach() (a constant such as ref_logp moves the ratio off 1 and "
         "the clip bites)", Way(old="ref")),
        ("old_logp = logp without .detach(): the ratio exp(logp - old_logp) is then 1 with no "
         "gradient, and the surrogate adds nothing; detach it", Way(old="logp")),
        ("the KL's sign is flipped: k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1, "
         "log(pi_ref / pi_theta), not exp(logp - ref_logp) - ...", Way(kl="flipped")),
        ("that is k1 (logp - ref_logp), not k3 = exp(d) - d - 1 with d = ref_logp - logp",
         Way(kl="k1")),
        ("that is k2 ((logp - ref_logp)^2 / 2), not k3 = exp(d) - d - 1 with "
         "d = ref_logp - logp", Way(kl="k2")),
        ("k3 was weighted by the ratio (TRL's bias-corrected KL); the drill is DeepSeekMath's "
         "plain k3, added as beta * k3", Way(kl="ratio_k3")),
        ("beta * k3 was subtracted: the KL is a penalty, loss = -surrogate + beta * k3",
         Way(kl="minus")),
        ("the surrogate's sign is flipped: the loss is -min(ratio * A, clip(ratio) * A) (+ "
         "beta * k3), so that a descent step raises the advantage-weighted log-probs",
         Way(sign=-1)),
        ("the gradient of the previous call was still in .grad: call optimizer.zero_grad() "
         "at the start of the step (once, before the first micro-batch)",
         Way(zero_grad="never")),
        ("zero_grad() ran inside the micro-batch loop: only the last micro-batch's gradient "
         "was left for the step. Zero once, before the loop", Way(zero_grad="inside")),
        ("the optimizer stepped once per micro-batch: accumulate every micro-batch's "
         "gradient, then clip and step once, after the loop", Way(step="per_micro")),
        ("the gradient was clipped after each micro-batch's backward: clip the whole batch's "
         "gradient once, after the last backward, just before optimizer.step()",
         Way(clip="per_micro")),
        ("no gradient clip: torch.nn.utils.clip_grad_norm_(policy.parameters(), "
         "max_grad_norm) after the loop, before optimizer.step()", Way(clip="none")),
        ("the advantages were grouped over the wrong axis: the rows are prompt-major (prompt 0's "
         "G completions, then prompt 1's), so the groups are r.view(B, G) (r.view(-1, G)), "
         "normalised along dim 1", Way(adv="wrong_axis")),
        ("the advantages (n,) were broadcast over the tokens' axis (adv[rows] against (n, T) "
         "lines A up with the positions when n == T): each row's advantage covers its "
         "tokens, adv[rows, None], shape (n, 1)", Way(adv="tokens")),
        ("that is the population std (ddof 0, unbiased=False); the drill uses torch's "
         "default, Bessel's (ddof 1), as grpo_step_plain", Way(adv="population")),
        ("the advantages were normalised over the whole batch: GRPO normalises within each "
         "prompt's group of G, r.view(-1, G)", Way(adv="batch")),
        ("the answers were tiled (answers * G), not repeated: row i is prompt i // G's, so "
         "each answer is repeated G times in a row", Way(adv="tiled")),
        ("the EOS is left out of the mask: stopping is an action the policy took; keep the "
         "completion up to and including the first EOS", Way(mask="before_eos")),
        ("a mask from y != pad_token_id: where pad == eos it drops the EOS itself; build it "
         "from the position of the first EOS (cumsum minus the token itself == 0)",
         Way(mask="pad_ne")),
        ("the EOS count ran over the prompt too: where pad == eos the prompts' left padding "
         "counts as an EOS and masks out every padded row's completion; count the EOS in the "
         "completion's columns only", Way(mask="row_cumsum")),
    ]


# --- running one case ----------------------------------------------------------------------------

class _Watch:
    """Records what the reader's step sampled and asked rewards for."""

    def __init__(self, policy):
        self.generated, self.rewards = [], []
        original = policy.generate

        def generate(*args, **kwargs):
            out = original(*args, **kwargs)
            seq = getattr(out, "sequences", out)
            if hasattr(seq, "detach"):
                self.generated.append(seq.detach().clone())
            return out
        policy.generate = generate

    def reward_fn(self, texts, answers):
        self.rewards.append((list(texts) if isinstance(texts, (list, tuple)) else texts,
                             list(answers) if isinstance(answers, (list, tuple)) else answers))
        return reward_fn(texts, answers)


@dataclass
class _Run:
    """What a step did on one case: the update (flat float64), the loss returned, and for
    the reader's step what it sampled and what it asked rewards for."""
    delta: np.ndarray
    after: np.ndarray
    loss: object
    scale: float = 0.0
    watch: _Watch | None = None
    ref_moved: bool = False


def _limit() -> float:
    return LIMIT_FACTOR * harness.TIME_LIMIT_S


def _call(step, case: StepCase, *, limit_s=None, **extra):
    """Run ``step`` on a fresh setup of ``case`` (twice where ``case.again``): (a _Run, the
    problem or None)."""
    torch = _torch()
    policy, ref, optimizer, tok, prompts, answers = _setup(case)
    ref_before = _flat(ref)
    watch = _Watch(policy)
    threads = torch.get_num_threads()

    def work(seed):
        torch.set_num_threads(1)
        return step(policy, ref, optimizer, tok, copy.deepcopy(prompts), list(answers),
                    watch.reward_fn, **{**case.kwargs, "seed": seed}, **extra)

    seeds = [case.seed] + ([case.again] if case.again is not None else [])
    deltas, afters, out = [], [], None
    try:
        for seed in seeds:
            w0 = _flat(policy)
            out, exc = in_thread(lambda s=seed: work(s), _limit() if limit_s is None else limit_s)
            if exc is harness.TIMED_OUT:
                return None, (f"did not finish within {_limit():g} s (an endless loop? one "
                              "step on this model takes about 0.2 s)")
            if exc is not None:
                return None, f"raised {exception_text(exc)}"
            afters.append(_flat(policy))
            deltas.append(afters[-1] - w0)
            if not np.isfinite(afters[-1]).all():          # NaN weights: no second call
                afters += [afters[-1]] * (len(seeds) - len(afters))
                deltas += [deltas[-1]] * (len(seeds) - len(deltas))
                break
    finally:
        torch.set_num_threads(threads)
    return _Run(np.concatenate(deltas), np.concatenate(afters), out, watch=watch,
                ref_moved=not np.array_equal(_flat(ref), ref_before)), None


@functools.lru_cache(maxsize=None)
def _expected(i: int) -> _Run:
    """grpo_step_plain on case ``i``."""
    import grpo_lab.hf as glh
    case = CASES[i]
    run, problem = _call(glh.grpo_step_plain, case, limit_s=600)
    if problem:
        raise RuntimeError(f"the plain step failed on {case.where}: {problem}")
    run.scale = float(np.abs(run.delta).max())
    return run


@functools.lru_cache(maxsize=None)
def _variant(i: int, way: Way) -> _Run | None:
    """step_variant(way) on case ``i``; None where it fails (a way that does not apply)."""
    run, problem = _call(functools.partial(step_variant, way=way), CASES[i], limit_s=600)
    return None if problem else run


def _weights():
    _, model, _ = _world()
    return [(name, tuple(p.shape)) for name, p in model.named_parameters()]


def _excess(a: _Run, b: _Run) -> np.ndarray:
    """|a's update - b's| beyond a float32 weight's own rounding (4 units of its last place:
    the update is read as the difference of two rounded weights)."""
    with np.errstate(invalid="ignore"):
        return np.abs(a.delta - b.delta) - 2.0**-21 * np.abs(b.after)


def _gap(a: _Run, b: _Run, scale: float) -> float:
    """The largest difference of the updates, beyond rounding, relative to ``scale``."""
    if not np.isfinite(a.delta).all():
        return np.inf
    return max(float(_excess(a, b).max()), 0.0) / scale


def _where_in_weights(j: int) -> str:
    """The parameter entry ``j`` of the flat update (past the end: the second call's)."""
    n_all = sum(int(np.prod(shape)) for _, shape in _weights())
    call = " in the second call" if j >= n_all else ""
    j %= n_all
    for name, shape in _weights():
        n = int(np.prod(shape))
        if j < n:
            return f"{name}{[int(k) for k in np.unravel_index(j, shape)]}{call}"
        j -= n
    return f"entry {j}"


def _loss_value(out):
    """The reader's loss as a float, or the problem with it."""
    torch = _torch()
    if isinstance(out, bool) or out is None:
        return None, f"returned {text_of(out)}, expected the loss summed over the micro-batches " \
                     "(a float)"
    if isinstance(out, torch.Tensor):
        if out.numel() != 1:
            return None, (f"returned a tensor of shape {tuple(out.shape)}, expected the loss "
                          "summed over the micro-batches (a float)")
        if out.requires_grad:
            return None, ("returned a tensor that requires grad: total += loss keeps every "
                          "micro-batch's graph alive; add loss.item() (a float)")
        out = out.item()
    if isinstance(out, (int, float, np.floating, np.integer)):
        return float(out), None
    return None, (f"returned {type(out).__name__}, expected the loss summed over the "
                  "micro-batches (a float)")


# --- the checks of one case, in the order of the step --------------------------------------------

def _check_rewards(run, case, expected):
    want_answers = expected.watch.rewards[0][1]
    if not run.watch.rewards:
        return None
    texts, answers = run.watch.rewards[0]
    if answers != want_answers:
        tiled = [a for _ in range(case.G) for a in [sum(t) for t in case.terms]]
        if answers == tiled:
            return None                              # the weights say it, with its hint
        return (f"on {case.where} reward_fn was given the answers {text_of(answers)}, expected "
                f"{want_answers}: row i is prompt i // G's completion, so each answer is "
                "repeated G times in a row")
    return None


def _explain(i, run, expected, tol) -> list[str]:
    """The first usual mistake whose update matches the reader's on case ``i``, shows there
    (its update is not the right one) and does not show on the cases before (which the
    reader's step passed)."""
    for hint, way in step_mistakes():
        v = _variant(i, way)
        if v is None or _gap(v, expected, expected.scale) <= tol:
            continue                                 # the mistake does not show on this case
        if _gap(run, v, expected.scale) > tol:
            continue
        if all(_variant(k, way) is not None
               and _gap(_variant(k, way), _expected(k), _expected(k).scale) <= tol
               for k in range(i)):
            return [hint]
    return []


def _broadcast_note(problem: str, case: StepCase) -> str:
    sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)",
                      problem)
    if sizes is None:
        return ""
    n = {min(case.micro_size, len(case.terms) * case.G - k)
         for k in range(0, len(case.terms) * case.G, case.micro_size)}
    a, b = int(sizes[1]), int(sizes[2])
    if {a, b} & n and {a, b} & {case.max_new_tokens}:
        return (" (its sizes are a micro-batch's rows and the completion length T: the "
                "advantages (n,) met the (n, T) per-token terms. Broadcast each row's advantage "
                "over its tokens: adv[rows, None], shape (n, 1))")
    return ""


def _check_case(i, fn, say):
    case = CASES[i]
    expected = _expected(i)
    run, problem = _call(fn, case)
    if problem:
        wrong_call = any(w in problem for w in ("unexpected keyword argument",
                                                "positional argument", "required keyword"))
        return say(False, f"on {case.where} your function {problem}"
                   + _broadcast_note(problem, case)
                   + (f" (the drill's signature is {SIGNATURE})" if wrong_call else ""))
    loss, problem = _loss_value(run.loss)
    if problem:
        return say(False, f"on {case.where} your function {problem}")
    if run.ref_moved:
        return say(False, f"on {case.where} the reference model's weights changed: ref is "
                          "frozen (its log-probs are computed under torch.no_grad(), and only "
                          "the policy's parameters are in the optimizer)")
    n = len(expected.delta) // len(expected.watch.generated or [0])
    first_right = _gap(_Run(run.delta[:n], run.after[:n], None),
                       _Run(expected.delta[:n], expected.after[:n], None),
                       expected.scale) <= REL_TOL
    problem = _samples_problem(run, expected, case, calls=len(expected.watch.generated)
                               if first_right else 1)
    if problem:
        return say(False, problem)
    problem = _check_rewards(run, case, expected)
    if problem:
        return say(False, problem)
    tol = REL_TOL
    gap = _gap(run, expected, expected.scale)
    if gap > tol:
        hints = _explain(i, run, expected, tol)
        if not np.isfinite(run.delta).all():
            what = ("the weights after your step hold NaN or inf"
                    + ("" if hints else ": an all-equal group has std 0, so (r - mean) / std "
                       "is 0 / 0 without the + 1e-4 (std + 1e-4)"))
        else:
            j = int(np.argmax(_excess(run, expected)))
            what = (f"the update of {_where_in_weights(j)} is {run.delta[j]:.6g}, expected "
                    f"{expected.delta[j]:.6g} (grpo_step_plain's)")
        step_word = "second " if case.again is not None else ""
        return say(False, f"on {case.where} {what}" + (
            f": {hints[0]}" if hints else
            f" (the largest difference is {gap:.2g} of the largest update entry, the tolerance "
            f"{tol:g}): compare your {step_word}step with grpo_step_plain stage by stage"))
    want = float(expected.loss)
    loss_tol = 1e-5 * (abs(want) + 1e-2)
    if abs(loss - want) > loss_tol:
        last = _variant(i, Way(total="last")).loss
        mean = _variant(i, Way(total="mean")).loss
        note = (": that is the last micro-batch's loss; return the sum over the micro-batches"
                if abs(loss - last) <= loss_tol else
                ": that is the mean of the micro-batches' losses; return their sum (each is "
                "already divided by the whole batch's token count)"
                if abs(loss - mean) <= loss_tol else
                ": return the sum of the micro-batches' loss.item() values")
        return say(False, f"on {case.where} the weights are right but the loss returned is "
                          f"{loss!r}, expected {want!r}{note}")
    return None


def _samples_problem(run, expected, case, calls):
    """The first call's samples; the second call's too where the first step was right (a
    wrong first step moves the weights the second call samples from)."""
    want = expected.watch.generated[:calls]
    for k, got in enumerate(run.watch.generated[:len(want)]):
        w = want[k]
        if tuple(got.shape) != tuple(w.shape) or not bool((got == w).all()):
            which = " (the second call)" if k else ""
            return (f"on {case.where}{which} the samples differ from grpo_step_plain's "
                    f"(policy.generate gave {tuple(got.shape)} ids, expected {tuple(w.shape)}"
                    f"{', other tokens' if tuple(got.shape) == tuple(w.shape) else ''}): "
                    "encode each prompt with tok.apply_chat_template(p, "
                    "add_generation_prompt=True), repeat it G times in a row, pad on the left "
                    "with tok.pad_token_id, then torch.manual_seed(seed) right before "
                    "policy.generate(input_ids=..., attention_mask=..., do_sample=True, "
                    "temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, "
                    "pad_token_id=tok.pad_token_id, eos_token_id="
                    "policy.generation_config.eos_token_id)")
    return None                # fewer calls: sampled some other way, the weights will tell


def check_grpo_step(fn, *, verbose=True) -> bool:
    """Check ``fn(policy, ref, optimizer, tok, prompts, answers, reward_fn, *, G, beta, eps,
    max_new_tokens, micro_size, max_grad_norm, seed) -> loss``: one GRPO step on a Hugging Face
    causal LM, as :func:`grpo_lab.hf.grpo_step_plain` does it (``std_eps`` 1e-4, temperature
    1), returning the loss summed over the micro-batches (a float).

    Runs it and ``grpo_step_plain`` on copies of one small warmed-up model with SGD (lr
    :data:`LR`) on :data:`CASES`, and compares the samples drawn, the answers given to
    ``reward_fn``, the weights after the step (within :data:`REL_TOL` of the largest update
    entry) and the loss returned; a difference in the weights is named when it is one of
    :func:`step_mistakes`.
    """
    say = verdict(verbose, fn)
    for i in range(len(CASES)):
        failed = _check_case(i, fn, say)
        if failed is not None:
            return failed
    return say(True, "samples, mask, rewards and group advantages, the shifted log-probs, "
                     "old_logp = logp.detach(), k3 against the reference, micro-batches over the "
                     "whole batch's token count, the clip and one step: the weights and the "
                     "loss equal grpo_step_plain's on ragged prompts, truncated completions, "
                     "a list of eos ids, pad == eos, a second call and an active clip")
