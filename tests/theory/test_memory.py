"""The memory model: bytes per parameter for mixed-precision Adam, model by model."""

import numpy as np
import pytest

import grpo_lab as gl


def test_memory_of_a_7b_model_worked_out():
    n = 7_000_000_000
    ppo = gl.training_memory("ppo", n)
    assert ppo["policy"] == {"weights": 14e9, "gradients": 14e9, "master_weights": 28e9,
                             "optimizer": 56e9}
    assert ppo["critic"] == ppo["policy"]
    assert ppo["reference"] == ppo["reward_model"] == {"weights": 14e9}
    total = {m: sum(sum(s.values()) for s in gl.training_memory(m, n).values())
             for m in ("ppo", "grpo")}
    assert total == {"ppo": 252e9, "grpo": 140e9}
    lean = gl.training_memory("grpo", n, reward_model=False, reference=False)
    assert list(lean) == ["policy"] and sum(lean["policy"].values()) == 16 * n


@pytest.mark.parametrize("args, exc, message", [
    (("sac", 10), ValueError, r"method: expected one of 'ppo', 'grpo', got 'sac'"),
    (("ppo", 0), ValueError, r"n_params: expected an integer in \[1, inf\]"),
    (("ppo", 7e9), TypeError, r"n_params: expected an integer, got float"),
    (("ppo", 10, "no"), TypeError, r"reward_model: expected True or False, got str 'no'"),
    (("ppo", 10, True, None), TypeError, r"reference: expected True or False, got NoneType None"),
])
def test_memory_bad_input(args, exc, message):
    method, n, *flags = args
    kwargs = dict(zip(("reward_model", "reference"), flags))
    with pytest.raises(exc, match=message):
        gl.training_memory(method, n, **kwargs)


def test_numpy_bools_are_flags_too():
    assert list(gl.training_memory("grpo", 10, reference=np.bool_(False))) == ["policy",
                                                                               "reward_model"]
