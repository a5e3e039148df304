r"""Master weights and loss scaling: an update that bfloat16 rounds away, a gradient float16 loses.

Taught in chapter 4 (``chapters/04_low_precision.ipynb``), pitfalls 6 and 7.

**Pitfall 6.** A weight stored in a dtype with unit roundoff :math:`u = 2^{-p}` moves only if
the update reaches half the spacing at the weight:

.. math::

    \operatorname{fl}(w + \Delta) = w \quad\text{whenever}\quad |\Delta| < \tfrac{u}{2}|w|,
    \qquad \operatorname{fl}(w + \Delta) \ne w \quad\text{whenever}\quad |\Delta| > u|w|,

and in between it depends on where :math:`w` sits between two powers of two. In bfloat16
(:math:`u = 2^{-8}`) an Adam step of :math:`10^{-6}` on a weight of 0.02 is :math:`5 \times
10^{-5}` of it, far below :math:`u/2 \approx 2 \times 10^{-3}`: the update is lost. Mixed
precision keeps a float32 **master copy** of the weights (and of the optimiser state), adds
each update there, and makes the bfloat16 copy the forward pass uses after the update.

========================  =====================================================================
``update_in``             one update ``w + step`` as a kernel in ``dtype`` does it
``lost_update_fraction``  the share of a step's coordinates that leave the weight unchanged
``adam_steps``            the updates Adam makes from a sequence of gradients (float64)
``master_weight_run``     K updates applied in the dtype alone, and through a float32 master
========================  =====================================================================

**Pitfall 7.** A gradient below float16's smallest subnormal (:math:`2^{-24} \approx 6 \times
10^{-8}`; half of it rounds to 0) is flushed to zero, and one below its smallest normal
(:math:`2^{-14} \approx 6.1 \times 10^{-5}`) keeps fewer bits. Loss scaling multiplies the loss
by :math:`S` so that the backward pass computes :math:`S g`, and divides by :math:`S` in float32
before the update; a dynamic scaler finds :math:`S` by halving it on every step whose scaled
gradients overflow (the step is skipped) and doubling it after a run of good steps.

========================  =====================================================================
``flushed_fraction``      the share of nonzero gradient entries that are 0 once stored in dtype
``scaled_gradient``       the gradient a dtype backward pass gives at loss scale S, unscaled
``dynamic_loss_scaling``  a dynamic scaler run on a sequence of gradients (PyTorch's update rule)
========================  =====================================================================

Each public function checks its arguments once and then runs the few lines of its math.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from grpo_lab.numerics.precision import as_dtype
from grpo_lab.numerics.validate import as_float_array, check_int, check_real, check_shape, describe

__all__ = ["DynamicScalerRun", "MasterWeightRun", "adam_steps", "dynamic_loss_scaling",
           "flushed_fraction", "lost_update_fraction", "master_weight_run", "scaled_gradient",
           "update_in"]


def _opmath(d: np.dtype):
    """The dtype an elementwise kernel computes in: float32 for 16-bit floats (PyTorch's
    "opmath" type), the dtype itself for float32 and float64."""
    return np.dtype(np.float64) if d == np.float64 else np.dtype(np.float32)


# --- argument checks ---------------------------------------------------------------------------

def check_update_arguments(w, step, dtype):
    """``(w, step, dtype)`` for :func:`update_in` and :func:`lost_update_fraction`: two finite
    float64 arrays of one shape and one of the four dtypes."""
    d = as_dtype(dtype)
    w_arr, _ = as_float_array("w", w, shape_doc=" of weights")
    step_arr, _ = as_float_array("step", step, shape_doc=" of updates, the shape of w")
    check_shape("step", step_arr, w_arr.shape, f" {w_arr.shape}, one update per weight")
    w64 = w_arr.astype(np.float64)
    with np.errstate(over="ignore"):                              # refused by name below
        fits = np.isfinite(w64.astype(d)).all()
    if not fits:
        raise ValueError(f"w: expected weights that fit in {d}, got some beyond its largest "
                         f"finite value {float(ml_dtypes.finfo(d).max):.6g}")
    return w64, step_arr.astype(np.float64), d


def check_steps_arguments(w0, steps, dtype):
    """``(w0, steps, dtype)`` for :func:`master_weight_run`: w0 (n,) and steps (K, n)."""
    w, _ = as_float_array("w0", w0, ndim=1, shape_doc=" of shape (n,)")
    s, _ = as_float_array("steps", steps, ndim=2, shape_doc=" of shape (K, n)")
    if s.shape[1] != w.shape[0]:
        raise ValueError(f"steps: expected shape (K, {w.shape[0]}), one row of n = {w.shape[0]} "
                         f"updates per step, got {describe(s)}")
    d = as_dtype(dtype)
    with np.errstate(over="ignore"):                              # refused by name below
        fits = np.isfinite(w.astype(np.float64).astype(d)).all()
    if not fits:
        raise ValueError(f"w0: expected weights that fit in {d}, got some beyond its largest "
                         f"finite value {float(ml_dtypes.finfo(d).max):.6g}")
    return w.astype(np.float64), s.astype(np.float64), d


def check_scale(name: str, scale) -> float:
    """A loss scale: a finite real number > 0."""
    return check_real(name, scale, minimum=0.0, allow_equal=False)


# --- pitfall 6: an update that rounds to nothing ------------------------------------------------

def update_in(w, step, dtype) -> np.ndarray:
    r"""One update ``w + step`` as a kernel in ``dtype`` does it: the new stored weight.

    ``w`` is first stored in ``dtype`` (it is the weight the model holds); the addition runs in
    float32 for the 16-bit dtypes (PyTorch's opmath type; in the dtype itself for float32 and
    float64) and its result is rounded to ``dtype``:

    .. math:: w' = \operatorname{fl}_{\text{dtype}}\big(\operatorname{fl}(w) + \Delta\big)

    ======  ======  =======================================================
    Symbol  Shape   Meaning
    ======  ======  =======================================================
    w       any     the weights (each must fit in ``dtype``)
    step    w's     the update Delta of each weight, e.g. -lr * Adam's m/sqrt(v)
    dtype   str     ``"float16"``, ``"bfloat16"``, ``"float32"`` or ``"float64"``
    return  w's     float64 values that ``dtype`` holds exactly
    ======  ======  =======================================================

    The update vanishes when ``|step| < u/2 * |w|`` and never when ``|step| > u * |w|``.

    >>> import grpo_lab as gl
    >>> gl.master_weights.update_in([1.0, 1.0], [2**-9, 2**-7], "bfloat16")
    array([1.       , 1.0078125])
    """
    w, step, d = check_update_arguments(w, step, dtype)
    return update_math(w, step, d)


def update_math(w, step, d):
    """:func:`update_in` on checked float64 arrays and a NumPy dtype."""
    work = _opmath(d)
    stored = w.astype(d).astype(work)                             # the weight the dtype holds
    with np.errstate(over="ignore"):                              # a sum past the range: inf
        return (stored + step.astype(work)).astype(d).astype(np.float64)   # rounded to dtype


def lost_update_fraction(w, step, dtype) -> float:
    r"""The share of the nonzero updates in ``step`` that leave their weight unchanged in ``dtype``.

    :math:`\#\{i : \Delta_i \ne 0,\ \operatorname{fl}(w_i + \Delta_i) = \operatorname{fl}(w_i)\}
    / \#\{i : \Delta_i \ne 0\}`; 0.0 when every update is 0.

    >>> import grpo_lab as gl
    >>> gl.master_weights.lost_update_fraction([1.0, 1.0], [2**-9, 2**-7], "bfloat16")
    0.5
    """
    w, step, d = check_update_arguments(w, step, dtype)
    moved = step != 0
    if not moved.any():
        return 0.0
    same = update_math(w, step, d) == w.astype(d).astype(np.float64)    # the update vanished
    return float((same & moved).sum() / moved.sum())


def adam_steps(grads, *, lr, beta1=0.9, beta2=0.999, eps=1e-8) -> np.ndarray:
    r"""The updates Adam makes from a sequence of gradients, in float64 (no weight decay).

    .. math::

        m_k = \beta_1 m_{k-1} + (1 - \beta_1) g_k, \quad
        v_k = \beta_2 v_{k-1} + (1 - \beta_2) g_k^2, \quad
        \Delta_k = -\mathrm{lr}\, \frac{m_k / (1 - \beta_1^k)}{\sqrt{v_k / (1 - \beta_2^k)} + \mathrm{eps}}

    Adam normalises each coordinate by its own RMS, so :math:`|\Delta_k|` is about ``lr``
    whatever the gradient's size: the size of the update the weights have to absorb.

    ======  ======  ==========================================================
    Symbol  Shape   Meaning
    ======  ======  ==========================================================
    grads   (K, n)  the gradient of each of K steps
    lr      scalar  the learning rate (RL fine-tuning: 1e-7 to 1e-5), > 0
    return  (K, n)  the update of each step
    ======  ======  ==========================================================

    >>> import grpo_lab as gl
    >>> gl.master_weights.adam_steps([[3.0, -1e-3]], lr=1e-6).round(9)   # -lr sign(g)
    array([[-1.e-06,  1.e-06]])
    """
    g, _ = as_float_array("grads", grads, ndim=2, shape_doc=" of shape (K, n)")
    lr = check_real("lr", lr, minimum=0.0, allow_equal=False)
    beta1 = check_real("beta1", beta1, minimum=0.0, maximum=1.0)
    beta2 = check_real("beta2", beta2, minimum=0.0, maximum=1.0)
    if beta1 == 1.0 or beta2 == 1.0:
        raise ValueError(f"beta1, beta2: expected numbers in [0, 1), got {beta1}, {beta2} "
                         f"(a decay of 1 never lets a gradient in)")
    eps = check_real("eps", eps, minimum=0.0)
    g = g.astype(np.float64)
    m, v = np.zeros(g.shape[1]), np.zeros(g.shape[1])            # (n,) the two moments
    out = np.empty_like(g)                                       # (K, n)
    for k in range(g.shape[0]):
        m = beta1 * m + (1 - beta1) * g[k]
        v = beta2 * v + (1 - beta2) * g[k] ** 2
        m_hat, v_hat = m / (1 - beta1 ** (k + 1)), v / (1 - beta2 ** (k + 1))   # bias-corrected
        out[k] = -lr * m_hat / (np.sqrt(v_hat) + eps)
    return out


@dataclass(frozen=True)
class MasterWeightRun:
    """K updates applied three ways, from one start stored in the dtype (each array (n,)).

    ``reference``: the start plus the exact sum of the updates (float64); ``low``: every update
    added in the dtype alone; ``master``: added to a float32 master copy; ``copy``: that master
    rounded to the dtype after the last update (what the forward pass reads). ``distance``
    maps each of ``"low"``, ``"master"`` and ``"copy"`` to its RMS distance from the reference
    after each step, (K,).
    """

    dtype: str
    start: np.ndarray
    reference: np.ndarray
    low: np.ndarray
    master: np.ndarray
    copy: np.ndarray
    distance: dict

    def moved(self, which: str) -> float:
        """The share of the reference's movement that ``which`` made: <w - w0, ref - w0> /
        |ref - w0|^2 (1 for the exact run, 0 for weights that never moved)."""
        w = {"low": self.low, "master": self.master, "copy": self.copy}[which]
        full = self.reference - self.start
        return float(np.dot(w - self.start, full) / np.dot(full, full))


def master_weight_run(w0, steps, dtype="bfloat16") -> MasterWeightRun:
    r"""K updates in ``dtype`` alone against a float32 master copy, both against float64.

    ======  ======  ===========================================================
    Symbol  Shape   Meaning
    ======  ======  ===========================================================
    w0      (n,)    the start, stored in ``dtype`` first (a bfloat16 checkpoint)
    steps   (K, n)  the update of each step (e.g. :func:`adam_steps`)
    dtype   str     the low-precision dtype of the model's weights
    return          a :class:`MasterWeightRun`
    ======  ======  ===========================================================

    >>> import numpy as np, grpo_lab as gl
    >>> run = gl.master_weights.master_weight_run([1.0], np.full((256, 1), 2**-10))
    >>> run.low, run.master, run.reference        # 256 steps of 2**-10 add 0.25
    (array([1.]), array([1.25]), array([1.25]))
    """
    w, s, d = check_steps_arguments(w0, steps, dtype)
    start = w.astype(d).astype(np.float64)                       # (n,) the stored start
    ref, low, master = start.copy(), start.copy(), start.astype(np.float32)
    dist = {"low": [], "master": [], "copy": []}
    rms = lambda x: float(np.sqrt(np.mean((x - ref) ** 2)))      # noqa: E731
    for step in s:                                               # step: (n,)
        ref = ref + step                                         # float64, the exact run
        low = update_math(low, step, d)                          # the dtype alone
        master = master + step.astype(np.float32)                # float32 master weights
        copy = master.astype(d).astype(np.float64)               # the copy made after it
        for key, x in (("low", low), ("master", master.astype(np.float64)), ("copy", copy)):
            dist[key].append(rms(x))
    return MasterWeightRun(str(d), start, ref, low, master.astype(np.float64), copy,
                           {k: np.array(v) for k, v in dist.items()})


# --- pitfall 7: gradients that underflow, and loss scaling --------------------------------------

def flushed_fraction(g, dtype) -> float:
    r"""The share of the nonzero entries of ``g`` that are 0 once stored in ``dtype``.

    float16 flushes :math:`|g| \le 2^{-25} \approx 3 \times 10^{-8}` (half its smallest
    subnormal; the tie rounds to even, 0) to 0. bfloat16 and float32 share float32's exponent
    range and flush only below about :math:`10^{-40}` (their smallest subnormals are
    :math:`2^{-133} \approx 9 \times 10^{-41}` and :math:`2^{-149} \approx 1.4 \times 10^{-45}`).

    >>> import grpo_lab as gl
    >>> gl.master_weights.flushed_fraction([1e-3, 1e-7, 1e-8, 0.0], "float16")
    0.3333333333333333
    """
    arr, _ = as_float_array("g", g, shape_doc=" of gradients")
    d = as_dtype(dtype)
    g64 = arr.astype(np.float64)
    nonzero = g64 != 0
    if not nonzero.any():
        return 0.0
    return float(((g64.astype(d) == 0) & nonzero).sum() / nonzero.sum())


def scaled_gradient(g, scale, dtype="float16") -> np.ndarray:
    r"""The gradient a backward pass in ``dtype`` gives with the loss scaled by ``scale``,
    unscaled in float32.

    .. math:: \hat g = \operatorname{fl}_{32}\big(\operatorname{fl}_{\text{dtype}}(S g)\big) / S

    ``scale = 1`` is no loss scaling. An entry whose :math:`S g` passes the dtype's largest
    value is ``inf``: the step a dynamic scaler skips. The rounding is that of storing the
    gradient once; a real backward pass rounds at every layer besides.

    ======  ======  ========================================================
    Symbol  Shape   Meaning
    ======  ======  ========================================================
    g       any     the exact gradient
    scale   scalar  the loss scale S > 0 (a power of two unscales exactly)
    dtype   str     the dtype of the backward pass (``"float16"``)
    return  g's     float32: the gradient the optimiser receives
    ======  ======  ========================================================

    >>> import grpo_lab as gl
    >>> gl.master_weights.scaled_gradient([1e-8, 1.0], 1.0)
    array([0., 1.], dtype=float32)
    >>> g = gl.master_weights.scaled_gradient([1e-8, 1.0], 2.0**14)   # 1e-8 survives
    >>> print(f"{g[0]:.4e} {g[1]}")
    9.9972e-09 1.0
    >>> float(gl.master_weights.scaled_gradient([1e-8, 1.0], 2.0**16)[1])   # > 65504
    inf
    """
    arr, _ = as_float_array("g", g, shape_doc=" of gradients")
    S = check_scale("scale", scale)
    return scaled_math(arr.astype(np.float64), S, as_dtype(dtype))


def scaled_math(g, S, d):
    """:func:`scaled_gradient` on a checked float64 array, scale and NumPy dtype."""
    with np.errstate(over="ignore"):                             # S g past the range: inf
        stored = (S * g).astype(d)                               # the backward pass's gradient
    return (stored.astype(np.float32) / np.float32(S)).astype(np.float32)   # unscaled in float32


@dataclass(frozen=True)
class DynamicScalerRun:
    """A dynamic loss scaler run on K gradients.

    ``scales`` (K,): the scale each step used; ``skipped`` (K,): True where a scaled gradient
    overflowed and the step was skipped; ``flushed`` (K,): the share of the step's nonzero
    gradient entries that reached the optimiser as 0 (NaN on a skipped step); ``final_scale``:
    the scale after the last update.
    """

    scales: np.ndarray
    skipped: np.ndarray
    flushed: np.ndarray
    final_scale: float


def dynamic_loss_scaling(grads, dtype="float16", *, init_scale=2.0**16, growth_factor=2.0,
                         backoff_factor=0.5, growth_interval=2000) -> DynamicScalerRun:
    r"""A dynamic loss scaler on a sequence of gradients, with PyTorch's ``GradScaler`` rule.

    Each step scales the gradient by :math:`S` in ``dtype`` (:func:`scaled_gradient`). If an
    entry is inf or NaN the step is **skipped** and :math:`S \leftarrow S \cdot`
    ``backoff_factor``; otherwise it is applied and, after ``growth_interval`` applied steps in
    a row, :math:`S \leftarrow S \cdot` ``growth_factor``. The defaults are
    ``torch.amp.GradScaler``'s (init 65536, x2, x0.5, 2000 steps).

    ===============  ======  ===================================================
    Symbol           Shape   Meaning
    ===============  ======  ===================================================
    grads            (K, n)  the exact gradient of each of K steps
    dtype            str     the dtype of the backward pass (``"float16"``)
    init_scale       scalar  the first S, > 0
    growth_factor    scalar  > 1, applied after ``growth_interval`` good steps
    backoff_factor   scalar  in (0, 1), applied on a step that overflowed
    growth_interval  int     >= 1
    return                   a :class:`DynamicScalerRun`
    ===============  ======  ===================================================

    >>> import numpy as np, grpo_lab as gl
    >>> run = gl.master_weights.dynamic_loss_scaling(
    ...     [[1.0], [1.0], [1.0]], init_scale=2.0**17, growth_interval=1)
    >>> run.scales.tolist(), run.skipped.tolist(), run.final_scale   # 65536 > 65504 too
    ([131072.0, 65536.0, 32768.0], [True, True, False], 65536.0)
    """
    g, _ = as_float_array("grads", grads, ndim=2, shape_doc=" of shape (K, n)")
    d = as_dtype(dtype)
    S = check_scale("init_scale", init_scale)
    growth = check_real("growth_factor", growth_factor, minimum=1.0, allow_equal=False)
    backoff = check_real("backoff_factor", backoff_factor, minimum=0.0, allow_equal=False,
                         maximum=1.0)
    if backoff == 1.0:
        raise ValueError("backoff_factor: expected a number in (0, 1), got 1.0 (the scale "
                         "would never come down after an overflow)")
    interval = check_int("growth_interval", growth_interval, minimum=1)
    g = g.astype(np.float64)
    scales, skipped, flushed, good = [], [], [], 0
    for gk in g:                                                 # gk: (n,)
        scales.append(S)
        applied = scaled_math(gk, S, d)                          # (n,) float32, unscaled
        if not np.isfinite(applied).all():                       # overflow: skip, back off
            skipped.append(True)
            flushed.append(np.nan)
            S, good = S * backoff, 0
            continue
        nonzero = gk != 0
        skipped.append(False)
        flushed.append(float(((applied == 0) & nonzero).sum() / max(int(nonzero.sum()), 1)))
        good += 1
        if good == interval:                                     # a run of good steps: grow
            S, good = S * growth, 0
    return DynamicScalerRun(np.array(scales), np.array(skipped, dtype=bool), np.array(flushed),
                            float(S))
