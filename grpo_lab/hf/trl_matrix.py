r"""TRL 1.16.0's GRPOTrainer, option by option, against the book's functions through the mapping.

Taught in chapter 8, section "TRL, option by option" (``chapters/08_production_knobs.ipynb``).
For each option in :data:`OPTIONS` :func:`run_option` trains a fresh in-code model (one layer,
width 32, no warm start) with TRL's real ``GRPOTrainer`` for one optimizer step, or two where
the option needs ratios off 1 (``num_iterations=2``), records what every ``_compute_loss``
call receives, the loss and its gradient (before TRL's clip), and TRL's advantages with the
rewards they came from, then recomputes them with :func:`grpo_lab.hf.trl_loss` and
:func:`grpo_lab.hf.trl_advantages` on the knobs :func:`grpo_lab.hf.trl_knobs` reads from the
trainer's ``GRPOConfig``. The reward is a deterministic hash of the decoded text
(:func:`text_hash_reward`): the equalities need rewards that vary within each group, not a
trained model. :func:`needs` and :func:`unexercised` check that each option acted (a non-zero
KL term, ratios off 1, a truncated completion, masked entries, ragged micro-batches).

vLLM is not needed for the IS modes: after the trainer is built, ``use_vllm`` is switched on
and the single-turn generation returns ``generate``'s completions with the sampler's log-probs
(the trainer's own, plus seeded noise of a bfloat16 kernel's size); TRL's code then builds the
IS ratios and applies them in its loss.

``python -m grpo_lab.hf.trl_matrix --write`` regenerates the record chapter 8 renders
(``trl_matrix.json`` beside this file); ``--report`` re-runs every option against the installed
TRL and prints which options changed (run it in a virtual environment with a newer TRL wheel).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

RECORD = Path(__file__).with_name("trl_matrix.json")
#: Tolerances of the matrix: loss and gradient (absolute, largest entry), advantages.
TOL, ADV_TOL = 1e-6, 1e-5
_GT = "grpo_trainer.py"

#: Every option: GRPOConfig fields over :data:`BASE`, TRL's formula and line, the book's call.
OPTIONS = {
    "loss_type=grpo": (dict(loss_type="grpo"), "mean_i (1/L_i) sum_t l_it", f"{_GT}:3153-3157",
                       "glt.grpo_loss(agg='grpo')"),
    "loss_type=bnpo": (dict(loss_type="bnpo", gradient_accumulation_steps=2,
                            per_device_train_batch_size=4),
                       "sum l / sum m per micro-batch, / accumulation", f"{_GT}:3158-3162",
                       "glt.grpo_loss(agg='bnpo') per micro-batch (gl.hf.micro_mean_weights)"),
    "loss_type=dr_grpo": (dict(loss_type="dr_grpo"), "sum l / (N max_completion_length)",
                          f"{_GT}:3163-3167", "glt.grpo_loss(agg='dr_grpo', max_len=max_len)"),
    "loss_type=dapo": (dict(loss_type="dapo"), "sum l / (num_items_in_batch ga / spg)",
                       f"{_GT}:3168-3174", "glt.grpo_loss(agg='dapo') x tokens share"),
    "loss_type=cispo": (dict(loss_type="cispo", epsilon_high=5.0),
                        "-sg(min(r, epsilon_high)) A logp", f"{_GT}:3109-3111",
                        "glt.neighbours.cispo_loss(eps_low=None, eps_high=cap - 1)"),
    "loss_type=sapo": (dict(loss_type="sapo"), "-sigmoid(tau (r - 1)) 4/tau A",
                       f"{_GT}:3121-3124", "glt.neighbours.sapo_loss"),
    "loss_type=luspo": (dict(loss_type="luspo", importance_sampling_level="sequence"),
                        "mean_i sum_t l_it", f"{_GT}:3175-3181",
                        "glt.grpo_loss(agg='dr_grpo') x max_len"),
    "loss_type=vespo": (dict(loss_type="vespo"), "-sg(phi(w)) A logp, phi = e^lam w^k e^-lam w",
                        f"{_GT}:2972-3017, 3125-3136", "glt.token_selection.vespo_weight"),
    "level=token": (dict(loss_type="grpo", importance_sampling_level="token"),
                    "r = exp(logp - old)", f"{_GT}:3084-3085", "glt.grpo_loss(level='token')"),
    "level=sequence (GSPO)": (dict(loss_type="grpo", importance_sampling_level="sequence",
                                   epsilon=3e-4, epsilon_high=4e-4),
                              "s = exp(mean_t (logp - old))", f"{_GT}:3086-3088",
                              "glt.grpo_loss(level='sequence')"),
    "scale_rewards=group": (dict(scale_rewards="group"), "(r - mean_g) / (std_g + 1e-4)",
                            f"{_GT}:2767-2788", "glt.group_advantages(scale='group', ddof=1)"),
    "scale_rewards=batch": (dict(scale_rewards="batch"), "(r - mean_g) / (std_batch + 1e-4)",
                            f"{_GT}:2774-2788", "glt.group_advantages(scale='batch', ddof=1)"),
    "scale_rewards=none": (dict(scale_rewards="none"), "r - mean_g", f"{_GT}:2785-2787",
                           "glt.group_advantages(scale='none')"),
    "beta>0, bias-corrected KL": (dict(beta=0.04, use_bias_correction_kl=True),
                                  "+ beta r k3", f"{_GT}:3097-3105, 3149-3150",
                                  "glt.grpo_loss(beta, kl='k3', kl_bias_correction=True)"),
    "beta>0, plain k3": (dict(beta=0.04, use_bias_correction_kl=False), "+ beta k3",
                         f"{_GT}:3097-3102", "glt.grpo_loss(beta, kl='k3')"),
    "epsilon, epsilon_high": (dict(epsilon=0.02, epsilon_high=0.03),
                              "clip(r, 1 - eps, 1 + eps_high)", f"{_GT}:3113",
                              "glt.grpo_loss(eps_low, eps_high)"),
    "delta (two-sided clip)": (dict(epsilon=0.02, epsilon_high=0.03, delta=1.02),
                               "coef_1 = min(r, delta)", f"{_GT}:3115-3116",
                               "glt.grpo_loss(eps_high=min(eh, delta - 1), "
                               "dual_clip=max(delta, 1 + eh))"),
    "top_entropy_quantile=0.2": (dict(top_entropy_quantile=0.2), "l x 1[H >= Q_0.8(H)]",
                                 f"{_GT}:1380-1415, 3049-3052, 3143-3144",
                                 "glt.token_selection.high_entropy_mask folded into A"),
    "mask_truncated_completions": (dict(mask_truncated_completions=True, max_completion_length=7),
                                   "m = 0 on a completion without EOS", f"{_GT}:2487-2495",
                                   "rows dropped, still counted in N"),
    "normalize_then_sum": (dict(multi_objective_aggregation="normalize_then_sum",
                                reward_weights=[1.0, 0.5]),
                           "sum_k w_k norm_g(r_k), then norm_batch", f"{_GT}:2790-2799",
                           "gl.normalise_then_sum(eps=1e-4, ddof=1)"),
    "gradient_accumulation_steps=2": (dict(gradient_accumulation_steps=2,
                                           per_device_train_batch_size=4),
                                      "micro-batch share of num_items_in_batch", f"{_GT}:3168-3174",
                                      "gl.hf.micro_weights"),
    "steps_per_generation=4": (dict(gradient_accumulation_steps=2, per_device_train_batch_size=4,
                                    steps_per_generation=4, num_iterations=1),
                               "num_items_in_batch x ga / spg", f"{_GT}:3171-3173",
                               "gl.hf.micro_weights over the optimizer step"),
    "vllm IS token_truncate": (dict(_vllm="token_truncate"), "l x min(max(w, c_min), c_max)",
                               f"{_GT}:2660-2684, 3146-3147", "gl.hf.is_weights folded into A"),
    "vllm IS token_mask": (dict(_vllm="token_mask"), "l x w 1[c_min <= w <= c_max]",
                           f"{_GT}:2686-2701", "gl.hf.is_weights folded into A"),
    "vllm IS sequence_truncate": (dict(_vllm="sequence_truncate"), "l x clamp(prod_t w)",
                                  f"{_GT}:2667-2684", "gl.hf.is_weights folded into A"),
    "vllm IS sequence_mask": (dict(_vllm="sequence_mask"), "l x prod_t w 1[in range]",
                              f"{_GT}:2667-2701", "gl.hf.is_weights folded into A"),
    "off_policy_mask_threshold": (dict(_vllm="token_truncate", off_policy_mask_threshold=0.02),
                                  "l x 1[A >= 0 or mean(log pi_smp - logp) <= delta]",
                                  f"{_GT}:2945-2969, 3141-3142",
                                  "glt.token_selection.off_policy_sequence_mask folded into A"),
}

#: The common settings: 2 prompts x G = 4 per optimizer step, two steps on one batch.
BASE = dict(num_generations=4, per_device_train_batch_size=8, max_completion_length=8,
            num_iterations=2, learning_rate=2e-2, beta=0.0)
#: The sampler's noise in the simulated vLLM run (a bfloat16 kernel's log-prob error is ~1e-2)
#: and the IS clip bounds, chosen so that every mode clips or masks some tokens.
SAMPLER_NOISE, IS_CLIP = 0.15, dict(vllm_importance_sampling_clip_min=0.8,
                                    vllm_importance_sampling_clip_max=1.25)


#: The smallest in-code model that still runs every option (one decoder layer, width 32):
#: random weights, no warm start. The equalities need varied rewards, not a trained model.
MODEL = dict(hidden_size=32, n_layer=1, n_head=2)
#: The sampler's bias on EOS's logit (``generate``'s ``sequence_bias``, passed through
#: ``GRPOConfig.generation_kwargs``): about half the completions then end before
#: ``max_completion_length`` (none in 8 on the untouched random model), so rows are ragged and
#: some truncate. It changes which completions are sampled, never a log-prob TRL or the book
#: computes (both read the model's own logits).
EOS_BIAS = 2.5


@functools.lru_cache(maxsize=2)
def setup(seed: int = 0):
    """The chapter's tokenizer and task and a freshly initialised in-code model (:data:`MODEL`),
    built once per process; the runs train copies of it."""
    import grpo_lab as gl
    import grpo_lab.hf as glh

    tok = glh.build_tokenizer()
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=seed)
    return tok, task, glh.build_model(tok, seed=seed, **MODEL)


def _text(c):
    return c if isinstance(c, str) else c[-1]["content"]


def text_hash_reward(prompts, completions, **kwargs):
    """A deterministic reward of the decoded text, ``crc32(text) mod 5 / 4`` in {0, ..., 1}, with
    TRL's signature. Not a task reward: the matrix proves TRL's arithmetic equal to the book's,
    which needs rewards that vary across a group's completions (an untrained model scores 0 on
    the task), and the same text always scores the same (no clock, no process-seeded hash)."""
    return [(zlib.crc32(_text(c).encode()) % 5) / 4 for c in completions]


def text_length_reward(prompts, completions, **kwargs):
    """The second reward of the two-reward option: the decoded text's length in characters."""
    return [float(len(_text(c))) for c in completions]


class MatrixCapture:
    """Every ``_compute_loss`` call (each micro-batch of every optimizer step: inputs, weights,
    loss, gradient), and every generation's advantages with the rewards (N, K) TRL computed
    them from. ``limit`` caps the calls recorded."""

    def __init__(self, limit: int = 8):
        self.limit, self.calls, self.generations, self._rewards = limit, [], [], None

    def attach(self, trainer):
        rewards, generate = trainer._calculate_rewards, trainer._generate_and_score_completions
        compute_loss = trainer._compute_loss

        def rewards_hook(*a, **k):
            self._rewards = rewards(*a, **k)
            return self._rewards

        def generate_hook(inputs):
            out = generate(inputs)
            self.generations.append((self._rewards.detach().clone(),
                                     out["advantages"].detach().clone()))
            return out

        def loss_hook(model, inputs):
            if len(self.calls) >= self.limit:
                return compute_loss(model, inputs)
            inner = trainer.accelerator.unwrap_model(model)            # DDP's module
            state = {k: v.detach().clone() for k, v in inner.state_dict().items()}
            loss = compute_loss(model, inputs)
            named = [(n, p) for n, p in inner.named_parameters() if p.requires_grad]
            grads = torch.autograd.grad(loss, [p for _, p in named], retain_graph=True,
                                        allow_unused=True)
            self.calls.append(dict(
                micro_step=trainer._step, state=state, loss=float(loss.detach()),
                inputs={k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                        for k, v in inputs.items()},
                grads={n: torch.zeros_like(p) if g is None else g.detach().clone()
                       for (n, p), g in zip(named, grads)}))
            return loss

        trainer._calculate_rewards = rewards_hook
        trainer._generate_and_score_completions = generate_hook
        trainer._compute_loss = loss_hook
        return self


def simulate_vllm(trainer, *, noise: float = SAMPLER_NOISE, seed: int = 0):
    """Make ``trainer`` take TRL's vLLM branch without vLLM: ``use_vllm`` on, and the single-turn
    generation returns ``generate``'s completions with sampler log-probs (the model's own at
    the trainer's temperature, plus N(0, noise) per token, seeded)."""
    original = trainer._generate_single_turn
    gen = torch.Generator().manual_seed(seed)

    def single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        trainer.use_vllm = False
        try:
            ids, _ = original(prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images)
        finally:
            trainer.use_vllm = True
        model, tau, out = trainer.model, trainer.args.temperature, []
        with torch.no_grad():
            for p, c in zip(prompt_ids, ids):
                x = torch.tensor([list(p) + list(c)], device=model.device)
                logits = model(input_ids=x).logits[0, len(p) - 1:-1].float() / tau   # (T, V)
                lp = torch.log_softmax(logits, -1).gather(-1, x[0, len(p):, None])[:, 0]
                noisy = lp.cpu() + noise * torch.randn(len(c), generator=gen)       # (T,)
                out.append(noisy.clamp(max=0.0).tolist())                       # log-probs <= 0
        return ids, out

    trainer._generate_single_turn = single_turn
    trainer.use_vllm = trainer.args.use_vllm = True
    return trainer


def build_trainer(model, tok, task, fields: dict, *, folder, seed: int = 0, max_steps: int = 2):
    """TRL's GRPOTrainer for :data:`BASE` plus ``fields`` (``_vllm``: an IS mode, simulated)."""
    import grpo_lab.hf as glh
    from grpo_lab.hf.trl_run import trl_trainer

    fields = {**BASE, "generation_kwargs": {"sequence_bias": [[[tok.eos_token_id], EOS_BIAS]]},
              **fields}
    mode = fields.pop("_vllm", None)
    if mode is not None:
        fields.update(vllm_importance_sampling_mode=mode, **IS_CLIP)
    if fields.get("multi_objective_aggregation") == "normalize_then_sum":
        reward_funcs = [text_hash_reward, text_length_reward]
    else:
        reward_funcs = [text_hash_reward]
    trainer = trl_trainer(model, tok, glh.addition_dataset(task), reward_funcs, folder=folder,
                          max_steps=max_steps, seed=seed, **fields)
    if mode is not None:
        simulate_vllm(trainer, seed=seed)
    return trainer


#: Options whose numbers need no ratio off 1 (the advantages, which tokens count, the
#: normaliser): one optimizer step on one generation; every other option takes two
#: (``num_iterations=2``, so the second step's ratios leave 1).
ONE_STEP = ("scale_rewards=group", "scale_rewards=batch", "scale_rewards=none",
            "normalize_then_sum", "mask_truncated_completions", "top_entropy_quantile=0.2",
            "gradient_accumulation_steps=2")
#: What shows that an option acted, beyond what its knobs imply (:func:`needs`).
ACTS = {"level=sequence (GSPO)": ("clipped",), "epsilon, epsilon_high": ("clipped",),
        "delta (two-sided clip)": ("above_delta",)}


def needs(knobs, option: str = "") -> tuple:
    """The counts :func:`book_check` must find non-zero for ``option`` to be exercised:
    ``kl`` (beta > 0: the KL term is not 0), ``ratio_dev`` (ratios off 1), ``truncated`` and
    ``kept`` (completions masked whole and not), ``entropy_dropped``, ``is_zeroed`` (vLLM's
    mask modes), ``is_capped`` (its truncate modes), ``off_policy_dropped``, ``ragged_micro``
    (an optimizer step's micro-batches of different token counts), ``clipped`` (ratios outside
    the clip's band) and ``above_delta``."""
    k, out = knobs, list(ACTS.get(option, ()))
    out += ["kl"] if k.beta else []
    out += ["ratio_dev"] if k.num_iterations > 1 or k.steps_per_generation > k.accumulation else []
    out += ["truncated", "kept"] if k.mask_truncated else []
    out += ["entropy_dropped"] if k.entropy_quantile < 1 else []
    if k.is_mode is not None:
        out += ["is_zeroed" if k.is_mode.endswith("mask") else "is_capped"]
    out += ["off_policy_dropped"] if k.off_policy_threshold is not None else []
    out += ["ragged_micro"] if k.accumulation > 1 else []
    return tuple(out)


def _exercise(k, x, logp, entropy) -> dict:
    """What one ``_compute_loss`` call exercised (counts of entries, largest deviations)."""
    import grpo_lab.hf as glh

    from grpo_lab import torch as glt
    from grpo_lab.torch.token_selection import high_entropy_mask, off_policy_sequence_mask

    m = x["completion_mask"].to(logp.dtype)                                 # (n, T)
    valid, lp = m.bool(), logp.detach()
    out = dict(truncated=int((m.sum(1) == 0).sum()), kept=int((m.sum(1) > 0).sum()))
    old, ref = x.get("old_per_token_logps"), x.get("ref_per_token_logps")
    old = lp if old is None else old
    out["ratio_dev"] = float((lp - old).abs()[valid].max()) if valid.any() else 0.0
    out["kl"] = float(glt.kl_k3(lp, ref).abs()[valid].max()) if ref is not None else 0.0
    rows = m.sum(1) > 0
    if k.level == "token":
        r = torch.exp(lp - old)[valid]
    else:
        r = glt.sequence_ratio(lp[rows], old[rows], m[rows])
    out["clipped"] = int(((r < 1 - k.eps_low) | (r > 1 + k.eps_high)).sum())
    out["above_delta"] = int((r > k.dual_clip).sum()) if k.dual_clip else 0
    out["entropy_dropped"] = int((valid & ~high_entropy_mask(entropy, m, k.entropy_quantile))
                                 .sum()) if k.entropy_quantile < 1 and valid.any() else 0
    out["is_zeroed"] = out["is_capped"] = out["off_policy_dropped"] = 0
    if k.is_mode is not None and rows.any():
        w = glh.is_weights(old[rows], x["sampling_per_token_logps"][rows], m[rows],
                           mode=k.is_mode, clip_min=k.is_clip_min, clip_max=k.is_clip_max)
        w = w if w.dim() == 2 else w.reshape(-1, 1).expand_as(m[rows])        # (n', T)
        on = m[rows].bool()
        out["is_zeroed"] = int(((w == 0) & on).sum())
        out["is_capped"] = int(((w == k.is_clip_max) & on).sum())
    if k.off_policy_threshold is not None and rows.any():
        keep = off_policy_sequence_mask(x["advantages"][rows], lp[rows],
                                        x.get("sampling_per_token_logps", old)[rows], m[rows],
                                        k.off_policy_threshold)
        out["off_policy_dropped"] = int((keep == 0).sum())
    out["tokens"] = int(m.sum())
    return out


def book_check(trainer, capture, *, num_processes: int = 1, option: str = "") -> dict:
    """The largest differences between TRL's recorded numbers and the book's, through the
    mapping: ``loss``, ``grad`` (absolute, largest entry), ``adv``; ``grad_max`` and ``calls``
    for scale; and what the run exercised (:func:`needs`: summed counts, largest deviations,
    ``micro_tokens`` the tokens of each call)."""
    import grpo_lab.hf as glh

    knobs = glh.trl_knobs(trainer.args)
    diffs = dict(loss=0.0, grad=0.0, adv=0.0, grad_max=0.0, calls=len(capture.calls),
                 needs=list(needs(knobs, option)), micro_tokens=[])
    seen = {}
    for call in capture.calls:
        model = type(trainer.model)(trainer.model.config)
        model.load_state_dict(call["state"])
        model.to(call["inputs"]["prompt_ids"].device).train()
        x = call["inputs"]
        ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
        mask = torch.cat([x["prompt_mask"], x["completion_mask"]], 1)
        logp, h = glh.completion_logprobs(model, ids, mask, x["completion_ids"].shape[1],
                                          temperature=knobs.temperature, entropy=True)
        loss = glh.trl_loss(knobs, logp, x, entropy=h.detach(), num_processes=num_processes)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
        for (n, p), g in zip(named, grads):
            g = torch.zeros_like(p) if g is None else g
            diffs["grad"] = max(diffs["grad"], float((g - call["grads"][n]).abs().max()))
            diffs["grad_max"] = max(diffs["grad_max"], float(call["grads"][n].abs().max()))
        diffs["loss"] = max(diffs["loss"], abs(float(loss.detach()) - call["loss"]))
        for key, v in _exercise(knobs, x, logp, h.detach()).items():
            seen[key] = max(seen.get(key, 0), v) if isinstance(v, float) else seen.get(key, 0) + v
        diffs["micro_tokens"].append(int(x["completion_mask"].sum()))
    diffs.update({key: round(v, 9) if isinstance(v, float) else v for key, v in seen.items()})
    ga, t = knobs.accumulation, diffs["micro_tokens"]
    diffs["ragged_micro"] = sum(len(set(t[i:i + ga])) > 1 for i in range(0, len(t), ga))
    for rewards, adv in capture.generations:
        ours = glh.trl_advantages(knobs, rewards.cpu())                       # (N_all,)
        rank = trainer.accelerator.process_index
        n = adv.shape[0]
        diffs["adv"] = max(diffs["adv"], float((ours[rank * n:(rank + 1) * n].float()
                                                 - adv.cpu()).abs().max()))
    diffs["rewards_distinct"] = len({round(float(v), 9) for r, _ in capture.generations
                                     for v in r.reshape(-1)})
    return diffs


def unexercised(row) -> list:
    """The counts of ``row["needs"]`` that came out 0: what the run did not exercise."""
    return [name for name in row["needs"] if not row.get(name)]


def run_option(name: str, prepared=None, *, seed: int = 0) -> dict:
    """Run option ``name`` of :data:`OPTIONS` (one optimizer step if in :data:`ONE_STEP`, else
    two) and return :func:`book_check`'s differences with the option's TRL formula, its line
    and the book's call."""
    import grpo_lab.hf as glh

    fields, formula, where, book = OPTIONS[name]
    fields, steps = dict(fields), 2
    if name in ONE_STEP:
        fields, steps = {"num_iterations": 1, **fields}, 1
    tok, task, initial = prepared or setup(seed)
    model = glh.frozen_copy(initial).requires_grad_(True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo_lab_matrix_") as folder:
        trainer = build_trainer(model, tok, task, fields, folder=folder, seed=seed,
                                max_steps=steps)
        capture = MatrixCapture().attach(trainer)
        trainer.train()
        diffs = book_check(trainer, capture, option=name)
    diffs.update(option=name, trl=formula, where=where, book=book, steps=steps,
                 accumulation=trainer.args.gradient_accumulation_steps,
                 seconds=round(time.perf_counter() - start, 2))
    return diffs


def run_matrix(names=None, *, seed: int = 0, out=sys.stdout, keep_going: bool = False) -> list:
    """Every option (or ``names``), one row each, printed as it runs. With ``keep_going`` an
    option that raises (a newer TRL renamed what the capture hooks) gives a row with its
    ``error`` instead of stopping the matrix."""
    prepared = setup(seed)
    rows = []
    for name in names or OPTIONS:
        try:
            row = run_option(name, prepared, seed=seed)
        except Exception as err:                              # reported, never hidden
            if not keep_going:
                raise
            row = dict(option=name, error=f"{type(err).__name__}: {err}")
            print(f"{name:30s} {row['error']}", file=out, flush=True)
            rows.append(row)
            continue
        rows.append(row)
        acted = ", ".join(f"{k} {row[k]:.3g}" for k in row["needs"])
        print(f"{name:30s} loss {row['loss']:.1e}  grad {row['grad']:.1e}  adv {row['adv']:.1e}"
              f"  ({row['seconds']:.1f} s){'  ' + acted if acted else ''}", file=out, flush=True)
    return rows


def verdict(row) -> str:
    """``equal`` for a row within tolerance whose option acted, else ``CHANGED`` and why."""
    if "error" in row:
        return f"CHANGED ({row['error']})"
    if not passes(row):
        return (f"CHANGED (loss {row['loss']:.1e}, grad {row['grad']:.1e} of "
                f"{row['grad_max']:.1e}, adv {row['adv']:.1e})")
    missing = unexercised(row)
    return f"CHANGED (did not act: {', '.join(missing)})" if missing else "equal"


def passes(row) -> bool:
    """Whether a row agrees within the matrix's tolerances: loss and advantages absolute, the
    gradient relative to its largest entry where that exceeds 1 (plain k3's gradient,
    1 - pi_ref / pi_theta, reaches 47 on this run; float32 gives it 7.6e-6 absolute)."""
    return (row["loss"] < TOL and row["grad"] < TOL * max(1.0, row["grad_max"])
            and row["adv"] < ADV_TOL)


#: The two-process run: beta > 0 and two iterations, TRL's dapo (its normaliser is per process).
DISTRIBUTED = dict(beta=0.04, loss_type="dapo", num_iterations=2)


def run_distributed(out_dir, *, seed: int = 0) -> dict:
    """One rank of ``torchrun --nproc_per_node 2 -m grpo_lab.hf.trl_matrix --distributed DIR``:
    TRL's trainer on this rank's share of each generation batch (groups whole, rewards gathered
    before the advantages), checked against the book over the whole batch; writes
    ``DIR/rank{r}.json``. The model folder the reference loads from is one both ranks share
    (:func:`grpo_lab.hf.shared_folder`), removed at the end."""
    import shutil

    import grpo_lab.hf as glh
    from accelerate import PartialState

    tok, task, warm = setup(seed)
    model = glh.frozen_copy(warm).requires_grad_(True)
    folder = glh.shared_folder()
    state = PartialState()
    try:
        trainer = build_trainer(model, tok, task, dict(DISTRIBUTED, per_device_train_batch_size=4),
                                folder=folder, seed=seed)
        capture = MatrixCapture().attach(trainer)
        trainer.train()
        diffs = book_check(trainer, capture, num_processes=state.num_processes)
    finally:
        state.wait_for_everyone()
        if state.is_main_process:
            shutil.rmtree(folder, ignore_errors=True)
        state.wait_for_everyone()                   # every rank then sees the folder gone
    diffs.update(rank=state.process_index, processes=state.num_processes,
                 rows=int(capture.calls[0]["inputs"]["completion_ids"].shape[0]),
                 num_items=[float(c["inputs"]["num_items_in_batch"]) for c in capture.calls],
                 local_tokens=[float(c["inputs"]["completion_mask"].sum()) for c in capture.calls],
                 folder_left=os.path.exists(folder))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"rank{state.process_index}.json").write_text(json.dumps(diffs))
    return diffs


def main(argv=None) -> int:
    import trl

    parser = argparse.ArgumentParser(prog="python -m grpo_lab.hf.trl_matrix", description=(
        "Run TRL's GRPOTrainer option by option against the book's functions."))
    parser.add_argument("--write", action="store_true", help=f"rewrite {RECORD.name}")
    parser.add_argument("--report", action="store_true",
                        help="print which options changed against the record")
    parser.add_argument("--only", nargs="*", help="option names (default: all)")
    parser.add_argument("--distributed", metavar="DIR", help="run one rank of the two-process "
                        "check under torchrun and write DIR/rank{r}.json")
    a = parser.parse_args(argv)
    if a.write and a.only:
        parser.error("--write rewrites the whole record: leave out --only")
    unknown = sorted(set(a.only or ()) - set(OPTIONS))
    if unknown:
        parser.error(f"--only: unknown option(s) {unknown}; expected names of OPTIONS")
    if a.distributed:
        return 0 if passes(run_distributed(a.distributed)) else 1
    torch.set_num_threads(1)                # a 1-layer model: a second thread only waits
    torch.manual_seed(0)
    start = time.perf_counter()
    rows = run_matrix(a.only, keep_going=a.report)
    seconds = time.perf_counter() - start
    changed = [r["option"] for r in rows if verdict(r) != "equal"]
    if a.report:
        old = json.loads(RECORD.read_text())
        print(f"TRL {trl.__version__} against the record's TRL {old['trl_version']} "
              f"({seconds:.0f} s)")
        for r in rows:
            print(f"  {verdict(r):8s}  {r['option']}")
        print(f"{len(changed)} of {len(rows)} options changed" + (": " + ", ".join(changed)
                                                                  if changed else ""))
    if a.write and not changed:
        RECORD.write_text(json.dumps(dict(trl_version=trl.__version__, seconds=round(seconds, 1),
                                          tolerance=dict(loss=TOL, grad=TOL, adv=ADV_TOL),
                                          rows=rows), indent=1) + "\n")
    elif a.write:
        print(f"not written: {', '.join(changed)} changed", file=sys.stderr)
    return 1 if changed else 0

if __name__ == "__main__":
    sys.exit(main())
