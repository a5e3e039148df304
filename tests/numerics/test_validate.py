"""The one validation layer: arrays and tensors are refused with the same words, and the
checks cost one pass (a sum) unless something is wrong."""

import numpy as np
import pytest

from grpo_lab.numerics import validate as v

torch = pytest.importorskip("torch")


def message(call):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("bad, words", [
    ([[1.0, np.nan]], "x: expected finite values, got nan at index (0, 1) (1 non-finite"),
    ([[np.inf, 1.0], [2.0, -np.inf]], "x: expected finite values, got inf at index (0, 0) (2 non-"),
    ([[1.0], [2.0]], "x: expected a 1-D "),
    (np.zeros((0,)), "x: expected a non-empty "),
])
def test_arrays_and_tensors_get_the_same_message(bad, words):
    arr = np.asarray(bad, dtype=np.float32)
    kind_np = message(lambda: v.as_float_array("x", arr, ndim=1 if arr.ndim == 2 and
                                               arr.shape[1] == 1 else None))
    kind_t = message(lambda: v.as_float_array("x", torch.from_numpy(arr), ndim=1 if arr.ndim == 2
                                              and arr.shape[1] == 1 else None, backend="torch"))
    assert kind_np[0] is kind_t[0]
    assert words in kind_np[1] and words in kind_t[1]
    assert kind_np[1].replace("array", "tensor").split(", got")[0] == kind_t[1].split(", got")[0]


def test_complex_and_non_tensors_are_type_errors():
    assert message(lambda: v.as_float_array("x", torch.ones(2, dtype=torch.complex64),
                                            backend="torch")) == (
        TypeError, "x: expected a real numeric dtype (float, int or bool), got dtype "
                   "torch.complex64")
    kind, text = message(lambda: v.as_float_array("x", [1.0, 2.0], backend="torch"))
    assert kind is TypeError and text.startswith("x: expected a torch.Tensor") and \
        text.endswith("got a list of length 2")


def test_ints_and_bools_give_float64_on_both_backends():
    assert v.as_float_array("x", np.array([1, 0]))[1] == np.float64
    assert v.as_float_array("x", torch.tensor([True, False]), backend="torch")[1] == torch.float64


@pytest.mark.parametrize("make", [np.array, torch.tensor])
def test_a_sum_that_overflows_is_rechecked_element_by_element(make):
    """The NaN scan is one sum; 3e38 + 3e38 overflows float32 without any non-finite input."""
    big = make([3e38, 3e38, -1.0], dtype=np.float32 if make is np.array else torch.float32)
    v.check_finite("x", big)                      # no error: every value is finite
    assert v.first_non_finite(big) is None
    big[2] = float("nan")
    assert v.first_non_finite(big) == (2,)
    with pytest.raises(ValueError, match=r"x: expected finite values, got nan at index \(2,\)"):
        v.check_finite("x", big)


def test_half_precision_sums_run_in_float32():
    """65504 is float16's largest value: a float16 sum of two would be inf."""
    v.check_finite("x", torch.full((4,), 6e4, dtype=torch.float16))
    v.check_finite("x", np.full(4, 6e4, dtype=np.float16))


def test_a_torch_mask_comes_back_in_the_dtype_asked_without_a_copy_when_it_has_it():
    m = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert v.as_mask("mask", m, (2, 2), backend="torch", dtype=torch.float32) is m
    assert v.as_mask("mask", m, (2, 2), backend="torch").dtype == torch.bool
    assert message(lambda: v.as_mask("mask", m * 0.5, (2, 2), backend="torch")) == (
        ValueError, "mask: expected only 0 and 1 (or bools), got 0.5 at index (0, 0)")
    assert message(lambda: v.as_mask("mask", m * 0.5, (2, 2))) == (
        ValueError, "mask: expected only 0 and 1 (or bools), got 0.5 at index (0, 0)")


@pytest.mark.parametrize("make", [np.array, torch.tensor])
def test_an_empty_row_is_the_masking_bug_on_both_backends(make):
    np.testing.assert_array_equal(np.asarray(v.valid_lengths(make([[1, 1], [1, 0]]))), [2, 1])
    with pytest.raises(ValueError, match=r"mask: expected at least one valid token in every "
                                         r"sequence \(row\), got none in row 1 \(1 empty"):
        v.valid_lengths(make([[1, 1], [0, 0]]))


def test_cast_result_refuses_what_does_not_fit_on_both_backends():
    words = "rewards: the advantages do not fit in"
    with pytest.raises(ValueError, match=words + " float16"):
        v.cast_result("rewards", "advantages", np.array([1e5]), np.float16)
    with pytest.raises(ValueError, match=words + " torch.float16"):
        v.cast_result("rewards", "advantages", torch.tensor([1e5]), torch.float16)
    assert v.cast_result("x", "y", torch.tensor([1.5]), torch.bfloat16).dtype == torch.bfloat16


def test_the_working_dtype_policy_of_each_backend():
    assert v.working_dtype(np.float32) == np.float64          # NumPy: exactness first
    assert v.working_dtype(torch.float32) == torch.float32     # torch: eager speed,
    assert v.working_dtype(torch.bfloat16) == torch.float32    # never below float32
    assert v.working_dtype(torch.float64) == torch.float64
    assert v.common_dtype(torch.bfloat16, torch.float16) == torch.float32
    assert v.common_dtype(np.float16, np.float32) == np.float32


def test_describe_and_same_device_speak_of_tensors():
    assert v.describe(torch.zeros(2, 3)) == "a 2-D torch.float32 tensor of shape (2, 3) on cpu"
    v.same_device("logp", torch.zeros(1), old_logp=torch.zeros(1), ref_logp=None)
    assert v.is_tensor(torch.zeros(1)) and not v.is_tensor(np.zeros(1))
