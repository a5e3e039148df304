"""The math of the papers, one concept per module, on NumPy arrays.

``advantages`` (group-relative advantages), ``gae`` (PPO's critic advantages), ``surrogate``
(PPO's clipped objective, its gradient, GSPO's sequence ratio), ``aggregation`` (how per-token
losses become one number), ``kl`` (the k1, k2, k3 estimators), ``loss`` (the whole GRPO loss
and its diagnostics), ``process`` (process supervision).

Each public function validates its arguments in one call (a ``check_*_arguments`` function of
its module, whose option checks the torch mirror shares), then reads like its equation; the
careful numerics it relies on are named helpers in :mod:`grpo_lab.numerics.stable`.
"""
