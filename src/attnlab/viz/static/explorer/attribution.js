// -- attribution view: what the selected query's row moves, and one score taken apart ----
/* A toggle chooses the row shown for the selected query: the selected head's attention
 * weights α_ij, its value-weighted row α_ij·‖v_j W_O^h‖ (Kobayashi et al. 2020), or the
 * whole model's residual-adjusted rollout (Abnar & Zuidema 2020). The row is drawn as a
 * strip with one cell per key; a click on a key takes the head's score for that pair apart:
 * one bar per RoPE frequency band (their sum is the score) and the geometry
 * scale·|q|·|k|·cos θ.
 *
 * Data: trace.attribution of the payload (attnlab.viz.attribution_payload) for short inputs
 * — the key norms ‖v_j W_O^h‖, the rollout matrix, each head's exact weights as a
 * refinement of the page's own maps (w = (W + (F/Fmax − ½)·span)·Ws: 24 or 32 bits of a weight; float32
 * weights where a map is not the head's), and q/k where the QK payload lacks them in
 * float32 — decoded the first time the view is drawn; what is not there comes from the
 * server (attribution/rows, score_parts) when the page is served.
 *
 * A merged trace (byte pieces merged into characters) follows the merge's rule: its rows
 * are computed on the pieces, then summed over a key character's pieces and averaged over
 * the query's pieces (the payload holds each kept head's merged value-weighted rows, since
 * such a row is not a merged weight times a norm); a score belongs to a pair of pieces, so a
 * merged pair is taken apart as the list of its piece pairs, one of them drawn. */
import {
  BLUE, Explorer, blue, clamp, css, decode, fmt, h, heatImage, label, s, shapeRow, svgRoot,
} from "./core.js";
var ATTR_KINDS = ["weights", "value", "rollout"];

/* The decoded attribution data of the current trace: the data, undefined while decoding,
 * or null when the page holds none (a long input). */
Explorer.prototype.attrData = function () {
  var T = this.cur(), A = T.meta.attribution, self = this;
  if (!A || A.missing) return null;
  if (T.attr) return T.attr.ready ? T.attr : undefined;
  var D = T.attr = {ready: false, W: [], F: [], V: [], q: [], k: [], index: {}, rollout: null,
    norms: null};
  var jobs = [];
  function put(blob, key, n, raw) {
    if (!blob) return;
    jobs.push(decode(blob, raw).then(function (a) { if (n === undefined) D[key] = a; else D[key][n] = a; }));
  }
  A.heads.forEach(function (lh, n) {
    D.index[lh[0] + ":" + lh[1]] = n;
    put(A.weights[n], "W", n); put(A.q[n], "q", n); put(A.k[n], "k", n);
    if (A.fine && A.fine[n]) put(A.fine[n], "F", n, true);  // integers as stored
    if (A.value && A.value[n]) put(A.value[n], "V", n);
  });
  put(A.rollout, "rollout"); put(A.norms, "norms");
  Promise.all(jobs).then(function () { D.ready = true; self.render(); },
    function (e) { D.error = String(e.message || e); D.ready = true; self.render(); });
  return undefined;
};

/* Why the page has no local row of `kind` for the current head (a key of I18N), or null. */
Explorer.prototype.attrWhy = function (kind, D) {
  var m = this.cur().meta, A = m.attribution, S = this.s;
  if (!A) return "attrLong";
  if (kind === "rollout") {
    if (A.rollout_missing === "cross") return "attrCross";
    if (A.missing) return "attrLong";
    return A.rollout ? null : "attrRolloutBudget";
  }
  if (kind === "value" && A.value_missing === "none") return "attrNoValue";
  if (A.missing) return "attrLong";
  if (kind === "value" && A.value_missing === "budget") return "attrNormsBudget";
  return D && D.index[S.layer + ":" + S.head] !== undefined ? null : "attrBudget";
};

/* What a message about the current trace names: its tokens, its heads and the heads whose
 * rows (or q and k, `parts`) the page holds. */
Explorer.prototype.attrSay = function (key, parts) {
  var T = this.cur(), m = T.meta, A = m.attribution, kept = [];
  if (A && !A.missing) A.heads.forEach(function (x, n) {
    if (!parts || A.q[n] || (m.qk && m.qk.dtype === "f32" && T.qkIndex[x[0] + ":" + x[1]] !== undefined))
      kept.push("L" + x[0] + "H" + x[1]);
  });
  var list = kept.length > 12 ? kept.slice(0, 12).join(", ") + ", …" : kept.join(", ");
  return this.t(key, {n: Math.max(m.Lq, m.Lk), k: kept.length, all: m.L * m.H, heads: list || "—"});
};

/* Weight row i of kept head n: the page's map refined to the head's exact weights (or its
 * float32 weights), as float64. */
Explorer.prototype.attrWeights = function (D, n, i) {
  var T = this.cur(), m = T.meta, S = this.s, Lk = m.Lk, out = new Float64Array(Lk), j;
  if (D.W[n]) { for (j = 0; j < Lk; j++) out[j] = D.W[n][i * Lk + j]; return out; }
  var F = D.F[n], fmax = m.attribution.fine[n].dtype === "u8" ? 255 : 65535;
  var o = ((S.layer * m.H + S.head) * m.Lq + i) * Lk;
  var span = m.attribution.fine_span;
  for (j = 0; j < Lk; j++) out[j] = (T.W[o + j] + (F[i * Lk + j] / fmax - 0.5) * span) * T.Ws;
  return out;
};

/* The row shown: {values, source} — from the page's own data or the server — undefined
 * while it loads, {error} when the server refused, {why} when neither has it. */
Explorer.prototype.attrRow = function (kind) {
  var m = this.cur().meta, S = this.s, i = S.query, Lk = m.Lk, D = this.attrData();
  if (D === undefined) return undefined;
  if (D && D.error) return {error: D.error};
  var why = this.attrWhy(kind, D);
  if (!why) {
    if (kind === "rollout") return {values: D.rollout.subarray(i * Lk, (i + 1) * Lk), source: "page"};
    var n = D.index[S.layer + ":" + S.head], w = this.attrWeights(D, n, i);
    if (kind === "weights") return {values: w, source: "page"};
    if (D.V[n]) return {values: D.V[n].subarray(i * Lk, (i + 1) * Lk), source: "page"};  // merged
    var out = new Float64Array(Lk), o = (S.layer * m.H + S.head) * Lk;
    for (var j = 0; j < Lk; j++) out[j] = w[j] * D.norms[o + j];  // α_ij · ‖v_j W_O^h‖
    return {values: out, source: "page"};
  }
  var fixed = why === "attrCross" || why === "attrNoValue";
  if (!m.api || fixed) return {why: why};
  var p = kind === "rollout" ? {kind: kind, rows: i} : {kind: kind, layer: S.layer, head: S.head, rows: i};
  var d = this.fetchApi("attribution/rows", p);
  if (!d || d.error) return d;
  return {values: d.values, source: "server"};
};

/* scale·q·k taken apart, in float64 from float32 q and k: one term per band (the sum of
 * scale·q_c·k_c over the band's dimensions), |q|, |k|, cos θ and θ in degrees. */
function scoreParts(q, k, scale, bands) {
  var dot = 0, qq = 0, kk = 0, c;
  for (c = 0; c < q.length; c++) { dot += q[c] * k[c]; qq += q[c] * q[c]; kk += k[c] * k[c]; }
  var parts = bands.map(function (b) {
    var v = 0;
    b.dims.forEach(function (c2) { v += scale * q[c2] * k[c2]; });
    return {dims: b.dims, rotated: b.rotated, freq: b.freq, wavelength: b.wavelength, value: v};
  });
  var qn = Math.sqrt(qq), kn = Math.sqrt(kk), cos = qn && kn ? dot / (qn * kn) : 0;
  return {score: scale * dot, bands: parts, q_norm: qn, k_norm: kn, cos: cos,
    angle_deg: Math.acos(clamp(cos, -1, 1)) * 180 / Math.PI, scale: scale};
}

/* The decomposition of (query i, key j) in the current head: from the page's float32 q and
 * k (the attribution data's, else the QK payload's), else the server's; undefined while
 * loading, {error}, or {why} (a key of I18N) when there is none. */
Explorer.prototype.attrParts = function (i, j) {
  var T = this.cur(), m = T.meta, A = m.attribution, S = this.s, D = this.attrData();
  if (!A || A.parts_missing === "none") return {why: "noqkNone"};
  var d = m.d, n = D ? D.index[S.layer + ":" + S.head] : undefined, M = this.pieceMap();
  var Lq = M ? M.of.length : m.Lq, Lk = Lq === m.Lq ? m.Lk : Lq, qk = null, self = this;
  if (n !== undefined && D.q[n]) qk = [D.q[n], D.k[n], 0, 0];
  else if (!m.pooled && this.qkHead() !== null && m.qk.dtype === "f32")
    qk = [T.q, T.k, this.qkHead() * Lq * d, m.qk.k_of[this.qkHead()] * Lk * d];
  function local(a, b) {  // rows a (query) and b (key) of the page's q and k
    var p = scoreParts(qk[0].subarray(qk[2] + a * d, qk[2] + (a + 1) * d),
      qk[1].subarray(qk[3] + b * d, qk[3] + (b + 1) * d), m.scale[S.layer], A.bands);
    p.source = "page";
    p.visible = true; p.shaped = null;
    if (!m.shape.bias) {  // the score the softmax sees: the trace's score shaping (core.js)
      var sh = shapeRow(m.shape, S.layer, S.head, a, Lq, Lk, T.km);
      p.visible = !!sh.ok[b];
      var z = sh.softcap ? sh.softcap * Math.tanh(p.score / sh.softcap) : p.score;
      p.shaped = p.visible ? z + (sh.bias ? sh.bias[b] : 0) : null;
    }
    return p;
  }
  if (qk && !M) return local(i, j);
  if (qk) {  // a merged pair: every pair of its pieces, each labelled
    var pairs = [];
    for (var a = M.start[i]; a < M.start[i + 1]; a++)
      for (var b = M.start[j]; b < M.start[j + 1]; b++) {
        var p = local(a, b);
        p.i = a; p.j = b; p.query_token = this.pieceLabel(a); p.key_token = this.pieceLabel(b);
        pairs.push(p);
      }
    return {merged: true, pairs: pairs, source: "page"};
  }
  if (!m.api) return {why: m.pooled ? "attrLong" : "attrPartsBudget"};
  var got = this.fetchApi("score_parts", {layer: S.layer, head: S.head, i: i, j: j});
  if (!got || got.error) return got;
  got.source = "server";
  (got.pairs || []).forEach(function (x) {  // label the pieces in the page's language
    var lab = function (y, toks) { return self.pieceText(toks[y.token], y.index, y.count); };
    x.query_token = lab(x.query_piece, m.tokens); x.key_token = lab(x.key_piece, m.key_tokens);
    x.source = "server";
  });
  return got;
};

Explorer.prototype.view_attribution = function () {
  var self = this, m = this.cur().meta, S = this.s, ctl = this.controls, i = S.query;
  if (ATTR_KINDS.indexOf(S.attrKind) < 0) S.attrKind = "weights";
  var kind = S.attrKind;
  var box = h("span", {"class": "ax-attr-kinds", role: "radiogroup"}, ctl);
  ATTR_KINDS.forEach(function (k) {
    var on = k === kind, b = h("button", {type: "button", role: "radio", "class": "ax-attr-kind",
      "data-kind": k, "aria-checked": on ? "true" : "false", "data-i18n": "attr:" + k}, box,
      self.t("attr:" + k));
    if (on) b.style.cssText = "background:#3451b2;color:#fff";
    b.addEventListener("click", function () { self.s.attrKind = k; self.render(); });
  });
  h("div", {"class": "ax-note ax-attr-def", "data-kind": kind}, ctl, this.t("attrDef:" + kind));
  this.root.setAttribute("data-attr-kind", kind);
  var row = this.attrRow(kind);
  if (row === undefined) { h("div", {"class": "ax-note"}, ctl, this.t("loading")); return; }
  if (row.error) {
    h("div", {"class": "ax-note ax-bad ax-attr-error"}, ctl, this.t("fetchError") + row.error);
    return;
  }
  if (row.why) {
    h("div", {"class": "ax-note ax-attr-missing", "data-why": row.why}, ctl, this.attrSay(row.why));
    return;
  }
  var vals = row.values, Lk = m.Lk, j, mx = 0, sum = 0;
  for (j = 0; j < Lk; j++) { mx = Math.max(mx, vals[j]); sum += vals[j]; }
  var own = clamp(i + Lk - m.Lq, 0, Lk - 1), key = own, best = -Infinity;
  for (j = 0; j < Lk; j++) if (vals[j] > best) { best = vals[j]; key = j; }
  if (S.attrKey && S.attrKey.t === S.t && S.attrKey.j < Lk) key = S.attrKey.j;
  this.root.setAttribute("data-attr-key", key);
  h("div", {"class": "ax-note"}, ctl, this.t("attrClick") + " " +
    (row.source === "server" ? this.t("attrServed") : this.t("attrPage")));
  h("div", {"class": "ax-note ax-parts-note"}, ctl, this.t("partsNote"));
  var W = 900, lw = 70, top = 44, sh = 26, labels = Lk <= 96, longest = 0;
  if (labels) m.key_tokens.forEach(function (t) { longest = Math.max(longest, t.length); });
  var below = labels ? 14 + 7 * Math.min(longest, 12) : 16, partsTop = top + sh + below + 60;
  var parts = this.attrParts(i, key);
  var np = parts && parts.pairs ? Math.ceil(parts.pairs.length / 3) * 20 + 24 : 0;
  var nb = parts && (parts.bands || parts.pairs) ? (parts.bands || parts.pairs[0].bands).length : 0;
  var svg = svgRoot(lw + W + 20, partsTop + 70 + np + nb * 18 + 150, "attribution");
  svg.setAttribute("data-row", kind + ":" + (kind === "rollout" ? "*:*" : S.layer + ":" + S.head) + ":" + i);
  var what = kind === "rollout" ? this.t("attrWhole")
    : this.t("layer") + " " + S.layer + " · " + this.t("head") + " " + S.head;
  var head = s("text", {x: 4, y: 18, "class": "ax-attr-title"}, svg);
  s("tspan", {"font-weight": 600}, head, this.t("query") + " " + i + ": ");
  s("tspan", {"class": "ax-tok ax-sel"}, head, m.tokens[i]);
  s("tspan", {fill: "#5b6478", dx: 12}, head, this.t("attr:" + kind) + " · " + what);
  var st = s("text", {x: lw + W, y: 18, "text-anchor": "end", "class": "ax-num ax-attr-sum",
    "data-value": String(sum)}, svg, this.t("attrSum") + " = " + fmt(sum, 6));
  if (kind === "value") st.setAttribute("display", "none");  // a sum of norms means nothing
  this.drawAttrStrip(svg, vals, mx, key, lw, top, W, sh, labels);
  this.drawAttrTop(svg, vals, lw, top + sh + below + 14);
  this.drawParts(svg, parts, i, key, lw, partsTop);
  this.place(svg);
};

/* One cell per key, coloured by its value against the row's largest; a click takes key j's
 * score apart. More than 512 keys: one image, the key read from the pointer. */
Explorer.prototype.drawAttrStrip = function (svg, vals, mx, key, x0, y0, W, sh, labels) {
  var self = this, m = this.cur().meta, Lk = m.Lk, cw = W / Lk, j;
  s("text", {x: x0 - 6, y: y0 + sh / 2 + 4, "text-anchor": "end", fill: "#5b6478"}, svg, this.t("keys"));
  function pick(j2) { self.s.attrKey = {t: self.s.t, j: j2}; self.render(); }
  function tip(e, j2) {
    self.tip.setAttribute("data-value", String(vals[j2]));
    self.tip.setAttribute("data-key", String(j2));
    self.showTip(e, j2 + " " + m.key_tokens[j2] + ": " + fmt(vals[j2], 6));
  }
  // colour: √(value ÷ the row's largest), so that small shares still show
  function shade(v) { return mx > 0 ? Math.sqrt(Math.max(v, 0) / mx) : 0; }
  var g = s("g", {"class": "ax-attr-strip"}, svg);
  if (Lk <= 512) {
    for (j = 0; j < Lk; j++) {
      s("rect", {x: (x0 + j * cw).toFixed(2), y: y0, width: Math.max(cw - (cw > 4 ? 1 : 0), 0.5).toFixed(2),
        height: sh, fill: css(blue(shade(vals[j]))), stroke: "#c9cfdd",
        "stroke-width": cw > 4 ? 0.5 : 0, "class": "ax-attr-cell", "data-key": j,
        "data-value": String(vals[j])}, g);
    }
    g.addEventListener("mousemove", function (e) {
      var c = e.target.closest(".ax-attr-cell");
      if (c) tip(e, +c.getAttribute("data-key"));
    });
    g.addEventListener("click", function (e) {
      var c = e.target.closest(".ax-attr-cell");
      if (c) pick(+c.getAttribute("data-key"));
    });
  } else {
    var img = s("image", {x: x0, y: y0, width: W, height: sh, preserveAspectRatio: "none",
      style: "image-rendering:pixelated", "class": "ax-attr-img", href: heatImage(function (a, b) {
        return shade(vals[b]); }, 1, Lk, BLUE)}, g);
    var at = function (e) {
      var r = img.getBoundingClientRect();
      return clamp(Math.floor((e.clientX - r.left) / r.width * Lk), 0, Lk - 1);
    };
    img.addEventListener("mousemove", function (e) { tip(e, at(e)); });
    img.addEventListener("click", function (e) { pick(at(e)); });
  }
  g.addEventListener("mouseleave", function () { self.hideTip(); });
  s("rect", {x: (x0 + key * cw).toFixed(2), y: y0 - 2, width: Math.max(cw, 2).toFixed(2), height: sh + 4,
    fill: "none", stroke: "#e4572e", "stroke-width": 2, "class": "ax-attr-keysel", "data-key": key}, svg);
  if (!labels) return;
  for (j = 0; j < Lk; j++) {
    var x = x0 + (j + 0.5) * cw + 3, y = y0 + sh + 6;
    s("text", {x: x, y: y, transform: "rotate(-90 " + x + " " + y + ")", "text-anchor": "end",
      "font-size": Math.min(11, Math.max(8, cw - 1)), "class": "ax-tok" + (j === key ? " ax-sel" : ""),
      "data-col": j}, svg, m.key_tokens[j]);
  }
};

/* The eight largest keys of the row, with their values; a click takes one apart. */
Explorer.prototype.drawAttrTop = function (svg, vals, x0, y) {
  var self = this, m = this.cur().meta, order = [], j;
  for (j = 0; j < vals.length; j++) order.push(j);
  order.sort(function (a, b) { return vals[b] - vals[a] || a - b; });
  s("text", {x: x0 - 6, y: y, "text-anchor": "end", fill: "#5b6478"}, svg, this.t("attrTop"));
  var x = x0;
  order.slice(0, 8).forEach(function (k) {
    var label = k + " " + m.key_tokens[k] + " " + fmt(vals[k], 4);
    var t = s("text", {x: x, y: y, "class": "ax-num ax-attr-top", "data-key": k,
      "data-value": String(vals[k]), style: "cursor:pointer", fill: "#3451b2"}, svg, label);
    t.addEventListener("click", function () { self.s.attrKey = {t: self.s.t, j: k}; self.render(); });
    x += 8 + 7 * Math.min(label.length, 24);
  });
};

/* The score of (query i, key j) as bars per band, then scale·|q|·|k|·cos θ drawn as two
 * arrows θ apart (article 000's geometry). */
Explorer.prototype.drawParts = function (svg, p, i, j, x0, y0) {
  var m = this.cur().meta, S = this.s, self = this;
  var title = this.t("partsTitle", {i: i, j: j}) + " · " + this.t("layer") + " " + S.layer +
    " · " + this.t("head") + " " + S.head;
  s("text", {x: 4, y: y0, "font-weight": 600, "class": "ax-parts-title"}, svg, title + "  (" +
    m.tokens[i] + " → " + m.key_tokens[j] + ")");
  if (p === undefined) { s("text", {x: 4, y: y0 + 20}, svg, this.t("loading")); return; }
  if (p.error) {
    s("text", {x: 4, y: y0 + 20, "class": "ax-bad ax-parts-error"}, svg, this.t("fetchError") + p.error);
    return;
  }
  if (p.why) {
    var said = s("text", {x: 4, y: y0 + 20, "class": "ax-parts-missing", "data-why": p.why}, svg);
    // a long message in lines of about 130 characters (80 in Chinese), cut after a space
    var rest = this.t("attrNoParts") + this.attrSay(p.why, true), wide = this.s.lang === "zh" ? 80 : 130;
    for (var k = 0; rest; k++) {
      var sp = rest.lastIndexOf(" ", wide), cut = rest.length <= wide ? rest.length : sp > wide / 2 ? sp + 1 : wide;
      s("tspan", {x: 4, dy: k ? 17 : 0}, said, rest.slice(0, cut));
      rest = rest.slice(cut);
    }
    return;
  }
  var pieces = null;
  if (p.pairs) {  // a merged pair: its piece pairs listed, the chosen one taken apart
    pieces = this.drawPairs(svg, p.pairs, y0 + 20);
    p = p.pairs[S.attrPair];
    y0 += pieces;
  }
  var g = s("g", {"class": "ax-parts", "data-pair": S.layer + ":" + S.head + ":" + i + ":" + j,
    "data-source": p.source}, svg);
  if (pieces !== null) g.setAttribute("data-pieces", p.i + ":" + p.j);
  var lay = m.attribution.layout || {};
  s("text", {x: 4, y: y0 + 20, fill: "#5b6478", "class": "ax-parts-layout"}, g,
    (lay.kind === "rope" ? this.t("layoutRope", {pairing: lay.pairing, r: lay.rotary_dim})
      : this.t("layoutNone")));
  var top = y0 + 44, rh = 18, lw = 230, half = 260, cx = x0 + lw + half, mx = 0;
  p.bands.forEach(function (b) { mx = Math.max(mx, Math.abs(b.value)); });
  s("text", {x: x0 + lw - 8, y: top - 6, "text-anchor": "end", "font-weight": 600, fill: "#5b6478"}, g,
    this.t("band"));
  s("line", {x1: cx, x2: cx, y1: top - 2, y2: top + p.bands.length * rh, stroke: "#9aa3b5"}, g);
  p.bands.forEach(function (b, k) {
    var y = top + k * rh, w = mx > 0 ? half * Math.abs(b.value) / mx : 0;
    var lab = "p" + k + " (" + b.dims.join(", ") + ")" + (b.rotated && b.wavelength
      ? " λ=" + fmt(b.wavelength, 1) : b.rotated ? "" : " · " + self.t("unrotated"));
    s("text", {x: x0 + lw - 8, y: y + 13, "text-anchor": "end", "font-size": 11}, g, lab);
    s("rect", {x: (b.value >= 0 ? cx : cx - w).toFixed(2), y: y + 3, width: w.toFixed(2),
      height: rh - 6, fill: b.value >= 0 ? "#3451b2" : "#e4572e"}, g);
    s("text", {x: cx + half + 70, y: y + 13, "text-anchor": "end", "class": "ax-num ax-band",
      "data-band": k, "data-value": String(b.value)}, g, fmt(b.value, 5));
  });
  var sum = 0;
  p.bands.forEach(function (b) { sum += b.value; });
  var y1 = top + p.bands.length * rh + 24;
  var rows = [["score", "partScore", p.score], ["band_sum", "partSum", sum],
    ["shaped", "partShaped", p.shaped], ["q_norm", "qnorm", p.q_norm], ["k_norm", "knorm", p.k_norm],
    ["cos", "cosTheta", p.cos], ["angle_deg", "angle", p.angle_deg]];
  rows.forEach(function (r, k) {
    var y = y1 + k * 18, v = r[2], text;
    if (r[0] === "shaped" && (v === null || v === undefined))
      text = p.visible === false ? self.t("hiddenKey") : "—";
    else text = fmt(v, 6) + (r[0] === "angle_deg" ? "°" : "");
    s("text", {x: x0 + lw - 8, y: y, "text-anchor": "end", fill: "#5b6478"}, g, self.t(r[1]));
    s("text", {x: x0 + lw, y: y, "class": "ax-num ax-part", "data-part": r[0],
      "data-value": v === null || v === undefined ? "" : String(v)}, g, text);
  });
  s("text", {x: x0 + lw + 150, y: y1, fill: "#5b6478", "font-size": 11}, g,
    "= " + fmt(p.scale, 5) + " × " + fmt(p.q_norm, 4) + " × " + fmt(p.k_norm, 4) + " × " + fmt(p.cos, 4));
  // q along the x axis, k at θ from it, both drawn to scale
  var ox = cx + 120, oy = y1 + 100, L = 90, big = Math.max(p.q_norm, p.k_norm) || 1;
  var th = p.angle_deg * Math.PI / 180, lq = L * p.q_norm / big, lk = L * p.k_norm / big;
  s("line", {x1: ox, y1: oy, x2: ox + lq, y2: oy, stroke: "#3451b2", "stroke-width": 2.5}, g);
  s("line", {x1: ox, y1: oy, x2: ox + lk * Math.cos(th), y2: oy - lk * Math.sin(th),
    stroke: "#e4572e", "stroke-width": 2.5}, g);
  s("text", {x: ox + lq + 4, y: oy + 4, fill: "#3451b2"}, g, "q");
  s("text", {x: ox + lk * Math.cos(th) + 4, y: oy - lk * Math.sin(th), fill: "#e4572e"}, g, "k");
  s("text", {x: ox + 18, y: oy - 6, "font-size": 11, fill: "#5b6478"}, g, "θ = " + fmt(p.angle_deg, 1) + "°");
};

/* The piece pairs of a merged pair (query piece → key piece, with its score), three a line;
 * a click chooses the pair taken apart (this.s.attrPair, clamped). Returns their height. */
Explorer.prototype.drawPairs = function (svg, pairs, y0) {
  var self = this, S = this.s;
  S.attrPair = clamp(S.attrPair || 0, 0, pairs.length - 1);
  s("text", {x: 4, y: y0, fill: "#5b6478", "class": "ax-pairs-note"}, svg,
    this.t("partsPieces", {n: pairs.length}));
  pairs.forEach(function (x, k) {
    var on = k === S.attrPair, y = y0 + 20 + Math.floor(k / 3) * 20, xx = 4 + (k % 3) * 320;
    var t = s("text", {x: xx, y: y, "class": "ax-pair", "data-index": k, "data-pieces": x.i + ":" + x.j,
      "data-value": String(x.score), style: "cursor:pointer", fill: on ? "#e4572e" : "#3451b2",
      "font-weight": on ? 600 : 400}, svg,
      x.query_token + " → " + x.key_token + ": " + fmt(x.score, 3));
    t.addEventListener("click", function () { self.s.attrPair = k; self.render(); });
  });
  return 20 + Math.ceil(pairs.length / 3) * 20;
};
