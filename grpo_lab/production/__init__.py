"""The trainers' defaults (TRL, verl, OpenRLHF) as grpo_lab options (chapter 8): ``presets``
(the presets and ``default_loss``) and ``knobs`` (the knob map, read from ``knobs.toml``)."""
