"""A hint names a mistake only where the answer's output shows it (issue 30, class 6).

Every catalogued wrong answer is run through its checker while the test records what the
checker saw: each case, and the answer's output on it. Then, for each kind of claim a verdict
can make, a predicate on that output must hold: rows "never written" are exactly 0; an "-inf
from the log of an underflowed probability" is -inf where the exact value is finite and below
the log of the smallest normal float32; "exp overflowed" is a non-finite output on a case whose
inputs reach beyond exp's range; a "hard-coded length" is a size that no input has; a
difference "within float32 rounding" is the size float32 rounding gives; a float64 step that
"loses digits" is far below it... A verdict that makes such a claim on an output that does
not show it fails the test, whichever wrong answer it came from; so does a verdict whose words
blame a cause (overflow, underflow, a hard-coded length...) with none of these claims and no
usual mistake, so that a new hint cannot blame unchecked.
"""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest

import grpo_lab as gl
from grpo_lab.drills import grading, harness
from grpo_lab.drills.cases import UNIT_ROUNDOFF, tolerance
from tests.drills.catalogue import CATALOGUE

LOG_MAX32, LOG_TINY32 = float(np.log(np.finfo(np.float32).max)), float(np.log(np.finfo(
    np.float32).tiny))


@contextlib.contextmanager
def recording():
    """Record (case, answer) for every case the checker grades, and the arguments of every
    call it makes (by the case's name), while a checker runs."""
    seen, calls = [], {}
    wide_enough, call, matching = grading.wide_enough, grading.call, grading.matching_mistakes

    def spy_wide_enough(answer, case):
        seen.append((case, answer))
        return wide_enough(answer, case)

    def spy_call(fn, *args, where, **kwargs):
        calls[where] = args
        return call(fn, *args, where=where, **kwargs)
    def spy_matching(mistakes, *args, **kwargs):
        calls["mistakes"] = tuple(mistakes)
        return matching(mistakes, *args, **kwargs)
    grading.wide_enough, grading.call = spy_wide_enough, spy_call
    grading.matching_mistakes = spy_matching
    try:
        yield seen, calls
    finally:
        grading.wide_enough, grading.call = wide_enough, call
        grading.matching_mistakes = matching


def _judge(checker, fn):
    """The verdict, the (case, answer) it names (None for a call that gave no output) and
    the arguments of the call it names."""
    buffer = io.StringIO()
    with recording() as (seen, calls), contextlib.redirect_stdout(buffer):
        getattr(gl.drills, checker)(fn)
    said = buffer.getvalue().strip()
    named = [(c, a) for c, a in seen if said.startswith(f"NOT YET: on {c.where} ")]
    where = max((w for w in calls if w != "mistakes" and said.startswith(f"NOT YET: on {w} ")),
                key=len,
                default=None)
    return said, (named[-1] if named else None), calls.get(where), calls.get("mistakes", ())


def _reach(case) -> float:
    """How far the case's inputs reach on exp's axis: the largest |x| of a float input, of a
    difference of two same-shaped ones, and of such a difference summed along a row."""
    arrays = [np.asarray(v).astype(np.float64) for v in case.inputs.values()
              if isinstance(v, np.ndarray) and v.dtype.kind in "fV"]   # bfloat16 is "V"
    reach = [float(np.abs(a).max(initial=0.0)) for a in arrays]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            if a.shape == b.shape:
                reach += [float(np.abs(a - b).max(initial=0.0)),
                          float(np.abs((a - b).sum(-1)).max(initial=0.0))]
    return max(reach, default=0.0)


def _nonfinite_where_exact_is_finite(case, answer) -> bool:
    return bool((~np.isfinite(answer.values) & np.isfinite(case.expected)).any())


def _never_written(said, case, answer, args):
    first, last = map(int, re.search(r"\(rows (\d+) to (\d+);", said).groups())
    rows = answer.values[[first, last]]
    return bool((rows == 0).all() and (case.expected[[first, last]] != 0).any(-1).all())


def _underflowed_log(said, case, answer, args):
    minus = (answer.values == -np.inf) & np.isfinite(case.expected)
    return bool(minus.any() and (case.expected[minus] < LOG_TINY32).all())


def _overflowed(said, case, answer, args):
    return _nonfinite_where_exact_is_finite(case, answer) and _reach(case) > LOG_MAX32


def _zero_times_inf(said, case, answer, args):
    lowest = float(np.min(gl.log_softmax(case.inputs["logits"])))
    return bool(np.isnan(answer.values).any()) and lowest < LOG_TINY32


def _hard_coded_length(said, case, answer, args):
    alien = [int(n) for n in re.search(r"include ([\d, ]+), which no input has", said)[1]
             .split(",")]
    sizes = {int(n) for x in args for n in getattr(x, "shape", ())}
    return bool(alien) and not set(alien) & sizes


def _first_difference(said, case, answer):
    """The first entry graded wrong, at the precision the verdict says was graded: its
    difference, the tolerance there, its scale and float32's tolerance (k = 16, the largest a
    checker uses)."""
    graded = re.search(r"for (float\d+), the precision graded", said)
    grade = graded[1] if graded else "float32" if answer.dtype == "float32" else "float64"
    tol = tolerance(case, grade, k=2.0)                            # the smallest k in use
    diff = np.abs(answer.values - case.expected)
    bad = ~grading.close(answer.values, case.expected, tol)
    i = tuple(int(j) for j in np.argwhere(bad)[0]) if bad.ndim else ()
    scale = np.broadcast_to(np.abs(case.expected) if case.scale is None else np.abs(case.scale),
                            case.expected.shape)
    return float(diff[i]), float(tol[i]), float(scale[i]), float(tolerance(case, "float32")[i])


def _coarser_rounding(said, case, answer, args):
    """"within what <dtype> rounding gives here": the difference is that dtype's size."""
    coarser = re.search(r"is within what (\w+) rounding gives here", said)[1]
    diff, tol, scale, _ = _first_difference(said, case, answer)
    i_tol = float(np.max(tolerance(case, coarser)))
    return tol < diff <= i_tol and diff >= UNIT_ROUNDOFF[coarser] * scale / 64


def _float32_evaluated(said, case, answer, args):
    """"if a step ran in float32 ... that explains it", for a float64 answer: its output is
    within float32's tolerance of the formula evaluated in float32, on every entry."""
    f32 = grading.float32_evaluation(case)
    return bool(grading.close(answer.values, f32, tolerance(case, "float32")).all())


def _float32_refuted(said, case, answer, args):
    """"float32 does not explain it": a float64 answer whose difference is float32-sized, and
    which is not a float32 evaluation of the formula on this case, or is told so from another
    case run (checked by the checker; here, the size and the dtype)."""
    diff, tol, scale, tol32 = _first_difference(said, case, answer)
    return answer.dtype == "float64" and tol < diff <= 4 * tol32


def _loses_digits(said, case, answer, args):
    diff, tol, scale, _ = _first_difference(said, case, answer)
    return 8 * tol <= diff < UNIT_ROUNDOFF["float32"] * scale / 64


def _sixteen_bit_entry(said, case, answer):
    """The non-finite entry a 16-bit verdict names: (the answer's value, the exact value, the
    dtype's largest finite value)."""
    index = re.search(r"inf or NaN: (?:entry \[([\d, ]*)\]|the value) is", said)
    i = tuple(int(n) for n in index[1].split(",")) if index and index[1] else ()
    top = grading.RANGE_16[answer.dtype]
    return float(answer.values[i]), float(case.expected[i]), top


def _sixteen_bit_overflow(said, case, answer, args):
    """"stored in float16 it overflows": the exact value, in float64 from the same inputs, is
    beyond the dtype's range, and the answer's entry is not finite."""
    if answer.dtype not in ("float16", "bfloat16"):
        return False
    got, want, top = _sixteen_bit_entry(said, case, answer)
    return not np.isfinite(got) and abs(want) > top


def _sixteen_bit_in_range(said, case, answer, args):
    """"the result itself fits": the entry is not finite, its exact value is within range, and
    the kind named (NaN, or +-inf) is the entry's."""
    if answer.dtype not in ("float16", "bfloat16"):
        return False
    got, want, top = _sixteen_bit_entry(said, case, answer)
    kind = ("NaN is what" in said) == bool(np.isnan(got))
    return not np.isfinite(got) and abs(want) <= top and kind


def _sixteen_bit_exp_reach(said, case, answer, args):
    """"an input here is x, and exp(x) is beyond <dtype>'s range": an input has that size."""
    x = float(re.search(r"an input here is ([-+.e\d]+), and exp", said)[1])
    return (x > np.log(grading.RANGE_16[answer.dtype])
            and abs(_reach(case) - x) <= 1e-5 * x)


def _stored_error(case, answer):
    from grpo_lab.drills.cases import SCALAR_TYPE
    with np.errstate(all="ignore"):
        err = float(np.abs(answer.values - case.expected).max(initial=0.0))
        stored = float(np.abs(case.expected.astype(SCALAR_TYPE[answer.dtype]).astype(np.float64)
                              - case.expected).max(initial=0.0))
    return err, stored, float(tolerance(case, "float32").max(initial=0.0))


def _storing_alone(said, case, answer, args):
    err, stored, tol32 = _stored_error(case, answer)
    return answer.dtype in ("float16", "bfloat16") and err <= 2 * stored + tol32


def _computing_in_16_bits(said, case, answer, args):
    err, stored, tol32 = _stored_error(case, answer)
    return answer.dtype in ("float16", "bfloat16") and err > 2 * stored + tol32


def _float32_block_arithmetic(said, case, answer, args):
    from grpo_lab.drills.ch07_performance import _float32_advantages
    drift = float(np.abs(_float32_advantages(case.inputs["rewards"]) - case.expected).max())
    wide = np.abs(answer.values - case.expected)
    i = tuple(int(j) for j in np.argwhere(wide > 2 * 2.0**-24 * np.abs(case.expected))[0])
    return bool(wide[i] <= 4 * drift + 4 * 2.0**-24 * abs(case.expected[i]))


def _broadcast_sizes(said, case, answer, args):
    """A per-row quantity against (N, T): the exception's sizes are exactly N and T of the
    first 2-D input."""
    first = next(tuple(x.shape) for x in args if len(getattr(x, "shape", ())) >= 2)
    torch_sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b "
                            r"\((\d+)\)", said)
    if torch_sizes:
        sizes = {int(torch_sizes[1]), int(torch_sizes[2])}
    else:
        shapes = said.split("broadcast together with shapes", 1)[1].split("(", 3)[1:3]
        sizes = {int(n) for part in shapes for n in re.findall(r"\d+", part.split(")")[0])}
    return sizes - {1} == {first[0], first[-1]} and first[0] != first[-1]


def _a_little_more(said, case, answer, args):
    """"N times what <dtype> rounding explains ... a little more than rounding": the
    difference is above the graded tolerance and below 100 times it."""
    graded = re.search(r"times what (\w+) rounding explains", said)[1]
    diff, _, _, _ = _first_difference(said, case, answer)
    allowed = float(re.search(r"for this entry \(([-+.e\d]+)\)", said)[1])
    return allowed < diff < 100 * allowed and graded in UNIT_ROUNDOFF


def _named_group(said, case, answer):
    """The all-equal group a verdict names: (its outputs, its rewards, eps, entries summed)."""
    row = re.search(r"the all-equal group rewards\[(\d+)\]", said)
    if row:                                                        # chapter 1: one row
        b = int(row[1])
        return answer.values[b], case.inputs["rewards"][b], case.inputs["eps"], 1
    mask = case.inputs["mask"]                                     # chapter 8: the real steps
    return answer.values[mask], case.inputs["rewards"][mask], 1e-8, mask.shape[1]


def _group_nan(said, case, answer, args):
    values, _, _, _ = _named_group(said, case, answer)
    return bool(np.isnan(values).any())


def _group_rounding(said, case, answer, args):
    values, r, eps, terms = _named_group(said, case, answer)
    u = UNIT_ROUNDOFF.get(answer.dtype, UNIT_ROUNDOFF["float64"])
    size = np.abs(values).max() * eps
    return bool(0 < size <= 2 * r.size * terms * u * abs(r[0]))


def _beyond_range(said, case, answer, args):
    d = case.inputs["logp"].dtype
    top = 3.39e38 if d == np.dtype(gl.drills.ch04_precision.BF16) else float(np.finfo(d).max)
    i = int(re.search(r"sum (\d+) is", said)[1])
    return bool(abs(case.expected[i]) > top)


def _log_of_zero_sum(said, case, answer, args):
    i = int(re.search(r"sum (\d+) is", said)[1])
    return bool(answer.values[i] == -np.inf and np.isfinite(case.expected[i])
                and case.expected[i] < -103.3)


def _row_shift(said, case, answer, args):
    plus = answer.values == np.inf
    z = np.asarray(case.inputs["logits"], np.float64)
    rows = np.flatnonzero(plus.reshape(-1, z.shape[-1]).any(-1))
    flat = z.reshape(-1, z.shape[-1])
    return bool(rows.size) and bool((flat.max() - flat[rows].max(-1) > LOG_MAX32).all())


#: (kind, the words of the verdict that make the claim, the predicate on the output).
CLAIMS = [
    ("rows never written", "as rows never written", _never_written),
    ("the log of an underflowed probability",
     re.compile(r"-inf is the log of a softmax that underflowed|rounds to 0 and its log is "
                r"-inf|below the smallest normal float32 \(.*underflows to 0, and a log"),
     _underflowed_log),
    ("exp overflowed", re.compile(r"overflow(s|ed) to inf|overflowed \(|so the ratio "
                                  r"overflowed|exp of that sum overflows"), _overflowed),
    ("0 * -inf from an underflowed probability", "p * log(p) is then 0 * -inf", _zero_times_inf),
    ("a hard-coded length", "is a length hard-coded", _hard_coded_length),
    ("a coarser dtype's rounding", re.compile(r"is within what \w+ rounding gives here"),
     _coarser_rounding),
    ("a 16-bit overflow", re.compile(r"range \([\d.e+]+\), so stored in \w+ it overflows"),
     _sixteen_bit_overflow),
    ("a 16-bit inf or NaN within range", "so the result itself fits", _sixteen_bit_in_range),
    ("an input beyond a 16-bit exp's range", re.compile(r"an input here is [-+.e\d]+, and exp"),
     _sixteen_bit_exp_reach),
    ("storing in 16 bits alone", "from that rounding alone", _storing_alone),
    ("computing in 16 bits", "most of the error comes from computing in", _computing_in_16_bits),
    ("float32 block arithmetic", "so the block arithmetic ran in float32",
     _float32_block_arithmetic),
    ("a per-row quantity against (N, T)",
     re.compile(r"keep it \(B, 1\) with keepdims=True\)$|was a sum taken over the wrong "
                r"axis\?|broadcast it over the tokens as adv\[:, None\]\)$"), _broadcast_sizes),
    ("a float64 step losing digits", "a float64 step loses digits", _loses_digits),
    ("a float32 step in a float64 answer", "but if a step ran in float32", _float32_evaluated),
    ("float32 refuted", "so float32 does not explain it", _float32_refuted),
    ("an all-equal group's 0 / 0", "NaN here is 0 / 0", _group_nan),
    ("an all-equal group's mean a rounding off", "the mean came out a rounding away",
     _group_rounding),
    ("a sum beyond the dtype's range", "so a running sum kept in", _beyond_range),
    ("the log of an underflowed product", "-inf is the log of 0, and exp(", _log_of_zero_sum),
    ("a batch-wide shift", "+inf is what subtracting log(0) gives", _row_shift),
    ("a little more than rounding", "a little more than rounding, so look for a step that "
     "loses digits", _a_little_more),
]

#: Words that blame a cause. A verdict with any of them must make a claim this test checks
#: (above) or name a usual mistake, so that a new hint cannot blame unchecked.
BLAME = re.compile(r"overflow|underflow|beyond \w+'s range|a step on the way|hard-coded|"
                   r"never written|rounding gives here|ran in float|loses digits|computing in|"
                   r"the log of 0|log\(0\)")

#: Claims about an exception: the call's arguments are the evidence, there is no output.
CALL_KINDS = ("a hard-coded length", "a per-row quantity against (N, T)")
WRONGS = [(name, w) for name, d in CATALOGUE.items() for w in d.wrongs]


def _shows_mistake(mistake, case, answer) -> bool:
    """A named usual mistake: on the case the verdict names, the answer's output is that
    mistake's output (within float32's tolerance, looser than any grade), and the mistake's
    output is not the right one."""
    try:
        with np.errstate(all="ignore"):
            value = mistake.value(case)
        if value is None:
            return False
        value = np.broadcast_to(np.asarray(value, np.float64), case.expected.shape)
    except (ValueError, TypeError, IndexError, ZeroDivisionError):
        return False
    tol = tolerance(case, "float32")
    return bool(grading.close(answer.values, value, tol).all()
                and not grading.close(value, case.expected, tolerance(case, "float64", k=2.0))
                .all())


def _claims_of(said):
    return [(kind, check) for kind, words, check in CLAIMS
            if (words.search(said) if isinstance(words, re.Pattern) else words in said)]


@pytest.fixture(scope="module")
def verdicts():
    """Every catalogued wrong answer's verdict and what it was judged on (once, ~15 s)."""
    pytest.importorskip("torch")
    import torch  # noqa: F401  imported once here, never inside a time-limited call
    saved, found = harness.TIME_LIMIT_S, {}
    try:
        for name, w in WRONGS:
            harness.TIME_LIMIT_S = 0.5 if w.limit_s is None else w.limit_s
            found[(name, w.mistake)] = _judge(CATALOGUE[name].checker, w.fn)
    finally:
        harness.TIME_LIMIT_S = saved
    return found


def test_every_claim_a_verdict_makes_holds_on_the_answers_output(verdicts):
    checked, wrong = {}, []
    for (name, mistake), (said, judged, args, mistakes) in verdicts.items():
        for hint in {m.hint for m in mistakes if m.hint in said}:   # (several may share one)
            checked["a usual mistake"] = checked.get("a usual mistake", 0) + 1
            if judged is None or not any(_shows_mistake(m, *judged) for m in mistakes
                                         if m.hint == hint):
                wrong.append((name, mistake, "a usual mistake", "the output is not that "
                              "mistake's on the case named", said))
        if BLAME.search(said) and not _claims_of(said) and not any(
                m.hint in said for m in mistakes):
            wrong.append((name, mistake, "unchecked", "it blames a cause no predicate checks",
                          said))
        for kind, check in _claims_of(said):
            if judged is None and kind not in CALL_KINDS:
                wrong.append((name, mistake, kind, "no output was graded", said))
                continue
            case, answer = judged if judged is not None else (None, None)
            if args is None and kind in CALL_KINDS:
                wrong.append((name, mistake, kind, "no call recorded", said))
                continue
            ok = check(said, case, answer, args)
            checked[kind] = checked.get(kind, 0) + 1
            if not ok:
                wrong.append((name, mistake, kind, "the output does not show it", said))
    assert not wrong, "\n\n".join(" | ".join(w) for w in wrong)
    # the four classes of blame are all exercised by the catalogue, and more
    for kind in ("rows never written", "the log of an underflowed probability",
                 "exp overflowed", "a coarser dtype's rounding", "a float64 step losing digits",
                 "a 16-bit overflow", "a 16-bit inf or NaN within range",
                 "an input beyond a 16-bit exp's range", "a per-row quantity against (N, T)",
                 "a hard-coded length", "a float32 step in a float64 answer", "float32 refuted",
                 "the log of an underflowed product", "a batch-wide shift"):
        assert checked.get(kind, 0) >= 1, (kind, checked)
    assert checked["a usual mistake"] >= 100, checked
    assert sum(checked.values()) >= 150, checked


def _all_nan(*args, **kwargs):
    """A wrong answer whose output shows nothing of any cause: NaN everywhere, right shape."""
    first = args[0]
    shape = tuple(getattr(first, "shape", ()))
    return np.full(shape, np.nan)


@pytest.mark.parametrize("name", ["k3_loss_gradient", "log_softmax", "group_advantages",
                                  "clipped_surrogate", "process_advantages"])
def test_an_output_that_shows_no_cause_is_blamed_on_none(name, capsys):
    """NaN from the first case on, where nothing overflows or underflows: no hint may name
    overflow, underflow, float32 or a length, since the output shows none of them."""
    checker = getattr(gl.drills, CATALOGUE[name].checker)
    assert checker(_all_nan) is False
    said = capsys.readouterr().out
    kinds = [kind for kind, _ in _claims_of(said)]
    assert not kinds, (kinds, said)


def test_the_claims_predicates_can_fail():
    """Each predicate rejects an output that does not show its claim (a test that cannot fail
    proves nothing): zeros that are not there, a -inf where the exact value is moderate."""
    from grpo_lab.drills.cases import Case
    from grpo_lab.drills.harness import Answer
    case = Case("x", (np.zeros((2, 3)),), np.ones((2, 3)), inputs={"logits": np.zeros((2, 3))})
    ones = Answer(np.ones((2, 3)), "float64", None, ())
    assert not _never_written("(rows 0 to 1; row", case, ones, None)
    minus = Answer(np.array([[-np.inf, 1, 1], [1, 1, 1]]), "float64", None, ())
    assert not _underflowed_log("", case, minus, None)
    assert not _overflowed("", case, minus, None)                 # inputs are all 0
    assert not _hard_coded_length("include 3, which no input has", case, ones, case.args)
    # a float16 -inf whose exact value (1.0) is within range is no overflow, and one whose
    # exact value is beyond it is not "within range"; no input here reaches exp's range
    f16 = Answer(np.array([[-np.inf, 1, 1], [1, 1, 1]]), "float16", None, ())
    said = "inf or NaN: entry [0, 0] is -inf"
    assert not _sixteen_bit_overflow(said, case, f16, None)
    assert _sixteen_bit_in_range(said, case, f16, None)
    assert not _sixteen_bit_in_range(said + " NaN is what", case, f16, None)
    big = Case("x", (np.zeros((2, 3)),), np.full((2, 3), -1e5),
               inputs={"logits": np.zeros((2, 3))})
    assert not _sixteen_bit_in_range(said, big, f16, None)
    assert not _sixteen_bit_exp_reach("an input here is 12, and exp", case, f16, None)


# --- the format reward (chapter 5): each mechanism a verdict names, checked by calling the
# --- answer again on the completions the verdict gives as its evidence -----------------------

def _format_verdict(fn) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        gl.drills.check_format_reward(fn)
    return buffer.getvalue().strip()


def _reward(fn, text):
    try:
        return float(fn(text))
    except Exception:                                  # noqa: BLE001  no evidence either way
        return None


def _quoted_lists(said, where):
    """The completions a verdict lists after '<where> it accepts' and 'and refuses'."""
    import ast
    m = re.search(rf"{where} it accepts (.*?)(?:; |\) ?:|; gl\.)", said)
    if m is None:
        return None
    part = m[1]
    if part.startswith("none of "):
        ok, no = "", part.removeprefix("none of ")
    else:
        ok, _, no = part.partition(" and refuses ")

    def as_list(s):
        return list(ast.literal_eval(f"[{s}]")) if s else []
    return as_list(ok), as_list(no)


def _format_claims(fn, said, text):
    """Each mechanism the verdict names, and whether the answer's own rewards show it."""
    from grpo_lab.drills import ch05_rewards as ch5
    claims = []
    if "re.DOTALL" in said:
        multi = [t for _, t, e, _ in ch5.FORMAT_CASES if e == 1.0 and ch5._multi_line(t)]
        multi.append(ch5.MULTI_LINE_ANSWER)
        between = ch5.PROBE_BASE[0] + "\n" + ch5.PROBE_BASE[1]
        claims.append(("re.DOTALL",
                       all(_reward(fn, t) == 0.0 for t in multi)
                       and all(_reward(fn, ch5._blocks_flat(t)) == 1.0 for t in multi)
                       and _reward(fn, between) == 1.0
                       and all(gl.format_reward(t) == gl.format_reward(ch5._blocks_flat(t))
                               == 1.0 for t in multi + [between])))
    if "so the '<' itself is what it refuses" in said:
        plain = re.sub(r"<(?!/?(?:think|answer)>)", "less than", text)
        claims.append(("the '<' itself", _reward(fn, text) == 0.0 and _reward(fn, plain) == 1.0
                       and gl.format_reward(plain) == 1.0))
    for where, probes in (("between the blocks", lambda w: ch5.PROBE_BASE[0] + w
                           + ch5.PROBE_BASE[1]),
                          ("around the completion", lambda w: w + "".join(ch5.PROBE_BASE) + w)):
        lists = _quoted_lists(said, where)
        if lists is not None:
            ok, no = lists
            claims.append((f"whitespace {where}",
                           bool(no) and all(_reward(fn, probes(w)) == 1.0 for w in ok)
                           and all(_reward(fn, probes(w)) == 0.0 for w in no)
                           and all(gl.format_reward(probes(w)) == 1.0 for w in ok + no)))
    for kind, mirror in (("opening", ("a stray closing tag", "a stray </answer> at the end")),
                         ("closing", ("a lone extra <think>", "a lone extra <answer>"))):
        if f"hold the {kind} tags to one each" in said:
            texts = [t for n, t, _, _ in ch5.FORMAT_CASES if n in mirror]
            claims.append((f"{kind} tags unchecked", _reward(fn, text) == 1.0
                           and all(_reward(fn, t) == 0.0 for t in texts)
                           and all(t.startswith("</") != (kind == "opening")
                                   for t in _repeated_tags(text))))
    if "a length cap cuts real answers" in said:
        n = int(re.search(r"with a (\d+)-character thinking", said)[1])
        short = text[:7] + "7 + 5 is 12. " * 20 + text[text.index("</think>"):]
        claims.append(("a length cap", len(short) == n and _reward(fn, short) == 1.0
                       and _reward(fn, text) == 0.0 and gl.format_reward(short) == 1.0))
    return claims


def _repeated_tags(text):
    from grpo_lab.rl.rewards import TAGS
    return [t for t in TAGS if text.count(t) > 1]


#: Mechanisms the format checker never has evidence for: no verdict may name them.
UNSHOWN = re.compile(r"lazy|\.\*\?|\[\^<\]|IGNORECASE|\.lower\(\)|backtrack|swallows|"
                     r"re\.search finds")


def test_format_reward_hints_name_only_what_the_answers_rewards_show():
    """Every catalogued wrong format reward: the verdict names re.DOTALL, a refused '<', the
    whitespace it accepts and refuses, an unchecked kind of tag or a length cap only where the
    answer's own rewards on the completions the verdict gives show it (and gl.format_reward's
    agree); it never names a mechanism (a lazy .*?, [^<]*, re.IGNORECASE) no probe shows."""
    from grpo_lab.drills.ch05_rewards import FORMAT_CASES
    checked, wrong = {}, []
    for w in CATALOGUE["format_reward"].wrongs:
        said = _format_verdict(w.fn)
        case = next(((n, t) for n, t, _, _ in FORMAT_CASES if said.startswith(f"NOT YET: {n} (")),
                    None)
        if UNSHOWN.search(said):
            wrong.append((w.mistake, "an unshown mechanism", said))
        if case is None:
            continue
        for kind, ok in _format_claims(w.fn, said, case[1]):
            checked[kind] = checked.get(kind, 0) + 1
            if not ok:
                wrong.append((w.mistake, kind, said))
    assert not wrong, "\n\n".join(" | ".join(x) for x in wrong)
    for kind in ("re.DOTALL", "the '<' itself", "whitespace between the blocks",
                 "whitespace around the completion", "opening tags unchecked",
                 "closing tags unchecked", "a length cap"):
        assert checked.get(kind, 0) >= 1, (kind, checked)


def test_format_reward_names_re_dotall_only_on_its_evidence():
    """Three answers that refuse the multi-line <think> for three reasons: only the regex
    without re.DOTALL is told to pass re.DOTALL (before, all three were)."""
    from tests.drills.catalogue import ch05_rewards as cat
    no_dotall = cat._fmt_regex(r"<think>.*?</think>\s*<answer>.+?</answer>")
    assert "pass re.DOTALL" in _format_verdict(no_dotall)
    for other in (cat._fmt_no_newline_anywhere, cat._fmt_thinking_trimmed):
        said = _format_verdict(other)
        assert said.startswith("NOT YET: a multi-line <think>") and "DOTALL" not in said, said


def test_the_format_claims_can_fail():
    """The claim checks reject answers that do not show them: a right answer does not refuse
    multi-line blocks, and one that refuses every '<' still refuses it written out... """
    from grpo_lab.drills.ch05_rewards import FORMAT_CASES
    multi = next(t for n, t, _, _ in FORMAT_CASES if n == "a multi-line <think>")
    lt = next(t for n, t, _, _ in FORMAT_CASES if n == "a '<' inside the thinking")
    claims = dict(_format_claims(gl.format_reward, "pass re.DOTALL", multi))
    assert claims == {"re.DOTALL": False}
    assert dict(_format_claims(lambda s: 0.0, "so the '<' itself is what it refuses", lt)) == {
        "the '<' itself": False}
    said = "between the blocks it accepts ' ' and refuses '\\t'; gl."
    assert dict(_format_claims(gl.format_reward, said, multi)) == {
        "whitespace between the blocks": False}
