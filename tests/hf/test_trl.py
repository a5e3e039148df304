"""THE CROSS-CHECK: TRL 1.16.0's GRPOTrainer on the book's model, its batch recomputed by the book.

One TRL run is shared by the module (4 optimizer steps: 2 batches x num_iterations 2, beta 0.04,
clip-higher 0.28). Its batch is captured at step 0 (every ratio 1) and at step 1 (the second
update on the same batch: TRL's old_logp, ratios away from 1); a second, one-step run
accumulates two micro-batches (on-policy, so TRL passes no old_logp; its "dapo" divides by the
generation batch's token count). For each captured step, TRL's loss and its gradient with
respect to every parameter are recomputed from the captured inputs with
gl.hf.completion_logprobs and glt.grpo_loss, and TRL's advantages with glt.group_advantages:
equal to 1e-6.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl = pytest.importorskip("trl")

import grpo_lab as gl  # noqa: E402
import grpo_lab.hf as glh  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402

TOL = 1e-6


@pytest.fixture(scope="module")
def setup():
    tok = glh.build_tokenizer()
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)
    model = glh.build_model(tok, seed=0)
    glh.warm_start(model, tok, task, steps=40, batch_size=32, lr=1e-2, seed=0)
    return tok, task, model


@pytest.fixture(scope="module")
def trl_run(setup, tmp_path_factory):
    tok, task, warm = setup
    model = glh.frozen_copy(warm).requires_grad_(True)
    cfg = glh.StepConfig.from_preset("trl", beta=0.04, num_iterations=2, eps_high=0.28)
    captures = [glh.BatchCapture(step=0), glh.BatchCapture(step=1)]

    class Both:                              # two captures on one trainer
        def attach(self, trainer):
            for c in captures:
                c.attach(trainer)

    run = glh.run_trl(model, tok, task, cfg, max_steps=4, prompts_per_step=8,
                      learning_rate=1e-3, seed=0, folder=tmp_path_factory.mktemp("trl"),
                      capture=Both())
    return run, captures, cfg


def _micro_run(setup, tmp_path_factory, agg):
    tok, task, warm = setup
    model = glh.frozen_copy(warm).requires_grad_(True)
    cfg = glh.StepConfig.from_preset("trl", beta=0.04, micro_size=32, agg=agg)  # 64 rows: 2 micro
    captures = [glh.BatchCapture(step=0), glh.BatchCapture(step=1)]            # both micro

    class Both:
        def attach(self, trainer):
            for c in captures:
                c.attach(trainer)

    run = glh.run_trl(model, tok, task, cfg, max_steps=1, prompts_per_step=8, seed=1,
                      folder=tmp_path_factory.mktemp(f"trl_{agg}"), capture=Both())
    return run, captures, cfg


@pytest.fixture(scope="module")
def trl_micro_run(setup, tmp_path_factory):
    return _micro_run(setup, tmp_path_factory, "dapo")


@pytest.fixture(scope="module")
def trl_bnpo_run(setup, tmp_path_factory):
    return _micro_run(setup, tmp_path_factory, "bnpo")


def _full_batch_gradient(run, captures, agg):
    """The book's gradient of the whole generation batch (both micro-batches in one), and
    TRL's accumulated one (the sum of its two micro-batch gradients)."""
    x0, x1 = captures[0].inputs, captures[1].inputs
    x = {k: torch.cat([x0[k], x1[k]]) for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                                 "completion_mask", "advantages",
                                                 "ref_per_token_logps")}
    model = type(run.trainer.model)(run.trainer.model.config)
    model.load_state_dict(captures[0].state)
    ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
    mask = torch.cat([x["prompt_mask"], x["completion_mask"]], 1)
    logp = glh.completion_logprobs(model, ids, mask, x["completion_ids"].shape[1])
    args = run.trainer.args
    loss, _ = glt.grpo_loss(logp, logp.detach(), x["ref_per_token_logps"], x["advantages"],
                            x["completion_mask"], eps_low=args.epsilon,
                            eps_high=args.epsilon_high, beta=args.beta, agg=agg,
                            kl_bias_correction=True)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    ours = torch.cat([g.flatten() for g in torch.autograd.grad(loss, [p for _, p in named])])
    trl_sum = torch.cat([(captures[0].grads[n] + captures[1].grads[n]).flatten()
                         for n, _ in named])
    counts = [float(c.inputs["completion_mask"].sum()) for c in captures]
    return ours, trl_sum, counts


def _assert_equal(check):
    assert check.loss_diff < TOL, check
    assert check.logp_diff < TOL, check
    assert check.grad_diff < TOL, check
    assert check.adv_diff < TOL, check


def test_trl_loss_gradient_and_advantages_equal_the_books_on_policy(trl_run):
    run, (first, _), cfg = trl_run
    # num_iterations = 2: TRL computes old_logp at generation; at step 0 it is logp's value
    m = first.inputs["completion_mask"].bool()
    assert float((first.logp - first.inputs["old_per_token_logps"])[m].abs().max()) < TOL
    check = glh.cross_check(run, first, cfg)
    _assert_equal(check)
    assert check.grad_max > 1e-4                                # a gradient worth checking


def test_trl_loss_gradient_and_advantages_equal_the_books_with_old_logp(trl_run):
    run, (_, second), cfg = trl_run
    x = second.inputs
    assert "old_per_token_logps" in x and "ref_per_token_logps" in x
    m = x["completion_mask"].bool()
    assert float((second.logp - x["old_per_token_logps"])[m].abs().max()) > 1e-4   # r != 1
    check = glh.cross_check(run, second, cfg)
    _assert_equal(check)
    assert check.grad_max > 1e-4 and abs(check.trl_loss) > 0


def test_trl_with_two_micro_batches_equals_the_books_global_token_share(trl_micro_run):
    run, captures, cfg = trl_micro_run
    for capture in captures:
        x = capture.inputs
        assert x["completion_ids"].shape[0] == 32               # one micro-batch of the two
        assert "old_per_token_logps" not in x                   # on-policy: logp.detach()
        assert float(x["num_items_in_batch"]) > float(x["completion_mask"].sum())  # global
        _assert_equal(glh.cross_check(run, capture, cfg))
    # and TRL's accumulated gradient is the whole batch's: "dapo" needs no micro-batch fix
    ours, trl_sum, _ = _full_batch_gradient(run, captures, "dapo")
    assert float((ours - trl_sum).abs().max()) < TOL


def test_trls_bnpo_under_accumulation_is_the_per_micro_batch_mean(trl_bnpo_run):
    # TRL 1.16.0's "bnpo" divides each micro-batch by its own token count, then by the
    # accumulation steps (_compute_loss): gl.hf.micro_mean_weights, not micro_weights. Each
    # micro-batch is reproduced exactly, and the sum differs from the whole batch's gradient
    # as soon as the two micro-batches hold different numbers of tokens.
    run, captures, cfg = trl_bnpo_run
    for capture in captures:
        _assert_equal(glh.cross_check(run, capture, cfg))
    ours, trl_sum, counts = _full_batch_gradient(run, captures, "bnpo")
    assert counts[0] != counts[1], counts                  # seeded: the case that shows it
    rel = float((ours - trl_sum).norm() / ours.norm())
    print(f"bnpo micro-batch tokens {counts}: relative gradient difference {rel:.2e}")
    assert rel > 1e-4


def test_trl_logs_the_metrics_the_chapter_shows(trl_run):
    run, _, _ = trl_run
    assert [row["step"] for row in run.history] == [1, 2, 3, 4]
    generated = [row for row in run.history if "reward" in row]            # steps 1 and 3
    assert len(generated) == 2 == len(run.rewards)
    for row, (_, rewards) in zip(generated, run.rewards):
        assert row["reward"] == pytest.approx(float(rewards.mean()), abs=1e-6)
        for key in ("frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio"):
            assert key in row
    for row in run.history:
        for key in ("loss", "entropy", "kl", "clip_ratio/region_mean", "grad_norm"):
            assert key in row
    assert run.history[0]["kl"] == 0.0                    # the policy is still the reference
    assert run.history[0]["clip_ratio/region_mean"] == 0.0        # on-policy: every r is 1
    assert run.seconds > 0


def test_trl_entropy_equals_the_books_to_float32_rounding(trl_run):
    run, (_, second), cfg = trl_run
    # TRL's fused LM head computes log Z - sum_v p_v z_v with z not shifted by its max
    # (trl/kernels/chunked_logprob.py, ChunkedLogProbFunction.forward); gl.hf.token_entropy
    # shifts first. Against the float64 forward of the same batch: TRL 3.8e-6, gl.hf 9.1e-7.
    assert glh.cross_check(run, second, cfg).entropy_diff < 1e-5


@pytest.mark.parametrize("change, name", [(dict(kl="k2"), "config.kl"),
                                          (dict(advantages={"eps": 1e-8}), "config.advantages"),
                                          (dict(is_mode="sequence_mask"), "config.is_mode"),
                                          (dict(micro_size=5), "config.micro_size")])
def test_grpo_config_refuses_what_trl_cannot_run(change, name, tmp_path):
    cfg = glh.StepConfig(**change)
    with pytest.raises(ValueError, match=f"^{name}:"):
        glh.grpo_config(cfg, output_dir=tmp_path)


def test_grpo_config_maps_the_knobs(tmp_path):
    cfg = glh.StepConfig.from_preset("trl", beta=0.04, eps_high=0.28, num_iterations=2,
                                     micro_size=16, max_new_tokens=6)
    args = glh.grpo_config(cfg, output_dir=tmp_path, prompts_per_step=4)
    assert (args.num_generations, args.per_device_train_batch_size,
            args.gradient_accumulation_steps) == (8, 16, 2)
    assert (args.epsilon, args.epsilon_high, args.beta, args.loss_type, args.num_iterations,
            args.max_completion_length) == (0.2, 0.28, 0.04, "dapo", 2, 6)
    assert args.use_bias_correction_kl and not args.gradient_checkpointing and not args.bf16
    assert args.report_to in ([], "none", ["none"])
    with pytest.raises(TypeError, match="^config:"):
        glh.grpo_config({"beta": 0.0}, output_dir=tmp_path)


def test_capture_and_cross_check_refuse_what_they_cannot_use(trl_run):
    run, _, cfg = trl_run
    with pytest.raises(TypeError, match="^trainer:"):
        glh.BatchCapture().attach(object())
    with pytest.raises(ValueError, match="^capture:"):
        glh.cross_check(run, glh.BatchCapture(step=99), cfg)
    with pytest.raises(ValueError, match="^step:"):
        glh.BatchCapture(step=-1)
    assert trl.__version__ == glh.TRL_VERSION


def test_the_command_line_runs_trl_and_cross_checks_every_step(tmp_path, capsys):
    import json

    from grpo_lab.hf.__main__ import main

    out = tmp_path / "trl.json"
    assert main(["--steps", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["versions"]["trl"] == glh.TRL_VERSION and report["device"] == "cpu"
    assert [row["step"] for row in report["history"]] == [1, 2]
    assert all(v < TOL for k, v in report["largest_difference"].items() if k != "entropy_diff")
    assert report["largest_gradient"] > 1e-4
    assert '"largest_difference"' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--steps", "0"])


def test_addition_dataset_offline_and_format_text(setup):
    _, task, _ = setup
    ds = glh.addition_dataset(task)
    assert len(ds) == len(task.train) and set(ds.column_names) == {"prompt", "answer"}
    assert ds[0]["prompt"] == glh.prompt_messages(task.train[0])
    assert ds[0]["answer"] == sum(task.train[0])
    assert len(glh.addition_dataset(task, split="held_out")) == len(task.held_out)
    with pytest.raises(TypeError, match="^task:"):
        glh.addition_dataset([(1, 2)])
    with pytest.raises(ValueError, match="^split:"):
        glh.addition_dataset(task, split="test")
    assert glh.offline()["HF_HUB_OFFLINE"] in ("1", "true", "True", "ON", "on", "yes")
    assert gl.format_reward(glh.format_text(7)) == 1.0


def test_run_trl_checks_first_and_leaves_no_folder_behind(setup, tmp_path, monkeypatch):
    """Issue 37: a bad knob is refused before any folder is made, and a finished run removes
    the temporary folder it made for TRL's reference model (nothing left in $TMPDIR)."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)               # re-read TMPDIR
    tok, task, warm = setup
    cfg = glh.StepConfig.from_preset("trl", beta=0.04)
    with pytest.raises(ValueError, match="learning_rate"):
        glh.run_trl(glh.frozen_copy(warm).requires_grad_(True), tok, task, cfg, max_steps=1,
                    prompts_per_step=2, learning_rate=-1.0)
    assert list(tmp_path.iterdir()) == []
    run = glh.run_trl(glh.frozen_copy(warm).requires_grad_(True), tok, task, cfg, max_steps=1,
                      prompts_per_step=2)
    assert len(run.history) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("grpo_lab_trl_")] == []
