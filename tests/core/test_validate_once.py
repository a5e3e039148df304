"""Validate once, at the door (issue 25): one public call checks each argument once.

The counter below watches every call that enters the validation layer,
``grpo_lab/numerics/validate.py``, from outside it (``sys.setprofile``: a call inside the
layer, as_float_array calling check_finite, is the layer's own business), and records the
argument each check was about (its ``name`` parameter). A public function checks its arguments
in one ``check_*_arguments`` call, which makes one conversion per argument; the math it then
runs (``*_math``, ``kl_estimate``, ``row_weights``...) takes checked values and checks nothing
again, so each argument the caller passed is converted exactly once and no internal name
(``x``, ``ratio``, ``clamp``, ``mode`` ...) ever reaches the layer.

Before the redesign one ``gl.grpo_loss`` call entered the layer 68 times, converting ``logp``
4 times and ``mask`` 9 times; ``glt.grpo_loss`` 23 times, ``agg`` twice (once as ``mode``).
Rerun the count: ``python -m pytest tests/core/test_validate_once.py -q -s`` prints it.
"""

import collections
import sys

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.numerics import validate

LAYER = validate.__file__
#: The checks that convert or read an argument (the others compare shapes or devices).
CONVERSIONS = {"as_array", "as_float_array", "as_mask", "as_counts", "check_real", "check_int",
               "check_choice", "check_block_input", "check_finite"}


def validation_calls(fn, *args, **kwargs):
    """``(result, entries, checks)``: every entry into the validation layer during one call of
    ``fn``, by function name, and the conversions by argument name."""
    entries, checks = collections.Counter(), collections.Counter()

    def profile(frame, event, _):
        if event != "call" or frame.f_code.co_filename != LAYER:
            return
        if frame.f_back is not None and frame.f_back.f_code.co_filename == LAYER:
            return                                          # inside the layer
        entries[frame.f_code.co_name] += 1
        name = frame.f_locals.get("name")
        if frame.f_code.co_name in CONVERSIONS and isinstance(name, str):
            checks[name] += 1

    sys.setprofile(profile)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return result, entries, checks


def test_the_counter_sees_a_check_and_not_the_math():
    """The counter itself: a door's check is seen, the math twin's is not."""
    x = np.array([[1.0, 2.0, 6.0]])
    _, entries, checks = validation_calls(gl.centred_deviations, x)
    assert checks == {"x": 1} and sum(entries.values()) == 1
    from grpo_lab.numerics.stable import centred_deviations_math
    _, entries, checks = validation_calls(centred_deviations_math, x)
    assert not entries


L = np.log([[0.5, 0.25, 0.25], [0.3, 0.3, 0.4]])           # (N, T) = (2, 3)
OLD, REF = L + 0.1, L - 0.1
MASK = np.array([[1, 1, 0], [1, 1, 1]])
ADV = np.array([1.0, -1.0])
LOSS_CALLS = {   # every knob given, so that each is checked (an option left None is not)
    "token": dict(eps_low=0.2, eps_high=0.28, beta=0.04, kl="k3", agg="grpo", level="token",
                  dual_clip=3.0, kl_clamp=10.0, kl_bias_correction=True),
    "sequence": dict(eps_low=3e-4, eps_high=4e-4, beta=0.1, kl="k2", agg="dr_grpo",
                     level="sequence", max_len=5, kl_clamp=1.0),
}
ARRAYS = ("logp", "old_logp", "ref_logp", "adv", "mask")


def _expected(options):
    return {name: 1 for name in ARRAYS} | {k: 1 for k, v in options.items()
                                          if v is not None and k != "kl_bias_correction"}


@pytest.mark.parametrize("case", LOSS_CALLS)
def test_grpo_loss_checks_each_argument_once(case):
    options = LOSS_CALLS[case]
    _, entries, checks = validation_calls(gl.grpo_loss, L, OLD, REF, ADV, MASK, **options)
    print(f"\ngl.grpo_loss ({case}): {sum(entries.values())} entries {dict(entries)}")
    assert dict(checks) == _expected(options)


torch = pytest.importorskip("torch")
glt = pytest.importorskip("grpo_lab.torch")


@pytest.mark.parametrize("case", LOSS_CALLS)
def test_torch_grpo_loss_checks_each_argument_once(case):
    options = LOSS_CALLS[case]
    tensors = [torch.tensor(a, dtype=torch.float64) for a in (L, OLD, REF, ADV, MASK)]
    tensors[0].requires_grad_(True)
    _, entries, checks = validation_calls(glt.grpo_loss, *tensors, **options)
    print(f"\nglt.grpo_loss ({case}): {sum(entries.values())} entries {dict(entries)}")
    assert dict(checks) == _expected(options)


R23 = np.array([[1.0, 0.0, 2.0], [3.0, 1.0, 1.0]])
DOORS = {   # the public functions that compose others: each argument still checked once
    "clipped_surrogate_loss": (gl.clipped_surrogate_loss, (L, OLD, ADV), dict(dual_clip=3.0)),
    "surrogate_grad_logp": (gl.surrogate_grad_logp, (L, OLD, ADV), {}),
    "sequence_ratio": (gl.sequence_ratio, (L, OLD, MASK), {}),
    "grpo_diagnostics": (gl.grpo_diagnostics, (L, OLD, np.exp(L - OLD), ADV[:, None], MASK),
                         dict(per_token_kl=np.zeros((2, 3)))),
    "aggregate_loss": (gl.aggregate_loss, (L, MASK, "dr_grpo"), dict(max_len=4)),
    "kl_k3": (gl.kl_k3, (L, REF), dict(clamp=10.0)),
    "kl_k3_plus": (gl.kl_k3_plus, (L, REF), dict(clamp=10.0)),
    "kl_grad_logp": (gl.kl_grad_logp, (L, REF, "k3"), dict(clamp=10.0)),
    "kl_shaped_rewards": (gl.kl_shaped_rewards, ([[1.0, 0.0]], OLD, REF, MASK),
                          dict(beta=0.1, kl="k3", clamp=10.0)),
    "group_advantages": (gl.group_advantages, (R23, 1e-6), dict(scale="batch", ddof=1)),
    "process_advantages": (gl.process_advantages, ([[[1.0, 2.0], [3.0, 4.0]]], [[[1, 1], [1, 0]]]),
                           dict(eps=1e-6, ddof=1)),
    "normalise_then_sum": (gl.normalise_then_sum, (np.stack([R23, 2 * R23]), [1.0, 0.5]),
                           dict(eps=1e-6, ddof=1)),
    "weighted_sum": (gl.weighted_sum, (np.stack([R23, 2 * R23]), [1.0, 0.5]), {}),
    "masked_mean": (gl.masked_mean, (L, MASK), {}),
    "log_softmax": (gl.log_softmax, (R23,), {}),
    "sequence_logprob_mean": (gl.sequence_logprob_mean, (L, MASK), {}),
    "glt.kl_k3_plus": (lambda a, b, **kw: glt.kl_k3_plus(torch.tensor(a), torch.tensor(b), **kw),
                       (L, REF), dict(clamp=10.0)),
    "glt.aggregate_loss": (lambda a, b, *rest, **kw: glt.aggregate_loss(
        torch.tensor(a), torch.tensor(b), *rest, **kw), (L, MASK, "dapo"), {}),
}


@pytest.mark.parametrize("name", DOORS)
def test_each_door_checks_each_argument_once(name):
    fn, args, kwargs = DOORS[name]
    _, _, checks = validation_calls(fn, *args, **kwargs)
    assert checks and set(checks.values()) == {1}, dict(checks)
