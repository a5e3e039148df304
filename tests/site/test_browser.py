"""The built site in a real browser: headless Chromium (Debian's package) driven by Playwright.

The site that conftest.py builds is served on 127.0.0.1 by this test. Every page must load
with no console error, no failed request and no request to another host (those are aborted
and reported: the site must work offline); math must be typeset by the site's own MathJax,
every image must decode, the search must answer, and on chapter 1 moving a slider must change
the figure with no kernel behind the page.

A full-page screenshot of every page visited is saved under ARTIFACTS (printed in every
failure message) so a failure can be seen, not only read.
"""

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("GRPO_LAB_ARTIFACTS", ROOT / "_build" / "browser-test"))
# Chromium must run without a sandbox as root in CI, and must not phone home: without the
# background-networking flags it opens connections of its own, which fail noisily offline.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-default-apps", "--disable-extensions"]
LOAD_TIMEOUT_MS = 30_000

pytestmark = pytest.mark.site


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not path:
        why = ("the browser test needs Chromium: `apt-get install chromium` (Debian), or "
               "set CHROMIUM=/path/to/chrome")
        # A reader's machine with only Python and pip skips it; CI (.ci/run) installs Chromium
        # and sets GRPO_LAB_REQUIRE_BROWSER=1, so there a missing browser is a failure.
        if os.environ.get("GRPO_LAB_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return path


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files quietly, and notes every request it had to refuse: the server sees the
    requests a page cannot be blamed for in the browser (the favicon, for one)."""

    errors: list = []

    def log_message(self, *args):  # keep pytest's output for failures
        pass

    def log_request(self, code="-", size="-"):
        if str(code).isdigit() and int(code) >= 400:
            self.errors.append(f"HTTP {code}: {self.path}")


@pytest.fixture(scope="module")
def server(site):
    """Serve the built site on a free port of 127.0.0.1 for this module; yield its URL."""
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    QuietHandler.errors.clear()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS,
                                     headless=True)
        yield chromium
        chromium.close()


class Visit:
    """One page in a fresh context: what it logged, which requests failed, which it tried to
    send elsewhere."""

    def __init__(self, browser, base):
        self.host = urlsplit(base).netloc
        self.context = browser.new_context(viewport={"width": 1280, "height": 900},
                                           service_workers="block")
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.set_default_timeout(LOAD_TIMEOUT_MS)
        self.console_errors, self.failed, self.external = [], [], []
        self.page.on("console", lambda m: m.type == "error" and self.console_errors.append(
            f"{m.text} @ {m.location.get('url', '')}"))
        self.page.on("pageerror", lambda e: self.console_errors.append(f"uncaught: {e}"))
        self.page.on("requestfailed", lambda r: self.failed.append(
            f"{r.url}: {r.failure}"))
        self.page.on("response", lambda r: r.status >= 400 and self.failed.append(
            f"{r.url}: HTTP {r.status}"))

    def _route(self, route):
        if urlsplit(route.request.url).netloc == self.host:
            route.continue_()
        else:  # the site must not need the network: record and refuse
            self.external.append(route.request.url)
            route.abort()

    def open(self, url):
        self.page.goto(url, wait_until="load")
        self.page.wait_for_load_state("networkidle")
        # MathJax typesets after load; its startup promise settles when it is done
        self.page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise"
                           " : null")
        return self.page

    def screenshot(self, name, full_page=True) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def close(self):
        self.context.close()


# In the browser: how much math there is and how much MathJax typeset, and which images fail.
PAGE_STATE_JS = """async () => {
  const imgs = [...document.images];
  imgs.forEach(img => { img.loading = "eager"; });
  const decoded = await Promise.all(imgs.map(img => img.decode().then(() => true, () => false)));
  return {
    math: document.querySelectorAll(".math").length,
    typeset: document.querySelectorAll(".math mjx-container").length,
    mathErrors: document.querySelectorAll("mjx-merror").length,
    images: imgs.length,
    broken: imgs.filter((img, i) => !decoded[i] || img.naturalWidth === 0)
                .map(img => img.src.slice(0, 80)),
  };
}"""


@pytest.fixture(scope="module")
def visits(site, server, browser):
    """Open every page once; keep what each logged and showed."""
    report = {}
    for page in sorted(p for p in site.rglob("*.html")
                       if "_static" not in p.relative_to(site).parts):
        rel = page.relative_to(site).as_posix()
        visit = Visit(browser, server)
        try:
            visit.open(f"{server}/{rel}")
            state = visit.page.evaluate(PAGE_STATE_JS)
            shot = visit.screenshot(rel.replace("/", "__").removesuffix(".html"))
        finally:
            visit.close()
        report[rel] = dict(state, console=visit.console_errors, failed=visit.failed,
                           external=visit.external, screenshot=str(shot))
    print(f"\nscreenshots of {len(report)} pages in {ARTIFACTS}")
    return report


def test_every_page_loads_cleanly_and_offline(visits):
    assert {"index.html", "intro.html", "running.html", "search.html"} <= set(visits)
    bad = {page: {k: v[k] for k in ("console", "failed", "external", "screenshot")}
           for page, v in visits.items() if v["console"] or v["failed"] or v["external"]}
    assert not bad, f"pages with console errors, failed or external requests: {bad}"
    assert not QuietHandler.errors, f"the server refused: {QuietHandler.errors}"


def test_math_is_typeset(visits):
    pages_with_math = {page: v for page, v in visits.items() if v["math"]}
    assert "intro.html" in pages_with_math
    assert any(page.startswith("chapters/") for page in pages_with_math)
    bad = {page: {k: v[k] for k in ("math", "typeset", "mathErrors", "screenshot")}
           for page, v in pages_with_math.items()
           if v["typeset"] != v["math"] or v["mathErrors"]}
    assert not bad, f"math not typeset (or typeset with errors): {bad}"


def test_figures_show(visits):
    chapters = {page: v for page, v in visits.items() if page.startswith("chapters/")}
    assert chapters and all(v["images"] >= 2 for v in chapters.values()), {
        page: (v["images"], v["screenshot"]) for page, v in chapters.items()}
    bad = {page: (v["broken"], v["screenshot"]) for page, v in visits.items() if v["broken"]}
    assert not bad, f"images that did not load: {bad}"


def test_search_works_offline(browser, server):
    visit = Visit(browser, server)
    try:
        page = visit.open(f"{server}/search.html?q=advantages")
        results = page.locator("#search-results ul.search li a")
        results.first.wait_for()
        hrefs = results.evaluate_all("links => links.map(a => a.getAttribute('href'))")
        shot = visit.screenshot("search_advantages")
    finally:
        visit.close()
    assert any("01_group_advantages" in h for h in hrefs), (hrefs, str(shot))
    assert not (visit.console_errors or visit.failed or visit.external), (
        visit.console_errors, visit.failed, visit.external, str(shot))


def test_moving_a_slider_changes_the_figure_without_a_kernel(browser, server):
    """Chapter 1 on the static site: a keyboard step on the G slider, then on the spread
    slider with scale='none', each shows a different frame, and the pixels differ."""
    visit = Visit(browser, server)
    try:
        page = visit.open(f"{server}/chapters/01_group_advantages.html")
        player = page.locator(".gl-frames")
        figure = player.locator("img.gl-frames-figure")
        player.scroll_into_view_if_needed()
        shots = [visit.screenshot("chapter01_slider_0_start", full_page=False)]

        def state():
            return (figure.get_attribute("src"), player.get_attribute("data-gl-frame"),
                    figure.evaluate("img => img.complete && img.naturalWidth"),
                    figure.screenshot())

        src0, frame0, width0, pixels0 = state()
        g = player.locator('input[type="range"]').nth(0)
        assert player.locator("label").nth(0).inner_text().startswith("G")
        g.focus()
        page.keyboard.press("ArrowRight")  # G: 8 -> 16
        src1, frame1, width1, pixels1 = state()
        shots.append(visit.screenshot("chapter01_slider_1_G16", full_page=False))
        readout = player.locator("output").nth(0).inner_text()

        player.locator("select").select_option(label="none")
        src2, frame2, _, pixels2 = state()
        spread = player.locator('input[type="range"]').nth(1)
        spread.focus()
        page.keyboard.press("ArrowRight")  # spread: 1 -> 10, advantages in reward units
        src3, frame3, _, pixels3 = state()
        shots.append(visit.screenshot("chapter01_slider_2_spread10_none", full_page=False))
        alt = figure.get_attribute("alt")
    finally:
        visit.close()
    where = f"screenshots: {[str(s) for s in shots]}"
    assert width0 and width1, f"the figure did not show; {where}"
    assert readout == "16", f"G readout {readout!r}; {where}"
    assert src1 != src0 and frame1 != frame0 and pixels1 != pixels0, \
        f"moving G did not change the figure; {where}"
    assert src3 != src2 and pixels3 != pixels2, f"moving spread did not change it; {where}"
    assert "G=16" in alt and "spread=10" in alt and "scale=none" in alt, alt
    assert not (visit.console_errors or visit.failed or visit.external), (
        visit.console_errors, visit.failed, visit.external, where)
