"""Hostile input to every array argument of ``gl.neighbours``' functions, through the same
sweep and the same rules as ``tests/test_hostile_inputs.py`` (whose harness this reuses): a
``ValueError`` / ``TypeError`` that names the argument, or the documented answer (bools and
ints read as float64, a CPU tensor as NumPy reads it, bfloat16 as ml_dtypes' bfloat16)."""

import warnings

import numpy as np
import pytest

import grpo_lab as gl

pytest.importorskip("torch")
from tests.test_hostile_inputs import HOSTILE, SHAPE_KINDS, _names, _plain, _same  # noqa: E402

N = gl.neighbours
L = np.log([[0.5, 0.25, 0.25], [0.3, 0.3, 0.4]])             # (N, T) logp
OLD = L + 0.1
ADV = np.array([1.0, -1.0])
R = np.array([[1.0, 0.0]])                                   # (B, G) = (1, 2)
MASK = np.array([[1, 1, 0], [1, 1, 1]])

LOSS_ARGS = {"logp": "float", "old_logp": "float", "adv": "float"}
API = {
    "reinforce_pp_advantages": (N.reinforce_pp_advantages, dict(rewards=R, mask=MASK),
                                {"rewards": "float", "mask": "mask"}),
    "remax_advantages": (N.remax_advantages, dict(rewards=R, greedy_rewards=np.array([0.5])),
                         {"rewards": "float", "greedy_rewards": "float"}),
    "cispo_weight": (N.cispo_weight, dict(logp=L, old_logp=OLD),
                     {"logp": "float", "old_logp": "float"}),
    "cispo_loss": (N.cispo_loss, dict(logp=L, old_logp=OLD, adv=ADV), LOSS_ARGS),
    "sapo_gate": (N.sapo_gate, dict(logp=L, old_logp=OLD, adv=ADV), LOSS_ARGS),
    "sapo_loss": (N.sapo_loss, dict(logp=L, old_logp=OLD, adv=ADV), LOSS_ARGS),
}
OPTIONAL = {("reinforce_pp_advantages", "mask")}             # None: each completion weighs 1
CASES = [(name, arg, kind) for name, (_, _, args) in API.items() for arg in args for kind in HOSTILE]


def test_the_sweep_covers_every_function_of_gl_neighbours():
    public = {n for n in N.__all__ if callable(getattr(N, n)) and not isinstance(getattr(N, n), type)
              and n not in ("table", "group_advantages", "sequence_ratio")}   # swept elsewhere
    assert public == set(API)


@pytest.mark.parametrize("name, arg, kind", CASES, ids=[f"{n}-{a}-{k}" for n, a, k in CASES])
def test_hostile_value_gets_a_named_error_or_the_documented_answer(name, arg, kind):
    fn, valid, args = API[name]
    make, answer = HOSTILE[kind]
    value = make(valid[arg])
    with warnings.catch_warnings():
        warnings.simplefilter("error")                        # no RuntimeWarning escapes
        try:
            got = fn(**{**valid, arg: value})
        except (TypeError, ValueError) as err:
            named = list(args) if kind in SHAPE_KINDS else [arg]
            assert _names(str(err), named), f"{name}({arg}={kind}) raised without naming {arg}: {err}"
            assert "inhomogeneous" not in str(err)
            return
        documented = answer == "maybe" or (kind == "None" and (name, arg) in OPTIONAL)
        assert documented, f"{name}({arg}={kind}) was accepted: {got!r}"
        expected = fn(**{**valid, arg: _plain(value)})
    assert _same(got, expected), f"{name}({arg}={kind}): {got!r} != {expected!r}"
