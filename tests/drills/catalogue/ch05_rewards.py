"""Chapter 5: the R1 format reward, ``fn(completion) -> 1.0 or 0.0``."""

from __future__ import annotations

import re

from grpo_lab.rl.rewards import ANSWER, TAGS, format_reward
from .entry import Drill, Wrong


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


def _fmt_scan(completion):
    """No regex: find each tag once, check the order and what lies between."""
    text = completion.strip()
    if any(text.count(tag) != 1 for tag in TAGS):
        return 0.0
    where = [text.find(tag) for tag in TAGS]
    if where != sorted(where) or where[0] != 0 or not text.endswith("</answer>"):
        return 0.0
    between = text[where[1] + len("</think>"):where[2]]
    answer = text[where[2] + len("<answer>"):where[3]]
    return float(between.strip() == "" and answer.strip() != "")


def _fmt_tempered(completion):
    """One regex whose blocks cannot contain any of the four tags (a tempered dot)."""
    no_tag = r"(?:(?!</?(?:think|answer)>).)"
    m = re.fullmatch(rf"\s*<think>{no_tag}*</think>\s*<answer>({no_tag}*)</answer>\s*",
                     completion, re.S)
    return float(m is not None and m.group(1).strip() != "")


def _fmt_bool(completion):
    return _fmt_right(completion) == 1.0                          # True / False count as 1 / 0


def _fmt_split(completion):
    text = completion.strip()
    if not text.startswith("<think>") or text.count("<think>") != 1:
        return 0.0
    head, sep, tail = text[len("<think>"):].partition("</think>")
    if not sep or any(tag in head for tag in TAGS) or not tail.strip().startswith("<answer>"):
        return 0.0
    body = tail.strip()[len("<answer>"):]
    if not body.endswith("</answer>") or any(tag in body[:-len("</answer>")] for tag in TAGS):
        return 0.0
    return float(body[:-len("</answer>")].strip() != "")


def _fmt_lazy_no_counts(completion):
    m = re.fullmatch(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", completion.strip(), re.S)
    return float(m is not None and m.group(2).strip() != "")


def _fmt_opening_counts(completion):
    text = completion.strip()
    if text.count("<think>") != 1 or text.count("<answer>") != 1:   # closing tags not counted
        return 0.0
    m = re.fullmatch(r"<think>(.*?)</think>\s*<answer>(.*)</answer>", text, re.S)
    return float(m is not None and m.group(2).strip() != "")


def _fmt_counts_and_ends(completion):
    """Each tag once, the right first and last tag: but the middle order is not checked."""
    text = completion.strip()
    if any(text.count(tag) != 1 for tag in TAGS):
        return 0.0
    if not (text.startswith("<think>") and text.endswith("</answer>")):
        return 0.0
    between = text[text.find("</think>") + len("</think>"):text.find("<answer>")]
    answer = text[text.find("<answer>") + len("<answer>"):text.find("</answer>")]
    return float(between.strip() == "" and answer.strip() != "")


def _fmt_blocks_found_apart(completion):
    """Each tag once, each block found by its own search: one block may sit inside the other."""
    text = completion.strip()
    if any(text.count(tag) != 1 for tag in TAGS) or not text.startswith("<think>"):
        return 0.0
    if not text.endswith(("</answer>", "</think>")):
        return 0.0
    between = text[text.find("</think>") + len("</think>"):text.find("<answer>")]
    answer = re.search(r"<answer>(.*?)</answer>", text, re.S)
    return float(between.strip() == "" and answer is not None and answer.group(1).strip() != "")


def _fmt_char_by_char(completion):
    """Rescans the text before every character in pure Python: quadratic, fine on short text,
    stuck for minutes on 20000 characters."""
    text, seen = completion.strip(), 0
    for i in range(len(text)):
        for j in range(i):
            seen += text[j] == "<"
    return _fmt_right(text)


def _fmt_closing_counts(completion):
    """The mirror of counting the opening tags: only the closing ones are counted."""
    text = completion.strip()
    if text.count("</think>") != 1 or text.count("</answer>") != 1:
        return 0.0
    m = re.fullmatch(r"<think>(.*)</think>\s*<answer>(.*)</answer>", text, re.S)
    return float(m is not None and m.group(2).strip() != "")


def _fmt_tempered_closing(completion):
    """A tempered dot that forbids the closing tags only: an extra opening tag slips in."""
    no_close = r"(?:(?!</(?:think|answer)>).)"
    m = re.fullmatch(rf"\s*<think>{no_close}*</think>\s*<answer>({no_close}*)</answer>\s*",
                     completion, re.S)
    return float(m is not None and m.group(1).strip() != "")


def _fmt_tags_lexed(completion):
    """Split on the tags: the tags in order, text only inside the blocks."""
    parts = re.split(r"(</?(?:think|answer)>)", completion)
    tags, texts = parts[1::2], parts[0::2]            # texts: before, think, between, answer, after
    if tags != list(TAGS):
        return 0.0
    return float(texts[0].strip() == texts[2].strip() == texts[4].strip() == ""
                 and texts[3].strip() != "")


def _fmt_collapsed(completion):
    """Whitespace collapsed to single spaces first, then one pattern with ' ?' between."""
    text = " ".join(completion.split())
    if any(text.count(tag) != 1 for tag in TAGS):
        return 0.0
    m = re.fullmatch(r"<think>.*</think> ?<answer>(.*)</answer>", text, re.S)
    return float(m is not None and m.group(1).strip() != "")


def _fmt_between(between, strip=str.strip, flags=0):
    """Each tag counted, then one DOTALL pattern: ``between`` the blocks, the completion
    stripped by ``strip``."""
    def fn(completion):
        text = strip(completion)
        if any(text.lower().count(tag) != 1 if flags else text.count(tag) != 1 for tag in TAGS):
            return 0.0
        m = re.fullmatch(rf"<think>.*</think>{between}<answer>(.*)</answer>", text,
                         re.S | flags)
        return float(m is not None and m.group(1).strip() != "")
    return fn


def _fmt_no_newline_anywhere(completion):
    """Refuses every newline inside the stripped text, between the blocks too: not a missing
    re.DOTALL (the blocks are found without a regex)."""
    text = completion.strip()
    return 0.0 if "\n" in text else _fmt_right(text)


def _fmt_thinking_trimmed(completion):
    """Wants the thinking without whitespace at its ends: the multi-line <think> fails because
    it starts with a newline, and fails just as well with that newline a space."""
    text = completion.strip()
    m = re.fullmatch(r"<think>(.*)</think>\s*<answer>(.*)</answer>", text, re.S)
    if _fmt_right(text) == 0.0 or m is None:
        return 0.0
    return float(m.group(1) == m.group(1).strip())


def _fmt_thinking_unsearched(completion):
    """No regex, greedy or lazy: three tags counted, the answer searched for tags, the
    thinking not, so a '</answer>' inside the thinking passes."""
    text = completion.strip()
    if any(text.count(tag) != 1 for tag in ("<think>", "</think>", "<answer>")):
        return 0.0
    if not (text.startswith("<think>") and text.endswith("</answer>")):
        return 0.0
    close, open_ = text.find("</think>"), text.find("<answer>")
    body = text[open_ + len("<answer>"):-len("</answer>")]
    if open_ < close or text[close + len("</think>"):open_].strip() or "</answer>" in body:
        return 0.0
    return float(body.strip() != "")


def _fmt_length_cap(completion):
    """"No policy writes 4096 characters": a length cap, no backtracking at all."""
    return 0.0 if len(completion) > 4096 else _fmt_right(completion)


def _fmt_four_angles(completion):
    """Exactly four '<' in the text, one per tag: no [^<]* anywhere, yet a '<' in the
    mathematics is refused all the same."""
    return 0.0 if completion.count("<") != 4 else _fmt_right(completion)


_FORMAT = Drill("check_format_reward", 5, rights=(
    _fmt_right, format_reward, _fmt_scan, _fmt_tempered, _fmt_bool, _fmt_split,
    _fmt_tags_lexed, _fmt_collapsed), wrongs=(
    Wrong("only the closing tags counted", _fmt_closing_counts,
          "hold the opening tags to one each as you do the closing ones"),
    Wrong("a tempered dot on the closing tags only", _fmt_tempered_closing,
          "refuses an extra closing tag (0.0 on a stray closing tag"),
    Wrong("only a newline allowed between the blocks", _fmt_between("\n?"),
          "between the blocks it accepts '\\n' and refuses ' ', '\\n\\n'"),
    Wrong("spaces and newlines between, no tab", _fmt_between("[ \n]*"),
          "and refuses '\\t';"),
    Wrong("only newlines stripped", _fmt_between(r"\s*", strip=lambda s: s.strip("\n")),
          "str.strip(), not strip('\\n')"),
    Wrong("whitespace between the blocks, not around them",
          _fmt_between(r"\s*", strip=lambda s: s), "strip the completion first"),
    Wrong("tags matched case-insensitively", _fmt_between(r"\s*", flags=re.I),
          "the tags are lower-case"),
    Wrong("the answer must not start with a space",
          _fmt_regex(r"\s*<think>.*?</think>\s*<answer>\S.*?</answer>\s*", re.S),
          "spaces around the answer's text are fine"),
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
    Wrong("a lazy regex and no tag counts", _fmt_lazy_no_counts, "each tag exactly once"),
    Wrong("only the opening tags counted", _fmt_opening_counts,
          "hold the closing tags to one each as you do the opening ones"),
    Wrong("tags counted, the order in the middle not checked", _fmt_counts_and_ends,
          "must not interleave"),
    Wrong("each block found by its own search", _fmt_blocks_found_apart,
          "not one inside the other"),
    Wrong("a quadratic parser (stuck on a long completion)", _fmt_char_by_char,
          "did not finish"),
    Wrong("every newline refused, between the blocks too (no regex)", _fmt_no_newline_anywhere,
          "and 0.0 with a newline between the blocks too"),
    Wrong("the thinking must not start or end with whitespace", _fmt_thinking_trimmed,
          "it gives 0.0, gl.format_reward 1.0"),
    Wrong("the thinking never searched for tags (no regex)", _fmt_thinking_unsearched,
          "also where one sits inside the thinking (here '</answer>' 2 times)"),
    Wrong("a length cap of 4096 characters", _fmt_length_cap,
          "so the length alone is refused: a length cap"),
    Wrong("exactly four '<' in the text", _fmt_four_angles,
          "so the '<' itself is what it refuses"),
    Wrong("at most one whitespace character between the blocks", _fmt_between(r"\s?"),
          "and refuses '\\n\\n', ' \\n '"),
))


DRILLS = (_FORMAT,)
