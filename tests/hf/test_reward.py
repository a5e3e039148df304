"""gl.hf's reward on decoded text (addition_rewards) and as TRL's reward function
(trl_reward_function): every bad call TRL or a caller can make is named by its argument, never
a bare KeyError, IndexError or a TypeError from inside (issue 37)."""

import numpy as np
import pytest

glh = pytest.importorskip("grpo_lab.hf")

GOOD = "<think></think><answer>5</answer>"


def call(**kwargs):
    args = {"prompts": ["p"], "completions": [GOOD], "answer": [5]}
    args.update(kwargs)
    return glh.trl_reward_function()(**args)


def test_trl_calls_it_by_keyword_with_the_datasets_columns_and_extra_arguments():
    """TRL 1.16.0 (grpo_trainer.py:1626) passes prompts, completions, completion_ids and every
    other column and reward_kwargs (trainer_state, log_extra, log_metric) by keyword."""
    out = call(completion_ids=[[1, 2]], trainer_state=object(), log_metric=print, question=["q"])
    assert out == [1.5]
    assert call(completions=[[{"role": "user", "content": "q"},
                              {"role": "assistant", "content": GOOD}]]) == [1.5]
    assert call(answer=np.array([5]), prompts=("p",)) == [1.5]
    assert call(answer=["5.0"]) == [1.5]
    assert call(completions=(GOOD, "x"), answer=[5, 5], prompts=None) == [1.5, 0.0]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"completions": None}, TypeError, "completions: expected a list of decoded completions, got"),
    ({"completions": GOOD}, TypeError, "completions: expected a list of decoded completions, got s"),
    ({"completions": [5]}, TypeError, r"completions\[0\]: expected a str, or a list of chat"),
    ({"completions": [GOOD, []]}, TypeError, r"completions\[1\]: expected a str, or a list"),
    ({"completions": [[{"role": "assistant"}]]}, TypeError, r"completions\[0\]: expected a str"),
    ({"completions": [[{"content": None}]]}, TypeError, r"completions\[0\]: expected a str"),
    ({"completions": [["just text"]]}, TypeError, r"completions\[0\]: expected a str"),
    ({"answer": None}, TypeError, "answer: expected the dataset's 'answer' column"),
    ({"answer": "5"}, TypeError, "answer: expected a list of reference answers, one per "),
    ({"answer": 5}, TypeError, "answer: expected a list of reference answers"),
    ({"answer": [5, 6]}, ValueError, r"answer: expected one answer per completion \(1\)"),
    ({"answer": []}, ValueError, r"answer: expected one answer per completion \(1\)"),
    ({"answer": [[5]]}, TypeError, r"answer\[0\]: expected a number or a numeric str"),
    ({"answer": [True]}, TypeError, r"answer\[0\]: expected a number or a numeric str"),
    ({"answer": [float("nan")]}, ValueError, r"answer\[0\]: expected a finite number, got nan"),
    ({"answer": ["five"]}, ValueError, r"answer\[0\]: expected an ASCII decimal"),
    ({"prompts": ["p", "q"]}, ValueError, r"prompts: expected one prompt per completion \(1\)"),
    ({"prompts": 3}, ValueError, "prompts: expected one prompt per completion"),
])
def test_each_bad_call_names_the_argument_trl_passed(kwargs, error, words):
    with pytest.raises(error, match="^" + words):
        call(**kwargs)


def test_a_dataset_without_an_answer_column_is_named_as_such():
    with pytest.raises(TypeError, match="does the dataset have a column named 'answer'"):
        glh.trl_reward_function()(prompts=["p"], completions=[GOOD], solution=["5"])


@pytest.mark.parametrize("kwargs, error, words", [
    ({"format_weight": "a"}, TypeError, "format_weight: expected a real number"),
    ({"format_weight": float("inf")}, ValueError, "format_weight: expected a finite number"),
    ({"format_weight": -0.5}, ValueError, "format_weight: expected a number >= 0"),
    ({"format_weight": True}, TypeError, "format_weight: expected a real number"),
    ({"record": ()}, TypeError, "record: expected a list or None"),
])
def test_the_factory_checks_its_own_arguments_at_once(kwargs, error, words):
    with pytest.raises(error, match="^" + words):
        glh.trl_reward_function(**kwargs)


@pytest.mark.parametrize("texts, answers, error, words", [
    ("5", [5], TypeError, "texts: expected a list of decoded completions"),
    ([GOOD, None], [5, 5], TypeError, r"texts\[1\]: expected a str \(a decoded completion\)"),
    ([GOOD], "5", TypeError, "answers: expected a list of reference answers"),
    ([GOOD], [5, 5], ValueError, r"answers: expected one answer per completion \(1\)"),
    ([GOOD], [1.5j], TypeError, r"answers\[0\]: expected a number"),
])
def test_addition_rewards_names_its_arguments(texts, answers, error, words):
    with pytest.raises(error, match="^" + words):
        glh.addition_rewards(texts, answers)


def test_the_record_holds_what_trl_was_given():
    record = []
    f = glh.trl_reward_function(format_weight=0.25, record=record)
    assert f(prompts=["a", "b"], completions=[GOOD, "<answer>5</answer>"], answer=[5, 6]) == [
        1.25, 0.0]
    texts, rewards = record[0]
    assert texts == [GOOD, "<answer>5</answer>"] and rewards.dtype == np.float64
