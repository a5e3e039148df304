"""The hidden-string task: PPO (critic + GAE) and GRPO (group baseline) trained side by side.

Taught in chapter 2 (``chapters/02_ppo_to_grpo.ipynb``), where the two methods get the same
sample budget on this task and their learning curves, wall-clock time and memory are compared.

The task is the smallest stand-in for "an LLM answers a prompt and gets one reward at the end":

* ``P`` prompts; prompt ``p`` has a hidden target string ``targets[p]`` of ``T`` tokens over a
  vocabulary of ``V``.
* A completion is ``T`` tokens sampled from the policy; its reward, given once at the end, is
  the fraction of positions that match the target (0 to 1).
* The policy is tabular: one softmax over the vocabulary per prompt and position,
  ``theta[p, t, :]`` (so ``P * T * V`` parameters).
* PPO's critic reads the prefix: ``V(s_t) = b[p, t] + sum_{j<t} u[p, j, y_j]``, linear in
  one-hot features of the prompt, the position and the tokens so far (``P*T + P*T*V``
  parameters). It can represent the true value exactly; it has to learn it.

Everything is NumPy with hand-written gradients; the loss values and the advantages come from
the package (``gl.grpo_loss``, ``gl.gae``, ``gl.group_advantages``), and the policy gradient
here is tested against finite differences of ``gl.grpo_loss``.
"""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import dataclass, field, replace

import numpy as np

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.gae import gae
from grpo_lab.core.loss import grpo_loss
from grpo_lab.core.surrogate import surrogate_grad_logp
from grpo_lab.numerics.logprobs import log_softmax
from grpo_lab.numerics.validate import check_choice, check_int, check_real

__all__ = ["Adam", "Critic", "METHODS", "Task", "ToyConfig", "policy_grad", "run_toy",
           "sample_tokens", "softmax", "token_logp", "train_toy"]

METHODS = ("ppo", "grpo")

#: Added to the batch std when PPO normalises its advantages (CleanRL's ``norm_adv``).
ADV_NORM_EPS = 1e-8


# --- the task and the tabular policy ----------------------------------------------------------

@dataclass(frozen=True)
class Task:
    """``P`` prompts, each with a hidden target of ``T`` tokens from a vocabulary of ``V``."""

    targets: np.ndarray          # (P, T) ints in [0, V)
    vocab: int                   # V

    @classmethod
    def make(cls, n_prompts=8, length=8, vocab=8, seed=0):
        n_prompts = check_int("n_prompts", n_prompts, minimum=1)
        length = check_int("length", length, minimum=1)
        vocab = check_int("vocab", vocab, minimum=2)
        rng = np.random.default_rng(check_int("seed", seed, minimum=0))
        return cls(rng.integers(0, vocab, size=(n_prompts, length)), vocab)

    @property
    def shape(self):
        """``(P, T, V)``: the shape of the policy's parameters."""
        return self.targets.shape + (self.vocab,)

    def rewards(self, prompts, tokens):
        """Fraction of each completion's tokens that match its prompt's target: (N,)."""
        return (tokens == self.targets[prompts]).mean(axis=1)              # (N, T) -> (N,)

    def expected_reward(self, theta):
        """The policy's exact expected reward, averaged over prompts (no sampling noise)."""
        probs = softmax(theta)                                             # (P, T, V)
        P, T = self.targets.shape
        hit = probs[np.arange(P)[:, None], np.arange(T)[None, :], self.targets]  # (P, T)
        return float(hit.mean())


def softmax(theta):
    """Softmax over the last axis (the vocabulary), shifted by the max for stability."""
    z = theta - theta.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def sample_tokens(theta, prompts, rng):
    """One completion per entry of ``prompts``: tokens (N, T) drawn from softmax(theta[p])."""
    probs = softmax(theta[prompts])                                        # (N, T, V)
    u = rng.random(probs.shape[:2] + (1,))                                 # (N, T, 1)
    tokens = (probs.cumsum(axis=-1) < u).sum(axis=-1)                      # (N, T) inverse CDF
    return np.minimum(tokens, theta.shape[-1] - 1)                         # guard rounding at 1


def token_logp(theta, prompts, tokens):
    """log pi_theta(y_t) of each sampled token: (N, T)."""
    logp_all = log_softmax(theta[prompts])                                 # (N, T, V), gl.log_softmax
    return np.take_along_axis(logp_all, tokens[..., None], axis=-1)[..., 0]


# --- the gradient of the loss -------------------------------------------------------------------
# d loss / d logp per token is gl.surrogate_grad_logp (beta = 0); each token's aggregation
# weight multiplies it. The chain rule through the tabular softmax then gives d loss / d theta.

def policy_grad(theta, prompts, tokens, grad_logp):
    """Chain rule through the tabular softmax: d loss / d theta, shape (P, T, V).

    d log softmax(theta[p, t])[y] / d theta[p, t, :] = onehot(y) - softmax(theta[p, t]).
    """
    probs = softmax(theta[prompts])                                        # (N, T, V)
    onehot = np.zeros_like(probs)
    np.put_along_axis(onehot, tokens[..., None], 1.0, axis=-1)
    per_sample = grad_logp[..., None] * (onehot - probs)                   # (N, T, V)
    grad = np.zeros_like(theta)
    np.add.at(grad, prompts, per_sample)                                   # sum over samples
    return grad


# --- PPO's critic --------------------------------------------------------------------------------

class Critic:
    """``V(s_t) = b[p, t] + sum_{j<t} u[p, j, y_j]``: linear in one-hot prefix features."""

    def __init__(self, shape):
        P, T, V = shape
        self.b = np.zeros((P, T))
        self.u = np.zeros((P, T, V))

    @property
    def params(self):
        return [self.b, self.u]

    def values(self, prompts, tokens):
        """V(s_0) .. V(s_{T-1}) for each completion: (N, T). V(s_T) is 0 (the episode ended)."""
        N, T = tokens.shape
        contrib = self.u[prompts[:, None], np.arange(T)[None, :], tokens]  # (N, T) u[p, j, y_j]
        before = np.cumsum(contrib, axis=1) - contrib                      # (N, T) sum over j < t
        return self.b[prompts] + before

    def grads(self, prompts, tokens, returns):
        """Gradients of the value loss ``mean_{i,t} (V(s_t) - return_t)^2 / 2``."""
        N, T = tokens.shape
        d_v = (self.values(prompts, tokens) - returns) / (N * T)           # (N, T)
        g_b = np.zeros_like(self.b)
        np.add.at(g_b, prompts, d_v)
        # u[p, j, y_j] feeds every V(s_t) with t > j: a reversed, exclusive cumulative sum
        after = np.cumsum(d_v[:, ::-1], axis=1)[:, ::-1] - d_v             # (N, T) sum over t > j
        g_u = np.zeros_like(self.u)
        np.add.at(g_u, (prompts[:, None], np.arange(T)[None, :], tokens), after)
        return [g_b, g_u]


# --- Adam --------------------------------------------------------------------------------------

class Adam:
    """Adam (Kingma & Ba 2015) on a list of arrays, updated in place. Holds two moment arrays
    per parameter, which is why an optimizer costs twice the parameters' memory."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            m_hat = m / (1 - b1 ** self.t)
            v_hat = v / (1 - b2 ** self.t)
            p -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)

    @property
    def state_bytes(self):
        return sum(a.nbytes for a in self.m + self.v)


# --- training ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToyConfig:
    """One setting for both methods; only ``method`` differs between a PPO and a GRPO run."""

    method: str = "grpo"
    iterations: int = 60         # sampling rounds
    completions: int = 64        # completions sampled per round: the sample budget, both methods
    group_size: int = 8          # GRPO's G: completions / G prompts per round, G each
    epochs: int = 4              # optimisation passes per round; after the 1st, ratio != 1
    lr: float = 0.1              # policy Adam step (tuned for both on a small grid)
    critic_lr: float = 0.01      # PPO's critic Adam step: 0.003 to 0.03 tried, 0.01 best
    eps_low: float = 0.2
    gamma: float = 1.0
    lam: float = 0.95            # GAE's lambda (PPO)
    task: dict = field(default_factory=lambda: {"n_prompts": 8, "length": 16, "vocab": 8})


def train_toy(cfg: ToyConfig, seed: int = 0):
    """Train one policy with ``cfg.method`` and return its history.

    Returns a dict: ``reward`` (exact expected reward after each round, (iterations + 1,),
    starting with the untrained policy), ``samples`` (completions drawn so far, same shape),
    ``clip_frac`` (per round, from ``gl.grpo_loss``'s diagnostics), ``state_bytes`` (a dict:
    policy, critic, optimizer bytes) and ``seconds`` (wall-clock time of the loop).
    """
    method = check_choice("method", cfg.method, METHODS)
    check_int("completions", cfg.completions, minimum=2)
    G = check_int("group_size", cfg.group_size, minimum=2)
    if cfg.completions % G:
        raise ValueError(f"group_size: expected a divisor of completions = {cfg.completions}, "
                         f"got {G}")
    check_real("lr", cfg.lr, minimum=0.0, allow_equal=False)
    seed = check_int("seed", seed, minimum=0)
    task_rng, rng = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
    task = Task.make(**cfg.task, seed=int(task_rng.integers(2**31)))
    P, T, V = task.shape
    N = cfg.completions

    theta = np.zeros((P, T, V))                    # uniform policy: expected reward 1/V
    opt = Adam([theta], cfg.lr)
    critic = Critic(task.shape) if method == "ppo" else None
    critic_opt = Adam(critic.params, cfg.critic_lr) if critic else None
    mask = np.ones((N, T), dtype=bool)             # every completion has T tokens
    weights = np.full((N, T), 1.0 / (N * T))       # gl.aggregation_weights(mask, "grpo")

    reward, clip_frac = [task.expected_reward(theta)], []
    start = time.perf_counter()
    for _ in range(cfg.iterations):
        # 1. sample: GRPO draws N/G prompts and G completions of each; PPO N prompts, 1 each
        if method == "grpo":
            prompts = np.repeat(rng.integers(0, P, size=N // G), G)      # (N,) grouped
        else:
            prompts = rng.integers(0, P, size=N)                          # (N,)
        tokens = sample_tokens(theta, prompts, rng)                              # (N, T)
        r = task.rewards(prompts, tokens)                                 # (N,)
        old_logp = token_logp(theta, prompts, tokens)                     # (N, T)

        # 2. advantages: the group baseline, or the critic and GAE
        if method == "grpo":
            adv = group_advantages(r.reshape(N // G, G)).reshape(N)       # (N,) per completion
        else:
            step_rewards = np.zeros((N, T))
            step_rewards[:, -1] = r                                       # reward at the end
            values = np.concatenate([critic.values(prompts, tokens), np.zeros((N, 1))], 1)
            adv, returns = gae(step_rewards, values, cfg.gamma, cfg.lam)  # (N, T) each
            adv = (adv - adv.mean()) / (adv.std() + ADV_NORM_EPS)         # CleanRL's norm_adv

        # 3. a few epochs of the clipped surrogate on this batch
        fracs = []
        for _ in range(cfg.epochs):
            logp = token_logp(theta, prompts, tokens)
            _, diag = grpo_loss(logp, old_logp, None, adv, mask, eps_low=cfg.eps_low, beta=0.0)
            fracs.append(diag["clip_frac"])
            g_logp = weights * surrogate_grad_logp(logp, old_logp, adv, eps_low=cfg.eps_low)
            opt.step([policy_grad(theta, prompts, tokens, g_logp)])
            if critic is not None:
                critic_opt.step(critic.grads(prompts, tokens, returns))
        clip_frac.append(float(np.mean(fracs)))
        reward.append(task.expected_reward(theta))
    seconds = time.perf_counter() - start

    state = {"policy": theta.nbytes, "policy_optimizer": opt.state_bytes,
             "critic": sum(p.nbytes for p in critic.params) if critic else 0,
             "critic_optimizer": critic_opt.state_bytes if critic else 0}
    return {"reward": np.array(reward), "samples": N * np.arange(cfg.iterations + 1),
            "clip_frac": np.array(clip_frac), "state_bytes": state, "seconds": seconds}


def run_toy(cfg: ToyConfig = ToyConfig(), seeds=range(5), *, trace_memory=True):
    """Train PPO and GRPO with the same ``cfg`` (and so the same sample budget) on ``seeds``.

    Returns ``{method: {"reward": (n_seeds, iterations + 1), "samples": ..., "clip_frac": ...,
    "seconds": (n_seeds,), "state_bytes": dict, "peak_bytes": int}}``. The two methods
    alternate seed by seed, so that a busy machine slows both alike; ``peak_bytes`` is the
    largest memory traced by ``tracemalloc`` during one extra run of the first seed (None when
    ``trace_memory=False``), kept apart so that tracing does not slow the timed runs.
    """
    seeds = list(seeds)
    configs = {method: replace(cfg, method=method) for method in METHODS}
    runs = {method: [] for method in METHODS}
    for seed in seeds:
        for method in METHODS:
            runs[method].append(train_toy(configs[method], seed))
    out = {}
    for method, hist in runs.items():
        peak = None
        if trace_memory:
            tracemalloc.start()
            train_toy(configs[method], seeds[0])
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        out[method] = {"reward": np.stack([h["reward"] for h in hist]),
                       "samples": hist[0]["samples"],
                       "clip_frac": np.stack([h["clip_frac"] for h in hist]),
                       "seconds": np.array([h["seconds"] for h in hist]),
                       "state_bytes": hist[0]["state_bytes"], "peak_bytes": peak}
    return out


#: Names this module had before its toy got names of its own (gl.train has TrainConfig, train).
RENAMED = {"TrainConfig": "gl.hidden_string.ToyConfig", "train": "gl.hidden_string.train_toy",
           "run": "gl.hidden_string.run_toy", "sample": "gl.hidden_string.sample_tokens"}


def __getattr__(name):
    if name in RENAMED:
        raise AttributeError(f"grpo_lab.rl.hidden_string.{name} is now {RENAMED[name]}")
    if name == "learning_curves_figure":
        raise AttributeError("grpo_lab.rl.hidden_string.learning_curves_figure moved to the "
                             "book's chapter 2 module: gl.book.ch02.learning_curves_figure(results)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
