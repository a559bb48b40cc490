/* attnlab explorer: seven linked views of one attention trace (eight for an image: the
 * image view). Hand-written, no dependencies, no network. Data come from
 * <script type="application/json" id="UID-data"> written by attnlab.viz.explorer; every
 * view is one <svg> so that it exports as SVG/PNG.
 *
 * An input may hold several attention stacks (encoder self-, decoder self- and
 * cross-attention): a stack selector chooses one; cross-attention has the target tokens as
 * rows (queries) and the source tokens as columns (keys).
 *
 * Short inputs carry every weight and the q/k of the heads that fit. Long inputs carry
 * pooled maps (mean over a block's queries of the sum over its keys) and a token strip;
 * when the page comes from `attnlab serve` (data.traces[i].api is set) a click on a token
 * or a block fetches the exact row or tile from that server (same origin only); in Jupyter
 * (attnlab.viz.widget) the same requests go to the kernel over the widget's comm.
 *
 * The script is built from the modules in viz/static/explorer/, in the order viz/assets.py
 * lists (static_asset("explorer.js")): each part imports what it uses from the parts
 * before it and runs in its own scope; this part exports what the views share.
 *
 * core.js, the first part: DOM and number helpers, the wire codec's JS side (blobs
 * {dtype, gz, shape, b64} decoded), colour maps, score shaping (the one JS copy of what a
 * trace's ScoreShape does, pinned to Python by tests/fixtures/score_shape_golden.json) and
 * the Explorer's state: the payload's traces loaded, weights, the answers of the server or
 * the kernel (one fetch layer, two transports). */
import { LANGS, I18N } from "./i18n.json";
export var SVGNS = "http://www.w3.org/2000/svg";

// -- small DOM helpers ----------------------------------------------------------------
export function h(tag, attrs, parent, text) {
  var e = document.createElement(tag);
  for (var a in attrs || {}) e.setAttribute(a, attrs[a]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
export function s(tag, attrs, parent, text) {
  var e = document.createElementNS(SVGNS, tag);
  for (var a in attrs || {}) e.setAttribute(a, attrs[a]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
export function svgRoot(w, hgt, view) {
  return s("svg", {xmlns: SVGNS, width: w, height: hgt, viewBox: "0 0 " + w + " " + hgt,
    "class": "ax-svg", "data-view": view, "font-family": "system-ui, sans-serif",
    "font-size": 12});
}
export function fmt(x, n) {
  if (!isFinite(x)) return String(x);
  var a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
  return x.toFixed(n === undefined ? 4 : n);
}
export function clamp(x, a, b) { return Math.max(a, Math.min(b, x)); }

// -- decoding ------------------------------------------------------------------------
function b64bytes(b64) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(b64);
  var str = atob(b64), n = str.length, u = new Uint8Array(n);
  for (var i = 0; i < n; i++) u[i] = str.charCodeAt(i);
  return u;
}
function gunzip(bytes) {
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).arrayBuffer();
}
var HALF = null;
function halfTable() {
  if (HALF) return HALF;
  HALF = new Float32Array(65536);
  for (var x = 0; x < 65536; x++) {
    var sgn = (x & 0x8000) ? -1 : 1, e = (x >> 10) & 0x1f, f = x & 0x3ff;
    HALF[x] = e === 0 ? sgn * Math.pow(2, -14) * (f / 1024)
      : e === 31 ? (f ? NaN : sgn * Infinity) : sgn * Math.pow(2, e - 15) * (1 + f / 1024);
  }
  return HALF;
}
/* A blob {dtype, gz, shape, b64} as a typed array (u8/u16 as fractions of 1, or as the
 * stored integers when raw). */
export function decode(blob, raw) {
  var bytes = b64bytes(blob.b64);
  var p = blob.gz ? gunzip(bytes) : Promise.resolve(bytes.buffer);
  return p.then(function (buf) {
    if (blob.dtype === "f32") return new Float32Array(buf);
    if (blob.dtype === "f64") return new Float64Array(buf);
    if (blob.dtype === "b8" || (raw && blob.dtype === "u8")) return new Uint8Array(buf);
    if (raw && blob.dtype === "u16") return new Uint16Array(buf);
    if (blob.dtype === "u8") {
      var u8 = new Uint8Array(buf), o8 = new Float32Array(u8.length);
      for (var z = 0; z < u8.length; z++) o8[z] = u8[z] / 255;
      return o8;
    }
    if (blob.dtype === "f16" && typeof Float16Array === "function")
      return new Float32Array(new Float16Array(buf));
    var u = new Uint16Array(buf), out = new Float32Array(u.length), i;
    if (blob.dtype === "u16") { for (i = 0; i < u.length; i++) out[i] = u[i] / 65535; }
    else { var t = halfTable(); for (i = 0; i < u.length; i++) out[i] = t[u[i]]; }
    return out;
  });
}

// -- colours -------------------------------------------------------------------------
var BLUES = [[255, 255, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
export function blue(v) {
  v = clamp(v, 0, 1) * (BLUES.length - 1);
  var i = Math.min(Math.floor(v), BLUES.length - 2), f = v - i, a = BLUES[i], b = BLUES[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}
export function css(rgb) { return "rgb(" + rgb.map(Math.round).join(",") + ")"; }
export function diverge(v) {  // -1 red .. 0 white .. 1 blue
  v = clamp(v, -1, 1);
  return v >= 0 ? [255 - 222 * v, 255 - 142 * v, 255 - 74 * v]
    : [255 + 77 * v, 255 + 180 * v, 255 + 175 * v];
}
/* Heat over a picture: cold (dark blue) for little weight to hot (dark red) for the most. */
var HEAT = [[49, 54, 149], [69, 117, 180], [171, 217, 233], [254, 224, 144], [244, 109, 67],
  [165, 0, 38]];
export function heat(v) {
  v = clamp(v, 0, 1) * (HEAT.length - 1);
  var i = Math.min(Math.floor(v), HEAT.length - 2), f = v - i, a = HEAT[i], b = HEAT[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}
export function headColor(hd, H) { return "hsl(" + Math.round(360 * hd / Math.max(H, 1)) + ",65%,42%)"; }
/* A colour map as a table of 256 RGB triples over [lo, hi]: one lookup per pixel. */
function lut(fn, lo, hi) {
  var rgb = new Uint8Array(768);
  for (var i = 0; i < 256; i++) {
    var c = fn(lo + (hi - lo) * i / 255);
    rgb[3 * i] = Math.round(c[0]); rgb[3 * i + 1] = Math.round(c[1]); rgb[3 * i + 2] = Math.round(c[2]);
  }
  return {lo: lo, k: 255 / (hi - lo), rgb: rgb};
}
export var BLUE = lut(blue, 0, 1), DIVERGE = lut(diverge, -1, 1);
/* Write rows×cols values, coloured by the table, into ImageData at (x0, y0). */
export function paint(img, x0, y0, get, rows, cols, map) {
  var d = img.data, W = img.width, rgb = map.rgb;
  for (var i = 0; i < rows; i++) {
    var o = 4 * ((y0 + i) * W + x0);
    for (var j = 0; j < cols; j++, o += 4) {
      var t = ((get(i, j) - map.lo) * map.k + 0.5) | 0;
      t = 3 * (t < 0 ? 0 : t > 255 ? 255 : t);
      d[o] = rgb[t]; d[o + 1] = rgb[t + 1]; d[o + 2] = rgb[t + 2]; d[o + 3] = 255;
    }
  }
}
/* An image (data URI) of rows×cols values, coloured by a table (BLUE, DIVERGE). */
export function heatImage(get, rows, cols, map) {
  var c = document.createElement("canvas");
  c.width = cols; c.height = rows;
  var ctx = c.getContext("2d"), img = ctx.createImageData(cols, rows);
  paint(img, 0, 0, get, rows, cols, map);
  ctx.putImageData(img, 0, 0);
  return c.toDataURL("image/png");
}

// -- score shaping: what the trace's ScoreShape does, for one query row ---------------
/* Which keys query row i may see and what is added to its scores, by `sh` (a trace's
 * payload.shape: causal, window[layer], alibi[head], sinks[layer][head], softcap[layer]):
 * {ok: 1 per visible key, bias: ALiBi's −slope·distance or null, softcap, sink logit}.
 * A window w keeps the keys less than w positions from the query's, on both sides (a
 * causal shape hides the later ones anyway).
 * lq queries sit at the last lq of the lk key positions; km: the decoded key mask or null. */
export function shapeRow(sh, l, hd, i, lq, lk, km) {
  sh = sh || {};
  var off = lk - lq, ok = new Uint8Array(lk), bias = null, j;
  var win = sh.window ? sh.window[l] : null;
  for (j = 0; j < lk; j++) {
    var yes = !km || km[j];
    if (sh.causal && j > i + off) yes = false;
    if (win && Math.abs(i + off - j) >= win) yes = false;  // a window hides both sides
    ok[j] = yes ? 1 : 0;
  }
  if (sh.alibi) {
    bias = new Float64Array(lk);
    for (j = 0; j < lk; j++) bias[j] = -sh.alibi[hd] * (i + off - j);
  }
  var sk = sh.sinks ? sh.sinks[l] : null, sink = null;
  if (sk) sink = Array.isArray(sk[hd]) ? sk[hd][i] : sk[hd];
  return {ok: ok, bias: bias, softcap: sh.softcap ? sh.softcap[l] : null, sink: sink};
}

/* One query row at (scale, temp), from src: {dots, ok, bias, softcap, sink} (shapeRow's,
 * or the server's): z_j = scale·dot_j, soft-capped if the model caps, plus the additive
 * bias (ALiBi), masked keys at −∞; p = softmax(z / temp) in float64, where a learned sink
 * logit (divided by temp too) joins the softmax and takes its share from every key.
 * Returns {z (before temp), p}; a row with no visible key and no sink is all 0. */
export function softmaxRow(src, scale, temp) {
  var n = src.dots.length, z = new Float64Array(n), p = new Float64Array(n), mx = -Infinity, j;
  var zs = (src.sink === null || src.sink === undefined) ? null : src.sink;
  if (zs !== null) mx = zs;
  for (j = 0; j < n; j++) {
    if (!src.ok[j]) { z[j] = -Infinity; continue; }
    var v = scale * src.dots[j];
    if (src.softcap) v = src.softcap * Math.tanh(v / src.softcap);
    if (src.bias) v += src.bias[j];
    z[j] = v;
    if (v > mx) mx = v;
  }
  var sum = zs !== null ? Math.exp((zs - mx) / temp) : 0;
  for (j = 0; j < n; j++) { p[j] = src.ok[j] ? Math.exp((z[j] - mx) / temp) : 0; sum += p[j]; }
  for (j = 0; j < n; j++) p[j] = sum > 0 ? p[j] / sum : 0;
  return {z: z, p: p};
}

/* shapeRow then softmaxRow: query row `row` of head `head` in layer `layer` by the score
 * shape `sh`, from its q·k `dots` (one per key). o: {layer, head, row, dots, lq (default:
 * as many as keys), keyMask (0/1 per key, or null), scale (default sh.scale[layer]),
 * temperature (default 1)}. Returns {scores: z before temperature, probs}. Exposed as
 * window.AttnlabExplorer.scoreRow so that a test pins it to Python. */
export function scoreRow(sh, o) {
  var lk = o.dots.length, lq = o.lq === undefined ? lk : o.lq;
  var scale = o.scale === undefined || o.scale === null ? sh.scale[o.layer] : o.scale;
  var src = shapeRow(sh, o.layer, o.head, o.row, lq, lk, o.keyMask || null);
  src.dots = o.dots;
  var r = softmaxRow(src, scale, o.temperature === undefined ? 1 : o.temperature);
  return {scores: r.z, probs: r.p};
}

/* The views of the page, in tab order: the payload's "views" (Python's VIEWS and
 * IMAGE_VIEW), each drawn by an Explorer.prototype.view_<name> of this script. */
function viewsOf(data) {
  var v = data.views;
  if (!Array.isArray(v) || !v.length)
    throw new Error("payload.views: expected a list of view names (written by " +
      "attnlab.viz.explorer.Explorer.payload), got " + JSON.stringify(v));
  v.forEach(function (name) {
    if (typeof Explorer.prototype["view_" + name] !== "function")
      throw new Error("payload.views: expected views this script draws, got " +
        JSON.stringify(name));
  });
  if (v.indexOf(data.view) < 0)
    throw new Error("payload.view: expected one of " + JSON.stringify(v) + ", got " +
      JSON.stringify(data.view));
  return v.slice();
}

// -- the explorer --------------------------------------------------------------------
export function Explorer(root, data, transport) {
  this.root = root;
  this.data = data;
  this.transport = transport || httpTransport;  // where exact data come from (fetchApi)
  this.traces = [];
  this.cache = {};
  this.pending = {};
  this.views = viewsOf(data);
  var docLang = document.documentElement.getAttribute("data-lang");
  var nav = (navigator.language || "en").toLowerCase().indexOf("zh") === 0 ? "zh" : "en";
  if (!data.inputs) {  // one input per trace, each one stack
    data.inputs = data.traces.map(function (tr, i) {
      return {model: tr.model, text: tr.text, target: null, media: null,
        stacks: [{name: tr.stack || "self", t: i}]};
    });
  }
  var first = data.inputs[0].stacks.filter(function (x) { return x.name === data.stack; })[0];
  this.s = {t: (first || data.inputs[0].stacks[0]).t, input: 0, layer: data.layer, head: data.head,
    view: data.view, query: 0,
    scale: null, temp: 1, lang: docLang || nav, sortKey: "layer", sortDir: 1, pos: 8, off: 4,
    block: 0, tile: null};
  var self = this;
  if (docLang) {  // inside a page with its own language switch (the report): follow it
    new MutationObserver(function () {
      var l = document.documentElement.getAttribute("data-lang");
      if (l && l !== self.s.lang) self.setLang(l);
    }).observe(document.documentElement, {attributes: true, attributeFilter: ["data-lang"]});
  }
}

/* The page's words for `key` in the current language (i18n.js), {name}s filled from vars. */
Explorer.prototype.t = function (key, vars) {
  var text = (I18N[key] && I18N[key][LANGS.indexOf(this.s.lang)]) || key;
  for (var v in vars || {}) text = text.replace("{" + v + "}", vars[v]);
  return text;
};

/* Fill element e with the formula text `key`: the MathML Python rendered for this
 * language (data.math, escaped there), or the plain text of I18N where there is none. */
Explorer.prototype.math = function (e, key) {
  var m = this.data.math && this.data.math[this.s.lang];
  if (m && m[key]) e.innerHTML = m[key];
  else e.textContent = this.t(key);
  return e;
};

/* Whitespace-only tokens get a visible mark; the text itself is never altered. */
export function label(t) { return /^\s*$/.test(t) ? "␣" + t.replace(/ /g, "") : t; }

Explorer.prototype.load = function () {
  var self = this, jobs = [];
  this.data.traces.forEach(function (tr, i) {
    if (!tr.key_tokens) tr.key_tokens = tr.tokens;
    var same = tr.key_tokens === tr.tokens;
    tr.tokens = tr.tokens.map(label);
    tr.key_tokens = same ? tr.tokens : tr.key_tokens.map(label);
    tr.rows = tr.pooled ? tr.rows.map(label) : tr.tokens;
    tr.cols = tr.pooled ? tr.cols.map(label) : tr.key_tokens;
    var T = {meta: tr, W: null, q: null, k: null, geo: null, qkIndex: {}, km: null};
    self.traces[i] = T;
    jobs.push(decode(tr.weights, true).then(function (a) {
      T.W = a;  // integers as stored: w = W · Ws (no float copy of every map)
      T.Ws = tr.weights.dtype === "u16" ? 1 / 65535 : tr.weights.dtype === "u8" ? 1 / 255 : 1;
    }));
    if (tr.shape && tr.shape.key_mask) jobs.push(decode(tr.shape.key_mask).then(function (a) { T.km = a; }));
    if (tr.qk) {
      tr.qk.heads.forEach(function (lh, n) { T.qkIndex[lh[0] + ":" + lh[1]] = n; });
      jobs.push(decode(tr.qk.q).then(function (a) { T.q = a; }));
      jobs.push(decode(tr.qk.k).then(function (a) { T.k = a; }));
      jobs.push(decode(tr.qk.geometry).then(function (a) { T.geo = a; }));
    }
  });
  jobs.push(decode(this.data.pe.table).then(function (a) { self.pe = a; }));
  return Promise.all(jobs);
};

Explorer.prototype.cur = function () { return this.traces[this.s.t]; };
/* Weight of (row i, col j) of a head: exact for short inputs, pooled for long ones. */
Explorer.prototype.w = function (l, hd, i, j) {
  var T = this.cur(), m = T.meta, R = m.rows.length, C = m.cols.length;
  return T.W[((l * m.H + hd) * R + i) * C + j] * T.Ws;
};
Explorer.prototype.blockOf = function (i) {
  var m = this.cur().meta;
  return m.pooled ? Math.min(Math.floor(i / m.block), m.row_blocks.length - 1) : i;
};

// -- exact data on demand: from `attnlab serve` (HTTP) or a Jupyter kernel (the widget) --
/* A transport is what the page asks for exact data through: (api, path, params) -> a Promise
 * of the answer's JSON, rejected with the error's message. `api` is the trace's
 * data.traces[i].api, `path` a request ("rows", "tile", "qk", …), `params` its parameters. */
function queryString(params) {
  return Object.keys(params).map(function (k) {
    return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]);
  }).join("&");
}
/* HTTP, for a page that came from `attnlab serve`: GET <api>/<path>?<params> (same origin). */
export function httpTransport(api, path, params) {
  return fetch(api + "/" + path + "?" + queryString(params), {headers: {Accept: "application/json"}})
    .then(function (r) {
      return r.json().then(function (j) {
        if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
        return j;
      });
    });
}
httpTransport.kind = "server";
/* The comm of an anywidget model, for the explorer in Jupyter (attnlab.viz.widget): each
 * request is the message {kind: "attnlab-request", id, api, path, params}; the kernel
 * answers {kind: "attnlab-response", id, status, body} with what the server's route of that
 * path answers (body {error} when status >= 400). A request not answered within timeoutMs
 * (default 120 s: a restarted kernel answers nothing) is rejected; close() stops listening
 * and rejects what is still waiting. */
export function commTransport(model, timeoutMs) {
  var waiting = {}, n = 0, tag = Math.random().toString(36).slice(2);
  var limit = timeoutMs || 120000;
  function onMsg(msg) {
    if (!msg || msg.kind !== "attnlab-response" || !(msg.id in waiting)) return;
    var w = waiting[msg.id];
    delete waiting[msg.id];
    clearTimeout(w.timer);
    if (msg.status >= 400) w.reject(new Error((msg.body && msg.body.error) || ("status " + msg.status)));
    else w.resolve(msg.body);
  }
  model.on("msg:custom", onMsg);
  function send(api, path, params) {
    return new Promise(function (resolve, reject) {
      var id = tag + ":" + (++n);
      var timer = setTimeout(function () {
        delete waiting[id];
        reject(new Error("the kernel did not answer within " + limit / 1000 + " s"));
      }, limit);
      waiting[id] = {resolve: resolve, reject: reject, timer: timer};
      model.send({kind: "attnlab-request", id: id, api: api, path: path, params: params});
    });
  }
  send.kind = "kernel";
  send.close = function () {
    model.off("msg:custom", onMsg);
    Object.keys(waiting).forEach(function (id) {
      clearTimeout(waiting[id].timer);
      waiting[id].reject(new Error("the widget was closed"));
      delete waiting[id];
    });
  };
  return send;
}

/* The one fetch layer of every view: <path> with <params> for the current trace, through the
 * explorer's transport (HTTP or the kernel's comm) -> JSON with its blobs decoded; cached
 * per request; re-renders the explorer when an answer arrives that the current state still
 * wants. Returns the answer, null (a static page: nothing to ask), undefined (not there
 * yet: the caller shows "loading") or {error}. */
Explorer.prototype.fetchApi = function (path, params) {
  var m = this.cur().meta, self = this;
  if (!m.api) return null;
  var url = m.api + "/" + path + "?" + queryString(params);
  if (url in this.cache) return this.cache[url];
  if (!(url in this.pending)) {
    var t0 = performance.now();
    this.pending[url] = Promise.resolve()
      .then(function () { return self.transport(m.api, path, params); })
      .then(function (j) {
        var keys = Object.keys(j).filter(function (k) {
          return j[k] && typeof j[k] === "object" && typeof j[k].b64 === "string";
        });
        return Promise.all(keys.map(function (k) { return decode(j[k]); })).then(function (arr) {
          keys.forEach(function (k, n) { j[k] = arr[n]; });
          return j;
        });
      })
      .then(function (j) {
        self.root.setAttribute("data-fetch-ms", (performance.now() - t0).toFixed(1));
        self.cache[url] = j;
      }, function (err) {
        self.cache[url] = {error: String(err.message || err)};
      })
      .then(function () {
        delete self.pending[url];
        self.root.setAttribute("data-fetches", String(+(self.root.getAttribute("data-fetches") || 0) + 1));
        self.render();
      });
  }
  return undefined;  // not there yet: the caller shows "loading"
};
