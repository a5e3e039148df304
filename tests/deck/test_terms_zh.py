"""Every card's 中文 follows the one vocabulary of grpo_lab.deck.terms_zh: one word per term, the
variants it replaces nowhere, citations as "X 等人（年份）", and each card's terms line giving
the list's 中文 for the list's English terms."""

import re

import pytest

import grpo_lab as gl
from grpo_lab.deck import terms_zh

CARDS = gl.deck.load_cards()
# restated by its owner in the same round; remove it from here once it follows the list
NOT_YET = set()      # every card is held to it
TERMS_LINE = re.compile(r"\*\*术语 \(terms\):\*\* (.+)")


@pytest.mark.parametrize("card", [c for c in CARDS if c.id not in NOT_YET],
                         ids=[c.id for c in CARDS if c.id not in NOT_YET])
def test_the_card_follows_the_vocabulary(card):
    found = [f"{field}: {v}" for field, text in card.texts() if "_zh" in field
             for v in terms_zh.violations(text)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("card", [c for c in CARDS if c.id not in NOT_YET],
                         ids=[c.id for c in CARDS if c.id not in NOT_YET])
def test_the_terms_line_gives_the_lists_chinese(card):
    line = TERMS_LINE.search(card.answer).group(1)
    for item in (i.strip() for i in line.split("·")):
        for term in terms_zh.TERMS:
            if item.lower().startswith(term.en + " ") or item.lower() == term.en:
                rest = item[len(term.en):]
                assert any(z in rest for z in term.zh), (card.id, item, term.zh)
                assert not any(w in rest for w in term.never if not w.isascii()), (card.id, item)


@pytest.mark.parametrize("text, words", [
    ("logits 的逻辑值", ["逻辑值"]),
    ("每个 token 的比率", ["'token'"]),
    ("全等组的优势为 0", ["全等组"]),
    ("超出信任域", ["信任域"]),
    ("一个离策略的样本", ["离策略"]),
    ("RLOO（Ahmadian 等人，2024）", ["citation"]),
    ("Cui et al.（2025）", ["et al"]),
    ("长的回答", ["回答"]),
])
def test_each_variant_is_caught_and_named(text, words):
    found = terms_zh.violations(text)
    assert found and all(any(w in f for f in found) for w in words), found


@pytest.mark.parametrize("text", [
    "每个词元的 logits，即未归一化的对数概率",
    "`num_tokens` 和 $\\text{token}$ 是代码与公式",
    "Shao 等人（2024）的组内奖励全相同的组",
    "一个补全在信赖域之外是异策略的，不是同策略的",
])
def test_text_that_follows_the_list_passes(text):
    assert terms_zh.violations(text) == []


def test_the_list_has_the_terms_the_deck_fixes_and_no_word_is_both_right_and_wrong():
    by_en = {t.en: t for t in terms_zh.TERMS}
    assert by_en["logits"].zh == ("logits", "未归一化的对数概率")
    assert by_en["trust region"].zh == ("信赖域",) and by_en["off-policy"].zh == ("异策略",)
    assert len(by_en["completion"].zh) == 1 and len(by_en["token"].zh) == 1
    assert {"全等组", "零离散组"} <= set(by_en["all-equal group"].never)
    for term in terms_zh.TERMS:
        assert not set(term.zh) & set(term.never), term.en
    assert ("trust region", "信赖域") in terms_zh.glossary_rows()


def test_the_cheat_sheet_terms_use_the_list():
    sheet = (gl.deck.CARDS_DIR.parents[2] / "cheatsheet.md").read_text(encoding="utf-8")
    terms = sheet.split("## Terms 术语")[1]
    for term in terms_zh.TERMS:
        assert not any(w in terms for w in term.never if not w.isascii()), term.en


def test_a_bad_text_is_named():
    with pytest.raises(TypeError, match="^text: expected a str"):
        terms_zh.violations(None)
