"""The RL pieces: rule-based rewards, the addition task, the tiny policy, the GRPO training
loop (chapters 5 and 6) and the hidden-string toy of chapter 2. Everything but ``rewards``,
``task`` and ``hidden_string`` needs torch."""
