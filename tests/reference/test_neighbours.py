"""GRPO's neighbours (``gl.neighbours``) against the real code of TRL 1.16.0 and verl 0.9.1.

On the ragged batches of ``test_computations`` (G = 2, 4, 8, 16; ties and all-equal groups;
one runaway ratio of 5), each test runs the trainer's own function or inline block (see
``trainers`` and ``wheels``) and the grpo_lab function that ``gl.neighbours.table()`` names:

* advantages: verl's ``reinforce_plus_plus``, ``reinforce_plus_plus_baseline``, ``remax`` and
  ``rloo`` estimators, TRL's RLOOTrainer block;
* losses, value and gradient in ``logp``: verl's ``cispo``, ``sapo`` and ``gspo`` policy losses,
  TRL's ``loss_type="cispo"`` and ``"sapo"``. The gradient test is what proves CISPO's stop
  gradient: a clipped token keeps the gradient -r_hat A, where GRPO's would be 0.

Tolerances: 1e-10 in float64, except where the trainer adds a constant that grpo_lab places
elsewhere, and then the bound that constant gives (written at each test).

Chapter 8's "The neighbouring methods" says that each row of its table was run against the
release's own code and that each setting selects the named function: the tests below, and
``test_each_user_in_the_table_is_a_real_function_that_selects_the_method``.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest

import grpo_lab as gl

torch = pytest.importorskip("torch")
import grpo_lab.torch as glt  # noqa: E402

from tests.reference import trainers as tr  # noqa: E402
from tests.reference import wheels  # noqa: E402
from tests.reference.test_computations import BATCHES, F64  # noqa: E402

NB = gl.neighbours
VERL_YAML = "verl/trainer/config/_generated_ppo_trainer.yaml"
TNB = glt.neighbours
IDS = sorted(BATCHES)


@functools.cache
def verl_core():
    """``trainers.verl_core()`` with verl's real ``masked_var`` and ``masked_whiten`` added to
    its stand-in for ``verl.utils.torch_functional`` (the REINFORCE++ estimators call them)."""
    core = tr.verl_core()
    if not hasattr(core.verl_F, "masked_whiten"):
        tf = "verl/utils/torch_functional.py"
        ns = wheels.run(wheels.function("verl", tf, "masked_var")
                        + wheels.function("verl", tf, "masked_whiten"),
                        {"torch": torch, "masked_mean": core.verl_F.masked_mean})
        core.verl_F.masked_var, core.verl_F.masked_whiten = ns["masked_var"], ns["masked_whiten"]
    return core


def _scores(b):
    """Outcome rewards as verl stores them: on each completion's last token, (N, T)."""
    N, T = b.mask.shape
    scores = torch.zeros((N, T), dtype=torch.float64)
    scores[torch.arange(N), torch.from_numpy(b.mask.sum(-1) - 1)] = torch.from_numpy(
        b.rewards.reshape(-1))
    return scores


def _per_token(adv_bg, mask):
    """(B, G) per completion -> (N, T), 0 on padding, as verl returns its advantages."""
    return adv_bg.reshape(-1, 1) * mask


def _whiten_tolerance(x, mask):
    """verl's masked_whiten divides by sqrt(var + 1e-8) and its masked_mean by (n + 1e-8);
    grpo_lab (eps = 0) divides by sqrt(var) and n. The relative difference is at most
    1e-8 / (2 var) + 1e-8 / n each; twice their sum bounds it."""
    L = mask.sum(-1)
    values = np.repeat(x.reshape(-1), L)                         # one value per token
    return dict(rtol=2 * (1e-8 / (2 * values.var(ddof=1)) + 2e-8 / values.size), atol=1e-12)


# --- advantages ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bid", IDS)
def test_reinforce_pp_against_verl(bid):
    b = BATCHES[bid]
    core = verl_core()
    theirs, _ = core.compute_reinforce_plus_plus_outcome_advantage(
        _scores(b), b.t("mask").to(torch.float64), config=SimpleNamespace(gamma=1.0))
    ours = NB.reinforce_pp_advantages(b.rewards, b.mask, eps=0.0)         # (B, G)
    np.testing.assert_allclose(_per_token(ours, b.mask), theirs.numpy(),
                               **_whiten_tolerance(b.rewards, b.mask))


@pytest.mark.parametrize("bid", IDS)
def test_reinforce_pp_baseline_against_verl(bid):
    b = BATCHES[bid]
    core = verl_core()
    index = np.repeat(np.arange(b.rewards.shape[0]), b.G)
    theirs, _ = core.compute_reinforce_plus_plus_baseline_outcome_advantage(
        _scores(b), b.t("mask").to(torch.float64), index)
    ours = NB.reinforce_pp_advantages(b.rewards, b.mask, baseline="group_mean", eps=0.0)
    centred = b.rewards - b.rewards.mean(-1, keepdims=True)
    np.testing.assert_allclose(_per_token(ours, b.mask), theirs.numpy(),
                               **_whiten_tolerance(centred, b.mask))
    # Token weighting: an all-equal group (seed 0 and 2 have one) is not 0 here, unlike GRPO's.
    if (b.rewards[0] == b.rewards[0, 0]).all() and np.ptp(b.mask.sum(-1)) > 0:
        assert np.abs(ours[0]).max() > 1e-3 and np.allclose(ours[0], ours[0, 0])


@functools.cache
def _openrlhf_whiten_code():
    return wheels.block("openrlhf", tr.ORL_MAKER,
                        "# ── Normalize advantages across all experiences ──", "return experiences")


@pytest.mark.parametrize("estimator", ["reinforce", "reinforce_baseline"])
@pytest.mark.parametrize("bid", IDS)
def test_reinforce_pp_against_openrlhf(bid, estimator):
    """OpenRLHF's ``reinforce`` and ``reinforce_baseline``: the group baseline of
    ``compute_advantages_and_returns`` (``trainers.openrlhf_baseline``), then its global
    whitening over the action tokens, with the population variance clamped at 1e-8, in
    float32: grpo_lab's ddof = 0, eps = 0, to float32 rounding."""
    b = BATCHES[bid]
    x = b.rewards if estimator == "reinforce" else tr.openrlhf_baseline(
        b.t("rewards").clone(), "reinforce_baseline").numpy()
    m = b.t("mask")
    adv = torch.from_numpy(x.reshape(-1, 1)) * m                       # returns, gamma = 1
    exps = [SimpleNamespace(advantages=adv, action_mask=m)]
    args = SimpleNamespace(algo=SimpleNamespace(advantage=SimpleNamespace(
        estimator=estimator, no_std_norm=False)))
    wheels.run(_openrlhf_whiten_code(), {"torch": torch, "args": args, "experiences": exps})
    theirs = (exps[0].advantages * m).numpy()
    ours = NB.reinforce_pp_advantages(
        b.rewards, b.mask, baseline="none" if estimator == "reinforce" else "group_mean",
        ddof=0, eps=0.0)
    np.testing.assert_allclose(_per_token(ours, b.mask), theirs, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("bid", IDS)
def test_remax_against_verl(bid):
    b = BATCHES[bid]
    core = verl_core()
    rng = np.random.default_rng(len(bid))
    greedy = rng.choice([0.0, 0.5, 1.0], size=b.rewards.shape[0])        # (B,) one per prompt
    theirs, _ = core.compute_remax_outcome_advantage(
        _scores(b), torch.from_numpy(np.repeat(greedy, b.G)), b.t("mask").to(torch.float64))
    ours = NB.remax_advantages(b.rewards, greedy)
    np.testing.assert_allclose(_per_token(ours, b.mask), theirs.numpy(), **F64)
    np.testing.assert_allclose(ours, gl.paper.neighbours.remax_advantages(b.rewards, greedy))


@pytest.mark.parametrize("bid", IDS)
def test_rloo_against_verl_and_trl(bid):
    b = BATCHES[bid]
    ours = gl.group_advantages(b.rewards, baseline="leave_one_out", scale="none")
    verl = tr.verl_advantages(b.t("rewards"), b.t("mask"), estimator="rloo")
    np.testing.assert_allclose(ours.ravel(), verl.numpy(), **F64)
    for normalize in (False, True):
        theirs = trl_rloo(torch.from_numpy(b.rewards.reshape(-1)), b.G, normalize)
        expected = ours.ravel()
        if normalize:                                  # TRL: whiten over the batch, + 1e-4
            expected = (expected - expected.mean()) / (expected.std(ddof=1) + 1e-4)
        np.testing.assert_allclose(expected, theirs.numpy(), rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(ours, gl.paper.neighbours.rloo_advantages(b.rewards), **F64)


@functools.cache
def _trl_rloo_code():
    return wheels.block("trl", "trl/trainer/rloo_trainer.py",
                        "grouped_rewards = rewards.view(-1, num_generations)",
                        "# Unscorable completions carry no learning signal")


def trl_rloo(rewards, G, normalize):
    """``RLOOTrainer._generate_and_score_completions``' advantage block: rewards (N,) -> (N,)."""
    nanstd, _, _ = tr.trl_code()
    ns = wheels.run(_trl_rloo_code(), {"torch": torch, "nanstd": nanstd, "rewards": rewards,
                                       "num_generations": G,
                                       "self": SimpleNamespace(normalize_advantages=normalize)})
    return ns["advantages"]


# --- losses: value and gradient --------------------------------------------------------------------

def _adv(b):
    return gl.group_advantages(b.rewards, eps=1e-6, ddof=1).ravel()       # (N,)


def _grad(fn, logp):
    """(value, d value / d logp) of a scalar function of a leaf copy of ``logp``."""
    lp = logp.clone().requires_grad_(True)
    value = fn(lp)
    value.backward()
    return value.detach().numpy(), lp.grad.numpy()


def _ours_loss(per_token, agg, b):
    """grpo_lab's per-token loss (a torch function of logp) aggregated on tensors."""
    return lambda lp: glt.aggregate_loss(per_token(lp), b.t("mask"), agg)


CISPO = [dict(eps_low=0.2, eps_high=0.2), dict(eps_low=0.2, eps_high=0.28)]


@pytest.mark.parametrize("clip", range(len(CISPO)))
@pytest.mark.parametrize("bid", IDS)
def test_cispo_against_verl(bid, clip):
    b, kw = BATCHES[bid], CISPO[clip]
    core = verl_core()
    adv, m = _adv(b), b.t("mask")
    A = torch.from_numpy(adv)[:, None].expand(m.shape) * m
    config = tr.verl_actor_config(clip_ratio_low=kw["eps_low"], clip_ratio_high=kw["eps_high"])
    theirs = _grad(lambda lp: core.compute_policy_loss_cispo(b.t("old"), lp, A, m,
                                                             loss_agg_mode="token-mean",
                                                             config=config)[0], b.t("logp"))
    ours = _grad(_ours_loss(lambda lp: TNB.cispo_loss(lp, b.t("old"), torch.from_numpy(adv),
                                                      **kw), "dapo", b), b.t("logp"))
    numpy_value = gl.aggregate_loss(NB.cispo_loss(b.logp, b.old, adv, **kw), b.mask, "dapo")
    np.testing.assert_allclose(ours[0], theirs[0], **F64)
    np.testing.assert_allclose(numpy_value, theirs[0], **F64)
    np.testing.assert_allclose(ours[1], theirs[1], **F64)
    # The stop gradient: d/dlogp = -r_hat A / (tokens), never 0 on a clipped token with A != 0.
    w = NB.cispo_weight(b.logp, b.old, **kw)
    np.testing.assert_allclose(ours[1], -w * adv[:, None] * b.mask / b.mask.sum(), **F64)


def trl_loss(b, adv, loss_type, logp, *, epsilon_high, tau_pos=1.0, tau_neg=1.05):
    """``GRPOTrainer._compute_loss`` from the log-ratio to the loss, one process, training
    mode, no gradient accumulation, no vLLM, beta = 0 (as ``trainers.trl_loss``, with the SAPO
    temperatures that it does not set)."""
    _, _, code = tr.trl_code()
    args = SimpleNamespace(use_bias_correction_kl=True, delta=None, steps_per_generation=1,
                           sapo_temperature_pos=tau_pos, sapo_temperature_neg=tau_neg)
    self = SimpleNamespace(
        importance_sampling_level="token", beta=0.0, loss_type=loss_type, epsilon_low=0.2,
        epsilon_high=epsilon_high, args=args, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, accelerator=SimpleNamespace(num_processes=1),
        max_completion_length=b.mask.shape[1])
    m = b.t("mask").to(logp.dtype)
    ns = wheels.run(code, {"torch": torch, "self": self, "mask": m, "per_token_logps": logp,
                           "inputs": {"num_items_in_batch": m.sum()},
                           "old_per_token_logps": b.t("old"),
                           "advantages": torch.from_numpy(adv).unsqueeze(1),
                           "entropy_mask": None})
    return ns["loss"]


@pytest.mark.parametrize("cap", [1.28, 5.0])
@pytest.mark.parametrize("bid", IDS)
def test_cispo_against_trl(bid, cap):
    """TRL's ``epsilon_high`` is CISPO's cap itself (clamp(r, max=epsilon_high)), with no lower
    bound: grpo_lab's eps_high = cap - 1, eps_low = None."""
    b, adv = BATCHES[bid], _adv(BATCHES[bid])
    theirs = _grad(lambda lp: trl_loss(b, adv, "cispo", lp, epsilon_high=cap), b.t("logp"))
    ours = _grad(_ours_loss(lambda lp: TNB.cispo_loss(lp, b.t("old"), torch.from_numpy(adv),
                                                      eps_high=cap - 1), "dapo", b), b.t("logp"))
    np.testing.assert_allclose(ours[0], theirs[0], **F64)
    np.testing.assert_allclose(ours[1], theirs[1], **F64)


def test_the_batches_clip_some_tokens_where_grpo_would_pass_no_gradient():
    """The CISPO comparisons above include tokens whose GRPO gradient is 0 and CISPO's is not."""
    clipped = 0
    for b in BATCHES.values():
        adv = _adv(b)
        grpo = gl.surrogate_grad_logp(b.logp, b.old, adv, eps_low=0.2, eps_high=0.28)
        cispo = -NB.cispo_weight(b.logp, b.old, eps_low=0.2, eps_high=0.28) * adv[:, None]
        clipped += int(((grpo == 0) & (cispo != 0) & b.mask).sum())
    assert clipped > 20


TAUS = [dict(tau_pos=1.0, tau_neg=1.05), dict(tau_pos=0.5, tau_neg=2.0)]


def _f32(kw):
    """The temperatures as TRL uses them: ``torch.where(advantages > 0, tau_pos, tau_neg)`` on
    two Python floats makes a float32 tensor, so 1.05 becomes 1.0499999523 even in float64."""
    return {k: float(np.float32(v)) for k, v in kw.items()}


@pytest.mark.parametrize("taus", range(len(TAUS)))
@pytest.mark.parametrize("bid", IDS)
def test_sapo_against_verl_and_trl(bid, taus):
    """verl and TRL aggregate SAPO per sequence, then over sequences: grpo_lab's ``"grpo"``.
    verl's ``seq-mean-token-mean`` divides each row by (L + 1e-8): a relative 1e-8 at most.
    TRL rounds the temperatures to float32 (:func:`_f32`): with them rounded the same way,
    grpo_lab is TRL's to 1e-10; with the exact 1.05, 1e-7 apart at most (a 3e-8 shift in
    tau, times gates and advantages of order 1)."""
    b, kw = BATCHES[bid], TAUS[taus]
    core = verl_core()
    adv, m = _adv(b), b.t("mask")
    A = torch.from_numpy(adv)[:, None].expand(m.shape) * m
    config = tr.verl_actor_config(**kw)
    verl = _grad(lambda lp: core.compute_policy_loss_sapo(b.t("old"), lp, A, m,
                                                          config=config)[0], b.t("logp"))
    trl = _grad(lambda lp: trl_loss(b, adv, "sapo", lp, epsilon_high=0.2, **kw), b.t("logp"))

    def ours(taus):
        return _grad(_ours_loss(lambda lp: TNB.sapo_loss(lp, b.t("old"), torch.from_numpy(adv),
                                                         **taus), "grpo", b), b.t("logp"))
    exact, rounded = ours(kw), ours(_f32(kw))
    for (value, grad), (v, g), tol in ((exact, verl, dict(rtol=2e-8, atol=1e-12)),
                                       (rounded, trl, F64),
                                       (exact, trl, dict(rtol=1e-6, atol=1e-7))):
        np.testing.assert_allclose(value, v, **tol)
        np.testing.assert_allclose(grad, g, **tol)
    numpy_value = gl.aggregate_loss(NB.sapo_loss(b.logp, b.old, adv, **kw), b.mask, "grpo")
    np.testing.assert_allclose(numpy_value, verl[0], rtol=2e-8, atol=1e-12)


@pytest.mark.parametrize("bid", IDS)
def test_gspo_gradient_against_verl(bid):
    """GSPO's value is tested in test_computations; here its gradient: every token of sequence
    i gets the same weight, -A_i s_i / (N |y_i|), unless the sequence is clipped (then 0)."""
    b = BATCHES[bid]
    core = verl_core()
    adv, m = _adv(b), b.t("mask")
    A = torch.from_numpy(adv)[:, None].expand(m.shape) * m
    theirs = _grad(lambda lp: core.compute_policy_loss_gspo(
        b.t("old"), lp, A, m, loss_agg_mode="seq-mean-token-mean",
        config=tr.verl_actor_config())[0], b.t("logp"))
    ours = _grad(lambda lp: glt.grpo_loss(lp, b.t("old"), None, torch.from_numpy(adv), m,
                                          beta=0.0, level="sequence", agg="grpo")[0], b.t("logp"))
    np.testing.assert_allclose(ours[1], theirs[1], rtol=2e-8, atol=1e-12)
    s = gl.sequence_ratio(b.logp, b.old, b.mask)
    inside = ((adv > 0) & (s <= 1.2)) | ((adv < 0) & (s >= 0.8))
    L = b.mask.sum(-1)
    expected = np.where(inside, -adv * s / (len(L) * L), 0.0)[:, None] * b.mask
    np.testing.assert_allclose(ours[1], expected, rtol=1e-10, atol=1e-12)


# --- the table points at real functions of the pinned releases -------------------------------------

@pytest.mark.parametrize("row", gl.neighbours.table(), ids=lambda r: r.method)
def test_each_user_in_the_table_is_a_real_function_that_selects_the_method(row):
    """Each (release, file::function, setting): the function is in the pinned file; in verl
    the registry maps the setting's name to exactly that function; in TRL and OpenRLHF the
    inline code tests the setting's value (``loss_type == "cispo"``, ...)."""
    core = verl_core()
    for release, where, setting in row.users:
        package, version = release.split()
        assert wheels.PINS[package][0] == version, release
        relative, qualname = where.split("::")
        source = wheels.function(package, relative, qualname)     # AnchorMissing if not there
        first, *more = [part.strip() for part in setting.split(",")]
        key, value = first.split("=") if "=" in first else (None, first)
        for extra in more:                         # the rest of the recipe: real config fields
            field = extra.split("=")[0].strip()
            assert f"    {field}:" in wheels.read(package, "trl/trainer/grpo_config.py"), extra
        if package == "verl":                                      # a key of verl's config
            wheels.yaml_line(wheels.read("verl", VERL_YAML), key)  # AnchorMissing if not there
            lookup = core.get_adv_estimator_fn if key.endswith("adv_estimator") \
                else core.get_policy_loss_fn
            assert lookup(value) is getattr(core, qualname), (where, setting)
        elif key is not None:                                      # self.loss_type, args.algo...
            assert f"{'args' if package == 'openrlhf' else 'self'}.{key}" in source, setting
            assert f'"{value}"' in source, (where, setting)
        else:
            assert qualname.startswith(value + "."), (where, setting)
