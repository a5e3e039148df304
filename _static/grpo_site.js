// GRPO Lab: small fixes to what a reader meets on the page (Jupyter Book adds every .js in
// _static to every page). Each is checked on every page by tests/site/test_browser.py.
(function () {
  "use strict";

  // 1. A collapsible answer opens wherever its title is clicked. sphinx-togglebutton's
  // handler only knows the title itself and its chevron: a click on the math or code inside
  // a title ("How large should \beta be?") threw "button is not defined" and opened nothing.
  // Such a click is passed on to the title, as if the title itself had been clicked.
  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element)) { return; }
    var title = target.closest(".admonition.toggle > .admonition-title");
    if (!title || target === title || target.closest("a, .toggle-button")) { return; }
    event.stopPropagation();
    event.preventDefault();
    title.click();
  }, true);

  // 2. Figures stay legible on a narrow screen. A matplotlib figure's 10-pt text is
  // 10 * dpi / 72 image pixels tall; below MIN_SCALE of its natural width it would read
  // smaller than MIN_TEXT_PX, so it keeps that width and its output box scrolls sideways.
  // Without a pHYs chunk: matplotlib's 100 dpi, and 72 dpi for a slider's frames (gl.sliders).
  var MIN_TEXT_PX = 8, TEXT_PT = 10, DEFAULT_DPI = 100, FRAMES_DPI = 72;

  function pngDpi(img) {
    // the build writes data-gl-dpi on figure files; a slider's frames are data: URIs whose
    // pHYs chunk (pixels per metre) sits in the first bytes
    if (img.dataset.glDpi) { return Number(img.dataset.glDpi); }
    var fallback = img.closest(".gl-frames") ? FRAMES_DPI : DEFAULT_DPI;
    var src = img.getAttribute("src") || "";
    var head = "data:image/png;base64,";
    if (src.indexOf(head) !== 0) { return fallback; }
    var bytes;
    try {
      bytes = atob(src.slice(head.length, head.length + 1400).replace(/[^A-Za-z0-9+/]/g, "")
        .slice(0, 1396));
    } catch (e) { return fallback; }
    var at = bytes.indexOf("pHYs");
    if (at < 0 || at + 13 > bytes.length) { return fallback; }
    var ppm = 0;
    for (var i = 0; i < 4; i++) { ppm = ppm * 256 + bytes.charCodeAt(at + 4 + i); }
    return bytes.charCodeAt(at + 12) === 1 && ppm > 0 ? ppm * 0.0254 : fallback;
  }

  function keepLegible(img) {
    if (!img.naturalWidth) { return; }
    var scale = MIN_TEXT_PX / (TEXT_PT * pngDpi(img) / 72);
    var minWidth = Math.min(img.naturalWidth, Math.ceil(img.naturalWidth * scale));
    img.style.minWidth = minWidth + "px";
    img.classList.add("gl-legible");
  }

  function figures() {
    return document.querySelectorAll(
      ".bd-article .cell_output img, .bd-article .gl-frames img, .bd-article figure img");
  }

  function watchFigures() {
    figures().forEach(function (img) {
      if (img.complete) { keepLegible(img); }
      img.addEventListener("load", function () { keepLegible(img); });
    });
  }

  // 3. Search snippets show the words around the match. Sphinx fetches each result's page
  // and cuts its snippet from the text of [role="main"], which in this theme also holds the
  // header's buttons and the print-only table of contents: chapters 1 and 2 showed those. On
  // the search page those fetches get the article alone (its ids kept, so that a section's
  // anchor still finds it). From file:// (the site opened from disk) a browser refuses such a
  // fetch: the build writes the pages' text to _static/grpo-search-text.js, loaded here then.
  // Either way each formula shows as text (its data-gl-text), not as \\(...\\) source.
  function searchSnippets() {
    if (!document.getElementById("search-results") &&
        !/\/search\.html$/.test(location.pathname)) { return; }
    if (!window.fetch) { return; }
    var fromDisk = location.protocol === "file:";
    var root = document.documentElement.dataset.content_root || "";
    var ready = Promise.resolve();
    if (fromDisk) {
      ready = new Promise(function (resolve) {
        var script = document.createElement("script");
        script.src = root + "_static/grpo-search-text.js";
        script.onload = resolve;
        script.onerror = resolve;
        document.head.appendChild(script);
      });
    }
    var siteRoot = new URL(root || "./", location.href).href;
    var fetchOriginal = window.fetch.bind(window);
    function articleOnly(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var article = doc.querySelector(".bd-article");
      // a formula reads as text ("π_old", written by the build), not as its TeX source
      if (article) {
        article.querySelectorAll(".math").forEach(function (math) {
          math.replaceWith(doc.createTextNode(math.getAttribute("data-gl-text") || math.textContent));
        });
      }
      return article ? '<div role="main">' + article.innerHTML + "</div>" : html;
    }
    window.fetch = function (resource, options) {
      var url = new URL(String(resource && resource.url || resource), location.href);
      if (url.href.indexOf(siteRoot) !== 0 || !/\.html$/.test(url.pathname)) {
        return fetchOriginal(resource, options);
      }
      if (!fromDisk) {
        return fetchOriginal(resource, options).then(function (response) {
          if (!response.ok) { return response; }
          return response.text().then(function (html) {
            return new Response(articleOnly(html),
                                {status: 200, headers: {"Content-Type": "text/html"}});
          });
        });
      }
      var page = url.href.slice(siteRoot.length).replace(/[?#].*$/, "");
      return ready.then(function () {
        var pages = window.GRPO_SEARCH_TEXT || {};
        var html = Object.prototype.hasOwnProperty.call(pages, page) ? pages[page] : "";
        return new Response(html, {status: 200, headers: {"Content-Type": "text/html"}});
      });
    };
  }

  // 4. Inline math wider than its line (a long formula on a phone) cannot wrap: it becomes a
  // box that scrolls sideways. Only those few get it, as such a box sits on the line lower.
  function fitWideMath() {
    document.querySelectorAll(".bd-article mjx-container:not([display=\"true\"])")
      .forEach(function (math) {
        var line = math.parentElement && math.parentElement.closest("p, li, td, th, dd, dt, div");
        if (!line || !math.getClientRects().length) { return; }
        var wide = math.classList.contains("gl-wide-math");
        var width = wide ? math.scrollWidth : math.getBoundingClientRect().width;
        math.classList.toggle("gl-wide-math", width > line.clientWidth + 1);
      });
    if (typeof markSoon === "function") { markSoon(); }
  }

  function watchMath() {
    var article = document.querySelector(".bd-article");
    if (!article || !window.MathJax || !MathJax.startup || !MathJax.startup.promise) { return; }
    MathJax.startup.promise.then(function () {
      fitWideMath();
      if (window.ResizeObserver) {
        new ResizeObserver(function () { requestAnimationFrame(fitWideMath); }).observe(article);
      }
    });
  }

  // 5. Every menu button opens its drawer. The theme (pydata-sphinx-theme 0.17, upstream
  // issue 2451) binds only the first .primary-toggle and .secondary-toggle of the page, both
  // hidden; the ones a reader sees (the header's menu and "On this page" buttons) did
  // nothing. A click on any other toggle is passed to the bound one, which opens the drawer
  // on a phone (and collapses the sidebar on a laptop, as sphinx-book-theme does).
  document.addEventListener("click", function (event) {
    var target = event.target instanceof Element &&
      event.target.closest(".primary-toggle, .secondary-toggle");
    if (!target) { return; }
    var kind = target.classList.contains("primary-toggle") ? ".primary-toggle" : ".secondary-toggle";
    var bound = document.querySelector(kind);
    if (!bound || bound === target) { return; }
    event.preventDefault();
    event.stopPropagation();
    bound.click();
  }, true);

  // 6. A box that scrolls sideways says so. A figure that keeps its legible width, or a
  // formula wider than a phone, scrolls inside its own box: it gets a cue under it (hidden
  // once scrolled to the end), a fade at its cut edge, and a tab stop with a name, so that a
  // keyboard can scroll it too (axe: scrollable-region-focusable).
  var SCROLLERS = ".bd-article .cell_output, .bd-article .gl-frames, .bd-article div.math, " +
    ".bd-article mjx-container[display=\"true\"], .bd-article mjx-container.gl-wide-math";

  function cueFor(box) {
    var next = box.nextElementSibling;
    if (next && next.classList.contains("gl-scroll-cue")) { return next; }
    var cue = document.createElement("p");
    cue.className = "gl-scroll-cue";
    cue.setAttribute("aria-hidden", "true");
    cue.textContent = box.matches("div.math, mjx-container")
      ? "\u2194 wider than the screen: swipe or scroll the formula sideways"
      : "\u2194 wider than the screen: swipe or scroll the figure sideways";
    if (box.tagName.toLowerCase() === "mjx-container" && !box.matches("[display=\"true\"]")) {
      return null;  // inline math: the fade alone (a paragraph cannot hold the cue)
    }
    box.insertAdjacentElement("afterend", cue);
    return cue;
  }

  function markScrollers() {
    // inner boxes first: a formula's own box scrolls, not the block around it
    Array.prototype.slice.call(document.querySelectorAll(SCROLLERS)).reverse()
      .forEach(function (box) {
      if (!box.getClientRects().length) { return; }
      var inner = box.querySelector(".gl-scrolls");
      var scrolls = box.scrollWidth > box.clientWidth + 1 && !inner;
      box.classList.toggle("gl-scrolls", scrolls);
      var cue = box.nextElementSibling;
      cue = cue && cue.classList.contains("gl-scroll-cue") ? cue : null;
      if (!scrolls) {
        if (cue) { cue.hidden = true; }
        if (box.dataset.glScrollTab !== undefined) {
          if (box.dataset.glScrollTab) { box.setAttribute("tabindex", box.dataset.glScrollTab); }
          else { box.removeAttribute("tabindex"); }
          if (!box.matches("mjx-container")) {
            box.removeAttribute("role");
            box.removeAttribute("aria-label");
          }
          delete box.dataset.glScrollTab;
        }
        return;
      }
      cue = cue || cueFor(box);
      if (cue) { cue.hidden = false; }
      if (box.getAttribute("tabindex") !== "0" && box.dataset.glScrollTab === undefined) {
        box.dataset.glScrollTab = box.getAttribute("tabindex") || "";  // MathJax's, if any
        box.setAttribute("tabindex", "0");
        if (!box.matches("mjx-container")) {
          box.setAttribute("role", "region");
          box.setAttribute("aria-label", box.matches("div.math")
            ? "formula, scrolls sideways" : "figure, scrolls sideways");
        }
      }
      var atEnd = box.scrollLeft + box.clientWidth >= box.scrollWidth - 2;
      box.classList.toggle("gl-scrolled-end", atEnd);
      if (!box.dataset.glScrollWatch) {
        box.dataset.glScrollWatch = "1";
        box.addEventListener("scroll", function () {
          box.classList.toggle("gl-scrolled-end",
            box.scrollLeft + box.clientWidth >= box.scrollWidth - 2);
        }, {passive: true});
      }
    });
  }

  var pending = 0;
  function markSoon() {
    if (pending) { return; }
    pending = requestAnimationFrame(function () { pending = 0; markScrollers(); });
  }

  searchSnippets();
  window.addEventListener("load", function () {
    markSoon();
    document.querySelectorAll(".bd-article img").forEach(function (img) {
      img.addEventListener("load", markSoon);
    });
    if (window.ResizeObserver) {
      var article = document.querySelector(".bd-article");
      if (article) { new ResizeObserver(markSoon).observe(article); }
    }
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(markSoon);
    }
  });
  window.addEventListener("load", watchMath);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", watchFigures);
  } else {
    watchFigures();
  }
})();
