"""tests/hf runs its tiny models on one torch thread.

A 2-layer, 64-wide model gives each op too little work to split: on a loaded 2-core machine
five warm-start steps took 0.16 s on one thread and 1.1-6.5 s on two (the second thread spins
waiting for the first). The number of threads changes no result beyond float rounding, which
every test here allows for. The previous setting is restored after the session.
"""

import pytest


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tok():
    """The chapter's character tokenizer, built in code."""
    return pytest.importorskip("grpo_lab.hf").build_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    """The chapter's small Llama, seeded, in eval mode."""
    return pytest.importorskip("grpo_lab.hf").build_model(tok, seed=0).eval()
