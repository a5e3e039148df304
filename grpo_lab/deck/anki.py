"""The interview deck as an Anki package (``.apkg``), built from the same cards chapter 9 shows.

One note per card, in deck order: the front is the question, the back the answer with its
follow-ups and the section that teaches it, English and 中文 side by side (stacked on a
narrow screen). Numbers are filled in by the same providers as on the site; math is written
for Anki's MathJax (``\\(..\\)`` and ``\\[..\\]``). Each note's id comes from the card's id, so
that importing a newer package updates the reader's notes (and keeps their review history)
instead of adding copies.

    python -m grpo_lab.deck --apkg grpo-lab-deck.apkg            # both languages
    python -m grpo_lab.deck --apkg deck-zh.apkg --lang zh

The book's build writes ``deck/grpo-lab-deck.apkg`` into the site (``_ext/grpo_site.py``).
Needs ``genanki`` and ``markdown-it-py`` (``pip install grpo-lab[deck]``; both are in the
book's requirements.txt).
"""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import sqlite3
import tempfile
import zipfile
from pathlib import Path

from grpo_lab import deck as _deck
from grpo_lab.numerics.validate import check_choice, check_int, describe

#: fixed ids, so that every build gives the same note type and deck (Anki matches on them)
MODEL_ID = 1_734_207_311
DECK_ID = 1_734_207_312
DECK_NAME = "GRPO Lab: interview deck 面试题"
#: the timestamp written into the collection, so that two builds give the same notes and cards
TIMESTAMP = 1_764_547_200.0          # 2025-12-01 00:00 UTC

CSS = """\
.card { font-family: system-ui, sans-serif; font-size: 17px; line-height: 1.45;
        text-align: left; color: #1a1a1a; background: #fff; max-width: 70em; margin: auto; }
.nightMode.card { color: #e6e6e6; background: #1e1e1e; }
.langs { display: grid; grid-template-columns: minmax(0, 1fr); column-gap: 1.5em; }
@media (min-width: 800px) { .langs.both { grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); } }
.where { font-size: 0.85em; opacity: 0.75; margin-top: 1em; }
code { font-size: 0.92em; }
"""

_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
# inline math may run over a line break, as in MyST, but not over a blank line
_INLINE = re.compile(r"(?<![\\$])\$(?!\s)((?:[^$\n]|\n(?!\s*\n))+?)(?<![\s\\])\$")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_TOKEN = "\ue000{}\ue001"           # private-use marks: Markdown leaves them alone


def _markdown_to_html(text: str) -> str:
    """CommonMark to HTML, the math kept out of Markdown's way and written for MathJax."""
    try:
        from markdown_it import MarkdownIt
    except ImportError as err:  # pragma: no cover - a requirement of the book
        raise ImportError("gl.deck.anki needs markdown-it-py: pip install markdown-it-py") from err
    maths = []

    def keep(m, display):
        maths.append((display, m.group(1)))
        return _TOKEN.format(len(maths) - 1)

    text = _DISPLAY.sub(lambda m: keep(m, True), text)
    text = _INLINE.sub(lambda m: keep(m, False), text)
    # a link to a chapter notebook cannot open in Anki: keep its words, drop the target
    text = _LINK.sub(lambda m: m.group(1) if ".ipynb" in m.group(2) else m.group(0), text)
    out = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)

    def put_back(m):
        display, tex = maths[int(m.group(1))]
        tex = html.escape(tex.strip(), quote=False)
        return f"\\[{tex}\\]" if display else f"\\({tex}\\)"

    return re.sub("\ue000(\\d+)\ue001", put_back, out)


def _side(en: str, zh: str | None, lang: str) -> str:
    blocks = []
    if lang in ("both", "en") or zh is None:
        blocks.append(f'<div lang="en">{_markdown_to_html(en)}</div>')
    if lang in ("both", "zh") and zh is not None:
        blocks.append(f'<div lang="zh-CN">{_markdown_to_html(zh)}</div>')
    both = " both" if len(blocks) == 2 else ""
    return f'<div class="langs{both}">' + "".join(blocks) + "</div>"


def note_fields(card, number: int, nums: dict, number_of: dict, lang: str = "both") -> list:
    """``[front, back]`` HTML of one card (see the module docstring)."""
    _deck.check_card("card", card)
    number, lang = check_int("number", number, minimum=1), check_choice("lang", lang, _deck.LANGS)
    for name, value in (("nums", nums), ("number_of", number_of)):
        if not isinstance(value, dict):
            raise TypeError(f"{name}: expected a dict, got {describe(value)}")
    fill = lambda t: _deck._fill(t, nums, number_of)                          # noqa: E731
    q_en = f"{number}\\. {fill(card.question)}"       # "1\." : a number, not a list
    q_zh = f"{number}\\. {fill(card.question_zh)}" if card.question_zh else None
    a_en, a_zh = _deck.answer_texts(card, fill)
    where = html.escape(f"{_deck.chapter_label(card.chapter)}, {card.section}")
    where = re.sub(r"\$([^$]+)\$", lambda m: f"\\({m.group(1)}\\)", where)
    back = _side(a_en, a_zh, lang) + f'<div class="where">taught in: GRPO Lab, {where}</div>'
    return [_side(q_en, q_zh, lang), back]


def note_guid(card_id: str) -> str:
    """A stable note id from the card's id (Anki's guid field)."""
    import genanki

    _deck.check_text("card_id", card_id)

    return genanki.guid_for("grpo-lab", card_id)


def check_apkg_path(path) -> Path:
    """``path`` for :func:`build_apkg`: a str or path-like whose file name is ``<name>.apkg``
    (``.apkg`` alone is a hidden file with no name) in a folder that is not a file."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise TypeError(f"path: expected the .apkg file to write (a str or a path), got "
                        f"{describe(path)}")
    path = Path(path)
    if not path.name.endswith(".apkg") or path.name == ".apkg":
        raise ValueError(f"path: must end in .apkg (Anki's package) after a name, such as "
                         f"'grpo-lab-deck.apkg', got {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"path: expected a file to write, got {str(path)!r}, which is a folder")
    return path


def build_apkg(path, *, lang: str = "both", cards=None) -> int:
    """Write the deck to ``path`` (an ``.apkg``); return the number of notes written.

    ``lang`` is "both", "en" or "zh" (a card without 中文 shows English); ``cards`` defaults
    to :func:`grpo_lab.deck.load_cards`.

    The package is written **atomically**: into a temporary file in the target folder, then
    renamed over ``path`` (``os.replace``), so a write that fails half way (a full disk) leaves
    the older deck as it was and no partial file. The SQLite collection inside is built in a
    temporary folder that is removed afterwards: nothing is left in ``$TMPDIR``.
    """
    path = check_apkg_path(path)
    lang = check_choice("lang", lang, _deck.LANGS)
    try:
        import genanki
    except ImportError as err:  # pragma: no cover - a requirement of the book
        raise ImportError("gl.deck.anki needs genanki: pip install genanki") from err
    cards = _deck.check_cards(cards)
    nums = _deck.computed_numbers()
    number_of = {c.id: i for i, c in enumerate(cards, 1)}
    model = genanki.Model(
        MODEL_ID, "GRPO Lab card",
        fields=[{"name": "Front"}, {"name": "Back"}],
        templates=[{"name": "Card 1", "qfmt": "{{Front}}",
                    "afmt": '{{FrontSide}}<hr id="answer">{{Back}}'}],
        css=CSS)
    anki_deck = genanki.Deck(DECK_ID, DECK_NAME)
    for card in cards:
        fields = note_fields(card, number_of[card.id], nums, number_of, lang)
        anki_deck.add_note(genanki.Note(model=model, fields=fields, guid=note_guid(card.id),
                                        tags=[card.topic, card.chapter], sort_field=f"{number_of[card.id]:03d}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="grpo-lab-deck-") as work:
        collection = Path(work) / "collection.anki2"
        _write_collection(genanki.Package(anki_deck), collection)
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        os.close(fd)
        try:
            _write_zip(collection, partial)
            os.replace(partial, path)                 # the old deck until here, the new one after
        except BaseException:
            os.unlink(partial)
            raise
    return len(cards)


def _write_collection(package, db_path: Path) -> None:
    """Anki's SQLite collection of ``package`` (a ``genanki.Package``) at ``db_path``, with the
    fixed timestamp (genanki's own ``write_to_file`` makes it in ``$TMPDIR`` and leaves it)."""
    conn = sqlite3.connect(db_path)
    try:
        package.write_to_db(conn.cursor(), TIMESTAMP, itertools.count(int(TIMESTAMP * 1000)))
        conn.commit()
    finally:
        conn.close()


def _write_zip(collection: Path, target) -> None:
    """The ``.apkg``: the collection and an empty media map, deflated (Anki reads a deflated
    zip, as its own exports are; the text compresses about 4:1)."""
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.write(collection, "collection.anki2")
        z.writestr("media", json.dumps({}))

