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
The dtype policy of :mod:`grpo_lab.numerics.dtypes` holds: no inf or NaN comes from finite
input. A weight that an update carries past its dtype's range is refused by name (``step``,
``steps``), never returned as inf; Adam's moments are formed on gradients rescaled by a power
of two, so a gradient of 1e200 or 1e-300 gives the update ``-lr sign(g)`` it mathematically
has; a loss scale is a float32 number, as in ``torch.amp.GradScaler``. The one inf left is
the documented one: a scaled gradient that overflows, the signal a dynamic scaler skips on.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from grpo_lab.numerics.precision import as_dtype
from grpo_lab.numerics.stable import divide_or_zero_math, power_of_two_exponent
from grpo_lab.numerics.validate import (as_float_array, check_choice, check_int, check_real,
                                        check_shape, describe)

__all__ = ["SCALE_RANGE", "DynamicScalerRun", "MasterWeightRun", "adam_steps", "dynamic_loss_scaling",
           "flushed_fraction", "lost_update_fraction", "master_weight_run", "scaled_gradient",
           "update_in"]


def opmath_dtype(d: np.dtype):
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


#: the loss scales a float32 number holds as a normal number (``torch.amp.GradScaler`` keeps
#: its scale in a float32 tensor): below, 1 / S is inf in float32 and S g underflows to 0
SCALE_RANGE = (float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max))


def check_scale(name: str, scale) -> float:
    """A loss scale: a real number that float32 holds as a normal number, in :data:`SCALE_RANGE`
    (about 1.2e-38 to 3.4e38)."""
    S = check_real(name, scale, minimum=0.0, allow_equal=False)
    if not SCALE_RANGE[0] <= S <= SCALE_RANGE[1]:
        raise ValueError(f"{name}: expected a loss scale in [{SCALE_RANGE[0]:.8g}, "
                         f"{SCALE_RANGE[1]:.8g}], a normal float32 number (the scaler keeps S "
                         f"in float32 and unscales by 1/S there), got {S!r}")
    return S


def _refuse_overflow(name: str, new, d, what: str) -> None:
    """A ``ValueError`` naming ``name`` if an update carried a weight past ``d``'s range."""
    bad = ~np.isfinite(new)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: expected updates that keep the weights inside {d}'s range "
                         f"(largest finite {float(ml_dtypes.finfo(d).max):.6g}), got {what} "
                         f"that {d} rounds to inf at index {where}")


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

    The update vanishes when ``|step| < u/2 * |w|`` and never when ``|step| > u * |w|``. A sum
    past the dtype's range (60000 + 10000 in float16) is a ``ValueError`` naming ``step``, not
    an inf weight.

    >>> import grpo_lab as gl
    >>> gl.master_weights.update_in([1.0, 1.0], [2**-9, 2**-7], "bfloat16")
    array([1.       , 1.0078125])
    """
    w, step, d = check_update_arguments(w, step, dtype)
    new = update_math(w, step, d)
    _refuse_overflow("step", new, d, "a sum w + step")
    return new


def update_math(w, step, d):
    """:func:`update_in` on checked float64 arrays and a NumPy dtype."""
    work = opmath_dtype(d)
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
    new = update_math(w, step, d)
    _refuse_overflow("step", new, d, "a sum w + step")
    same = new == w.astype(d).astype(np.float64)                        # the update vanished
    return float((same & moved).sum() / moved.sum())


def adam_steps(grads, *, lr, beta1=0.9, beta2=0.999, eps=1e-8) -> np.ndarray:
    r"""The updates Adam makes from a sequence of gradients, in float64 (no weight decay).

    .. math::

        m_k = \beta_1 m_{k-1} + (1 - \beta_1) g_k, \quad
        v_k = \beta_2 v_{k-1} + (1 - \beta_2) g_k^2, \quad
        \Delta_k = -\mathrm{lr}\, \frac{m_k / (1 - \beta_1^k)}{\sqrt{v_k / (1 - \beta_2^k)} + \mathrm{eps}}

    Adam normalises each coordinate by its own RMS, so :math:`|\Delta_k|` is about ``lr``
    whatever the gradient's size: the size of the update the weights have to absorb.

    The moments are formed on each coordinate's gradients divided by a power of two
    :math:`2^{k_j}` (exact), with ``eps`` brought into the same units, :math:`\mathrm{eps}/2^{k_j}`:
    the update is unchanged, and a gradient of 1e200 (whose square overflows) or 1e-200 (whose
    square underflows) gets the update it mathematically has, not -0 or 0/0. ``eps = 0`` is
    allowed: a coordinate whose gradients have all been 0 gets the update 0 (the limit as
    eps -> 0; PyTorch's Adam gives NaN there). No update is -0.

    ======  ======  ==========================================================
    Symbol  Shape   Meaning
    ======  ======  ==========================================================
    grads   (K, n)  the gradient of each of K steps
    lr      scalar  the learning rate (RL fine-tuning: 1e-7 to 1e-5), > 0
    beta1   scalar  in [0, 1), the first moment's decay (0.9)
    beta2   scalar  in [0, 1), the second moment's decay (0.999)
    eps     scalar  >= 0, added to sqrt(v_hat) (1e-8)
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
    out = adam_math(g.astype(np.float64), lr, beta1, beta2, eps)
    if not np.isfinite(out).all():                               # lr * m/sqrt(v) past 1.8e308
        raise ValueError(f"lr: expected a learning rate whose updates fit in float64 (each is "
                         f"about lr in size, up to lr (1 - beta1) / sqrt(1 - beta2)), got {lr!r}")
    return out


def adam_math(g, lr, beta1, beta2, eps):
    """:func:`adam_steps` on checked values: ``g`` (K, n) float64 and the four options."""
    k = np.array([power_of_two_exponent(x, eps=eps) for x in np.abs(g).max(axis=0)])   # (n,)
    g = np.ldexp(g, -k)                                          # (K, n) |g| < 1, exact
    eps_k = np.ldexp(eps, -k)                                    # (n,) eps in the same units
    m, v = np.zeros(g.shape[1]), np.zeros(g.shape[1])            # (n,) the two moments
    out = np.empty_like(g)                                       # (K, n)
    for t in range(g.shape[0]):
        m = beta1 * m + (1 - beta1) * g[t]
        v = beta2 * v + (1 - beta2) * g[t] ** 2
        m_hat, v_hat = m / (1 - beta1 ** (t + 1)), v / (1 - beta2 ** (t + 1))   # bias-corrected
        with np.errstate(over="ignore"):                         # refused by the caller
            out[t] = divide_or_zero_math(-lr * m_hat, np.sqrt(v_hat) + eps_k)     # 0/0 is 0
    return out + 0.0                                             # -0 becomes 0


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
        """The share of the reference's movement that ``which`` (``"low"``, ``"master"`` or
        ``"copy"``) made: <w - w0, ref - w0> / |ref - w0|^2 (1 for the exact run, 0 for weights
        that never moved). A reference that did not move (the steps sum to 0) has no share to
        give: a ``ValueError``, not 0/0."""
        which = check_choice("which", which, ("low", "master", "copy"))
        w = {"low": self.low, "master": self.master, "copy": self.copy}[which]
        full = self.reference - self.start                       # (n,)
        size = np.abs(full).max()
        if size == 0:
            raise ValueError("which: the reference run ends where it started (the steps sum "
                             "to 0 on every weight), so no run has a share of its movement")
        full = full / size                                       # no square overflows
        return float(np.dot((w - self.start) / size, full) / np.dot(full, full))


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

    Steps that carry a weight past the range of a run's dtype (1e300 in bfloat16; the float32
    master, whatever ``dtype``) are a ``ValueError`` naming ``steps`` and the step, never an
    inf weight.
    """
    w, s, d = check_steps_arguments(w0, steps, dtype)
    start = w.astype(d).astype(np.float64)                       # (n,) the stored start
    ref, low, master = start.copy(), start.copy(), start.astype(np.float32)
    dist = {"low": [], "master": [], "copy": []}
    for k, step in enumerate(s):                                 # step: (n,)
        with np.errstate(over="ignore"):                         # refused just below
            ref = ref + step                                     # float64, the exact run
            low = update_math(low, step, d)                      # the dtype alone
            master = master + step.astype(np.float32)            # float32 master weights
            copy = master.astype(d).astype(np.float64)           # the copy made after it
        for name, x, xd in ((f"the {d} run", low, d), ("the float32 master", master, np.float32),
                            (f"the {d} copy", copy, d)):    # the reference stays near master
            _refuse_overflow("steps", x, np.dtype(xd), f"{name} after step {k}")
        for key, x in (("low", low), ("master", master.astype(np.float64)), ("copy", copy)):
            dist[key].append(_rms(x - ref))
    return MasterWeightRun(str(d), start, ref, low, master.astype(np.float64), copy,
                           {k: np.array(v) for k, v in dist.items()})


def _rms(x) -> float:
    """sqrt(mean(x**2)) without a square that overflows: x scaled by its largest |x| first."""
    size = np.abs(x).max()
    return 0.0 if size == 0 else float(size * np.sqrt(np.mean((x / size) ** 2)))


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
    value (or whose unscaled value passes float32's) is ``inf``: the overflow a dynamic scaler
    detects and skips, the one inf this module returns on purpose. The rounding is that of
    storing the gradient once; a real backward pass rounds at every layer besides. ``scale``
    is a float32 number, as ``GradScaler``'s is (:data:`SCALE_RANGE`): a scale of 1e-300 is
    refused by name, since 1/S would be inf in float32 and every gradient 0/0.

    ======  ======  ========================================================
    Symbol  Shape   Meaning
    ======  ======  ========================================================
    g       any     the exact gradient
    scale   scalar  the loss scale S, in SCALE_RANGE (a power of two unscales exactly)
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
        return (stored.astype(np.float32) / np.float32(S)).astype(np.float32)  # unscaled, f32


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

    The scale stays a normal float32 number (:data:`SCALE_RANGE`), so a step is skipped only
    where a gradient overflowed: a growth that would pass float32's largest value is not
    applied (PyTorch's ``_amp_update_scale_`` grows only to a finite scale), and a back-off
    that would go below float32's smallest normal stops there (PyTorch's would reach 0, and
    then skip every step on 0 * inf = NaN). A gradient too large for ``dtype`` even at that
    smallest scale (1e300 in float16) keeps overflowing: its steps are skipped, as they are.

    ===============  ======  ===================================================
    Symbol           Shape   Meaning
    ===============  ======  ===================================================
    grads            (K, n)  the exact gradient of each of K steps
    dtype            str     the dtype of the backward pass (``"float16"``)
    init_scale       scalar  the first S, in SCALE_RANGE
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
            S, good = max(S * backoff, SCALE_RANGE[0]), 0        # a float32 normal, never 0
            continue
        nonzero = gk != 0
        skipped.append(False)
        flushed.append(float(((applied == 0) & nonzero).sum() / max(int(nonzero.sum()), 1)))
        good += 1
        if good == interval:                                     # a run of good steps: grow
            S = S * growth if S * growth <= SCALE_RANGE[1] else S   # only to a finite float32
            good = 0
    return DynamicScalerRun(np.array(scales), np.array(skipped, dtype=bool), np.array(flushed),
                            float(S))
