// -- head view: arcs between query and key tokens (or blocks) -------------------------
import { Explorer, clamp, h, headColor, s, svgRoot } from "./core.js";
Explorer.prototype.view_head = function () {
  var self = this, m = this.cur().meta, R = m.rows.length, C = m.cols.length;
  var l = this.s.layer, hd = this.s.head, color = headColor(hd, m.H);
  h("div", {"class": "ax-note"}, this.controls, this.t("hoverTok"));
  var rh = 16, tw = 150, gap = 220, top = 10;
  var svg = svgRoot(2 * tw + gap + 20, top + Math.max(R, C) * rh + 10, "head");
  var x1 = tw + 4, x2 = tw + gap - 4, mid = (x1 + x2) / 2;
  function yr(i) { return top + i * rh + rh / 2; }
  function arc(i, j, w, parent) {
    s("path", {d: "M" + x1 + "," + yr(i) + " C" + mid + "," + yr(i) + " " + mid + "," + yr(j) +
      " " + x2 + "," + yr(j), "data-q": i, "data-k": j, stroke: color,
      "stroke-opacity": clamp(w, 0.02, 1).toFixed(3),
      "stroke-width": (0.6 + 2.4 * w).toFixed(2), fill: "none"}, parent);
  }
  var cand = [], i, j;
  for (i = 0; i < R; i++) for (j = 0; j < C; j++) {
    var w = this.w(l, hd, i, j);
    if (w >= 0.01) cand.push([w, i, j]);
  }
  if (cand.length > 4000) { cand.sort(function (a, b) { return b[0] - a[0]; }); cand.length = 4000; }
  var base = s("g", {"class": "ax-arcs"}, svg);
  cand.forEach(function (c) { arc(c[1], c[2], c[0], base); });
  var focus = s("g", {"class": "ax-focus"}, svg);
  var left = s("g", {"class": "ax-qtokens"}, svg), right = s("g", {"class": "ax-ktokens"}, svg);
  var sel = m.pooled ? this.s.block : this.s.query;
  for (i = 0; i < R; i++)
    s("text", {x: tw, y: yr(i) + 4, "text-anchor": "end", "class": "ax-tok" +
      (i === sel ? " ax-sel" : ""), "data-row": i}, left, m.rows[i]);
  for (j = 0; j < C; j++)
    s("text", {x: tw + gap, y: yr(j) + 4, "class": "ax-tok", "data-col": j}, right, m.cols[j]);
  function isolate(row, col) {
    focus.innerHTML = "";
    base.style.display = "none";
    for (var a = 0; a < R; a++) for (var b = 0; b < C; b++) {
      if ((row !== null && a !== row) || (col !== null && b !== col)) continue;
      var v = self.w(l, hd, a, b);
      if (v >= 0.002) arc(a, b, v, focus);
    }
  }
  svg.addEventListener("mouseover", function (e) {
    var t = e.target;
    if (t.hasAttribute && t.hasAttribute("data-row")) isolate(+t.getAttribute("data-row"), null);
    else if (t.hasAttribute && t.hasAttribute("data-col")) isolate(null, +t.getAttribute("data-col"));
  });
  svg.addEventListener("mouseout", function (e) {
    if (e.target.classList && e.target.classList.contains("ax-tok")) {
      focus.innerHTML = ""; base.style.display = "";
    }
  });
  svg.addEventListener("click", function (e) {
    var t = e.target;
    if (!(t.hasAttribute && t.hasAttribute("data-row"))) return;
    if (m.pooled) { self.s.block = +t.getAttribute("data-row"); self.render(); }
    else self.setQuery(+t.getAttribute("data-row"));
  });
  this.place(svg);
};
