"""``python -m grpo_lab.deck --out FILE.apkg [--lang both|en|zh]``: the interview deck for Anki.

The same cards, numbers and languages as chapter 9 (see :mod:`grpo_lab.deck.anki`). ``--out``
goes through the one path check every command uses; a problem is an argparse error (exit 2),
never a traceback.
"""

from __future__ import annotations

import argparse
import sys

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
    if not args.out.endswith(".apkg"):
        parser.error(f"argument --out: must end in .apkg (Anki's package), got {args.out!r}")
    problem = check_out_path(args.out, "file")
    if problem:
        parser.error(f"argument --out: {problem}")
    from grpo_lab.deck.anki import build_apkg

    n = build_apkg(args.out, lang=args.lang)
    echo(f"{n} cards written to {args.out} ({args.lang})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
