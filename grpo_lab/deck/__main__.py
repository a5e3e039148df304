"""``python -m grpo_lab.deck --out FILE.apkg [--lang both|en|zh]``: the interview deck for Anki.

The same cards, numbers and languages as chapter 9 (see :mod:`grpo_lab.deck.anki`). Every
argument is checked before any work: ``--out`` by :func:`grpo_lab.deck.anki.check_apkg_path`
(a name before ``.apkg``, not a folder) and the one path check every command uses; a problem
is an argparse error (one line, exit 2), never a traceback. The package is written atomically
(:func:`~grpo_lab.deck.anki.build_apkg`): a write that fails (a full disk) leaves the older
deck in place, says so in one line and exits 1.
"""

from __future__ import annotations

import argparse
import sys

from grpo_lab.deck import CardError
from grpo_lab.numerics.command_line import check_out_path, echo


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_lab.deck",
        description="Write GRPO Lab's interview deck (chapter 9's cards, in English and "
                    "Chinese) as an Anki package.")
    parser.add_argument("--out", required=True, help="the .apkg file to write")
    parser.add_argument("--lang", default="both", choices=("both", "en", "zh"),
                        help="English, Chinese (zh) or both side by side (default: both)")
    args = parser.parse_args(argv)
    from grpo_lab.deck.anki import build_apkg, check_apkg_path

    try:
        check_apkg_path(args.out)
    except ValueError as err:
        parser.error(f"argument --out: {str(err).removeprefix('path: ')}")
    problem = check_out_path(args.out, "file")
    if problem:
        parser.error(f"argument --out: {problem}")
    try:
        n = build_apkg(args.out, lang=args.lang)
    except OSError as err:                    # a full disk, a folder gone: the old deck stays
        echo(f"{parser.prog}: error: writing {args.out} failed, nothing was changed: "
             f"{err.strerror or err}", file=sys.stderr)
        return 1
    except CardError as err:                  # a card file broken in this checkout
        echo(f"{parser.prog}: error: the deck's cards do not load, nothing was written: {err}",
             file=sys.stderr)
        return 1
    echo(f"{n} cards written to {args.out} ({args.lang})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
