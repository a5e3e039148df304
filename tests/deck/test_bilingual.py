"""Every card of the deck in both languages, saying the same thing: the same formulas, the same
computed numbers and card references, the same chapter links, and Chinese text on the 中文 side."""

import re

import pytest

import grpo_lab as gl

CJK = re.compile(r"[\u4e00-\u9fff]")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$]+\$", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
CARDS = gl.deck.load_cards()


def maths(text):
    """The set of formulas of a text, each with its white space made single spaces (a formula
    may run over a line break on one side and not on the other)."""
    return {" ".join(m.group(0).split()) for m in MATH.finditer(text)}


@pytest.mark.parametrize("card", CARDS, ids=[c.id for c in CARDS])
def test_the_card_is_in_chinese_with_the_same_formulas_and_links(card):
    assert card.question_zh and card.answer_zh, f"{card.file}: {card.id} has no 中文 yet"
    assert CJK.search(card.question_zh) and CJK.search(card.answer_zh), card.id
    assert len(card.follow_ups_zh or ()) == len(card.follow_ups), card.id
    english = card.answer.split("**术语 (terms):**")[0]               # the terms line is EN only
    pairs = [(card.question, card.question_zh), (english, card.answer_zh),
             *zip(card.follow_ups, card.follow_ups_zh or ())]
    for en, zh in pairs:
        assert maths(en) == maths(zh), (card.id, maths(en) ^ maths(zh))   # a translation may
        #                                              repeat a symbol, not change a formula
        assert sorted(LINK.findall(en)) == sorted(LINK.findall(zh)), card.id


def test_the_whole_deck_is_bilingual_and_has_sixty_cards():
    assert len(CARDS) >= 60
    assert all(c.has_zh for c in CARDS)
