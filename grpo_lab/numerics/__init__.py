"""Careful numerics and the one validation layer that every public function calls.

``validate``: argument checks for arrays and tensors, one message format everywhere;
``precision``: what float16 / bfloat16 / float32 do to a number; ``logprobs``: log-softmax
and log-prob sums that survive low precision; ``dtypes``: the dtype a result is computed and
returned in; ``stable``: group statistics without overflow or cancellation (centred deviations,
power-of-two rescale, masked mean); ``logspace``: the clamped log-ratio, logsumexp, k3;
``error_table``: a function's error per dtype against float64; ``command_line``: what every
command line shares (the one ``--out`` check, the thread limit, a print that never fails).
"""
