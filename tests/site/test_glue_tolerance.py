"""nbval's comparison of glued numbers (tests/nbval_strict.py): a float glued by a chapter is
current when it equals the stored one to 1e-9 relative (its last digits are the CPU's summation
order); text, ints and floats further off must still match exactly."""

import pytest

pytest.importorskip("nbval")

from nbformat import from_dict  # noqa: E402
from nbval.plugin import IPyNbCell  # noqa: E402

from tests import nbval_strict  # noqa: E402


def glued(name, text):
    return from_dict({"data": {nbval_strict.GLUE: text}, "output_type": "display_data",
                      "metadata": {"scrapbook": {"mime_prefix": "application/papermill.record/",
                                                 "name": name}}})


def printed(text):
    return from_dict({"output_type": "stream", "name": "stdout", "text": text})


class Parent:                      # what compare_outputs reads from the notebook item
    skip_compare = ("metadata", "traceback", "execution_count")
    sanitize_patterns = {}


class Cell:
    parent = Parent()
    colors = type("C", (), {k: "" for k in ("OKBLUE", "FAIL", "ENDC", "OKGREEN")})()
    compare_outputs = IPyNbCell.compare_outputs
    format_output_compare = staticmethod(lambda key, left, right: None)   # the report only
    sanitize = IPyNbCell.sanitize


@pytest.mark.parametrize("stored, fresh, same", [
    ("0.8795419188597773", "0.8795419188354221", True),    # seen: chapter 2 on another CPU
    ("3.17320284147494", "3.1732028414749456", True),      # seen: chapter 4
    ("0.8795419188597773", "0.8795419", False),            # 2e-8 relative: a real change
    ("0.88", "0.87", False),
    ("0.0", "1e-17", False),                               # relative only: 0 stays exact
    ("inf", "1.7976931348623157e+308", False),             # not finite: exact
    ("1e-8", "1.0000000001e-08", True),
    ("'chapter 2'", "'chapter 3'", False),                 # text: exact
    ("42", "43", False),
])
def test_a_glued_float_is_current_to_1e_9_relative(stored, fresh, same):
    assert Cell().compare_outputs([glued("x", fresh)], [glued("x", stored)]) is same


def test_only_the_same_name_settles_and_other_outputs_stay_exact():
    ref = [glued("a", "1.0"), glued("b", "2.0"),
           printed("0.5000000001\n")]
    assert Cell().compare_outputs([glued("a", "1.0000000000001"), glued("b", "2.0"),
                                   printed("0.5000000001\n")], ref)
    # printed text is compared as text, however close its number
    assert not Cell().compare_outputs([glued("a", "1.0"), glued("b", "2.0"),
                                       printed("0.5000000002\n")], ref)
    # a's value under b's name is not b's
    assert not Cell().compare_outputs([glued("b", "1.0"), glued("a", "2.0")],
                                      [glued("a", "1.0"), glued("b", "2.0000001")])


def test_the_fresh_outputs_are_not_changed_in_place():
    fresh = [glued("x", "0.8795419188354221")]
    nbval_strict.settle_glued_floats(fresh, [glued("x", "0.8795419188597773")])
    assert fresh[0]["data"][nbval_strict.GLUE] == "0.8795419188354221"
