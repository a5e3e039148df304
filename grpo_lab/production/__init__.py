"""The trainers' defaults (TRL, verl, OpenRLHF) as grpo_lab options (chapter 8)."""
