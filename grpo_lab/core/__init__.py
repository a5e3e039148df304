"""The math of the papers, one concept per module, on NumPy arrays.

Each public function validates its arguments in one call, then reads like its equation; the
careful numerics it relies on are named helpers in :mod:`grpo_lab.numerics`.
"""
