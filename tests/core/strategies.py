"""Batches shared by the loss tests: ratios written as log-probs, and hypothesis strategies."""

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

BF16 = np.dtype(ml_dtypes.bfloat16)

log_ratios = st.floats(-3, 3)
advs = st.floats(-5, 5)
eps_values = st.floats(0, 1)


def ratios_to_logp(ratios):
    """(logp, old_logp) whose ratio exp(logp - old_logp) is ``ratios`` (old_logp = -1)."""
    r = np.asarray(ratios, dtype=np.float64)
    return np.log(r) - 1.0, np.full(r.shape, -1.0)


@st.composite
def token_batches(draw, max_n=4, max_t=8):
    """(logp, old_logp, adv), each (N, T): log-ratios in [-3, 3], advantages in [-5, 5]."""
    n, t = draw(st.integers(1, max_n)), draw(st.integers(1, max_t))
    old = draw(hnp.arrays(np.float64, (n, t), elements=st.floats(-10, 0)))
    d = draw(hnp.arrays(np.float64, (n, t), elements=log_ratios))
    adv = draw(hnp.arrays(np.float64, (n, t), elements=advs))
    return old + d, old, adv


@st.composite
def masked_batches(draw, max_n=4, max_t=8):
    """(logp, old_logp, adv, mask) with every row holding at least one valid token."""
    logp, old, adv = draw(token_batches(max_n, max_t))
    n, t = logp.shape
    lengths = draw(hnp.arrays(np.int64, (n,), elements=st.integers(1, t)))
    mask = np.arange(t)[None, :] < lengths[:, None]             # (N, T) left-aligned answers
    return logp, old, adv, mask
