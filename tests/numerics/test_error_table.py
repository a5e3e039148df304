"""error_table: the rounding a computation adds per dtype, measured against float64 on the
same rounded inputs; notes for inputs that do not fit and functions that raise; bad input."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import grpo_lab as gl

ALL = ["float16", "bfloat16", "float32", "float64"]


def naive_log_softmax(z):
    return z - np.log(np.exp(z).sum(-1, keepdims=True))      # no max shift


def test_error_table_measures_naive_against_package():
    z = np.array([[0.0, 5.0, 12.0], [1.0, 2.0, 3.0]])
    t = gl.error_table({"naive": naive_log_softmax, "gl.log_softmax": gl.log_softmax}, z)
    assert [(r.function, r.dtype) for r in t.rows[:2]] == [("naive", "float16"),
                                                          ("gl.log_softmax", "float16")]
    assert len(t.rows) == 8
    assert t["naive", "float16"].nonfinite == 3 and t["naive", "float16"].max_abs == math.inf
    for name in ALL:
        row = t["gl.log_softmax", name]
        assert row.nonfinite == 0 and row.note == ""
        assert row.in_u <= (0.0 if name == "float64" else 2.0 ** -24 / gl.unit_roundoff(name) * 4)
    assert t["naive", "float32"].rel < 1e-6                          # fine where exp(12) fits
    text = str(t)
    assert text.splitlines()[0].startswith("function")
    assert "naive          |  float16 |         inf" in text


def test_error_table_notes_inputs_that_do_not_fit_and_functions_that_raise():
    r = np.array([[1e20, -1e20, 3e19, 0.0]])
    t = gl.error_table({"gl.group_advantages": gl.group_advantages}, r,
                       dtypes=["float16", "float32"])
    assert t["gl.group_advantages", "float16"].note == "input overflows float16"
    assert t["gl.group_advantages", "float32"].in_u < 2
    t = gl.error_table(lambda x: gl.group_advantages(x, scale="none"),
                       np.array([[65000.0, -65000.0, -65000.0, -65000.0]]), dtypes=["float16"])
    assert t.rows[0].note == "raised ValueError"
    assert "-" in str(t).splitlines()[1]


def test_error_table_compares_on_the_rounded_inputs():
    x = np.array([0.1, 0.2, 0.3])
    t = gl.error_table(lambda v: v * 1.0, x, reference=lambda v: v)  # exact: no error added
    assert all(r.max_abs == 0 for r in t.rows)


@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(2, 6)),
                  elements=st.floats(-100, 100, width=64)))
def test_error_table_of_the_reference_itself_is_zero_in_float64(rewards):
    t = gl.error_table({"a": gl.group_advantages, "b": gl.group_advantages}, rewards)
    assert t["a", "float64"].max_abs == 0 and t["b", "float64"].max_abs == 0
    for name in gl.DTYPES:
        row, twin = t["a", name], t["b", name]
        assert (row.max_abs, row.rel, row.nonfinite, row.note) == \
            (twin.max_abs, twin.rel, twin.nonfinite, twin.note)
        if not row.note:
            assert row.nonfinite == 0
            assert row.rel <= 4 * gl.unit_roundoff(name) or row.max_abs <= 1e-6


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: gl.error_table(42, np.ones(3)), TypeError,
     r"fns: expected a function or a non-empty dict of name -> function, got int 42"),
    (lambda: gl.error_table({}, np.ones(3)), TypeError, r"fns: expected .* got a dict|fns:"),
    (lambda: gl.error_table(np.exp, np.ones(3), dtypes="float16"), TypeError,
     r"dtypes: expected a sequence of dtypes"),
    (lambda: gl.error_table(np.exp, np.ones(3), dtypes=[]), ValueError,
     r"dtypes: expected at least one dtype, got an empty sequence"),
    (lambda: gl.error_table(np.exp, np.ones(3), reference=1.0), TypeError,
     r"reference: expected a function or None, got float 1.0"),
    (lambda: gl.error_table({"f": lambda x: x[:1]}, np.ones(3), reference=lambda x: x),
     ValueError, r"fns: expected 'f' to return the reference's shape \(3,\), got a 1-D"),
])
def test_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()
