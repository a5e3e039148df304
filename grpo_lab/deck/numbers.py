"""The numbers the deck's first 45 cards quote, each computed by the package's own functions.

One provider per group of cards (the topics of chapter 9); each returns exactly the names it
declares (see :mod:`grpo_lab.deck.registry`). Inputs such as G = 8 or a pass rate of 0.9 are
settings the cards state (their ``given``); everything computed from them is here.
"""

from __future__ import annotations

import numpy as np

import grpo_lab as gl
from grpo_lab.deck.registry import provides


def _plain_advantages(r, eps=1e-8):
    """The formula as usually written, in ``r``'s dtype (no shift, no float64 statistics)."""
    eps = np.asarray(eps, dtype=r.dtype)
    return (r - r.mean(axis=-1, keepdims=True)) / (r.std(axis=-1, keepdims=True) + eps)


@provides("p_equal", "bessel_ratio", "eps_in_fp16", "tiny_scaled", "tiny_centred",
          "seven_f32", "seven_f64", "G_needed")
def _advantages():
    p_equal = gl.group_stats.zero_spread_probability(8, 0.9)         # G = 8, pass rate 0.9
    one_right = np.array([[1.0, 0.0, 0.0, 0.0]])                     # G = 4, one success
    bessel_ratio = (gl.group_advantages(one_right, eps=0.0, ddof=1)[0, 0]
                    / gl.group_advantages(one_right, eps=0.0, ddof=0)[0, 0])
    tiny = np.array([[0.51, 0.50, 0.49, 0.50]])                      # a reward model's shrug
    seven_f32 = _plain_advantages(np.full((1, 7), 0.7, dtype=np.float32))[0, 0]   # all-equal
    seven_f64 = _plain_advantages(np.full((1, 7), 0.7))[0, 0]
    G_needed = 2
    while gl.group_stats.zero_spread_probability(G_needed, 0.1) > 0.1:           # pass rate 0.1
        G_needed += 1
    return {
        "p_equal": float(p_equal),
        "bessel_ratio": float(bessel_ratio),
        "eps_in_fp16": float(gl.round_trip(1e-8, "float16")),
        "tiny_scaled": float(np.abs(gl.group_advantages(tiny)).max()),
        "tiny_centred": float(np.abs(gl.group_advantages(tiny, scale="none")).max()),
        "seven_f32": float(seven_f32),
        "seven_f64": float(abs(seven_f64)),
        "G_needed": G_needed,
    }


@provides("mem_ppo", "mem_grpo", "mem_saved", "mem_saved_share", "clip_pos", "clip_pos_high",
          "clip_neg", "clip_neg_dual", "grpo_weight_ratio", "drift", "gspo_ratio")
def _ppo():
    n = 7_000_000_000
    mem = {m: sum(sum(s.values()) for s in gl.training_memory(m, n).values()) / 1e9
           for m in ("ppo", "grpo")}
    ratio = np.array([[1.5, 5.0]])                                   # two tokens' ratios
    logp, old = np.log(ratio), np.zeros((1, 2))
    adv = np.array([[1.0, -1.0]])
    clip_sym = gl.clipped_surrogate_loss(logp, old, adv)
    clip_dapo = gl.clipped_surrogate_loss(logp, old, adv, eps_high=0.28, dual_clip=3.0)
    w = gl.aggregation_weights(np.arange(100)[None, :] < np.array([[10], [100]]), "grpo")
    seq = gl.sequence_ratio(np.full((1, 1000), np.log(1.01)), np.zeros((1, 1000)),
                            np.ones((1, 1000), dtype=bool))[0]
    return {
        "mem_ppo": float(mem["ppo"]),
        "mem_grpo": float(mem["grpo"]),
        "mem_saved": float(mem["ppo"] - mem["grpo"]),
        "mem_saved_share": float((mem["ppo"] - mem["grpo"]) / mem["ppo"]),
        "clip_pos": float(clip_sym[0, 0]),
        "clip_pos_high": float(clip_dapo[0, 0]),
        "clip_neg": float(clip_sym[0, 1]),
        "clip_neg_dual": float(clip_dapo[0, 1]),
        "grpo_weight_ratio": float(w[0, 0] / w[1, 0]),               # short token / long token
        "drift": float(np.exp(1000 * np.log(1.01))),                 # 1000 tokens, 1% each
        "gspo_ratio": float(seq),
    }


@provides("k1_rel_std", "k3_rel_std", "k2_bias", "k3_naive_err")
def _kl():
    row = {mu: gl.kl_theory.gaussian_estimator_moments(mu) for mu in (0.1, 1.0)}
    rel_std = {k: row[0.1][k]["std"] / row[0.1]["kl"] for k in ("k1", "k3")}
    d = -1e-6                                                        # a tiny log-ratio
    naive = np.exp(-d) + d - 1
    exact = gl.kl_k3(np.full(1, d), np.zeros(1))[0]                  # kl_k3(logp, ref_logp)
    return {
        "k1_rel_std": float(rel_std["k1"]),
        "k3_rel_std": float(rel_std["k3"]),
        "k2_bias": float(row[1.0]["k2"]["mean"] / row[1.0]["kl"] - 1),
        "k3_naive_err": float(abs(naive - exact) / exact),
    }


@provides("u16", "ub16", "bf16_coarser", "fp16_max", "fp16_exp_overflow", "bf16_sum",
          "fp16_tiny", "fp16_half_tiny", "lsm_err")
def _precision():
    u16, ub16 = gl.unit_roundoff("float16"), gl.unit_roundoff("bfloat16")
    fp16_max = float(gl.round_trip(65504.0, "float16"))
    acc = np.zeros((), dtype=gl.as_dtype("bfloat16"))                # a bfloat16 running sum
    for _ in range(4096):
        acc = (acc + np.asarray(-1.0, dtype=acc.dtype)).astype(acc.dtype)
    fp16_tiny = float(gl.round_trip(2.0 ** -24, "float16"))         # the smallest subnormal
    # a max-shifted log-softmax whose sum runs in bfloat16, as chapter 4 measures it
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=2.0, size=(4, 32_000))                 # (N, V), chapter 4's batch
    logits[:, :50] += 8.0                                            # a few likely tokens
    logits[0, 0] = 25.0                                              # one confident row
    z = logits.astype(gl.as_dtype("bfloat16"))
    shifted = z - z.max(axis=-1, keepdims=True)
    bf16_lsm = (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float64)
    return {
        "u16": float(u16),
        "ub16": float(ub16),
        "bf16_coarser": float(ub16 / u16),
        "fp16_max": fp16_max,
        "fp16_exp_overflow": float(np.log(fp16_max)),                # exp(z) > 65504 past this
        "bf16_sum": float(acc),
        "fp16_tiny": fp16_tiny,
        "fp16_half_tiny": fp16_tiny / 2,
        "lsm_err": float(np.abs(bf16_lsm - gl.log_softmax(z.astype(np.float64))).max()),
    }


@provides("hack_contains", "hack_accuracy", "overlong_mid")
def _rewards():
    hack = "<think>guess</think><answer>1213141516</answer>"
    penalty = gl.overlong_penalty([16384, 18432, 20480], max_len=20480, cache_len=4096)
    return {
        "hack_contains": float(gl.rewards.contains_reward(hack, 14)),
        "hack_accuracy": float(gl.accuracy_reward(hack, 14)),
        "overlong_mid": float(penalty[1]),
    }


@provides("diag_names", "ridge_fp32", "loss_intensity", "loss_us", "loss_mb", "launch_us",
          "h100_fp32_tflops", "h100_tb_per_s", "trl_G", "verl_G", "verl_steps", "orl_steps",
          "verl_c", "orl_kl_coef", "se_8")
def _loop():
    rng = np.random.default_rng(0)
    B, G, T = 2, 4, 6                                                # prompts, group, tokens
    rewards = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])  # (B, G)
    adv = gl.group_advantages(rewards).reshape(B * G)                # (B*G,)
    mask = np.arange(T)[None, :] < rng.integers(2, T + 1, size=(B * G, 1))   # (B*G, T)
    old_logp = np.log(rng.uniform(0.05, 1.0, size=(B * G, T)))        # (B*G, T)
    logp = old_logp + rng.normal(0, 0.2, size=(B * G, T))
    ref_logp = old_logp + rng.normal(0, 0.05, size=(B * G, T))
    _, diag = gl.grpo_loss(logp, old_logp, ref_logp, adv, mask)

    roofline = gl.roofline                                           # chapter 7's arithmetic
    gpu = roofline.H100_SXM
    n_loss, t_loss = 512, 2048
    loss_bytes = roofline.loss_min_bytes(n_loss, t_loss)
    defaults = {(system, key): value for row in gl.presets.KNOB_MAP
                for system, key, value in (row.defaults or ())}
    return {
        "diag_names": ", ".join(diag),
        "ridge_fp32": float(gpu.fp32_flops / gpu.hbm_bytes_per_s),  # flop/byte, CUDA cores
        "loss_intensity": float(roofline.LOSS_FLOPS_PER_TOKEN * n_loss * t_loss / loss_bytes),
        "loss_us": float(loss_bytes / gpu.hbm_bytes_per_s * 1e6),
        "loss_mb": float(loss_bytes / 1e6),
        "launch_us": float(gpu.launch_s * 1e6),
        "h100_fp32_tflops": float(gpu.fp32_flops / 1e12),
        "h100_tb_per_s": float(gpu.hbm_bytes_per_s / 1e12),
        "trl_G": int(defaults["trl", "num_generations"]),
        "verl_G": int(defaults["verl", "actor_rollout_ref.rollout.n"]),
        "verl_steps": int(defaults["verl", "data.train_batch_size"]
                          // defaults["verl", "actor_rollout_ref.actor.ppo_mini_batch_size"]),
        "orl_steps": int(defaults["openrlhf", "--rollout.batch_size"]
                         // defaults["openrlhf", "--train.batch_size"]),
        "verl_c": float(defaults["verl", "actor_rollout_ref.actor.clip_ratio_c"]),
        "orl_kl_coef": float(defaults["openrlhf", "--algo.kl.init_coef"]),
        "se_8": float(1 / np.sqrt(8)),
    }


@provides("cap_rare", "cap_rare_high", "cap_common", "base_p1", "base_p64", "sharp_p1",
          "sharp_p64", "g2_adv", "g2_bessel", "g2_waste_05", "g2_waste_01", "logits_gb32",
          "logits_gb16", "chunk_gb", "useful_all", "useful_kept", "kept_share", "shaped_std",
          "shaped_none", "fmt_adv")
def _expert():
    # where the clip stops pushing a token with A > 0 (from the second update on a rollout)
    caps = {(p, eps): p * (1 + eps) for p in (0.01, 0.5) for eps in (0.2, 0.28)}
    # pass@k = 1 - (1 - p)^k per problem, averaged: a base model and a sharpened one
    base = np.array([0.5] * 5 + [0.02] * 5)                          # pass rates, ten problems
    sharp = np.array([0.95] * 5 + [0.0] * 5)                         # RL lost the rare ones
    pass_at = {(name, k): float(np.mean(1 - (1 - p) ** k))
               for name, p in (("base", base), ("sharp", sharp)) for k in (1, 64)}
    g2 = gl.group_advantages([[1.0, 0.0]])[0]
    g2_bessel = gl.group_advantages([[1.0, 0.0]], ddof=1)[0]
    # the logits of one batch: B*G sequences x T tokens x V vocabulary
    n_seq, t_len, v_vocab = 16 * 8, 4096, 152_064                    # Qwen2.5-7B's vocab_size
    # difficulty filtering: pass rates of a prompt set, U-shaped as RL data often is
    rng = np.random.default_rng(0)
    p_prompts = rng.beta(0.3, 0.3, size=20_000)                      # many always / never solved
    useful = 1 - p_prompts ** 8 - (1 - p_prompts) ** 8               # P(a group of 8 has spread)
    keep = (p_prompts > 0.05) & (p_prompts < 0.95)
    # a shaping reward inside an all-correct group
    shaped = 1.0 - 1e-4 * np.array([[1.0, 1.2, 0.9, 1.1]])          # tiny length penalties
    fmt = np.array([[1.1, 1.1, 1.1, 1.0]])                           # one missed the format
    return {
        "cap_rare": float(caps[0.01, 0.2]),
        "cap_rare_high": float(caps[0.01, 0.28]),
        "cap_common": float(caps[0.5, 0.2]),
        "base_p1": pass_at["base", 1],
        "base_p64": pass_at["base", 64],
        "sharp_p1": pass_at["sharp", 1],
        "sharp_p64": pass_at["sharp", 64],
        "g2_adv": float(g2[0]),
        "g2_bessel": float(g2_bessel[0]),
        "g2_waste_05": float(gl.group_stats.zero_spread_probability(2, 0.5)),
        "g2_waste_01": float(gl.group_stats.zero_spread_probability(2, 0.1)),
        "logits_gb32": float(n_seq * t_len * v_vocab * 4 / 1e9),
        "logits_gb16": float(n_seq * t_len * v_vocab * 2 / 1e9),
        "chunk_gb": float(1024 * v_vocab * 4 / 1e9),                 # 1024 token rows, float32
        "useful_all": float(useful.mean()),
        "useful_kept": float(useful[keep].mean()),
        "kept_share": float(keep.mean()),
        "shaped_std": float(np.abs(gl.group_advantages(shaped)).max()),
        "shaped_none": float(np.abs(gl.group_advantages(shaped, scale="none")).max()),
        "fmt_adv": float(gl.group_advantages(fmt)[0, 3]),
    }
