"""The Anki package: one note per card of the deck, its numbers filled, its math for MathJax,
stable ids, and a command line that refuses a bad --out by name."""

import errno
import os
import sqlite3
import subprocess
import tempfile
import sys
import zipfile

import pytest

import grpo_lab as gl
from grpo_lab.deck import anki


def notes_of(path, tmp_path):
    with zipfile.ZipFile(path) as z:
        z.extract("collection.anki2", tmp_path)
    db = sqlite3.connect(tmp_path / "collection.anki2")
    try:
        return db.execute("select guid, flds, tags from notes order by id").fetchall()
    finally:
        db.close()


@pytest.fixture(scope="module")
def cards():
    return gl.deck.load_cards()


@pytest.fixture(scope="module")
def package(tmp_path_factory, cards):
    path = tmp_path_factory.mktemp("apkg") / "deck.apkg"
    assert anki.build_apkg(path, cards=cards) == len(cards)
    return path


def test_one_note_per_card_with_its_question_and_no_markup_left(package, cards, tmp_path):
    notes = notes_of(package, tmp_path)
    assert len(notes) == len(cards) >= 30
    assert [g for g, _, _ in notes] == [anki.note_guid(c.id) for c in cards]   # deck order
    for (guid, fields, tags), card in zip(notes, cards):
        front, back = fields.split("\x1f")
        assert card.topic in tags.split() and card.chapter in tags.split(), card.id
        assert front.count('lang="en"') == 1 and "taught in: GRPO Lab, " in back, card.id
        for text in (front, back):
            # every placeholder filled; every $..$ turned into \(..\) or \[..\]; no list numbers
            assert "{{" not in text and "$" not in text and "\ufffd" not in text, (card.id, text)
            assert "<ol>" not in text.split("</p>")[0], card.id
            assert ".ipynb" not in text, card.id                  # no link Anki cannot open
        if card.question_zh:
            assert 'lang="zh-CN"' in front and 'lang="zh-CN"' in back, card.id
            assert 'class="langs both"' in front, card.id


def test_the_package_is_deflated(package):
    with zipfile.ZipFile(package) as z:
        infos = z.infolist()
    assert infos and all(i.compress_type == zipfile.ZIP_DEFLATED for i in infos)
    assert sum(i.compress_size for i in infos) < 0.5 * sum(i.file_size for i in infos)


def test_a_number_and_a_formula_reach_the_note(package, cards, tmp_path):
    numbers = gl.deck.computed_numbers()
    card = next(c for c in cards if "{{p_equal:.0%}}" in c.answer)
    _, fields, _ = notes_of(package, tmp_path)[cards.index(card)]
    assert f"{numbers['p_equal']:.0%}" in fields
    assert "\\(p = 0.9\\)" in fields


def test_the_same_cards_give_the_same_notes(cards, tmp_path):
    """Stable ids and a fixed timestamp: a rebuilt package updates a reader's notes."""
    a, b = tmp_path / "a" / "d.apkg", tmp_path / "b" / "d.apkg"
    anki.build_apkg(a, cards=cards[:3])
    anki.build_apkg(b, cards=cards[:3])
    (tmp_path / "a2").mkdir(), (tmp_path / "b2").mkdir()
    assert notes_of(a, tmp_path / "a2") == notes_of(b, tmp_path / "b2")


def test_markdown_and_math_are_converted_for_anki():
    html = anki._markdown_to_html("Use `eps` and $\\sigma + 1 < 2$ or\n\n$$a_i = b$$\n\n"
                                  "[chapter 1](01_group_advantages.ipynb#x) and **bold**")
    assert "<code>eps</code>" in html and "\\(\\sigma + 1 &lt; 2\\)" in html
    assert "\\[a_i = b\\]" in html and "chapter 1" in html and "<a " not in html
    assert "<strong>bold</strong>" in html


def test_one_language_keeps_one_side(cards):
    card = next(c for c in cards if c.question_zh)
    nums = gl.deck.computed_numbers()
    front_en, _ = anki.note_fields(card, 1, nums, {card.id: 1}, lang="en")
    front_zh, _ = anki.note_fields(card, 1, nums, {card.id: 1}, lang="zh")
    assert 'lang="zh-CN"' not in front_en and 'lang="en"' not in front_zh


@pytest.mark.parametrize("kwargs, words", [
    ({"path": "deck.zip"}, r"^path: must end in .apkg"),
    ({"path": ".apkg"}, r"^path: must end in .apkg \(Anki's package\) after a name"),
    ({"path": "deck.apkg", "lang": "fr"}, r"^lang: expected one of 'both', 'en', 'zh', got 'fr'"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, words):
    kwargs["path"] = tmp_path / kwargs["path"]
    with pytest.raises(ValueError, match=words):
        anki.build_apkg(**kwargs)


def test_the_command_writes_the_package_and_refuses_a_bad_out(tmp_path):
    out = tmp_path / "deck.apkg"
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    done = subprocess.run([sys.executable, "-m", "grpo_lab.deck", "--out", str(out),
                           "--lang", "en"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cards written to" in done.stdout and zipfile.is_zipfile(out)
    assert list(scratch.iterdir()) == []                 # genanki's SQLite file is gone too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deck.apkg", "tmpdir"]
    bad = subprocess.run([sys.executable, "-m", "grpo_lab.deck", "--out", str(tmp_path / "d.txt")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "argument --out: must end in .apkg" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("out, words", [
    (".apkg", "must end in .apkg (Anki's package) after a name"),
    ("deck.zip", "must end in .apkg"),
    ("", "must end in .apkg"),
    ("{folder}", "must end in .apkg"),
    ("{folder}/x.apkg/", "which is a folder"),
])
def test_the_command_refuses_each_bad_out_in_one_line_before_any_work(tmp_path, out, words):
    (tmp_path / "x.apkg").mkdir()
    out = out.format(folder=tmp_path)
    bad = subprocess.run([sys.executable, "-m", "grpo_lab.deck", "--out", out],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert bad.stderr.splitlines()[-1].startswith("python -m grpo_lab.deck: error: argument "
                                                  "--out: ") and words in bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.apkg"]


def test_a_write_that_fails_half_way_leaves_the_older_deck_and_no_partial_file(
        tmp_path, cards, monkeypatch):
    out = tmp_path / "deck.apkg"
    anki.build_apkg(out, cards=cards[:2])
    before = out.read_bytes()

    def disk_full(collection, target):                  # half a zip, then ENOSPC
        with open(target, "wb") as f:
            f.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(anki, "_write_zip", disk_full)
    with pytest.raises(OSError, match="No space left"):
        anki.build_apkg(out, cards=cards[:3])
    assert out.read_bytes() == before and zipfile.is_zipfile(out)
    assert [p.name for p in tmp_path.iterdir()] == ["deck.apkg"]       # no .part left


def test_a_build_leaves_nothing_in_the_temporary_folder(tmp_path, cards, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))   # what $TMPDIR sets
    anki.build_apkg(tmp_path / "d.apkg", cards=cards[:2])
    assert list(scratch.iterdir()) == []
    with pytest.raises(ValueError):
        anki.build_apkg(tmp_path / "d.apkg", lang="fr")
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("call, exc, words", [
    (lambda c: anki.build_apkg(None), TypeError, r"^path: expected the .apkg file to write"),
    (lambda c: anki.build_apkg(b"d.apkg"), TypeError, r"^path: expected the .apkg file"),
    (lambda c: anki.build_apkg("d.apkg", lang=None), ValueError, r"^lang: expected one of"),
    (lambda c: anki.build_apkg("d.apkg", cards=[]), ValueError, r"^cards: expected at least one"),
    (lambda c: anki.build_apkg("d.apkg", cards="abc"), TypeError, r"^cards: expected a list of"),
    (lambda c: anki.build_apkg("d.apkg", cards=[c[0], "x"]), TypeError,
     r"^cards: expected a list of grpo_lab.deck.Card, got str 'x' at index 1"),
    (lambda c: anki.build_apkg("d.apkg", cards=[c[0], c[0]]), ValueError, r"^cards: .* twice"),
    (lambda c: anki.note_fields("card", 1, {}, {}), TypeError, r"^card: expected a grpo_lab"),
    (lambda c: anki.note_fields(c[0], 0, {}, {}), ValueError, r"^number: expected an integer"),
    (lambda c: anki.note_fields(c[0], 1, None, {}), TypeError, r"^nums: expected a dict"),
    (lambda c: anki.note_fields(c[0], 1, {}, {}, lang="de"), ValueError, r"^lang: "),
    (lambda c: anki.note_guid(3), TypeError, r"^card_id: expected a str"),
    (lambda c: gl.deck.answer_texts(None, str), TypeError, r"^card: expected a grpo_lab.deck.Card"),
    (lambda c: gl.deck.answer_texts(c[0], None), TypeError, r"^fill: expected a function"),
    (lambda c: gl.deck.answer_texts(c[0], len), TypeError,
     r"^fill: expected a function from text to text, got one that returned int"),
])
def test_the_anki_functions_check_their_arguments(tmp_path, monkeypatch, cards, call, exc, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(exc, match=words):
        call(cards)
    assert list(tmp_path.iterdir()) == []                  # refused before writing anything
