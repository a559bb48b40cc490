// -- model view: layers × heads thumbnails ------------------------------------------
/* Every head as a thumbnail of at most 64×64 (the max of each cell keeps thin diagonals
 * visible), all painted into one image: one PNG for the whole model, whatever its size. */
import { BLUE, Explorer, clamp, h, paint, s, svgRoot } from "./core.js";
Explorer.prototype.view_model = function () {
  var self = this, m = this.cur().meta, R = m.rows.length, C = m.cols.length;
  h("div", {"class": "ax-note"}, this.controls, this.t("clickHead"));
  var size = clamp(Math.floor(900 / m.H) - 8, 40, 80), gap = 6, pad = 34, top = 20;
  var svg = svgRoot(pad + m.H * (size + gap), top + m.L * (size + gap), "model");
  for (var hd = 0; hd < m.H; hd++)
    s("text", {x: pad + hd * (size + gap) + size / 2, y: 13, "text-anchor": "middle",
      fill: "#5b6478"}, svg, "H" + hd);
  var tr = Math.min(R, 64), tc = Math.min(C, 64), th = new Float32Array(tr * tc), W = this.cur().W;
  var gy = Math.max(1, Math.round(tr * gap / size)), gx = Math.max(1, Math.round(tc * gap / size));
  var canvas = document.createElement("canvas");
  canvas.width = m.H * (tc + gx); canvas.height = m.L * (tr + gy);
  var ctx = canvas.getContext("2d"), img = ctx.createImageData(canvas.width, canvas.height);
  img.data.fill(255);
  var ri = new Int32Array(R), ci = new Int32Array(C), z, y2, l;
  for (z = 0; z < R; z++) ri[z] = Math.floor(z * tr / R) * tc;
  for (z = 0; z < C; z++) ci[z] = Math.floor(z * tc / C);
  function cell(i, j) { return th[i * tc + j]; }
  for (l = 0; l < m.L; l++) {
    s("text", {x: 2, y: top + l * (size + gap) + size / 2 + 4, fill: "#5b6478"}, svg, "L" + l);
    for (hd = 0; hd < m.H; hd++) {
      var base = (l * m.H + hd) * R * C, mx = 0;
      th.fill(0);
      for (z = 0; z < R; z++) {
        var rz = ri[z], bz = base + z * C;
        for (y2 = 0; y2 < C; y2++) {
          var v = W[bz + y2], o = rz + ci[y2];
          if (v > th[o]) th[o] = v;
        }
      }
      for (z = 0; z < th.length; z++) if (th[z] > mx) mx = th[z];
      for (z = 0; z < th.length; z++) th[z] = Math.sqrt(th[z] / (mx || 1));
      paint(img, hd * (tc + gx), l * (tr + gy), cell, tr, tc, BLUE);
    }
  }
  ctx.putImageData(img, 0, 0);
  s("image", {x: pad, y: top, width: m.H * (size + gap), height: m.L * (size + gap),
    href: canvas.toDataURL("image/png"), preserveAspectRatio: "none",
    style: "image-rendering:pixelated", "class": "ax-thumbs"}, svg);
  for (l = 0; l < m.L; l++) for (hd = 0; hd < m.H; hd++) {
    var x = pad + hd * (size + gap), y = top + l * (size + gap), sel = l === this.s.layer && hd === this.s.head;
    var g = s("g", {"class": "ax-thumb", "data-layer": l, "data-head": hd, role: "button",
      tabindex: 0, "aria-label": this.t("layer") + " " + l + " " + this.t("head") + " " + hd}, svg);
    s("title", {}, g, this.t("layer") + " " + l + ", " + this.t("head") + " " + hd);
    s("rect", {x: x, y: y, width: size, height: size, fill: "#fff", "fill-opacity": 0,
      stroke: sel ? "#e4572e" : "#c9cfdd", "stroke-width": sel ? 2.5 : 1}, g);
  }
  svg.addEventListener("click", function (e) {
    var g2 = e.target.closest(".ax-thumb");
    if (g2) self.select(+g2.getAttribute("data-layer"), +g2.getAttribute("data-head"), "head");
  });
  svg.addEventListener("keydown", function (e) {
    var g2 = e.target.closest && e.target.closest(".ax-thumb");
    if (g2 && (e.key === "Enter" || e.key === " "))
      self.select(+g2.getAttribute("data-layer"), +g2.getAttribute("data-head"), "head");
  });
  this.place(svg);
};
