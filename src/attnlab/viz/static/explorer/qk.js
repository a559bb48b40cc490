// -- QK view: softmax(q·k·scale / T) recomputed live ---------------------------------
import {
  DIVERGE, Explorer, clamp, css, diverge, fmt, h, headColor, heatImage, s, shapeRow, softmaxRow,
  svgRoot
} from "./core.js";
Explorer.prototype.qkHead = function () {
  var T = this.cur(), n = T.qkIndex[this.s.layer + ":" + this.s.head];
  return n === undefined || !T.q ? null : n;
};

/* A merged trace (byte pieces merged into characters: meta.pieces, viz/qk.py): where each
 * token's pieces start and the token of each piece; null for a trace without a merge. */
Explorer.prototype.pieceMap = function () {
  var T = this.cur(), P = T.meta.pieces, a, k;
  if (!P) return null;
  if (!T.pmap) {
    var start = new Int32Array(P.sizes.length + 1), of = new Int32Array(P.count);
    for (a = 0; a < P.sizes.length; a++) {
      start[a + 1] = start[a] + P.sizes[a];
      for (k = start[a]; k < start[a + 1]; k++) of[k] = a;
    }
    T.pmap = {start: start, of: of, sizes: P.sizes};
  }
  return T.pmap;
};
/* Piece k (1-based) of the n pieces of a token labelled tok: "苹 (piece 2 of 3)". */
Explorer.prototype.pieceText = function (tok, k, n) {
  return n === 1 ? tok : this.t("pieceOf", {tok: tok, k: k, n: n});
};
/* Piece p of a merged trace labelled as a piece of its token. */
Explorer.prototype.pieceLabel = function (p) {
  var M = this.pieceMap(), m = this.cur().meta, a = M.of[p];
  return this.pieceText(m.tokens[a], p - M.start[a] + 1, M.sizes[a]);
};
/* The selected piece of query i, as its place among i's n pieces (this.s.piece, clamped). */
Explorer.prototype.queryPiece = function (n) {
  this.s.piece = clamp(this.s.piece || 0, 0, n - 1);
  return this.s.piece;
};

/* What the QK view draws for query i: {q, dots, ok, bias, softcap, keys (shown),
 * kvec(j), captured(j)} from the page's own q and k (short inputs). A merged trace: the
 * selected piece of query i against every key piece (qkRow of that piece). */
Explorer.prototype.qkLocal = function (i) {
  var M = this.pieceMap();
  if (!M) return this.qkRow(i);
  var src = this.qkRow(M.start[i] + this.queryPiece(M.sizes[i])), self = this;
  src.pieces = [];
  for (var k = 0; k < M.sizes[i]; k++) src.pieces.push(this.pieceLabel(M.start[i] + k));
  src.keyLabel = function (j2) { return self.pieceLabel(j2); };
  return src;
};
/* Row `row` of the page's q and k (a piece's, for a merged trace). */
Explorer.prototype.qkRow = function (row) {
  var T = this.cur(), m = T.meta, n = this.qkHead(), d = m.d, hd = this.s.head, i = row;
  var Lq = m.qk.lq || m.Lq, Lk = m.qk.lk || m.Lk, M = this.pieceMap();
  var kn = m.qk.k_of[n], q = T.q.subarray((n * Lq + i) * d, (n * Lq + i + 1) * d);
  var dots = new Float64Array(Lk), j, c, keys = [];
  for (j = 0; j < Lk; j++) {
    var ko = (kn * Lk + j) * d, acc = 0;
    for (c = 0; c < d; c++) acc += q[c] * T.k[ko + c];
    dots[j] = acc;
    keys.push(j);
  }
  var sh = shapeRow(m.shape, this.s.layer, hd, i, Lq, Lk, T.km), self = this;
  return {q: q, dots: dots, ok: sh.ok, bias: sh.bias, softcap: sh.softcap, sink: sh.sink,
    keys: keys, Lk: Lk, row: row,
    kvec: function (j2) { return T.k.subarray((kn * Lk + j2) * d, (kn * Lk + j2 + 1) * d); },
    captured: m.pooled || M ? null : function (j2) { return self.w(self.s.layer, hd, i, j2); },
    note: m.qk.dtype === "f32" ? this.t("stored32") : this.t("stored16") + fmt(m.qk.storage_error[n], 6)};
};

/* The same from the server (any query at any length): q·k of every key in float64. A
 * merged trace: the answer holds a row per piece of query i (viz.qk.qk_pieces_data); the
 * selected piece's is drawn, each key piece labelled. */
Explorer.prototype.qkServed = function (i) {
  var s = this.s, d = this.fetchApi("qk", {layer: s.layer, head: s.head, query: i, top: 48});
  if (!d || d.error) return d;
  var D = this.cur().meta.d, self = this, m = this.cur().meta;
  if (d.merged) {
    var r = this.queryPiece(d.query_pieces.length), Lp = d.key_len;
    var sl = function (a, w) { return a.subarray(r * w, (r + 1) * w); };
    var lab = function (x, toks) { return self.pieceText(toks[x.token], x.index, x.count); };
    return {q: sl(d.q, D), dots: sl(d.dots, Lp), ok: sl(d.allowed, Lp),
      bias: d.bias ? sl(d.bias, Lp) : null, softcap: d.softcap, sink: d.sink ? d.sink[r] : null,
      keys: d.keys, scale0: d.scale, Lk: Lp, row: d.query_pieces[r].piece,
      pieces: d.query_pieces.map(function (x) { return lab(x, m.tokens); }),
      keyLabel: function (j2) { return lab(d.key_pieces[d.keys.indexOf(j2)], m.key_tokens); },
      kvec: function (j2) { var n = d.keys.indexOf(j2); return d.k.subarray(n * D, (n + 1) * D); },
      captured: function (j2) { return d.weights[r * Lp + j2]; }, note: this.t("fromServer")};
  }
  return {q: d.q, dots: d.dots, ok: d.allowed, bias: d.bias || null, softcap: d.softcap,
    sink: d.sink === undefined ? null : d.sink, keys: d.keys, scale0: d.scale,
    kvec: function (j2) { var n = d.keys.indexOf(j2); return d.k.subarray(n * D, (n + 1) * D); },
    captured: function (j2) { return d.weights[j2]; }, note: this.t("fromServer")};
};

Explorer.prototype.noQkText = function () {
  var m = this.cur().meta;
  if (m.qk_missing === "none") return this.t("noqkNone");
  if (m.qk_missing === "long") return this.t("noqkLong");
  if (m.qk_missing === "bias") return this.t("noqkBias");
  return this.t("noqk") + m.qk.heads.map(function (x) { return "L" + x[0] + "H" + x[1]; }).join(", ");
};

Explorer.prototype.view_qk = function () {
  var self = this, m = this.cur().meta, i = this.s.query, src;
  if (this.qkHead() !== null) src = this.qkLocal(i);
  else if (m.api && m.qk_missing !== "none") {
    src = this.qkServed(i);
    if (src === undefined) { h("div", {"class": "ax-note"}, this.controls, this.t("loading")); return; }
    if (src.error) {
      h("div", {"class": "ax-note ax-bad"}, this.controls, this.t("fetchError") + src.error);
      return;
    }
  } else {
    h("div", {"class": "ax-note ax-noqk"}, this.controls, this.noQkText());
    return;
  }
  var d = m.d, dflt = m.scale[this.s.layer];
  if (this.s.scale === null) this.s.scale = dflt;
  var ctl = this.controls;
  h("div", {"class": "ax-note ax-storage"}, ctl, src.note);
  if (src.pieces) this.pieceButtons(ctl, src.pieces);
  function slider(lab, cls, min, max, step, value) {
    var wrap = h("label", {"class": "ax-slider"}, ctl);
    h("span", {}, wrap, lab + " ");
    var inp = h("input", {type: "range", "class": cls, min: min, max: max, step: step,
      value: value, "aria-label": lab}, wrap);
    var out = h("output", {"class": cls + "-value"}, wrap, fmt(value));
    return [inp, out];
  }
  var sc = slider(this.t("scale"), "ax-scale", 0, Math.max(1.5, 3 * dflt).toFixed(3), 0.0005, this.s.scale);
  var b1 = h("button", {type: "button", "class": "ax-scale-default"}, ctl, "1/√d = " + fmt(dflt));
  var b2 = h("button", {type: "button", "class": "ax-scale-one"}, ctl, "1");
  var tp = slider(this.t("temperature"), "ax-temp", 0.05, 5, 0.01, this.s.temp);
  var keys = src.keys, nk = keys.length, LK = src.Lk || m.Lk, rest = nk < LK;
  var keyLabel = src.keyLabel || function (j2) { return m.key_tokens[j2]; };
  var strip = 150, rh = 18, top = 64, lw = src.pieces ? 190 : 120;
  var cols = [lw, lw + strip + 12, lw + 2 * strip + 24, lw + 2 * strip + 100,
    lw + 2 * strip + 176, lw + 2 * strip + 256, lw + 2 * strip + 420];
  var svg = svgRoot(cols[6] + 70, top + (nk + (rest ? 1 : 0)) * rh + 10, "qk");
  svg.setAttribute("data-row", this.s.layer + ":" + this.s.head + ":" + i);
  if (src.pieces) svg.setAttribute("data-piece", String(src.row));
  var q = src.q, qmax = 0, c, j, a;
  for (c = 0; c < d; c++) qmax = Math.max(qmax, Math.abs(q[c]));
  var kmax = 0, pmax = 0;
  for (a = 0; a < nk; a++) {
    var kv = src.kvec(keys[a]);
    for (c = 0; c < d; c++) {
      kmax = Math.max(kmax, Math.abs(kv[c]));
      pmax = Math.max(pmax, Math.abs(q[c] * kv[c]));
    }
  }
  function bars(parent, x, y, vals, scaleBy, hgt) {  // one vector as a strip of cells
    var bw = strip / vals.length;
    for (var c2 = 0; c2 < vals.length; c2++) {
      s("rect", {x: (x + c2 * bw).toFixed(2), y: y, width: bw.toFixed(2), height: hgt,
        fill: css(diverge(vals[c2] / (scaleBy || 1)))}, parent);
    }
  }
  var qn = 0;
  for (c = 0; c < d; c++) qn += q[c] * q[c];
  qn = Math.sqrt(qn);
  var qt = s("text", {x: 4, y: 18}, svg);  // the label follows the number, however long
  s("tspan", {"font-weight": 600}, qt, this.t("query") + " " + i + ": ");
  s("tspan", {"class": "ax-tok ax-sel", dx: 4}, qt, src.pieces ? src.pieces[this.s.piece] : m.tokens[i]);
  s("text", {x: cols[1] - 20, y: 18, "text-anchor": "end"}, svg, "q");
  bars(svg, cols[1], 6, Array.prototype.slice.call(q), qmax, 16);
  s("text", {x: cols[3], y: 18}, svg, this.t("norm") + " = " + fmt(qn, 3) + ", d = " + d);
  var heads = [this.t("key"), this.t("k"), this.t("qk_elem"), this.t("dot"), this.t("scaled"),
    this.t("softmax"), this.t("captured")];
  var hx = [cols[0] - 6, cols[0], cols[1], cols[2] + 66, cols[3] + 66, cols[5] - 6, cols[6]];
  var ha = ["end", "start", "start", "end", "end", "end", "start"];
  heads.forEach(function (t, c3) {
    s("text", {x: hx[c3], y: top - 10, "text-anchor": ha[c3], "font-weight": 600,
      fill: "#5b6478"}, svg, t);
  });
  // the shown keys' k and q∘k as two images (one pixel per key × dimension)
  s("image", {x: cols[0], y: top, width: strip, height: nk * rh, preserveAspectRatio: "none",
    style: "image-rendering:pixelated", "class": "ax-kimg", href: heatImage(function (a2, c2) {
      return src.kvec(keys[a2])[c2] / (kmax || 1); }, nk, d, DIVERGE)}, svg);
  s("image", {x: cols[1], y: top, width: strip, height: nk * rh, preserveAspectRatio: "none",
    style: "image-rendering:pixelated", "class": "ax-qkimg", href: heatImage(function (a2, c2) {
      return src.kvec(keys[a2])[c2] * q[c2] / (pmax || 1); }, nk, d, DIVERGE)}, svg);
  var cells = [], color = headColor(this.s.head, m.H);
  for (a = 0; a < nk; a++) {
    j = keys[a];
    var y = top + a * rh, g = s("g", {"class": "ax-qkrow", "data-key": j}, svg);
    if (!src.ok[j]) g.setAttribute("opacity", "0.35");
    s("text", {x: cols[0] - 6, y: y + 13, "text-anchor": "end", "class": "ax-tok"}, g,
      (rest ? j + " " : "") + keyLabel(j));
    s("text", {x: cols[2] + 66, y: y + 13, "text-anchor": "end", "class": "ax-num"}, g, fmt(src.dots[j], 3));
    var sct = s("text", {x: cols[3] + 66, y: y + 13, "text-anchor": "end", "class": "ax-num"}, g, "");
    var bar = s("rect", {x: cols[5], y: y + 3, height: rh - 6, fill: color}, g);
    var pt = s("text", {x: cols[5] - 6, y: y + 13, "text-anchor": "end", "class": "ax-num ax-p",
      "data-key": j}, g, "");
    var cap = src.captured ? src.captured(j) : null;
    s("text", {x: cols[6], y: y + 13, "class": "ax-num ax-cap", "data-cap": cap === null ? "" : String(cap)},
      g, cap === null ? "" : fmt(cap, 4));
    cells.push([sct, bar, pt]);
  }
  var restText = null, restBar = null;
  if (rest) {
    var yr = top + nk * rh, gr = s("g", {"class": "ax-qkrest"}, svg);
    s("text", {x: cols[0] - 6, y: yr + 13, "text-anchor": "end", "font-style": "italic"}, gr,
      this.t("otherKeys") + " (" + (LK - nk) + ")");
    restBar = s("rect", {x: cols[5], y: yr + 3, height: rh - 6, fill: "#9aa3b5"}, gr);
    restText = s("text", {x: cols[5] - 6, y: yr + 13, "text-anchor": "end", "class": "ax-num ax-prest"}, gr, "");
  }
  this.place(svg);
  function update() {
    var r = softmaxRow(src, self.s.scale, self.s.temp), shown = 0;
    for (var a2 = 0; a2 < nk; a2++) {
      var j2 = keys[a2], on = src.ok[j2];
      cells[a2][0].textContent = on ? fmt(r.z[j2], 3) : "−∞";
      cells[a2][1].setAttribute("width", (150 * r.p[j2]).toFixed(2));
      cells[a2][2].textContent = fmt(r.p[j2], 4);
      cells[a2][2].setAttribute("data-p", String(r.p[j2]));
      shown += r.p[j2];
    }
    if (restText) {
      var other = Math.max(0, 1 - shown);
      restText.textContent = fmt(other, 4);
      restText.setAttribute("data-p", String(other));
      restBar.setAttribute("width", (150 * other).toFixed(2));
    }
    sc[1].textContent = fmt(self.s.scale); tp[1].textContent = fmt(self.s.temp, 2);
    self.root.setAttribute("data-scale", String(self.s.scale));
    self.root.setAttribute("data-temp", String(self.s.temp));
  }
  sc[0].addEventListener("input", function () { self.s.scale = +sc[0].value; update(); });
  tp[0].addEventListener("input", function () { self.s.temp = +tp[0].value; update(); });
  b1.addEventListener("click", function () { self.s.scale = dflt; sc[0].value = dflt; update(); });
  b2.addEventListener("click", function () { self.s.scale = 1; sc[0].value = 1; update(); });
  update();
};

/* A merged query's pieces as buttons (the one shown pressed), and the rule the view follows. */
Explorer.prototype.pieceButtons = function (ctl, labels) {
  var self = this, box = h("span", {"class": "ax-pieces", role: "radiogroup"}, ctl);
  labels.forEach(function (lab, k) {
    var on = k === self.s.piece, b = h("button", {type: "button", role: "radio", "class": "ax-piece",
      "data-piece": k, "aria-checked": on ? "true" : "false"}, box, lab);
    if (on) b.style.cssText = "background:#3451b2;color:#fff";
    b.addEventListener("click", function () { self.s.piece = k; self.render(); });
  });
  h("div", {"class": "ax-note ax-qk-pieces"}, ctl, this.t("qkPieces", {n: labels.length}));
};
