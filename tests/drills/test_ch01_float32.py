"""Chapter 1's drill asks for the float32 version (``check_group_advantages(fn,
dtype="float32")``), since the page shows the plain float64 formula before it: the checker
accepts the float32 answer that shifts by each group's first reward, and rejects the plain
formula in float32 (noise over eps on an all-equal group) and a float64 result."""

import numpy as np
import pytest

import grpo_lab as gl
from tests.drills.catalogue.ch01_advantages import _adv_float32, _adv_right


def plain_in_float32(rewards, eps=1e-8):
    return gl.paper.group_advantages(np.asarray(rewards, dtype=np.float32), eps)


def shifted_in_float32(rewards, eps=1e-8):
    r = np.asarray(rewards, dtype=np.float32)
    return gl.paper.group_advantages(r - r[:, :1], eps)                  # (B, G) float32


@pytest.mark.parametrize("fn", [_adv_float32, shifted_in_float32])
def test_float32_answers_that_shift_pass(fn, capsys):
    assert gl.drills.check_group_advantages(fn, dtype="float32")
    assert "in float32" in capsys.readouterr().out


@pytest.mark.parametrize("fn, words", [(plain_in_float32, "subtract each group's first reward"),
                                       (_adv_right, "returned float64 values")])
def test_the_plain_formula_in_float32_and_a_float64_answer_fail(fn, words, capsys):
    assert not gl.drills.check_group_advantages(fn, dtype="float32")
    assert words in capsys.readouterr().out
    assert gl.drills.check_group_advantages(_adv_right, verbose=False)   # the default takes it


def test_dtype_is_checked():
    with pytest.raises(ValueError, match="dtype: expected None or 'float32'"):
        gl.drills.check_group_advantages(_adv_right, dtype="float16")
