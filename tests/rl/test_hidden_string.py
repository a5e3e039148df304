"""The PPO vs GRPO testbed: hand-written gradients against finite differences, the critic's
capacity, determinism, the state it holds, and the old names' messages.

They back two claims of chapter 2's experiment ("Experiment: PPO and GRPO on the same sample
budget"): its hand-written NumPy gradients agree with finite differences of ``gl.grpo_loss``
(test_surrogate_gradient_matches_grpo_loss_by_finite_differences and the two tests after it),
and PPO's linear critic can represent the true value exactly, so it only has to learn it
(test_critic_can_represent_the_true_value_exactly)."""

import itertools
import re
from dataclasses import replace

import numpy as np
import pytest

import grpo_lab as gl

hs = gl.hidden_string


def finite_difference(f, x, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + h
        up = f()
        x[idx] = old - h
        down = f()
        x[idx] = old
        g[idx] = (up - down) / (2 * h)
    return g


def test_surrogate_gradient_matches_grpo_loss_by_finite_differences():
    rng = np.random.default_rng(0)
    N, T = 4, 5
    old = np.log(rng.dirichlet(np.ones(3), size=(N, T))[..., 0])
    logp = old + rng.normal(0, 0.3, size=(N, T))        # some ratios outside [0.8, 1.2]
    adv = rng.normal(size=N)
    mask = np.ones((N, T), dtype=bool)
    weights = gl.aggregation_weights(mask, "grpo")
    for eps_high in (None, 0.28):
        analytic = weights * gl.surrogate_grad_logp(logp, old, adv, eps_low=0.2, eps_high=eps_high)
        numeric = finite_difference(
            lambda: float(gl.grpo_loss(logp, old, None, adv, mask, beta=0.0,
                                       eps_high=eps_high)[0]), logp)
        np.testing.assert_allclose(analytic, numeric, atol=1e-7)
        ratio = np.exp(logp - old)
        assert (analytic == 0).any() and (analytic != 0).any()   # both branches were exercised
        assert np.all(analytic[(ratio > 1.2 + 0.1) & (adv[:, None] > 0)] == 0)


def test_policy_gradient_matches_finite_differences_through_the_softmax():
    rng = np.random.default_rng(1)
    task = hs.Task.make(n_prompts=3, length=4, vocab=5, seed=2)
    theta = rng.normal(size=task.shape)
    prompts = np.array([0, 2, 2, 1, 0, 0])
    tokens = hs.sample_tokens(theta, prompts, rng)
    old = hs.token_logp(theta, prompts, tokens) - rng.normal(0, 0.2, size=tokens.shape)
    adv = rng.normal(size=(6, 4))
    mask = np.ones(tokens.shape, dtype=bool)
    weights = gl.aggregation_weights(mask, "grpo")

    def loss():
        return float(gl.grpo_loss(hs.token_logp(theta, prompts, tokens), old, None, adv, mask,
                                  beta=0.0)[0])

    g_logp = weights * gl.surrogate_grad_logp(hs.token_logp(theta, prompts, tokens), old, adv)
    analytic = hs.policy_grad(theta, prompts, tokens, g_logp)
    np.testing.assert_allclose(analytic, finite_difference(loss, theta), atol=1e-7)


def test_critic_gradient_matches_finite_differences():
    rng = np.random.default_rng(2)
    critic = hs.Critic((3, 4, 2))
    for p in critic.params:
        p[...] = rng.normal(size=p.shape)
    prompts = np.array([0, 1, 1, 2, 0])
    tokens = rng.integers(0, 2, size=(5, 4))
    returns = rng.normal(size=(5, 4))

    def loss():
        return 0.5 * np.mean((critic.values(prompts, tokens) - returns) ** 2)

    for p, g in zip(critic.params, critic.grads(prompts, tokens, returns)):
        np.testing.assert_allclose(g, finite_difference(loss, p), atol=1e-8)


def test_critic_can_represent_the_true_value_exactly():
    # E[R | prefix] for a fixed policy, by enumeration, against b and u set by hand:
    # V(s_t) = (matches so far + expected matches still to come) / T.
    task = hs.Task.make(n_prompts=2, length=3, vocab=2, seed=5)
    theta = np.random.default_rng(3).normal(size=task.shape)
    probs = hs.softmax(theta)
    P, T, V = task.shape
    critic = hs.Critic(task.shape)
    for p, t in itertools.product(range(P), range(T)):
        critic.b[p, t] = probs[p, np.arange(t, T), task.targets[p, t:]].sum() / T
        critic.u[p, t, task.targets[p, t]] = 1.0 / T
    for p in range(P):
        for seq in itertools.product(range(V), repeat=T):
            tokens = np.array([seq])
            for t in range(T):
                # enumerate the remaining tokens
                exp_r = 0.0
                for rest in itertools.product(range(V), repeat=T - t):
                    full = np.array(seq[:t] + rest)
                    pr = np.prod(probs[p, np.arange(t, T), list(rest)]) if rest else 1.0
                    exp_r += pr * task.rewards(np.array([p]), full[None])[0]
                assert critic.values(np.array([p]), tokens)[0, t] == pytest.approx(exp_r)


def test_sampling_follows_the_softmax():
    theta = np.array([[[0.0, np.log(3.0)]]])            # P=1, T=1, probabilities 1/4, 3/4
    tokens = hs.sample_tokens(theta, np.zeros(20_000, dtype=int), np.random.default_rng(0))
    assert tokens.mean() == pytest.approx(0.75, abs=0.01)


def test_task_rewards_and_expected_reward():
    task = hs.Task(np.array([[0, 1, 2]]), vocab=3)
    assert task.rewards(np.array([0, 0]), np.array([[0, 1, 2], [0, 0, 0]])).tolist() == [1.0, 1 / 3]
    assert task.expected_reward(np.zeros(task.shape)) == pytest.approx(1 / 3)
    sure = np.full(task.shape, -50.0)
    sure[0, [0, 1, 2], [0, 1, 2]] = 50.0
    assert task.expected_reward(sure) == pytest.approx(1.0)


def test_adam_first_step_moves_each_parameter_by_lr():
    p = np.array([1.0, -2.0, 0.5])
    opt = hs.Adam([p], lr=0.1)
    opt.step([np.array([3.0, -0.01, 0.0])])
    np.testing.assert_allclose(p, [0.9, -1.9, 0.5], atol=1e-6)    # m_hat / sqrt(v_hat) = sign(g)
    assert opt.state_bytes == 2 * p.nbytes


SHORT = hs.ToyConfig(iterations=15, epochs=2)


@pytest.mark.parametrize("method", hs.METHODS)
def test_training_is_seeded_and_learns(method):
    cfg = replace(SHORT, method=method)
    a, b = hs.train_toy(cfg, seed=3), hs.train_toy(cfg, seed=3)
    np.testing.assert_array_equal(a["reward"], b["reward"])
    assert not np.array_equal(a["reward"], hs.train_toy(cfg, seed=4)["reward"])
    assert a["reward"][0] == pytest.approx(1 / 8)                  # uniform over V = 8
    assert a["reward"][-1] > 0.4                                   # well above chance
    assert a["samples"][-1] == 15 * 64


def test_state_bytes_count_the_critic_and_two_adam_moments():
    P, T, V = 8, 16, 8
    ppo = hs.train_toy(replace(SHORT, method="ppo", iterations=1), seed=0)["state_bytes"]
    grpo = hs.train_toy(replace(SHORT, method="grpo", iterations=1), seed=0)["state_bytes"]
    assert ppo["policy"] == grpo["policy"] == P * T * V * 8        # float64
    assert ppo["policy_optimizer"] == 2 * ppo["policy"]
    assert ppo["critic"] == (P * T + P * T * V) * 8
    assert ppo["critic_optimizer"] == 2 * ppo["critic"]
    assert grpo["critic"] == grpo["critic_optimizer"] == 0


def test_run_returns_both_methods_with_seed_spread():
    res = hs.run_toy(replace(SHORT, iterations=3), seeds=range(2), trace_memory=True)
    assert set(res) == {"ppo", "grpo"}
    for r in res.values():
        assert r["reward"].shape == (2, 4) and r["seconds"].shape == (2,)
        assert r["peak_bytes"] > 0


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"method": "a2c"}, ValueError, r"method: expected one of 'ppo', 'grpo', got 'a2c'"),
    ({"group_size": 7}, ValueError, r"group_size: expected a divisor of completions = 64, got 7"),
    ({"group_size": 1}, ValueError, r"group_size: expected an integer in \[2, inf\]"),
    ({"lr": 0.0}, ValueError, r"lr: expected a number > 0.0, got 0.0"),
])
def test_train_bad_config(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        hs.train_toy(replace(SHORT, **kwargs))


@pytest.mark.parametrize("old, new", [("TrainConfig", "ToyConfig"), ("train", "train_toy"),
                                      ("run", "run_toy"), ("sample", "sample_tokens")])
def test_old_names_say_where_they_went(old, new):
    with pytest.raises(AttributeError, match=re.escape(new)):
        getattr(hs, old)


def test_toy_policy_logp_is_the_package_log_softmax_of_its_table():
    theta = np.random.default_rng(4).normal(size=(2, 3, 5))
    prompts, tokens = np.array([1, 0]), np.array([[0, 4, 2], [3, 3, 1]])
    expected = np.take_along_axis(gl.log_softmax(theta[prompts]), tokens[..., None], -1)[..., 0]
    np.testing.assert_array_equal(hs.token_logp(theta, prompts, tokens), expected)
