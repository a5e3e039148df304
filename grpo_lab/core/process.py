r"""Process supervision: DeepSeekMath's step-level advantages, next to outcome supervision.

Taught in chapter 8 (``chapters/08_production_knobs.ipynb``).

Outcome supervision (chapter 1) scores a completion once, at its end, and gives every token the
same advantage. Process supervision (Shao et al. 2024, DeepSeekMath, section 4.1.3) has a
process reward model score every reasoning *step* of every completion. For one prompt, with
completion :math:`i` made of steps :math:`j = 1 \dots K_i` and step rewards
:math:`r_{i,j}`, the rewards of *all* steps of *all* G completions form one set
:math:`\mathbf R`, normalised together:

.. math::

    \tilde r_{i,j} = \frac{r_{i,j} - \operatorname{mean}(\mathbf R)}
                          {\operatorname{std}(\mathbf R) + \varepsilon},
    \qquad
    \hat A_{i,t} = \sum_{j:\ \mathrm{end}(j) \ge t} \tilde r_{i,j}

where :math:`\mathrm{end}(j)` is the index of step j's last token. A token's advantage is the
sum of the normalised rewards of its own step and of every later step of the same completion:
an early step is credited with what followed it, a late step only with itself.

* :func:`process_advantages`: the per-step advantages :math:`\hat A_{i,j}` (every token of step j
  gets :math:`\hat A_{i,j}`);
* :func:`steps_to_tokens`: spread per-step values over the tokens of each step, giving the
  (N, T) array and mask that the losses of :mod:`grpo_lab.core.surrogate` and
  :mod:`grpo_lab.core.loss` take.

With one step per completion (K = 1) process supervision *is* outcome supervision:
``process_advantages(r[..., None], mask)[..., 0] == group_advantages(r)`` (tested).
"""

from __future__ import annotations

import numpy as np

from grpo_lab.numerics.dtypes import cast_result, working_dtype
from grpo_lab.numerics.stable import (centred_deviations_math, divide_or_zero_math,
                                      power_of_two_rescale_math, scale_by_power_of_two_math,
                                      std_from_deviations_math)
from grpo_lab.numerics.validate import as_counts, as_float_array, as_mask, check_int, check_real

__all__ = ["check_process_advantages_arguments", "check_step_mask",
           "check_steps_to_tokens_arguments", "process_advantages", "steps_to_tokens"]

_STEPS_DOC = " of shape (B, G, K): B prompts, G completions, K steps at most"


def check_step_mask(m: np.ndarray) -> None:
    """Every completion has at least one step, and its steps come first, padding after."""
    n_steps = m.sum(axis=-1)                                       # (B, G)
    if np.any(n_steps == 0):
        b, i = (int(v) for v in np.argwhere(n_steps == 0)[0])
        raise ValueError(
            f"step_mask: expected at least one step in every completion, got none for prompt "
            f"{b}, completion {i}: a completion without steps has nothing to credit")
    late = m[..., 1:] & ~m[..., :-1]                               # a step right after padding
    if late.any():
        b, i, j = (int(v) for v in np.argwhere(late)[0])
        raise ValueError(
            f"step_mask: expected each completion's steps first and padding after (a prefix of "
            f"1s), got a step at index {j + 1} after padding at index {j} (prompt {b}, "
            f"completion {i}); the 'later steps' of a completion must be the ones after it")


def check_process_advantages_arguments(step_rewards, step_mask, eps, ddof):
    """``(step_rewards, step_mask, dtype, eps, ddof)`` for :func:`process_advantages`: the
    rewards (B, G, K) in float64, a bool mask whose steps come first, and the options."""
    r, out_dtype = as_float_array("step_rewards", step_rewards, ndim=3, shape_doc=_STEPS_DOC)
    m = as_mask("step_mask", step_mask, r.shape, " (the shape of step_rewards)")
    check_step_mask(m)
    eps = check_real("eps", eps, minimum=0.0)
    B, G, K = r.shape
    fewest = int(m.reshape(B, G * K).sum(axis=-1).min())           # steps in the smallest group
    ddof = check_int("ddof", ddof, minimum=0, maximum=fewest - 1,
                     why=f" so that every group's step count - ddof > 0 (the smallest group "
                         f"has {fewest} step(s))")
    return r.astype(working_dtype(out_dtype)), m, out_dtype, eps, ddof


#: More tokens than a completion can have: int64 sums of step lengths stay exact below it.
MAX_TOKENS = 2.0 ** 62


def check_steps_to_tokens_arguments(step_values, step_lengths, max_len):
    """``(step_values, step_lengths, T, dtype)`` for :func:`steps_to_tokens`: every completion
    has a token, and ``T`` (``max_len``, default the longest completion) holds the longest."""
    v, out_dtype = as_float_array("step_values", step_values, ndim=3, shape_doc=_STEPS_DOC)
    lengths = as_counts("step_lengths", step_lengths, v.shape, " (the shape of step_values)")
    B, G, K = v.shape
    if (lengths < 0).any():             # as_counts refused negatives: these wrapped from uint64
        where = tuple(int(i) for i in np.argwhere(lengths < 0)[0])
        raise ValueError(f"step_lengths: expected counts below 2**63, got "
                         f"{int(lengths[where]) + 2**64} at index {where}")
    approx = lengths.reshape(B * G, K).sum(axis=-1, dtype=np.float64)   # (N,) never wraps
    if approx.max(initial=0.0) >= MAX_TOKENS:
        row = int(np.argmax(approx))
        raise ValueError(
            f"step_lengths: expected fewer than 2**62 tokens in a completion, got steps "
            f"summing to about {approx[row]:.3g} for completion {row % G} of prompt {row // G} "
            f"(row {row})")
    totals = lengths.reshape(B * G, K).sum(axis=-1)                # (N,) tokens per completion
    if np.any(totals == 0):
        row = int(np.flatnonzero(totals == 0)[0])
        raise ValueError(
            f"step_lengths: expected at least one token in every completion, got 0 for "
            f"completion {row % G} of prompt {row // G} (row {row})")
    longest = int(totals.max())
    T = longest if max_len is None else check_int(
        "max_len", max_len, minimum=longest,
        why=f" (at least the longest completion, {longest} tokens)")
    return v, lengths, T, out_dtype


def process_advantages(step_rewards, step_mask, eps=1e-8, *, ddof=0):
    r"""DeepSeekMath's process-supervision advantage of every step (section 4.1.3).

    .. math::

        \tilde r_{i,j} = \frac{r_{i,j} - \operatorname{mean}(\mathbf R)}
                              {\operatorname{std}(\mathbf R) + \varepsilon}, \qquad
        \hat A_{i,j} = \sum_{j' \ge j} \tilde r_{i,j'}

    with :math:`\mathbf R` the rewards of every valid step of the group (all G completions of
    one prompt together, not one completion at a time).

    ============  =========  ==========================================================
    Symbol        Shape      Meaning
    ============  =========  ==========================================================
    step_rewards  (B, G, K)  a process reward model's score of step j of completion i of
                             prompt b; padded steps must hold finite numbers (ignored)
    step_mask     (B, G, K)  1 (True) for a real step, 0 for padding; each completion has
                             >= 1 step and its steps first (ragged K_i)
    eps           scalar     added to the std, so an all-equal group gives 0
    ddof          int        0: the population std of the formula; 1: Bessel's
    return        (B, G, K)  :math:`\hat A_{i,j}`, the advantage of every token of step j;
                             exactly 0 at padded steps
    ============  =========  ==========================================================

    The statistics run in float64 about the group's first step (exact zeros for an all-equal
    group, as in :func:`grpo_lab.group_advantages`), after rescaling by a power of two so no
    square overflows; the result has the dtype of ``step_rewards`` (float64 for ints, bools).

    Example: two completions of two steps; the second one's last step is wrong. Mean 0.75,
    std 0.433, so a good step is worth +0.577 and the bad one -1.732; each step then adds the
    steps after it.

    >>> import grpo_lab as gl
    >>> gl.process_advantages([[[1, 1], [1, 0]]], [[[1, 1], [1, 1]]]).round(4)
    array([[[ 1.1547,  0.5774],
            [-1.1547, -1.7321]]])
    >>> gl.process_advantages([[[1, 1, 0], [0, 0, 0]]], [[[1, 1, 0], [1, 0, 0]]]).round(4)
    array([[[ 1.4142,  0.7071,  0.    ],
            [-1.4142,  0.    ,  0.    ]]])
    """
    r, m, out_dtype, eps, ddof = check_process_advantages_arguments(step_rewards, step_mask,
                                                                    eps, ddof)
    B, G, K = r.shape
    R = m.reshape(B, G * K)                                        # (B, G*K) the set R per group
    # Divide by 2**k near max |r| over the real steps (exact), so no square overflows.
    x, k = power_of_two_rescale_math(np.where(R, r.reshape(B, G * K), 0.0), eps=eps)  # (B, G*K)

    # The normalisation over R: (r - mean(R)) / (std(R) + eps), about each group's first step.
    dev = centred_deviations_math(x, mask=R)                       # (B, G*K), 0 on padding
    std = std_from_deviations_math(dev, ddof, R.sum(axis=-1, keepdims=True))   # (B, 1)
    r_norm = divide_or_zero_math(dev, std + scale_by_power_of_two_math(eps, -k)).reshape(B, G, K)

    # Each step's advantage: the sum of its own and the later steps' normalised rewards
    # (a reversed cumulative sum; padded steps are 0 and add nothing).
    adv = np.flip(np.cumsum(np.flip(r_norm, axis=-1), axis=-1), axis=-1)   # (B, G, K)
    return cast_result("step_rewards", "process advantages", np.where(m, adv, 0.0), out_dtype)


def steps_to_tokens(step_values, step_lengths, *, max_len=None):
    r"""Give every token the value of the step it belongs to: (B, G, K) steps -> (N, T) tokens.

    ============  =========  ==========================================================
    Symbol        Shape      Meaning
    ============  =========  ==========================================================
    step_values   (B, G, K)  e.g. :func:`process_advantages`, one value per step
    step_lengths  (B, G, K)  tokens in each step, integers >= 0 (0 for padded steps);
                             every completion needs at least one token
    max_len       int        T, the padded length; default the longest completion
    return        tuple      ``(values, mask)``: values (N, T) with N = B*G completions,
                             row b*G + i is completion i of prompt b, 0 on padding;
                             mask (N, T) bool, True on the completion's tokens
    ============  =========  ==========================================================

    The rows are ordered as ``group_advantages(...).ravel()`` orders completions, so outcome
    and process advantages line up token by token.

    >>> import grpo_lab as gl
    >>> values, mask = gl.steps_to_tokens([[[2.0, -1.0], [0.5, 0.0]]], [[[1, 3], [2, 0]]])
    >>> values
    array([[ 2. , -1. , -1. , -1. ],
           [ 0.5,  0.5,  0. ,  0. ]])
    >>> mask.sum(axis=1)
    array([4, 2])
    """
    v, lengths, T, out_dtype = check_steps_to_tokens_arguments(step_values, step_lengths,
                                                               max_len)
    B, G, K = v.shape
    N = B * G
    totals = lengths.reshape(N, K).sum(axis=-1)                       # (N,) tokens per completion
    per_token = np.repeat(v.reshape(N * K), lengths.reshape(N * K))   # (sum of lengths,)
    mask = np.arange(T)[None, :] < totals[:, None]                    # (N, T)
    values = np.zeros((N, T), dtype=out_dtype)
    values[mask] = per_token            # row-major fill: row by row, step by step, in order
    return values, mask
