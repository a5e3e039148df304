"""The interview deck as data: the cards in ``cards/*.toml``, their numbers in providers.

A card is a ``[[card]]`` table (read with ``tomllib``)::

    [[card]]
    id = "all-equal-group"                  # unique, kebab-case, stable
    topic = "advantages"                    # one of TOPICS
    chapter = "01_group_advantages"         # chapters/<chapter>.ipynb teaches it
    section = "The eps guard and the all-equal group"   # a ## or ### heading of that chapter
    question = "..."
    answer = '''MyST Markdown; a computed number is {{p_equal:.0%}}.'''
    follow_ups = []                         # optional
    given = ["8", "0.9"]                    # the literal numbers the texts may state
    # question_zh, answer_zh, follow_ups_zh: the same card in 中文, with the same placeholders

``{{name[:spec]}}`` is a number computed by a provider (:mod:`grpo_lab.deck.registry`);
``{{q:card-id}}`` is the number another card has in the deck, so that a cross reference
("question {{q:dapo-changes}}") follows the deck's order. Links to chapters are written
relative to ``chapters/`` (``[chapter 3](03_kl_estimators.ipynb)``).

:func:`load_cards` reads and checks every card; :func:`markdown` renders cards as MyST
Markdown; :func:`show` displays them in a notebook. Chapter 9 renders each topic with
``gl.deck.show("<topic>")``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grpo_lab.deck import registry
from grpo_lab.numerics.validate import check_choice, check_int, describe

CARDS_DIR = Path(__file__).resolve().parent / "cards"
# the book's chapters, when the package runs from the repository (not in an installed wheel)
CHAPTERS_DIR = Path(__file__).resolve().parents[2] / "chapters"

# the deck's sections, in the order chapter 9 shows them
TOPICS = ("advantages", "ppo", "kl", "precision", "rewards", "loop", "neighbours", "expert")
REQUIRED = ("id", "topic", "chapter", "section", "question", "answer")
OPTIONAL = ("question_zh", "answer_zh", "follow_ups", "follow_ups_zh", "given")
LANGS = ("both", "en", "zh")
CARD_REF = re.compile(r"\{\{q:([^{}]*)\}\}")
ID = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# a chapter's link target inside an answer: 03_kl_estimators.ipynb or 03_kl_estimators.ipynb#x
CHAPTER_LINK = re.compile(r"\]\((\d\d[a-z]?_[A-Za-z0-9_]+\.ipynb(?:#[^)\s]*)?)\)")


class CardError(ValueError):
    """A card that breaks a rule of the deck; the message names the file, the card and the field."""


# --- argument checks (one per kind of argument the deck's functions take) ---------------------

def check_folder(name: str, value, default: Path) -> Path:
    """A folder argument: None (``default``), a non-empty str or a path-like, as a Path."""
    if value is None:
        return default
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise TypeError(f"{name}: expected a folder (a str or a path), got {describe(value)}")
    if not os.fspath(value):
        raise ValueError(f"{name}: expected a folder, got '' (write '.' for this folder)")
    return Path(value)


def check_text(name: str, value) -> str:
    """A text argument (a heading, a chapter's stem, a card's text): a str."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {describe(value)}")
    return value


def check_page(page) -> str:
    """``page``: a non-empty path from the repository root, as a str."""
    if not isinstance(page, str) or not page:
        raise (TypeError if not isinstance(page, str) else ValueError)(
            f"page: expected a path from the repository root such as 'cheatsheet.md', got "
            f"{describe(page)}")
    return page


def check_cards(cards) -> list:
    """``cards``: None (the deck, :func:`load_cards`) or a non-empty list or tuple of Card with
    unique ids, as a list."""
    if cards is None:
        return load_cards()
    if not isinstance(cards, (list, tuple)):
        raise TypeError(f"cards: expected a list of grpo_lab.deck.Card (load_cards() gives "
                        f"one), got {describe(cards)}")
    if not cards:
        raise ValueError("cards: expected at least one card, got an empty list")
    bad = next((i for i, c in enumerate(cards) if not isinstance(c, Card)), None)
    if bad is not None:
        raise TypeError(f"cards: expected a list of grpo_lab.deck.Card, got "
                        f"{describe(cards[bad])} at index {bad}")
    ids = [c.id for c in cards]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"cards: expected each card once, got id {twice!r} twice")
    return list(cards)


def check_card(name: str, card) -> "Card":
    if not isinstance(card, Card):
        raise TypeError(f"{name}: expected a grpo_lab.deck.Card (an item of load_cards()), "
                        f"got {describe(card)}")
    return card


@dataclass(frozen=True)
class Card:
    id: str
    topic: str
    chapter: str
    section: str
    question: str
    answer: str
    follow_ups: tuple = ()
    given: tuple = ()
    question_zh: str | None = None
    answer_zh: str | None = None
    follow_ups_zh: tuple | None = None
    file: str = ""

    def texts(self):
        """(field, text) of every text of the card, both languages."""
        out = [("question", self.question), ("answer", self.answer)]
        out += [(f"follow_ups[{i}]", t) for i, t in enumerate(self.follow_ups)]
        if self.question_zh is not None:
            out.append(("question_zh", self.question_zh))
        if self.answer_zh is not None:
            out.append(("answer_zh", self.answer_zh))
        out += [(f"follow_ups_zh[{i}]", t) for i, t in enumerate(self.follow_ups_zh or ())]
        return out

    @property
    def has_zh(self) -> bool:
        return self.question_zh is not None and self.answer_zh is not None


def chapter_headings(stem: str, chapters_dir: Path = CHAPTERS_DIR) -> list[str]:
    """The text of every ## and ### heading of ``chapters/<stem>.ipynb``, in order."""
    stem = check_text("stem", stem)
    path = check_folder("chapters_dir", chapters_dir, CHAPTERS_DIR) / f"{stem}.ipynb"
    if not path.is_file():
        raise ValueError(f"stem: expected the name of a chapter, such as '01_group_advantages', "
                         f"got {stem!r}: {path.name} is not a file")
    return list(_headings(str(path)))


@functools.lru_cache(maxsize=None)
def _headings(path: str) -> tuple[str, ...]:
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    out = []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        in_code = False
        for line in "".join(cell["source"]).splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                in_code = not in_code
            m = re.match(r"^#{2,3} (.+?)\s*$", line)
            if m and not in_code:
                out.append(m.group(1))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def computed_numbers() -> dict:
    """Every number of the deck, by name (computed once per session)."""
    return registry.compute_numbers()


def _error(file, card_id, field, problem):
    who = f"card {card_id!r}" if card_id else "a card"
    return CardError(f"{file}: {who}: {field}: {problem}")


def _read(path: Path) -> list[dict]:
    """The ``[[card]]`` tables of one file; a file that is not UTF-8 TOML of such tables (a
    folder, Latin-1 or UTF-16 text, nesting past the parser's depth) is a CardError naming it."""
    if path.is_dir():
        raise CardError(f"{path.name}: expected a card file (TOML), got a folder")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CardError(f"{path.name}: expected UTF-8 text (TOML), got the byte "
                        f"{err.object[err.start:err.start + 1]!r} at offset {err.start}, which "
                        f"is not UTF-8 (a Latin-1 or UTF-16 file? save it as UTF-8)") from None
    except OSError as err:
        raise CardError(f"{path.name}: cannot be read: {err.strerror or err}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CardError(f"{path.name}: not valid TOML: {err}") from None
    except RecursionError:
        raise CardError(f"{path.name}: not valid card TOML: arrays or tables nested too deeply "
                        f"to read (a card's fields are strings and lists of strings)") from None
    extra = set(data) - {"card"}
    if extra:
        raise CardError(f"{path.name}: unknown top-level key(s) {sorted(extra)}; "
                        f"cards are [[card]] tables")
    cards = data.get("card", [])
    if not isinstance(cards, list) or not all(isinstance(c, dict) for c in cards):
        got = next((c for c in cards if not isinstance(c, dict)), None) \
            if isinstance(cards, list) else cards
        raise CardError(f"{path.name}: expected cards as [[card]] tables, got a card that is "
                        f"{describe(got)}")
    return cards


def _check_text_list(name, raw, file, cid, field):
    value = raw.get(field, [])
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise _error(file, cid, field, "must be a list of strings")
    return tuple(value)


def _card(raw: dict, file: str) -> Card:
    cid = raw.get("id") if isinstance(raw.get("id"), str) else None
    unknown = set(raw) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise _error(file, cid, sorted(unknown)[0],
                     f"unknown field (a card has {', '.join(REQUIRED + OPTIONAL)})")
    for field in REQUIRED + ("question_zh", "answer_zh"):
        if field in raw and not (isinstance(raw[field], str) and raw[field].strip()):
            raise _error(file, cid, field, "must be a non-empty string")
        if field in REQUIRED and field not in raw:
            raise _error(file, cid, field, "missing (every card needs it)")
    if not ID.fullmatch(cid):
        raise _error(file, cid, "id", "must be kebab-case: lower-case words joined by '-'")
    if ("question_zh" in raw) != ("answer_zh" in raw):
        missing = "answer_zh" if "question_zh" in raw else "question_zh"
        raise _error(file, cid, missing, "missing: a card in 中文 has both question_zh and answer_zh")
    follow_ups = _check_text_list("follow_ups", raw, file, cid, "follow_ups")
    follow_ups_zh = None
    if "follow_ups_zh" in raw:
        follow_ups_zh = _check_text_list("follow_ups_zh", raw, file, cid, "follow_ups_zh")
        if len(follow_ups_zh) != len(follow_ups):
            raise _error(file, cid, "follow_ups_zh",
                         f"{len(follow_ups_zh)} entries for {len(follow_ups)} follow_ups")
    elif follow_ups and "answer_zh" in raw:
        raise _error(file, cid, "follow_ups_zh", "missing: the card is in 中文 and has follow_ups")
    given = _check_text_list("given", raw, file, cid, "given")
    return Card(id=cid, topic=raw["topic"], chapter=raw["chapter"], section=raw["section"],
                question=raw["question"], answer=raw["answer"], follow_ups=follow_ups,
                given=given, question_zh=raw.get("question_zh"), answer_zh=raw.get("answer_zh"),
                follow_ups_zh=follow_ups_zh, file=file)


def _placeholder_set(text: str):
    return sorted(registry.placeholders(text))


def load_cards(cards_dir=None, *, chapters_dir=None, numbers_=None) -> list[Card]:
    """Every card of the deck, in deck order (topics as in TOPICS, then files by name and
    position), each checked; a card that breaks a rule raises :class:`CardError` naming its
    file, its id and the field.

    The rules: required fields present; unique kebab-case ids; a known topic; the chapter's
    notebook exists and ``section`` is one of its ## or ### headings (checked when the
    chapters are there, as in the repository); every placeholder has a computed number and a
    format spec that fits it; every ``{{q:id}}`` names a card; every literal number is in
    ``given``; and 中文 texts quote the same placeholders as their English.
    """
    cards_dir = check_folder("cards_dir", cards_dir, CARDS_DIR)
    chapters_dir = check_folder("chapters_dir", chapters_dir, CHAPTERS_DIR)
    if numbers_ is not None and not isinstance(numbers_, dict):
        raise TypeError(f"numbers_: expected None (the deck's numbers) or a dict of them by "
                        f"name, got {describe(numbers_)}")
    if not cards_dir.is_dir():
        raise CardError(f"cards_dir: expected a folder of card files (*.toml), got "
                        f"{str(cards_dir)!r}, which is not a folder")
    files = sorted(cards_dir.glob("*.toml"))
    if not files:
        raise CardError(f"{cards_dir}: no card files (*.toml)")
    cards, seen = [], {}
    for path in files:
        for raw in _read(path):
            card = _card(raw, path.name)
            if card.id in seen:
                raise _error(path.name, card.id, "id", f"already used in {seen[card.id]}")
            seen[card.id] = path.name
            cards.append(card)
    nums = computed_numbers() if numbers_ is None else numbers_
    check_chapters = chapters_dir.is_dir()
    for card in cards:
        fail = functools.partial(_error, card.file, card.id)
        if card.topic not in TOPICS:
            raise fail("topic", f"{card.topic!r} is not one of {', '.join(TOPICS)}")
        if check_chapters:
            if not (chapters_dir / f"{card.chapter}.ipynb").is_file():
                raise fail("chapter", f"chapters/{card.chapter}.ipynb does not exist")
            if card.section not in chapter_headings(card.chapter, chapters_dir):
                raise fail("section", f"{card.section!r} is not a ## or ### heading of "
                                      f"{card.chapter}")
        allowed = set(card.given)
        for field, text in card.texts():
            for ref in CARD_REF.findall(text):
                if ref not in seen:
                    raise fail(field, f"{{{{q:{ref}}}}} names no card")
            plain = CARD_REF.sub(" ", text)
            rest = registry.PLACEHOLDER.sub(" ", plain)
            if "{{" in rest:                       # {{p_equal  or  {{ p_equal }}: raw braces
                at = rest.index("{{")
                raise fail(field, f"a placeholder that is not closed or not well formed near "
                                  f"{rest[at:at + 30]!r}: write {{{{name}}}} or "
                                  f"{{{{name:spec}}}}, without spaces")
            for name, spec in registry.placeholders(plain):
                if name not in nums:
                    raise fail(field, f"{{{{{name}}}}} is computed by no provider")
                try:
                    format(nums[name], spec or "")
                except (ValueError, TypeError) as err:
                    raise fail(field, f"{{{{{name}:{spec}}}}}: {err}") from None
            stray = [x for x in registry.literal_numbers(plain) if x not in allowed]
            if stray:
                raise fail(field, f"literal number(s) {stray} not in given (a result is a "
                                  f"{{{{placeholder}}}}; a setting or citation goes in given)")
        pairs = [("question", "question_zh"), ("answer", "answer_zh")]
        pairs += [(f"follow_ups[{i}]", f"follow_ups_zh[{i}]")
                  for i in range(len(card.follow_ups_zh or ()))]
        texts = dict(card.texts())
        for en, zh in pairs:
            if zh in texts and (_placeholder_set(texts[en]) != _placeholder_set(texts[zh])
                                or sorted(CARD_REF.findall(texts[en]))
                                != sorted(CARD_REF.findall(texts[zh]))):
                raise fail(zh, f"quotes other placeholders than {en}")
    order = {t: i for i, t in enumerate(TOPICS)}
    return sorted(cards, key=lambda c: order[c.topic])      # stable: file order within a topic


# --- rendering --------------------------------------------------------------------------

def chapter_label(stem: str) -> str:
    """'01_group_advantages' -> 'chapter 1'; '06b_real_model' -> 'chapter 6b'."""
    m = re.match(r"(\d+)([a-z]?)_", check_text("stem", stem))
    return f"chapter {int(m.group(1))}{m.group(2)}" if m else stem


def anchor(heading: str) -> str:
    """The slug MyST gives a ## or ### heading (``myst_heading_anchors`` in _config.yml), which
    the site resolves to the heading's id: its words and inline code with the math left out,
    lower case, each space a '-', other punctuation dropped (myst-parser's default_slugify)."""
    text = re.sub(r"\$[^$]*\$", "", check_text("heading", heading)).replace("`", "")
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", text.lower().replace(" ", "-"))


def _fix_links(text: str, page: str) -> str:
    """Links written relative to chapters/ made relative to ``page`` (a path from the root)."""
    base = os.path.dirname(page) or "."
    if os.path.normpath(base) == "chapters":
        return text
    rel = os.path.relpath("chapters", base)
    return CHAPTER_LINK.sub(lambda m: f"]({rel}/{m.group(1)})", text)


def _fill(text: str, nums: dict, number_of: dict) -> str:
    text = CARD_REF.sub(lambda m: str(number_of[m.group(1)]), text)
    return registry.fill(text, nums).strip()


def _lang_blocks(en: str, zh: str | None, lang: str) -> str:
    """English and 中文 as sibling blocks in one ``gl-card-langs`` box (the site sets them side
    by side on a wide screen, stacked on a phone); only English when the card has no 中文 yet."""
    parts = []
    if lang in ("both", "en") or zh is None:
        parts.append(f'<div class="gl-card-en" lang="en">\n\n{en}\n\n</div>')
    if lang in ("both", "zh") and zh is not None:
        parts.append(f'<div class="gl-card-zh" lang="zh-CN">\n\n{zh}\n\n</div>')
    return '<div class="gl-card-langs">\n' + "\n".join(parts) + "\n</div>"


def answer_texts(card: Card, fill) -> tuple:
    """(English, 中文 or None) Markdown of a card's answer with its follow-ups, each text
    passed through ``fill`` (a function from text to text); the site (:func:`render_card`) and
    Anki (:mod:`.anki`) share it."""
    check_card("card", card)
    if not callable(fill):
        raise TypeError(f"fill: expected a function from a card's text to text, got "
                        f"{describe(fill)}")
    given = fill

    def fill(text):
        out = given(text)
        if not isinstance(out, str):
            raise TypeError(f"fill: expected a function from text to text, got one that "
                            f"returned {describe(out)}")
        return out

    a_en = fill(card.answer)
    a_zh = fill(card.answer_zh) if card.answer_zh else None
    if card.follow_ups:
        a_en += "\n\n**Follow-ups:**\n\n" + "\n".join(f"- {fill(t)}" for t in card.follow_ups)
        if a_zh is not None and card.follow_ups_zh:
            a_zh += "\n\n**追问：**\n\n" + "\n".join(f"- {fill(t)}" for t in card.follow_ups_zh)
    return a_en, a_zh


def render_card(card: Card, number: int, *, lang="both", page="chapters/09_interview_drills.ipynb",
                nums=None, number_of=None) -> str:
    """One card as MyST Markdown (see :func:`markdown`)."""
    check_card("card", card)
    number = check_int("number", number, minimum=1)
    lang, page = check_choice("lang", lang, LANGS), check_page(page)
    for name, value in (("nums", nums), ("number_of", number_of)):
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"{name}: expected None or a dict, got {describe(value)}")
    nums = computed_numbers() if nums is None else nums
    number_of = number_of or {card.id: number}
    fill = functools.partial(_fill, nums=nums, number_of=number_of)
    q_en = f"**{number}. {fill(card.question)}**"
    q_zh = f"**{number}. {fill(card.question_zh)}**" if card.question_zh else None
    a_en, a_zh = answer_texts(card, fill)
    where = f"{chapter_label(card.chapter)}, {card.section}"
    link = _fix_links(f"[{where}]({card.chapter}.ipynb#{anchor(card.section)})", page)
    return (f'<div class="gl-card" id="card-{card.id}" data-topic="{card.topic}">\n'
            f'<div class="gl-card-q">\n{_lang_blocks(q_en, q_zh, lang)}\n</div>\n'
            f'<details class="gl-card-a">\n<summary>Answer · 答案</summary>\n\n'
            f'{_fix_links(_lang_blocks(a_en, a_zh, lang), page)}\n\n</details>\n\n'
            f'<div class="gl-card-where">\n\ntaught in: {link}\n\n</div>\n'
            f'</div>\n')


def markdown(topic=None, lang="both", page="chapters/09_interview_drills.ipynb", *,
             cards=None) -> str:
    """The MyST Markdown of the deck's cards (all, or one topic's), numbered in deck order.

    Each card: the question as a bold line with its number; the answer collapsed in an HTML
    ``<details>`` (collapsed in JupyterLab, Colab and on the site); then a link to the section
    that teaches it. English and 中文 are sibling blocks, ``<div class="gl-card-en"
    lang="en">`` and ``<div class="gl-card-zh" lang="zh-CN">``; ``lang`` "en" or "zh" keeps
    one (a card without 中文 shows English). ``page`` is the path from the repository root of
    the page the Markdown goes in, so that chapter links resolve. A topic without cards gives
    "".
    """
    if topic is not None:
        check_choice("topic", topic, TOPICS)
    lang, page = check_choice("lang", lang, LANGS), check_page(page)
    deck = check_cards(cards)
    number_of = {c.id: i for i, c in enumerate(deck, 1)}
    nums = computed_numbers()
    return "\n".join(render_card(c, number_of[c.id], lang=lang, page=page, nums=nums,
                                 number_of=number_of)
                     for c in deck if topic is None or c.topic == topic)


#: each topic's title in the cheat sheet's list of questions (English, 中文)
TOPIC_TITLES = {
    "advantages": ("Advantages", "优势"),
    "ppo": ("From PPO to GRPO", "从 PPO 到 GRPO"),
    "kl": ("The KL penalty", "KL 惩罚"),
    "precision": ("Low precision", "低精度"),
    "rewards": ("Rewards and reward hacking", "奖励与奖励投机"),
    "loop": ("The training loop, performance and production", "训练循环、性能与生产"),
    "neighbours": ("The neighbouring methods", "相邻方法"),
    "expert": ("Questions an expert adds", "专家追问"),
}


def questions_markdown(page="cheatsheet.md", *, cards=None) -> str:
    """Every card's question, EN and 中文, by topic and numbered as in chapter 9, each linked
    to its card there: the cheat sheet's list of questions (``_ext/grpo_site.py`` puts it in
    place of ``<!-- deck-questions -->`` when the book builds). ``page`` is the path from the
    repository root of the page it goes in."""
    page = check_page(page)
    deck = check_cards(cards)
    number_of = {c.id: i for i, c in enumerate(deck, 1)}
    nums = computed_numbers()
    chapter9 = os.path.relpath("chapters/09_interview_drills.html", os.path.dirname(page) or ".")
    out = []
    for topic in TOPICS:
        mine = [c for c in deck if c.topic == topic]
        if not mine:
            continue
        en, zh = TOPIC_TITLES[topic]
        out.append(f"**{en} {zh}**\n")
        for card in mine:
            question = " ".join(_fill(card.question, nums, number_of).split())
            if card.question_zh:
                question += " · " + " ".join(_fill(card.question_zh, nums, number_of).split())
            out.append(f'{number_of[card.id]}. {question} '
                       f'<a href="{chapter9}#card-{card.id}">answer 答案</a>')
        out.append("")
    return _fix_links("\n".join(out), page)


def show(topic=None, lang="both"):
    """Display the cards of ``topic`` (all cards if None) in a notebook; nothing if it has none."""
    text = markdown(topic, lang=lang)                 # checks topic and lang
    if text:
        from IPython.display import Markdown, display
        display(Markdown(text))


__all__ = ["TOPICS", "TOPIC_TITLES", "questions_markdown", "Card", "CardError", "load_cards", "markdown", "show", "computed_numbers",
           "chapter_headings", "render_card", "anchor", "chapter_label"]
