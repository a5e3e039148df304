"""Chapter 5: the R1 format reward, ``fn(completion) -> 1.0 or 0.0``."""

from __future__ import annotations

import re

from grpo_lab.rl.rewards import ANSWER, TAGS, format_reward
from tests.drills.catalogue.entry import Drill, Wrong


# --- chapter 5: the R1 format reward, fn(completion) -> 1.0 or 0.0 ------------------------------

def _fmt_regex(pattern, flags=0, how="fullmatch", strip=True):
    """A format reward by one regular expression, the way it is usually written."""
    compiled = re.compile(pattern, flags)

    def fn(completion):
        text = completion.strip() if strip else completion
        return float(getattr(compiled, how)(text) is not None)
    return fn


def _fmt_right(completion):
    text = completion.strip()
    if any(text.count(tag) != 1 for tag in TAGS):                 # each tag exactly once
        return 0.0
    m = re.fullmatch(r"<think>(.*)</think>\s*<answer>(.*)</answer>", text, re.DOTALL)
    return float(m is not None and m.group(2).strip() != "")


def _fmt_counts(*tags, nonempty=True, between=r"\s*"):
    """Counts only ``tags``, then one DOTALL regex (``between`` the blocks)."""
    def fn(completion):
        text = completion.strip()
        if any(text.count(tag) != 1 for tag in tags):
            return 0.0
        m = re.fullmatch(rf"<think>(.*)</think>{between}<answer>(.*)</answer>", text, re.S)
        return float(m is not None and (not nonempty or m.group(2).strip() != ""))
    return fn


def _fmt_raises(completion):
    m = re.fullmatch(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", completion, re.S)
    return float(m.group(2).strip() != "")                        # m is None: AttributeError


def _fmt_closing_optional(completion):
    # "the model sometimes forgets </answer>; be lenient": tags guarded, the closing one optional
    m = re.fullmatch(r"<think>((?:(?!</?think>).)*)</think>\s*<answer>((?:(?!</?answer>).)*)"
                     r"(?:</answer>)?", completion.strip(), re.S)
    return float(m is not None and m.group(2).strip() != "")


_FORMAT = Drill("check_format_reward", 5, rights=(_fmt_right, format_reward), wrongs=(
    Wrong("checks only that the tags appear",
          lambda s: float(all(tag in s for tag in TAGS)), "the blocks in the wrong order"),
    Wrong("a regex without re.DOTALL",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.+?</answer>"), "re.DOTALL"),
    Wrong("no whitespace allowed between the blocks",
          _fmt_regex(r"<think>.*?</think><answer>.*?\S.*?</answer>", re.S),
          "allow whitespace between the two blocks"),
    Wrong("the completion not stripped",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.*?\S.*?</answer>", re.S, strip=False),
          "strip the completion first"),
    Wrong("[^<]* for the contents",
          _fmt_regex(r"<think>[^<]*</think>\s*<answer>[^<]*\S[^<]*</answer>"),
          "mathematics is full of '<'"),
    Wrong(".+ for the thinking",
          _fmt_regex(r"<think>.+?</think>\s*<answer>.+?</answer>", re.S),
          "the thinking may be empty"),
    Wrong("re.match: anchored at the start only",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.*?\S.*?</answer>", re.S, how="match"),
          "anchor the end"),
    Wrong("re.search with $: anchored at the end only",
          _fmt_regex(r"<think>.*?</think>\s*<answer>.*?\S.*?</answer>$", re.S, how="search"),
          "anchor the start"),
    Wrong("one DOTALL regex, no tag counts",
          _fmt_regex(r"<think>.*</think>\s*<answer>.*\S.*</answer>", re.S),
          "each tag exactly once"),
    Wrong("counts the answer tags only", _fmt_counts(*ANSWER), "the <think> tags too"),
    Wrong("anything allowed between the blocks", _fmt_counts(*TAGS, between=".*?"),
          "only whitespace may separate"),
    Wrong("an empty answer accepted", _fmt_counts(*TAGS, nonempty=False),
          "an empty (or blank) answer is no answer"),
    Wrong("raises when the regex does not match", _fmt_raises, "it never raises"),
    Wrong("the closing </answer> made optional", _fmt_closing_optional, "closed by </answer>"),
))


DRILLS = (_FORMAT,)
