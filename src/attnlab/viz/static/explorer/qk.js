// -- QK view: softmax(q·k·scale / T) recomputed live ---------------------------------
Explorer.prototype.qkHead = function () {
  var T = this.cur(), n = T.qkIndex[this.s.layer + ":" + this.s.head];
  return n === undefined || !T.q ? null : n;
};

/* What the QK view draws for query i: {q, dots, ok, bias, softcap, keys (shown),
 * kvec(j), captured(j)} from the page's own q and k (short inputs). */
Explorer.prototype.qkLocal = function (i) {
  var T = this.cur(), m = T.meta, n = this.qkHead(), d = m.d, hd = this.s.head;
  var kn = m.qk.k_of[n], q = T.q.subarray((n * m.Lq + i) * d, (n * m.Lq + i + 1) * d);
  var dots = new Float64Array(m.Lk), j, c, keys = [];
  for (j = 0; j < m.Lk; j++) {
    var ko = (kn * m.Lk + j) * d, acc = 0;
    for (c = 0; c < d; c++) acc += q[c] * T.k[ko + c];
    dots[j] = acc;
    keys.push(j);
  }
  var sh = shapeRow(m.shape, this.s.layer, hd, i, m.Lq, m.Lk, T.km), self = this;
  return {q: q, dots: dots, ok: sh.ok, bias: sh.bias, softcap: sh.softcap, sink: sh.sink,
    keys: keys,
    kvec: function (j2) { return T.k.subarray((kn * m.Lk + j2) * d, (kn * m.Lk + j2 + 1) * d); },
    captured: m.pooled ? null : function (j2) { return self.w(self.s.layer, hd, i, j2); },
    note: m.qk.dtype === "f32" ? this.t("stored32") : this.t("stored16") + fmt(m.qk.storage_error[n], 6)};
};

/* The same from the server (any query at any length): q·k of every key in float64. */
Explorer.prototype.qkServed = function (i) {
  var s = this.s, d = this.fetchApi("qk", {layer: s.layer, head: s.head, query: i, top: 48});
  if (!d || d.error) return d;
  var D = this.cur().meta.d;
  return {q: d.q, dots: d.dots, ok: d.allowed, bias: d.bias || null, softcap: d.softcap,
    sink: d.sink === undefined ? null : d.sink, keys: d.keys, scale0: d.scale,
    kvec: function (j2) { var n = d.keys.indexOf(j2); return d.k.subarray(n * D, (n + 1) * D); },
    captured: function (j2) { return d.weights[j2]; }, note: this.t("fromServer")};
};

Explorer.prototype.noQkText = function () {
  var m = this.cur().meta;
  if (m.qk_missing === "merged") return this.t("noqkMerged");
  if (m.qk_missing === "none") return this.t("noqkNone");
  if (m.qk_missing === "long") return this.t("noqkLong");
  if (m.qk_missing === "bias") return this.t("noqkBias");
  return this.t("noqk") + m.qk.heads.map(function (x) { return "L" + x[0] + "H" + x[1]; }).join(", ");
};

Explorer.prototype.view_qk = function () {
  var self = this, m = this.cur().meta, i = this.s.query, src;
  if (this.qkHead() !== null) src = this.qkLocal(i);
  else if (m.api && m.qk_missing !== "none" && m.qk_missing !== "merged") {
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
  var keys = src.keys, nk = keys.length, rest = nk < m.Lk;
  var strip = 150, rh = 18, top = 64, lw = 120;
  var cols = [lw, lw + strip + 12, lw + 2 * strip + 24, lw + 2 * strip + 100,
    lw + 2 * strip + 176, lw + 2 * strip + 256, lw + 2 * strip + 420];
  var svg = svgRoot(cols[6] + 70, top + (nk + (rest ? 1 : 0)) * rh + 10, "qk");
  svg.setAttribute("data-row", this.s.layer + ":" + this.s.head + ":" + i);
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
  s("text", {x: 4, y: 18, "font-weight": 600}, svg, this.t("query") + " " + i + ": ");
  s("text", {x: 80, y: 18, "class": "ax-tok ax-sel"}, svg, m.tokens[i]);
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
      (rest ? j + " " : "") + m.key_tokens[j]);
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
      this.t("otherKeys") + " (" + (m.Lk - nk) + ")");
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
