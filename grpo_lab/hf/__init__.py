"""The GRPO step on a Hugging Face causal LM, and the same run in TRL: ``gl.hf``.

Taught in chapter 6b (``chapters/06b_real_model.ipynb``, "A real model and a real engine").
``import grpo_lab`` never imports torch or transformers; this subpackage does, on first use of
``gl.hf``. The modules land one by one (issue 26); each names the section that teaches it.
"""

from __future__ import annotations

__all__: list[str] = []
