"""The tiny policy, the addition task and the GRPO loop: the pieces are right, a run is
seeded, Ctrl-C keeps the log, and the command line refuses bad arguments clearly."""

import csv
import dataclasses
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grpo_lab as gl  # noqa: E402
import grpo_lab.torch as glt  # noqa: E402
from grpo_lab import tiny_policy as tp  # noqa: E402
from grpo_lab import train as T  # noqa: E402
from grpo_lab.rl.task import AdditionTask  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(d_model=16, n_head=2, warmup_steps=3, warmup_batch=8, steps=4, prompts_per_step=3,
            group_size=4, inner_iters=2, eval_every=2, threads=1)


# --- tokenizer and policy ---------------------------------------------------------------------

def test_tokenizer_round_trip_and_numbers_as_single_tokens():
    tok = tp.Tokenizer()
    text = "2+4+1+3=<think></think><answer>10</answer>"
    ids = tok.encode(text)
    assert [tok.vocab[i] for i in ids] == ["2", "+", "4", "+", "1", "+", "3", "=", "<think>",
                                           "</think>", "<answer>", "10", "</answer>"]
    assert tok.decode(ids) == text
    assert tok.decode(ids + [tp.EOS] + ids) == text             # EOS ends the text
    assert tok.decode([tp.PAD] + ids) == text                   # PAD is skipped
    assert [tok.vocab[i] for i in tok.encode("123")] == ["12", "3"]
    assert [tok.vocab[i] for i in tok.encode("05")] == ["0", "5"]


@pytest.mark.parametrize("text, exc, words", [
    ("2*3=", ValueError, "text: expected digits, '+', '=' and the four tags, got '*' at position 1"),
    ("<thinking>", ValueError, "got '<'"),
    (b"1+2", TypeError, "text: expected a str"),
])
def test_tokenizer_refuses_what_it_cannot_encode(text, exc, words):
    with pytest.raises(exc) as info:
        tp.Tokenizer().encode(text)
    assert words in str(info.value)


def test_policy_shapes_and_bad_arguments():
    torch.manual_seed(0)
    model = tp.TinyGPT(d_model=16, n_head=2, max_len=10)
    assert model(torch.zeros(3, 7, dtype=torch.long)).shape == (3, 7, len(tp.VOCAB))
    with pytest.raises(ValueError, match="ids: expected at most max_len = 10 tokens, got 11"):
        model(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match="n_head: expected a divisor of d_model = 16, got 3"):
        tp.TinyGPT(d_model=16, n_head=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        tp.sample(model, torch.zeros(1, 3, dtype=torch.long), 0)


def test_sampled_logp_is_the_policy_logp_and_the_mask_ends_at_eos():
    """The old_logp recorded while sampling equals the teacher-forced logp: ratio 1 at the start."""
    torch.manual_seed(0)
    model = tp.TinyGPT(d_model=16, n_head=2, max_len=16)
    prompts = torch.tensor([tp.Tokenizer().encode("1+2=")] * 64)
    g = torch.Generator().manual_seed(0)
    tokens, mask, logp = tp.sample(model, prompts, 8, generator=g)
    assert tokens.shape == mask.shape == logp.shape and tokens.shape[0] == 64
    torch.testing.assert_close(tp.completion_logp(model, prompts, tokens, mask), logp,
                               rtol=1e-5, atol=1e-5)
    for row_tokens, row_mask in zip(tokens.tolist(), mask.tolist()):
        n = sum(row_mask)
        assert row_mask == [True] * n + [False] * (len(row_mask) - n)       # a prefix
        if tp.EOS in row_tokens:
            assert row_tokens.index(tp.EOS) == n - 1                          # EOS is its last
        assert all(t == tp.PAD for t in row_tokens[n:])
    assert (logp[~mask] == 0).all() and (logp[mask] < 0).all()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_sampled_logp_is_the_logp_of_the_distribution_sampled(temperature):
    """Tokens drawn from softmax(logits / T) must carry log-probs of that distribution, and
    completion_logp at the same T must give them back: otherwise every run at T != 1 is
    off-policy from its first update (the ratio is not 1 and clipping fires for nothing)."""
    torch.manual_seed(0)
    model = tp.TinyGPT(d_model=16, n_head=2, max_len=16)
    prompts = torch.tensor([tp.Tokenizer().encode("1+2=")] * 256)
    g = torch.Generator().manual_seed(0)
    tokens, mask, logp, entropy = tp.sample(model, prompts, 4, temperature=temperature,
                                            generator=g, entropy=True)
    torch.testing.assert_close(tp.completion_logp(model, prompts, tokens, mask,
                                                  temperature=temperature), logp,
                               rtol=1e-5, atol=1e-5)
    logits = model(prompts)[:, -1, :].float() / temperature              # (N, V) first token
    first = torch.log_softmax(logits, -1)
    torch.testing.assert_close(logp[:, 0], first.gather(1, tokens[:, :1]).squeeze(1))
    torch.testing.assert_close(entropy[:, 0], -(first.exp() * first).sum(-1))
    assert (entropy[~mask] == 0).all() and (entropy[mask] > 0).all()
    if temperature != 1.0:                  # the untempered log-probs are a different policy
        untempered = tp.completion_logp(model, prompts, tokens, mask)
        assert (untempered - logp)[mask].abs().max() > 1e-2


def test_a_run_at_temperature_below_one_starts_on_policy():
    """The first inner iteration's ratio is exactly 1 at any temperature, so nothing clips."""
    cfg = T.TrainConfig(**{**TINY, "temperature": 0.6, "inner_iters": 1})
    run = T.prepare(cfg)
    batch = T.rollout(run)
    adv = glt.group_advantages(torch.tensor(T.score(run, batch)["reward"])).reshape(-1)
    diag = T.update(run, batch, adv)
    assert diag["clip_frac"] == 0.0 and diag["mean_ratio"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("positions, n_layer", [(False, 1), (True, 2)])
def test_the_kv_cache_gives_the_logits_of_a_full_forward_pass(positions, n_layer):
    torch.manual_seed(0)
    model = tp.TinyGPT(d_model=16, n_head=2, n_layer=n_layer, max_len=12, positions=positions)
    ids = torch.randint(0, len(tp.VOCAB), (5, 12))
    full = model(ids)                                                  # (5, 12, V)
    cache = []
    steps = [model(ids[:, :7], cache=cache)[:, -1]]
    steps += [model(ids[:, t:t + 1], cache=cache)[:, -1] for t in range(7, 12)]
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 6:], rtol=1e-5, atol=1e-5)
    assert len(cache) == n_layer and cache[0][0].shape == (5, 2, 12, 8)
    with pytest.raises(ValueError, match="ids: expected at most max_len = 12 tokens, got 13"):
        model(ids[:, :1], cache=cache)
    cache = []                                                         # several new tokens
    model(ids[:, :4], cache=cache)
    torch.testing.assert_close(model(ids[:, 4:9], cache=cache), full[:, 4:9], rtol=1e-5,
                               atol=1e-5)


def test_a_shared_prompt_gives_the_same_logp_entropy_and_gradient():
    """prompt_repeats=G computes each group's prompt once (as an inference engine caches a
    shared prefix); the log-probs, the entropies and the gradient are those of the full pass."""
    torch.manual_seed(0)
    model = tp.TinyGPT(d_model=16, n_head=2, max_len=16)
    prompts = torch.tensor([tp.Tokenizer().encode(p) for p in ("1+2=", "3+4=", "0+0=")])
    G = 4
    tokens, mask, _ = tp.sample(model, prompts.repeat_interleave(G, 0), 6,
                                generator=torch.Generator().manual_seed(1))
    full = tp.completion_logp(model, prompts.repeat_interleave(G, 0), tokens, mask,
                              entropy=True, temperature=0.7)
    (full[0].sum() + full[1].sum()).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    shared = tp.completion_logp(model, prompts, tokens, mask, entropy=True, temperature=0.7,
                                prompt_repeats=G)
    (shared[0].sum() + shared[1].sum()).backward()
    for a, b in zip(full, shared):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


def test_the_entropy_bonus_subtracts_alpha_times_the_mean_token_entropy():
    cfg = T.TrainConfig(**{**TINY, "inner_iters": 1})
    plain, bonus = T.prepare(cfg), T.prepare(dataclasses.replace(cfg, entropy_coef=0.5))
    batch = T.rollout(plain)
    adv = glt.group_advantages(torch.tensor(T.score(plain, batch)["reward"])).reshape(-1)
    with torch.no_grad():
        _, h = tp.completion_logp(plain.policy, batch.prompts, batch.tokens, batch.mask,
                                  entropy=True)
    torch.testing.assert_close(h, batch.entropy, rtol=1e-5, atol=1e-5)   # what was sampled
    loss0 = T.update(plain, batch, adv)["loss"]
    bonus.config = dataclasses.replace(bonus.config, entropy_coef=0.5)
    loss1 = T.update(bonus, batch, adv)["loss"]
    assert loss1 == pytest.approx(loss0 - 0.5 * float(h[batch.mask].mean()), rel=1e-5)
    assert any(not torch.equal(p, q) for p, q in zip(plain.policy.parameters(),
                                                      bonus.policy.parameters()))


def test_greedy_sampling_is_deterministic():
    torch.manual_seed(1)
    model = tp.TinyGPT(d_model=16, n_head=2, max_len=16)
    prompts = torch.tensor([tp.Tokenizer().encode("3+3=")] * 4)
    a = tp.sample(model, prompts, 6, temperature=0.0)[0]
    b = tp.sample(model, prompts, 6, temperature=0.0)[0]
    assert torch.equal(a, b) and (a == a[0]).all()           # same prompt, same greedy answer


def test_draw_samples_each_token_with_its_probability():
    """Inverse-CDF sampling: the frequencies of 400k draws sit within 5 standard errors of
    the probabilities, rows need not sum to 1, and a token of probability 0 is never drawn."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0],             # zeros at both ends
                      [2.0, 0.0, 0.0, 1.0, 0.0, 1.0]])             # unnormalised: sums to 4
    n = 200_000
    tokens = tp.draw(p.repeat(n, 1), g).view(n, 2)                 # (n, 2)
    for row in range(2):
        want = p[row] / p[row].sum()
        got = torch.bincount(tokens[:, row], minlength=6).double() / n
        se = torch.sqrt(want * (1 - want) / n).double()
        assert torch.all((got - want).abs() <= 5 * se + 1e-12), (row, got, want)
        assert torch.all(got[want == 0] == 0)
    one_hot = torch.zeros(3, 5, dtype=torch.float64)
    one_hot[[0, 1, 2], [4, 0, 2]] = 1.0                            # float64, certain tokens
    assert tp.draw(one_hot, g).tolist() == [4, 0, 2]


@pytest.mark.parametrize("row", [[0.0, 0.0, 0.0], [float("nan"), 0.5, 0.5],
                                 [float("inf"), 1.0, 0.0], [0.5, -0.1, 0.6]])
def test_draw_refuses_a_row_that_is_not_a_distribution(row):
    p = torch.tensor([[0.2, 0.3, 0.5], row])
    with pytest.raises(ValueError, match="probs: expected non-negative, finite rows"):
        tp.draw(p)


def test_draw_keeps_tokens_below_float32_resolution(monkeypatch):
    """Token 1 has probability 1e-9 between two halves: in float32, 0.5 + 1e-9 == 0.5 and its
    interval would be empty. A uniform number that lands inside it must draw it."""
    p = torch.tensor([[0.5, 1e-9, 0.5]], dtype=torch.float32)
    inside = (0.5 + 0.5e-9) / (1.0 + 1e-9)                    # u * total in (0.5, 0.5 + 1e-9)
    real_rand = torch.rand
    monkeypatch.setattr(tp.torch, "rand", lambda *a, **k: torch.full(
        a, inside, dtype=k.get("dtype", torch.float32)))
    assert tp.draw(p).tolist() == [1]
    monkeypatch.setattr(tp.torch, "rand", real_rand)
    assert tp.draw(p, torch.Generator().manual_seed(0)).tolist()[0] in (0, 2)


def test_draw_is_seeded():
    p = torch.softmax(torch.randn(64, 10, generator=torch.Generator().manual_seed(1)), -1)
    a = tp.draw(p, torch.Generator().manual_seed(3))
    b = tp.draw(p, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


# --- the task -------------------------------------------------------------------------------------

def test_task_split_is_disjoint_complete_and_seeded():
    task = AdditionTask(n_terms=4, max_term=4, held_out=0.2, seed=0)
    assert len(task.train) + len(task.held_out) == 5 ** 4
    assert not set(task.train) & set(task.held_out)
    assert task.held_out == AdditionTask(n_terms=4, max_term=4, seed=0).held_out
    assert task.held_out != AdditionTask(n_terms=4, max_term=4, seed=1).held_out
    assert task.prompt((0, 4, 2, 1)) == "0+4+2+1=" and task.answer((0, 4, 2, 1)) == 7
    assert len(tp.Tokenizer().encode(task.prompt((0, 4, 2, 1)))) == task.prompt_len


def test_balanced_batches_make_every_sum_equally_likely():
    task = AdditionTask(n_terms=4, max_term=4, seed=0)
    rng = np.random.default_rng(0)
    counts = Counter(task.answer(t) for t in task.batch(17_000, rng, balanced=True))
    assert sorted(counts) == sorted({task.answer(t) for t in task.train})   # 16 is held out
    assert max(counts.values()) / min(counts.values()) < 1.15        # about 1000 each
    natural = Counter(task.answer(t) for t in task.batch(17_000, rng))
    assert natural[8] > 10 * max(natural[0], 1)                      # the bell it replaces
    assert all(t in set(task.train) for t in task.batch(500, rng, balanced=True))


@pytest.mark.parametrize("kwargs, words", [
    (dict(n_terms=1), "n_terms: expected an integer in [2, 6]"),
    (dict(max_term=10), "max_term: expected an integer in [1, 9] (terms are single digits)"),
    (dict(held_out=1.0), "held_out: expected a fraction in (0, 1)"),
    (dict(held_out=0), "held_out:"),
])
def test_task_bad_arguments(kwargs, words):
    with pytest.raises(ValueError) as info:
        AdditionTask(**kwargs)
    assert words in str(info.value)


# --- the loop ------------------------------------------------------------------------------------

def test_one_step_taken_apart_matches_grpo_step():
    """rollout -> score -> advantages -> update, by hand, equals grpo_step on the same seed."""
    cfg = T.TrainConfig(**TINY)
    by_hand, whole = T.make_run(cfg), T.make_run(cfg)
    for run in (by_hand, whole):
        T.format_warmup(run)
        run.reference = T.copy.deepcopy(run.policy).requires_grad_(False)
    batch = T.rollout(by_hand)
    scores = T.score(by_hand, batch)
    assert scores["reward"].shape == (cfg.prompts_per_step, cfg.group_size)
    np.testing.assert_array_equal(scores["reward"],
                                  scores["verifier"] + cfg.format_weight * scores["format"])
    adv = glt.group_advantages(torch.tensor(scores["reward"])).reshape(-1)
    T.update(by_hand, batch, adv)
    metrics = T.grpo_step(whole)
    assert metrics["reward"] == pytest.approx(float(scores["reward"].mean()))
    for p, q in zip(by_hand.policy.parameters(), whole.policy.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_score_uses_the_package_rewards():
    run = T.make_run(T.TrainConfig(**TINY))
    terms = [(1, 2, 0, 0)]
    texts = ["<think></think><answer>3</answer>", "<think></think><answer>4</answer>",
             "<answer>3</answer>", "3"]
    batch = T.Rollout(terms, None, None, None, None, texts)
    run.config = dataclasses.replace(run.config, group_size=4)
    s = T.score(run, batch)
    np.testing.assert_array_equal(s["accuracy"], [[1, 0, 1, 0]])
    np.testing.assert_array_equal(s["format"], [[1, 1, 0, 0]])
    np.testing.assert_array_equal(s["reward"], [[1.5, 0.5, 1.0, 0.0]])


def test_a_run_is_seeded_and_logs_every_metric(tmp_path):
    cfg = T.TrainConfig(**TINY)
    a = T.train(cfg, progress=False, log_path=tmp_path / "h.csv")
    b = T.train(cfg, progress=False)

    def without_clock(run):      # NaN != NaN, so compare the JSON text (NaN prints as NaN)
        return json.dumps([{k: v for k, v in h.items() if k != "seconds"} for h in run.history])
    assert without_clock(a) == without_clock(b)
    assert without_clock(a) != without_clock(T.train(dataclasses.replace(cfg, seed=1),
                                                     progress=False))
    assert [h["step"] for h in a.history] == list(range(cfg.steps + 1))
    assert set(a.history[1]) == set(T.METRICS)
    for h in a.history[1:]:
        assert 0 <= h["zero_spread"] <= 1 and 0 <= h["clip_frac"] <= 1 and h["length"] >= 1
        assert 0 <= h["entropy"] <= math.log(len(tp.VOCAB))
    rows = list(csv.DictReader((tmp_path / "h.csv").open()))
    assert len(rows) == cfg.steps + 1 and list(rows[0]) == list(T.METRICS)


def _interrupt_on_call(monkeypatch, n):
    """Make the n-th GRPO step raise KeyboardInterrupt, as Ctrl-C or a cell timeout would."""
    real_step, calls = T.grpo_step, []

    def interrupted(run):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real_step(run)
    monkeypatch.setattr(T, "grpo_step", interrupted)


def test_an_interrupted_train_reraises_with_the_partial_run(monkeypatch):
    """Outside an interactive session a partial run must never pass for a result: train()
    re-raises (a KeyboardInterrupt, so scripts, nbval and the book build all fail)."""
    _interrupt_on_call(monkeypatch, 3)
    with pytest.raises(T.TrainingInterrupted) as info:
        T.train(T.TrainConfig(**{**TINY, "steps": 10}), progress=False)
    assert isinstance(info.value, KeyboardInterrupt)
    run = info.value.run
    assert run.interrupted and [h["step"] for h in run.history] == [0, 1, 2]
    assert 0 <= run.final["accuracy"] <= 1 and "after 2 GRPO steps" in str(info.value)


def test_an_interrupted_train_can_return_the_partial_run_when_asked(monkeypatch):
    _interrupt_on_call(monkeypatch, 3)
    run = T.train(T.TrainConfig(**{**TINY, "steps": 10}), progress=False,
                  on_interrupt="return")
    assert run.interrupted and run.history[-1]["step"] == 2
    with pytest.raises(ValueError, match="on_interrupt: expected one of 'raise', 'return'"):
        T.train(T.TrainConfig(**TINY), progress=False, on_interrupt="ignore")


def test_ctrl_c_stops_cleanly_and_keeps_the_log(monkeypatch, tmp_path):
    _interrupt_on_call(monkeypatch, 3)
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()] + [
        "--steps=10", f"--out={tmp_path}", "--quiet"]
    assert T.main(argv) == 130
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert [int(r["step"]) for r in rows] == [0, 1, 2]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["steps_done"] == 2
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_command_line_end_to_end(tmp_path):
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    proc = subprocess.run([sys.executable, "-m", "grpo_lab.train", *argv, "--agg=dapo",
                           "--eps-high=0.28", f"--out={tmp_path}"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "finished 4 GRPO steps; wall time" in proc.stdout
    assert "held-out accuracy" in proc.stdout
    assert "GRPO" in proc.stderr                                   # the tqdm bar
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["config"]["agg"] == "dapo" and summary["config"]["eps_high"] == 0.28
    assert 0 <= summary["final_held_out_accuracy"] <= 1


@pytest.mark.parametrize("args, words", [
    (["--steps=-1"], "argument --steps: expected an integer in [0, inf], got -1"),
    (["--agg=mean"], "argument --agg: expected one of 'grpo', 'bnpo', 'dapo', 'dr_grpo', "
                     "got 'mean'"),
    (["--kl=k4"], "argument --kl: expected one of 'k1', 'k2', 'k3'"),
    (["--group-size=1"], "argument --group-size: expected an integer in [2, inf]"),
    (["--lr=0"], "argument --lr: expected a number > 0.0"),
    (["--steps=abc"], "argument --steps: invalid int value: 'abc'"),
    (["--balanced=maybe"], "argument --balanced: expected true or false, got 'maybe'"),
    (["--reward=length"], "argument --reward: expected one of 'accuracy', 'contains'"),
    # each of these was accepted and then crashed with a traceback (issue 15)
    (["--held-out=1.0"], "argument --held-out: expected a fraction in (0, 1), got 1.0"),
    (["--max-term=10"], "argument --max-term: expected an integer in [1, 9] (terms are "
                        "single digits), got 10"),
    (["--n-terms=7"], "argument --n-terms: expected an integer in [2, 6], got 7"),
    (["--n-head=3"], "argument --n-head: expected a divisor of d_model = 64, got 3"),
    (["--eps-low=1.5"], "argument --eps-low: expected a number <= 1.0, got 1.5"),
    (["--device=meta"], "argument --device: expected 'cpu', 'cuda' or 'cuda:N', got 'meta'"),
    (["--max-new-tokens=4"], "argument --max-new-tokens: expected an integer in [6, inf] (the "
                             "shortest well-formed completion"),
    (["--n-terms=2", "--max-term=1", "--held-out=0.9"],
     "argument --held-out: expected a fraction that leaves training prompts, got 0.9"),
    (["--eps-high=-0.1"], "argument --eps-high: expected a number >= 0.0, got -0.1"),
    (["--temperature=nan"], "argument --temperature: expected a finite number, got nan"),
])
def test_bad_arguments_get_a_clear_message_before_any_work(args, words, capsys, tmp_path,
                                                          monkeypatch):
    monkeypatch.setattr(T, "prepare", lambda *a, **k: pytest.fail("work started"))
    out = tmp_path / "never-written"
    with pytest.raises(SystemExit) as info:
        T.main(args + ["--quiet", f"--out={out}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "python -m grpo_lab.train: error: " + words in err, err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_refused(capsys):
    with pytest.raises(SystemExit):
        T.main(["--device=cuda", "--quiet"])
    assert "device: expected 'cpu' on this machine (torch sees no CUDA device)" in \
        capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_short_run_on_cuda():
    run = T.train(T.TrainConfig(**{**TINY, "device": "cuda"}), progress=False)
    assert next(run.policy.parameters()).device.type == "cuda"
    assert not math.isnan(run.history[-1]["held_out_accuracy"])


def test_metrics_glossary_covers_the_log():
    assert list(T.METRICS)[0] == "step" and all(T.METRICS.values())
    fields = {f.name for f in dataclasses.fields(T.TrainConfig)}
    assert {"group_size", "inner_iters", "beta", "kl", "agg", "eps_low"} <= fields
    assert gl.accuracy_reward("<answer>3</answer>", 3) == 1.0      # the verifier it trains on
