"""Drill checker for chapter 5: the R1 format reward.

The drill: ``my_format_reward(completion) -> float``, 1.0 for
``<think>...</think><answer>...</answer>`` and 0.0 for anything else, as ``gl.format_reward``
defines it: each of the four tags exactly once and in that order, only whitespace around and
between the two blocks, the thinking may be empty, the answer may not. A reward function
never raises on the policy's text: whatever the text, it returns a number.
"""

from __future__ import annotations

import numpy as np

from grpo_lab.drills.harness import call, verdict

__all__ = ["FORMAT_CASES", "check_format_reward"]

#: (what the case is, the completion, its reward, the hint when the reader's reward differs).
#: The rewards are those of gl.format_reward (tests/drills/test_checkers_against_catalogue.py
#: checks it).
FORMAT_CASES = (
    ("the worked example", "<think>7 + 5 = 12</think><answer>12</answer>", 1.0,
     "the R1 format is <think>...</think><answer>...</answer>"),
    ("a multi-line <think>",
     "<think>\n7 + 5:\n7 + 3 = 10, 10 + 2 = 12\n</think><answer>12</answer>", 1.0,
     "in a regular expression '.' does not match a newline: pass re.DOTALL (re.S)"),
    ("a newline between </think> and <answer>",
     "<think>7 + 5 = 12</think>\n<answer>12</answer>", 1.0,
     "allow whitespace between the two blocks (\\s*)"),
    ("whitespace around the completion",
     "\n<think>7 + 5 = 12</think><answer>12</answer>\n", 1.0,
     "strip the completion first: sampled text often starts or ends with a newline"),
    ("a space between the blocks", "<think>7 + 5 = 12</think> <answer>12</answer>", 1.0,
     "any whitespace may separate the blocks (\\s*), a space as well as a newline"),
    ("two newlines between the blocks",
     "<think>7 + 5 = 12</think>\n\n<answer>12</answer>", 1.0,
     "any amount of whitespace may separate the blocks (\\s*, not \\n?)"),
    ("a tab between the blocks", "<think>7 + 5 = 12</think>\t<answer>12</answer>", 1.0,
     "any whitespace may separate the blocks (\\s*), a tab too"),
    ("a trailing space", "<think>7 + 5 = 12</think><answer>12</answer> ", 1.0,
     "strip every kind of whitespace around the completion (str.strip(), not strip('\\n'))"),
    ("a space, a tab and newlines around and between",
     " \t<think>7 + 5 = 12</think> \n <answer>12</answer>\n\n", 1.0,
     "whitespace of any kind and amount is allowed around and between the blocks"),
    ("spaces inside the answer", "<think>7 + 5 = 12</think><answer> 12 </answer>", 1.0,
     "spaces around the answer's text are fine; only a blank answer is not"),
    ("a '<' inside the thinking",
     "<think>is 3 < 5? yes, so 5 - 3 = 2</think><answer>2</answer>", 1.0,
     "mathematics is full of '<'; only the four tags are special ([^<]* forbids the rest)"),
    ("an empty <think></think>", "<think></think><answer>12</answer>", 1.0,
     "the thinking may be empty (as in gl.format_reward); only the answer must not be"),
    ("text without any tags", "the answer is 12", 0.0,
     "no tags at all is the plainest format failure"),
    ("no <think> block", "<answer>12</answer>", 0.0,
     "both blocks are required"),
    ("no <answer> block", "<think>7 + 5 = 12</think>", 0.0,
     "both blocks are required"),
    ("the blocks in the wrong order", "<answer>12</answer><think>7 + 5 = 12</think>", 0.0,
     "<think> comes first; that the tags appear somewhere is not the format"),
    ("text after </answer>",
     "<think>7 + 5 = 12</think><answer>12</answer> Hope this helps!", 0.0,
     "anchor the end: re.fullmatch, or nothing but whitespace after </answer>"),
    ("text before <think>", "Sure! <think>7 + 5 = 12</think><answer>12</answer>", 0.0,
     "anchor the start: re.fullmatch (re.search finds the blocks anywhere)"),
    ("two <answer> blocks",
     "<think>7 + 5 = 12</think><answer>11</answer><answer>12</answer>", 0.0,
     "each tag exactly once (a regex's .* happily swallows '</answer><answer>'), or the policy "
     "learns to hedge with several answers"),
    ("a nested <think>", "<think><think>7 + 5 = 12</think></think><answer>12</answer>", 0.0,
     "each tag exactly once, the <think> tags too"),
    ("text between the blocks", "<think>7 + 5 = 12</think> so: <answer>12</answer>", 0.0,
     "only whitespace may separate </think> and <answer>"),
    ("an empty answer", "<think>7 + 5 = 12</think><answer> </answer>", 0.0,
     "an empty (or blank) answer is no answer; reward it and the policy stops answering"),
    ("an unclosed <answer>", "<think>7 + 5 = 12</think><answer>12", 0.0,
     "the answer must be closed by </answer>"),
    ("a stray closing tag", "<think>7 + 5 = 12</think></think><answer>12</answer>", 0.0,
     "each tag exactly once: count the closing tags too, not only the opening ones"),
    ("a stray </answer> at the end",
     "<think>7 + 5 = 12</think><answer>12</answer></answer>", 0.0,
     "each tag exactly once: count the closing tags too, not only the opening ones"),
    ("a lone extra <think>", "<think>7 + 5<think> = 12</think><answer>12</answer>", 0.0,
     "each tag exactly once: count the opening tags too, not only the closing ones (a "
     "pattern that forbids only closing tags inside a block lets an opening one through)"),
    ("a lone extra <answer>", "<think>7 + 5 = 12</think><answer>1<answer>2</answer>", 0.0,
     "each tag exactly once: count the opening tags too, not only the closing ones (a "
     "pattern that forbids only closing tags inside a block lets an opening one through)"),
    ("an answer tag inside the thinking",
     "<think>I will write </answer> later</think><answer>12</answer>", 0.0,
     "each tag exactly once: a lazy .*? stops at the first </think> and never sees an "
     "</answer> that sits inside the thinking"),
    ("the answer block inside the thinking",
     "<think>7 + 5 <answer>12</answer></think>", 0.0,
     "the blocks come one after the other, not one inside the other: the answer must "
     "follow </think>"),
    ("interleaved blocks", "<think>7 + 5<answer></think>12</answer>", 0.0,
     "the blocks must not interleave: </think> closes the thinking before <answer> opens"),
    ("upper-case tags", "<THINK>7 + 5 = 12</THINK><ANSWER>12</ANSWER>", 0.0,
     "the tags are lower-case, as gl.format_reward and the prompt have them: re.IGNORECASE "
     "(or .lower()) rewards tags the format does not allow"),
    ("capitalised tags", "<Think>7 + 5 = 12</Think><Answer>12</Answer>", 0.0,
     "the tags are lower-case, as gl.format_reward and the prompt have them: re.IGNORECASE "
     "(or .lower()) rewards tags the format does not allow"),
    ("a long thinking (20000 characters)",
     "<think>" + "7 + 5 is 12. " * 1540 + "</think><answer>12</answer>", 1.0,
     "a long completion is still a completion: a pattern that backtracks (nested "
     "quantifiers) takes too long, or a length cap cuts real answers"),
)


def check_format_reward(fn, *, verbose=True) -> bool:
    """Check ``fn(completion) -> 1.0 or 0.0`` on FORMAT_CASES, the rewards of gl.format_reward.

    The first completion scored wrong is the verdict, with its hint; every call runs under
    the harness's time limit, so a pattern that backtracks for ever is a verdict too.
    """
    say = verdict(verbose, fn)
    for name, text, expected, hint in FORMAT_CASES:
        shown = text if len(text) < 80 else f"{text[:40]}...{text[-30:]}"
        out, problem = call(fn, text, where=f"{name} ({shown!r})", shape=(),
                            returns="1.0 or 0.0",
                            shape_hint="; a reward is one number per completion")
        if problem:
            never = ("; a reward returns 0.0 for text it does not like, it never raises on "
                     "the policy's output") if " your function raised " in problem else ""
            return say(False, problem + never)
        got = float(out.values)
        if got not in (0.0, 1.0):
            return say(False, f"on {name} you gave {got!r}; a format reward is 1.0 or 0.0")
        if got != expected:
            return say(False, f"{name} ({shown!r}) got {got:.1f}, expected {expected:.1f}: "
                              f"{hint}")
    return say(True, f"all {len(FORMAT_CASES)} completions (multi-line, spaces, tabs and "
                     "newlines around and between, repeated, lone, stray, nested, interleaved, "
                     "unclosed, upper-case and misplaced tags, empty answers, a long thinking) "
                     "are scored right")
