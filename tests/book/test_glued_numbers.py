"""A number a chapter states in its prose comes from the chapter's own computation.

The prose quotes computed numbers through myst_nb's glue: a code cell calls
``glue("name", value)`` and the text writes ``{glue:text}`name:format```, so the site shows
what the cell computed when the book was built. This test holds every chapter to that rule:
each name the text uses is glued in the same chapter, by a cell whose output nbval compares
(tag ``nbval-check-output``) and whose stored outputs hold the glued values; and no glued
value goes unused. A typed number cannot be caught this way, but a number moved to glue cannot
silently lose its check.
"""

import re
from pathlib import Path

import nbformat
import pytest

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))
USED = re.compile(r"\{glue:text\}`(\w+)")
GLUED = re.compile(r"""\bglue\(\s*["'](\w+)["']""")

# Glued values that a cell computes but nbval cannot compare, each with its reason.
UNCHECKED = {
    ("02_ppo_to_grpo", "time_ratio"): "wall-clock time of this run, quoted as such",
    ("02_ppo_to_grpo", "peak_ratio"): "tracemalloc peak of this run, quoted as such",
}
# Chapter 6 quotes its training runs. torch's CPU kernels do not promise the same rounding on
# every machine, so nbval cannot compare a run's numbers; the checked cell right after each
# run asserts the claim the prose makes from them (>= 70%, the KL's heavy tail, ...).
UNCHECKED.update({
    ("06_training_loop", key): "a training run's value; the checked cell after it holds the claim"
    for key in ("start_acc", "favourite", "steps", "final_acc", "entropy_early", "entropy_late",
                "zero_late", "tail_ratio", "spike_step", "spike_kl", "spike_token", "spike_share",
                "agree_bad", "agree_good", "collapse_best", "collapse_entropy",
                "healthy_entropy", "ratio_lo", "ratio_hi", "ratio_dev", "out_band", "out_side",
                "clip_second", "final_kl", "top1_share", "top10_share", "top_pct_share",
                "half_share", "cov_lp_adv", "entropy_before", "entropy_after",
                "entropy_after_all", "collapse_low", "collapse_low_step", "collapse_high",
                "collapse_high_step")})


def chapter_glue(path):
    nb = nbformat.read(path, as_version=4)
    used = set()
    glued = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            used |= set(USED.findall(cell.source))
        elif cell.cell_type == "code":
            for key in GLUED.findall(cell.source):
                glued[key] = cell
    return used, glued


def test_the_rule_is_in_use():
    """The collection finds glued numbers in most chapters, so the test below is not vacuous."""
    with_glue = [p.stem for p in CHAPTERS if chapter_glue(p)[0]]
    assert len(with_glue) >= 5, with_glue


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_glued_number_is_computed_in_a_checked_cell_and_used(path):
    used, glued = chapter_glue(path)
    assert used <= set(glued), f"{path.name}: the text uses names no cell glues: {used - set(glued)}"
    assert set(glued) <= used, f"{path.name}: glued but never quoted: {set(glued) - used}"
    for key, cell in glued.items():
        records = [o for o in cell.outputs if o.get("output_type") == "display_data"
                   and any(k.startswith("application/papermill.record/") for k in o.get("data", {}))]
        assert records, f"{path.name}: {key}: the stored outputs hold no glued values; re-execute"
        if (path.stem, key) in UNCHECKED:
            continue
        assert "nbval-check-output" in cell.metadata.get("tags", []), (
            f"{path.name}: {key} is glued by a cell that nbval does not compare")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_glued_value_is_a_plain_python_number_or_text(path):
    """myst-nb formats a glued value's stored text/plain with the prose's spec
    ({glue:text}`x:.1f`): a NumPy scalar is stored as 'np.float64(4.68...)', which it cannot
    read, and the book build fails with a warning. Glue float(x), not x."""
    nb = nbformat.read(path, as_version=4)
    bad = [(i, out["metadata"]["scrapbook"]["name"])
           for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
           for out in cell.get("outputs", [])
           if "scrapbook" in out.get("metadata", {})
           and re.match(r"np\.\w+\(", str(out.get("data", {}).get(
               "application/papermill.record/text/plain", "")))]
    assert not bad, f"{path.name}: glued NumPy scalars (cell, name): {bad}"
