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

  // 3. Search from file:// (the site opened from disk): Sphinx fetches each result's page
  // for its snippet, which a browser refuses from file://. The build writes the pages' text
  // to _static/grpo-search-text.js; on file:// the search page loads it and answers those
  // fetches from it. Served over http nothing changes.
  function searchFromDisk() {
    if (location.protocol !== "file:" || !document.getElementById("search-results") &&
        !/\/search\.html$/.test(location.pathname)) { return; }
    var root = document.documentElement.dataset.content_root || "";
    var ready = new Promise(function (resolve) {
      var script = document.createElement("script");
      script.src = root + "_static/grpo-search-text.js";
      script.onload = resolve;
      script.onerror = resolve;
      document.head.appendChild(script);
    });
    var siteRoot = new URL(root || "./", location.href).href;
    var fetchOriginal = window.fetch ? window.fetch.bind(window) : null;
    window.fetch = function (resource, options) {
      var url = new URL(String(resource && resource.url || resource), location.href);
      if (url.protocol !== "file:" || url.href.indexOf(siteRoot) !== 0) {
        return fetchOriginal(resource, options);
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

  searchFromDisk();
  window.addEventListener("load", watchMath);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", watchFigures);
  } else {
    watchFigures();
  }
})();
