"""The book builds with warnings as errors, and the pages show what a reader expects."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("book")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else shutil.which("jupyter-book"), "build", str(ROOT),
           "--path-output", str(out), "-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out / "_build" / "html"


@pytest.mark.site
def test_every_toc_page_is_built(site):
    toc = (ROOT / "_toc.yml").read_text()
    pages = ["intro"] + re.findall(r"file:\s*(\S+)", toc)
    for page in pages:
        assert (site / f"{page}.html").exists(), page
    assert (site / "index.html").exists()


@pytest.mark.site
def test_chapter_pages_show_math_figures_and_no_errors(site):
    for page in sorted((site / "chapters").glob("*.html")):
        html = page.read_text()
        assert "math notranslate" in html or "\\(" in html, f"{page.name}: no math"
        assert re.search(r'<img [^>]*src="[^"]+\.png"', html), f"{page.name}: no figure"
        for bad in ("Traceback (most recent call last)", "NameError", "ModuleNotFoundError"):
            assert bad not in html, f"{page.name}: {bad}"


@pytest.mark.site
def test_chapter_one_shows_the_package_source_and_checked_numbers(site):
    html = (site / "chapters" / "01_group_advantages.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "def group_advantages" in text           # the real source, highlighted
    assert "PASS: worked example" in text          # the drill's solution passes its checker
    assert "0.8200" in text                         # P(all-equal) at G=2, p=0.1, computed live


@pytest.mark.site
def test_chapter_two_shows_the_package_source_and_checked_numbers(site):
    html = (site / "chapters" / "02_ppo_to_grpo.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "def clipped_surrogate_loss" in text and "def gae" in text   # the real source
    assert "PASS: the worked example, both lambda limits" in text       # drill 1's solution
    assert "PASS: both clip sides" in text                              # drill 2's solution
    assert "saved: 112 GB (44%)" in text                                # the 7B memory table
    assert "tag_hide-input" in html                                     # solutions are hidden


@pytest.mark.site
def test_chapter_seven_shows_the_kernels_and_checked_numbers(site):
    html = (site / "chapters" / "07_performance.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "def _narrow" in text and "def _fused_block" in text       # the real source
    assert "PASS: equal to gl.group_advantages" in text               # drill 1's solution
    assert "PASS: -A r where the unclipped term wins" in text         # drill 2's solution
    assert "0.625 flop/byte" in text                                  # the intensity, computed
    assert "ridge point 20.0 flop/byte" in text                       # H100 arithmetic
    assert "tag_hide-input" in html                                   # solutions are hidden
