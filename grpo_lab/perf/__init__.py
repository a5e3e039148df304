"""Performance (chapter 7): the fast advantages, the fused torch loss, the bench
(``python -m grpo_lab.bench``) and the roofline."""
