"""grpo_lab.torch refuses bad input with the NumPy reference's message format
("<arg>: expected <what>, got <what came>"), keeps to one device, and `import grpo_lab`
never imports torch."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grpo_lab.torch as glt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
Z23, Z2, ONES = torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 3)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: glt.group_advantages(np.ones((2, 4))), TypeError,
     "rewards: expected a torch.Tensor of shape (B, G)"),
    (lambda: glt.group_advantages(torch.ones(4)), ValueError, "rewards: expected a 2-D tensor"),
    (lambda: glt.group_advantages(torch.ones(3, 1)), ValueError, "G >= 2"),
    (lambda: glt.group_advantages(torch.tensor([[1.0, float("nan")]])), ValueError,
     "rewards: expected finite values, got nan at index (0, 1)"),
    (lambda: glt.group_advantages(torch.ones(2, 2, dtype=torch.complex64)), TypeError,
     "rewards: expected a real numeric dtype (float, int or bool)"),
    (lambda: glt.group_advantages(torch.ones(2, 3), scale="rows"), ValueError,
     "scale: expected one of 'group', 'batch', 'none'"),
    (lambda: glt.group_advantages(torch.ones(2, 3), ddof=3), ValueError, "ddof:"),
    (lambda: glt.group_advantages(torch.tensor([[6e4, -6e4]], dtype=torch.float16),
                                  scale="none", baseline="leave_one_out"), ValueError,
     "rewards: the advantages do not fit in torch.float16"),
    (lambda: glt.kl_k3(torch.zeros(2, 3), torch.zeros(3, 2)), ValueError,
     "ref_logp: expected the shape of logp, (2, 3)"),
    (lambda: glt.kl_k3(torch.tensor([-800.0]), torch.tensor([0.0])), ValueError,
     "expected a k3 estimate that fits in torch.float32"),
    (lambda: glt.kl_k1(torch.zeros(3), torch.zeros(3), clamp=-1.0), ValueError, "clamp:"),
    (lambda: glt.grpo_loss(Z23, Z23, None, Z2, ONES), ValueError,
     "ref_logp: expected an (N, T) tensor"),
    (lambda: glt.grpo_loss(Z23, Z23, Z23, torch.zeros(3), ONES), ValueError,
     "adv: expected shape (2,) (one advantage per sequence) or (2, 3)"),
    (lambda: glt.grpo_loss(Z23, Z23, Z23, Z2, torch.full((2, 3), 0.5)), ValueError,
     "mask: expected only 0 and 1 (or bools), got 0.5 at index (0, 0)"),
    (lambda: glt.grpo_loss(Z23, Z23, Z23, Z2, torch.tensor([[1, 1, 1], [0, 0, 0]])), ValueError,
     "mask: expected at least one valid token in every sequence"),
    (lambda: glt.grpo_loss(Z23, Z23, Z23, Z2, ONES, agg="mean"), ValueError,
     "agg: expected one of 'grpo', 'bnpo', 'dapo', 'dr_grpo'"),
    (lambda: glt.grpo_loss(Z23, Z23, Z23, Z2, ONES, eps_low=1.5), ValueError, "eps_low:"),
    (lambda: glt.grpo_loss(Z23, Z23, torch.tensor([[0.0, float("inf"), 0.0]] * 2), Z2, ONES),
     ValueError, "ref_logp: expected finite values, got inf at index (0, 1) (2 non-finite"),
    (lambda: glt.grpo_loss(Z23, Z23, Z23, Z2, ONES.numpy()), TypeError,
     "mask: expected a torch.Tensor mask of 0/1 or bools"),
    (lambda: glt.aggregate_loss(Z23, ONES, "grpo", max_len=5),
     ValueError, "max_len: expected None with mode 'grpo'"),
    (lambda: glt.aggregate_loss(Z23, ONES, "dr_grpo", max_len=2),
     ValueError, "max_len: expected an integer in [3, inf]"),
    (lambda: glt.clipped_surrogate_loss(Z23, [[0.0] * 3] * 2, Z2),
     TypeError, "old_logp: expected a torch.Tensor"),
    (lambda: glt.clipped_surrogate_loss(Z23, Z23, Z2, dual_clip=1.0), ValueError, "dual_clip:"),
])
def test_bad_input_names_the_problem(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


def test_a_finite_sum_that_overflows_is_not_mistaken_for_a_non_finite_value():
    """The NaN scan is one sum: a sum that overflows (float32 values near 3e38) is looked at
    element by element before anything is refused."""
    big = torch.full((2, 3), 3e38)
    loss, _ = glt.grpo_loss(-big, -big, None, Z2, ONES, beta=0.0)
    assert torch.isfinite(loss)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tensors_on_two_devices_are_refused():
    with pytest.raises(ValueError, match="ref_logp: expected a tensor on cpu"):
        glt.kl_k3(torch.zeros(3), torch.zeros(3, device="cuda"))
    with pytest.raises(ValueError, match="mask: expected a tensor on cpu"):
        glt.grpo_loss(Z23, Z23, Z23, Z2, ONES.cuda())


def test_import_grpo_lab_does_not_import_torch():
    code = ("import sys, grpo_lab, grpo_lab.rl.rewards, grpo_lab.rl.task, "
            "grpo_lab.numerics.validate; print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
