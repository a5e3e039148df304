"""Sphinx extension for the GRPO Lab site (loaded by ``sphinx.local_extensions`` in _config.yml).

1. Static sliders: it sets ``GRPO_LAB_STATIC_FRAMES=1`` before the chapters execute, so the
   kernel that runs them (a child of this process) has ``gl.sliders.explorer`` draw the
   frames the site's sliders show. Jupyter never sees the variable and stays fast and live.
2. Offline math: the page loads MathJax from ``_static/mathjax`` (``mathjax_path`` in
   _config.yml), not from a CDN. The files come from the pinned PyPI package
   ``sphinx-mathjax-offline`` (MathJax 3.2.2, requirements.txt); we copy only what a page can
   ask for (the combined component, its fonts, the TeX extensions it autoloads, the menu and
   its accessibility parts), about 4 MB instead of 24.
3. No saved widget state on the page: the ipywidgets state that executing a chapter saves is
   useless without a kernel (sliders that move nothing) and heavy (the live figure again, as
   base64), so it is dropped before myst-nb adds it to the page. The static sliders carry
   their own frames.
4. No Thebe: Jupyter Book always loads sphinx-thebe, whose inline configuration script lands
   twice on every page (a SyntaxError in the console: 'THEBE_JS_URL' redeclared) and whose
   live-code mode would load Thebe from a CDN and need a remote kernel. The book's live route
   is the Binder and Colab buttons, so sphinx-thebe's scripts and styles are left off pages.
5. A failed build leaves nothing to reuse: with ``-W`` any warning (a chapter whose execution
   failed or timed out is one) fails the build, and then the saved environment and doctrees
   are deleted, so the next build reads and executes every page again instead of keeping the
   broken page and reporting success over it. jupyter-cache never stores a failed execution.
6. Lighter pages: a reader gains nothing from FontAwesome's 1.5 MB SVG-with-JavaScript
   script (the theme's CSS draws the same icons with its web font), from the icon fonts'
   thousands of unused glyphs, from source maps, the theme's translation catalogues or
   24-bit PNGs of flat plots. So the script leaves every page and is not published, nor are
   the source maps and catalogues; the icon fonts are cut to the icons the pages can show
   (``_static/grpo-icons.css``); each figure becomes a 256-colour PNG (a few antialiased
   pixels change, by a few levels), loaded lazily, with its dpi noted for
   ``_static/grpo_site.js``.
7. Search from disk: a page opened from file:// cannot fetch another, so Sphinx's search
   would list results without snippets and log an error for each. The build writes the pages'
   text to ``_static/grpo-search-text.js``, which the search page loads on file:// only.
8. The Chinese terms' font: ``python _ext/grpo_site.py cjk-font [FONT]`` cuts Noto Sans CJK
   SC down to the CJK characters of the chapters and pages into
   ``_static/fonts/grpo-lab-cjk.woff2`` (needs fontTools and brotli; Debian's
   fonts-noto-cjk has the font). Rerun it when a page gains a new character;
   tests/site/test_browser.py fails on any CJK character that the font does not draw.
9. Alt text that says what a figure shows: the kernel that executes the chapters runs
   ``gl.book.frames.describe_figures`` first (a ``PYTHONSTARTUP`` file written into the build
   folder), so every matplotlib figure a chapter shows carries its alt text (the figure's
   title, its panels' titles and axes: ``gl.book.frames.figure_alt``) as output metadata;
   myst-nb keeps only an image's width and height from there, so ``figure_alt_text`` reads
   the executed notebook and puts the alt text on each figure. The slider frames carry theirs.
10. Accessible pages: every checklist box is named after its item (the boxes are disabled,
   a record of what the chapter checks, not a form), and the slider frames leave the page for
   files of their own (``_images/gl-frames``), which a browser caches, instead of base64
   inside the HTML.
11. The interview deck for Anki: the build writes ``deck/grpo-lab-deck.apkg`` (chapter 9's
   cards, English and 中文, :mod:`grpo_lab.deck.anki`), which chapter 9 links to (a book
   none of whose pages links to it gets none).
13. A printed line stays one line: a kernel under load may flush one ``print`` in two stream
   messages, and myst-nb's merge (``coalesce_streams``) ends every piece with a newline, so
   ``ratio is 1 ...: True`` once reached the page as two lines. The pieces of a stream are
   joined exactly as written first (``exact_streams``), then myst-nb's merge runs as before.
14. Formulas as text where no MathJax runs: the search index's titles, the search snippets (each
   formula carries its reading in ``data-gl-text``) and a ``{ref}`` that copies its heading
   (it gets the heading's own nodes, formulas typeset) show "What β does", not TeX source.
15. The test run's build reads the chapters' stored outputs (``GRPO_LAB_STORED_OUTPUTS=1``):
   nbval executes each chapter once in that run; scripts/execute_chapters.py stores the frames
   and alt text the site needs.
12. The cheat sheet's questions come from the deck: ``<!-- deck-questions -->`` in
   cheatsheet.md is replaced, as the page is read, by every card's question in both
   languages, each linked to its answer in chapter 9 (``gl.deck.questions_markdown``), so no
   card text is written twice.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import html as html_lib
import io
import json
import os
import re
import shutil
import sys
import unicodedata
from html.parser import HTMLParser
from importlib.metadata import distribution
from pathlib import Path

STATIC_ENV = "GRPO_LAB_STATIC_FRAMES"  # the name gl.sliders reads
MATHJAX_DIST = "sphinx-mathjax-offline"
MATHJAX_COMPONENT = "tex-mml-chtml.js"  # what Sphinx's own default CDN URL loads
MATHJAX_PARTS = [  # relative to the package's static/mathjax folder
    MATHJAX_COMPONENT,
    "output/chtml/fonts/woff-v2",  # the CHTML output's fonts
    "input/tex/extensions",        # \require and autoloaded TeX packages
    "input/mml/extensions",
    "ui",                          # the right-click menu
    "a11y",                        # accessibility options offered by the menu
    "sre/mathmaps/base.json",      # speech rules they load, English only
    "sre/mathmaps/en.json",
]


def mathjax_source() -> Path:
    """The folder of MathJax files inside the installed ``sphinx-mathjax-offline``."""
    return Path(distribution(MATHJAX_DIST).locate_file(f"{MATHJAX_DIST}/static/mathjax"))


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        src, dst = source / part, target / part
        if not src.exists():
            raise FileNotFoundError(f"MathJax file {src} missing: reinstall {MATHJAX_DIST}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)


def drop_widget_state(app, doctree) -> None:
    # myst-nb (1.x) files a page's extra scripts under env.nb_metadata[docname]["js_files"]
    # while it parses the page; tests/test_site.py fails if the state reaches a page again.
    page = getattr(app.env, "nb_metadata", {}).get(app.env.docname, {})
    page.get("js_files", {}).pop("ipywidgets_state", None)


# --- 9. alt text --------------------------------------------------------------------------

STARTUP = "grpo-kernel-startup.py"
STARTUP_CODE = """# Written by _ext/grpo_site.py for the kernel that executes the book's chapters.
__import__("grpo_lab.book.frames", fromlist=["describe_figures"]).describe_figures()
"""
HASHED = re.compile(r"[0-9a-f]{64}")


def kernel_startup(app) -> None:
    """Have the chapters' kernel (a child of this process) run ``describe_figures`` first,
    through IPython's ``PYTHONSTARTUP`` (a reader's own startup file still runs after it)."""
    folder = Path(app.outdir).parent
    folder.mkdir(parents=True, exist_ok=True)
    code = STARTUP_CODE
    previous = os.environ.get("PYTHONSTARTUP", "")
    if previous and Path(previous).name != STARTUP:
        code += f"exec(open({previous!r}, encoding='utf-8').read())\n"
    (folder / STARTUP).write_text(code, encoding="utf-8")
    os.environ["PYTHONSTARTUP"] = str(folder / STARTUP)


def notebook_alt_texts(notebook: Path) -> dict:
    """sha256 of each PNG output of an executed notebook -> the alt text in its metadata
    (myst-nb names a figure's file by that hash)."""
    if not notebook.exists():
        return {}
    alts = {}
    for cell in json.loads(notebook.read_text(encoding="utf-8")).get("cells", []):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            alt = output.get("metadata", {}).get("image/png", {}).get("alt")
            if png and alt:
                data = base64.b64decode("".join(png) if isinstance(png, list) else png)
                alts[hashlib.sha256(data).hexdigest()] = alt
    return alts


def figure_alt_text(app, doctree) -> None:
    from docutils import nodes

    images = [n for n in doctree.findall(nodes.image)
              if HASHED.fullmatch(Path(n.get("uri", "")).stem) and not n.get("alt")]
    if not images:
        return
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{app.env.docname}.ipynb"
    alts = notebook_alt_texts(executed)
    for image in images:
        alt = alts.get(Path(image["uri"]).stem)
        if alt:
            image["alt"] = alt


def drop_thebe(app, pagename, templatename, context, doctree) -> None:
    def is_thebe(asset):
        return "thebe" in str(asset) or "THEBE_JS_URL" in asset.attributes.get("body", "")

    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [asset for asset in context[key] if not is_thebe(asset)]


def forget_failed_build(app, exception) -> None:
    # With -W --keep-going Sphinx turns warningiserror off and sets keep_going; either way a
    # warning fails the build (its status code is set only after this event).
    strict = app.warningiserror or app.keep_going
    failed = exception is not None or (strict and app._warncount > 0)
    if failed and Path(app.doctreedir).exists():
        shutil.rmtree(app.doctreedir)


# --- 6. lighter pages -----------------------------------------------------------------------

FA_SCRIPT = re.compile(r'\s*<script[^>]*_static/scripts/fontawesome\.js[^>]*></script>')
FIGURE_IMG = re.compile(r'<img ([^>]*?)src="((?:\.\./)*_images/[^"]+\.png)"([^>]*?)\s*/?>')
ICON_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:before,?)+)\{content:"\\([0-9a-f]{4,5})"\}')
ICON_FONTS = [  # (family, weight, the theme's TrueType file, our subset)
    ("Font Awesome 6 Free", 900, "fa-solid-900.ttf", "grpo-icons-solid.woff"),
    ("Font Awesome 6 Free", 400, "fa-regular-400.ttf", "grpo-icons-regular.woff"),
    ("Font Awesome 6 Brands", 400, "fa-brands-400.ttf", "grpo-icons-brands.woff"),
]
ICONS_CSS = "grpo-icons.css"
UNPUBLISHED = ["scripts/fontawesome.js", "scripts/fontawesome.js.LICENSE.txt", "locales",
               "vendor/fontawesome/webfonts/fa-solid-900.ttf",
               "vendor/fontawesome/webfonts/fa-regular-400.ttf",
               "vendor/fontawesome/webfonts/fa-brands-400.ttf"]


def site_pages(outdir: Path) -> list:
    return sorted(p for p in outdir.rglob("*.html") if "_static" not in p.relative_to(outdir).parts)


def theme_static() -> Path:
    import pydata_sphinx_theme

    return Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static"


def icon_codepoints(texts, css_texts) -> set:
    """The code points of the FontAwesome icons that pages can show: those named by class
    (``fa-bars``) in ``texts``, and those a stylesheet draws itself (the theme's admonition
    and dropdown icons: private-use characters in its CSS, outside the per-icon rules)."""
    codepoint = {}
    for css in css_texts:
        for selectors, hexcode in ICON_RULE.findall(css):
            for name in re.findall(r"\.(fa-[a-z0-9-]+):before", selectors):
                codepoint[name] = int(hexcode, 16)
    used = set().union(*(re.findall(r"\bfa-[a-z0-9-]+", text) for text in texts))
    codes = {codepoint[name] for name in used if name in codepoint}
    for css in css_texts:
        rest = ICON_RULE.sub("", css)
        codes |= {ord(c) for c in re.findall("[\ue000-\uf8ff]", rest)}
        codes |= {int(h, 16) for h in re.findall(r'"\\([ef][0-9a-f]{3})"', rest)}
    return codes


def subset_icon_fonts(static: Path, texts) -> str:
    """Cut the theme's icon fonts to the icons the pages can show (``texts``: pages and
    scripts; the stylesheets are read here); return their @font-face CSS, which a page lists
    after the theme's, so these faces win for the icons they hold and the theme's full fonts
    are fetched only for an icon missed here."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    source = theme_static()
    css = [p.read_text(encoding="utf-8") for p in static.rglob("*.css") if p.name != ICONS_CSS]
    wanted = icon_codepoints(texts, css)
    rules = []
    for family, weight, ttf, woff in ICON_FONTS:
        font = TTFont(source / "vendor" / "fontawesome" / "webfonts" / ttf)
        codes = sorted(wanted & set(font.getBestCmap()))
        if not codes:
            continue
        options = subset.Options()
        options.flavor, options.layout_features = "woff", []
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=codes)
        subsetter.subset(font)
        (static / "fonts").mkdir(exist_ok=True)
        font.flavor = "woff"
        font.save(static / "fonts" / woff)
        ranges = ",".join(f"U+{c:04X}" for c in codes)
        rules.append(f'@font-face{{font-family:"{family}";font-style:normal;'
                     f'font-weight:{weight};font-display:block;'
                     f'src:url("fonts/{woff}") format("woff");unicode-range:{ranges}}}')
    return "\n".join(rules) + "\n"


def png_dpi_and_palette(path: Path) -> int:
    """Make an opaque figure a 256-colour PNG when that is smaller; return its dpi."""
    from PIL import Image

    with Image.open(path) as im:
        im.load()
    dpi = round(im.info.get("dpi", (100, 100))[0])
    opaque = im.mode == "RGB" or (im.mode == "RGBA" and im.getextrema()[3][0] == 255)
    if opaque:
        palette = im.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT,
                                             dither=Image.Dither.NONE)
        out = io.BytesIO()
        palette.save(out, "PNG", optimize=True, dpi=(dpi, dpi))
        if out.tell() < path.stat().st_size:
            path.write_bytes(out.getvalue())
    return dpi


# --- 10. accessible pages -----------------------------------------------------------------

TASK_BOX = re.compile(r'<input class="task-list-item-checkbox"((?:(?!aria-label)[^>])*)>(.*?)</p>',
                      re.S)
TAGS = re.compile(r"<[^>]+>")
FRAMES_DATA = re.compile(r'(<script type="application/json" class="gl-frames-data">)(.*?)'
                         r'(</script>)', re.S)
FRAMES_IMG = re.compile(r'(<img class="gl-frames-figure" src=")data:image/png;base64,[^"]+"')
FRAMES_DIR = "gl-frames"


def name_task_box(match) -> str:
    """A checklist box named after its item: "done: ..." or "to check: ..." and the item's
    first words (axe's rule ``label``: every form control has an accessible name)."""
    attrs, rest = match.groups()
    words = " ".join(html_lib.unescape(TAGS.sub(" ", rest)).replace("\\(", "")
                     .replace("\\)", "").split())
    words = words if len(words) <= 80 else words[:79].rsplit(" ", 1)[0] + "…"
    state = "done" if "checked" in attrs else "to check"
    label = html_lib.escape(f"{state}: {words}" if words else state)
    return f'<input class="task-list-item-checkbox"{attrs} aria-label="{label}">{rest}</p>'


def frames_to_files(text: str, outdir: Path, page: Path) -> str:
    """Move each slider's frames (base64 in its JSON) to ``_images/gl-frames/<hash>.png`` and
    list their URLs instead (``files``, which slider_player.js prefers)."""
    if "gl-frames-data" not in text:
        return text
    up = "../" * (len(page.relative_to(outdir).parts) - 1)
    folder = outdir / "_images" / FRAMES_DIR
    players = []

    def move(match):
        head, payload, tail = match.groups()
        data = json.loads(payload)
        if "images" not in data:
            return match.group(0)
        files = []
        for encoded in data.pop("images"):
            png = base64.b64decode(encoded)
            name = hashlib.sha256(png).hexdigest()[:20] + ".png"
            folder.mkdir(parents=True, exist_ok=True)
            if not (folder / name).exists():
                (folder / name).write_bytes(png)
            files.append(f"{up}_images/{FRAMES_DIR}/{name}")
        data["files"] = files
        players.append(files)
        body = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
        return head + body + tail

    text = FRAMES_DATA.sub(move, text)
    # each player's first image: the file of the frame it starts at (data-gl-frame)
    starts = iter(int(m) for m in re.findall(r'class="gl-frames" id="[^"]+" data-gl-frame="(\d+)"',
                                             text))
    shown = iter(files[next(starts, 0)] for files in players)
    return FRAMES_IMG.sub(lambda m: f'{m.group(1)}{next(shown, "")}"', text)


def lighten_pages(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    static = outdir / "_static"
    pages = {page: page.read_text(encoding="utf-8") for page in site_pages(outdir)}
    scripts = [p.read_text(encoding="utf-8") for p in (static / "scripts").glob("*.js")
               if p.name != "fontawesome.js"]
    (static / ICONS_CSS).write_text(subset_icon_fonts(static, [*pages.values(), *scripts]))
    dpi = {}
    for png in sorted((outdir / "_images").glob("*.png")):
        dpi[png.name] = png_dpi_and_palette(png)

    def figure(match):
        before, src, after = match.groups()
        attrs = before + after
        extra = "" if "loading=" in attrs else ' loading="lazy"'
        if "data-gl-dpi=" not in attrs and Path(src).name in dpi:
            extra += f' data-gl-dpi="{dpi[Path(src).name]}"'
        return f'<img {before}src="{src}"{after}{extra} />'

    for page, text in pages.items():
        text = frames_to_files(text, outdir, page)
        text = TASK_BOX.sub(name_task_box, math_with_text(text))
        new = FIGURE_IMG.sub(figure, FA_SCRIPT.sub("", text))
        if new != text:
            page.write_text(new, encoding="utf-8")
    for name in UNPUBLISHED:
        target = static / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for source_map in static.rglob("*.map"):
        source_map.unlink()


# --- 7. search from disk ---------------------------------------------------------------------

SEARCH_TEXT = "grpo-search-text.js"


VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
             "source", "track", "wbr"}


class _PageText(HTMLParser):
    """One pass over a page's HTML for :func:`page_text_skeleton`, no tree built (BeautifulSoup
    built one and unwrapped its 77,000 tags one by one: 5.9 s for the 17 pages, this 0.8 s,
    with the same output). Whitespace-only text is kept as BeautifulSoup keeps it: one
    newline if it holds one, else one space, except inside ``pre`` and ``textarea``."""

    def __init__(self, is_main):
        super().__init__(convert_charrefs=True)
        self.is_main = is_main
        self.out, self.stack = [], []    # what is kept; the elements open inside the main one
        self.found = self.done = False
        self.skip = 0                    # inside junk: a heading's link, a script, a style
        self.pre = 0                     # inside pre or textarea
        self.math = None                 # the formula being read: [data-gl-text, its parts]

    def handle_starttag(self, tag, attrs):
        if self.done:
            return
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if not self.found:
            if self.is_main(attrs, classes):
                self.found = True
                self.stack.append((tag, "main"))
            return
        keep_id = not self.skip and self.math is None and attrs.get("id")
        if tag in VOID_TAGS:
            if keep_id:
                self.out.append(f'<{tag} id="{html_lib.escape(attrs["id"])}"/>')
            return
        if self.skip or self.math is not None:
            kind = "inside"
        elif "headerlink" in classes or tag in ("script", "style"):
            kind = "junk"
            self.skip += 1
        elif "math" in classes:          # a formula as text (14), not its TeX source
            kind = "math"
            self.math = [attrs.get("data-gl-text"), []]
        elif keep_id:
            kind = "id"
            self.out.append(f'<{tag} id="{html_lib.escape(attrs["id"])}">')
        else:
            kind = "dropped"
        self.pre += tag in ("pre", "textarea")
        self.stack.append((tag, kind))

    def handle_endtag(self, tag):
        if not self.found or self.done or tag in VOID_TAGS or all(t != tag for t, _ in self.stack):
            return
        while True:                      # close every element up to the one this tag ends
            open_tag, kind = self.stack.pop()
            self.pre -= open_tag in ("pre", "textarea")
            if kind == "main":
                self.done = True
                return
            if kind == "junk":
                self.skip -= 1
            elif kind == "math":
                text = self.math[0] or tex_text("".join(self.math[1]))
                self.math = None
                self.out.append(html_lib.escape(text, quote=False))
            elif kind == "id":
                self.out.append(f"</{open_tag}>")
            if open_tag == tag:
                return

    def handle_data(self, data):
        if not self.found or self.done or self.skip:
            return
        if not self.pre and not data.strip(" \n\t\x0c\r"):
            data = "\n" if "\n" in data else " "
        if self.math is not None:
            self.math[1].append(data)
        else:
            self.out.append(html_lib.escape(data, quote=False))

    def handle_comment(self, data):
        if self.found and not self.done and not self.skip and self.math is None:
            self.out.append(f"<!--{data}-->")


def page_text_skeleton(html: str) -> str:
    """The main content of a page as Sphinx's search snippet code reads it: the same text
    (``textContent``), and every element with an id kept so that ``#anchor`` still finds its
    section; all other markup dropped. The main content is the article alone:
    [role="main"] also holds the header's buttons and the print-only table of contents, whose
    words made the snippets (grpo_site.js does the same served); a page without an article
    falls back to [role="main"]."""
    for is_main in (lambda attrs, classes: "bd-article" in classes,
                    lambda attrs, classes: attrs.get("role") == "main"):
        parser = _PageText(is_main)
        parser.feed(html)
        parser.close()
        if parser.found:
            return f'<div role="main">{"".join(parser.out)}</div>'
    return ""


def write_search_text(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    pages = {}
    for page in site_pages(outdir):
        text = page_text_skeleton(page.read_text(encoding="utf-8"))
        if text and page.name not in ("search.html", "genindex.html"):
            pages[page.relative_to(outdir).as_posix()] = text
    text = json.dumps(pages, ensure_ascii=False, separators=(",", ":"))
    (outdir / "_static" / SEARCH_TEXT).write_text(f"window.GRPO_SEARCH_TEXT = {text};\n",
                                                  encoding="utf-8")


# --- 8. the Chinese terms' font ----------------------------------------------------------------

CJK = re.compile(r"[\u2e80-\u2fdf\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                 r"\uff00-\uffef]")
CJK_FONT = "_static/fonts/grpo-lab-cjk.woff2"
CJK_FAMILY = "GRPO Lab CJK"
CJK_SOURCE = "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"  # fonts-noto-cjk
CJK_SOURCE_NAME = "Noto Sans CJK SC"


def book_characters(root: Path) -> set:
    """Every CJK character in the book's sources: chapters (outputs included), pages and the
    interview deck's cards (chapter 9 renders them)."""
    files = [*root.glob("chapters/*.ipynb"), *root.glob("*.md"),
             *root.glob("grpo_lab/deck/cards/*.toml")]
    return set().union(*(CJK.findall(f.read_text(encoding="utf-8")) for f in files))


def make_cjk_font(root: Path, source: str = CJK_SOURCE) -> Path:
    from fontTools import subset
    from fontTools.ttLib import TTCollection, TTFont

    if source.endswith(".ttc"):
        fonts = TTCollection(source).fonts
        font = next(f for f in fonts if f["name"].getDebugName(1) == CJK_SOURCE_NAME)
    else:
        font = TTFont(source)
    chars = sorted(book_characters(root))
    options = subset.Options()
    options.flavor, options.hinting, options.desubroutinize = "woff2", False, True
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]  # keep the copyright and licence
    subsetter = subset.Subsetter(options)
    subsetter.populate(text="".join(chars))
    subsetter.subset(font)
    for record in font["name"].names:  # a modified font takes a new name (SIL OFL 1.1, 3)
        if record.nameID in (1, 3, 4, 16):
            record.string = CJK_FAMILY
        elif record.nameID == 6:
            record.string = CJK_FAMILY.replace(" ", "") + "-Regular"
    font.flavor = "woff2"
    out = root / CJK_FONT
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(out)
    print(f"{out}: {len(chars)} characters, {out.stat().st_size} bytes, from {source}")
    return out


# --- 11. the interview deck for Anki ------------------------------------------------------------

APKG = "deck/grpo-lab-deck.apkg"


def write_anki_deck(app, exception) -> None:
    """Write the deck where a page of the build offers it (chapter 9 links it; a book without
    that page, such as the test builds' one-notebook books, does not pay for the deck)."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    if not any(APKG in page.read_text(encoding="utf-8") for page in site_pages(outdir)):
        return
    from grpo_lab.deck.anki import build_apkg

    build_apkg(outdir / APKG)


# --- 12. the cheat sheet's questions from the deck ---------------------------------------------

DECK_MARKER = "<!-- deck-questions -->"


def deck_questions(app, docname, source) -> None:
    if docname != "cheatsheet" or DECK_MARKER not in source[0]:
        return
    from grpo_lab.deck import questions_markdown

    source[0] = source[0].replace(DECK_MARKER, questions_markdown(page="cheatsheet.md"))


# --- 13. a printed line stays one line -----------------------------------------------------------

def exact_streams(outputs):
    """Join every stream output with the first of its name, text exactly as written (no
    newline added between the pieces of one print); other outputs keep their place."""
    merged, first = [], {}
    for output in outputs:
        if output.get("output_type") == "stream":
            name = output.get("name")
            text = output.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            if name in first:
                first[name]["text"] += text
                continue
            output = copy.copy(output)          # the same class (NotebookNode), not a dict
            output["text"] = text
            first[name] = output
        merged.append(output)
    return merged


def patch_stream_merge() -> None:
    from myst_nb.core import render

    original = getattr(render.coalesce_streams, "__wrapped__", render.coalesce_streams)

    def coalesce(outputs):
        return original(exact_streams(outputs))

    coalesce.__wrapped__ = original
    render.coalesce_streams = coalesce


# --- 14. formulas as text where no MathJax runs ------------------------------------------------

# Where a formula is read as plain text (the search index's titles, search snippets, a {ref}
# that copies its heading), TeX source is noise: "What \\beta does", "\\(\\pi_{\\text{old}}\\)".
# tex_text writes the reading a person would type: "What β does", "π_old".
TEX_SYMBOLS = {
    **{name: chr(code) for name, code in [
        ("alpha", 0x3B1), ("beta", 0x3B2), ("gamma", 0x3B3), ("delta", 0x3B4),
        ("epsilon", 0x3F5), ("varepsilon", 0x3B5), ("zeta", 0x3B6), ("eta", 0x3B7),
        ("theta", 0x3B8), ("iota", 0x3B9), ("kappa", 0x3BA), ("lambda", 0x3BB), ("mu", 0x3BC),
        ("nu", 0x3BD), ("xi", 0x3BE), ("pi", 0x3C0), ("rho", 0x3C1), ("sigma", 0x3C3),
        ("tau", 0x3C4), ("upsilon", 0x3C5), ("phi", 0x3D5), ("varphi", 0x3C6), ("chi", 0x3C7),
        ("psi", 0x3C8), ("omega", 0x3C9), ("Gamma", 0x393), ("Delta", 0x394),
        ("Theta", 0x398), ("Lambda", 0x39B), ("Xi", 0x39E), ("Pi", 0x3A0), ("Sigma", 0x3A3),
        ("Phi", 0x3A6), ("Psi", 0x3A8), ("Omega", 0x3A9)]},
    "sum": "Σ", "prod": "Π", "nabla": "∇", "partial": "∂", "infty": "∞", "ell": "ℓ",
    "cdot": "·", "times": "×", "pm": "±", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥",
    "ne": "≠", "neq": "≠", "approx": "≈", "sim": "~", "propto": "∝", "in": "∈", "mid": "|",
    "to": "→", "rightarrow": "→", "leftarrow": "←", "xrightarrow": "→", "top": "ᵀ",
    "star": "*", "dots": "…", "ldots": "…", "cdots": "…", "Vert": "‖", "lvert": "|",
    "rvert": "|", "vert": "|", "|": "‖", "lVert": "‖", "rVert": "‖", "langle": "⟨", "rangle": "⟩",
    "log": "log", "ln": "ln", "exp": "exp", "min": "min", "max": "max", "mathbb": "",
    "quad": " ", "qquad": " ", ",": " ", ";": " ", ":": " ", "!": "", " ": " ",
}
TEX_ACCENTS = {"hat": "\u0302", "widehat": "\u0302", "tilde": "\u0303", "widetilde": "\u0303",
               "bar": "\u0304", "overline": "\u0304", "vec": "\u20d7", "dot": "\u0307"}
TEX_DROP = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
            "biggl", "biggr", "Biggl", "Biggr", "displaystyle", "textstyle", "limits",
            "nolimits", "mathrel", "mathop", "boxed", "underbrace", "overbrace", "begin", "end"}
TEX_TOKEN = re.compile(r"\\([A-Za-z]+|.)|([{}^_])|([^\\{}^_]+)", re.S)


def _tex_group(tokens, i):
    """The text of one argument starting at tokens[i] ({...} or a single token); (text, next)."""
    if i < len(tokens) and tokens[i] == ("", "{", ""):
        depth, j = 1, i + 1
        while j < len(tokens) and depth:
            depth += {"{": 1, "}": -1}.get(tokens[j][1], 0)
            j += 1
        return _tex_tokens(tokens[i + 1:j - 1]), j
    if i < len(tokens) and tokens[i][2][1:]:    # r_i - 1: the argument is "i" alone
        text = tokens[i][2].lstrip() or " "
        tokens[i] = ("", "", text[1:])
        return text[0], i
    if i < len(tokens):
        return _tex_tokens(tokens[i:i + 1]), i + 1
    return "", i


def _tex_tokens(tokens) -> str:
    out, i = [], 0
    while i < len(tokens):
        command, brace, text = tokens[i]
        i += 1
        if text:
            out.append(text)
        elif brace in ("{", "}"):
            continue
        elif brace:                    # ^ or _
            arg, i = _tex_group(tokens, i)
            out.append(("^" if brace == "^" else "_") + (arg if len(arg) <= 1 else
                                                           arg if arg.isalnum() else f"({arg})"))
        elif command in ("frac", "tfrac", "dfrac"):
            num, i = _tex_group(tokens, i)
            den, i = _tex_group(tokens, i)
            wrap = lambda x: x if len(x) <= 1 or x.replace(" ", "").isalnum() else f"({x})"
            out.append(f"{wrap(num)}/{wrap(den)}")
        elif command == "sqrt":
            arg, i = _tex_group(tokens, i)
            out.append(f"√{arg}" if len(arg) <= 1 else f"√({arg})")
        elif command in TEX_ACCENTS:
            arg, i = _tex_group(tokens, i)
            out.append(arg[:1] + TEX_ACCENTS[command] + arg[1:] if arg else "")
        elif command in ("text", "textrm", "texttt", "textbf", "textit", "mathrm", "mathbf",
                         "mathit", "mathsf", "mathtt", "mathcal", "operatorname", "boldsymbol",
                         "mbox", "emph"):
            arg, i = _tex_group(tokens, i)
            out.append(arg)
        elif command in TEX_SYMBOLS:
            out.append(TEX_SYMBOLS[command])
        elif command in TEX_DROP:
            if command in ("begin", "end"):
                _, i = _tex_group(tokens, i)
        elif len(command) == 1:        # \{ \} \_ \% \& \# \$ \\
            out.append(" " if command == "\\" else command)
        else:                          # anything else: its name, never a backslash
            out.append(command)
    return "".join(out)


def tex_text(tex: str) -> str:
    """A formula's TeX source as plain text, for places where no MathJax runs.

    >>> tex_text(r"\\pi_{\\text{old}}")
    'π_old'
    >>> tex_text(r"What \\(\\beta\\) does"), tex_text(r"\\hat{A}_{i,t} = \\frac{r_i - \\mu}{\\sigma}")
    ('What β does', 'Â_(i,t) = (r_i - μ)/σ')
    """
    tex = re.sub(r"\\[()\[\]]|\$", "", tex)      # \( \) \[ \] and $ delimiters
    tokens = [(m.group(1) or "", m.group(2) or "", m.group(3) or "")
              for m in TEX_TOKEN.finditer(tex)]
    return unicodedata.normalize("NFC", re.sub(r"[ \t\n]+", " ", _tex_tokens(tokens)).strip())


def tex_in_titles(app, exception) -> None:
    """The search index's page and section titles as text (``tex_text``), not TeX."""
    if exception is not None or app.builder.format != "html":
        return
    path = Path(app.outdir) / "searchindex.js"
    if not path.exists():
        return
    head, tail = "Search.setIndex(", ")"
    text = path.read_text(encoding="utf-8")
    if not text.startswith(head):
        return
    index = json.loads(text[len(head):text.rstrip().rindex(tail)])
    plain = lambda title: tex_text(title) if "\\" in (title or "") else title
    index["titles"] = [plain(t) for t in index.get("titles", [])]
    merged = {}
    for title, places in index.get("alltitles", {}).items():
        merged.setdefault(plain(title), []).extend(places)
    index["alltitles"] = merged
    path.write_text(head + json.dumps(index, separators=(",", ":"), sort_keys=True,
                                      ensure_ascii=False) + tail, encoding="utf-8")


MATH_SPAN = re.compile(r'<(span|div) class="math notranslate nohighlight">(.*?)</\1>', re.S)


def math_with_text(text: str) -> str:
    """Each formula of a page carries its ``tex_text`` (``data-gl-text``): the search snippets
    (grpo_site.js, page_text_skeleton) show it instead of the TeX source."""
    def tag(match):
        kind, body = match.groups()
        plain = html_lib.escape(tex_text(html_lib.unescape(body)), quote=True)
        return (f'<{kind} class="math notranslate nohighlight" data-gl-text="{plain}">'
                f"{body}</{kind}>")
    return MATH_SPAN.sub(tag, text)


def title_math_in_refs(app, doctree, docname) -> None:
    """A {ref} without text of its own shows its heading as written, formulas typeset: Sphinx
    copies the heading's plain text (``\\pi_{\\text{old}}`` raw on the page); here the link
    gets a copy of the heading's own nodes, math included."""
    from docutils import nodes

    std = app.env.get_domain("std")
    for inline in list(doctree.findall(nodes.inline)):
        if "std-ref" not in inline.get("classes", []) or "\\" not in inline.astext():
            continue
        link = inline.parent
        if not isinstance(link, nodes.reference):
            continue
        anchor = link.get("refid") or link.get("refuri", "").partition("#")[2]
        found = [doc for doc, labelid, name in std.labels.values()
                 if labelid == anchor and name == inline.astext()]
        if not found:
            continue
        section = app.env.get_doctree(found[0]).ids.get(anchor)
        title = section.next_node(nodes.title) if section is not None else None
        if title is not None and any(isinstance(n, nodes.math) for n in title.findall()):
            inline.children = []
            inline.extend(child.deepcopy() for child in title.children)


# --- 15. the test run's build reads the stored outputs -------------------------------------------

STORED_ENV = "GRPO_LAB_STORED_OUTPUTS"


def stored_outputs(app, config) -> None:
    """With ``GRPO_LAB_STORED_OUTPUTS=1`` (the test run, tests/conftest.py) the chapters are not
    executed again: nbval has executed each one in the same run and checked what it stores,
    frames and alt text included (scripts/execute_chapters.py writes them). The README's build
    command still executes every chapter."""
    if os.environ.get(STORED_ENV, "") not in ("", "0"):
        config.nb_execution_mode = "off"


def setup(app):
    os.environ[STATIC_ENV] = "1"
    app.connect("config-inited", stored_outputs, priority=400)
    patch_stream_merge()
    app.connect("builder-inited", kernel_startup)
    app.connect("source-read", deck_questions)
    app.connect("doctree-read", drop_widget_state)
    app.connect("doctree-read", figure_alt_text)
    app.connect("html-page-context", drop_thebe)
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", lighten_pages)
    app.connect("build-finished", write_search_text)
    app.connect("build-finished", write_anki_deck)
    app.connect("build-finished", tex_in_titles)
    app.connect("doctree-resolved", title_math_in_refs)
    app.connect("build-finished", forget_failed_build)
    app.add_css_file(ICONS_CSS)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    if len(sys.argv) in (2, 3) and sys.argv[1] == "cjk-font":
        make_cjk_font(Path(__file__).resolve().parents[1], *sys.argv[2:])
    else:
        sys.exit("usage: python _ext/grpo_site.py cjk-font [FONT.ttc|FONT.otf]")
