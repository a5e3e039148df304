"""``python -m grpo_lab.train``: chapter 6's training run from a shell.

Every field of :class:`~grpo_lab.rl.train_config.TrainConfig` is an option (``--group-size
8``); the run (:func:`grpo_lab.rl.train.train`) writes ``history.csv``, ``summary.json`` and
``curves.png`` (:func:`grpo_lab.book.ch06.training_curves_figure`) to ``--out``.

* Every option, ``--out`` included, is checked before any work: a bad one exits with status 2
  and argparse's ``error: argument --held-out: expected ...``, naming the flag. Beyond
  TrainConfig's checks, the integers have upper bounds with their reasons: steps (time,
  :data:`LIMITS`), threads (:func:`grpo_lab.numerics.command_line.max_threads`) and the
  memory the batch and the model need (half of the machine's); ``--out`` goes through
  :func:`grpo_lab.numerics.command_line.check_out_path`, the bench's check.
* Every line printed survives a name that is not UTF-8 and any stream encoding
  (:func:`grpo_lab.numerics.command_line.echo`).
* From the moment the output folder exists, ``summary.json`` exists and is valid JSON. It says
  ``"interrupted": true`` until the run has finished, so Ctrl-C at any moment (start-up,
  warm-up, a GRPO step, writing the files) leaves a summary marked interrupted, and the
  command exits with status 130. Every file is written whole or not at all.
* The summary and the last lines printed give the wall time and the held-out accuracy.

This is the one place where the loop meets the book's figure, which is why it is a module of
its own: :mod:`grpo_lab.rl.train` itself never imports ``grpo_lab.book``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from grpo_lab.numerics.command_line import (THREADS_PER_CPU, check_out_path, echo,
                                            max_threads)
from grpo_lab.rl import train as loop
from grpo_lab.rl.train_config import TrainConfig

__all__ = ["main"]

EXIT_INTERRUPTED = 130          # 128 + SIGINT, what a shell reports for Ctrl-C

#: The most steps of any kind a run takes: the default run's 450 GRPO steps take about a
#: minute and a half, so a million is days of CPU time (a typo, not a plan).
MAX_STEPS = 10**6
#: Upper bounds of the integer options whose size is time, not memory, and why.
LIMITS = {"steps": (MAX_STEPS, "a million steps is days of CPU time"),
          "warmup_steps": (MAX_STEPS, "a million steps is days of CPU time"),
          "eval_every": (MAX_STEPS, "no run is longer than a million steps"),
          "inner_iters": (1000, "each is a full update on the same batch; far fewer already "
                                "leave every ratio clipped"),
          "max_new_tokens": (256, "the answer format takes 6 tokens and the default allows 8")}
#: Bytes a run keeps per completion token and model width per layer (activations for the
#: backward pass, the sampler's cache): 64, from the peak RSS of one step of 16 and of 4096
#: completions at the default model (405 -> 661 MiB: 64 KiB per completion of 16 tokens x
#: d_model 64 x 1 layer).
ACTIVATION_BYTES = 64
#: Bytes per parameter: the weight, its gradient and Adam's two moments, in float32.
PARAMETER_BYTES = 16


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


def _flag(field: str) -> str:
    return f"--{field.replace('_', '-')}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_lab.train",
        usage="python -m grpo_lab.train [--OPTION VALUE ...] [--out DIR] [--quiet]",
        description="Train GRPO Lab's tiny policy on addition with GRPO (chapter 6). Writes "
                    "history.csv, summary.json and curves.png to --out. Ctrl-C stops the run, "
                    "marks summary.json interrupted, still writes what it has, and exits 130.")
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        default = getattr(defaults, f.name)
        p.add_argument(_flag(f.name), dest=f.name, type=_ARG_TYPES[f.type],
                       default=default, metavar=f.type.split(" ")[0].upper(),
                       help=f"default: {default}")
    p.add_argument("--out", default="runs/grpo", help="output folder (default: runs/grpo)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _memory_budget() -> int:
    """Half of this machine's memory, in bytes (8 GiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _check_sizes(parser, config: TrainConfig) -> None:
    """The upper bounds TrainConfig leaves to the machine: time (:data:`LIMITS`), threads
    (:func:`grpo_lab.numerics.command_line.max_threads`) and memory; exits 2 naming the flag."""
    for name, (limit, why) in LIMITS.items():
        if getattr(config, name) > limit:
            parser.error(f"argument {_flag(name)}: expected at most {limit} ({why}), got "
                         f"{getattr(config, name)}")
    if config.threads > max_threads():
        parser.error(f"argument --threads: expected at most {max_threads()} ({THREADS_PER_CPU} "
                     f"per CPU, {os.cpu_count()} here: more only wait for each other), got "
                     f"{config.threads}")
    tokens = 2 * config.n_terms + config.max_new_tokens               # prompt + completion
    width = config.d_model * config.n_layer
    parts = {"group_size": config.prompts_per_step * config.group_size * tokens * width,
             "warmup_batch": config.warmup_batch * tokens * width}
    parts = {k: v * ACTIVATION_BYTES for k, v in parts.items()}
    parts["d_model"] = 12 * config.d_model ** 2 * config.n_layer * PARAMETER_BYTES  # 12 d^2
    need, budget = max(parts.values()) + parts["d_model"], _memory_budget()
    if need > budget:
        name = max(parts, key=parts.get)
        what = {"group_size": f"prompts_per_step x group_size completions (about "
                              f"{ACTIVATION_BYTES} bytes per token, d_model and layer)",
                "warmup_batch": f"warmup_batch completions (about {ACTIVATION_BYTES} bytes "
                                f"per token, d_model and layer)",
                "d_model": f"the policy's 12 d_model^2 n_layer parameters ({PARAMETER_BYTES} "
                           f"bytes each with their gradient and Adam's moments)"}[name]
        parser.error(f"argument {_flag(name)}: expected a run that fits in half of this "
                     f"machine's memory ({budget / 2**30:.1f} GiB), got one that needs about "
                     f"{need / 2**30:.3g} GiB for {what}")


def _check_config(parser, args: dict) -> TrainConfig:
    """The config, validated; a bad field exits 2 naming its flag, as argparse does."""
    try:
        config = TrainConfig(**args)                 # validated as it is built
    except (TypeError, ValueError) as exc:
        field, _, message = str(exc).partition(": ")
        if field in args:
            parser.error(f"argument {_flag(field)}: {message}")
        parser.error(str(exc))
    return config


def _in_import_lock_callback(frame) -> bool:
    """Whether ``frame`` is importlib's module-lock callback (a weakref callback, run as a
    lazy import inside torch finishes): an exception raised there cannot propagate."""
    code = getattr(frame, "f_code", None)
    return (code is not None and code.co_name == "cb"
            and code.co_filename.startswith("<frozen importlib"))


class _CtrlC:
    """Ctrl-C, held while a file is written: the interrupt comes right after the write.

    A Python-level SIGINT handler (Python runs it in the main thread, between bytecodes), so
    the signal itself is never masked. It also records the request in ``requested``: a
    KeyboardInterrupt raised inside an import can be lost before it reaches the loop (seen
    about one run in three when Ctrl-C came right after the folder appeared), and the loop
    asks this flag before every step.
    """

    def __init__(self):
        self.holding, self.pending, self.requested = 0, False, False

    def __call__(self, signum, frame):
        self.requested = True            # asked before every step, in case a library ate it
        if self.holding:
            self.pending = True
        elif not _in_import_lock_callback(frame):
            raise KeyboardInterrupt
        # else: raised there it would be lost all the same, and Python would print it as an
        # "Exception ignored in" traceback; the flag stops the loop at its next step

    @contextlib.contextmanager
    def held(self):
        self.holding += 1
        try:
            yield
        finally:
            self.holding -= 1
            if not self.holding and self.pending:
                self.pending = False
                raise KeyboardInterrupt


_CTRL_C = _CtrlC()


def _write_json(path: Path, info: dict) -> None:
    """Write whole or not at all: a temporary file, then an atomic rename."""
    partial = path.with_name(path.name + ".partial")
    with _CTRL_C.held():
        partial.write_text(json.dumps(info, indent=2))
        os.replace(partial, path)


def _seconds(seconds: float) -> str:
    """Wall time for the last lines printed: 0.1 s steps, milliseconds under a second."""
    return f"{seconds:.3f}" if seconds < 1 else f"{seconds:.1f}"


def _summary(config, run, seconds: float) -> dict:
    """summary.json: a finished run's numbers, or what an interrupted one got to."""
    if run is None or not hasattr(run, "final"):       # stopped before GRPO could start
        start = getattr(run, "start", None) or {}
        return {"start_held_out_accuracy": start.get("accuracy"),
                "start_held_out_format": start.get("format"),
                "final_held_out_accuracy": None, "final_held_out_format": None,
                "steps_done": 0, "interrupted": True, "seconds": round(seconds, 3),
                "config": dataclasses.asdict(config)}
    return loop.summary(run)


def _prepare_out(parser, out: Path, config: TrainConfig) -> None:
    """Create ``--out`` and its first summary.json (marked interrupted), or exit 2 naming it."""
    if out.exists() and not out.is_dir():
        parser.error(f"argument --out: expected a folder, got {str(out)!r}, an existing file")
    try:
        with _CTRL_C.held():                       # the folder never exists without a summary
            out.mkdir(parents=True, exist_ok=True)
            _write_json(out / "summary.json", _summary(config, None, 0.0))
    except OSError as exc:
        parser.error(f"argument --out: cannot write to {str(out)!r}: "
                     f"{exc.strerror or exc}")


def _draw(run, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grpo_lab.book.ch06 import training_curves_figure

    fig = training_curves_figure(run.history)
    partial = out / "curves.partial.png"
    fig.savefig(partial, dpi=120)
    plt.close(fig)
    with _CTRL_C.held():
        os.replace(partial, out / "curves.png")


def _import_early() -> None:
    """Import what the run would import lazily (the progress bar, the figure): a Ctrl-C that
    lands inside an import can be lost on the way out, so none happens after the folder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import tqdm.auto  # noqa: F401

    import grpo_lab.book.ch06  # noqa: F401


def main(argv=None) -> int:
    """Parse ``argv`` (the shell's arguments when None), train, write the three files.

    Returns the exit status: 0 when the run finished, 130 when Ctrl-C stopped it.
    """
    parser = _parser()
    args = vars(parser.parse_args(argv))
    out, quiet = args.pop("out"), args.pop("quiet")
    config = _check_config(parser, args)
    _check_sizes(parser, config)
    problem = check_out_path(out, "folder")
    if problem:                                   # before any work: "" is not the current folder
        parser.error(f"argument --out: {problem}")
    out = Path(out)
    _import_early()
    if threading.current_thread() is not threading.main_thread():   # no handler to set there
        return _run(parser, out, quiet, config)
    _CTRL_C.requested = False
    previous = signal.signal(signal.SIGINT, _CTRL_C)     # restored below: main() is reentrant
    try:
        return _run(parser, out, quiet, config)
    finally:
        signal.signal(signal.SIGINT, previous)


def _run(parser, out: Path, quiet: bool, config: TrainConfig) -> int:
    """Create --out, train, write the three files; 130 if Ctrl-C stopped any of it."""
    began, run, info = time.perf_counter(), None, None
    try:
        _prepare_out(parser, out, config)       # a Ctrl-C held while it runs comes out here
        echo(f"GRPO Lab: training on {config.device} with {config.threads} thread(s); "
             f"log in {out}/", file=sys.stderr)
        try:
            run = loop.train(config, progress=not quiet, log_path=out / "history.csv",
                             stop=lambda: _CTRL_C.requested)
        except loop.TrainingInterrupted as stop:   # Ctrl-C during a GRPO step: keep the run
            run = stop.run
        loop.write_csv(run.history, out / "history.csv")
        info = _summary(config, run, time.perf_counter() - began)
        _write_json(out / "summary.json", info)
        state = "interrupted (Ctrl-C) after" if run.interrupted else "finished"
        echo(f"\n{state} {info['steps_done']} GRPO steps; "
             f"wall time {_seconds(info['seconds'])} s\n"
             f"  held-out accuracy: {info['start_held_out_accuracy']:.1%} after the format "
             f"warm-up -> {info['final_held_out_accuracy']:.1%}\n"
             f"  held-out format:   {info['start_held_out_format']:.1%} -> "
             f"{info['final_held_out_format']:.1%}", flush=True)
        _draw(run, out)
        echo(f"  wrote {out / 'history.csv'}, {out / 'summary.json'}, {out / 'curves.png'}")
    except KeyboardInterrupt:          # start-up, warm-up, or while the files were written
        if info is not None and not info["interrupted"]:
            _write_json(out / "summary.json", {**info, "interrupted": True})
        echo(f"\ninterrupted (Ctrl-C); {out / 'summary.json'} is marked interrupted",
             file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_INTERRUPTED if run.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
