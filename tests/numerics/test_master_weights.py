"""Chapter 4, pitfalls 6 and 7: each claim the chapter makes about bfloat16 updates, float32
master weights, float16 gradient underflow and loss scaling, worked by hand or against
PyTorch, and every bad input refused by name."""

import matplotlib

matplotlib.use("Agg")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import grpo_lab as gl  # noqa: E402

mw = gl.master_weights


# --- pitfall 6: an update that rounds to nothing ------------------------------------------------

def test_update_in_rounds_to_nearest_even_at_the_half_spacing():
    # bfloat16 at 1.0: spacing 2**-7 above, 2**-8 below. 2**-9 is under half the spacing:
    # lost. 2**-8 is the tie: rounds to even, 1.0. Just over it: 1 + 2**-7.
    # Below 1 the spacing is 2**-8: -2**-9 is that tie (1.0 is the even one), a little more
    # reaches 1 - 2**-8.
    got = mw.update_in([1.0] * 5, [2**-9, 2**-8, 2**-8 + 2**-16, -2**-9, -2**-9 - 2**-16],
                       "bfloat16")
    assert got.tolist() == [1.0, 1.0, 1.0 + 2**-7, 1.0, 1.0 - 2**-8]
    # float32 at 1.0 keeps 2**-9 exactly
    assert mw.update_in([1.0], [2**-9], "float32").tolist() == [1.0 + 2**-9]


def test_update_in_stores_the_weight_first_and_adds_in_float32():
    # 1 + 2**-10 is not a bfloat16: stored as 1.0; + 2**-7 gives 1 + 2**-7 exactly.
    assert mw.update_in([1 + 2**-10], [2**-7], "bfloat16").tolist() == [1 + 2**-7]
    # float16 has 11 bits: at 1024 its spacing is 1, so +0.4 vanishes and +0.6 rounds to 1025
    assert mw.update_in([1024.0, 1024.0], [0.4, 0.6], "float16").tolist() == [1024.0, 1025.0]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_an_update_below_half_u_always_vanishes_and_above_u_never(dtype):
    # The chapter's band: |step| / |w| < u/2 always lost, > u never, for weights anywhere in a
    # binade (log-uniform over [1e-3, 1]) and steps of either sign.
    rng = np.random.default_rng(3)
    w = np.exp(rng.uniform(np.log(1e-3), 0.0, size=4000)) * rng.choice([-1.0, 1.0], 4000)
    w = w.astype(gl.as_dtype(dtype)).astype(np.float64)
    u = gl.unit_roundoff(dtype)
    sign = rng.choice([-1.0, 1.0], w.size)
    assert mw.lost_update_fraction(w, 0.49 * u * np.abs(w) * sign, dtype) == 1.0
    assert mw.lost_update_fraction(w, 1.01 * u * np.abs(w) * sign, dtype) == 0.0
    between = mw.lost_update_fraction(w, 0.75 * u * np.abs(w) * sign, dtype)
    assert 0.05 < between < 0.95                   # in between, it depends on where w sits


def test_lost_update_fraction_counts_only_nonzero_updates():
    assert mw.lost_update_fraction([1.0, 1.0, 1.0], [0.0, 2**-9, 2**-6], "bfloat16") == 0.5
    assert mw.lost_update_fraction([1.0, 2.0], [0.0, 0.0], "bfloat16") == 0.0


def test_a_realistic_adam_step_is_lost_in_bfloat16_and_kept_in_float32():
    # The chapter's case: lr 1e-6, Adam's first step is -lr sign(g), weights ~ N(0, 0.02).
    # A weight keeps its update only if |w| < 1e-6 / (u/2) ~ 5e-4 in bfloat16: about 2%.
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.02, size=20000)
    step = mw.adam_steps(rng.normal(size=(1, w.size)), lr=1e-6)[0]
    assert np.allclose(np.abs(step), 1e-6, rtol=1e-6)
    lost_bf16 = mw.lost_update_fraction(w, step, "bfloat16")
    assert 0.95 < lost_bf16 < 0.99
    assert mw.lost_update_fraction(w, step, "float32") == 0.0
    assert mw.lost_update_fraction(w, step, "float16") < lost_bf16   # 3 more bits


def test_adam_steps_match_torch_adam():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    grads = rng.normal(size=(20, 5))
    p = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    before = []
    for g in grads:
        before.append(p.detach().clone().numpy())
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    moves = np.diff(np.vstack(before + [p.detach().numpy()]), axis=0)
    np.testing.assert_allclose(mw.adam_steps(grads, lr=1e-3), moves, rtol=1e-10, atol=1e-15)


def test_master_weight_run_by_hand():
    # 256 steps of 2**-10 on w = 1: bfloat16 alone never moves (2**-10 < 2**-8, the half
    # spacing); the float32 master adds each exactly and reaches 1.25; its copy is 1.25.
    run = mw.master_weight_run([1.0], np.full((256, 1), 2**-10), "bfloat16")
    assert run.low.tolist() == [1.0] and run.master.tolist() == [1.25]
    assert run.copy.tolist() == [1.25] and run.reference.tolist() == [1.25]
    assert run.moved("low") == 0.0 and run.moved("master") == 1.0
    assert run.distance["low"][-1] == 0.25 and run.distance["master"][-1] == 0.0
    assert run.distance["low"].shape == (256,)


def test_master_weights_track_the_float64_run_and_bfloat16_alone_does_not():
    rng = np.random.default_rng(0)
    n, K = 512, 300
    w0 = rng.normal(0, 0.02, size=n)
    steps = mw.adam_steps(rng.normal(size=n) + rng.normal(size=(K, n)), lr=1e-6)
    run = mw.master_weight_run(w0, steps, "bfloat16")
    moved = np.sqrt(np.mean((run.reference - run.start) ** 2))
    assert run.moved("low") < 0.05                      # bfloat16 alone: almost no movement
    assert abs(run.moved("master") - 1) < 1e-3          # float32: the whole movement
    assert run.distance["master"][-1] < 1e-3 * moved
    # the bfloat16 copy is off only by its own rounding, at most half a spacing, u |w|
    u = gl.unit_roundoff("bfloat16")
    assert np.all(np.abs(run.copy - run.master) <= u * np.abs(run.master) + 1e-45)
    assert run.distance["copy"][-1] < run.distance["low"][-1] / 5


# --- pitfall 7: gradients that underflow, and loss scaling --------------------------------------

def test_flushed_fraction_uses_float16s_smallest_subnormal():
    tiny = 2.0**-24                                    # float16's smallest subnormal
    g = [tiny, 0.51 * tiny, 0.5 * tiny, 0.49 * tiny, 1e-3, 0.0]
    # 0.51: rounds up to the subnormal; 0.5: the tie, to even (0); 0.49: to 0
    assert mw.flushed_fraction(g, "float16") == 2 / 5
    assert mw.flushed_fraction(g, "bfloat16") == 0.0   # float32's exponent range
    assert mw.flushed_fraction([1e-41, 1e-39], "bfloat16") == 0.5   # below 2**-133 it flushes
    assert mw.flushed_fraction([0.0, 0.0], "float16") == 0.0


def test_static_loss_scaling_recovers_small_gradients_and_overflows_large_ones():
    g = np.array([1e-8, 1e-4, 1.0])
    assert mw.scaled_gradient(g, 1.0).tolist()[0] == 0.0      # flushed without a scale
    got = mw.scaled_gradient(g, 2.0**14)                     # 1.6e-4: a normal float16
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, g, rtol=gl.unit_roundoff("float16"))
    over = mw.scaled_gradient(g, 2.0**16)                    # 1.0 * 65536 > 65504
    assert np.isinf(over[2]) and np.isfinite(over[:2]).all()
    # a power-of-two scale divides exactly: the result is the float16 value of S g over S
    S = 2.0**10
    expect = (S * g).astype(np.float16).astype(np.float32) / np.float32(S)
    assert mw.scaled_gradient(g, S).tolist() == expect.tolist()


def test_dynamic_scaler_halves_on_overflow_skips_and_grows_after_the_interval():
    # step 1 overflows (1.0 * 2**17), 2 too (2**16 > 65504), 3..5 fit at 2**15; growth after
    # 2 good steps: 2**16 at step 5, which overflows again.
    run = mw.dynamic_loss_scaling([[1.0]] * 5, init_scale=2.0**17, growth_interval=2)
    assert run.scales.tolist() == [2.0**17, 2.0**16, 2.0**15, 2.0**15, 2.0**16]
    assert run.skipped.tolist() == [True, True, False, False, True]
    assert run.final_scale == 2.0**15
    assert np.isnan(run.flushed[0]) and run.flushed[2] == 0.0


def test_dynamic_scaler_follows_torch_grad_scaler():
    """Backs chapter 4, pitfall 7: gl.master_weights.dynamic_loss_scaling applies the rule of
    torch.amp.GradScaler (skip and back off on an overflow, grow after growth_interval clean
    steps): both with their default init_scale, growth and backoff factors, growth_interval 5."""
    # The same overflow pattern through torch.amp.GradScaler gives the same scales.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    K = 60
    grads = 10.0 ** rng.normal(-4, 1, size=(K, 64))
    grads[[7, 30, 31]] *= 1e4                                 # three spikes
    run = mw.dynamic_loss_scaling(grads, growth_interval=5)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=5)
    scales = []
    for k in range(K):
        scales.append(scaler.get_scale())
        overflow = bool(run.skipped[k])
        opt.zero_grad()
        loss = p.sum() * (float("inf") if overflow else 1.0)  # an inf gradient where float16's was
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    assert scales == run.scales.tolist()
    assert run.skipped.sum() >= 3


def test_dynamic_scaling_keeps_gradients_that_no_scaling_flushes():
    rng = np.random.default_rng(0)
    grads = np.sign(rng.normal(size=(40, 2000))) * 10.0 ** rng.normal(-6, 1, size=(40, 2000))
    plain = np.mean([mw.flushed_fraction(g, "float16") for g in grads])
    run = mw.dynamic_loss_scaling(grads, growth_interval=10)
    assert plain > 0.03
    assert np.nanmean(run.flushed) < plain / 100


# --- bad inputs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("call, match", [
    (lambda: mw.update_in([1.0], [1.0, 2.0], "bfloat16"), "^step: "),
    (lambda: mw.update_in([np.nan], [1.0], "bfloat16"), "^w: expected finite"),
    (lambda: mw.update_in([1e6], [1.0], "float16"), "^w: expected weights that fit in float16"),
    (lambda: mw.update_in([1.0], [1.0], "float8"), "^dtype: "),
    (lambda: mw.lost_update_fraction([1.0], [np.inf], "bfloat16"), "^step: expected finite"),
    (lambda: mw.adam_steps([1.0, 2.0], lr=1e-6), "^grads: expected a 2-D"),
    (lambda: mw.adam_steps([[1.0]], lr=0.0), "^lr: "),
    (lambda: mw.adam_steps([[1.0]], lr=1e-6, beta2=1.0), "^beta1, beta2: "),
    (lambda: mw.master_weight_run([1.0, 2.0], np.zeros((3, 3))), r"^steps: expected shape \(K, 2\)"),
    (lambda: mw.master_weight_run([[1.0]], np.zeros((3, 1))), "^w0: expected a 1-D"),
    (lambda: mw.flushed_fraction([1.0], "int8"), "^dtype: "),
    (lambda: mw.scaled_gradient([1.0], 0.0), "^scale: "),
    (lambda: mw.scaled_gradient([1.0], np.inf), "^scale: "),
    (lambda: mw.dynamic_loss_scaling([[1.0]], growth_interval=0), "^growth_interval: "),
    (lambda: mw.dynamic_loss_scaling([[1.0]], backoff_factor=1.0), "^backoff_factor: "),
    (lambda: mw.dynamic_loss_scaling([[1.0]], growth_factor=1.0), "^growth_factor: "),
    (lambda: mw.dynamic_loss_scaling([[1.0]], init_scale=-1.0), "^init_scale: "),
])
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: mw.update_in("w", [1.0], "bfloat16"), "^w: "),
    (lambda: mw.update_in([1.0], [1.0], None), "^dtype: "),
    (lambda: mw.scaled_gradient([1.0], "big"), "^scale: "),
    (lambda: mw.dynamic_loss_scaling([[1.0]], growth_interval=2.5), "^growth_interval: "),
    (lambda: gl.book.ch04.master_weight_figure({"low": 1}), "^run: "),
    (lambda: gl.book.ch04.loss_scale_figure(None), "^run: "),
])
def test_bad_types_are_refused_by_name(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_the_figures_draw_the_runs():
    run = mw.master_weight_run([1.0, 0.5], np.full((8, 2), 2**-10), "bfloat16")
    fig = gl.book.ch04.master_weight_figure(run)
    (ax,) = fig.axes
    lines = [ln for ln in ax.get_lines() if ln.get_label().startswith(("bfloat16", "float32"))]
    assert len(lines) == 3
    np.testing.assert_allclose(lines[0].get_ydata(), run.distance["low"])
    scaler = mw.dynamic_loss_scaling([[1.0]] * 4, init_scale=2.0**17, growth_interval=1)
    fig = gl.book.ch04.loss_scale_figure(scaler)
    (ax,) = fig.axes
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), np.log2(scaler.scales))
    assert "3 of 4 steps skipped" in ax.get_title()    # 2**17, 2**16 overflow; 2**16 again
    import matplotlib.pyplot as plt
    plt.close("all")
    assert ml_dtypes.finfo(gl.as_dtype("float16")).smallest_subnormal == 2.0**-24


# --- issue 37: the edges of the range, each a stable result or a clear error --------------------

def test_adam_at_huge_and_tiny_gradients_gives_minus_lr_sign_g_not_minus_zero():
    # Adam's first step is -lr m_hat / (sqrt(v_hat) + eps) = -lr g / (|g| + eps): -lr sign(g)
    # when |g| >> eps. At 1e200, g**2 overflows to inf and the naive form gave -0.0; at 1e-200
    # with eps = 0 it underflows to 0 and gave 0/0.
    for g, eps in ((1e200, 1e-8), (1.7e308, 1e-8), (1e-200, 0.0), (5e-324, 0.0), (1e-200, 1e-300)):
        got = mw.adam_steps([[g, -g]], lr=1e-6, eps=eps)
        assert got.tolist() == [[-1e-06, 1e-06]], (g, eps, got)
    # eps-dominated, it is still the formula: -lr g / eps = -1e-6 * 1e-200 / 1e-8
    assert mw.adam_steps([[1e-200]], lr=1e-6)[0, 0] == pytest.approx(-1e-198, rel=1e-12)
    # Adam is scale-free at eps = 0: a run at 1e200 is the run at 1 (to rounding)
    g = np.array([[1.0, 3.0], [-1.0, 0.5], [2.0, -4.0]])
    for big in (1e200, 1e-200):
        np.testing.assert_allclose(mw.adam_steps(g * big, lr=1e-3, eps=0.0),
                                   mw.adam_steps(g, lr=1e-3, eps=0.0), rtol=1e-13)


def test_adam_with_eps_zero_gives_zero_on_a_coordinate_that_never_had_a_gradient():
    got = mw.adam_steps([[0.0, 2.0], [0.0, 2.0]], lr=1e-3, eps=0.0)
    assert got[:, 0].tolist() == [0.0, 0.0] and not np.signbit(got[:, 0]).any()   # +0, not 0/0
    np.testing.assert_allclose(got[:, 1], [-1e-3, -1e-3], rtol=1e-12)
    assert not np.signbit(mw.adam_steps([[0.0]], lr=1e-6)).any()   # -lr * 0 / eps is +0


def test_adam_refuses_a_learning_rate_whose_updates_pass_float64():
    # beta1 = 0, beta2 = 0.9: after 50 steps of 1e-30 a gradient of 1 has m_hat = 1 and
    # v_hat = 0.1 / (1 - 0.9**51) ~ 0.1, an update of lr / sqrt(0.1) = 3.16 lr: past float64.
    with pytest.raises(ValueError, match=r"^lr: expected a learning rate whose updates fit"):
        mw.adam_steps([[1e-30]] * 50 + [[1.0]], lr=1e308, beta1=0.0, beta2=0.9)
    assert mw.adam_steps([[1.0]], lr=1e308, eps=0.0).tolist() == [[-1e308]]


def test_update_in_past_the_dtype_range_is_refused_by_name():
    # 60000 + 10000 = 70000 > float16's 65504 (and above 65520, where rounding goes to inf)
    for fn in (mw.update_in, mw.lost_update_fraction):
        with pytest.raises(ValueError, match=r"^step: expected updates that keep the weights "
                                             r"inside float16's range \(largest finite 65504\)"):
            fn([1.0, 60000.0], [0.0, 1e4], "float16")
        with pytest.raises(ValueError, match=r"^step: .*float64's range"):
            fn([1e308], [1e308], "float64")
    # 65504 + 8 rounds back to 65504 (the half spacing at 65504 is 16): kept, not refused
    assert mw.update_in([65504.0], [8.0], "float16").tolist() == [65504.0]


def test_master_weight_run_at_huge_steps_names_steps_and_the_run():
    with pytest.raises(ValueError, match=r"^steps: .*bfloat16's range .*the bfloat16 run after "
                                         r"step 1"):
        mw.master_weight_run([1.0], [[1.0], [1e300]], "bfloat16")
    with pytest.raises(ValueError, match=r"^steps: .*float32's range .*the float32 master after step 0"):
        mw.master_weight_run([1.0], [[1e300]], "float64")
    # large steps that fit: the distances are finite although their squares are not
    run = mw.master_weight_run([0.0, 0.0], np.full((2, 2), 2.0**126), "float32")
    assert np.isfinite(run.distance["low"]).all() and run.moved("master") == 1.0


def test_moved_names_which_and_refuses_a_reference_that_did_not_move():
    run = mw.master_weight_run([1.0], [[2**-10], [-2**-10]])
    with pytest.raises(ValueError, match=r"^which: expected one of 'low', 'master', 'copy', "
                                         r"got 'float32'"):
        mw.master_weight_run([1.0], [[1e-3]]).moved("float32")
    with pytest.raises(ValueError, match=r"^which: the reference run ends where it started"):
        run.moved("low")
    big = mw.master_weight_run([0.0], [[2.0**126]], "float32")   # |ref - w0|**2 = 2**252: fine
    assert big.moved("low") == 1.0


def test_scaled_gradient_refuses_a_scale_float32_cannot_hold():
    for S in (1e-300, 1e-39, 1e39, 2.0**128):
        with pytest.raises(ValueError, match=r"^scale: expected a loss scale in \[1.1754944e-38, "
                                             r"3.4028235e\+38\]"):
            mw.scaled_gradient([1.0], S)
    # at the smallest scale a gradient of 1 is flushed (S g = 1.2e-38 is 0 in float16): 0, not NaN
    assert mw.scaled_gradient([1.0], mw.SCALE_RANGE[0]).tolist() == [0.0]
    # an unscaled value past float32 is the documented overflow inf, as at S g past float16
    assert np.isinf(mw.scaled_gradient([1e40], mw.SCALE_RANGE[0])[0])


def test_dynamic_scaler_never_backs_off_to_zero_nor_grows_past_float32():
    # A gradient of 1e300 overflows float16 at every float32 scale: every step is skipped (it
    # did overflow) and the scale stops at float32's smallest normal instead of reaching 0,
    # where the old rule then skipped steps with nothing to overflow (0 * inf).
    run = mw.dynamic_loss_scaling([[1e300]] * 4, init_scale=1e-30, backoff_factor=1e-10)
    assert run.skipped.all() and run.scales.min() == mw.SCALE_RANGE[0] > 0
    run = mw.dynamic_loss_scaling([[1e300], [1.0]], init_scale=1e-37, backoff_factor=1e-10)
    assert run.skipped.tolist() == [True, False]               # 1.0 at 1.2e-38: no overflow
    assert run.flushed.tolist()[1] == 1.0                      # ... flushed, reported as such
    # growth by 10 from 3e38 would pass float32's max: not applied (as torch's update kernel)
    run = mw.dynamic_loss_scaling([[0.0]] * 3, init_scale=3e38, growth_factor=10.0,
                                  growth_interval=1)
    assert run.scales.tolist() == [3e38] * 3 and not run.skipped.any()
    assert run.final_scale == 3e38
    with pytest.raises(ValueError, match=r"^init_scale: expected a loss scale in"):
        mw.dynamic_loss_scaling([[1.0]], init_scale=1e300)


def test_the_scale_rule_at_the_range_is_torchs():
    torch = pytest.importorskip("torch")
    scale, tracker = torch.tensor([3e38]), torch.tensor([0], dtype=torch.int32)
    torch._amp_update_scale_(scale, tracker, torch.tensor([0.0]), 10.0, 0.5, 1)
    assert scale.item() == pytest.approx(3e38, rel=1e-7)        # growth to inf is not applied
    run = mw.dynamic_loss_scaling([[0.0]], init_scale=float(np.float32(3e38)),
                                  growth_factor=10.0, growth_interval=1)
    assert run.final_scale == scale.item()
