// -- positional view: sinusoidal table and its rotations ------------------------------
import { DIVERGE, Explorer, clamp, h, heatImage, s, svgRoot } from "./core.js";
Explorer.prototype.view_positional = function () {
  var self = this, pe = this.data.pe, n = pe.n, d = pe.d, P = this.pe;
  var ctl = this.controls;
  this.math(h("div", {"class": "ax-note ax-pe-note"}, ctl), "peNote");
  this.s.pos = clamp(this.s.pos, 0, n - 1);
  this.s.off = clamp(this.s.off, 0, n - 1 - this.s.pos);
  function slider(lab, cls, max, value) {
    var wrap = h("label", {"class": "ax-slider"}, ctl);
    h("span", {}, wrap, lab + " ");
    var inp = h("input", {type: "range", "class": cls, min: 0, max: max, step: 1, value: value,
      "aria-label": lab}, wrap);
    h("output", {}, wrap, String(value));
    return inp;
  }
  var ps = slider(this.t("pos"), "ax-pos", n - 1, this.s.pos);
  var ks = slider(this.t("offset"), "ax-off", n - 1, this.s.off);
  var errOut = h("div", {"class": "ax-note ax-pe-err"}, ctl);
  this.math(h("span", {"class": "ax-pe-err-label"}, errOut), "maxErr");
  var errValue = h("span", {"class": "ax-pe-err-value"}, errOut, "");
  var cw = 4, chh = 2, lw = 40, top = 24;
  var mapW = d * cw, mapH = n * chh;
  var npair = Math.min(8, d / 2), rad = 44, gx = lw + mapW + 40;
  var svg = svgRoot(gx + 4 * (2 * rad + 30), Math.max(top + mapH + 30, 2 * (2 * rad + 50) + 40), "positional");
  var uri = heatImage(function (i, j) { return P[i * d + j]; }, n, d, DIVERGE);
  s("image", {x: lw, y: top, width: mapW, height: mapH, href: uri, preserveAspectRatio: "none",
    style: "image-rendering:pixelated"}, svg);
  s("text", {x: lw, y: top - 8, fill: "#5b6478"}, svg, this.t("dimension") + " 0 … " + (d - 1));
  s("text", {x: lw - 6, y: top + 10, "text-anchor": "end", fill: "#5b6478", "font-size": 10}, svg, "0");
  s("text", {x: lw - 6, y: top + mapH, "text-anchor": "end", fill: "#5b6478", "font-size": 10}, svg, String(n - 1));
  s("text", {x: 12, y: top + mapH / 2, transform: "rotate(-90 12 " + (top + mapH / 2) + ")",
    "text-anchor": "middle", fill: "#5b6478"}, svg, this.t("position"));
  var mk1 = s("rect", {x: lw - 2, width: mapW + 4, height: chh + 2, fill: "none", stroke: "#111"}, svg);
  var mk2 = s("rect", {x: lw - 2, width: mapW + 4, height: chh + 2, fill: "none", stroke: "#e4572e"}, svg);
  var pairs = [], g = s("g", {}, svg);
  for (var a = 0; a < npair; a++) pairs.push(Math.round(a * (d / 2 - 1) / Math.max(npair - 1, 1)));
  var parts = pairs.map(function (pi, a2) {
    var cx = gx + (a2 % 4) * (2 * rad + 30) + rad, cy = top + Math.floor(a2 / 4) * (2 * rad + 50) + rad + 10;
    s("circle", {cx: cx, cy: cy, r: rad, fill: "none", stroke: "#c9cfdd"}, g);
    s("text", {x: cx, y: cy + rad + 16, "text-anchor": "middle", "font-size": 11}, g, "i=" + pi);
    var ang = s("text", {x: cx, y: cy + rad + 30, "text-anchor": "middle", "font-size": 10, fill: "#5b6478"}, g, "");
    var arrow = s("line", {stroke: "#3451b2", "stroke-width": 2}, g);
    var dot = s("circle", {r: 4, fill: "#111"}, g);
    var ring = s("circle", {r: 7, fill: "none", stroke: "#e4572e", "stroke-width": 2}, g);
    return {pi: pi, cx: cx, cy: cy, ang: ang, arrow: arrow, dot: dot, ring: ring};
  });
  /* Pair pi of PE[pos] turned by ω_i·k: [sin, cos, turned sin, turned cos, ω_i·k]. */
  function turn(pos, k, pi) {
    var phi = pe.omega[pi] * k, sn = P[pos * d + 2 * pi], cs = P[pos * d + 2 * pi + 1];
    return [sn, cs, sn * Math.cos(phi) + cs * Math.sin(phi), cs * Math.cos(phi) - sn * Math.sin(phi), phi];
  }
  function update() {
    var pos = self.s.pos, k = self.s.off, maxErr = 0;
    mk1.setAttribute("y", top + pos * chh - 1); mk2.setAttribute("y", top + (pos + k) * chh - 1);
    for (var pi = 0; pi < d / 2; pi++) {  // every pair: rotate (sin, cos) by ω_i·k
      var r = turn(pos, k, pi);
      maxErr = Math.max(maxErr, Math.abs(r[2] - P[(pos + k) * d + 2 * pi]),
        Math.abs(r[3] - P[(pos + k) * d + 2 * pi + 1]));
    }
    parts.forEach(function (q) {
      var t = turn(pos, k, q.pi), sn = t[0], cs = t[1], rs = t[2], rc = t[3], phi = t[4];
      q.dot.setAttribute("cx", q.cx + rad * cs); q.dot.setAttribute("cy", q.cy - rad * sn);
      q.arrow.setAttribute("x1", q.cx); q.arrow.setAttribute("y1", q.cy);
      q.arrow.setAttribute("x2", q.cx + rad * rc); q.arrow.setAttribute("y2", q.cy - rad * rs);
      q.ring.setAttribute("cx", q.cx + rad * P[(pos + k) * d + 2 * q.pi + 1]);
      q.ring.setAttribute("cy", q.cy - rad * P[(pos + k) * d + 2 * q.pi]);
      q.ang.textContent = "ω·k = " + (phi * 180 / Math.PI % 360).toFixed(1) + "°";
    });
    errValue.textContent = maxErr.toExponential(2);
    errOut.setAttribute("data-err", String(maxErr));
    ps.nextSibling.textContent = pos; ks.nextSibling.textContent = k;
  }
  ps.addEventListener("input", function () {
    self.s.pos = +ps.value; self.s.off = Math.min(self.s.off, n - 1 - self.s.pos);
    ks.value = self.s.off; update();
  });
  ks.addEventListener("input", function () {
    self.s.off = Math.min(+ks.value, n - 1 - self.s.pos); ks.value = self.s.off; update();
  });
  update();
  this.place(svg);
};
