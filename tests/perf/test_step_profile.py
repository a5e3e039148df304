"""Where a GRPO step's time goes: every stage of the tiny policy's step is timed (the 7B
arithmetic is the cost model's, tests/perf/test_cost_model.py)."""

import pytest

torch = pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402
from grpo_lab.perf import step_profile  # noqa: E402


def test_every_stage_of_a_small_step_is_timed_and_the_optimizer_steps():
    run = gl.train.make_run(gl.train.TrainConfig(prompts_per_step=2, group_size=4, threads=1))
    times, shapes = step_profile.time_grpo_step(run, repeats=1)
    assert list(times) == list(step_profile.STAGES)
    assert all(t > 0 for t in times.values())
    assert shapes["N"] == 8 and shapes["V"] == run.policy.head.out_features
    assert shapes["params"] == sum(p.numel() for p in run.policy.parameters())
    first = next(run.policy.parameters())
    assert int(run.optimizer.state[first]["step"]) == 1              # one real update ran


@pytest.mark.parametrize("name", ["step_arithmetic", "ModelShape", "QWEN_7B"])
def test_the_old_7b_arithmetic_says_where_the_cost_model_is(name):
    with pytest.raises(AttributeError, match=r"replaced by the cost model in grpo_lab\.perf\.cost_model"):
        getattr(step_profile, name)
