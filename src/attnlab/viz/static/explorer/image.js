// -- image view: the query's attention over the image's patches -----------------------
/* The exact weights of the current query row over every key: from the page (short
 * inputs) or the server (long ones); null when neither has it, undefined while loading. */
import { Explorer, css, fmt, h, heat, s, svgRoot } from "./core.js";
Explorer.prototype.queryRow = function () {
  var m = this.cur().meta, st = this.s, row, j;
  if (!m.pooled) {
    row = new Float64Array(m.Lk);
    for (j = 0; j < m.Lk; j++) row[j] = this.w(st.layer, st.head, st.query, j);
    return row;
  }
  if (!m.api) return null;
  var ex = this.exactRow();
  if (ex === undefined || ex === null) return ex;
  if (ex.error) return ex;
  return ex.weights;
};

/* The image view has something to draw only for an image. */
Explorer.prototype.shown_image = function (m) { return !!m.image; };

Explorer.prototype.view_image = function () {
  var self = this, m = this.cur().meta, im = m.image, st = this.s;
  var rows = im.grid[0], cols = im.grid[1], np = im.prefix, q = st.query;
  h("div", {"class": "ax-note"}, this.controls, this.t("imageNote"));
  var row = this.queryRow();
  if (row === null) {
    h("div", {"class": "ax-note ax-noimage"}, this.controls,
      this.t("imageLong", {n: m.Lq, m: m.max_tokens}));
    return;
  }
  if (row === undefined) { h("div", {"class": "ax-note"}, this.controls, this.t("loading")); return; }
  if (row.error) {
    h("div", {"class": "ax-note ax-bad"}, this.controls, this.t("fetchError") + row.error);
    return;
  }
  var ih = im.image_size ? im.image_size[0] : rows * (im.patch_size || 16);
  var iw = im.image_size ? im.image_size[1] : cols * (im.patch_size || 16);
  var k = 448 / Math.max(ih, iw), W = iw * k, H = ih * k, pad = 10, side = 230;
  var svg = svgRoot(pad + W + 24 + side, Math.max(pad + H + 30, pad + 60 + 20 * np + 90), "image");
  svg.setAttribute("data-row", st.layer + ":" + st.head + ":" + q);
  s("image", {x: pad, y: pad, width: W, height: H, href: "data:image/png;base64," + im.png,
    preserveAspectRatio: "none", "class": "ax-photo",
    style: k >= 2 ? "image-rendering:pixelated" : ""}, svg);
  var pw = W / cols, ph = H / rows, mx = 0, onPatches = 0, j;
  for (j = np; j < m.Lk; j++) { mx = Math.max(mx, row[j]); onPatches += row[j]; }
  var g = s("g", {"class": "ax-overlay"}, svg);
  for (var r = 0; r < rows; r++) for (var c = 0; c < cols; c++) {
    var key = np + r * cols + c, v = row[key], a = mx > 0 ? v / mx : 0;
    var rect = s("rect", {x: (pad + c * pw).toFixed(2), y: (pad + r * ph).toFixed(2),
      width: pw.toFixed(2), height: ph.toFixed(2), fill: css(heat(a)),
      "fill-opacity": (0.2 + 0.6 * a).toFixed(4), stroke: key === q ? "#111" : "none",
      "stroke-width": key === q ? 2.5 : 0, "class": "ax-patch" + (key === q ? " ax-qpatch" : ""),
      "data-key": key, "data-r": r, "data-c": c, "data-w": String(v)}, g);
    s("title", {}, rect, m.key_tokens[key] + ": " + fmt(v, 5));
  }
  s("rect", {x: pad, y: pad, width: W, height: H, fill: "none", stroke: "#c9cfdd"}, svg);
  // the legend and the prefix tokens, apart from the grid
  var x0 = pad + W + 24, y = pad + 14;
  s("text", {x: x0, y: y, "font-weight": 600}, svg, this.t("query") + " " + q + ": ");
  s("text", {x: x0 + 90, y: y, "class": "ax-tok ax-sel"}, svg, m.tokens[q]);
  y += 22;
  s("text", {x: x0, y: y, fill: "#5b6478"}, svg, this.t("patchMax") + " = " + fmt(mx, 4));
  for (j = 0; j < 20; j++)  // the colour scale, 0 … the largest patch weight
    s("rect", {x: x0 + j * 8, y: y + 6, width: 8, height: 8, fill: css(heat(j / 19)),
      "fill-opacity": (0.2 + 0.6 * j / 19).toFixed(3)}, svg);
  s("text", {x: x0, y: y + 26, "font-size": 10, fill: "#5b6478"}, svg, "0");
  s("text", {x: x0 + 160, y: y + 26, "font-size": 10, fill: "#5b6478", "text-anchor": "end"}, svg, fmt(mx, 3));
  y += 30;
  y += 18;
  s("text", {x: x0, y: y, fill: "#5b6478", "class": "ax-onpatches", "data-w": String(onPatches)},
    svg, this.t("onPatches") + ": " + fmt(onPatches, 4));
  if (np > 0) {
    y += 28;
    s("text", {x: x0, y: y, "font-weight": 600}, svg, this.t("prefixTokens"));
    for (j = 0; j < np; j++) {
      y += 20;
      var pg = s("g", {"class": "ax-prefix" + (j === q ? " ax-qprefix" : ""), "data-key": j,
        "data-w": String(row[j]), style: "cursor:pointer"}, svg);
      s("rect", {x: x0 - 4, y: y - 14, width: side - 10, height: 19, fill: "#fff",
        "fill-opacity": 0}, pg);  // the whole line answers a click
      s("text", {x: x0, y: y, "class": "ax-tok" + (j === q ? " ax-sel" : "")}, pg, m.key_tokens[j]);
      s("rect", {x: x0 + 70, y: y - 10, width: (100 * row[j]).toFixed(2), height: 11,
        fill: css(heat(1)), "fill-opacity": 0.8}, pg);
      s("text", {x: x0 + 176, y: y, "class": "ax-num"}, pg, fmt(row[j], 4));
    }
  }
  svg.addEventListener("click", function (e) {
    var t = e.target.closest(".ax-patch, .ax-prefix");
    if (t) self.setQuery(+t.getAttribute("data-key"));
  });
  svg.addEventListener("mouseover", function (e) {
    var t = e.target.closest(".ax-patch");
    if (t) self.showTip(e, m.key_tokens[+t.getAttribute("data-key")] + ": " + fmt(+t.getAttribute("data-w"), 5));
  });
  svg.addEventListener("mouseout", function () { self.hideTip(); });
  this.place(svg);
};
