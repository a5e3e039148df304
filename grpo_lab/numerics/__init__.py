"""Careful numerics and the one validation layer that every public function calls.

``validate``: argument checks for arrays and tensors, one message format everywhere;
``precision``: what float16 / bfloat16 / float32 do to a number; ``logprobs``: log-softmax
and log-prob sums that survive low precision; ``stable``: the careful numerics (centred
deviations, power-of-two rescale, k3 series, logsumexp, the clamped log-ratio, masked mean);
``error_table``: a function's error per dtype against float64.
"""
