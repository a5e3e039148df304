"""gl.book.ch08.reinforce_pp_token_advantages: REINFORCE++ with the KL in the reward and the
reward-to-go (chapter 8, issue 41): equal to the package's one-number-per-completion function
at beta 0, hand-worked at beta > 0, and its errors name the argument."""

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.book.ch08 import reinforce_pp_token_advantages as rpp


def _batch(seed=0, N=5, T=7):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, size=N)
    mask = np.arange(T)[None, :] < lengths[:, None]                  # (N, T)
    return rng.integers(0, 2, size=N).astype(float), rng.uniform(0, 0.3, (N, T)), mask


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("seed", range(5))
def test_at_beta_zero_every_token_carries_the_packages_number(seed, ddof):
    r, kl, mask = _batch(seed)
    if r.min() == r.max():
        r[0] = 1.0 - r[0]                                                # a spread to whiten
    A = rpp(r, kl, mask, beta=0.0, ddof=ddof)
    ref = gl.neighbours.reinforce_pp_advantages(r[None, :], mask, ddof=ddof)[0]   # (N,)
    # eps sits inside the root here, beside sigma there: a relative 1e-8 at most.
    np.testing.assert_allclose(A[mask], np.broadcast_to(ref[:, None], mask.shape)[mask],
                               rtol=1e-7, atol=1e-9)
    assert np.all(A[~mask] == 0.0)


def test_hand_worked_kl_in_the_reward_varies_along_the_completion():
    # rewards [1, 0], lengths 2 and 1, k = 1 everywhere, beta 0.5:
    # token rewards [-0.5, 1 - 0.5] and [-0.5]; rewards-to-go [0, 0.5] and [-0.5];
    # mean 0, population variance (0 + 0.25 + 0.25) / 3 = 1/6: A = [0, 0.5 sqrt 6], [-0.5 sqrt 6]
    mask = np.array([[1, 1], [1, 0]], dtype=bool)
    A = rpp([1.0, 0.0], np.ones((2, 2)), mask, beta=0.5, ddof=0, eps=1e-12)
    s6 = 0.5 * np.sqrt(6.0)
    np.testing.assert_allclose(A, [[0.0, s6], [-s6, 0.0]], atol=1e-9)
    # verl's Bessel: variance 0.5 / 2 = 1/4, A = [0, 1], [-1]
    np.testing.assert_allclose(rpp([1.0, 0.0], np.ones((2, 2)), mask, beta=0.5, ddof=1,
                                   eps=1e-12), [[0.0, 1.0], [-1.0, 0.0]], atol=1e-9)


def test_reward_to_go_matches_a_loop_over_tokens():
    r, kl, mask = _batch(3, N=4, T=6)
    beta = 0.2
    to_go = np.zeros(mask.shape)
    for i in range(len(r)):
        last = np.flatnonzero(mask[i])[-1]
        for t in range(mask.shape[1]):
            if mask[i, t]:
                to_go[i, t] = r[i] * (t <= last) - beta * kl[i, t:last + 1][mask[i, t:last + 1]].sum()
    v = to_go[mask]
    expected = np.where(mask, (to_go - v.mean()) / np.sqrt(v.var() + 1e-8), 0.0)
    np.testing.assert_allclose(rpp(r, kl, mask, beta=beta), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(rewards=[1.0, 0.0, 1.0]), ValueError, "rewards"),
    (dict(mask=np.ones((2, 3), dtype=bool)), ValueError, "mask"),
    (dict(mask=np.array([[1, 1], [0, 0]], dtype=bool)), ValueError, "every row"),
    (dict(beta=-0.1), ValueError, "beta"),
    (dict(ddof=2), ValueError, "ddof"),
    (dict(eps=0.0), ValueError, "eps"),
    (dict(kl=np.ones(2)), ValueError, "kl"),
])
def test_errors_name_the_argument(kwargs, error, words):
    args = dict(rewards=[1.0, 0.0], kl=np.ones((2, 2)), mask=np.ones((2, 2), dtype=bool))
    args.update(kwargs)
    rest = {k: args.pop(k) for k in ("beta", "ddof", "eps") if k in args}
    with pytest.raises(error, match=words):
        rpp(args["rewards"], args["kl"], args["mask"], **rest)
