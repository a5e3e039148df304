"""Chapter 6b's drill checkers on what the catalogue alone does not pin down (issue 40, item 6;
issue 36, the drill-2 erratum): the entropy's -inf logit, its reference and bounds; the dtype the
statements fix; a float where the entropy statement allows one; the causes the checkers name
from evidence outside the usual mistakes (an eps in a log, log(cap) in float32, an optimizer
step, a sum over the wrong axis), each shown where it holds and not where it does not."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.drills import ch06b_real_model as ch6b
from grpo_lab.drills import harness
from grpo_lab.drills.cases import log_softmax_error
from tests.drills.catalogue import CATALOGUE
from tests.drills.catalogue import ch06b_real_model as cat

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def short_time_limit(monkeypatch):
    monkeypatch.setattr(harness, "TIME_LIMIT_S", 2.0)


def said(checker, fn) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        getattr(gl.drills, checker)(fn)
    return buffer.getvalue().strip()


def _masked_case():
    return next(c for c in ch6b._ent_cases() if c.where == ch6b.MASKED_LOGIT_CASE)


# --- the entropy and the -inf logit ------------------------------------------------------------

def test_the_masked_logit_case_holds_minus_inf_and_a_position_of_entropy_zero():
    case = _masked_case()
    z, mask = case.inputs["logits"], case.inputs["mask"]
    assert np.isneginf(z[..., [1, 4]]).all()                       # masked everywhere
    assert np.isfinite(z).any(-1).all()                            # one finite logit at least
    assert ch6b._token_entropy(z)[0, 1] == 0.0                     # the single finite logit
    assert np.isfinite(case.expected) and 0 < case.expected < np.log(z.shape[-1])
    # the reference equals torch's xlogy form and its Categorical entropy on these logits
    t = torch.from_numpy(z)
    p = t.softmax(-1)
    H = -torch.xlogy(p, p).sum(-1)
    assert torch.allclose(H, torch.from_numpy(ch6b._token_entropy(z)), rtol=0, atol=1e-14)
    cat_H = torch.distributions.Categorical(logits=t).entropy()
    assert torch.allclose(cat_H, H, rtol=0, atol=1e-14)


def test_the_bounds_stay_finite_with_minus_inf_logits_and_equal_the_old_ones_without():
    case = _masked_case()
    assert np.isfinite(case.scale) and np.isfinite(case.bound) and case.bound > 0
    bound = ch6b._entropy_error(case.inputs["logits"])
    assert np.isfinite(bound).all() and (bound > 0).all()
    # on finite logits the masked-logit-safe bound is the former one, term for term
    z = np.random.default_rng(0).normal(size=(2, 3, 5)) * 3
    lp = ch6b._log_softmax(z)
    p, top, V = np.exp(lp), np.abs(z).max(-1), z.shape[-1]
    E = log_softmax_error(z)
    lse_error = (V + 3) * (top + np.log(V) + 2)
    old = np.maximum((p * E * (np.abs(lp) + 1)).sum(-1),
                     lse_error * (1 + (p * np.abs(z)).sum(-1)) + (V + 2) * 2 * (top + np.log(V)
                                                                             + 1))
    np.testing.assert_allclose(ch6b._entropy_error(z), old, rtol=1e-12)


def test_trl_1_16_entropy_on_its_torch_path_is_the_form_that_gives_nan_at_a_masked_logit():
    """The hint's "0 * -inf = NaN at a masked logit" is what TRL 1.16.0's entropy_from_logits
    gives on its torch path (trl/trainer/utils.py:638-639), and what the old solution gave."""
    trl_utils = pytest.importorskip("trl.trainer.utils")
    import trl
    if trl.__version__ == "1.16.0":
        lines = Path(trl_utils.__file__).read_text().splitlines()
        assert "F.log_softmax(chunk, dim=-1)" in lines[637]
        assert "-(torch.exp(logps) * logps).sum(-1)" in lines[638]
    z = torch.tensor([[0.0, -float("inf"), 1.0]])                  # a CPU tensor: torch path
    assert torch.isnan(trl_utils.entropy_from_logits(z)).all()
    assert torch.isnan(cat._ent_log_softmax_exp(z[None], torch.ones(1, 1, dtype=bool)))
    assert torch.isfinite(cat._ent_right(z[None], torch.ones(1, 1, dtype=bool)))


def test_the_old_solution_fails_only_on_the_masked_logit_case_and_is_told_why():
    out = said("check_masked_entropy", cat._ent_log_softmax_exp)
    assert out.startswith(f"NOT YET: on {ch6b.MASKED_LOGIT_CASE} the entropy is nan")
    assert "0 * -inf = NaN at a masked logit" in out and "xlogy" in out


# --- dtypes the statements fix, and the float the entropy statement allows --------------------

@pytest.mark.parametrize("checker, right, narrowed", [
    ("check_completion_logprobs", cat._lp_right,
     lambda f: lambda z, ids, P, e: f(z, ids, P, e).float()),
    ("check_masked_entropy", cat._ent_right, lambda f: lambda z, m: f(z, m).float()),
    ("check_sequence_is_weight", cat._is_right, lambda f: lambda o, s, m, c: f(o, s, m, c).float()),
])
def test_a_float32_result_for_float64_inputs_is_refused_naming_the_dtype(checker, right,
                                                                          narrowed):
    assert getattr(gl.drills, checker)(right, verbose=False)
    out = said(checker, narrowed(right))
    assert out.startswith("NOT YET: on the worked example your function returned float32 for "
                          "float64"), out
    assert "dtype" in out


def test_a_wider_result_for_float32_inputs_is_accepted():
    """The float64 answer to float32 logits is exact enough: only narrower is refused."""
    assert gl.drills.check_completion_logprobs(cat._lp_float64, verbose=False)
    assert gl.drills.check_masked_entropy(cat._ent_float64, verbose=False)


def test_the_entropy_accepts_a_python_float_read_in_the_logits_dtype():
    assert gl.drills.check_masked_entropy(cat._ent_item, verbose=False)
    assert gl.drills.check_masked_entropy(lambda z, m: float(cat._ent_right(z, m)),
                                          verbose=False)
    # a float from a float32 evaluation of float64 logits is still float32's digits: refused
    out = said("check_masked_entropy", lambda z, m: cat._ent_right(z.float(), m).item())
    assert out.startswith("NOT YET: on the worked example the value is"), out
    assert "is within what float32 rounding gives here" in out


def test_the_advice_to_return_float32_is_dropped_where_the_inputs_are_float64():
    """grading's note offers "return the float32 result as float32"; these drills refuse that
    for float64 inputs, so the note says the drill asks for the inputs' dtype instead."""
    grading_source = (ROOT / "grpo_lab/drills/grading.py").read_text()
    assert ch6b.KEEP_FLOAT32.removeprefix(", ").split(",")[0] in grading_source
    out = said("check_masked_entropy", lambda z, m: cat._ent_right(z.float(), m.float()).double())
    assert "return the float32 result as float32" not in out
    assert "the drill asks for the logits' dtype, float64 here" in out


# --- causes named from evidence outside the usual mistakes -------------------------------------

@pytest.mark.parametrize("eps", [1e-8, 1e-10, 1e-12])
def test_an_eps_in_the_entropys_log_is_named_with_its_eps(eps):
    out = said("check_masked_entropy", cat._ent_eps(eps))
    assert f"log(p + {eps:g})" in out and "loses digits" not in out, out


def test_an_eps_outside_the_usual_ones_is_not_named_as_one():
    """log(p + 3e-9): no usual eps matches at float64, so no eps is named (the verdict says
    the difference only)."""
    out = said("check_masked_entropy", cat._ent_eps(3e-9))
    assert out.startswith("NOT YET:") and "log(p + " not in out, out


def test_float32_log_cap_is_named_and_a_right_cap_is_not():
    out = said("check_sequence_is_weight", cat._is_float32_log_cap)
    assert "log(cap) rounded to float32" in out and "float64 step" not in out, out
    assert gl.drills.check_sequence_is_weight(cat._is_log_space, verbose=False)
    case = next(iter(ch6b._is_cases()))
    assert ch6b._float32_log_cap(case, harness.Answer(case.expected, "float64")) is None


def test_the_wrong_axis_note_names_the_vocabulary_and_the_positions():
    out = said("check_masked_entropy", cat._ent_wrong_axis_sum)
    N, T, V = 2, 3, 4                                             # the worked example's
    assert f"V = {V}, the vocabulary, and T = {T}, the positions" in out, out
    case = next(iter(ch6b._ent_cases()))
    assert tuple(case.args[0].shape) == (N, T, V)
    other = ("The size of tensor a (2) must match the size of tensor b (3) at non-singleton "
             "dimension 0")
    assert ch6b._ent_axis_note(other, case) == ""                 # N against T: not this


def test_an_optimizer_step_is_named_even_where_the_value_is_right():
    out = said("check_accumulated_gradient", cat._acc_with_step(each=False))
    assert "the weights changed during the call" in out and "an optimizer step" in out, out
    assert gl.drills.check_accumulated_gradient(cat._acc_right, verbose=False)


def test_the_catalogue_holds_issue_40s_classes_for_chapter_6b():
    def has(name, words):
        return any(words in w.mistake for w in CATALOGUE[name].wrongs)
    for name in ("completion_logprobs", "masked_entropy", "sequence_is_weight"):
        assert has(name, "float32 result") or has(name, "float32 buffer"), name
    assert has("accumulated_gradient", "SGD step")
    assert has("completion_logprobs", "logits[:, 1:] against input_ids[:, :-1]")
    assert has("sequence_is_weight", "log(cap) taken in float32")
    assert has("masked_entropy", "log(p + 1e-10)") and has("completion_logprobs", "1e-10")
    assert has("masked_entropy", "number of rows") and has("accumulated_gradient",
                                                            "number of rows")
    assert has("masked_entropy", "summed over the positions")
    assert has("completion_logprobs", "EOS cumsum over the whole row")
    assert has("masked_entropy", "NaN at a masked logit")
    assert cat._ent_item in CATALOGUE["masked_entropy"].rights
