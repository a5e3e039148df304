"""Checkers for the implement-it drills: they run the reader's function on worked and edge
cases and say, like a good interviewer, what exactly is wrong.

Each ``check_<name>(fn)`` prints a short verdict and returns True or False.
"""

from __future__ import annotations

import numpy as np

from .advantages import group_advantages

__all__ = ["check_blocked_advantages", "check_clipped_surrogate", "check_gae",
           "check_group_advantages", "check_surrogate_grad"]


def _run(fn, rewards):
    """Call the reader's function on a copy; return (output array or None, problem or None)."""
    given = np.array(rewards, dtype=np.float64)
    before = given.copy()
    try:
        out = fn(given)
    except Exception as exc:  # the reader's bug, reported rather than raised
        hint = ""
        if "broadcast" in str(exc):
            hint = (" (a group statistic of shape (B,) does not broadcast against (B, G): "
                    "keep it (B, 1) with keepdims=True)")
        return None, f"raised {type(exc).__name__}: {exc}{hint}"
    if not np.array_equal(given, before):
        return None, ("it modified its input (an in-place `rewards -= ...`?): "
                      "work on a copy and leave the caller's array alone")
    if out is None:
        return None, "it returned None: return the advantages array"
    try:
        out = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        return None, f"it returned {type(out).__name__}, expected a float array"
    return out, None


def check_group_advantages(fn, *, eps=1e-8, verbose=True) -> bool:
    """Check ``fn(rewards) -> advantages`` against GRPO's formula with the population std.

    The drill: rewards (B, G) -> (r - group mean) / (group std + eps), statistics along the
    last axis, ddof=0, an all-equal group giving 0.
    """
    def verdict(ok, message):
        if verbose:
            print(("PASS: " if ok else "NOT YET: ") + message)
        return ok

    # 1. the worked example
    out, problem = _run(fn, [[1.0, 0.0, 1.0, 0.0]])
    if problem:
        return verdict(False, f"on [[1, 0, 1, 0]] your function {problem}")
    if out.shape != (1, 4):
        return verdict(False, f"on rewards of shape (1, 4) it returned shape {out.shape}; "
                              "advantages have the rewards' shape (B, G)")
    if np.allclose(out, [[1.0, -1.0, 1.0, -1.0]], rtol=1e-6):
        pass
    elif np.allclose(out, np.sqrt(3) / 2 * np.array([[1.0, -1.0, 1.0, -1.0]]), rtol=1e-6):
        return verdict(False, "on [[1, 0, 1, 0]] you gave +-0.866, expected +-1: that is "
                              "Bessel's std (ddof=1, torch.std's default); this drill uses "
                              "the population std (ddof=0)")
    elif np.allclose(out, [[0.5, -0.5, 0.5, -0.5]]):
        return verdict(False, "on [[1, 0, 1, 0]] you gave +-0.5, expected +-1: the "
                              "mean is subtracted but the std is not divided out")
    elif np.allclose(out, 0.0):
        return verdict(False, "on [[1, 0, 1, 0]] you gave all zeros, expected +-1: were the "
                              "mean and std taken over axis 0? Each row is a group, so "
                              "take them along the last axis (axis=-1)")
    elif np.allclose(out, -np.array([[1.0, -1.0, 1.0, -1.0]]), rtol=1e-6):
        return verdict(False, "on [[1, 0, 1, 0]] the signs are flipped: a right answer "
                              "(reward above the group mean) must get a positive advantage")
    else:
        return verdict(False, f"on [[1, 0, 1, 0]] you gave {np.round(out, 4).tolist()}, "
                              "expected about [[1, -1, 1, -1]]")

    # 2. several groups: statistics must be per group, along the last axis
    rewards = np.array([[1.0, 2.0, 3.0, 6.0], [10.0, 10.0, 40.0, 20.0],
                        [0.0, 1.0, 0.0, 0.0]])                      # (B=3, G=4)
    expected = group_advantages(rewards, eps)
    out, problem = _run(fn, rewards)
    if problem:
        return verdict(False, f"on a batch of 3 groups your function {problem}")
    if out.shape != rewards.shape:
        return verdict(False, f"on rewards of shape {rewards.shape} it returned shape "
                              f"{out.shape}; expected {rewards.shape}")
    if not np.allclose(out, expected, rtol=1e-6, atol=1e-9):
        axis0 = (rewards - rewards.mean(0)) / (rewards.std(0) + eps)
        whole = (rewards - rewards.mean()) / (rewards.std() + eps)
        if np.allclose(out, axis0, rtol=1e-6):
            hint = ("the statistics were taken over axis 0 (across prompts); take them over "
                    "the last axis, within each group")
        elif np.allclose(out, whole, rtol=1e-6):
            hint = ("the mean and std were taken over the whole batch; each prompt's group "
                    "needs its own (axis=-1, keepdims=True)")
        else:
            hint = "row 0 should be " + str(np.round(expected[0], 4).tolist())
        return verdict(False, f"on a batch of 3 groups the advantages are wrong: {hint}")

    # 3. square batch (B == G): a missing keepdims broadcasts silently along the wrong axis
    square = np.array([[1.0, 0.0, 0.0], [5.0, 6.0, 9.0], [2.0, 2.0, 3.0]])   # (3, 3)
    out, problem = _run(fn, square)
    if problem:
        return verdict(False, f"on a 3x3 batch your function {problem}")
    if not np.allclose(out, group_advantages(square, eps), rtol=1e-6, atol=1e-9):
        return verdict(False, "on a batch with B == G the result is wrong, though B != G "
                              "worked: a mean of shape (B,) broadcasts along the last axis; "
                              "keep it (B, 1) with keepdims=True")

    # 4. the all-equal group
    out, problem = _run(fn, [[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 1.0]])
    if problem:
        return verdict(False, f"on an all-equal group your function {problem}")
    if np.isnan(out).any() or np.isinf(out).any():
        return verdict(False, "an all-equal group gave NaN or inf, expected 0: is the std "
                              "guarded with eps?")
    if not np.allclose(out[0], 0.0, atol=1e-6):
        return verdict(False, f"an all-equal group gave {np.round(out[0], 4).tolist()}, "
                              "expected 0: no spread, no signal")

    return verdict(True, "worked example, per-group statistics, B == G and the all-equal "
                         "group are all right")


# --- chapter 2: GAE and the clipped surrogate ------------------------------------------------

def _call(fn, *args, **kwargs):
    """Call the reader's function on copies of array arguments; return (array, problem)."""
    given = [np.array(a, dtype=np.float64) if isinstance(a, (list, np.ndarray)) else a
             for a in args]
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in given]
    try:
        with np.errstate(all="ignore"):        # the reader's overflow is diagnosed, not printed
            out = fn(*given, **kwargs)
    except Exception as exc:  # the reader's bug, reported rather than raised
        return None, f"raised {type(exc).__name__}: {exc}"
    for a, b in zip(given, before):
        if isinstance(a, np.ndarray) and not np.array_equal(a, b, equal_nan=True):
            return None, "it modified an input array: work on a copy"
    if isinstance(out, tuple):
        return None, (f"it returned a tuple of {len(out)}; return only the advantages / "
                      "losses array")
    if out is None:
        return None, "it returned None: return the array"
    try:
        return np.asarray(out, dtype=np.float64), None
    except (TypeError, ValueError):
        return None, f"it returned {type(out).__name__}, expected a float array"


def _verdict(verbose):
    def verdict(ok, message):
        if verbose:
            print(("PASS: " if ok else "NOT YET: ") + message)
        return ok
    return verdict


def _gae_variants(r, v, gamma, lam):
    """Common wrong versions of GAE, for naming the reader's mistake."""
    T = r.shape[-1]
    delta = r + gamma * v[..., 1:] - v[..., :-1]

    def backward(d, k):
        out, run = np.zeros_like(d), np.zeros_like(d[..., 0])
        for t in range(T - 1, -1, -1):
            run = d[..., t] + k * run
            out[..., t] = run
        return out

    forward = np.zeros_like(delta)
    run = np.zeros_like(delta[..., 0])
    for t in range(T):
        run = delta[..., t] + gamma * lam * run
        forward[..., t] = run
    return {
        "lambda only (gamma missing from the decay)": backward(delta, lam),
        "gamma only (lambda missing from the decay)": backward(delta, gamma),
        "the TD error alone (no sum over later steps)": delta,
        "accumulated forwards in time (from t = 0), not backwards from the end": forward,
        "values shifted by one (V(s_t) and V(s_{t+1}) swapped)":
            backward(r + gamma * v[..., :-1] - v[..., 1:], gamma * lam),
    }


def check_gae(fn, *, verbose=True) -> bool:
    """Check ``fn(rewards, values, gamma, lam) -> advantages`` against GAE-lambda.

    rewards (T,) or (N, T), values with one more step (the bootstrap value last); returns the
    advantages only, of the rewards' shape.
    """
    from .gae import gae

    verdict = _verdict(verbose)
    cases = [([1.0, 0.0, 2.0], [0.5, 1.0, 0.5, 0.25], 0.9, 0.5, "the worked example")]
    rng = np.random.default_rng(7)
    r2, v2 = rng.normal(size=(3, 6)), rng.normal(size=(3, 7))
    cases += [(r2, v2, 0.95, 0.0, "lambda = 0 (should be the one-step TD error)"),
              (r2, v2, 0.95, 1.0, "lambda = 1 (should be the return minus V(s_t))"),
              (r2, v2, 0.99, 0.95, "a batch of 3 sequences, gamma 0.99, lambda 0.95")]
    for rewards, values, gamma, lam, name in cases:
        r, v = np.asarray(rewards, dtype=float), np.asarray(values, dtype=float)
        expected, _ = gae(r, v, gamma=gamma, lam=lam)
        out, problem = _call(fn, r, v, gamma, lam)
        if problem:
            return verdict(False, f"on {name} your function {problem}")
        if out.shape != expected.shape:
            return verdict(False, f"on {name} it returned shape {out.shape}, expected "
                                  f"{expected.shape} (the rewards' shape)")
        if not np.allclose(out, expected, rtol=1e-9, atol=1e-12):
            for what, wrong in _gae_variants(r, v, gamma, lam).items():
                if np.allclose(out, wrong, rtol=1e-9, atol=1e-12):
                    return verdict(False, f"on {name} the result matches {what}: "
                                          "A_t = delta_t + gamma * lam * A_{t+1}, from the end")
            return verdict(False, f"on {name} you gave {np.round(out, 4).tolist()}, expected "
                                  f"{np.round(expected, 4).tolist()}")
    return verdict(True, "the worked example, both lambda limits and a batch are all right")


def check_clipped_surrogate(fn, *, verbose=True) -> bool:
    """Check ``fn(logp, old_logp, adv, eps=0.2) -> per-token loss`` against PPO's clipped
    surrogate, ``-min(r A, clip(r, 1 - eps, 1 + eps) A)`` with ``r = exp(logp - old_logp)``.
    """
    from .losses import clipped_surrogate_loss

    verdict = _verdict(verbose)
    ratio = np.array([[1.0, 1.5, 0.5, 0.5, 1.5]])
    adv = np.array([[1.0, 1.0, 1.0, -1.0, -1.0]])
    logp, old = np.log(ratio) - 1.0, np.full(ratio.shape, -1.0)
    expected = clipped_surrogate_loss(logp, old, adv)               # [-1, -1.2, -0.5, 0.8, 1.5]
    out, problem = _call(fn, logp, old, adv)
    if problem:
        return verdict(False, f"on the worked example your function {problem}")
    if out.shape != ratio.shape:
        return verdict(False, f"on inputs of shape {ratio.shape} it returned shape {out.shape}; "
                              "the loss is per token, of the same shape")
    if not np.allclose(out, expected, rtol=1e-9):
        clip = np.clip(ratio, 0.8, 1.2)
        hints = {
            "the sign is flipped: that is the objective to maximise; return the loss to "
            "minimise, -min(r A, clip(r) A)": -expected,
            "optimistic: you took the larger of r A and clip(r) A (or the min of the two "
            "losses); PPO takes the smaller objective, a pessimistic bound":
                np.minimum(-ratio * adv, -clip * adv),
            "only the clipped term: without the min with r A, a token the policy has made "
            "LESS likely (r < 0.8, A > 0) would stop getting a gradient": -clip * adv,
            "no clipping at all: -r A is the plain importance-sampled loss": -ratio * adv,
            "the ratio is logp - old_logp; it is exp(logp - old_logp)":
                -np.minimum(np.log(ratio) * adv, np.clip(np.log(ratio), 0.8, 1.2) * adv),
        }
        for hint, wrong in hints.items():
            if np.allclose(out, wrong, rtol=1e-9):
                return verdict(False, f"on the worked example: {hint}")
        return verdict(False, f"on ratios {ratio[0].tolist()} with A = {adv[0].tolist()} you "
                              f"gave {np.round(out, 4).tolist()}, expected "
                              f"{np.round(expected, 4).tolist()}")

    # a batch with per-token advantages: elementwise, nothing reduced
    rng = np.random.default_rng(3)
    old_b = rng.uniform(-5, -0.1, size=(4, 6))
    logp_b = old_b + rng.normal(0, 0.4, size=(4, 6))
    adv_b = rng.normal(size=(4, 6))
    out, problem = _call(fn, logp_b, old_b, adv_b)
    if problem:
        return verdict(False, f"on a (4, 6) batch your function {problem}")
    if out.shape != (4, 6) or not np.allclose(out, clipped_surrogate_loss(logp_b, old_b, adv_b)):
        return verdict(False, "the worked example is right but a (4, 6) batch is not: keep it "
                              "elementwise (no mean, no sum) and use eps for both bounds")

    # a ratio that overflows: exp(800) is inf, and inf * 0 is NaN
    out, problem = _call(fn, np.array([[0.0, 0.0]]), np.array([[-800.0, -800.0]]),
                         np.array([[0.0, 1.0]]))
    if problem:
        return verdict(False, f"on a log-ratio of 800 your function {problem}")
    if not np.all(np.isfinite(out)):
        return verdict(False, "on a log-ratio of 800 (a stale old_logp) you gave "
                              f"{out.tolist()}: exp(800) is inf, and inf * A with A = 0 is NaN. "
                              "Clamp the log-ratio before exp (verl clamps it to [-20, 20])")
    if not np.allclose(out, [[0.0, -1.2]]):
        return verdict(False, f"on a log-ratio of 800 you gave {out.tolist()}, expected "
                              "[[0, -1.2]]")
    return verdict(True, "both clip sides, a batch, and a ratio that would overflow are all right")


def check_blocked_advantages(fn, *, verbose=True) -> bool:
    """Check ``fn(rewards, block_rows) -> advantages`` (float32 in, float32 out), done in blocks.

    The drill (chapter 7): the formula of :func:`group_advantages` on a (B, G) float32 array,
    a block of ``block_rows`` rows at a time, float64 inside the block, the result written
    into one float32 array, so that no temporary is larger than a block.
    """
    import tracemalloc

    verdict = _verdict(verbose)
    rng = np.random.default_rng(7)
    rewards = rng.normal(size=(3000, 16)).astype(np.float32)
    rewards[5] = 0.1                                                 # an all-equal group
    expected = group_advantages(rewards)
    given = rewards.copy()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(given, 256)
        peak = tracemalloc.get_traced_memory()[1] - base
    except Exception as exc:  # the reader's bug, reported rather than raised
        return verdict(False, f"on (3000, 16) float32 rewards with block_rows=256 your function "
                              f"raised {type(exc).__name__}: {exc}")
    finally:
        tracemalloc.stop()
    if not np.array_equal(given, rewards):
        return verdict(False, "it modified its input: work on a copy of each block")
    if not isinstance(out, np.ndarray):
        return verdict(False, f"it returned {type(out).__name__}, expected a NumPy array")
    if out.shape != rewards.shape:
        return verdict(False, f"it returned shape {out.shape}, expected {rewards.shape}")
    if out.dtype != np.float32:
        return verdict(False, f"it returned {out.dtype}; float32 rewards give float32 advantages "
                              "(allocate the output with np.empty_like(rewards))")
    if not np.all(out[5] == 0):
        return verdict(False, "the all-equal group (row 5, every reward 0.1) is not exactly 0: "
                              "subtract the row's first reward before the mean, or compute "
                              "the mean in float64 where G copies of a float32 sum exactly")
    close = np.abs(out.astype(np.float64) - expected) <= 4 * np.spacing(np.abs(expected)) + 1e-7
    if not close.all():
        row = int(np.argwhere(~close)[0, 0])
        return verdict(False, f"row {row} differs from gl.group_advantages: "
                              f"{np.round(out[row, :4], 6).tolist()} vs "
                              f"{np.round(expected[row, :4], 6).tolist()} (population std, "
                              "eps = 1e-8 added to the std)")
    block_bytes = 256 * 16 * 8
    allowed = out.nbytes + 8 * block_bytes
    if peak > allowed:
        return verdict(False, f"right values, but the peak memory was over "
                              f"{int(peak // out.nbytes)}x the output: some temporary is the size "
                              "of the whole input. Only the output may be; keep the rest to a "
                              "block")
    return verdict(True, f"equal to gl.group_advantages, exact zeros, and a peak of "
                         f"{peak / out.nbytes:.1f}x the output")


def check_surrogate_grad(fn, *, verbose=True) -> bool:
    """Check ``fn(ratio, adv, eps_low, eps_high) -> d loss / d logp`` of PPO's clipped loss.

    The drill (chapter 7): the per-token gradient the fused loss computes in its forward pass,
    for the loss ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` with ``r = exp(logp -
    old_logp)``; compared with finite differences of :func:`clipped_surrogate_loss`.
    """
    from .losses import clipped_surrogate_loss

    verdict = _verdict(verbose)
    ratio = np.array([1.0, 1.1, 1.5, 0.5, 0.9, 0.5, 1.5, 1.3])
    adv = np.array([1.0, 2.0, 1.0, 1.0, -1.0, -1.0, -1.0, 1.0])
    out, problem = _call(fn, ratio, adv, 0.2, 0.28)
    if problem:
        return verdict(False, f"on the worked example your function {problem}")
    if out.shape != ratio.shape:
        return verdict(False, f"it returned shape {out.shape}, expected {ratio.shape}")
    h = 1e-6
    old = np.zeros_like(ratio)
    logp = np.log(ratio)

    def loss(lp):
        return clipped_surrogate_loss(lp[None, :], old[None, :], adv[None, :], eps_low=0.2,
                                      eps_high=0.28)[0]
    expected = (loss(logp + h) - loss(logp - h)) / (2 * h)          # each token on its own
    if not np.allclose(out, expected, atol=1e-6):
        hints = {
            "the gradient with respect to the ratio, -A: the loss is differentiated with "
            "respect to logp, and d r / d logp = r": np.where(expected != 0, -adv, 0.0),
            "no clipping: where the clipped term wins, the gradient is 0": -adv * ratio,
            "the sign is flipped: the loss is minus the objective": -expected,
        }
        for hint, wrong in hints.items():
            if np.allclose(out, wrong, atol=1e-6):
                return verdict(False, hint)
        return verdict(False, f"on ratios {ratio.tolist()} with A = {adv.tolist()} you gave "
                              f"{np.round(out, 4).tolist()}, expected "
                              f"{np.round(expected, 4).tolist()}")
    return verdict(True, "-A r where the unclipped term wins, 0 where the clip holds, "
                         "both sides, asymmetric range")
