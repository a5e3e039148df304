"""grpo_lab against the real code of TRL 1.16.0, verl 0.9.1 and OpenRLHF 0.11.2 (issue 17).

On random ragged batches (G = 2, 4, 8, 16; ties and all-equal groups among the rewards; one
token with a ratio of 5 so that the clips and dual-clip act), each comparison runs one
computation of a trainer from its own code (``trainers``) and the grpo_lab function or preset
that the knob map says is the same, and requires them equal: to 1e-10 in float64, to float32
rounding where the trainer itself works in float32 (OpenRLHF's KL). One test item is one
comparison on one batch.

Chapter 8 rests two statements on these comparisons: "How the map was made" (the three wheels'
own tensor code run against grpo_lab and the presets on random ragged batches) and "The
presets, as data" (``gl.presets.default_loss`` gives each trainer's own pipeline's loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import grpo_lab as gl
torch = pytest.importorskip("torch")

from tests.reference import trainers as tr  # noqa: E402 (needs torch)


F64 = dict(rtol=1e-10, atol=1e-12)
F32 = dict(rtol=2e-6, atol=2e-6)          # OpenRLHF computes its KL in float32
# TRL's nanstd computes Bessel's factor count / (count - 1) as an int64 division, which torch
# returns in float32: its std is off by up to 3e-8 relative even in float64.
TRL = dict(rtol=1e-7, atol=1e-12)


@dataclass(frozen=True)
class Batch:
    rewards: np.ndarray      # (B, G)
    logp: np.ndarray         # (N, T) the policy now
    old: np.ndarray          # (N, T) at sampling time
    ref: np.ndarray          # (N, T) the reference
    mask: np.ndarray         # (N, T) bool, ragged, right-padded

    def t(self, name):
        value = getattr(self, name)
        return torch.from_numpy(value) if value.dtype != bool else torch.from_numpy(value.copy())

    @property
    def G(self):
        return self.rewards.shape[1]


def make_batch(seed: int, G: int) -> Batch:
    rng = np.random.default_rng(1000 * seed + G)
    B, T = 2 + seed % 2, 5 + 2 * seed
    N = B * G
    lengths = rng.integers(1, T + 1, size=N)
    lengths[rng.integers(N)] = T                                    # one full row
    mask = np.arange(T)[None, :] < lengths[:, None]                 # (N, T)
    if seed % 2 == 0:                                               # ties: verifier rewards
        rewards = rng.choice([0.0, 0.5, 1.0], size=(B, G))
        rewards[0] = 1.0                                            # one all-equal group
    else:
        rewards = rng.normal(size=(B, G))
    old = np.log(rng.uniform(0.05, 0.95, size=(N, T)))
    logp = old + rng.normal(0.0, 0.3, size=(N, T))
    logp[rng.integers(N), 0] = old[0, 0] + np.log(5.0)              # a runaway ratio
    ref = old + rng.normal(0.0, 0.3, size=(N, T))
    return Batch(rewards, logp, old, ref, mask)


BATCHES = {f"seed{s}-G{G}": make_batch(s, G) for s in range(4) for G in (2, 4, 8, 16)}


def _np(x):
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _tokens(adv, mask):
    """(N,) per sequence -> (N, T), as verl and OpenRLHF store advantages."""
    return adv[:, None].expand(mask.shape) * mask


# --- the comparisons: name -> batch -> list of (grpo_lab, reference, tolerance) ---------------------

def adv_trl(b, scale):
    ours = gl.group_advantages(b.rewards, eps=1e-4, ddof=1, scale=scale).ravel()
    theirs = tr.trl_advantages(b.t("rewards").reshape(-1, 1), b.G, scale_rewards=scale)
    return [(ours, theirs, TRL)]


def adv_trl_normalize_then_sum(b):
    """TRL's ``multi_objective_aggregation="normalize_then_sum"`` with two reward functions
    against ``gl.normalise_then_sum`` (group step, weighted sum, batch step)."""
    rng = np.random.default_rng(int(b.rewards.size))
    second = rng.choice([0.0, 1.0], size=b.rewards.shape)          # a format-like reward
    weights = np.array([1.0, 0.5])
    per_func = torch.from_numpy(np.stack([b.rewards.ravel(), second.ravel()], axis=1))  # (N, 2)
    theirs = tr.trl_advantages(per_func, b.G, aggregation="normalize_then_sum",
                               weights=torch.from_numpy(weights))
    ours = gl.normalise_then_sum([b.rewards, second], weights, eps=1e-4, ddof=1)
    return [(ours.ravel(), theirs, TRL)]


def adv_verl(b, estimator, norm):
    if estimator == "rloo":
        ours = gl.group_advantages(b.rewards, baseline="leave_one_out", scale="none")
    else:
        ours = gl.group_advantages(b.rewards, eps=1e-6, ddof=1, scale="group" if norm else "none")
    theirs = tr.verl_advantages(b.t("rewards"), b.t("mask"), estimator=estimator,
                                norm_adv_by_std_in_grpo=norm)
    return [(ours.ravel(), theirs, F64)]


def adv_openrlhf(b, estimator):
    kwargs = {"group_norm": dict(eps=1e-9, ddof=1), "dr_grpo": dict(scale="none"),
              "rloo": dict(baseline="leave_one_out", scale="none")}[estimator]
    return [(gl.group_advantages(b.rewards, **kwargs), tr.openrlhf_baseline(b.t("rewards"),
                                                                            estimator), F64)]


def adv_presets(b):
    """Each preset's advantages against its own trainer's code."""
    out = []
    for name, theirs in (("trl", tr.trl_advantages(b.t("rewards").reshape(-1, 1), b.G)),
                         ("verl", tr.verl_advantages(b.t("rewards"), b.t("mask"))),
                         ("openrlhf", tr.openrlhf_baseline(b.t("rewards")).reshape(-1))):
        ours = gl.group_advantages(b.rewards, **gl.presets.PRESETS[name].advantages).ravel()
        out.append((ours, theirs, TRL if name == "trl" else F64))
    return out


def kl_verl(b, name):
    core = tr.verl_core()
    ours = {"kl": gl.kl_k1(b.logp, b.ref), "k2": gl.kl_k2(b.logp, b.ref),
            "low_var_kl": gl.kl_k3(b.logp, b.ref, clamp=10.0),
            "k3+": gl.kl_k3_plus(b.logp, b.ref, clamp=10.0)}[name]
    return [(ours, core.kl_penalty(b.t("logp"), b.t("ref"), name), F64)]


def kl_openrlhf(b, name):
    utils, *_ = tr.openrlhf_modules()
    ours = {"k1": gl.kl_k1, "k2": gl.kl_k2, "k3": gl.kl_k3}[name](b.logp, b.ref, clamp=10.0)
    return [(ours, utils.compute_approx_kl(b.t("logp"), b.t("ref"), kl_estimator=name), F32)]


def kl_gradients(b):
    """d k / d logp from verl's autograd against kl_grad_logp: k1, k2, k3 (low_var_kl), k3+."""
    core, out = tr.verl_core(), []
    for verl_name, ours in (("kl", "k1"), ("k2", "k2"), ("low_var_kl", "k3"), ("k3+", "k3+")):
        lp = b.t("logp").clone().requires_grad_()
        grad, = torch.autograd.grad(core.kl_penalty(lp, b.t("ref"), verl_name).sum(), lp)
        out.append((gl.kl_grad_logp(b.logp, b.ref, ours, clamp=10.0), grad, F64))
    return out


def trl_per_token(b, delta, bias_correction):
    """TRL's per-token loss (clip, delta, beta k3 with or without the ratio) vs grpo_lab's."""
    adv = gl.group_advantages(b.rewards, eps=1e-4, ddof=1).ravel()
    _, per_token = tr.trl_loss(b.t("logp"), b.t("old"), b.t("ref"), torch.from_numpy(adv),
                               b.t("mask"), beta=0.04, delta=delta,
                               use_bias_correction_kl=bias_correction)
    pg = gl.clipped_surrogate_loss(b.logp, b.old, adv, dual_clip=delta)
    ratio = np.exp(b.logp - b.old) if bias_correction else 1.0
    ours = pg + 0.04 * ratio * gl.kl_k3(b.logp, b.ref)
    return [(np.where(b.mask, ours, 0.0), per_token * b.t("mask"), F64)]


def trl_aggregated(b, loss_type, level="token", bias_correction=True):
    adv = gl.group_advantages(b.rewards, eps=1e-4, ddof=1).ravel()
    theirs, _ = tr.trl_loss(b.t("logp"), b.t("old"), b.t("ref"), torch.from_numpy(adv),
                            b.t("mask"), beta=0.04, loss_type=loss_type,
                            importance_sampling_level=level, use_bias_correction_kl=bias_correction)
    agg = {"bnpo": "bnpo", "dapo": "dapo", "grpo": "grpo", "dr_grpo": "dr_grpo"}[loss_type]
    ours, _ = gl.grpo_loss(b.logp, b.old, b.ref, adv, b.mask, beta=0.04, agg=agg, level=level,
                           max_len=512 if agg == "dr_grpo" else None,
                           kl_bias_correction=bias_correction)
    return [(ours, theirs, F64)]


def sequence_ratios(b):
    """GSPO's length-normalised sequence ratio: TRL's importance weights at
    ``importance_sampling_level="sequence"`` against ``gl.sequence_ratio``."""
    adv = torch.zeros(b.rewards.size, dtype=torch.float64)
    tr.trl_loss(b.t("logp"), b.t("old"), None, adv, b.t("mask"),
                importance_sampling_level="sequence", loss_type="grpo")
    return [(gl.sequence_ratio(b.logp, b.old, b.mask), tr.trl_loss.last_ratio[:, 0], F64)]


def trl_truncated(b, loss_type):
    """mask_truncated_completions: TRL zeroes the rows; grpo and dr_grpo keep them in N."""
    adv = gl.group_advantages(b.rewards, eps=1e-4, ddof=1).ravel()
    N = adv.size
    keep = np.ones(N, dtype=bool)
    keep[: N // 2] = False                                          # half the rows truncated
    m = b.mask & keep[:, None]
    theirs, _ = tr.trl_loss(b.t("logp"), b.t("old"), None, torch.from_numpy(adv),
                            torch.from_numpy(m), loss_type=loss_type)
    ours, _ = gl.grpo_loss(b.logp[keep], b.old[keep], None, adv[keep], b.mask[keep], beta=0.0,
                           agg=loss_type, max_len=512 if loss_type == "dr_grpo" else None)
    scale = keep.sum() / N if loss_type in ("grpo", "dr_grpo") else 1.0   # N_kept / N
    return [(ours * scale, theirs, F64)]


def verl_loss(b, mode, kl_type=None):
    """verl's actor loss as ``ppo_loss`` composes it: the vanilla policy loss (dual-clip on),
    plus, with the KL loss on, kl_loss_coef times the same aggregation of ``kl_penalty``."""
    core = tr.verl_core()
    adv = gl.group_advantages(b.rewards, eps=1e-6, ddof=1).ravel()
    A, m = _tokens(torch.from_numpy(adv), b.t("mask")), b.t("mask")
    theirs, _ = core.compute_policy_loss_vanilla(b.t("old"), b.t("logp"), A, m,
                                                 loss_agg_mode=mode, config=tr.verl_actor_config())
    if kl_type is not None:
        kld = core.kl_penalty(b.t("logp"), b.t("ref"), kl_type)
        theirs = theirs + 0.001 * core.agg_loss(kld, m, mode)
    agg = {"token-mean": "dapo", "seq-mean-token-mean": "grpo",
           "seq-mean-token-sum-norm": "dr_grpo"}[mode]
    ours, _ = gl.grpo_loss(b.logp, b.old, b.ref if kl_type else None, adv, b.mask,
                           beta=0.001 if kl_type else 0.0, kl="k3+" if kl_type == "k3+" else "k3",
                           agg=agg, dual_clip=3.0, kl_clamp=10.0)   # dr_grpo: max_len = T
    return [(ours, theirs, F64)]


def verl_gspo(b, mode):
    core = tr.verl_core()
    adv = gl.group_advantages(b.rewards, eps=1e-6, ddof=1).ravel()
    theirs, _ = core.compute_policy_loss_gspo(
        b.t("old"), b.t("logp"), _tokens(torch.from_numpy(adv), b.t("mask")), b.t("mask"),
        loss_agg_mode=mode, config=tr.verl_actor_config())
    ours, _ = gl.grpo_loss(b.logp, b.old, None, adv, b.mask, beta=0.0, level="sequence",
                           agg={"token-mean": "dapo", "seq-mean-token-mean": "grpo"}[mode])
    return [(ours, theirs, F64)]


def openrlhf_loss(b, **kwargs):
    adv = gl.group_advantages(b.rewards, eps=1e-9, ddof=1).ravel()
    theirs = tr.openrlhf_policy_loss(b.t("logp"), b.t("old"),
                                     _tokens(torch.from_numpy(adv), b.t("mask")), b.t("mask"),
                                     **kwargs)
    gspo = kwargs.get("policy_loss_type") == "gspo"
    ours, _ = gl.grpo_loss(b.logp, b.old, None, adv, b.mask, beta=0.0,
                           agg="dapo" if kwargs.get("token_level_loss", True) and not gspo
                           else "grpo", level="sequence" if gspo else "token",
                           dual_clip=kwargs.get("dual_clip"))
    return [(ours, theirs, F64)]


def micro_batches(b):
    """verl and OpenRLHF pass the token count of the whole mini-batch (optimiser step) to each
    micro-batch's loss: the micro-batch losses add up to dapo over the step."""
    core = tr.verl_core()
    adv = gl.group_advantages(b.rewards, eps=1e-6, ddof=1).ravel()
    A, m = _tokens(torch.from_numpy(adv), b.t("mask")), b.t("mask")
    half = adv.size // 2
    tokens = int(b.mask.sum())
    info = dict(dp_size=1, batch_num_tokens=tokens, global_batch_size=adv.size,
                loss_scale_factor=None)
    verl = sum(core.compute_policy_loss_vanilla(
        b.t("old")[s], b.t("logp")[s], A[s], m[s],
        config=tr.verl_actor_config(global_batch_info=info))[0]
        for s in (slice(0, half), slice(half, None)))
    orl = sum(tr.openrlhf_policy_loss(b.t("logp")[s], b.t("old")[s], A[s], m[s],
                                      batch_num_tokens=tokens)
              for s in (slice(0, half), slice(half, None)))
    ours_verl, _ = gl.grpo_loss(b.logp, b.old, None, adv, b.mask, beta=0.0, agg="dapo",
                                dual_clip=3.0)
    ours_orl, _ = gl.grpo_loss(b.logp, b.old, None, adv, b.mask, beta=0.0, agg="dapo")
    return [(ours_verl, verl, F64), (ours_orl, orl, F64)]


def verl_kl_reward(b):
    shaped, adv = tr.verl_kl_in_reward(b.t("rewards"), b.t("old"), b.t("ref"), b.t("mask"))
    ours = gl.kl_shaped_rewards(b.rewards, b.old, b.ref, b.mask, beta=0.001)
    return [(ours.ravel(), shaped, F64),
            (gl.group_advantages(ours, eps=1e-6, ddof=1).ravel(), adv, F64)]


def preset_losses(b):
    """``gl.presets.default_loss`` for each system against the system's own pipeline."""
    core = tr.verl_core()
    r, lp, old, ref, m = (b.t(n) for n in ("rewards", "logp", "old", "ref", "mask"))
    trl, _ = tr.trl_loss(lp, old, ref, tr.trl_advantages(r.reshape(-1, 1), b.G), m)
    verl, _ = core.compute_policy_loss_vanilla(old, lp, _tokens(tr.verl_advantages(r, m), m), m,
                                               config=tr.verl_actor_config())
    orl = tr.openrlhf_policy_loss(lp, old, tr.openrlhf_advantages(r, old, ref, m), m)
    return [(gl.presets.default_loss(name, b.rewards, b.logp, b.old, b.mask, ref_logp=b.ref),
             theirs, tol) for name, theirs, tol in (("trl", trl, TRL), ("verl", verl, F64),
                                                   ("openrlhf", orl, F32))]


def torch_mirror_gradients(b):
    """The torch mirror's loss differentiates like the trainers: its straight-through "k3+"
    (with verl's dual-clip and clamp) like verl's actor loss, its bias-corrected k3 like TRL's
    ``_compute_loss``; d loss / d logp compared token by token."""
    import grpo_lab.torch as glt

    core = tr.verl_core()
    m, out = b.t("mask"), []
    adv_v = torch.from_numpy(gl.group_advantages(b.rewards, eps=1e-6, ddof=1).ravel())
    lp = b.t("logp").clone().requires_grad_()
    theirs = core.compute_policy_loss_vanilla(b.t("old"), lp, _tokens(adv_v, m), m,
                                              config=tr.verl_actor_config())[0] \
        + 0.001 * core.agg_loss(core.kl_penalty(lp, b.t("ref"), "k3+"), m, "token-mean")
    g_theirs, = torch.autograd.grad(theirs, lp)
    lp2 = b.t("logp").clone().requires_grad_()
    ours, _ = glt.grpo_loss(lp2, b.t("old"), b.t("ref"), adv_v, m, beta=0.001, kl="k3+",
                            agg="dapo", dual_clip=3.0, kl_clamp=10.0)
    out.append((torch.autograd.grad(ours, lp2)[0], g_theirs, F64))
    adv_t = torch.from_numpy(gl.group_advantages(b.rewards, eps=1e-4, ddof=1).ravel())
    lp = b.t("logp").clone().requires_grad_()
    theirs, _ = tr.trl_loss(lp, b.t("old"), b.t("ref"), adv_t, m, beta=0.04)
    g_theirs, = torch.autograd.grad(theirs, lp)
    lp2 = b.t("logp").clone().requires_grad_()
    ours, _ = glt.grpo_loss(lp2, b.t("old"), b.t("ref"), adv_t, m, beta=0.04, agg="dapo",
                            kl_bias_correction=True)
    out.append((torch.autograd.grad(ours, lp2)[0], g_theirs, F64))
    return out


COMPARISONS = {
    "adv-trl-group": lambda b: adv_trl(b, "group"),
    "adv-trl-batch": lambda b: adv_trl(b, "batch"),
    "adv-trl-none": lambda b: adv_trl(b, "none"),
    "adv-trl-normalize_then_sum": adv_trl_normalize_then_sum,
    "adv-verl-grpo": lambda b: adv_verl(b, "grpo", True),
    "adv-verl-drgrpo": lambda b: adv_verl(b, "grpo", False),
    "adv-verl-rloo": lambda b: adv_verl(b, "rloo", True),
    "adv-openrlhf-group_norm": lambda b: adv_openrlhf(b, "group_norm"),
    "adv-openrlhf-dr_grpo": lambda b: adv_openrlhf(b, "dr_grpo"),
    "adv-openrlhf-rloo": lambda b: adv_openrlhf(b, "rloo"),
    "adv-presets": adv_presets,
    "kl-verl-k1": lambda b: kl_verl(b, "kl"),
    "kl-verl-k2": lambda b: kl_verl(b, "k2"),
    "kl-verl-low_var_kl": lambda b: kl_verl(b, "low_var_kl"),
    "kl-verl-k3+": lambda b: kl_verl(b, "k3+"),
    "kl-openrlhf-k1": lambda b: kl_openrlhf(b, "k1"),
    "kl-openrlhf-k2": lambda b: kl_openrlhf(b, "k2"),
    "kl-openrlhf-k3": lambda b: kl_openrlhf(b, "k3"),
    "kl-gradients": kl_gradients,
    "trl-per-token": lambda b: trl_per_token(b, None, True),
    "trl-per-token-no-bias-correction": lambda b: trl_per_token(b, None, False),
    "trl-per-token-delta-dual-clip": lambda b: trl_per_token(b, 3.0, True),
    "trl-loss-grpo": lambda b: trl_aggregated(b, "grpo"),
    "trl-loss-bnpo": lambda b: trl_aggregated(b, "bnpo"),
    "trl-loss-dapo": lambda b: trl_aggregated(b, "dapo"),
    "trl-loss-dr_grpo-512": lambda b: trl_aggregated(b, "dr_grpo"),
    "trl-loss-gspo": lambda b: trl_aggregated(b, "grpo", level="sequence"),
    "sequence-ratio-trl": sequence_ratios,
    "trl-truncated-grpo": lambda b: trl_truncated(b, "grpo"),
    "trl-truncated-dr_grpo": lambda b: trl_truncated(b, "dr_grpo"),
    "trl-truncated-dapo": lambda b: trl_truncated(b, "dapo"),
    "verl-loss-token-mean": lambda b: verl_loss(b, "token-mean"),
    "verl-loss-seq-mean-token-mean": lambda b: verl_loss(b, "seq-mean-token-mean"),
    "verl-loss-seq-mean-token-sum-norm": lambda b: verl_loss(b, "seq-mean-token-sum-norm"),
    "verl-loss-kl-low_var_kl": lambda b: verl_loss(b, "token-mean", "low_var_kl"),
    "verl-loss-kl-k3+": lambda b: verl_loss(b, "token-mean", "k3+"),
    "verl-gspo-token-mean": lambda b: verl_gspo(b, "token-mean"),
    "verl-gspo-seq-mean-token-mean": lambda b: verl_gspo(b, "seq-mean-token-mean"),
    "verl-kl-in-reward": verl_kl_reward,
    "openrlhf-loss-token": lambda b: openrlhf_loss(b),
    "openrlhf-loss-seq": lambda b: openrlhf_loss(b, token_level_loss=False),
    "openrlhf-loss-dual-clip": lambda b: openrlhf_loss(b, dual_clip=3.0),
    "openrlhf-loss-gspo": lambda b: openrlhf_loss(b, policy_loss_type="gspo"),
    "micro-batches-global-token-count": micro_batches,
    "preset-default-losses": preset_losses,
    "torch-mirror-gradients": torch_mirror_gradients,
}


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("name", COMPARISONS, ids=str)
def test_grpo_lab_equals_the_reference_code(name, batch):
    for i, (ours, theirs, tol) in enumerate(COMPARISONS[name](BATCHES[batch])):
        ours, theirs = np.asarray(_np(ours), dtype=np.float64), _np(theirs).astype(np.float64)
        assert ours.shape == theirs.shape, (name, i, ours.shape, theirs.shape)
        np.testing.assert_allclose(ours, theirs, **tol, err_msg=f"{name} [{i}] on {batch}")


def test_at_least_300_comparisons_against_the_reference_code():
    assert len(COMPARISONS) * len(BATCHES) >= 300


def test_the_batches_exercise_the_clips_ties_and_ragged_masks():
    """A comparison is only as good as its inputs: every clip acts somewhere, some groups are
    all equal, rows are ragged."""
    some_all_equal = some_clipped_low = some_clipped_high = some_dual = False
    for b in BATCHES.values():
        adv = np.repeat(gl.group_advantages(b.rewards, ddof=1).ravel()[:, None],
                        b.mask.shape[1], axis=1)
        ratio = np.exp(b.logp - b.old)
        some_all_equal |= bool((np.ptp(b.rewards, axis=1) == 0).any())
        some_clipped_low |= bool((b.mask & (adv < 0) & (ratio < 0.8)).any())
        some_clipped_high |= bool((b.mask & (adv > 0) & (ratio > 1.2)).any())
        some_dual |= bool((b.mask & (adv < 0) & (ratio > 3.0)).any())
        assert len(set(b.mask.sum(axis=1))) > 1                    # ragged
    assert some_all_equal and some_clipped_low and some_clipped_high and some_dual


def test_a_changed_reference_fails_with_the_anchor_named(tmp_path, monkeypatch):
    from tests.reference import wheels
    monkeypatch.setattr(wheels, "read", lambda package, relative: "x = 1\n")
    with pytest.raises(wheels.AnchorMissing, match="expected the anchor 'log_ratio = ' exactly "
                                                   "once"):
        wheels.block("trl", tr.TRL_TRAINER, "log_ratio = ", "# Entropy")
    with pytest.raises(wheels.AnchorMissing, match="no 'nanstd'"):
        wheels.function("trl", "trl/trainer/utils.py", "nanstd")
