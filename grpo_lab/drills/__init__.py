"""Checkers for the implement-it drills: they run the reader's function on worked, random and
adversarial cases and say, like a careful interviewer, what exactly is wrong.

Each ``gl.drills.check_<name>(fn)`` prints one short verdict, ``PASS: ...`` or
``NOT YET: ...``, and returns True or False. It never raises and never hangs because of the
reader's code: an exception, an endless loop (each call has a time limit), a modified input, a
wrong shape in any case, a tensor that requires grad, a generator or a ``None`` is the verdict,
not a traceback. ``verbose=False`` only returns the answer. Every keyword a checker takes
reaches the reader's function (``check_group_advantages(fn, eps=1e-4)`` calls
``fn(rewards, eps=1e-4)``).

How they grade (:mod:`~.cases`, :mod:`~.grading`): against the package's reference, on the
worked example, seeded random cases over several shapes (G = B, G odd, ragged masks) and an
adversarial set (near-tied and all-equal groups, large ratios with A < 0, 16-bit inputs with a
large spread, stray and interleaved tags...). The tolerance follows the answer's dtype where
the statement leaves it open (a float32 answer is graded at float32's precision) and the
statement where it fixes one. A hint names the first differing entry at full precision with
its inputs, says when the difference is the size of a coarser dtype's rounding, and names a
usual mistake only when the answers match that mistake on every case and the failing case
tells it apart. One module per chapter (``ch01_advantages`` ...); :mod:`~.harness` runs the
reader's function, :mod:`~.memory` measures NumPy's and torch's peak memory,
:mod:`~.proof` counts a catalogue's verdicts (chapter 9's table).

===================================  =======  ==================================================
checker                              chapter  the reader writes
===================================  =======  ==================================================
``check_group_advantages(fn)``       1        ``fn(rewards, eps=1e-8) -> adv``, (B, G)
``check_gae(fn)``                    2        ``fn(rewards, values, gamma, lam) -> adv``
``check_clipped_surrogate(fn)``      2        ``fn(logp, old_logp, adv, eps=0.2) -> loss``
``check_aggregate_loss(fn)``         2        ``fn(per_token_loss, mask, mode,
                                              max_len=None) -> scalar``
``check_kl_k3(fn)``                  3        ``fn(logp, ref_logp) -> k3`` per token
``check_k3_loss_gradient(fn)``       3        ``fn(logits, ref_logits) -> grad``, (V,)
``check_log_softmax(fn)``            4        ``fn(logits) -> logp`` (float16 / bfloat16)
``check_sequence_logprob_sum(fn)``   4        ``fn(logp, mask) -> (N,)`` sums
``check_format_reward(fn)``          5        ``fn(completion) -> 1.0 or 0.0``
``check_grpo_loss(fn)``              6        ``fn(logp, old_logp, ref_logp, adv, mask, eps,
                                              beta) -> loss``, torch, with its gradient
``check_completion_logprobs(fn)``    6b       ``fn(logits, input_ids, prompt_len, eos_id) ->
                                              logp``, the shift and the completion mask
``check_masked_entropy(fn)``         6b       ``fn(logits, mask) -> H``, the mean entropy
``check_accumulated_gradient(fn)``   6b       ``fn(model, input_ids, mask, micro_batch_size,
                                              loss_fn) -> loss``, the full batch's gradient
``check_sequence_is_weight(fn)``     6b       ``fn(old_logp, sampler_logp, mask, cap) -> (N,)``
``check_grpo_step(fn)``              6b       ``fn(policy, ref, optimizer, tok, prompts, answers,
                                              reward_fn, *, G, beta, eps, max_new_tokens,
                                              micro_size, max_grad_norm, seed) -> loss``, the
                                              whole step, as ``gl.hf.grpo_step_plain``
``check_blocked_advantages(fn)``     7        ``fn(rewards, block_rows) -> adv``, in blocks,
                                              float32 out, small peak memory
``check_surrogate_grad(fn)``         7        ``fn(ratio, adv, eps_low, eps_high) ->
                                              d loss / d logp`` per token
``check_process_advantages(fn)``     8        ``fn(step_rewards, step_mask) -> adv``
===================================  =======  ==================================================

Every checker is proven on at least five right answers written in other ways (loops, torch,
float32, another valid formula or guard) that it must accept, and at least ten realistic wrong
ones that it must reject with the hint naming the mistake: ``tests/drills/catalogue/`` in the
repository (the wrong answers are not installed with the package);
``gl.drills.proof_table(path)`` counts them. The drill chapter
(``chapters/09_interview_drills.ipynb``) collects the drills and prints that count.
"""

from grpo_lab.drills.ch01_advantages import check_group_advantages
from grpo_lab.drills.ch02_aggregation import check_aggregate_loss
from grpo_lab.drills.ch02_ppo import check_clipped_surrogate, check_gae
from grpo_lab.drills.ch03_kl import check_k3_loss_gradient, check_kl_k3
from grpo_lab.drills.ch04_precision import check_log_softmax, check_sequence_logprob_sum
from grpo_lab.drills.ch05_rewards import check_format_reward
from grpo_lab.drills.ch06_training import check_grpo_loss
from grpo_lab.drills.ch06b_capstone import check_grpo_step
from grpo_lab.drills.ch06b_real_model import (check_accumulated_gradient,
                                              check_completion_logprobs, check_masked_entropy,
                                              check_sequence_is_weight)
from grpo_lab.drills.ch06c_clinic import check_diagnosis, mystery_log  # ch. 6c, not in __all__
from grpo_lab.drills.ch07_performance import check_blocked_advantages, check_surrogate_grad
from grpo_lab.drills.ch08_process import check_process_advantages
from grpo_lab.drills.proof import load_catalogue, proof_table

__all__ = [
    "check_group_advantages",                                                     # ch. 1
    "check_aggregate_loss", "check_clipped_surrogate", "check_gae",               # ch. 2
    "check_k3_loss_gradient", "check_kl_k3",                                      # ch. 3
    "check_log_softmax", "check_sequence_logprob_sum",                            # ch. 4
    "check_format_reward",                                                        # ch. 5
    "check_grpo_loss",                                                            # ch. 6
    "check_completion_logprobs", "check_masked_entropy", "check_accumulated_gradient",
    "check_sequence_is_weight", "check_grpo_step",                                # ch. 6b
    "check_blocked_advantages", "check_surrogate_grad",                           # ch. 7
    "check_process_advantages",                                                   # ch. 8
]
# Also here, not checkers: proof_table and load_catalogue (chapter 9's count of the proof).
