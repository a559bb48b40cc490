// -- geometry view: queries and keys in one 2-D projection --------------------------
/* A merged trace (byte pieces merged into characters): the points are the pieces, each
 * labelled as a piece of its character; the lines from a query piece are its weights
 * recomputed from the page's q and k at the model's scale (qkRow in qk.js). */
import { Explorer, clamp, h, s, softmaxRow, svgRoot } from "./core.js";
Explorer.prototype.view_geometry = function () {
  var self = this, T = this.cur(), m = T.meta, n = this.qkHead(), M = this.pieceMap();
  if (n === null) {
    h("div", {"class": "ax-note ax-noqk"}, this.controls,
      m.qk_missing === "long" ? this.t("geoLong", {n: m.max_tokens}) : this.noQkText());
    return;
  }
  h("div", {"class": "ax-note"}, this.controls, this.t("geoNote"));
  if (M) h("div", {"class": "ax-note ax-geo-pieces"}, this.controls, this.t("geoPieces"));
  var Lq = m.qk.lq || m.Lq, Lk = m.qk.lk || m.Lk, size = 520, pad = 30, N = Lq + Lk, off = n * N * 2;
  var qLab = M ? function (a2) { return self.pieceLabel(a2); } : function (a2) { return m.tokens[a2]; };
  var kLab = M ? qLab : function (a2) { return m.key_tokens[a2]; };
  var sel = M ? M.start[this.s.query] + this.queryPiece(M.sizes[this.s.query]) : this.s.query;
  var svg = svgRoot(size + 2 * pad + 160, size + 2 * pad, "geometry");
  function X(v) { return pad + (v + 1) / 2 * size; }
  function Y(v) { return pad + (1 - (v + 1) / 2) * size; }
  s("rect", {x: pad, y: pad, width: size, height: size, fill: "#fafbfe", stroke: "#e3e6ee"}, svg);
  var links = s("g", {"class": "ax-links"}, svg), pts = s("g", {}, svg);
  var qc = "#3451b2", kc = "#e4572e", a;
  for (a = 0; a < Lk; a++) {
    var kx = X(T.geo[off + 2 * (Lq + a)]), ky = Y(T.geo[off + 2 * (Lq + a) + 1]);
    var r = s("rect", {x: kx - 3.5, y: ky - 3.5, width: 7, height: 7, fill: kc, "fill-opacity": 0.75,
      "class": "ax-pt", "data-kind": "k", "data-i": a}, pts);
    s("title", {}, r, "k " + a + ": " + kLab(a));
  }
  for (a = 0; a < Lq; a++) {
    var c = s("circle", {cx: X(T.geo[off + 2 * a]), cy: Y(T.geo[off + 2 * a + 1]), r: 4, fill: qc,
      "fill-opacity": a === sel ? 1 : 0.7, "class": "ax-pt", "data-kind": "q", "data-i": a,
      stroke: a === sel ? "#111" : "none"}, pts);
    s("title", {}, c, "q " + a + ": " + qLab(a));
  }
  s("circle", {cx: size + 2 * pad + 12, cy: 40, r: 4, fill: qc}, svg);
  s("text", {x: size + 2 * pad + 22, y: 44}, svg, this.t("queries"));
  s("rect", {x: size + 2 * pad + 8, y: 56, width: 7, height: 7, fill: kc}, svg);
  s("text", {x: size + 2 * pad + 22, y: 64}, svg, this.t("keys"));
  var lab = s("text", {x: size + 2 * pad + 8, y: 96, "class": "ax-tok ax-geo-label"}, svg, "");
  function link(i) {
    links.innerHTML = "";
    var x0 = X(T.geo[off + 2 * i]), y0 = Y(T.geo[off + 2 * i + 1]);
    var row = M ? softmaxRow(self.qkRow(i), m.scale[self.s.layer], 1).p : null;
    for (var b = 0; b < Lk && !m.pooled; b++) {
      var w = row ? row[b] : self.w(self.s.layer, self.s.head, i, b);
      if (w < 0.01) continue;
      s("line", {x1: x0, y1: y0, x2: X(T.geo[off + 2 * (Lq + b)]), y2: Y(T.geo[off + 2 * (Lq + b) + 1]),
        stroke: "#555", "stroke-opacity": clamp(w, 0.05, 1).toFixed(3), "stroke-width": 1 + 2 * w}, links);
    }
  }
  svg.addEventListener("mouseover", function (e) {
    var t = e.target;
    if (!t.classList || !t.classList.contains("ax-pt")) return;
    var i = +t.getAttribute("data-i"), kind = t.getAttribute("data-kind");
    lab.textContent = kind + " " + i + ": " + (kind === "q" ? qLab(i) : kLab(i));
    if (kind === "q") link(i);
    self.showTip(e, lab.textContent);
  });
  svg.addEventListener("mouseout", function () { self.hideTip(); });
  svg.addEventListener("click", function (e) {
    var t = e.target;
    if (!t.classList || !t.classList.contains("ax-pt") || t.getAttribute("data-kind") !== "q") return;
    var p = +t.getAttribute("data-i");
    if (M) self.s.piece = p - M.start[M.of[p]];
    self.setQuery(M ? M.of[p] : p);
  });
  link(sel);
  this.place(svg);
};
