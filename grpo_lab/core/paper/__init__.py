r"""The papers' formulas as plain code: the paper's notation, ten lines or fewer, no guard.

Reached as ``gl.paper``; every chapter shows one of these first (``gl.show_source``), then the
package's hardened function, and runs the input that breaks the plain one. Each is the
equation as its paper writes it, on ordinary NumPy inputs: no validation, no dtype policy, no
overflow or cancellation care. ``tests/core/test_paper.py`` proves each equal to its hardened
twin on ordinary inputs, so neither can drift, and holds every body to ten lines.

===============================  ==================================  =========================  ===
plain function                   paper, equation                     hardened twin              ch.
===============================  ==================================  =========================  ===
``group_advantages``             DeepSeekMath, sec. 4.1.2            gl.group_advantages        1
``gae``                          GAE (Schulman et al. 2016), eq. 16  gl.gae                     2
``clipped_surrogate_loss``       PPO (Schulman et al. 2017), eq. 7   gl.clipped_surrogate_loss  2
``sequence_ratio``               GSPO (Zheng et al. 2025), s_i       gl.sequence_ratio          2
``aggregate_grpo``               DeepSeekMath, eq. 3                 gl.aggregate_loss          2
``aggregate_dapo``               DAPO (Yu et al. 2025), sec. 3.3     gl.aggregate_loss          2
``aggregate_dr_grpo``            Dr. GRPO (Liu et al. 2025)          gl.aggregate_loss          2
``grpo_loss``                    DeepSeekMath, eq. 3 with eq. 4      gl.grpo_loss               2
``kl_k1``, ``kl_k2``, ``kl_k3``  Schulman 2020, "Approximating KL"   gl.kl_k1 ...               3
``log_softmax``                  the softmax, in logs                gl.log_softmax             4
``token_logprobs``               log pi(x_t), picked from it         gl.token_logprobs          4
``sequence_logprob_sum``         log pi(o) = sum_t log pi(o_t)       gl.sequence_logprob_sum    4
``accuracy_reward``              DeepSeek-R1, sec. 2.2.2             gl.accuracy_reward         5
``format_reward``                DeepSeek-R1, sec. 2.2.2             gl.format_reward           5
``normalise_then_sum``           GDPO (TRL's normalize_then_sum)     gl.normalise_then_sum      5
``process_advantages``           DeepSeekMath, sec. 4.1.3            gl.process_advantages      8
===============================  ==================================  =========================  ===
"""

from grpo_lab.core.paper.advantages import gae, group_advantages, process_advantages
from grpo_lab.core.paper.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.core.paper.logprobs import log_softmax, sequence_logprob_sum, token_logprobs
from grpo_lab.core.paper.loss import (aggregate_dapo, aggregate_dr_grpo, aggregate_grpo,
                                      clipped_surrogate_loss, grpo_loss, sequence_ratio)
from grpo_lab.core.paper.rewards import accuracy_reward, format_reward, normalise_then_sum

__all__ = ["group_advantages", "gae", "process_advantages",
           "clipped_surrogate_loss", "sequence_ratio", "aggregate_grpo", "aggregate_dapo",
           "aggregate_dr_grpo", "grpo_loss",
           "kl_k1", "kl_k2", "kl_k3",
           "log_softmax", "token_logprobs", "sequence_logprob_sum",
           "accuracy_reward", "format_reward", "normalise_then_sum"]
