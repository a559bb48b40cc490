// -- matrix view: heatmap with token labels; long inputs: pooled map + exact tile -----
import { BLUE, Explorer, clamp, fmt, h, heatImage, s, svgRoot } from "./core.js";
Explorer.prototype.view_matrix = function () {
  var self = this, m = this.cur().meta, R = m.rows.length, C = m.cols.length;
  var l = this.s.layer, hd = this.s.head;
  var cs = clamp(Math.floor(760 / Math.max(R, C)), m.pooled ? 6 : 12, 24), fs = Math.min(12, cs - 2);
  var every = Math.max(1, Math.ceil(11 / cs)), lw = 130, th = 130;
  var tile = m.pooled ? this.tileData() : null;
  var tileH = tile && tile.w ? 40 + tile.rows.length * 10 + 130 : 0;
  var svg = svgRoot(lw + C * cs + 10, th + R * cs + 10 + tileH, "matrix");
  var mx = 0;
  for (var i = 0; i < R; i++) for (var j = 0; j < C; j++) mx = Math.max(mx, this.w(l, hd, i, j));
  var uri = heatImage(function (a, b) { return self.w(l, hd, a, b) / (mx || 1); }, R, C, BLUE);
  fs = Math.max(fs, 9);
  for (i = 0; i < R; i += every)
    s("text", {x: lw - 4, y: th + i * cs + cs / 2 + fs / 2 - 1, "text-anchor": "end",
      "font-size": fs, "class": "ax-tok", "data-row": i}, svg, m.rows[i]);
  for (j = 0; j < C; j += every) {
    var x = lw + j * cs + cs / 2 + fs / 2 - 1;
    s("text", {x: x, y: th - 4, transform: "rotate(-90 " + x + " " + (th - 4) + ")",
      "font-size": fs, "class": "ax-tok", "data-col": j}, svg, m.cols[j]);
  }
  var img = s("image", {x: lw, y: th, width: C * cs, height: R * cs, href: uri,
    preserveAspectRatio: "none", style: "image-rendering:pixelated", "class": "ax-heat"}, svg);
  var selRow = m.pooled ? this.s.block : this.s.query;
  s("rect", {x: lw, y: th + selRow * cs, width: C * cs, height: cs, fill: "none",
    stroke: "#e4572e", "stroke-width": 1, "class": "ax-rowsel"}, svg);
  var cell = s("rect", {width: cs, height: cs, fill: "none", stroke: "#111", display: "none"}, svg);
  function at(e) {
    var r = img.getBoundingClientRect();
    return [Math.floor((e.clientY - r.top) / r.height * R), Math.floor((e.clientX - r.left) / r.width * C)];
  }
  img.addEventListener("mousemove", function (e) {
    var p = at(e), a = p[0], b = p[1];
    if (a < 0 || b < 0 || a >= R || b >= C) return;
    var v = self.w(l, hd, a, b);
    cell.setAttribute("x", lw + b * cs); cell.setAttribute("y", th + a * cs);
    cell.setAttribute("display", "inline");
    self.tip.setAttribute("data-value", String(v));
    self.showTip(e, m.rows[a] + " → " + m.cols[b] + ": " + v.toFixed(5));
  });
  img.addEventListener("mouseleave", function () { cell.setAttribute("display", "none"); self.hideTip(); });
  img.addEventListener("click", function (e) {
    var p = at(e);
    if (!m.pooled) { self.setQuery(clamp(p[0], 0, R - 1)); return; }
    self.s.block = clamp(p[0], 0, R - 1);
    self.s.tile = {t: self.s.t, rb: self.s.block, cb: clamp(p[1], 0, C - 1)};
    self.render();
  });
  if (m.pooled) {
    if (m.api) h("div", {"class": "ax-note"}, this.controls, this.t("clickBlock"));
    if (tile) this.drawTile(svg, tile, th + R * cs + 30);
  }
  this.place(svg);
};

/* The exact tile (row block × column block) the user clicked, from the server. */
Explorer.prototype.tileData = function () {
  var s = this.s, m = this.cur().meta, tl = s.tile;
  if (!tl || tl.t !== s.t || !m.api) return null;
  var rb = m.row_blocks[tl.rb], cb = m.col_blocks[tl.cb];
  var d = this.fetchApi("tile", {layer: s.layer, head: s.head, rows: rb[0] + ":" + rb[1],
    cols: cb[0] + ":" + cb[1]});
  var out = {rb: rb, cb: cb, rows: [], cols: [], w: null, error: null};
  for (var i = rb[0]; i < rb[1]; i++) out.rows.push(i);
  for (var j = cb[0]; j < cb[1]; j++) out.cols.push(j);
  if (d === undefined) return out;
  if (d.error) { out.error = d.error; return out; }
  out.w = d.weights;
  return out;
};

Explorer.prototype.drawTile = function (svg, tile, y0) {
  var self = this, m = this.cur().meta, lw = 130, nr = tile.rows.length, nc = tile.cols.length;
  var head = this.t("tile") + ": " + this.t("queries") + " " + tile.rb[0] + "–" + (tile.rb[1] - 1) +
    " × " + this.t("keys") + " " + tile.cb[0] + "–" + (tile.cb[1] - 1);
  s("text", {x: lw, y: y0, "font-weight": 600, "class": "ax-tile-title"}, svg,
    tile.error ? this.t("fetchError") + tile.error : tile.w ? head : head + " · " + this.t("loading"));
  if (!tile.w) return;
  var cs = 10, top = y0 + 120, mx = 0, i;
  for (i = 0; i < tile.w.length; i++) mx = Math.max(mx, tile.w[i]);
  var uri = heatImage(function (a, b) { return Math.sqrt(tile.w[a * nc + b] / (mx || 1)); }, nr, nc, BLUE);
  for (i = 0; i < nr; i += 2)
    s("text", {x: lw - 4, y: top + i * cs + 9, "text-anchor": "end", "font-size": 9, "class": "ax-tok"},
      svg, m.tokens[tile.rows[i]]);
  for (i = 0; i < nc; i += 2) {
    var x = lw + i * cs + 9;
    s("text", {x: x, y: top - 4, transform: "rotate(-90 " + x + " " + (top - 4) + ")",
      "font-size": 9, "class": "ax-tok"}, svg, m.key_tokens[tile.cols[i]]);
  }
  var img = s("image", {x: lw, y: top, width: nc * cs, height: nr * cs, href: uri,
    preserveAspectRatio: "none", style: "image-rendering:pixelated", "class": "ax-tile"}, svg);
  img.addEventListener("mousemove", function (e) {
    var r = img.getBoundingClientRect();
    var a = Math.floor((e.clientY - r.top) / r.height * nr), b = Math.floor((e.clientX - r.left) / r.width * nc);
    if (a < 0 || b < 0 || a >= nr || b >= nc) return;
    var v = tile.w[a * nc + b];
    self.tip.setAttribute("data-value", String(v));
    self.showTip(e, tile.rows[a] + " " + m.tokens[tile.rows[a]] + " → " + tile.cols[b] + " " +
      m.key_tokens[tile.cols[b]] + ": " + fmt(v, 6));
  });
  img.addEventListener("mouseleave", function () { self.hideTip(); });
  img.addEventListener("click", function (e) {
    var r = img.getBoundingClientRect();
    self.setQuery(tile.rows[clamp(Math.floor((e.clientY - r.top) / r.height * nr), 0, nr - 1)]);
  });
};
