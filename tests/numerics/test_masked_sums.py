"""Issue 37, item 5: a mean over the valid tokens, and a masked sum over a constant.

``gl.masked_mean`` of a row with no valid entry has no value: the book refuses it by name
(a ``ValueError`` naming ``mask`` and the row), where it used to return 0/0 with a
``RuntimeWarning``. ``glt.masked_normalize`` (Stanford CS336's, used by an SFT micro-batch
step) divides a masked sum by any positive constant and is defined on every row, an empty one
included (0). Dr. GRPO's normaliser keeps ``max_len >= T`` (the generation budget; see
``glt.aggregate_loss``), and is masked_normalize with the constant N * max_len.
"""

import warnings

import numpy as np
import pytest

import grpo_lab as gl

torch = pytest.importorskip("torch")
glt = pytest.importorskip("grpo_lab.torch")


# --- masked_mean: an empty row is refused, quietly ---------------------------------------------

@pytest.mark.parametrize("mask, axis, words", [
    ([[1, 0, 0], [0, 0, 0]], -1, r"got none in row 1 \(1 empty row\(s\) in all\)"),
    ([[0, 0, 0], [0, 0, 0]], -1, r"got none in row 0 \(2 empty row\(s\) in all\)"),
    ([[0, 0, 0], [0, 0, 0]], None, r"expected at least one True entry, got none"),
    ([[0, 0, 0], [0, 0, 0]], 1, r"got none in row 0"),
])
def test_masked_mean_of_a_row_without_a_valid_entry_is_a_named_error_not_a_warning(mask, axis, words):
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # a RuntimeWarning would fail here first
        with pytest.raises(ValueError, match=rf"^mask: .*{words}.*0/0 and has no value"):
            gl.masked_mean(np.ones((2, 3)), mask, axis=axis)


def test_masked_mean_names_the_row_of_a_3d_batch_and_still_takes_a_partly_empty_array():
    mask = np.ones((2, 2, 3), dtype=bool)
    mask[1, 0] = False
    with pytest.raises(ValueError, match=r"^mask: .*got none in row \(1, 0\)"):
        gl.masked_mean(np.ones((2, 2, 3)), mask, axis=-1)
    # over every entry, an empty row does not matter: the mean of the three 1s and one 5 is 2
    x = np.array([[1.0, 1.0], [1.0, 5.0], [7.0, 7.0]])
    assert gl.masked_mean(x, [[1, 1], [1, 1], [0, 0]]) == 2.0


# --- masked_normalize: any positive constant, every row defined ------------------------------

def test_masked_normalize_by_hand():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # masked sums: rows 1 + 2 = 3 and 4; columns 5, 2, 0; all 7
    assert glt.masked_normalize(x, mask, 2.0).item() == 3.5
    assert glt.masked_normalize(x, mask, 2.0, dim=-1).tolist() == [1.5, 2.0]
    assert glt.masked_normalize(x, mask, 0.5, dim=0).tolist() == [10.0, 4.0, 0.0]
    assert glt.masked_normalize(x, mask.bool(), 7).item() == 1.0          # an int constant
    # an empty row sums to 0: 0 / c, quietly
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert glt.masked_normalize(x, torch.zeros(2, 3), 4.0, dim=1).tolist() == [0.0, 0.0]


def test_masked_normalize_keeps_padding_out_whatever_it_holds_and_keeps_autograd():
    x = torch.tensor([[1.0, 3.0, 1e38]], requires_grad=True)          # huge padding
    out = glt.masked_normalize(x, torch.tensor([[1, 1, 0]]), 4.0)
    out.backward()
    assert out.item() == 1.0 and x.grad.tolist() == [[0.25, 0.25, 0.0]]


def test_masked_normalize_is_dr_grpo_with_the_constant_made_free():
    rng = np.random.default_rng(0)
    lt = torch.from_numpy(rng.normal(size=(4, 6)))
    mask = torch.from_numpy(rng.random((4, 6)) < 0.7)
    mask[:, 0] = True                                                 # aggregate_loss: a token per row
    for max_len in (6, 9, 4096):
        expected = glt.aggregate_loss(lt, mask, "dr_grpo", max_len=max_len)
        got = glt.masked_normalize(lt, mask, 4 * max_len)
        assert got.dtype == torch.float64
        assert float(got) == pytest.approx(float(expected), rel=1e-14)
    # the budget may not be below T; the free constant may be anything > 0
    with pytest.raises(ValueError, match=r"^max_len: expected an integer in \[6, inf\]"):
        glt.aggregate_loss(lt, mask, "dr_grpo", max_len=5)
    assert float(glt.masked_normalize(lt, mask, 0.25)) == pytest.approx(
        4 * float((lt * mask).sum()), rel=1e-14)


def test_masked_normalize_with_a_constant_float32_cannot_hold_nor_invert():
    one = torch.ones(1)
    # 1e-30 / 1e-40: c is a float32 subnormal and 1/c past its range, the quotient 1e10 fits
    assert glt.masked_normalize(torch.tensor([1e-30]), one, 1e-40).item() == pytest.approx(1e10, rel=1e-6)
    x64 = torch.tensor([3.0], dtype=torch.float64)
    assert glt.masked_normalize(x64, one, 1e300).item() == pytest.approx(3e-300, rel=1e-15)
    with pytest.raises(ValueError, match=r"^x, normalize_constant: the normalized sums do not "
                                         r"fit in torch.float32"):
        glt.masked_normalize(one, one, 1e-300)                          # 1e300: past float32
    # four tokens of 3e38 sum past float32's range; over 8 the answer 1.5e38 fits
    assert glt.masked_normalize(torch.full((4,), 3e38), torch.ones(4), 8.0).item() == \
        pytest.approx(1.5e38, rel=1e-6)


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(normalize_constant=0.0), ValueError, r"^normalize_constant: expected a number > 0.0"),
    (dict(normalize_constant=-1.0), ValueError, r"^normalize_constant: expected a number > 0.0"),
    (dict(normalize_constant=float("inf")), ValueError, r"^normalize_constant: expected a finite"),
    (dict(normalize_constant=float("nan")), ValueError, r"^normalize_constant: expected a finite"),
    (dict(normalize_constant=True), TypeError, r"^normalize_constant: expected a real number"),
    (dict(normalize_constant="2"), TypeError, r"^normalize_constant: expected a real number"),
    (dict(normalize_constant=10**400), ValueError, r"^normalize_constant: expected a finite"),
    (dict(dim=2), ValueError, r"^dim: expected an integer in \[-2, 1\]"),
    (dict(dim=-3), ValueError, r"^dim: expected an integer in \[-2, 1\]"),
    (dict(dim=1.0), TypeError, r"^dim: expected an integer"),
    (dict(dim=True), TypeError, r"^dim: expected an integer"),
    (dict(x=np.ones((2, 3))), TypeError, r"^x: expected a torch.Tensor"),
    (dict(x=torch.ones(2, 3, dtype=torch.complex64)), TypeError, r"^x: expected a real numeric"),
    (dict(x=torch.tensor([[1.0, float("nan"), 0.0], [0.0, 0.0, 0.0]])), ValueError,
     r"^x: expected finite values"),
    (dict(mask=torch.ones(3)), ValueError, r"^mask: expected shape \(2, 3\)"),
    (dict(mask=torch.full((2, 3), 0.5)), ValueError, r"^mask: expected only 0 and 1"),
    (dict(mask=None), TypeError, r"^mask: expected a torch.Tensor mask"),
    (dict(mask=torch.ones(2, 3, device="meta")), ValueError, r"^mask: expected a tensor with values"),
])
def test_masked_normalize_refuses_bad_input_by_name(kwargs, exc, words):
    valid = dict(x=torch.ones(2, 3), mask=torch.ones(2, 3), normalize_constant=2.0, dim=None)
    with pytest.raises(exc, match=words):
        glt.masked_normalize(**{**valid, **kwargs})
