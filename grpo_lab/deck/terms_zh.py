"""The deck's 中文 vocabulary: one Chinese word for each term, and the variants it replaces.

Every card's 中文 (``grpo_lab/deck/cards/*.toml``) follows this list, and so does each card's
``**术语 (terms):**`` line; ``tests/deck/test_terms_zh.py`` holds them to it. It is the source
the glossary (chapter 9, "Glossary 术语表", and the cheat sheet's "Terms 术语") takes its
中文 from.

===================  ==========================  ===========================================
English              中文 (the one word)          never
===================  ==========================  ===========================================
logits               logits, 未归一化的对数概率     逻辑值, 对数几率
token                词元                         token (in Chinese prose), 令牌
completion           补全                         回答, 生成结果, 响应, 回复
trust region         信赖域                        信任域, 置信域, 信任区域
off-policy           异策略                        离策略, 策略外, 离线策略
on-policy            同策略                        在策略, 在线策略
all-equal group      组内奖励全相同的组              全等组, 零离散组, 零方差组
===================  ==========================  ===========================================

A citation in 中文 is written ``X 等人（年份）``, such as ``Shao 等人（2024）``: never "et al."
and never the year after a comma inside the author's brackets.

:func:`violations` lists what a 中文 text breaks; code spans (`` `...` ``) and formulas
(``$...$``) are left out of the check, since identifiers such as ``num_tokens`` are code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grpo_lab.numerics.validate import describe


@dataclass(frozen=True)
class Term:
    """One term: its English, the 中文 the deck uses (the first is the one to write), and the
    variants no card may use."""
    en: str
    zh: tuple
    never: tuple


TERMS = (
    Term("logits", ("logits", "未归一化的对数概率"), ("逻辑值", "对数几率")),
    Term("token", ("词元",), ("token", "令牌")),
    Term("completion", ("补全",), ("回答", "生成结果", "响应", "回复")),
    Term("trust region", ("信赖域",), ("信任域", "置信域", "信任区域")),
    Term("off-policy", ("异策略",), ("离策略", "策略外", "离线策略")),
    Term("on-policy", ("同策略",), ("在策略", "在线策略")),
    Term("all-equal group", ("组内奖励全相同的组",), ("全等组", "零离散组", "零方差组")),
)

# code spans and formulas: identifiers and symbols, not Chinese prose
_CODE = re.compile(r"`[^`]*`|\$\$.+?\$\$|\$[^$]+\$", re.S)
# a variant standing as a word of its own (an ASCII variant not inside a longer identifier)
_ASCII_EDGE = r"(?<![A-Za-z0-9_\-]){}s?(?![A-Za-z0-9_\-])"
# 等人 must be followed by the year in full-width brackets: Shao 等人（2024）
CITATION = re.compile(r"等人(?!（\d{4}[a-z]?）)")
ET_AL = re.compile(r"\bet al\b")


def _pattern(word: str) -> re.Pattern:
    if word.isascii():
        return re.compile(_ASCII_EDGE.format(re.escape(word)))
    return re.compile(re.escape(word))


_NEVER = tuple((term, word, _pattern(word)) for term in TERMS for word in term.never)


def prose(text: str) -> str:
    """``text`` with its code spans and formulas blanked (each replaced by a space)."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str (a card's 中文), got {describe(text)}")
    return _CODE.sub(" ", text)


def violations(text: str) -> list[str]:
    """What a 中文 text breaks, one line per finding (an empty list when it follows the
    vocabulary); the line quotes the variant and names the word to write instead."""
    plain = prose(text)
    out = []
    for term, word, pattern in _NEVER:
        for m in pattern.finditer(plain):
            near = plain[max(0, m.start() - 12):m.end() + 12].replace("\n", " ")
            out.append(f"{term.en}: {word!r} in ...{near}...; write {term.zh[0]}")
    for m in CITATION.finditer(plain):
        near = plain[max(0, m.start() - 16):m.end() + 10].replace("\n", " ")
        out.append(f"citation: ...{near}...; write X 等人（年份）")
    for m in ET_AL.finditer(plain):
        out.append(f"citation: 'et al' in 中文; write X 等人（年份）")
    return out


def glossary_rows() -> list[tuple[str, str]]:
    """(English, 中文) of each term, the 中文 alternatives joined by ' / '."""
    return [(t.en, " / ".join(t.zh)) for t in TERMS]


__all__ = ["Term", "TERMS", "violations", "prose", "glossary_rows"]
