"""Hostile input across the public NumPy API: a clear error that names the argument, or a
documented right answer (issue 15).

The sweep feeds a table of hostile values (NaN, inf, None, a string, a ragged list, a 0-d
array, an empty array, bools, complex numbers, an object array, a torch tensor that requires
grad, a bfloat16 tensor) to every array argument of every public array function, one argument
at a time, the others valid. Each must either raise a ``ValueError`` / ``TypeError`` whose
message names that argument, or, where the package documents an answer (bools and ints are
read as float64; a CPU tensor is read as NumPy reads it, bfloat16 as ml_dtypes' bfloat16; a
building block lets NaN through as NumPy does), return exactly what the equivalent plain
array gives. The cases of the issue's list follow, one test each, with the answers worked by
hand. The fused losses and the command lines have their own tests (tests/perf, tests/rl).
"""

import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import grpo_lab as gl

torch = pytest.importorskip("torch")

# --- valid inputs: N = 2 sequences of T = 3 tokens; B = 1 prompt with G = 2 completions --------
L = np.log([[0.5, 0.25, 0.25], [0.3, 0.3, 0.4]])             # (N, T) logp
OLD, REF = L + 0.1, L - 0.1                                  # (N, T)
MASK = np.array([[1, 1, 0], [1, 1, 1]])                      # (N, T), one padded token
R23 = np.array([[1.0, 0.0, 2.0], [3.0, 1.0, 1.0]])           # (2, 3) rewards, 2 groups of 3
STEPS = np.array([[[1.0, 2.0], [3.0, 4.0]]])                 # (B, G, K) = (1, 2, 2)
STEP_MASK = np.array([[[1, 1], [1, 0]]])

# name: (function, valid keyword arguments, {array argument: its kind}); kinds: "float" (any
# real dtype), "mask" (0/1 or bools), "int" (token ids, counts: integer dtypes only).
K = gl.kl_theory
API = {
    "group_advantages": (gl.group_advantages, dict(rewards=R23), {"rewards": "float"}),
    "group_advantages_fast": (gl.group_advantages_fast, dict(rewards=R23), {"rewards": "float"}),
    "centred_deviations": (gl.centred_deviations, dict(x=R23, mask=MASK), {"x": "float", "mask": "mask"}),
    "std_from_deviations": (gl.std_from_deviations, dict(dev=R23 - R23.mean(1, keepdims=True)),
                            {"dev": "float"}),
    "power_of_two_rescale": (gl.power_of_two_rescale, dict(x=R23), {"x": "float"}),
    "scale_by_power_of_two": (gl.scale_by_power_of_two, dict(x=R23, k=3), {"x": "float"}),
    "divide_or_zero": (gl.divide_or_zero, dict(num=R23, den=np.array([[2.0], [0.0]])),
                       {"num": "float", "den": "float"}),
    "gae": (gl.gae, dict(rewards=R23, values=np.zeros((2, 4)), gamma=0.9, lam=0.9),
            {"rewards": "float", "values": "float"}),
    "surrogate_from_ratio": (gl.surrogate_from_ratio, dict(ratio=np.exp(L - OLD), adv=np.ones((2, 1))),
                             {"ratio": "float", "adv": "float"}),
    "clipped_surrogate_loss": (gl.clipped_surrogate_loss, dict(logp=L, old_logp=OLD, adv=np.array([1.0, -1.0])),
                               {"logp": "float", "old_logp": "float", "adv": "float"}),
    "surrogate_grad_logp": (gl.surrogate_grad_logp, dict(logp=L, old_logp=OLD, adv=np.array([1.0, -1.0])),
                            {"logp": "float", "old_logp": "float", "adv": "float"}),
    "sequence_ratio": (gl.sequence_ratio, dict(logp=L, old_logp=OLD, mask=MASK),
                       {"logp": "float", "old_logp": "float", "mask": "mask"}),
    "aggregation_weights": (gl.aggregation_weights, dict(mask=MASK, mode="dapo"), {"mask": "mask"}),
    "aggregate_loss": (gl.aggregate_loss, dict(per_token_loss=L, mask=MASK, mode="grpo"),
                       {"per_token_loss": "float", "mask": "mask"}),
    "grpo_loss": (gl.grpo_loss, dict(logp=L, old_logp=OLD, ref_logp=REF, adv=np.array([1.0, -1.0]),
                                     mask=MASK),
                  {"logp": "float", "old_logp": "float", "ref_logp": "float", "adv": "float",
                   "mask": "mask"}),
    "grpo_diagnostics": (gl.grpo_diagnostics, dict(logp=L, old_logp=OLD, ratio=np.exp(L - OLD),
                                                   adv=np.ones((2, 1)), mask=MASK),
                         {"logp": "float", "old_logp": "float", "ratio": "float", "adv": "float",
                          "mask": "mask"}),
    "masked_mean": (gl.masked_mean, dict(x=L, mask=MASK), {"x": "float", "mask": "mask"}),
    "kl_k1": (gl.kl_k1, dict(logp=L, ref_logp=REF), {"logp": "float", "ref_logp": "float"}),
    "kl_k2": (gl.kl_k2, dict(logp=L, ref_logp=REF), {"logp": "float", "ref_logp": "float"}),
    "kl_k3": (gl.kl_k3, dict(logp=L, ref_logp=REF), {"logp": "float", "ref_logp": "float"}),
    "kl_k3_plus": (gl.kl_k3_plus, dict(logp=L, ref_logp=REF), {"logp": "float", "ref_logp": "float"}),
    "kl_grad_logp": (gl.kl_grad_logp, dict(logp=L, ref_logp=REF), {"logp": "float", "ref_logp": "float"}),
    "kl_shaped_rewards": (gl.kl_shaped_rewards, dict(rewards=np.array([[1.0, 0.0]]), old_logp=OLD,
                                                     ref_logp=REF, mask=MASK, beta=0.1),
                          {"rewards": "float", "old_logp": "float", "ref_logp": "float",
                           "mask": "mask"}),
    "k3_series": (gl.k3_series, dict(d=L - REF), {"d": "float"}),
    "k3_from_log_ratio": (gl.k3_from_log_ratio, dict(d=L - REF), {"d": "float"}),
    "log_ratio": (gl.log_ratio, dict(logp=L, old_logp=OLD), {"logp": "float", "old_logp": "float"}),
    "logsumexp": (gl.logsumexp, dict(z=R23), {"z": "float"}),
    "log_softmax": (gl.log_softmax, dict(logits=R23), {"logits": "float"}),
    "token_logprobs": (gl.token_logprobs, dict(logits=R23[None], tokens=np.array([[0, 2]])),
                       {"logits": "float", "tokens": "int"}),
    "sequence_logprob_sum": (gl.sequence_logprob_sum, dict(logp=L, mask=MASK),
                             {"logp": "float", "mask": "mask"}),
    "sequence_logprob_mean": (gl.sequence_logprob_mean, dict(logp=L, mask=MASK),
                              {"logp": "float", "mask": "mask"}),
    "round_trip": (gl.round_trip, dict(x=R23, dtype="bfloat16"), {"x": "float"}),
    "rounded_matmul": (gl.rounded_matmul, dict(a=R23, b=R23.T, dtype="float16"),
                       {"a": "float", "b": "float"}),
    "process_advantages": (gl.process_advantages, dict(step_rewards=STEPS, step_mask=STEP_MASK),
                           {"step_rewards": "float", "step_mask": "mask"}),
    "steps_to_tokens": (gl.steps_to_tokens, dict(step_values=STEPS, step_lengths=np.array([[[1, 2], [2, 0]]])),
                        {"step_values": "float", "step_lengths": "int"}),
    "weighted_sum": (gl.weighted_sum, dict(rewards=np.stack([R23, R23]), weights=np.array([1.0, 0.5])),
                     {"rewards": "float", "weights": "float"}),
    "normalise_then_sum": (gl.normalise_then_sum, dict(rewards=np.stack([R23, R23 * 2]),
                                                       weights=np.array([1.0, 0.5])),
                           {"rewards": "float", "weights": "float"}),
    "overlong_penalty": (gl.overlong_penalty, dict(lengths=np.array([10, 18, 21]), max_len=20, cache_len=4),
                         {"lengths": "int"}),
    "kl_categorical": (K.kl_categorical, dict(logits=np.array([0.0, 1.0]), ref_logits=np.array([1.0, 0.0])),
                       {"logits": "float", "ref_logits": "float"}),
    "kl_categorical_grad": (K.kl_categorical_grad, dict(logits=np.array([0.0, 1.0]),
                                                        ref_logits=np.array([1.0, 0.0])),
                            {"logits": "float", "ref_logits": "float"}),
    "estimator_grad_table": (K.estimator_grad_table, dict(estimator=gl.kl_k3, logits=np.array([0.0, 1.0]),
                                                          ref_logits=np.array([1.0, 0.0])),
                             {"logits": "float", "ref_logits": "float"}),
    "kl_regularised_policy": (K.kl_regularised_policy, dict(rewards=np.array([1.0, 0.0]),
                                                            ref_logits=np.array([0.0, 0.0]), beta=0.5),
                              {"rewards": "float", "ref_logits": "float"}),
}

# The careful-numerics building blocks check only what is cheap: NaN and inf pass through them
# as through NumPy (numerics/stable.py's docstring; surrogate_from_ratio's check says it is a
# building block's); every other function refuses them.
BLOCKS = {"centred_deviations", "std_from_deviations", "power_of_two_rescale",
          "scale_by_power_of_two", "divide_or_zero", "k3_series", "k3_from_log_ratio",
          "log_ratio", "logsumexp", "masked_mean", "surrogate_from_ratio"}


def _ragged(v):
    """The valid value as nested lists, with one more row that is one entry short."""
    rows = np.asarray(v).tolist()
    if np.ndim(v) == 1:
        return [rows[0], rows[1:]]                         # a number beside a list
    return rows + [rows[0][:-1]]


def _with_first(v, value):
    out = np.array(v, dtype=np.float64)
    out.flat[0] = value
    return out


HOSTILE = {   # name: (make it from the valid value, does it have a documented answer?)
    "nan": (lambda v: _with_first(v, np.nan), "blocks"),
    "inf": (lambda v: _with_first(v, np.inf), "blocks"),
    "None": (lambda v: None, "never"),
    "string": (lambda v: "abc", "never"),
    "ragged": (_ragged, "never"),
    "0-d": (lambda v: np.asarray(v).ravel()[0].astype(np.float64), "maybe"),
    "empty": (lambda v: np.zeros((0,) + np.shape(v)[1:]), "maybe"),
    "bool": (lambda v: np.asarray(v) != 0, "maybe"),
    "complex": (lambda v: np.asarray(v).astype(np.complex128), "never"),
    "object": (lambda v: np.asarray(v).astype(object), "never"),
    "tensor-grad": (lambda v: torch.tensor(np.asarray(v, dtype=np.float64), requires_grad=True), "never"),
    "tensor-bf16": (lambda v: torch.tensor(np.asarray(v, dtype=np.float32)).to(torch.bfloat16), "maybe"),
}


def _plain(value):
    """The plain NumPy array a documented conversion gives (what the answer must equal)."""
    if torch.is_tensor(value):                                 # bfloat16, exactly
        return value.float().numpy().astype(ml_dtypes.bfloat16)
    return value


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and bool(
        np.all((a == b) | (np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))))


def _names(message: str, args) -> bool:
    """The message is about one of ``args``: "arg: ..." or a list of inputs "a, arg: ..."."""
    head = message.split(":")[0]
    return any(re.fullmatch(rf"[\w, ]*\b{arg}\b[\w, ]*", head) for arg in args)


# Arguments whose default is None: None is then the documented "no mask".
OPTIONAL = {("centred_deviations", "mask")}
# An empty or 0-d value changes the shape: the mismatch may be reported at the other argument
# of the pair (masked_mean(x=empty) says "mask: expected shape (0, 3) (the shape of x)").
SHAPE_KINDS = {"empty", "0-d"}


CASES = [(name, arg, kind) for name, (_, _, args) in API.items() for arg in args for kind in HOSTILE]


@pytest.mark.parametrize("name, arg, kind", CASES, ids=[f"{n}-{a}-{k}" for n, a, k in CASES])
def test_hostile_value_gets_a_named_error_or_the_documented_answer(name, arg, kind):
    fn, valid, args = API[name]
    make, answer = HOSTILE[kind]
    value = make(valid[arg])
    passes_nan = answer == "blocks" and name in BLOCKS   # inf - inf warns there, as in NumPy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if passes_nan else "error")   # else no RuntimeWarning
        try:
            got = fn(**{**valid, arg: value})
        except (TypeError, ValueError) as err:
            named = list(args) if kind in SHAPE_KINDS else [arg]
            assert _names(str(err), named), f"{name}({arg}={kind}) raised without naming {arg}: {err}"
            assert "inhomogeneous" not in str(err)
            return
        documented = answer == "maybe" or passes_nan or (kind == "None" and (name, arg) in OPTIONAL)
        assert documented, f"{name}({arg}={kind}) was accepted: {got!r}"
        expected = fn(**{**valid, arg: _plain(value)})
    assert _same(got, expected), f"{name}({arg}={kind}): {got!r} != {expected!r}"


def test_the_sweep_covers_every_public_array_function():
    """A new public function with an array argument must join the table above."""
    skip = {"show_source", "training_memory", "as_dtype",
            "unit_roundoff", "error_table", "accuracy_reward", "format_reward",
            "needs"}                     # takes module names, not arrays: tested below
    public = {n for n in gl.__all__ if callable(getattr(gl, n)) and not isinstance(getattr(gl, n), type)
              and not n.isupper() and n not in gl._MODULES}
    assert public - skip - set(API) == set()


def test_needs_names_what_is_missing_and_refuses_what_is_not_a_module_name():
    gl.needs("numpy")                                        # present: nothing happens
    with pytest.raises(SystemExit, match="^chapter x needs no_such_module_abc, .*requirements.txt"):
        gl.needs("numpy", "no_such_module_abc", chapter="chapter x")
    for bad in [(), (None,), ("",), (3,)]:
        with pytest.raises(TypeError, match="^modules:"):
            gl.needs(*bad)


# --- the issue's list, one test per item, answers worked by hand ------------------------------

def test_log_softmax_refuses_log_probs_past_the_result_dtype_instead_of_minus_inf():
    # float32 logits 3e38, -3e38: log p = [0, -6e38]; -6e38 is below float32's -3.4e38, so a
    # float32 result would be -inf (and NaN in the first logp - old_logp): refused, naming
    # logits and the dtype that holds it. In float64 it is the plain value.
    z = np.array([3e38, -3e38], dtype=np.float32)
    for fn in (gl.log_softmax, lambda z: gl.token_logprobs(z[None], [1])):
        with pytest.raises(ValueError, match=r"^logits: the log-probabilities do not fit in "
                                             r"float32 .*such as float64"):
            fn(z)
    got = gl.log_softmax(z.astype(np.float64))        # z is exact in float64: 3e38 rounded
    assert got.dtype == np.float64 and got[0] == 0.0
    assert got[1] == -2 * np.float64(np.float32(3e38))  # log(1 + e^-6e38) = 0 exactly
    # float64 1e308, -1e308: the gap itself is past float64's range; no float holds log p.
    with pytest.raises(ValueError, match=r"^logits: .*do not fit in float64.*no float is wider"):
        gl.log_softmax(np.array([1e308, -1e308]))
    # ... but the token that is there has its answer: log p(token 0) = 0, and the logsumexp
    # of such logits is 1e308 + log(1 + 0) = 1e308.
    assert gl.token_logprobs(np.array([[1e308, -1e308]]), [0]).tolist() == [0.0]
    assert gl.logsumexp(np.array([[1e308, -1e308]])).tolist() == [[1e308]]
    # Two equal huge logits and a third 1e308 below: -log 2, -log 2, -1e308 - log 2 = -1e308.
    got = gl.log_softmax(np.array([1e308, 1e308, 0.0]))
    assert got[0] == got[1] == -np.log(2.0) and got[2] == -1e308


def test_sequence_logprob_sum_refuses_a_sum_past_its_dtype_and_the_mean_still_fits():
    lp = np.array([[-3e38, -3e38]], dtype=np.float32)          # sum -6e38 < float32's -3.4e38
    with pytest.raises(ValueError, match=r"^logp: the sums over the tokens do not fit in "
                                         r"float32 .*such as float64"):
        gl.sequence_logprob_sum(lp, [[1, 1]])
    assert gl.sequence_logprob_sum(lp.astype(np.float64), [[1, 1]]).tolist() == [
        2 * float(np.float32(-3e38))]
    assert gl.sequence_logprob_sum(lp, [[1, 0]]).tolist() == [float(np.float32(-3e38))]  # padding
    with pytest.raises(ValueError, match=r"^logp: the sums .* float64.*no float is wider"):
        gl.sequence_logprob_sum(np.array([[-1e308, -1e308]]), [[1, 1]])
    # The mean of -1e308 and -1e308 is -1e308, although their sum is past float64's range.
    assert gl.sequence_logprob_mean(np.array([[-1e308, -1e308, 5.0]]), [[1, 1, 0]]).tolist() == [-1e308]
    assert gl.masked_mean(np.array([[1e308, 1e308], [1.0, 3.0]]), [[1, 1], [1, 1]], axis=-1).tolist() == [1e308, 2.0]
    assert float(gl.masked_mean(np.array([1.5e308, 1.5e308, 0.0]), [1, 1, 0])) == 1.5e308


def _stationary(pi, rewards, ref_logits, beta, direction):
    """The optimality condition of kl_regularised_policy's objective, as a relative residual.

    reverse: log pi - log pi_ref - r / beta is the same for every token;
    forward: r + beta pi_ref / pi is the same for every token (= lam).
    """
    ref_p = np.exp(gl.log_softmax(np.asarray(ref_logits, dtype=np.float64)))
    r = np.asarray(rewards, dtype=np.float64)
    if direction == "reverse":
        c = np.log(pi) - np.log(ref_p) - r / beta
    else:
        c = r + beta * ref_p / pi
    return float(np.ptp(c) / max(1.0, np.abs(c).max()))


def test_kl_regularised_policy_tiny_beta_forward_is_the_right_policy_not_nan():
    # rewards [1, 0], pi_ref uniform, beta = 1e-17: pi = beta/2 / (lam - r) with lam = 1 + t,
    # 0.5e-17 / t + 0.5e-17 / (1 + t) = 1, so t = 5e-18 (to 1e-17 relative) and
    # pi = [1 - 5e-18, 5e-18]: in float64 [1.0, 5e-18].
    pi = gl.kl_theory.kl_regularised_policy([1, 0], [0, 0], 1e-17, direction="forward")
    assert pi[0] == 1.0 and pi[1] == pytest.approx(5e-18, rel=1e-12)
    for beta in (1e-300, 1e-17, 1e-3, 1.0, 1e3, 1e300):
        for direction in ("reverse", "forward"):
            pi = gl.kl_theory.kl_regularised_policy([1.0, 0.0, -2.0], [0.0, 1.0, 0.0], beta,
                                                    direction=direction)
            assert np.isfinite(pi).all() and pi.sum() == pytest.approx(1.0, abs=1e-15)
            if 1.0 <= beta <= 1e3:                     # every probability away from 0
                assert _stationary(pi, [1.0, 0.0, -2.0], [0.0, 1.0, 0.0], beta, direction) < 1e-12
    # beta -> 0: all the mass on the best token; beta -> inf: pi -> pi_ref, in both directions.
    ref_p = np.exp(gl.log_softmax(np.array([0.0, 1.0, 0.0])))
    for direction in ("reverse", "forward"):
        small = gl.kl_theory.kl_regularised_policy([1.0, 0.0, -2.0], [0.0, 1.0, 0.0], 1e-300,
                                                   direction=direction)
        large = gl.kl_theory.kl_regularised_policy([1.0, 0.0, -2.0], [0.0, 1.0, 0.0], 1e300,
                                                   direction=direction)
        assert small.tolist()[0] == 1.0 and np.allclose(large, ref_p, rtol=1e-12)


def test_kl_regularised_policy_huge_rewards_give_the_answer_or_name_rewards():
    # Only r / beta matters: rewards [1e300, 0] with beta 1e300 is rewards [1, 0] with beta 1,
    # e / (1 + e) reverse, 1/sqrt(2) forward (the docstring's examples).
    for direction, first in (("reverse", np.e / (1 + np.e)), ("forward", 2 ** -0.5)):
        pi = gl.kl_theory.kl_regularised_policy([1e300, 0.0], [0.0, 0.0], 1e300, direction=direction)
        assert pi[0] == pytest.approx(first, rel=1e-14)
        pi = gl.kl_theory.kl_regularised_policy([1e300, 0.0], [0.0, 0.0], 1e-10, direction=direction)
        assert pi.tolist() == [1.0, 0.0] if direction == "reverse" else pi[0] == 1.0
    for args, name in ((([1e308, -1e308], [0.0, 0.0]), "rewards"),
                       (([1.0, 0.0], [1e308, -1e308]), "ref_logits")):
        with pytest.raises(ValueError, match=rf"^{name}: expected values less than 1.798e\+308 apart"):
            gl.kl_theory.kl_regularised_policy(*args, 1.0)
    with pytest.raises(ValueError, match=r"^ref_logits: expected values less than"):
        gl.kl_theory.kl_categorical([0.0, 1.0], [1e308, -1e308])


@pytest.mark.parametrize("call", [lambda: gl.round_trip([0.1], None), lambda: gl.as_dtype(None),
                                  lambda: gl.unit_roundoff(None), lambda: gl.as_dtype(True),
                                  lambda: gl.rounded_matmul([[1.0]], [[1.0]], None)])
def test_a_missing_dtype_is_refused_not_read_as_float64(call):
    with pytest.raises(TypeError, match=r"^dtype: expected one of float16, bfloat16, float32, "
                                        r"float64 .*got (NoneType None|bool True)"):
        call()


@pytest.mark.parametrize("flag", ["no", "False", 0, 1, None, 0.0, [True]])
@pytest.mark.parametrize("name", ["reward_model", "reference"])
def test_training_memory_flags_must_be_bools(name, flag):
    with pytest.raises(TypeError, match=rf"^{name}: expected True or False"):
        gl.training_memory("grpo", 10, **{name: flag})
    with_flag = gl.training_memory("grpo", 10, **{name: np.bool_(False)})
    assert name not in with_flag                     # NumPy's bool is a bool; the role is gone


@pytest.mark.parametrize("call, name", [
    (lambda: gl.group_advantages([[1.0, 2.0], [3.0]]), "rewards"),
    (lambda: gl.sequence_ratio(L, OLD, [[1, 1, 1], [1, 1]]), "mask"),
    (lambda: gl.grpo_loss(L, OLD, REF, np.array([1.0, -1.0]), [[1, 1, 1], [1, 1]]), "mask"),
    (lambda: gl.aggregation_weights([[1, 1], [1]], "grpo"), "mask"),
    (lambda: gl.token_logprobs(R23[None], [[0, 1], [2]]), "tokens"),
    (lambda: gl.steps_to_tokens(STEPS, [[[1, 2], [2]]]), "step_lengths"),
])
def test_a_ragged_list_is_named_with_its_row_lengths(call, name):
    with pytest.raises(ValueError, match=rf"^{name}: expected .* whose rows all have one length, "
                                         r"got a ragged list \(row lengths \["):
        call()


def test_a_torch_tensor_is_read_exactly_or_refused_by_name():
    r = torch.tensor([[1.0, 0.0, 2.0]], requires_grad=True)
    with pytest.raises(TypeError, match=r"^rewards: .*got a tensor that requires grad .*"
                                        r"grpo_lab.torch has the same functions.*rewards.detach"):
        gl.group_advantages(r)
    with pytest.raises(TypeError, match=r"^mask: .*got a tensor on meta"):
        gl.sequence_logprob_sum(L, torch.ones(2, 3, device="meta"))
    with pytest.raises(TypeError, match=r"^logits: .*float8_e4m3fn.*a dtype NumPy cannot hold"):
        gl.log_softmax(torch.zeros(2, 3).to(torch.float8_e4m3fn))
    # bfloat16 is read exactly, as ml_dtypes' bfloat16, and answers as that array does.
    bf = torch.tensor([[1.0, 0.0, 2.5, 3.0]]).to(torch.bfloat16)
    got = gl.group_advantages(bf)
    assert got.dtype == ml_dtypes.bfloat16
    assert _same(got, gl.group_advantages(np.array([[1.0, 0.0, 2.5, 3.0]], dtype=ml_dtypes.bfloat16)))
    assert _same(gl.group_advantages(r.detach()), gl.group_advantages(r.detach().numpy()))


SEEDED = [
    lambda seed: gl.group_stats.sample_rewards(2, 4, seed=seed),
    lambda seed: gl.group_stats.group_noise(4, n_groups=10, seed=seed),
    lambda seed: gl.kl_theory.gaussian_log_probs(1.0, 3, seed=seed),
    lambda seed: gl.book.ch03.kl_estimator_figure(n=10, seed=seed),
    lambda seed: gl.book.ch04.cancellation_errors(gl.group_advantages, "float32", [1.0],
                                                  n_groups=2, seed=seed),
    lambda seed: gl.hidden_string.Task.make(seed=seed),
    lambda seed: gl.hidden_string.train_toy(gl.hidden_string.ToyConfig(iterations=1), seed=seed),
    lambda seed: gl.bench.bench_advantages((2, 4), 1, seed=seed),
    lambda seed: __import__("grpo_lab.perf.baselines").perf.baselines.loss_inputs((2, 4), seed=seed),
    lambda seed: gl.task.AdditionTask(seed=seed),
    lambda seed: gl.train.TrainConfig(seed=seed),
]


@pytest.mark.parametrize("seed, exc", [("abc", TypeError), (1.5, TypeError), (True, TypeError),
                                       (None, TypeError), (-1, ValueError)])
@pytest.mark.parametrize("make", SEEDED, ids=["sample_rewards", "group_noise", "gaussian_log_probs",
                                              "ch03_figure", "ch04_cancellation", "toy_task",
                                              "train_toy", "bench_advantages", "loss_inputs",
                                              "AdditionTask", "TrainConfig"])
def test_every_seed_argument_is_checked_by_name(make, seed, exc):
    with pytest.raises(exc, match=r"^seed: expected an integer"):
        make(seed)


# --- the torch mirror: the same table, on tensors ---------------------------------------------

def _t(v):
    return torch.tensor(np.asarray(v, dtype=np.float64))


glt = pytest.importorskip("grpo_lab.torch")
TORCH_API = {
    "group_advantages": (glt.group_advantages, dict(rewards=_t(R23)), ["rewards"]),
    "kl_k1": (glt.kl_k1, dict(logp=_t(L), ref_logp=_t(REF)), ["logp", "ref_logp"]),
    "kl_k2": (glt.kl_k2, dict(logp=_t(L), ref_logp=_t(REF)), ["logp", "ref_logp"]),
    "kl_k3": (glt.kl_k3, dict(logp=_t(L), ref_logp=_t(REF)), ["logp", "ref_logp"]),
    "clipped_surrogate_loss": (glt.clipped_surrogate_loss,
                               dict(logp=_t(L), old_logp=_t(OLD), adv=_t([1.0, -1.0])),
                               ["logp", "old_logp", "adv"]),
    "sequence_ratio": (glt.sequence_ratio, dict(logp=_t(L), old_logp=_t(OLD), mask=_t(MASK)),
                       ["logp", "old_logp", "mask"]),
    "grpo_loss": (glt.grpo_loss, dict(logp=_t(L), old_logp=_t(OLD), ref_logp=_t(REF),
                                      adv=_t([1.0, -1.0]), mask=_t(MASK)),
                  ["logp", "old_logp", "ref_logp", "adv", "mask"]),
    "aggregate_loss": (glt.aggregate_loss, dict(per_token_loss=_t(L), mask=_t(MASK), mode="dapo"),
                       ["per_token_loss", "mask"]),
    "aggregation_weights": (glt.aggregation_weights, dict(mask=_t(MASK), mode="dr_grpo"), ["mask"]),
}
TORCH_HOSTILE = {   # name: (make it from the valid tensor, accepted with a documented answer?)
    "nan": (lambda t: t.clone().flatten().index_fill(0, torch.tensor([0]), float("nan")).reshape(t.shape), False),
    "inf": (lambda t: t.clone().flatten().index_fill(0, torch.tensor([0]), float("inf")).reshape(t.shape), False),
    "None": (lambda t: None, False),
    "string": (lambda t: "abc", False),
    "numpy": (lambda t: t.numpy(), False),
    "list": (lambda t: t.tolist(), False),
    "0-d": (lambda t: t.flatten()[0].clone(), False),
    "empty": (lambda t: t[:0], False),
    "complex": (lambda t: t.to(torch.complex128), False),
    "meta": (lambda t: t.to("meta"), False),
    "bool": (lambda t: t != 0, True),                   # read as float64 0/1
    "requires-grad": (lambda t: t.clone().requires_grad_(True), True),   # autograd, same values
}
TORCH_CASES = [(n, a, k) for n, (_, _, args) in TORCH_API.items() for a in args for k in TORCH_HOSTILE]


def _tensor_same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_tensor_same(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_tensor_same(a[k], b[k]) for k in a)
    if torch.is_tensor(a):
        return a.dtype == b.dtype and torch.equal(a.detach(), b.detach())
    return a == b


@pytest.mark.parametrize("name, arg, kind", TORCH_CASES, ids=[f"torch-{n}-{a}-{k}" for n, a, k in TORCH_CASES])
def test_hostile_tensor_gets_a_named_error_or_the_documented_answer(name, arg, kind):
    fn, valid, args = TORCH_API[name]
    make, accepted = TORCH_HOSTILE[kind]
    value = make(valid[arg])
    try:
        got = fn(**{**valid, arg: value})
    except (TypeError, ValueError) as err:
        named = args if kind in SHAPE_KINDS | {"meta"} else [arg]
        assert _names(str(err), named), f"{name}({arg}={kind}) raised without naming {arg}: {err}"
        return
    assert accepted, f"{name}({arg}={kind}) was accepted: {got!r}"
    expected = fn(**{**valid, arg: value.detach().to(torch.float64)})
    assert _tensor_same(got, expected), f"{name}({arg}={kind}): {got!r} != {expected!r}"


@pytest.mark.parametrize("call, words", [
    (lambda: K.kl_categorical_grad([0.0, 1.0], [1.0, 0.0], direction=None),
     "direction: expected one of 'reverse', 'forward', got None"),
    (lambda: K.kl_regularised_policy([0.0, 1.0], [1.0, 0.0], None), "beta: expected a real number"),
    (lambda: K.estimator_grad_table(gl.kl_k1, [0.0, 1.0], [1.0, 0.0], h=None), "h: expected a real"),
    (lambda: K.estimator_grad_table(lambda a, b: "x", [0.0, 1.0], [1.0, 0.0]),
     "estimator: expected it to return real numbers of the shape of its inputs, (2, 2)"),
    (lambda: K.estimator_grad_table(lambda a, b: a[0], [0.0, 1.0], [1.0, 0.0]),
     "estimator: expected it to return real numbers of the shape of its inputs, (2, 2)"),
    (lambda: K.gaussian_log_probs(1e200, 3), "mu: expected |mu| <= 1e+150"),
    (lambda: gl.error_table(gl.log_softmax, R23, dtypes=[None]), "dtypes: expected one of float16"),
    (lambda: gl.error_table(gl.log_softmax, R23, dtypes=["float8"]), "dtypes: expected one of float16"),
])
def test_theory_and_precision_options_are_named_too(call, words):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert str(info.value).startswith(words), str(info.value)


def test_a_list_of_tensors_that_require_grad_is_named():
    t = torch.tensor(1.0, requires_grad=True)
    with pytest.raises(TypeError, match=r"^rewards: expected .*got a list of length 1 that NumPy "
                                        r"cannot read \(Can't call numpy\(\) on Tensor"):
        gl.group_advantages([[t, t]])


SCALARS = {"nan": float("nan"), "inf": float("inf"), "None": None, "string": "abc", "bool": True,
           "array": np.array([1.0]), "list": [1], "negative": -1, "huge": 1e300}
SCALAR_CASES = [(name, p, kind) for name, (fn, _, args) in API.items()
                for p in __import__("inspect").signature(fn).parameters
                if p not in args and p != "estimator" for kind in SCALARS]


@pytest.mark.parametrize("name, option, kind", SCALAR_CASES,
                         ids=[f"{n}-{o}-{k}" for n, o, k in SCALAR_CASES])
def test_hostile_option_gets_a_named_error_or_a_finite_answer(name, option, kind):
    """The other arguments (eps, beta, ddof, mode, clamp, k, ...) against the same kind of
    table: refused by name, or accepted where the value is meaningful (a huge eps, a ``None``
    that means "default") with an answer free of NaN."""
    fn, valid, _ = API[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            got = fn(**{**valid, option: SCALARS[kind]})
        except (TypeError, ValueError) as err:
            assert _names(str(err), [option]), f"{name}({option}={kind}): {err}"
            return
    assert kind in ("bool", "negative", "huge", "None"), f"{name}({option}={kind}) accepted: {got!r}"
    assert not any(np.isnan(v).any() for v in _numbers(got)), f"{name}({option}={kind}): {got!r}"


def _numbers(x):
    """Every number in a result (arrays, floats, tuples and dicts of them) as float64 arrays."""
    if isinstance(x, dict):
        x = tuple(x.values())
    if isinstance(x, tuple):
        return [a for item in x for a in _numbers(item)]
    return [] if x is None else [np.asarray(x, dtype=np.float64)]


# --- issue 24: ints too large for a float, and reductions that overflow by their order ---------

HUGE_INTS = {"10**400": 10**400, "-10**400": -10**400}
_HUGE_CASES = (
    [(f"gl.{name}", fn, valid, p) for name, (fn, valid, args) in API.items()
     for p in __import__("inspect").signature(fn).parameters if p not in args and p != "estimator"]
    + [(f"glt.{name}", fn, valid, p) for name, (fn, valid, args) in TORCH_API.items()
       for p in __import__("inspect").signature(fn).parameters if p not in args]
    + [("TrainConfig", gl.train.TrainConfig, {}, f.name)
       for f in __import__("dataclasses").fields(gl.train.TrainConfig) if f.type in ("int", "float")]
    + [("sample_rewards", gl.group_stats.sample_rewards, dict(n_groups=2, G=4), p)
       for p in ("n_groups", "G", "pass_rate", "spread", "seed")]
    + [("group_noise", gl.group_stats.group_noise, dict(G=4, n_groups=10), p)
       for p in ("G", "pass_rate", "spread", "ddof", "n_groups", "seed")]
    + [("training_memory", gl.training_memory, dict(method="grpo", n_params=10), "n_params")]
    + [(f"seeded[{i}]", make, None, "seed") for i, make in enumerate(SEEDED)])
HUGE_CASES = [(label, fn, valid, p, kind) for label, fn, valid, p in _HUGE_CASES for kind in HUGE_INTS]


@pytest.mark.parametrize("label, fn, valid, option, kind", HUGE_CASES,
                         ids=[f"{c[0]}-{c[3]}-{c[4]}" for c in HUGE_CASES])
def test_an_int_too_large_for_a_float_is_refused_by_name(label, fn, valid, option, kind):
    """10**400 as beta, eps, kl_clamp, max_len or any other option: a ValueError (a TypeError
    where only a bool or a name is meant) naming the option, never an unnamed OverflowError."""
    value = HUGE_INTS[kind]
    with pytest.raises((TypeError, ValueError)) as info:
        fn(value) if valid is None else fn(**{**valid, option: value})
    assert _names(str(info.value), [option]), f"{label}({option}={kind}): {str(info.value)[:200]}"


@pytest.mark.parametrize("call, option", [
    (lambda v: gl.grpo_loss(L, OLD, REF, np.array([1.0, -1.0]), MASK, beta=v), "beta"),
    (lambda v: gl.group_advantages(R23, eps=v), "eps"),
    (lambda v: gl.grpo_loss(L, OLD, REF, np.array([1.0, -1.0]), MASK, kl_clamp=v), "kl_clamp"),
    (lambda v: gl.grpo_loss(L, OLD, REF, np.array([1.0, -1.0]), MASK, agg="dr_grpo", max_len=v),
     "max_len"),
    (lambda v: glt.grpo_loss(_t(L), _t(OLD), _t(REF), _t([1.0, -1.0]), _t(MASK), agg="dr_grpo",
                             max_len=v), "max_len"),
])
def test_the_issues_huge_ints_are_value_errors(call, option):
    with pytest.raises(ValueError, match=rf"^{option}: expected .*got an integer of about 401 digits"):
        call(10**400)


def test_weighted_sum_of_finite_rewards_is_the_sum_whenever_it_fits():
    """2 * 1e308 - 1 * 1e308 = 1e308 fits; summing the products as they come gave inf."""
    rewards = np.full((2, 1, 2), 1e308)                             # (K, B, G)
    assert gl.weighted_sum(rewards, [2.0, -1.0]).tolist() == [[1e308, 1e308]]
    assert gl.weighted_sum(np.stack([R23, R23]), [1e308, -1e308]).tolist() == [[0.0] * 3] * 2
    with pytest.raises(ValueError, match=r"^rewards, weights: expected weighted sums within "
                                         r"float64's range, got one past 1.8e308"):
        gl.weighted_sum(rewards, [1.0, 1.0])                       # 2e308: no float holds it


def test_normalise_then_sum_with_huge_weights_is_right_or_names_the_weights():
    """Only the weights' ratios matter once batch=True rescales: weights of 1e308 give the answer
    of weights of 1 (they overflowed, and the message blamed `rewards`); batch=False names them."""
    rewards = np.stack([R23, R23[:, ::-1] * 3])                    # (K, B, G) = (2, 2, 3)
    huge = gl.normalise_then_sum(rewards, [1e308, 1e308], eps=0.0)
    np.testing.assert_allclose(huge, gl.normalise_then_sum(rewards, [1.0, 1.0], eps=0.0),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gl.normalise_then_sum(rewards, [4e307, 4e307], batch=False),
                               gl.normalise_then_sum(rewards, [1.0, 1.0], batch=False) * 4e307,
                               rtol=1e-12)                         # fits: |A1 + A2| <= 2 sqrt(3)
    with pytest.raises(ValueError, match=r"^weights: expected weights whose sum of group-"):
        gl.normalise_then_sum(rewards, [1.7e308, 1.7e308], batch=False)


@pytest.mark.parametrize("dtype, big", [(torch.float64, 1.5e308), (torch.float32, 3e38)])
def test_the_torch_mirror_returns_a_loss_that_fits_as_numpy_does(dtype, big):
    """Every token's loss is `big`, so the loss is `big`: summing a row of them before weighing
    it overflowed to inf, and the mirror refused a loss NumPy returns."""
    lt = torch.full((2, 3), big, dtype=dtype)
    mask = torch.tensor(MASK)
    for mode in ("grpo", "dapo", "dr_grpo"):
        got = glt.aggregate_loss(lt, mask, mode)
        expected = gl.aggregate_loss(lt.numpy(), MASK, mode)
        assert got.dtype == dtype and float(got) == pytest.approx(float(expected), rel=1e-6)
    adv = torch.full((2,), -big / 2, dtype=dtype)                  # -A r = big / 2 at r = 1
    logp = torch.zeros(2, 3, dtype=dtype, requires_grad=True)
    loss, _ = glt.grpo_loss(logp, logp.detach(), None, adv, mask, beta=0.0, agg="dapo")
    np_loss, _ = gl.grpo_loss(np.zeros((2, 3)), np.zeros((2, 3)), None, adv.double().numpy(), MASK,
                              beta=0.0, agg="dapo")
    assert float(loss.detach()) == pytest.approx(float(np_loss), rel=1e-6)
    loss.backward()
    assert torch.isfinite(logp.grad).all()


def test_surrogate_from_ratio_warns_no_more_at_huge_advantages():
    """|A| near 1e300 with a ratio of e^20: the clipped side is right and quiet; where -A r
    itself passes float64 it is refused by name (no RuntimeWarning, no silent inf)."""
    ratio = np.array([[np.exp(20.0), 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = gl.surrogate_from_ratio(ratio, np.array([[1e300, 1e300]]))   # A > 0: clipped
        assert got.tolist() == [[-1.2e300, -1e300]]
        assert np.isfinite(gl.surrogate_from_ratio(ratio, np.array([[-1e300, -1e300]]),
                                                   dual_clip=3.0)).all()
        with pytest.raises(ValueError, match=r"^ratio, adv: expected a per-token loss -A r "
                                             r"within float64's range"):
            gl.surrogate_from_ratio(ratio, np.array([[-1e300, -1e300]]))
        with pytest.raises(ValueError, match=r"^logp, old_logp, adv: the per-token losses"):
            gl.clipped_surrogate_loss([[20.0]], [[0.0]], [-1e300])


@pytest.mark.parametrize("kl", ["k1", "k3", "k3+"])
def test_kl_grad_logp_computes_only_the_estimator_asked_for(kl):
    """A log-ratio of 1e200: k2's square (5e399) overflows; asking for k1 or k3 with a clamp
    computed it anyway, and its RuntimeWarning escaped."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grad = gl.kl_grad_logp([1e200, 0.5], [0.0, 0.0], kl, clamp=10.0)
    expected = {"k1": [0.0, 1.0], "k3": [0.0, 1 - np.exp(-0.5)], "k3+": [1e200, 0.5]}[kl]
    np.testing.assert_allclose(grad, expected, rtol=1e-15)


def test_kl_shaped_rewards_sums_estimates_that_fit_without_overflow():
    """Two tokens of k1 = 1e308 each, beta = 1e-3: the penalty 2e305 fits, the plain sum did not."""
    old = np.array([[1e308, 1e308], [0.0, 0.0]])
    got = gl.kl_shaped_rewards([[1.0, 0.0]], old, np.zeros((2, 2)), np.ones((2, 2)), beta=1e-3)
    np.testing.assert_allclose(got, [[1.0 - 2e305, 0.0]], rtol=1e-15)


# --- issue 37: the same sweeps over gl.master_weights ----------------------------------------

MW = gl.master_weights
W2, STEP2 = np.array([1.0, 0.5]), np.array([2.0**-7, -2.0**-9])     # (n,) weights and updates
GRADS = np.array([[1.0, -1e-3], [0.5, 2e-4]])                        # (K, n) = (2, 2)
MW_API = {
    "update_in": (MW.update_in, dict(w=W2, step=STEP2, dtype="bfloat16"), {"w": "float", "step": "float"}),
    "lost_update_fraction": (MW.lost_update_fraction, dict(w=W2, step=STEP2, dtype="bfloat16"),
                             {"w": "float", "step": "float"}),
    "adam_steps": (MW.adam_steps, dict(grads=GRADS, lr=1e-3), {"grads": "float"}),
    "master_weight_run": (MW.master_weight_run, dict(w0=W2, steps=GRADS * 1e-3), {"w0": "float",
                                                                                 "steps": "float"}),
    "flushed_fraction": (MW.flushed_fraction, dict(g=GRADS, dtype="float16"), {"g": "float"}),
    "scaled_gradient": (MW.scaled_gradient, dict(g=GRADS, scale=2.0**10), {"g": "float"}),
    "dynamic_loss_scaling": (MW.dynamic_loss_scaling, dict(grads=GRADS, growth_interval=1),
                             {"grads": "float"}),
}
MW_CASES = [(n, a, k) for n, (_, _, args) in MW_API.items() for a in args for k in HOSTILE]


def _fields(x):
    """A result as plain values: a dataclass (MasterWeightRun, DynamicScalerRun) as the tuple
    of its numbers (its dtype name left out)."""
    import dataclasses
    if not dataclasses.is_dataclass(x):
        return x
    return tuple(v for v in dataclasses.asdict(x).values() if not isinstance(v, str))


@pytest.mark.parametrize("name, arg, kind", MW_CASES, ids=[f"mw-{n}-{a}-{k}" for n, a, k in MW_CASES])
def test_master_weights_hostile_value_gets_a_named_error_or_the_documented_answer(name, arg, kind):
    fn, valid, args = MW_API[name]
    value = HOSTILE[kind][0](valid[arg])
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # no RuntimeWarning on any input
        try:
            got = fn(**{**valid, arg: value})
        except (TypeError, ValueError) as err:
            named = list(args) if kind in SHAPE_KINDS else [arg]
            assert _names(str(err), named), f"{name}({arg}={kind}) raised without naming {arg}: {err}"
            return
        assert HOSTILE[kind][1] == "maybe", f"{name}({arg}={kind}) was accepted: {got!r}"
        expected = fn(**{**valid, arg: _plain(value)})
    assert _same(_fields(got), _fields(expected)), f"{name}({arg}={kind}): {got!r} != {expected!r}"
    assert not any(np.isnan(v).any() for v in _numbers(_fields(got)) if v.dtype.kind == "f"
                   and name != "dynamic_loss_scaling")          # its 'flushed' is NaN when skipped


MW_SCALAR_CASES = [(name, p, kind) for name, (fn, _, args) in MW_API.items()
                   for p in __import__("inspect").signature(fn).parameters if p not in args
                   for kind in list(SCALARS) + ["tiny", "-0"]]
SCALARS_MORE = {**SCALARS, "tiny": 1e-300, "-0": -0.0}


@pytest.mark.parametrize("name, option, kind", MW_SCALAR_CASES,
                         ids=[f"mw-{n}-{o}-{k}" for n, o, k in MW_SCALAR_CASES])
def test_master_weights_hostile_option_gets_a_named_error_or_a_finite_answer(name, option, kind):
    fn, valid, _ = MW_API[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            got = fn(**{**valid, option: SCALARS_MORE[kind]})
        except (TypeError, ValueError) as err:
            assert _names(str(err), [option]), f"{name}({option}={kind}): {err}"
            return
    got = _fields(got)
    finite = [v for v in _numbers(got) if v.dtype.kind == "f"]
    if name == "dynamic_loss_scaling":
        finite = [finite[0], finite[3]]                       # scales, final_scale
    if name == "scaled_gradient":                             # inf marks the documented overflow
        finite = [np.where(np.isinf(v), 0.0, v) for v in finite]
    assert all(np.isfinite(v).all() for v in finite), f"{name}({option}={kind}): {got!r}"
    assert not any(np.signbit(v[v == 0]).any() for v in finite), f"{name}({option}={kind}): -0"


def test_master_weights_hostile_sweep_covers_every_public_function():
    public = {n for n in MW.__all__ if callable(getattr(MW, n)) and not isinstance(getattr(MW, n), type)}
    assert public == set(MW_API)
