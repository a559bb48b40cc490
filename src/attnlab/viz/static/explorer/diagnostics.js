// -- diagnostics: sortable head table --------------------------------------------
import { Explorer, fmt, h, s, svgRoot } from "./core.js";
Explorer.prototype.view_diagnostics = function () {
  var self = this, m = this.cur().meta;
  h("div", {"class": "ax-note"}, this.controls, this.t("diagNote"));
  if (m.cross) h("div", {"class": "ax-note ax-crossdiag"}, this.controls, this.t("crossDiag"));
  var keys = m.diagnostics.columns, rows = m.diagnostics.rows.slice();
  var sk = this.s.sortKey, dir = this.s.sortDir;
  function cmp(x, y) { return typeof x === "string" ? x.localeCompare(y) : x - y; }
  rows.sort(function (a, b) {
    return cmp(a[sk], b[sk]) * dir || (a.layer - b.layer) || (a.head - b.head);
  });
  var cw = 92, rh = 20, top = 28;
  var svg = svgRoot(keys.length * cw + 80, top + rows.length * rh + 10, "diagnostics");
  keys.forEach(function (k, c) {
    var t = s("text", {x: 6 + c * cw, y: 18, "font-weight": 600, "class": "ax-sort", "data-key": k,
      fill: k === sk ? "#3451b2" : "#5b6478", style: "cursor:pointer"}, svg,
    self.t(k) + (k === sk ? (dir > 0 ? " ▲" : " ▼") : ""));
    s("title", {}, t, self.t(k));
  });
  rows.forEach(function (r, i) {
    var g = s("g", {"class": "ax-diag-row", "data-layer": r.layer, "data-head": r.head,
      style: "cursor:pointer"}, svg);
    s("rect", {x: 0, y: top + i * rh, width: keys.length * cw + 80, height: rh,
      fill: (r.layer === self.s.layer && r.head === self.s.head) ? "#fde9e2" : (i % 2 ? "#f6f7fb" : "#fff")}, g);
    keys.forEach(function (k, c) {
      var v = r[k];
      if (k === "roles" && v) v = v.split(", ").map(function (x) { return self.t("role:" + x); })
        .join(self.s.lang === "zh" ? "、" : ", ");
      s("text", {x: 6 + c * cw, y: top + i * rh + 14, "class": "ax-num"}, g,
        typeof v === "number" && Math.round(v) !== v ? fmt(v, 3) : String(v));
    });
  });
  svg.addEventListener("click", function (e) {
    var srt = e.target.closest(".ax-sort");
    if (srt) {
      var k = srt.getAttribute("data-key");
      if (self.s.sortKey === k) self.s.sortDir = -self.s.sortDir;
      else { self.s.sortKey = k; self.s.sortDir = k === "layer" || k === "head" || k === "roles" ? 1 : -1; }
      self.render();
      return;
    }
    var g = e.target.closest(".ax-diag-row");
    if (g) self.select(+g.getAttribute("data-layer"), +g.getAttribute("data-head"), "head");
  });
  this.place(svg);
};
