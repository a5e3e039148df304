"""The numbers of the deck's newer cards (``cards/20_*.toml`` to ``cards/22_*.toml``).

Each provider computes what one card quotes, with the package's own functions, on small
seeded inputs that the card states (its ``given``). The names carry the card's prefix, so
that they cannot collide with the providers of the first 45 cards (``numbers.py``):

======  ==========================================  ======  ===============================
prefix  card                                        prefix  card
======  ==========================================  ======  ===============================
z0_     the loss is about 0 at the start            lora_   the reference under LoRA
sh_     the one-position shift                      akl_    adaptive KL controllers
ent_    entropy from logits                         mfu_    MFU of training and rollout
dz_     the gradient over the logits                rpp_    REINFORCE++
dec_    decode: compute-bound batch, tokens/s       remax_  ReMax
acc_    normalisers under accumulation and DP       rloo_   RLOO
dpo_    GRPO against DPO                            gae_    VC-PPO / VAPO's GAE lambdas
gspo_   GSPO's sequence weight                      cispo_  CISPO
cov_    the entropy mechanism                       sapo_   SAPO
bf_     a bf16 update that rounds to nothing        ls_     loss scaling for fp16
======  ==========================================  ======  ===============================

Where the package has no function for a trainer's formula (the adaptive KL controller of
Ziegler et al. 2019 as OpenRLHF 0.11.2 and verl 0.9.1 write it), the provider writes that one
line and says where it is read from.
"""

from __future__ import annotations

import numpy as np

import grpo_lab as gl
from grpo_lab.deck.registry import provides

# --- the loss at the start of a run (06b) ----------------------------------------------------

#: one group of G = 4, pass/fail rewards; the two correct completions are the long ones
Z0_REWARDS = [[1.0, 1.0, 0.0, 0.0]]
Z0_LENGTHS = (6, 8, 2, 4)
Z0_BETA = 0.04


def _ragged_mask(lengths, T):
    """(N, T) boolean mask with lengths[i] valid tokens at the start of row i."""
    return np.arange(T)[None, :] < np.asarray(lengths)[:, None]


def z0_batch(seed=0):
    """(logp, mask, adv) of the start-of-run example: logp seeded, A from the rewards."""
    rng = np.random.default_rng(seed)
    T = max(Z0_LENGTHS)
    mask = _ragged_mask(Z0_LENGTHS, T)                                # (4, 8)
    logp = np.log(rng.uniform(0.05, 0.95, size=mask.shape))           # (4, 8)
    adv = gl.group_advantages(Z0_REWARDS).reshape(-1)                 # (4,)
    return logp, mask, adv


@provides("z0_grpo", "z0_dapo", "z0_kl_loss", "z0_kl_term", "z0_grad_norm", "z0_adv")
def _loss_at_start():
    logp, mask, adv = z0_batch()
    # step 0: old_logp = logp (one update per batch), the policy is still the reference
    grpo, _ = gl.grpo_loss(logp, logp, logp, adv, mask, beta=Z0_BETA, agg="grpo")
    dapo, _ = gl.grpo_loss(logp, logp, logp, adv, mask, beta=Z0_BETA, agg="dapo")
    # a few steps later: the policy has drifted from the reference by d ~ N(0, 0.1) per token
    d = np.random.default_rng(1).normal(0.0, 0.1, size=logp.shape)
    kl_loss, stats = gl.grpo_loss(logp, logp, logp - d, adv, mask, beta=Z0_BETA, agg="grpo")
    # the gradient over log pi at ratio 1: -A_i times the token's aggregation weight
    grad = -adv[:, None] * gl.aggregation_weights(mask, "grpo")       # (4, 8)
    return {"z0_grpo": float(grpo), "z0_dapo": float(dapo), "z0_kl_loss": float(kl_loss),
            "z0_kl_term": float(Z0_BETA * stats["mean_kl"]),
            "z0_grad_norm": float(np.linalg.norm(grad)), "z0_adv": float(adv[0])}


# --- the one-position shift (06b) ------------------------------------------------------------

SH_VOCAB, SH_PEAK = 50, 8.0


@provides("sh_shifted", "sh_unshifted")
def _shift():
    """A 'model' whose logits at position p put SH_PEAK on the token at p + 1: read with the
    shift it is nearly certain; read without it (logits at p for the token at p) it is not."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, SH_VOCAB, size=12)                          # (L,) prompt + completion
    logits = np.zeros((ids.size, SH_VOCAB))
    logits[np.arange(ids.size - 1), ids[1:]] = SH_PEAK                # predicts the next token
    shifted = gl.token_logprobs(logits[:-1], ids[1:])                 # (L-1,) position p -> p+1
    unshifted = gl.token_logprobs(logits, ids)                        # (L,) the off-by-one bug
    return {"sh_shifted": float(shifted.mean()), "sh_unshifted": float(unshifted[1:].mean())}


# --- entropy from logits (06b) ---------------------------------------------------------------

def entropy_from_logits(z):
    """H = -sum_v pi_v log pi_v from the package's stable log-softmax, 0 log 0 taken as 0."""
    lsm = gl.log_softmax(np.asarray(z, dtype=np.float64))
    p = np.exp(lsm)
    return -np.where(p > 0, p * lsm, 0.0).sum(axis=-1)


@provides("ent_large", "ent_naive_large", "ent_masked", "ent_max_qwen")
def _entropy():
    import torch                                                      # chapter 6b's function

    from grpo_lab import hf
    large = np.array([1000.0, 1000.0, 0.0, 0.0])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        p = np.exp(large) / np.exp(large).sum()                       # inf / inf: NaN
        naive = float(-(p * np.log(p)).sum())
    z = torch.tensor([[1000.0, 1000.0, 0.0, 0.0],
                      [0.0, 0.0, -float("inf"), -float("inf")]], dtype=torch.float64)
    h = hf.token_entropy(z)
    V = gl.cost_model.QWEN25_7B.vocab
    return {"ent_large": float(h[0]), "ent_naive_large": naive, "ent_masked": float(h[1]),
            "ent_max_qwen": float(entropy_from_logits(np.zeros(V)))}


# --- dL/dz = g (onehot(y) - softmax(z)) (07) ----------------------------------------------------

@provides("dz_fd_error", "dz_row_sum")
def _logit_gradient():
    rng = np.random.default_rng(0)
    z, y, g = rng.normal(size=5), 2, -0.7                             # V = 5, g = dL/dlogp
    analytic = g * (np.eye(5)[y] - np.exp(gl.log_softmax(z)))
    h = 1e-6
    logp = lambda x: float(gl.token_logprobs(x[None, :], np.array([y]))[0])   # one position
    numeric = np.array([(logp(z + h * e) - logp(z - h * e)) * g / (2 * h) for e in np.eye(5)])
    return {"dz_fd_error": float(np.abs(analytic - numeric).max()),
            "dz_row_sum": float(abs(analytic.sum()))}


# --- decode on an H100: the compute-bound batch and tokens/s (07) -----------------------------

DEC_CONTEXT = 1024          # tokens of KV cache per sequence


def decode_tokens_per_s(batch, context=DEC_CONTEXT, gpu=None):
    """Tokens/s of one decode step of ``batch`` sequences at ``context`` cached tokens each,
    priced by chapter 7's cost model (``gl.cost_model.decode_cost``, one step)."""
    gpu = gpu or gl.roofline.H100_SXM
    c = gl.cost_model.decode_cost(gl.cost_model.QWEN25_7B, gpu, np.ones(batch, dtype=int),
                                  context)
    return batch / (c["weights"] + c["kv"])


@provides("dec_ridge", "dec_ridge_eff", "dec_cross", "dec_cross_eff", "dec_tps_1",
          "dec_tps_64", "dec_tps_256", "dec_weights_gb")
def _decode():
    cm, h100 = gl.cost_model, gl.roofline.H100_SXM
    model = cm.QWEN25_7B
    return {"dec_ridge": cm.ridge_point(h100), "dec_ridge_eff": cm.ridge_point(h100, cm.EFFICIENCY),
            "dec_cross": cm.crossover_batch(model, h100, DEC_CONTEXT),
            "dec_cross_eff": cm.crossover_batch(model, h100, DEC_CONTEXT, cm.EFFICIENCY),
            "dec_tps_1": decode_tokens_per_s(1), "dec_tps_64": decode_tokens_per_s(64),
            "dec_tps_256": decode_tokens_per_s(256),
            "dec_weights_gb": 2 * cm.param_counts(model)["matmul"] / 1e9}


# --- loss normalisation under accumulation and data parallelism (06b) --------------------------

ACC_LENGTHS = ((2, 3), (8, 7))          # two micro-batches (or two ranks) of two sequences


@provides("acc_global", "acc_buggy", "acc_w_short", "acc_w_long", "acc_w_right")
def _accumulation():
    rng = np.random.default_rng(0)
    T = max(max(b) for b in ACC_LENGTHS)
    parts = [_ragged_mask(b, T) for b in ACC_LENGTHS]                 # (2, T) each
    losses = [rng.normal(size=m.shape) for m in parts]
    whole = gl.aggregate_loss(np.concatenate(losses), np.concatenate(parts), "dapo")
    K = len(parts)
    buggy = sum(gl.aggregate_loss(l, m, "dapo") for l, m in zip(losses, parts)) / K
    w = [gl.aggregation_weights(m, "dapo")[m].max() / K for m in parts]   # 1 / (K n_k)
    right = gl.aggregation_weights(np.concatenate(parts), "dapo")[np.concatenate(parts)].max()
    return {"acc_global": float(whole), "acc_buggy": float(buggy), "acc_w_short": float(w[0]),
            "acc_w_long": float(w[1]), "acc_w_right": float(right)}


# --- GRPO against DPO (02) ----------------------------------------------------------------------

@provides("dpo_start_loss", "dpo_pair_gb", "ppo_four_gb")
def _dpo():
    # DPO's loss on a pair at the start (policy = reference): -log sigmoid(0) = log 2
    start = float(np.ravel(gl.logsumexp(np.zeros(2)))[0])             # log(1 + e^0)
    P = gl.cost_model.param_counts(gl.cost_model.QWEN25_7B)["total"]
    two = gl.training_memory("grpo", P, reward_model=False)           # policy + reference
    four = gl.training_memory("ppo", P)                               # + critic + reward model
    return {"dpo_start_loss": start,
            "dpo_pair_gb": sum(sum(s.values()) for s in two.values()) / 1e9,
            "ppo_four_gb": sum(sum(s.values()) for s in four.values()) / 1e9}


# --- GSPO's sequence weight against token weights (02) ----------------------------------------

GSPO_SIGMA = 0.2            # spread of the token log-ratios after a few updates


@provides("gspo_tok_min", "gspo_tok_max", "gspo_s", "gspo_s_long")
def _gspo():
    rng = np.random.default_rng(0)
    d = rng.normal(0.0, GSPO_SIGMA, size=(2, 512))                   # log rho, two sequences
    old = np.log(rng.uniform(0.05, 0.95, size=d.shape))
    mask = _ragged_mask((16, 512), 512)                               # 16 and 512 tokens
    rho = np.exp(d[0, :16])
    s = gl.sequence_ratio(old + d, old, mask)                         # (2,) geometric means
    return {"gspo_tok_min": float(rho.min()), "gspo_tok_max": float(rho.max()),
            "gspo_s": float(s[0]), "gspo_s_long": float(s[1])}


# --- the entropy mechanism (06) -----------------------------------------------------------------

COV_LOGITS = (2.0, 1.0, 0.0, -1.0)     # one state, four tokens
COV_ETA = 0.1


def entropy_step(logits, adv, eta=COV_ETA):
    """(Delta H, -eta Cov_pi(log pi, A)) for one natural-gradient step z <- z + eta A."""
    z, a = np.asarray(logits, dtype=np.float64), np.asarray(adv, dtype=np.float64)
    lp = gl.log_softmax(z)
    p = np.exp(lp)
    cov = (p * (lp - (p * lp).sum()) * (a - (p * a).sum())).sum()
    return float(entropy_from_logits(z + eta * a) - entropy_from_logits(z)), float(-eta * cov)


@provides("cov_dh_likely", "cov_pred_likely", "cov_dh_rare", "cov_pred_rare", "cov_h0")
def _entropy_mechanism():
    likely = entropy_step(COV_LOGITS, (1.0, 0.0, 0.0, 0.0))           # A > 0 on the favourite
    rare = entropy_step(COV_LOGITS, (0.0, 0.0, 0.0, 1.0))             # A > 0 on the rarest
    return {"cov_dh_likely": likely[0], "cov_pred_likely": likely[1],
            "cov_dh_rare": rare[0], "cov_pred_rare": rare[1],
            "cov_h0": float(entropy_from_logits(np.array(COV_LOGITS)))}


# --- the reference under LoRA (06b) --------------------------------------------------------------

LORA_RANK = 16


def lora_params(model, rank=LORA_RANK):
    """LoRA's trainable parameters on every linear map of every layer (q, k, v, o, gate, up,
    down): rank x (fan-in + fan-out) each."""
    d, kv, inter = model.hidden, model.kv_heads * model.head_dim, model.intermediate
    per_layer = rank * ((d + d) * 2 + (d + kv) * 2 + (d + inter) * 3)
    return model.layers * per_layer


@provides("lora_ref_gb", "lora_full_gb", "lora_gb", "lora_params_m")
def _lora():
    model = gl.cost_model.QWEN25_7B
    P = gl.cost_model.param_counts(model)["total"]
    full = gl.training_memory("grpo", P, reward_model=False)          # policy 16P + reference 2P
    n = lora_params(model)
    adapter = gl.training_memory("grpo", n, reward_model=False, reference=False)["policy"]
    frozen = gl.training_memory("grpo", P, reward_model=False)["reference"]   # the base, bf16
    return {"lora_ref_gb": sum(full["reference"].values()) / 1e9,
            "lora_full_gb": sum(sum(s.values()) for s in full.values()) / 1e9,
            "lora_gb": (sum(frozen.values()) + sum(adapter.values())) / 1e9,
            "lora_params_m": n / 1e6}


# --- adaptive KL controllers (03) ---------------------------------------------------------------

# n counts sequences (OpenRLHF passes rollout.batch_size * n_samples_per_prompt,
# ppo_trainer.py:253): 1024 prompts x G = 8
AKL_HORIZON, AKL_N_STEPS = 10000, 1024 * 8


def adaptive_kl_multiplier(kl, target, n_steps=AKL_N_STEPS, horizon=AKL_HORIZON):
    """One update of Ziegler et al. 2019's controller as OpenRLHF 0.11.2 and verl 0.9.1 write it
    (``AdaptiveKLController.update``): beta *= 1 + clip(kl / target - 1, -0.2, 0.2) n / H."""
    return 1 + float(np.clip(kl / target - 1, -0.2, 0.2)) * n_steps / horizon


@provides("akl_mult_high", "akl_steps_double", "akl_mult_low", "akl_n", "akl_batches_double")
def _adaptive_kl():
    up = adaptive_kl_multiplier(2.0, 1.0)                             # KL twice the target
    down = adaptive_kl_multiplier(0.5, 1.0)                           # half the target
    steps = float(np.log(2) / np.log(up))                             # batches to double beta
    return {"akl_mult_high": up, "akl_steps_double": steps, "akl_mult_low": down,
            "akl_n": AKL_N_STEPS, "akl_batches_double": int(np.ceil(steps))}


# --- MFU of training and rollout (07) ---------------------------------------------------------

MFU_CASES = {"node": dict(prompts=64, G=8, T=1024, gpus=8),
             "one": dict(prompts=64, G=8, T=1024, gpus=1),
             "tail": dict(prompts=64, G=8, T=4096, skew=4.0, gpus=8)}


@provides("mfu_node", "mfu_one", "mfu_tail", "mfu_decode", "mfu_train")
def _mfu():
    cm, h100 = gl.cost_model, gl.roofline.H100_SXM
    model = cm.QWEN25_7B
    out = {}
    for name, kw in MFU_CASES.items():
        cost = cm.grpo_step_cost(model, h100, **kw)
        out[f"mfu_{name}"] = 100 * cm.step_mfu(model, h100, cost, **kw)
    # decode alone (8 engines of 64): its useful flops (2 per matmul weight per token) over
    # its time at the peak; and the training passes alone, at 6 flops per parameter per token
    kw = MFU_CASES["node"]
    cost = cm.grpo_step_cost(model, h100, **kw)
    n = kw["prompts"] * kw["G"] // kw["gpus"]
    lengths = cm.completion_lengths(n, kw["T"])
    decode_flops = 2 * cm.param_counts(model)["matmul"] * lengths.sum()
    decode_s = cost["decode: weights"] + cost["decode: KV cache"]
    train_s = cost["policy forward + backward"]
    train_cost = {"policy forward + backward": train_s}
    out["mfu_decode"] = 100 * float(decode_flops / (decode_s * h100.bf16_flops))
    out["mfu_train"] = 100 * cm.step_mfu(model, h100, train_cost, **kw)
    return out


# --- the neighbours (08) --------------------------------------------------------------------------

RPP_REWARDS = [[0.51, 0.50, 0.49, 0.50], [1.0, 0.0, 1.0, 0.0]]


@provides("rpp_grpo_small", "rpp_small", "rpp_grpo_big", "rpp_big", "rpp_solved")
def _reinforce_pp():
    grpo = gl.group_advantages(RPP_REWARDS)
    rpp = gl.neighbours.reinforce_pp_advantages(RPP_REWARDS, baseline="group_mean")
    solved = gl.neighbours.reinforce_pp_advantages([[1, 1, 1, 1], [0, 0, 0, 0]])
    return {"rpp_grpo_small": float(grpo[0, 0]), "rpp_small": float(rpp[0, 0]),
            "rpp_grpo_big": float(grpo[1, 0]), "rpp_big": float(rpp[1, 0]),
            "rpp_solved": float(solved[0, 0])}


@provides("remax_pass_fail", "remax_pass_pass", "remax_fail_pass")
def _remax():
    # two prompts, two samples each; greedy completions: right on the first, wrong on the second
    adv = gl.neighbours.remax_advantages([[1.0, 0.0], [1.0, 1.0]], [1.0, 0.0])
    return {"remax_pass_fail": float(adv[0, 1]), "remax_pass_pass": float(adv[0, 0]),
            "remax_fail_pass": float(adv[1, 0])}


RLOO_REWARDS = [[1.0, 0.0, 0.0, 0.0]]


@provides("rloo_win", "rloo_lose", "mean_win", "mean_lose", "rloo_factor")
def _rloo():
    loo = gl.group_advantages(RLOO_REWARDS, baseline="leave_one_out", scale="none")
    mean = gl.group_advantages(RLOO_REWARDS, scale="none")
    return {"rloo_win": float(loo[0, 0]), "rloo_lose": float(loo[0, 1]),
            "mean_win": float(mean[0, 0]), "mean_lose": float(mean[0, 1]),
            "rloo_factor": float(loo[0, 0] / mean[0, 0])}


GAE_LENGTH, VAPO_ALPHA = 1000, 0.05


def first_token_credit(lam, length=GAE_LENGTH):
    """The first token's GAE advantage for a terminal reward of 1 and a critic that says 0
    everywhere: how much of the outcome reaches the start of the sequence (gamma = 1)."""
    rewards = np.zeros(length)
    rewards[-1] = 1.0
    adv, _returns = gl.gae(rewards, np.zeros(length + 1), gamma=1.0, lam=lam)
    return float(adv[0])


@provides("gae_credit_095", "gae_credit_1", "gae_credit_vapo", "gae_lam_vapo",
          "gae_horizon_095", "gae_horizon_vapo")
def _gae_lambdas():
    lam_vapo = 1 - 1 / (VAPO_ALPHA * GAE_LENGTH)                      # VAPO's length-adaptive
    return {"gae_credit_095": first_token_credit(0.95), "gae_credit_1": first_token_credit(1.0),
            "gae_credit_vapo": first_token_credit(lam_vapo), "gae_lam_vapo": lam_vapo,
            "gae_horizon_095": 1 / (1 - 0.95), "gae_horizon_vapo": 1 / (1 - lam_vapo)}


CISPO_RATIOS = (0.5, 1.0, 1.5, 9.0)


@provides("cispo_w_high", "cispo_grad_clip", "cispo_grad_high", "grpo_grad_mid", "cispo_grad_mid")
def _cispo():
    old = np.zeros((1, len(CISPO_RATIOS)))
    logp = np.log(np.array([CISPO_RATIOS]))
    w = gl.neighbours.cispo_weight(logp, old)                         # cap 1 + 4 = 5
    grpo = gl.surrogate_grad_logp(logp, old, np.ones(1))              # d loss / d logp, eps 0.2
    cispo = -w * 1.0                                                  # -sg(w) A, A = 1
    return {"cispo_w_high": float(w[0, 3]), "cispo_grad_clip": float(grpo[0, 2]),
            "cispo_grad_high": float(cispo[0, 3]), "grpo_grad_mid": float(grpo[0, 1]),
            "cispo_grad_mid": float(cispo[0, 2])}


SAPO_RATIOS = (1.0, 1.2, 1.5, 2.0)


@provides("sapo_gate_1", "sapo_slope_1", "sapo_slope_12", "sapo_slope_15", "sapo_slope_2",
          "sapo_slope_neg_15")
def _sapo():
    r = np.array([SAPO_RATIOS])
    logp, old = np.log(r), np.zeros_like(r)
    h = 1e-6
    def slope(a):   # d gate / d r, by central differences on the package's gate
        up = gl.neighbours.sapo_gate(np.log(r + h), old, [a])
        down = gl.neighbours.sapo_gate(np.log(r - h), old, [a])
        return ((up - down) / (2 * h))[0]
    pos, neg = slope(1.0), slope(-1.0)
    return {"sapo_gate_1": float(gl.neighbours.sapo_gate(logp, old, [1.0])[0, 0]),
            "sapo_slope_1": float(pos[0]), "sapo_slope_12": float(pos[1]),
            "sapo_slope_15": float(pos[2]), "sapo_slope_2": float(pos[3]),
            "sapo_slope_neg_15": float(neg[2])}


# --- precision (04) ------------------------------------------------------------------------------

BF_W, BF_LR, BF_STEPS = 0.02, 1e-6, 1000


@provides("bf_w16", "bf_after16", "bf_after32", "bf_spacing", "bf_threshold")
def _bf16_update():
    w16 = gl.round_trip(np.array(BF_W), "bfloat16")                  # the weight as bf16 holds it
    w_bf, w_32 = w16.copy(), gl.round_trip(w16, "float32")
    for _ in range(BF_STEPS):                                         # Adam's step is about lr
        w_bf = gl.round_trip(w_bf - BF_LR, "bfloat16")                # the update in bf16
        w_32 = gl.round_trip(w_32 - BF_LR, "float32")                 # on an fp32 master copy
    # the smallest |w| at which one step of lr is lost in bf16 (w - lr rounds back to w)
    grid = gl.round_trip(np.geomspace(1e-6, 1.0, 20001), "bfloat16")
    lost = grid[gl.round_trip(grid - BF_LR, "bfloat16") == grid]
    u = gl.unit_roundoff("bfloat16")
    return {"bf_w16": float(w16), "bf_after16": float(w_bf), "bf_after32": float(w_32),
            "bf_spacing": float(2 * u * 2 ** np.floor(np.log2(BF_W))),
            "bf_threshold": float(lost.min())}


LS_SCALE = 2.0 ** 16          # PyTorch GradScaler's init_scale


@provides("ls_lost_raw", "ls_lost_scaled", "ls_overflow_big", "ls_fp16_tiny", "ls_fp16_max")
def _loss_scaling():
    rng = np.random.default_rng(0)
    # gradient magnitudes spread over many decades, as a layer's are: log10 |g| ~ N(-6, 1.5)
    g = 10.0 ** rng.normal(-6.0, 1.5, size=100_000)
    raw = gl.round_trip(g, "float16")
    scaled = gl.round_trip(g * LS_SCALE, "float16")
    with np.errstate(over="ignore"):
        big = gl.round_trip(g * 2.0 ** 28, "float16")                 # a scale far too large
    return {"ls_lost_raw": float(100 * np.mean(raw == 0)),
            "ls_lost_scaled": float(100 * np.mean(scaled == 0)),
            "ls_overflow_big": float(100 * np.mean(~np.isfinite(big))),
            "ls_fp16_tiny": float(np.finfo(np.float16).smallest_subnormal),
            "ls_fp16_max": float(np.finfo(np.float16).max)}


# --- the questions every interview loop asks (cards/23_interview_core.toml) -------------------

def pass_at_k_unbiased(n, c, k):
    """Chen et al. 2021's unbiased pass@k from n samples with c correct: 1 - C(n-c, k)/C(n, k),
    as a running product (no large binomials)."""
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@provides("ev_avg", "ev_pass8", "ev_naive8", "ev_point", "fw_all_wrong", "fw_all_wrong_16", "ws_gb")
def _interview():
    n, c, k = 16, 4, 8                                               # samples, correct, k
    p = 0.05                                                         # a frontier prompt
    return {
        "ev_avg": c / n,                                             # avg@16 = mean accuracy
        "ev_pass8": pass_at_k_unbiased(n, c, k),
        "ev_naive8": float(1 - (1 - c / n) ** k),                    # plug-in, biased low
        "ev_point": 100 / 30,                                        # one AIME problem, in points
        "fw_all_wrong": float((1 - p) ** 8),                         # G = 8, all wrong
        "fw_all_wrong_16": float((1 - p) ** 16),
        "ws_gb": 7e9 * 2 / 1e9,                                      # 7B weights in bf16
    }
