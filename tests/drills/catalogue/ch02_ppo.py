"""Chapter 2: GAE and the clipped surrogate (the aggregation: ``ch02_aggregation``)."""

from __future__ import annotations

import numpy as np

from grpo_lab.core.gae import gae
from grpo_lab.core.surrogate import clipped_surrogate_loss
from .entry import Drill, Wrong, endless_loop


# --- chapter 2: GAE, fn(rewards, values, gamma, lam) -> adv -------------------------------------

def _gae_loop(rewards, values, gamma, lam, *, decay=None, forwards=False, bootstrap=True):
    """GAE by the backward recursion, with switches for the usual mistakes."""
    v = np.array(values, dtype=np.float64)
    if not bootstrap:
        v[..., -1] = 0.0                                          # V(s_T) thrown away
    delta = rewards + gamma * v[..., 1:] - v[..., :-1]            # (N, T) TD errors
    k = gamma * lam if decay is None else decay(gamma, lam)
    adv, running = np.zeros_like(delta), np.zeros_like(delta[..., 0])
    steps = range(delta.shape[-1]) if forwards else reversed(range(delta.shape[-1]))
    for t in steps:
        running = delta[..., t] + k * running
        adv[..., t] = running
    return adv


def _gae_right(rewards, values, gamma, lam):
    return _gae_loop(np.asarray(rewards, dtype=np.float64), values, gamma, lam)


def _gae_swapped(rewards, values, gamma, lam):
    delta = rewards + gamma * values[..., :-1] - values[..., 1:]  # V(s_t) where V(s_{t+1}) goes
    adv, running = np.zeros_like(delta), np.zeros_like(delta[..., 0])
    for t in reversed(range(delta.shape[-1])):
        running = delta[..., t] + gamma * lam * running
        adv[..., t] = running
    return adv


def _gae_in_place(rewards, values, gamma, lam):
    values[..., -1] = 0.0                                         # "episode over": in place
    return _gae_right(rewards, values, gamma, lam)


def _gae_sum(rewards, values, gamma, lam):
    """The closed form sum_l (gamma lam)^l delta_{t+l}, no recursion."""
    delta = rewards + gamma * values[..., 1:] - values[..., :-1]      # (N, T)
    T = delta.shape[-1]
    k = (gamma * lam) ** np.clip(np.arange(T)[None, :] - np.arange(T)[:, None], 0, None)
    upper = np.triu(k)                                                # (T, T): l >= t
    return delta @ upper.T


def _gae_torch(rewards, values, gamma, lam):
    import torch
    r, v = torch.as_tensor(rewards), torch.as_tensor(values)
    delta = r + gamma * v[..., 1:] - v[..., :-1]
    out, running = torch.zeros_like(delta), torch.zeros_like(delta[..., 0])
    for t in reversed(range(delta.shape[-1])):
        running = delta[..., t] + gamma * lam * running
        out[..., t] = running
    return out


def _gae_float32(rewards, values, gamma, lam):
    r, v = np.asarray(rewards, np.float32), np.asarray(values, np.float32)
    k, gamma = np.float32(gamma * lam), np.float32(gamma)
    delta = r + gamma * v[..., 1:] - v[..., :-1]                  # (N, T) float32
    adv, running = np.zeros_like(delta), np.zeros_like(delta[..., 0])
    for t in reversed(range(delta.shape[-1])):
        running = delta[..., t] + k * running
        adv[..., t] = running
    return adv


def _gae_python(rewards, values, gamma, lam):
    def one(r, v):
        adv, running = [0.0] * len(r), 0.0
        for t in range(len(r) - 1, -1, -1):
            running = r[t] + gamma * v[t + 1] - v[t] + gamma * lam * running
            adv[t] = running
        return adv
    return one(rewards, values) if np.ndim(rewards) == 1 else [
        one(r, v) for r, v in zip(rewards, values)]


def _gae_hangs(rewards, values, gamma, lam):
    t = 0
    while t < len(rewards):                                        # t never moves
        pass


_GAE = Drill("check_gae", 2, rights=(
    _gae_right, _gae_sum, _gae_torch, _gae_float32, _gae_python,
    lambda r, v, g, l: gae(r, v, g, l)[0],
), wrongs=(
    Wrong("gamma missing from the decay",
          lambda r, v, g, l: _gae_loop(r, v, g, l, decay=lambda g_, l_: l_),
          "lambda only (gamma missing from the decay)"),
    Wrong("lambda missing from the decay",
          lambda r, v, g, l: _gae_loop(r, v, g, l, decay=lambda g_, l_: g_),
          "gamma only (lambda missing from the decay)"),
    Wrong("the TD error alone", lambda r, v, g, l: r + g * v[..., 1:] - v[..., :-1],
          "the TD error alone"),
    Wrong("accumulated from t = 0", lambda r, v, g, l: _gae_loop(r, v, g, l, forwards=True),
          "accumulated forwards in time"),
    Wrong("V(s_t) and V(s_{t+1}) swapped", _gae_swapped, "values shifted by one"),
    Wrong("the bootstrap value dropped", lambda r, v, g, l: _gae_loop(r, v, g, l, bootstrap=False),
          "bootstrap value V(s_T) dropped"),
    Wrong("returns the critic's targets", lambda r, v, g, l: _gae_right(r, v, g, l) + v[..., :-1],
          "the returns A_t + V(s_t)"),
    Wrong("returns (advantages, returns) like gl.gae", lambda r, v, g, l: gae(r, v, g, l),
          "returned a tuple of 2; return only the advantages"),
    Wrong("sets V(s_T) = 0 in the caller's array", _gae_in_place, "modified its input"),
    Wrong("averages the advantages", lambda r, v, g, l: _gae_right(r, v, g, l).mean(),
          "returned shape ()"),
    Wrong("crashes", lambda r, v, g, l: r[..., len(r) + 10], "raised IndexError"),
    Wrong("gamma and lam swapped", lambda r, v, g, l: _gae_right(r, v, l, g), "swapped"),
    Wrong("float32 returned as float64",
          lambda r, v, g, l: _gae_float32(r, v, g, l).astype(np.float64), "float32 rounding"),
    endless_loop(_gae_hangs),
))


# --- chapter 2: the clipped surrogate, fn(logp, old_logp, adv, eps=0.2) -> per-token loss ------

def _surrogate_right(logp, old_logp, adv, eps=0.2):
    ratio = np.exp(np.clip(logp - old_logp, -20.0, 20.0))         # (N, T), no inf
    return np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps, 1 + eps))


def _surrogate_terms(logp, old_logp, adv, eps=0.2, *, clamp=True):
    """The two terms r A and clip(r) A, for the wrong versions to combine wrongly."""
    log_ratio = np.clip(logp - old_logp, -20.0, 20.0) if clamp else logp - old_logp
    ratio = np.exp(log_ratio)
    return ratio, ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv


def _surrogate_eps_for_batches(logp, old_logp, adv, eps=0.2):
    # eps hard-coded as 0.3 once the inputs are not the example it was debugged on
    return _surrogate_right(logp, old_logp, adv, eps if logp.shape == (1, 5) else 0.3)


def _surrogate_torch(logp, old_logp, adv, eps=0.2):
    import torch
    lp, o, a = (torch.as_tensor(x) for x in (logp, old_logp, adv))
    ratio = torch.exp(torch.clamp(lp - o, -20, 20))
    return torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - eps, 1 + eps))


def _surrogate_where(logp, old_logp, adv, eps=0.2):
    """Which side binds, by sign: A > 0 clips above, A < 0 below."""
    ratio = np.exp(np.minimum(logp - old_logp, 50.0))             # exp(50) is finite
    capped = np.where(adv >= 0, np.minimum(ratio, 1 + eps), np.maximum(ratio, 1 - eps))
    return -adv * capped


def _surrogate_float32(logp, old_logp, adv, eps=0.2):
    lp, o, a = (np.asarray(x, np.float32) for x in (logp, old_logp, adv))
    ratio = np.exp(np.clip(lp - o, -20, 20))
    return np.maximum(-a * ratio, -a * np.clip(ratio, np.float32(1 - eps), np.float32(1 + eps)))


def _surrogate_loops(logp, old_logp, adv, eps=0.2):
    out = np.empty(np.shape(logp))
    for i in np.ndindex(out.shape):
        r = float(np.exp(min(logp[i] - old_logp[i], 20.0)))
        out[i] = -min(r * adv[i], min(max(r, 1 - eps), 1 + eps) * adv[i])
    return out


def _surrogate_dual_clip(logp, old_logp, adv, eps=0.2):
    loss = _surrogate_right(logp, old_logp, adv, eps)
    return np.where(adv < 0, np.minimum(loss, -3.0 * adv), loss)  # verl's clip_ratio_c = 3


_SURROGATE = Drill("check_clipped_surrogate", 2, rights=(
    _surrogate_right, _surrogate_torch, _surrogate_where, _surrogate_float32, _surrogate_loops,
    lambda lp, o, a, eps=0.2: clipped_surrogate_loss(lp, o, a, eps_low=eps),
), wrongs=(
    Wrong("returns the objective, not the loss (sign error)",
          lambda lp, o, a, eps=0.2: -_surrogate_right(lp, o, a, eps), "the sign is flipped"),
    Wrong("max instead of min of the objectives (optimistic)",
          lambda lp, o, a, eps=0.2: -np.maximum(*_surrogate_terms(lp, o, a, eps)[1:]),
          "optimistic"),
    Wrong("only the clipped term", lambda lp, o, a, eps=0.2: -_surrogate_terms(lp, o, a, eps)[2],
          "only the clipped term"),
    Wrong("no clipping", lambda lp, o, a, eps=0.2: -_surrogate_terms(lp, o, a, eps)[1],
          "no clipping at all"),
    Wrong("clips only above (1 + eps): a missing clip side",
          lambda lp, o, a, eps=0.2: -np.minimum(
              _surrogate_terms(lp, o, a)[1], np.minimum(np.exp(lp - o), 1 + eps) * a),
          "only the upper clip"),
    Wrong("clips only below (1 - eps): a missing clip side",
          lambda lp, o, a, eps=0.2: -np.minimum(
              _surrogate_terms(lp, o, a)[1], np.maximum(np.exp(lp - o), 1 - eps) * a),
          "only the lower clip"),
    Wrong("the log-ratio used as the ratio",
          lambda lp, o, a, eps=0.2: -np.minimum((lp - o) * a,
                                                np.clip(lp - o, 1 - eps, 1 + eps) * a),
          "the ratio is logp - old_logp"),
    Wrong("averages the tokens", lambda lp, o, a, eps=0.2: _surrogate_right(lp, o, a, eps).mean(),
          "returned shape ()"),
    Wrong("eps hard-coded for other shapes", _surrogate_eps_for_batches, "on a (4, 6) batch"),
    Wrong("verl's dual-clip at c = 3", _surrogate_dual_clip, "dual-clip"),
    Wrong("the eps argument ignored", lambda lp, o, a, eps=0.2: _surrogate_right(lp, o, a),
          "eps argument is ignored"),
    Wrong("returns a tensor that requires grad, with the sign flipped",
          lambda lp, o, a, eps=0.2: -_surrogate_torch(lp, o, a, eps).requires_grad_(True),
          "the sign is flipped"),
    Wrong("exp of an unclamped log-ratio (inf * 0 = NaN)",
          lambda lp, o, a, eps=0.2: -np.minimum(*_surrogate_terms(lp, o, a, eps, clamp=False)[1:]),
          "Clamp the log-ratio before exp"),
    Wrong("float32 returned as float64",
          lambda lp, o, a, eps=0.2: _surrogate_float32(lp, o, a, eps).astype(np.float64),
          "float32 rounding"),
))


DRILLS = (_GAE, _SURROGATE)
