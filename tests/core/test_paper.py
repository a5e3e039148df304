"""The plain formulas of ``gl.paper`` equal their hardened twins on ordinary inputs.

Every chapter shows a formula twice: first as the paper writes it (``gl.paper.*``, ten lines,
no guard), then as the package ships it. These tests keep the two from drifting: TWINS lists
every plain function with a draw of ordinary inputs and the hardened call it must equal, and
a plain function without a twin here fails. A second test holds every plain body to ten
lines and its docstring to the equation and a Symbol table; a third runs the inputs the
chapters use to break the plain code, so that each guard the pages motivate is still needed.

Chapter 3 shows its three plain KL estimators equal to gl.kl_k1, gl.kl_k2 and gl.kl_k3 on 1000
tokens of one Gaussian example; TWINS checks the same on random draws. Chapter 5 ("Rule-based
rewards") shows gl.paper.accuracy_reward and gl.paper.format_reward agreeing with the package on
two ordinary completions; TWINS checks them on many draws (pair_reward).
"""

import ast
import inspect
import textwrap

import numpy as np
import pytest

import grpo_lab as gl

P = gl.paper
SEEDS = range(8)


def tokens(rng, N=6, T=5):
    """(logp, old_logp, ref_logp, mask): log-probs of sampled tokens near each other, and a
    ragged mask with at least one token per row."""
    logp = np.log(rng.uniform(0.05, 1.0, size=(N, T)))                  # (N, T)
    old = logp + rng.normal(0, 0.3, size=(N, T))                         # ratios around 1
    ref = logp + rng.normal(0, 0.3, size=(N, T))
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, size=N)[:, None]   # (N, T)
    return logp, old, ref, mask


def steps(rng, B=2, G=3, K=4):
    r = rng.normal(size=(B, G, K))
    mask = np.arange(K) < rng.integers(1, K + 1, size=(B, G, 1))        # (B, G, K) steps first
    return r, mask


def completions(rng):
    """Ordinary completions: right, wrong, missing tags, no answer tag, decimals."""
    a = int(rng.integers(0, 100))
    return a, [f"<think>{a - 1}+1</think><answer>{a}</answer>",
               f"<think>guess</think>\n<answer>{a + 1}</answer>",
               f"<answer>{a}</answer>", f"the answer is {a}",
               f"  <think></think> <answer>{a}.0</answer>\n",
               f"<think>x</think><answer>{a}</answer> trailing"]


def pair_loss(rng):
    logp, old, ref, mask = tokens(rng)
    adv = rng.normal(size=logp.shape[0])                                 # (N,) per sequence
    return (P.grpo_loss(logp, old, ref, adv, mask, eps=0.2, beta=0.04),
            gl.grpo_loss(logp, old, ref, adv, mask, eps_low=0.2, beta=0.04)[0])


def pair_surrogate(rng):
    logp, old, _, _ = tokens(rng)
    adv = rng.normal(size=logp.shape[0])
    return (P.clipped_surrogate_loss(logp, old, adv[:, None], 0.2, 0.28),
            gl.clipped_surrogate_loss(logp, old, adv, eps_low=0.2, eps_high=0.28))


def pair_aggregate(mode):
    plain = {"grpo": P.aggregate_grpo, "dapo": P.aggregate_dapo,
             "dr_grpo": lambda lt, m: P.aggregate_dr_grpo(lt, m, 7)}[mode]

    def pair(rng):
        _, _, _, mask = tokens(rng)
        loss = rng.normal(size=mask.shape)
        kw = {"max_len": 7} if mode == "dr_grpo" else {}
        return plain(loss, mask), gl.aggregate_loss(loss, mask, mode, **kw)
    return pair


def pair_kl(name):
    def pair(rng):
        logp, _, ref, _ = tokens(rng)
        return getattr(P, name)(logp, ref), getattr(gl, name)(logp, ref)
    return pair


def pair_gae(rng):
    r, V = rng.normal(size=(3, 6)), rng.normal(size=(3, 7))
    gamma, lam = rng.uniform(0.9, 1.0), rng.uniform(0.0, 1.0)
    return P.gae(r, V, gamma, lam), gl.gae(r, V, gamma, lam)


def pair_logits(plain, hardened):
    def pair(rng):
        z = rng.normal(0, 3, size=(2, 5, 11))                            # (N, T, V)
        x = rng.integers(0, 11, size=(2, 5))                             # (N, T)
        if plain is P.log_softmax:
            return plain(z), hardened(z)
        return plain(z, x), hardened(z, x)
    return pair


def pair_reward(name):
    def pair(rng):
        a, texts = completions(rng)
        if name == "format_reward":
            return [P.format_reward(o) for o in texts], [gl.format_reward(o) for o in texts]
        return [P.accuracy_reward(o, a) for o in texts], [gl.accuracy_reward(o, a) for o in texts]
    return pair


TWINS = {
    "group_advantages": lambda rng: (lambda r: (P.group_advantages(r), gl.group_advantages(r)))(
        rng.normal(size=(4, 8))),
    "gae": pair_gae,
    "process_advantages": lambda rng: (lambda r, m: (P.process_advantages(r, m),
                                                     gl.process_advantages(r, m)))(*steps(rng)),
    "clipped_surrogate_loss": pair_surrogate,
    "sequence_ratio": lambda rng: (lambda lp, old, _, m: (P.sequence_ratio(lp, old, m),
                                                          gl.sequence_ratio(lp, old, m)))(
        *tokens(rng)),
    "aggregate_grpo": pair_aggregate("grpo"),
    "aggregate_dapo": pair_aggregate("dapo"),
    "aggregate_dr_grpo": pair_aggregate("dr_grpo"),
    "grpo_loss": pair_loss,
    "kl_k1": pair_kl("kl_k1"),
    "kl_k2": pair_kl("kl_k2"),
    "kl_k3": pair_kl("kl_k3"),
    "log_softmax": pair_logits(P.log_softmax, gl.log_softmax),
    "token_logprobs": pair_logits(P.token_logprobs, gl.token_logprobs),
    "sequence_logprob_sum": lambda rng: (lambda lp, m: (P.sequence_logprob_sum(lp, m),
                                                        gl.sequence_logprob_sum(lp, m)))(
        *tokens(rng)[::3]),
    "accuracy_reward": pair_reward("accuracy_reward"),
    "format_reward": pair_reward("format_reward"),
    "normalise_then_sum": lambda rng: (lambda r, w: (P.normalise_then_sum(r, w),
                                                     gl.normalise_then_sum(r, w)))(
        rng.normal(size=(3, 4, 6)), rng.uniform(0.5, 2.0, size=3)),
}


def test_every_plain_function_has_a_twin_here():
    public = {name for name, obj in vars(P).items()
              if inspect.isfunction(obj) and not name.startswith("_")}
    assert public == set(P.__all__), public ^ set(P.__all__)
    assert set(TWINS) == public, f"plain functions without a twin test: {public - set(TWINS)}"


@pytest.mark.parametrize("name", sorted(TWINS))
def test_plain_equals_hardened_on_ordinary_inputs(name):
    for seed in SEEDS:
        plain, hardened = TWINS[name](np.random.default_rng(seed))
        np.testing.assert_allclose(np.asarray(plain, dtype=np.float64),
                                   np.asarray(hardened, dtype=np.float64),
                                   rtol=1e-10, atol=1e-12, err_msg=f"{name}, seed {seed}")


def test_the_reward_draws_see_both_verdicts():
    """The completions above are not all 0 or all 1, so the reward twins compare something."""
    a, texts = completions(np.random.default_rng(0))
    assert {gl.format_reward(o) for o in texts} == {0.0, 1.0}
    assert {gl.accuracy_reward(o, a) for o in texts} == {0.0, 1.0}


def body_lines(fn):
    """Lines of a function's body after its docstring (blank lines not counted)."""
    src = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(src).body[0]
    first = node.body[1] if isinstance(node.body[0], ast.Expr) else node.body[0]
    lines = src.splitlines()[first.lineno - 1:node.end_lineno]
    return [line for line in lines if line.strip()]


@pytest.mark.parametrize("name", sorted(P.__all__))
def test_plain_body_is_at_most_ten_lines_with_equation_and_symbol_table(name):
    fn = getattr(P, name)
    assert len(body_lines(fn)) <= 10, f"gl.paper.{name}: {len(body_lines(fn))} lines of body"
    doc = inspect.getdoc(fn)
    assert "math::" in doc and "Symbol" in doc and "Meaning" in doc, name


def test_body_lines_counts_what_it_should():
    def five(x):
        """doc"""
        a = x

        b = a
        c = b
        d = c
        return d
    assert len(body_lines(five)) == 5


# The inputs the chapters run to break the plain code: each breaks it and not its twin.
def test_the_inputs_the_chapters_use_break_the_plain_code_only():
    """Chapter 3's "Tiny and huge gaps" prints the plain k3 of tiny gaps without nbval comparing
    it (those digits depend on the last bit of exp); the k3 lines below hold its claim that the
    plain formula loses a gap of 1e-9 and gl.kl_k3 keeps it."""
    with np.errstate(all="ignore"):
        same16 = np.full((1, 4), 0.7, dtype=np.float16)                  # eps underflows
        assert np.isnan(P.group_advantages(same16)).all()
        assert (gl.group_advantages(same16) == 0).all()
        same = np.full((1, 3), 699051.00118143)                          # mean off by a rounding
        assert np.abs(P.group_advantages(same)).max() > 1e-3
        assert (gl.group_advantages(same) == 0).all()
        big = np.array([[1e20, 0.0, 1e20, 0.0]], dtype=np.float32)       # squares overflow
        assert not np.allclose(P.group_advantages(big), [[1, -1, 1, -1]], atol=1e-3)
        assert np.allclose(gl.group_advantages(big), [[1, -1, 1, -1]], atol=1e-6)
        d = np.array([-1e-9])                                            # k3's cancellation
        assert abs(P.kl_k3(d, 0 * d)[0] - 5e-19) > 1e-20
        assert gl.kl_k3(d, 0 * d)[0] == pytest.approx(5e-19, rel=1e-12)
        z = np.array([1000.0, 0.0])                                      # exp overflows
        assert not np.isfinite(P.log_softmax(z)).all()
        assert np.allclose(gl.log_softmax(z), [0.0, -1000.0])
        # Chapter 5's guards: one failed reward call (NaN) spreads to the whole batch through
        # the batch-wide step; a reward in units of 1e200 overflows the std and adds nothing.
        r = np.array([[[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]],
                      [[-120.0, -300.0, -80.0, -260.0], [-90.0, -150.0, -210.0, -40.0]]])
        failed = r.copy()
        failed[1, 0, 1] = np.nan
        assert np.isnan(P.normalise_then_sum(failed, [2.0, 1.0])).all()
        with pytest.raises(ValueError, match=r"rewards: expected finite values.*\(1, 0, 1\)"):
            gl.normalise_then_sum(failed, [2.0, 1.0])
        huge = r * np.array([1.0, 1e200])[:, None, None]
        assert np.allclose(P.normalise_then_sum(huge, [2.0, 1.0]),
                           P.normalise_then_sum(r[:1], [2.0]))                 # the reward is lost
        assert np.allclose(gl.normalise_then_sum(huge, [2.0, 1.0]),
                           gl.normalise_then_sum(r, [2.0, 1.0]), rtol=1e-12)
    nested = "<think><think>7+5</think></think><answer>12</answer>"
    assert P.format_reward(nested) == 1.0 and gl.format_reward(nested) == 0.0
    with pytest.raises(ValueError):
        P.accuracy_reward("<answer>twelve</answer>", 12)                 # one bad completion
    assert gl.accuracy_reward("<answer>twelve</answer>", 12) == 0.0
