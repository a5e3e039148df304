"""GRPO Lab on tensors: ``import grpo_lab.torch as glt``.

The same public names and signatures as the NumPy core, on ``torch.Tensor`` inputs on CPU or
CUDA, differentiable, tested equal to the NumPy reference (``tests/test_torch_parity.py``).
``import grpo_lab`` never imports torch; this subpackage and the training code do.

==============================  =========================================================
``glt.group_advantages``        :func:`grpo_lab.group_advantages` (chapter 1)
``glt.kl_k1/kl_k2/kl_k3``       :func:`grpo_lab.kl_k3` and friends (chapter 3)
``glt.clipped_surrogate_loss``  PPO's clipped per-token loss (chapter 2)
``glt.sequence_ratio``          GSPO's sequence-level ratio (chapter 2)
``glt.aggregate_loss``          grpo / bnpo / dapo / dr_grpo reductions (chapter 2)
``glt.aggregation_weights``     the per-token weights behind them (chapter 2)
``glt.grpo_loss``               all of it, with diagnostics (chapters 2 and 6)
==============================  =========================================================
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - torch is pinned in requirements.txt
    raise ImportError("grpo_lab.torch needs PyTorch: pip install 'grpo_lab[torch]' "
                      "(or torch from requirements.txt)") from exc

from grpo_lab.torch.advantages import group_advantages
from grpo_lab.torch.kl import kl_k1, kl_k2, kl_k3
from grpo_lab.torch.losses import (AGGREGATIONS, KL_ESTIMATORS, LEVELS, MAX_LOG_RATIO, aggregate_loss,
                     aggregation_weights, clipped_surrogate_loss, grpo_loss, sequence_ratio)

__all__ = ["AGGREGATIONS", "KL_ESTIMATORS", "LEVELS", "MAX_LOG_RATIO", "aggregate_loss",
           "aggregation_weights", "clipped_surrogate_loss", "group_advantages", "grpo_loss",
           "kl_k1", "kl_k2", "kl_k3", "sequence_ratio"]
