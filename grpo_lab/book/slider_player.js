// The frame player of grpo_lab.book.sliders (the static site's sliders). One range input
// (or select) per parameter, marked data-gl-param="k"; on every change it computes the
// combination's position in C order (the last parameter varies fastest), looks up which
// distinct frame that combination shows, and puts that PNG in the image, with that frame's
// alt text and the settings. A range input's aria-valuetext is the value it shows (a screen
// reader hears "G: 16", not the position on the grid). It loads nothing in Jupyter: the
// frames are in the JSON script beside it. On the site the build moves them to files of their
// own ("files": one URL per frame), which the browser caches. frames_html() inlines this file
// after dropping these leading comment lines.
(function () {
  var root = document.currentScript.parentElement;
  var data = JSON.parse(root.querySelector("script.gl-frames-data").textContent);
  var img = root.querySelector("img.gl-frames-figure");
  var inputs = root.querySelectorAll("[data-gl-param]");
  function source(frame) {
    return data.files ? data.files[frame] : "data:image/png;base64," + data.images[frame];
  }
  function show() {
    var flat = 0, parts = [];
    inputs.forEach(function (el) {
      var k = Number(el.dataset.glParam), i = Number(el.value);
      flat = flat * data.values[k].length + i;
      var readout = root.querySelector('[data-gl-readout="' + k + '"]');
      if (readout) { readout.textContent = data.values[k][i]; }
      if (el.type === "range") { el.setAttribute("aria-valuetext", data.values[k][i]); }
      parts.push(data.names[k] + "=" + data.values[k][i]);
    });
    var frame = data.index[flat];
    img.src = source(frame);
    img.alt = (data.alts ? data.alts[frame] : data.alt) + " (" + parts.join(", ") + ")";
    root.dataset.glFrame = frame;
  }
  inputs.forEach(function (el) {
    el.addEventListener("input", show);
    el.addEventListener("change", show);
  });
})();
