"""GRPO Lab on tensors: ``import grpo_lab.torch as glt``.

The same public names and signatures as the NumPy core, on ``torch.Tensor`` inputs on CPU or
CUDA, differentiable, tested equal to the NumPy reference (``tests/torch/``), and as fast as
the straightforward eager code (``python -m grpo_lab.bench`` puts it next to TRL's way).
``import grpo_lab`` never imports torch; this subpackage and the training code do.

==============================  =========================================================
``glt.group_advantages``        :func:`grpo_lab.group_advantages` (chapter 1)
``glt.kl_k1/kl_k2/kl_k3``       :func:`grpo_lab.kl_k3` and friends (chapter 3); ``kl_k3_plus``
``glt.clipped_surrogate_loss``  PPO's clipped per-token loss (chapter 2)
``glt.sequence_ratio``          GSPO's sequence-level ratio (chapter 2)
``glt.aggregate_loss``          grpo / bnpo / dapo / dr_grpo reductions (chapter 2)
``glt.aggregation_weights``     the per-token weights behind them (chapter 2)
``glt.masked_normalize``        a masked sum over any constant > 0 (CS336's SFT step)
``glt.grpo_loss``               all of it, with diagnostics (chapters 2, 6 and 7)
``glt.fused_linear_grpo_loss``  the loss from hidden states and the LM head (chapter 7)
==============================  =========================================================

The building blocks they share are public too: ``glt.clip_bounds`` (the clip as one clamp),
``glt.k3_expm1`` and ``glt.k3_series``, ``glt.row_weights``, ``glt.check_loss_arguments``
(the one argument check of the eager and the fused loss), and the tensor versions of
:mod:`grpo_lab.numerics.stable`'s group statistics.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - torch is pinned in requirements.txt
    raise ImportError("grpo_lab.torch needs PyTorch: pip install 'grpo_lab[torch]' "
                      "(or torch from requirements.txt)") from exc

from grpo_lab.torch.advantages import (centred_deviations_, divide_or_zero, group_advantages,
                                       power_of_two_rescale, std_from_deviations)
from grpo_lab.torch.aggregation import (AGGREGATIONS, aggregate, aggregate_loss,
                                        aggregation_weights, masked_normalize, row_weights)
from grpo_lab.torch.kl import (PER_TOKEN_KL, k3_expm1, k3_series, kl_k1, kl_k2, kl_k3,
                               kl_k3_plus)
from grpo_lab.torch.loss import (DIAGNOSTICS, check_loss_arguments, diagnostic_means,
                                 diagnostic_sums, grpo_loss)
from grpo_lab.torch.surrogate import (MAX_LOG_RATIO, clip_bounds, clipped_surrogate_loss,
                                      probability_ratio, sequence_ratio)
from grpo_lab.torch.fused_linear import fused_linear_grpo_loss
from grpo_lab.core.surrogate import LEVELS
from grpo_lab.torch import neighbours  # glt.neighbours: CISPO, SAPO, REINFORCE++, ReMax

#: The names ``grpo_loss(kl=...)`` takes; the same dict of public functions as the NumPy core's.
KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3, "k3+": kl_k3_plus}

__all__ = ["AGGREGATIONS", "DIAGNOSTICS", "KL_ESTIMATORS", "LEVELS", "MAX_LOG_RATIO",
           "PER_TOKEN_KL", "aggregate", "aggregate_loss", "aggregation_weights",
           "centred_deviations_", "check_loss_arguments", "clip_bounds",
           "clipped_surrogate_loss", "diagnostic_means", "diagnostic_sums", "divide_or_zero",
           "fused_linear_grpo_loss", "group_advantages", "grpo_loss", "k3_expm1", "k3_series", "kl_k1", "kl_k2", "kl_k3", "kl_k3_plus",
           "masked_normalize", "power_of_two_rescale", "probability_ratio", "row_weights", "sequence_ratio",
           "std_from_deviations", "neighbours"]
