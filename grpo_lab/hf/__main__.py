"""``python -m grpo_lab.hf``: chapter 6b's TRL run and its cross-check, printed as JSON.

Taught in chapter 6b, section "How it scales" (``chapters/06b_real_model.ipynb``); the GPU
check (``scripts/device_check.sh``) runs it with ``--device cuda``::

    python -m grpo_lab.hf --steps 10 --threads 1 --out trl.json
    python -m grpo_lab.hf --device cuda --steps 10 --out trl.json

It builds the model and tokenizer, warm-starts the format, runs TRL's GRPOTrainer for
``--steps`` optimizer steps (B = 8 prompts x G = 8, num_iterations 2, beta 0.04) with every
step's batch captured, and recomputes each with :func:`grpo_lab.hf.cross_check`. The JSON
holds the versions, the device, the wall times (not seeded: never compare them), TRL's
per-step metrics and the largest difference of each cross-checked quantity over all steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def check_out(parser, out):
    """``--out`` before any work: a file path (not empty, not a folder) in a folder that
    exists and can be written; returns it as a Path, or None when not given."""
    if out is None:
        return None
    if out.strip() == "":
        parser.error("--out: expected a file path, got an empty string")
    path = Path(out)
    if path.is_dir() or out.endswith(("/", os.sep)):
        parser.error(f"--out: expected a file path, got {out!r}, which is a folder")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        parser.error(f"--out: expected a file in an existing folder, got {out!r} (no folder "
                     f"{str(folder)!r})")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path,
                                                                                     os.W_OK)):
        parser.error(f"--out: expected a file that can be written, got {out!r}")
    return path


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file in ``path``'s folder, then rename it over ``path``:
    a reader sees the old file or the whole new one, never a partial one, and a failed write
    leaves nothing behind."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_lab.hf",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=10, help="TRL optimizer steps (1 to 200)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: a 64-wide model gains nothing from more)")
    parser.add_argument("--out", default=None,
                        help="also write the JSON to this file (checked before the run, "
                             "written whole or not at all)")
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= 200:
        parser.error(f"--steps: expected 1 to 200, got {args.steps}")
    if not 1 <= args.threads <= 64:
        parser.error(f"--threads: expected 1 to 64, got {args.threads}")
    out = check_out(parser, args.out)
    import torch
    import transformers
    import trl

    import grpo_lab as gl
    import grpo_lab.hf as glh

    glh.offline()
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device: expected a CUDA device, torch sees none")
    start = time.perf_counter()
    tok = glh.build_tokenizer()
    task = gl.task.AdditionTask(n_terms=2, max_term=4, held_out=0.2, seed=0)
    model = glh.build_model(tok, seed=0)
    glh.warm_start(model, tok, task, steps=40, batch_size=32, lr=1e-2, seed=0)
    cfg = glh.StepConfig.from_preset("trl", beta=0.04, num_iterations=2, eps_high=0.28)
    captures = [glh.BatchCapture(step=s) for s in range(args.steps)]

    class Every:
        def attach(self, trainer):
            for c in captures:
                c.attach(trainer)

    with tempfile.TemporaryDirectory(prefix="grpo_lab_trl_") as folder:     # removed after
        run = glh.run_trl(model, tok, task, cfg, max_steps=args.steps, prompts_per_step=8,
                          learning_rate=1e-3, seed=0, folder=folder, capture=Every(),
                          device=args.device)
        checks = [glh.cross_check(run, c, cfg) for c in captures]
    fields = ("loss_diff", "logp_diff", "grad_diff", "adv_diff", "entropy_diff")
    report = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "trl": trl.__version__},
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "threads": args.threads, "steps": args.steps,
        "trl_train_seconds": round(run.seconds, 3),
        "total_seconds": round(time.perf_counter() - start, 3),
        "largest_difference": {f: max(getattr(c, f) for c in checks) for f in fields},
        "largest_gradient": max(c.grad_max for c in checks),
        "history": run.history,
    }
    text = json.dumps(report, indent=1)
    if out is not None:
        write_atomically(out, text + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
