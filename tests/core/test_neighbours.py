"""GRPO's neighbours (``gl.neighbours``): hand-worked numbers, invariants, plain == hardened,
bad input named, and the table pointing at real functions.

The comparisons against TRL's and verl's own code are in ``tests/reference/test_neighbours.py``.
"""

import inspect

import numpy as np
import pytest

import grpo_lab as gl
import grpo_lab.core.neighbour_losses  # noqa: F401 (its module docstring cites GSPO)
from tests.core.test_paper import body_lines

N = gl.neighbours
P = gl.paper.neighbours
SEEDS = range(8)


def tokens(rng, N_=6, T=5):
    logp = np.log(rng.uniform(0.05, 1.0, size=(N_, T)))                 # (N, T)
    old = logp + rng.normal(0, 0.5, size=(N_, T))                        # ratios around 1
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, size=N_)[:, None]
    return logp, old, mask


# --- plain == hardened ---------------------------------------------------------------------------

def pair_rpp(rng):
    B, G, T = 3, 4, 6
    r = rng.choice([0.0, 0.5, 1.0], size=(B, G))
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, size=B * G)[:, None]
    plain = P.reinforce_pp_advantages(r.ravel(), mask)                   # (N, T)
    ours = N.reinforce_pp_advantages(r, mask, eps=0.0)                   # (B, G)
    return plain, ours.reshape(-1, 1) * mask


def pair_remax(rng):
    r, g = rng.normal(size=(3, 4)), rng.normal(size=3)
    return P.remax_advantages(r, g), N.remax_advantages(r, g)


def pair_rloo(rng):
    r = rng.normal(size=(3, 5))
    return P.rloo_advantages(r), gl.group_advantages(r, baseline="leave_one_out", scale="none")


def pair_cispo(rng):
    logp, old, _ = tokens(rng)
    adv = rng.normal(size=logp.shape[0])                                 # (N,) per sequence
    return P.cispo_loss(logp, old, adv[:, None], 0.5), N.cispo_loss(logp, old, adv, eps_high=0.5)


def pair_sapo(rng):
    logp, old, _ = tokens(rng)
    adv = rng.normal(size=logp.shape[0])
    return (P.sapo_loss(logp, old, adv[:, None], 1.0, 1.05),
            N.sapo_loss(logp, old, adv, tau_pos=1.0, tau_neg=1.05))


TWINS = {"reinforce_pp_advantages": pair_rpp, "remax_advantages": pair_remax,
         "rloo_advantages": pair_rloo, "cispo_loss": pair_cispo, "sapo_loss": pair_sapo}


def test_every_plain_neighbour_has_a_twin_here():
    public = {n for n, f in vars(P).items() if inspect.isfunction(f) and not n.startswith("_")}
    assert public == set(P.__all__) == set(TWINS)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_plain_equals_hardened_on_ordinary_inputs(name):
    for seed in SEEDS:
        plain, ours = TWINS[name](np.random.default_rng(seed))
        np.testing.assert_allclose(plain, ours, rtol=1e-10, atol=1e-12, err_msg=f"seed {seed}")


@pytest.mark.parametrize("name", sorted(TWINS))
def test_plain_body_is_at_most_ten_lines_with_equation_and_symbol_table(name):
    fn = getattr(P, name)
    assert len(body_lines(fn)) <= 10
    doc = inspect.getdoc(fn)
    assert "math::" in doc and "Symbol" in doc and "arXiv" in doc


def test_the_ordinary_draws_clip_and_gate_something():
    """The twins compare clipped tokens too: some ratios of the draws pass the cap of 1.5."""
    logp, old, _ = tokens(np.random.default_rng(0))
    assert (np.exp(logp - old) > 1.5).any() and (np.exp(logp - old) < 0.5).any()


# --- REINFORCE++ ---------------------------------------------------------------------------------

def test_reinforce_pp_by_hand():
    # rewards 1, 0, 0 with 3, 1, 2 tokens: token-weighted mean mu = 3/6 = 0.5; deviations
    # 0.5, -0.5, -0.5 over 6 tokens: sum L d^2 = 6 * 0.25 = 1.5, Bessel: var = 1.5 / 5 = 0.3.
    mask = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    got = N.reinforce_pp_advantages([[1.0, 0.0, 0.0]], mask, eps=0.0)
    np.testing.assert_allclose(got, [[0.5, -0.5, -0.5]] / np.sqrt(0.3), rtol=1e-14)
    # Without a mask each completion weighs 1: mu = 1/3, var = (4/9 + 1/9 + 1/9) / 2 = 1/3.
    got = N.reinforce_pp_advantages([[1.0, 0.0, 0.0]], eps=0.0)
    np.testing.assert_allclose(got, [[2 / 3, -1 / 3, -1 / 3]] / np.sqrt(1 / 3), rtol=1e-14)


def test_reinforce_pp_is_whitened_over_the_tokens():
    rng = np.random.default_rng(3)
    r = rng.normal(size=(4, 3))
    mask = np.arange(7)[None, :] < rng.integers(1, 8, size=12)[:, None]
    L = mask.sum(-1).reshape(4, 3)
    for baseline in ("none", "group_mean"):
        A = N.reinforce_pp_advantages(r, mask, baseline=baseline, eps=0.0)
        assert abs((L * A).sum() / L.sum()) < 1e-14                    # token mean 0
        np.testing.assert_allclose((L * A * A).sum() / (L.sum() - 1), 1.0, rtol=1e-13)


def test_reinforce_pp_scores_groups_against_each_other_where_grpo_cannot():
    r = [[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    assert (gl.group_advantages(r)[0] == 0).all()                        # GRPO: no signal
    assert (N.reinforce_pp_advantages(r)[0] > 0.5).all()                 # REINFORCE++: a lot
    with_baseline = N.reinforce_pp_advantages(r, baseline="group_mean")
    assert np.abs(with_baseline[0]).max() < 1e-15                        # 0 up to a rounding


def test_reinforce_pp_with_baseline_is_not_trls_batch_scale():
    """TRL's scale_rewards="batch" divides by the std of the raw rewards; REINFORCE++ with
    baseline by the std of the group-centred ones: here 0.5 against 0.25 (population)."""
    r = np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    ours = N.reinforce_pp_advantages(r, baseline="group_mean", ddof=0, eps=0.0)
    trl = gl.group_advantages(r, scale="batch", ddof=0, eps=0.0)
    np.testing.assert_allclose(ours[2:], np.array([[1, -1], [1, -1]]) * np.sqrt(2))  # 0.5 / sqrt(1/8)
    np.testing.assert_allclose(trl[2:], [[1.0, -1.0], [1.0, -1.0]])        # 0.5 / 0.5
    assert np.abs(ours - trl).max() > 0.4


def test_reinforce_pp_edge_cases():
    assert (N.reinforce_pp_advantages([[0.7], [0.7], [0.7]]) == 0).all()   # G = 1, all equal
    big = N.reinforce_pp_advantages([[1e300, -1e300]], ddof=0)             # squares overflow
    np.testing.assert_allclose(big, [[1.0, -1.0]], rtol=1e-12)
    f32 = N.reinforce_pp_advantages(np.array([[1e20, 0.0]], dtype=np.float32), ddof=0)
    assert f32.dtype == np.float32 and np.allclose(f32, [[1, -1]])
    assert N.reinforce_pp_advantages([[True, False]]).dtype == np.float64


@pytest.mark.parametrize("kwargs, match", [
    (dict(rewards=[1.0, 0.0]), r"^rewards: expected a 2-D array"),
    (dict(rewards=[[1.0], [0.0]], baseline="group_mean"), r"^rewards: expected a group size"),
    (dict(rewards=[[1.0, 0.0]], mask=np.ones((3, 2))), r"^mask: expected shape \(B\*G, T\) = \(2"),
    (dict(rewards=[[1.0, 0.0]], mask=[[1, 0], [0, 0]]), r"^mask: expected at least one valid"),
    (dict(rewards=[[1.0, 0.0]], mask=[[1, 0.5], [1, 1]]), r"^mask: expected only 0 and 1"),
    (dict(rewards=[[1.0, 0.0]], baseline="mean"), r"^baseline: expected one of 'none'"),
    (dict(rewards=[[1.0, 0.0]], ddof=2), r"^ddof: expected an integer in \[0, 1\]"),
    (dict(rewards=[[1.0, 0.0]], eps=-1.0), r"^eps: expected a number >= 0"),
    (dict(rewards=[[1.0, np.nan]]), r"^rewards: "),
])
def test_reinforce_pp_refuses_bad_input_by_name(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        N.reinforce_pp_advantages(**kwargs)


# --- ReMax -----------------------------------------------------------------------------------------

def test_remax_by_hand_and_its_refusals():
    got = N.remax_advantages(np.array([[0.5, 1.0]], dtype=np.float32), np.float32([0.25]))
    assert got.dtype == np.float32 and got.tolist() == [[0.25, 0.75]]
    with pytest.raises(ValueError, match=r"^greedy_rewards: expected shape \(2,\)"):
        N.remax_advantages([[1.0], [0.0]], [1.0])
    with pytest.raises(ValueError, match=r"^greedy_rewards: "):
        N.remax_advantages([[1.0]], [np.inf])
    with pytest.raises(ValueError, match=r"^rewards, greedy_rewards: the advantages do not fit"):
        N.remax_advantages([[1e308]], [-1e308])


# --- CISPO -----------------------------------------------------------------------------------------

def test_cispo_weight_clips_only_where_asked():
    lp = np.log([[0.1, 0.7, 1.0, 1.3, 9.0]])
    old = np.zeros((1, 5))
    np.testing.assert_allclose(N.cispo_weight(lp, old), [[0.1, 0.7, 1.0, 1.3, 5.0]])
    np.testing.assert_allclose(N.cispo_weight(lp, old, eps_low=0.2, eps_high=0.28),
                               [[0.8, 0.8, 1.0, 1.28, 1.28]])
    runaway = N.cispo_weight([[800.0]], [[0.0]], eps_high=1e12)          # log-ratio clamped
    np.testing.assert_allclose(runaway, [[np.exp(20.0)]])


def test_cispo_loss_by_hand_and_dtypes():
    # weight 5 (capped from 9), A = -2, log pi = log 0.5: loss = -5 * -2 * log 0.5 = 10 log 0.5
    lp = np.log(np.array([[0.5]], dtype=np.float32))
    got = N.cispo_loss(lp, lp - np.float32(np.log(9.0)), np.array([-2.0], dtype=np.float32))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [[10 * np.log(0.5)]], rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(eps_high=-0.1), r"^eps_high: expected a number >= 0"),
    (dict(eps_low=1.5), r"^eps_low: expected a number <= 1"),
    (dict(eps_low="0.2"), r"^eps_low: expected a real number"),
])
def test_cispo_refuses_bad_options_by_name(kwargs, match):
    for fn in (N.cispo_loss, lambda *a, **k: N.cispo_weight(*a[:2], **k)):
        with pytest.raises((ValueError, TypeError), match=match):
            fn(np.zeros((1, 2)), np.zeros((1, 2)), [1.0], **kwargs)


# --- SAPO ------------------------------------------------------------------------------------------

def test_sapo_gate_at_one_and_its_slope():
    # f(1) = sigma(0) * 4 / tau = 2 / tau; f'(r) = 4 sigma (1 - sigma), 1 at r = 1.
    adv = np.array([[1.0, -1.0, 0.0]])                                   # A = 0 takes tau_neg
    gate = N.sapo_gate(np.zeros((1, 3)), np.zeros((1, 3)), adv, tau_pos=2.0, tau_neg=4.0)
    np.testing.assert_allclose(gate, [[1.0, 0.5, 0.5]])
    for r in (0.3, 1.0, 1.7, 6.0):
        h = 1e-6
        up, down = (N.sapo_gate(np.log([[r + s]]), [[0.0]], [1.0]) for s in (h, -h))
        sigma = 1 / (1 + np.exp(-(r - 1)))
        np.testing.assert_allclose((up - down) / (2 * h), 4 * sigma * (1 - sigma), rtol=1e-6)


def test_sapo_gate_never_overflows_and_sapo_loss_by_hand():
    gate = N.sapo_gate([[0.0, 0.0]], [[800.0, -800.0]], [1.0], tau_pos=1e3)  # ratios ~0, e^20
    assert np.isfinite(gate).all()
    np.testing.assert_allclose(gate[0, 1], 4 / 1e3 / (1 + np.exp(-1e3 * (np.exp(20.0) - 1))))
    loss = N.sapo_loss(np.log([[2.0]]), [[0.0]], [-1.0], tau_neg=1.0)       # -f(2) * -1
    np.testing.assert_allclose(loss, [[4 / (1 + np.exp(-1.0))]])


@pytest.mark.parametrize("kwargs, match", [
    (dict(tau_pos=0.0), r"^tau_pos: expected a number > 0"),
    (dict(tau_neg=-1.0), r"^tau_neg: expected a number > 0"),
    (dict(tau_neg=np.inf), r"^tau_neg: expected a finite number"),
])
def test_sapo_refuses_bad_options_by_name(kwargs, match):
    for fn in (N.sapo_gate, N.sapo_loss):
        with pytest.raises(ValueError, match=match):
            fn(np.zeros((1, 2)), np.zeros((1, 2)), [1.0], **kwargs)


@pytest.mark.parametrize("fn", [N.cispo_loss, N.sapo_loss, N.sapo_gate])
def test_losses_refuse_mismatched_arrays_by_name(fn):
    with pytest.raises(ValueError, match=r"^old_logp: expected shape \(1, 2\)"):
        fn(np.zeros((1, 2)), np.zeros((1, 3)), [1.0])
    with pytest.raises(ValueError, match=r"^adv: expected shape \(1,\)"):
        fn(np.zeros((1, 2)), np.zeros((1, 2)), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"^logp: "):
        fn([[np.nan, 0.0]], np.zeros((1, 2)), [1.0])


# --- the table -------------------------------------------------------------------------------------

def _resolve(dotted):
    obj = gl
    for part in dotted.split("(")[0].split("."):
        obj = getattr(obj, part)
    return obj


def test_the_table_has_the_six_methods_and_each_line_is_real_code():
    rows = N.table()
    assert [r.method for r in rows] == ["REINFORCE++", "ReMax", "RLOO", "CISPO", "SAPO", "GSPO"]
    for row in rows:
        plain = _resolve(row.plain)
        assert row.line in inspect.getsource(plain), (row.method, row.line)
        assert row.line.strip() not in inspect.getsource(gl.paper.grpo_loss)
        assert callable(_resolve(row.grpo_lab)), row.grpo_lab
        cited = (inspect.getdoc(plain) + inspect.getdoc(_resolve(row.grpo_lab))
                 + inspect.getdoc(P) + inspect.getdoc(gl.core.neighbour_losses))
        assert f"arXiv {row.arxiv}" in cited, row
        assert row.users and all("::" in where and setting for _, where, setting in row.users)


def test_the_table_calls_are_the_methods():
    """Each row's hardened call, run as written, gives its plain face's numbers."""
    rng = np.random.default_rng(5)
    r, g = rng.normal(size=(2, 3)), rng.normal(size=2)
    np.testing.assert_allclose(gl.group_advantages(r, baseline="leave_one_out", scale="none"),
                               P.rloo_advantages(r), rtol=1e-12)
    np.testing.assert_allclose(N.remax_advantages(r, g), P.remax_advantages(r, g))
    logp, old, mask = tokens(rng)
    adv = rng.normal(size=logp.shape[0])
    np.testing.assert_allclose(gl.sequence_ratio(logp, old, mask),
                               gl.paper.sequence_ratio(logp, old, mask), rtol=1e-12)
    loss, _ = gl.grpo_loss(logp, old, None, adv, mask, beta=0.0, level="sequence")
    s = gl.paper.sequence_ratio(logp, old, mask)
    clipped = -np.minimum(s * adv, np.clip(s, 0.8, 1.2) * adv)           # one clip per sequence
    np.testing.assert_allclose(loss, clipped.mean(), rtol=1e-12)


def test_grpo_lab_imports_no_torch_for_the_neighbours():
    import subprocess
    import sys
    code = ("import sys, grpo_lab as gl; gl.neighbours.table(); gl.paper.neighbours.sapo_loss; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the inputs that need each guard break the plain faces only ----------------------------------

def test_the_inputs_that_need_the_guards_break_the_plain_code_only():
    with np.errstate(all="ignore"):
        # An all-equal batch: the plain REINFORCE++'s mean of twelve 0.7s is off by a rounding,
        # and that rounding divided by its own std is a spurious advantage of order 1.
        same, mask = np.full(4, 0.7), np.ones((4, 3))
        assert np.abs(P.reinforce_pp_advantages(same, mask)).min() > 0.5
        assert (N.reinforce_pp_advantages(same.reshape(2, 2), mask) == 0).all()
        # Rewards of +-1e200: the plain std squares them past float64 (std inf, every A 0);
        # 12 tokens, 6 of each sign: A = +-1 / sqrt(12 / 11).
        big = np.array([1e200, -1e200, 1e200, -1e200])
        assert (P.reinforce_pp_advantages(big, mask) == 0).all()
        np.testing.assert_allclose(N.reinforce_pp_advantages(big.reshape(2, 2), mask),
                                   np.sqrt(11 / 12) * np.array([[1, -1], [1, -1]]), rtol=1e-14)
        # A temperature of 1000 on a ratio near 0: exp(1000) overflows in the plain gate (the
        # gate still comes out 0, with a warning); the hardened one goes through logaddexp.
        with pytest.warns(RuntimeWarning):
            with np.errstate(over="warn"):
                P.sapo_loss(np.log([[1e-3]]), np.zeros((1, 1)), np.ones((1, 1)), tau_pos=1e3)
        with np.errstate(over="raise"):
            gate = N.sapo_gate(np.log([[1e-3]]), np.zeros((1, 1)), [1.0], tau_pos=1e3)
        assert gate[0, 0] == 0.0
