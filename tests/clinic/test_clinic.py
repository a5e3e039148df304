"""The clinic's staging: its reward functions on worked strings, its table of stages, TRL's
refusal of a batch that is not a multiple of G, and one short real TRL run that truncates."""

import math

import pytest

import grpo_lab.clinic as clinic

GOOD = "<think></think><answer>7</answer>"


def test_reward_functions_on_worked_completions():
    texts = [GOOD, "<think></think><answer>5</answer>", "no answer"]
    answers = [7, 7, 7]
    assert clinic.accuracy(None, texts, answers) == [1.0, 0.0, 0.0]
    assert clinic.formatted(None, texts, answers) == [0.5, 0.5, 0.0]
    assert clinic.closeness(None, texts, answers) == [math.inf, 0.5, 0.0]      # the bug
    assert clinic.closeness_fixed(None, texts, answers) == [1.0, 1 / 3, 0.0]   # the fix
    assert clinic.solution_column(None, texts, answers) == [None] * 3
    with pytest.raises(KeyError, match="solution"):
        clinic.solution_crash(None, texts, answers)
    assert clinic.big_answer(None, texts, answers) == [0.7, 0.5, 0.0]
    assert clinic.length(None, [GOOD], [7]) == [len(GOOD) / 20]
    assert clinic.brevity(None, [GOOD], [7]) == [-len(GOOD) / 20]
    conversational = [[{"role": "assistant", "content": GOOD}]]
    assert clinic.accuracy(None, conversational, [7]) == [1.0]


def test_every_stage_changes_one_knob_and_names_its_cause():
    from grpo_lab.doctor import CAUSES
    assert len(clinic.STAGES) >= 12
    for name, s in clinic.STAGES.items():
        assert s.sick != s.healthy, name
        assert s.cause is None or s.cause in CAUSES, name
        changed = {k for k in set(s.sick) | set(s.healthy) if s.sick.get(k) != s.healthy.get(k)}
        assert 1 <= len(changed) <= 2, (name, changed)     # one knob (and its paired value)


def test_stage_refuses_an_unknown_name_and_a_non_bool():
    with pytest.raises(ValueError, match="name: expected one of"):
        clinic.stage("oom")
    with pytest.raises(TypeError, match="healthy: expected True or False"):
        clinic.stage("truncation", healthy=1)


def test_trl_refuses_a_batch_that_is_not_a_multiple_of_g():
    pytest.importorskip("trl")
    message = clinic.stage("batch_size")
    assert message.startswith("ValueError: ") and "num_generations" in message


def test_a_short_real_run_truncates_at_three_tokens():
    pytest.importorskip("trl")
    log = clinic.train(steps=2, max_new_tokens=3, seed=0)
    steps = [row for row in log if "reward" in row]
    assert len(steps) == 2 and "train_runtime" in log[-1]
    assert all(row["completions/max_length"] <= 3 for row in steps)
    assert sum(row["completions/clipped_ratio"] for row in steps) / 2 >= 0.5


def test_each_distinct_run_is_trained_once_per_process(monkeypatch):
    """The healed runs that are BASE (truncation's, zero_std's, reward_none's...) share one
    training; each caller gets its own copy; another seed or knob trains again."""
    calls = []
    monkeypatch.setattr(clinic, "_RUNS", {})
    monkeypatch.setattr(clinic, "train", lambda **kw: calls.append(kw) or [{"reward": 0.5}])
    a = clinic.stage("truncation", healthy=True, seed=3)
    b = clinic.stage("zero_std", healthy=True, seed=3)
    c = clinic.stage("reward_none", healthy=True, seed=3)       # reward_funcs = the default
    assert len(calls) == 1 and a == b == c == [{"reward": 0.5}]
    a[0]["reward"] = 9.0
    assert b[0]["reward"] == 0.5 and clinic.stage("kl_blowup", healthy=True, seed=3) == b
    clinic.stage("truncation", seed=3)
    clinic.stage("truncation", healthy=True, seed=4)
    assert len(calls) == 3 and calls[1]["max_new_tokens"] == 3 and calls[2]["seed"] == 4
