"""The interview deck as data: every card valid, every number computed, every card rendered in
chapter 9, and each rule of the loader caught on a broken card (one test per rule)."""

import json
import re
import shutil
from pathlib import Path

import pytest

import grpo_lab as gl
from grpo_lab.deck import CardError, load_cards, markdown, registry

ROOT = Path(__file__).resolve().parents[2]
CARDS = ROOT / "grpo_lab" / "deck" / "cards"
CHAPTER9 = ROOT / "chapters" / "09_interview_drills.ipynb"


@pytest.fixture(scope="module")
def cards():
    return load_cards()


@pytest.fixture(scope="module")
def numbers():
    return gl.deck.computed_numbers()


def test_the_deck_has_the_migrated_cards_with_unique_ids(cards):
    assert len(cards) >= 45
    ids = [c.id for c in cards]
    assert len(set(ids)) == len(ids)
    assert {c.topic for c in cards} >= {"advantages", "ppo", "kl", "precision", "rewards",
                                         "loop", "expert"}


def test_cards_are_in_topic_order(cards):
    order = [gl.deck.TOPICS.index(c.topic) for c in cards]
    assert order == sorted(order)


def test_every_placeholder_is_computed_and_every_number_is_quoted(cards, numbers):
    quoted = set()
    for card in cards:
        for field, text in card.texts():
            for name, spec in registry.placeholders(gl.deck.CARD_REF.sub(" ", text)):
                assert name in numbers, (card.id, field, name)
                format(numbers[name], spec or "")
                quoted.add(name)
    migrated = {n for f, names in registry._DECLARED.items()
                if f.__module__ == "grpo_lab.deck.numbers" for n in names}
    assert migrated and migrated <= quoted, f"computed but never quoted: {migrated - quoted}"


def test_no_literal_number_outside_given(cards):
    for card in cards:
        for field, text in card.texts():
            stray = set(registry.literal_numbers(gl.deck.CARD_REF.sub(" ", text))) - set(card.given)
            assert not stray, (card.id, field, stray)


def test_every_card_names_an_existing_chapter_and_section(cards):
    for card in cards:
        path = ROOT / "chapters" / f"{card.chapter}.ipynb"
        assert path.is_file(), (card.id, card.chapter)
        assert card.section in gl.deck.chapter_headings(card.chapter), (card.id, card.section)


def test_some_numbers_the_cards_quote(numbers):
    """A few values the answers state in words, checked against what the text says of them."""
    assert numbers["p_equal"] == pytest.approx(0.9 ** 8 + 0.1 ** 8)
    assert numbers["bessel_ratio"] == pytest.approx((3 / 4) ** 0.5)
    assert numbers["eps_in_fp16"] == 0.0                            # "the guard vanishes"
    assert numbers["bf16_sum"] == -256.0                            # "not -4096"
    assert numbers["bf16_coarser"] == 8.0
    assert numbers["fp16_exp_overflow"] == pytest.approx(11.09, abs=0.01)
    assert numbers["G_needed"] == 22
    assert numbers["clip_pos"] == pytest.approx(-1.2) and numbers["clip_neg_dual"] == 3.0


def stored_markdown():
    """The text/markdown outputs of chapter 9's stored run, by the topic each cell shows."""
    out = {}
    for cell in json.loads(CHAPTER9.read_text())["cells"]:
        src = "".join(cell["source"])
        src = re.sub(r"^# @title[^\n]*\n", "", src.lstrip())     # Colab's form title
        m = re.fullmatch(r'gl\.deck\.show\("(\w+)"\)', src.strip())
        if cell["cell_type"] == "code" and m:
            out[m.group(1)] = "".join(
                "".join(o["data"]["text/markdown"]) for o in cell.get("outputs", [])
                if "text/markdown" in o.get("data", {}))
    return out


def test_chapter_nine_shows_every_topic_once_hidden_and_checked():
    cells = [c for c in json.loads(CHAPTER9.read_text())["cells"]
             if c["cell_type"] == "code" and "gl.deck.show(" in "".join(c["source"])]
    topics = [re.search(r'show\("(\w+)"\)', "".join(c["source"])).group(1) for c in cells]
    assert topics == list(gl.deck.TOPICS)
    for cell in cells:
        assert {"hide-input", "nbval-check-output"} <= set(cell["metadata"]["tags"])


def test_the_chapter_nine_rendering_holds_every_card_filled(cards, numbers):
    stored = stored_markdown()
    number_of = {c.id: i for i, c in enumerate(cards, 1)}
    for card in cards:
        question = gl.deck._fill(card.question, numbers, number_of)
        assert f"**{number_of[card.id]}. {question}**" in stored[card.topic], card.id
    assert "{{" not in "".join(stored.values()), "an unfilled placeholder in chapter 9"
    assert "{glue:" not in CHAPTER9.read_text().split("## The question deck")[1], "old glue left"


def test_the_stored_rendering_is_what_the_deck_renders_now():
    for topic, text in stored_markdown().items():
        assert text == markdown(topic), f"{topic}: re-execute chapter 9"


def test_a_card_renders_collapsed_with_both_language_blocks_and_its_link(cards):
    card = cards[0]
    text = gl.deck.render_card(card, 1)
    assert re.search(r'<details class="gl-card-a">\n<summary>[^<]+</summary>\n\n', text)
    assert '<div class="gl-card-en" lang="en">\n\n' in text
    assert "taught in: [chapter 1, Why GRPO drops the critic]" \
           "(01_group_advantages.ipynb#why-grpo-drops-the-critic)" in text
    zh = gl.deck.Card(**{**card.__dict__, "question_zh": "问题", "answer_zh": "答案"})
    both = gl.deck.render_card(zh, 1)
    assert '<div class="gl-card-zh" lang="zh-CN">\n\n**1. 问题**' in both
    assert "答案" in both and "答案" not in gl.deck.render_card(zh, 1, lang="en").split(
        "</summary>")[1]
    assert "gl-card-en" not in gl.deck.render_card(zh, 1, lang="zh")


def test_links_are_fixed_for_a_page_outside_chapters(cards):
    text = markdown("advantages", page="cheatsheet.md")
    assert "](chapters/01_group_advantages.ipynb#" in text
    assert "](01_group_advantages.ipynb" not in text


def test_cross_references_follow_the_deck_order(cards):
    number_of = {c.id: i for i, c in enumerate(cards, 1)}
    text = markdown("advantages")
    assert f"question {number_of['difficulty-filtering']}" in text


def test_an_empty_topic_renders_as_nothing(cards):
    assert markdown("neighbours", cards=[c for c in cards if c.topic != "neighbours"]) == ""


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="topic"):
        markdown("nope")
    with pytest.raises(ValueError, match="lang"):
        markdown(lang="fr")


# --- each rule of load_cards, on a broken copy of the deck ------------------------------

GOOD = '''
[[card]]
id = "a-good-card"
topic = "advantages"
chapter = "01_group_advantages"
section = "The shape flow"
question = "What is {{p_equal:.1%}} at G = 8?"
answer = """The chance of an all-equal group, {{p_equal:.3f}}, at pass rate 0.9."""
given = ["8", "0.9"]
'''


def deck_with(tmp_path, text, name="50_broken.toml"):
    folder = tmp_path / "cards"
    folder.mkdir()
    (folder / name).write_text(text)
    return folder


def broken(tmp_path, old, new):
    assert old in GOOD
    return deck_with(tmp_path, GOOD.replace(old, new))


def test_the_good_card_loads(tmp_path):
    cards = load_cards(deck_with(tmp_path, GOOD))
    assert [c.id for c in cards] == ["a-good-card"]


@pytest.mark.parametrize("old, new, field, words", [
    ('topic = "advantages"\n', "", "topic", "missing"),
    ('question = "What is {{p_equal:.1%}} at G = 8?"', 'question = "  "', "question", "non-empty"),
    ('id = "a-good-card"', 'id = "A good card"', "id", "kebab-case"),
    ('topic = "advantages"', 'topic = "advantage"', "topic", "not one of"),
    ('chapter = "01_group_advantages"', 'chapter = "01_no_such_chapter"', "chapter",
     "does not exist"),
    ('section = "The shape flow"', 'section = "The Shape Flow"', "section", "heading"),
    ("{{p_equal:.3f}}", "{{p_unequal:.3f}}", "answer", "no provider"),
    ("{{p_equal:.3f}}", "{{p_equal:.3q}}", "answer", "p_equal:.3q"),
    ("{{p_equal:.3f}}", "0.43", "answer", "not in given"),
    ("pass rate 0.9.", "pass rate 0.9, see question {{q:no-such-card}}.", "answer", "names no card"),
    ('given = ["8", "0.9"]', 'given = ["8", "0.9"]\nanwser = "typo"', "anwser", "unknown field"),
    ('given = ["8", "0.9"]', 'given = ["8", "0.9"]\nquestion_zh = "G = 8 时 {{p_equal:.1%}}？"\n'
     'answer_zh = """概率是 0.9。"""', "answer_zh", "other placeholders"),
    ('given = ["8", "0.9"]', 'given = ["8", "0.9"]\nquestion_zh = "G = 8 时？"', "answer_zh",
     "both"),
    ('given = ["8", "0.9"]', 'given = ["8", "0.9"]\nfollow_ups = ["Why?"]\n'
     'follow_ups_zh = []', "follow_ups_zh", "entries"),
    ('given = ["8", "0.9"]', 'given = "8"', "given", "list of strings"),
])
def test_a_broken_card_is_named_with_its_file_id_and_field(tmp_path, old, new, field, words):
    folder = broken(tmp_path, old, new)
    with pytest.raises(CardError) as err:
        load_cards(folder)
    message = str(err.value)
    card_id = "A good card" if field == "id" else "a-good-card"
    assert message.startswith(f"50_broken.toml: card {card_id!r}: {field}: "), message
    assert words in message, message


def test_a_duplicate_id_is_named_with_both_files(tmp_path):
    folder = deck_with(tmp_path, GOOD)
    (folder / "51_again.toml").write_text(GOOD)
    with pytest.raises(CardError, match=r"^51_again\.toml: card 'a-good-card': id: already "
                                        r"used in 50_broken\.toml"):
        load_cards(folder)


def test_a_file_that_is_not_toml_is_named(tmp_path):
    with pytest.raises(CardError, match=r"^50_broken\.toml: not valid TOML"):
        load_cards(deck_with(tmp_path, GOOD + "\n[[card]\n"))


def test_the_real_deck_loads_from_a_copy(tmp_path):
    """The loader reads any folder: a copy of the real cards gives the same deck."""
    shutil.copytree(CARDS, tmp_path / "copy")
    assert [c.id for c in load_cards(tmp_path / "copy")] == [c.id for c in load_cards()]


def test_a_section_link_uses_the_slug_myst_gives_the_heading():
    """myst_heading_anchors (in _config.yml) resolves these slugs to the headings' ids; the
    site test of internal links then checks every card's link on the built page."""
    from myst_parser.mdit_to_docutils.base import default_slugify

    for heading in ("Pitfall 5: the training/inference mismatch", "Why GRPO drops the critic",
                    "Length shaping: DAPO's overlong punishment"):
        assert gl.deck.anchor(heading) == default_slugify(heading)
    assert gl.deck.anchor("What $\\beta$ does") == "what--does"        # math is not in a slug
    assert gl.deck.anchor("Drill: `my_gae`") == default_slugify("Drill: my_gae")


def test_the_cheat_sheet_lists_every_question_numbered_and_linked_to_its_answer(cards):
    text = gl.deck.questions_markdown(page="cheatsheet.md")
    number_of = {c.id: i for i, c in enumerate(cards, 1)}
    for card in cards:
        line = next(t for t in text.splitlines() if f'#card-{card.id}"' in t)
        assert line.startswith(f"{number_of[card.id]}. "), card.id
        assert 'href="chapters/09_interview_drills.html#card-' in line
        if card.question_zh:
            assert " · " in line, card.id
    assert "{{" not in text
    assert gl.deck.questions_markdown(page="a/b.md").count('href="../chapters/09_') == len(cards)
    with pytest.raises(ValueError, match=r"^page: expected a path from the repository root"):
        gl.deck.questions_markdown(page="")


# --- issue 37: hostile card files and arguments, each a CardError or a TypeError naming it ------

@pytest.mark.parametrize("new, words", [
    ("{{p_equal:.3f", r"answer: a placeholder that is not closed or not well formed near "
                      r"'\{\{p_equal:.3f, at pass rate 0.'"),
    ("{{ p_equal }}", r"answer: a placeholder that is not closed .* near '\{\{ p_equal \}\}"),
    ("{{p_equal :.3f}}", r"answer: a placeholder that is not closed"),
    ("{{}}", r"answer: a placeholder that is not closed"),
])
def test_a_placeholder_left_open_or_spaced_is_refused_at_load(tmp_path, new, words):
    with pytest.raises(CardError, match=rf"^50_broken\.toml: card 'a-good-card': {words}"):
        load_cards(broken(tmp_path, "{{p_equal:.3f}}", new))


@pytest.mark.parametrize("text, words", [
    ('card = "a string"\n', r"expected cards as \[\[card\]\] tables, got a card that is str 'a string'"),
    ("card = 3\n", r"expected cards as \[\[card\]\] tables, got a card that is int 3"),
    ('card = ["a", "b"]\n', r"expected cards as \[\[card\]\] tables, got a card that is str 'a'"),
    ("card = [[1]]\n", r"expected cards as \[\[card\]\] tables, got a card that is a list"),
    ("card = " + "[" * 5000 + "]" * 5000 + "\n", r"(nested too deeply|not valid TOML)"),
    ("x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", r"(nested too deeply|not valid TOML)"),
])
def test_a_card_that_is_not_a_table_is_named_with_its_file(tmp_path, text, words):
    with pytest.raises(CardError, match=rf"^50_broken\.toml: .*{words}"):
        load_cards(deck_with(tmp_path, text))


@pytest.mark.parametrize("encoding, byte", [("latin-1", r"b'\\xe9'"), ("utf-16", r"b'\\xff'")])
def test_a_file_that_is_not_utf8_is_named_with_the_byte(tmp_path, encoding, byte):
    folder = tmp_path / "cards"
    folder.mkdir()
    (folder / "50_broken.toml").write_bytes(GOOD.replace("What is", "Qu'est-ce é").encode(encoding))
    with pytest.raises(CardError, match=rf"^50_broken\.toml: expected UTF-8 text \(TOML\), got "
                                        rf"the byte {byte} at offset \d+"):
        load_cards(folder)


def test_a_folder_named_like_a_card_file_is_named(tmp_path):
    folder = deck_with(tmp_path, GOOD)
    (folder / "x.toml").mkdir()
    with pytest.raises(CardError, match=r"^x\.toml: expected a card file \(TOML\), got a folder"):
        load_cards(folder)


@pytest.mark.parametrize("call, exc, words", [
    (lambda t: load_cards(3), TypeError, r"^cards_dir: expected a folder \(a str or a path\), got int 3"),
    (lambda t: load_cards(""), ValueError, r"^cards_dir: expected a folder, got ''"),
    (lambda t: load_cards(t / "missing"), CardError, r"^cards_dir: expected a folder of card files"),
    (lambda t: load_cards(t / "f.toml"), CardError, r"^cards_dir: .*which is not a folder"),
    (lambda t: load_cards(chapters_dir=1.5), TypeError, r"^chapters_dir: expected a folder"),
    (lambda t: load_cards(numbers_=[1]), TypeError, r"^numbers_: expected None .* got a list"),
    (lambda t: gl.deck.chapter_headings(None), TypeError, r"^stem: expected a str, got NoneType"),
    (lambda t: gl.deck.chapter_headings("no_such"), ValueError, r"^stem: expected the name of a chapter"),
    (lambda t: gl.deck.chapter_label(7), TypeError, r"^stem: expected a str, got int 7"),
    (lambda t: gl.deck.anchor(None), TypeError, r"^heading: expected a str"),
    (lambda t: markdown(topic=3), ValueError, r"^topic: expected one of 'advantages'"),
    (lambda t: markdown(lang=None), ValueError, r"^lang: expected one of 'both', 'en', 'zh'"),
    (lambda t: markdown(page=None), TypeError, r"^page: expected a path from the repository root"),
    (lambda t: markdown(cards=[]), ValueError, r"^cards: expected at least one card"),
    (lambda t: markdown(cards=["x"]), TypeError, r"^cards: expected a list of grpo_lab.deck.Card"),
    (lambda t: gl.deck.questions_markdown(page=""), ValueError, r"^page: expected a path"),
    (lambda t: gl.deck.questions_markdown(cards=3), TypeError, r"^cards: expected a list"),
    (lambda t: gl.deck.render_card(None, 1), TypeError, r"^card: expected a grpo_lab.deck.Card"),
    (lambda t: gl.deck.render_card(ONE, 1.0), TypeError, r"^number: expected an integer"),
    (lambda t: gl.deck.render_card(ONE, 1, lang="fr"), ValueError, r"^lang: expected one of"),
    (lambda t: gl.deck.render_card(ONE, 1, nums=[1]), TypeError, r"^nums: expected None or a dict"),
    (lambda t: gl.deck.show(topic="nope"), ValueError, r"^topic: expected one of"),
])
def test_the_deck_functions_check_their_arguments_by_name(tmp_path, call, exc, words):
    (tmp_path / "f.toml").write_text(GOOD)
    with pytest.raises(exc, match=words):
        call(tmp_path)


ONE = gl.deck.Card(id="a-card", topic="advantages", chapter="01_group_advantages",
                   section="The shape flow", question="Q?", answer="A.")


def test_registry_functions_take_text_and_a_dict_of_numbers():
    assert registry.fill("p = {{p:.2f}}", {"p": 0.5}) == "p = 0.50"
    for call, exc, words in [
            (lambda: registry.fill(None, {}), TypeError, r"^text: expected a str"),
            (lambda: registry.fill("x", None), TypeError, r"^numbers: expected a dict"),
            (lambda: registry.fill("{{p}}", {}), ValueError, r"^text: quotes \{\{p\}\}, which no provider"),
            (lambda: registry.placeholders(3), TypeError, r"^text: expected a str"),
            (lambda: registry.literal_numbers(b"1"), TypeError, r"^text: expected a str")]:
        with pytest.raises(exc, match=words):
            call()
