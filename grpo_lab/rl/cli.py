"""``python -m grpo_lab.train``: chapter 6's training run from a shell.

Every field of :class:`~grpo_lab.rl.train_config.TrainConfig` is an option (``--group-size
8``); the run (:func:`grpo_lab.rl.train.train`) writes ``history.csv``, ``summary.json`` and
``curves.png`` (:func:`grpo_lab.book.ch06.training_curves_figure`) to ``--out``. A bad option
exits with status 2 and a message that names it; Ctrl-C stops after the current step, still
writes the three files and exits with status 130.

This is the one place where the loop meets the book's figure, which is why it is a module of
its own: :mod:`grpo_lab.rl.train` itself never imports ``grpo_lab.book``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from grpo_lab.rl import train as loop
from grpo_lab.rl.train_config import TrainConfig

__all__ = ["main"]


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _optional_float(text: str):
    return None if text.lower() == "none" else float(text)


_ARG_TYPES = {"int": int, "float": float, "str": str, "bool": _bool,
              "float | None": _optional_float}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_lab.train",
        usage="python -m grpo_lab.train [--OPTION VALUE ...] [--out DIR] [--quiet]",
        description="Train GRPO Lab's tiny policy on addition with GRPO (chapter 6). Writes "
                    "history.csv, summary.json and curves.png to --out. Ctrl-C stops after the "
                    "current step and still writes them.")
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        default = getattr(defaults, f.name)
        p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=_ARG_TYPES[f.type],
                       default=default, metavar=f.type.split(" ")[0].upper(),
                       help=f"default: {default}")
    p.add_argument("--out", default="runs/grpo", help="output folder (default: runs/grpo)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    """Parse ``argv`` (the shell's arguments when None), train, write the three files.

    Returns the exit status: 0 when the run finished, 130 when Ctrl-C stopped it.
    """
    parser = _parser()
    args = vars(parser.parse_args(argv))
    out, quiet = Path(args.pop("out")), args.pop("quiet")
    config = TrainConfig(**args)
    try:
        config.validate()
    except (TypeError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")        # status 2, as argparse does
    out.mkdir(parents=True, exist_ok=True)
    print(f"GRPO Lab: training on {config.device} with {config.threads} thread(s); "
          f"log in {out}/", file=sys.stderr)
    run = loop.train(config, progress=not quiet, log_path=out / "history.csv")
    loop.write_csv(run.history, out / "history.csv")
    info = loop.summary(run)
    (out / "summary.json").write_text(json.dumps(info, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grpo_lab.book.ch06 import training_curves_figure

    fig = training_curves_figure(run.history)
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)
    state = "interrupted (Ctrl-C) after" if run.interrupted else "finished"
    print(f"\n{state} {info['steps_done']} GRPO steps in {info['seconds']} s\n"
          f"  held-out accuracy: {info['start_held_out_accuracy']:.1%} after the format warm-up"
          f" -> {info['final_held_out_accuracy']:.1%}\n"
          f"  held-out format:   {info['start_held_out_format']:.1%} -> "
          f"{info['final_held_out_format']:.1%}\n"
          f"  wrote {out / 'history.csv'}, {out / 'summary.json'}, {out / 'curves.png'}")
    return 130 if run.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
