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
"""

from __future__ import annotations

import os
import shutil
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


def setup(app):
    os.environ[STATIC_ENV] = "1"
    app.connect("doctree-read", drop_widget_state)
    app.connect("html-page-context", drop_thebe)
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", forget_failed_build)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
