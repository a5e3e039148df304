"""The capstone checker's own proof: its mistake simulator, its cases and its tolerance.

``step_variant`` with the right way is ``grpo_step_plain`` (so every mistake it computes is one
change away from the plain step); the cases hold what the checker's table says they hold
(ragged prompts, EOS and truncated completions, a list of eos ids, pad == eos, an all-equal
group, a group with spread, two or more micro-batches, an active clip); every usual mistake
shows on some case far outside the tolerance, and the right answers of the catalogue land far
inside it (measured margins, not guesses)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import grpo_lab.drills.ch06b_capstone as cap  # noqa: E402
from tests.drills.catalogue import CATALOGUE  # noqa: E402


@pytest.mark.parametrize("i", range(len(cap.CASES)))
def test_the_right_way_is_the_plain_step(i):
    plain, mine = cap._expected(i), cap._variant(i, cap.RIGHT)
    assert plain.scale > 1e-3                                  # the step moved the weights
    assert cap._gap(mine, plain, plain.scale) <= cap.REL_TOL / 50
    assert mine.loss == pytest.approx(plain.loss, rel=1e-6)


def _samples(i):
    case = cap.CASES[i]
    policy, ref, optimizer, tok, prompts, answers = cap._setup(case)
    return case, tok, cap._sample(policy, tok, prompts, case.G, case.max_new_tokens, case.seed)


@pytest.mark.parametrize("i", range(len(cap.CASES)))
def test_the_cases_hold_what_the_table_says(i):
    case, tok, (ids, attn, P, y, sampler_logp, eos) = _samples(i)
    plain = cap._expected(i)
    assert torch.equal(torch.cat([ids, y], 1), plain.watch.generated[0])   # the same samples
    eos = torch.tensor(eos if isinstance(eos, list) else [eos])
    ended = torch.isin(y, eos).any(1)
    assert y.shape[1] == case.max_new_tokens and (~ended).sum() >= 2      # truncated rows
    assert ended.sum() >= 3
    assert len({int(a.sum()) for a in attn}) >= 2                        # ragged prompts
    texts, answers = plain.watch.rewards[0]
    r = np.array(cap.reward_fn(texts, answers)).reshape(-1, case.G)
    assert (r.std(1) == 0).any() and (r.std(1) > 0).sum() >= 2
    tiled = [a for _ in range(case.G) for a in [sum(t) for t in case.terms]]
    assert cap.reward_fn(texts, tiled) != list(r.ravel())                # tiling shows
    assert len(range(0, len(y), case.micro_size)) >= 2
    assert (tok.pad_token_id == tok.eos_token_id) == case.pad_is_eos
    assert (len(eos) == 2) == case.eos_list


def test_the_engine_samples_from_other_weights_than_the_trainer():
    """policy.generate stands for a bfloat16 engine: its log-probs are pi_sampler's, off the
    trainer's by more than rounding, so old_logp from the sampler is a visible mistake."""
    case, tok, (ids, attn, P, y, sampler_logp, eos) = _samples(0)
    policy, *_ = cap._setup(case)
    with torch.no_grad():
        z = policy(torch.cat([ids, y], 1)).logits[:, P - 1:-1]
    trainer = z.log_softmax(-1).gather(2, y[..., None]).squeeze(2)
    gap = float((trainer - sampler_logp).abs().max())
    assert 1e-4 < gap < 1.0, gap


def test_the_clip_is_inactive_in_the_first_case_and_active_in_the_second():
    assert cap._gap(cap._variant(0, cap.Way(clip="none")), cap._expected(0),
                    cap._expected(0).scale) <= cap.REL_TOL
    assert cap._gap(cap._variant(1, cap.Way(clip="none")), cap._expected(1),
                    cap._expected(1).scale) > 100 * cap.REL_TOL


def test_every_mistake_shows_far_outside_the_tolerance():
    """Measured: the smallest gap of a mistake on the case that shows it is 2e-3 of the
    largest update entry (old_logp from the bfloat16 sampler), 20 times the tolerance."""
    for hint, way in cap.step_mistakes():
        gaps = [cap._gap(v, cap._expected(i), cap._expected(i).scale)
                for i in range(len(cap.CASES)) if (v := cap._variant(i, way)) is not None]
        assert gaps and max(gaps) > 10 * cap.REL_TOL, (way, gaps)


def test_the_right_answers_land_far_inside_the_tolerance():
    """Measured: the catalogue's right answers are within 1e-6 of the plain step's update
    (relative to its largest entry, beyond a weight's rounding), 100 times inside."""
    for fn in CATALOGUE["grpo_step"].rights:
        for i in range(len(cap.CASES)):
            run, problem = cap._call(fn, cap.CASES[i], limit_s=60)
            assert problem is None, (fn.__name__, problem)
            assert cap._gap(run, cap._expected(i), cap._expected(i).scale) <= cap.REL_TOL / 50


def test_the_checker_names_the_first_call_when_the_function_fails(capsys):
    def fails(*args, **kwargs):
        raise ValueError("not written yet")
    assert cap.check_grpo_step(fails) is False
    out = capsys.readouterr().out
    assert out.startswith("NOT YET: on 3 prompts") and "raised ValueError: not written yet" in out
