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
 * or a block fetches the exact row or tile from that server (same origin only). */
(function () {
  "use strict";
  if (window.AttnlabExplorer) return;
  var SVGNS = "http://www.w3.org/2000/svg";
  var VIEWS = ["model", "head", "matrix", "qk", "geometry", "positional", "diagnostics"];
  var IMAGE_VIEW = "image";

  var I18N = {
    en: {
      model: "Model", head: "Head", matrix: "Matrix", qk: "QK", geometry: "Geometry",
      positional: "Positional", diagnostics: "Diagnostics", layer: "Layer", input: "Input",
      query: "Query", lang: "中文", exportSvg: "Export SVG", exportPng: "Export PNG",
      scale: "scale", temperature: "temperature", resetScale: "1/√d", one: "1",
      key: "key", k: "k", qk_elem: "q∘k", dot: "q·k", scaled: "× scale", softmax: "softmax",
      captured: "captured", noqk: "q and k of this head were left out to keep the page small " +
        "(ExplorerConfig.qk_budget). Heads with q/k: ",
      noqkNone: "This trace has no q and k (traced without qkv).",
      noqkMerged: "No q and k: byte pieces of one character were merged into whole characters " +
        "(trace with merge_pieces=False to keep the pieces and their q/k).",
      noqkLong: "Long input: the QK view computes any query's row on the server. Open this " +
        "trace with `attnlab serve --trace FILE`.",
      stored32: "q and k stored as float32: the page computes exactly what Python computes.",
      stored16: "q and k stored as float16: max |Δp| against float32 at the model's scale = ",
      fromServer: "q·k of every key from the server (float64); the softmax over all keys is " +
        "recomputed here. Rows: the strongest keys at the model's scale, in order.",
      otherKeys: "all other keys",
      noqkBias: "This trace shapes its scores with a dense bias: the QK view computes rows " +
        "on the server (`attnlab serve --trace FILE`).",
      distance: "distance", duplicate: "duplicate", induction: "induction",
      pooled: "Long input: maps are pooled in blocks of {b} tokens (mean over a block's " +
        "queries of the sum over its keys; rows still sum to 1).",
      pooledRC: "Long input: maps are pooled in blocks of {r} × {c} (queries × keys; mean over a " +
        "block's queries of the sum over its keys; rows still sum to 1).",
      hoverTok: "Hover a token to isolate its attention; click it to choose the query.",
      clickHead: "Click a head to open it.",
      queries: "queries", keys: "keys",
      geoNote: "Keys translated onto the queries' centroid and both rescaled to one mean norm " +
        "(softmax and q·k unchanged), then one PCA.",
      geoLong: "Long input: the geometry view draws inputs of up to {n} tokens.",
      position: "position", dimension: "dimension", offset: "offset k",
      peNote: "PE[pos+k] = M_k·PE[pos]: each (sin, cos) pair turns by ω_i·k. " +
        "Dot: PE[pos]; arrow: M_k·PE[pos]; ring: PE[pos+k] from the table.",
      maxErr: "max |M_k·PE[pos] − PE[pos+k]| = ",
      entropy: "entropy", max_weight: "max weight", sink: "sink", previous: "previous",
      diagonal: "self", redundancy: "redundancy", cluster: "cluster", roles: "roles",
      diagNote: "Scores from attnlab.analysis (entropy in nats; sink, previous, self = mean " +
        "weight on the first, previous, own token). Click a column to sort, a row to open the head.",
      dq: "q", norm: "|q|",
      block: "block", tokens: "tokens", prev: "◀", next: "▶",
      served: "Click a token for its exact attention row; click a block of the matrix for " +
        "its exact weights (computed by the server).",
      unserved: "Exact rows and tiles come from the server: `attnlab serve --trace FILE`.",
      loading: "loading…", fetchError: "the server did not answer: ",
      rowOf: "exact row of query", topKeys: "strongest keys", tile: "exact weights",
      clickBlock: "Click a block for its exact weights.",
      nTokens: "{n} tokens", pos: "pos",
      "role:sink": "sink", "role:previous-token": "previous-token", "role:induction": "induction",
      "role:self": "self",
      stack: "Stack", "stack:self": "Self-attention", "stack:encoder": "Encoder self-attention",
      "stack:decoder": "Decoder self-attention", "stack:cross": "Cross-attention",
      crossInfo: "rows: target tokens (queries) · columns: the source (keys)",
      crossDiag: "Cross-attention: the queries (target) and keys (source) are different " +
        "texts, so the scores that compare their positions (first token, previous, self, " +
        "distance, duplicate, induction) do not apply and are left out.",
      image: "Image",
      imageNote: "Click a patch to make it the query: the overlay shows the query's attention " +
        "over the patches (colour and opacity ∝ weight ÷ the row's largest patch weight: " +
        "blue little, red the most). " +
        "Prefix tokens are listed apart.",
      imageLong: "This image has {n} tokens, more than the page keeps every weight for " +
        "(ExplorerConfig.max_tokens = {m}): open the trace with `attnlab serve --trace FILE` " +
        "for exact rows.",
      prefixTokens: "prefix tokens", patches: "patches", onPatches: "on the patches",
      patchMax: "largest patch weight", grid: "grid", audio: "audio", seconds: "{s} s",
      frame: "{s} s per encoder position"
    },
    zh: {
      model: "模型", head: "注意力头", matrix: "矩阵", qk: "QK", geometry: "几何",
      positional: "位置编码", diagnostics: "诊断", layer: "层", input: "输入",
      query: "查询", lang: "English", exportSvg: "导出 SVG", exportPng: "导出 PNG",
      scale: "缩放", temperature: "温度", resetScale: "1/√d", one: "1",
      key: "键", k: "k", qk_elem: "q∘k", dot: "q·k", scaled: "× 缩放", softmax: "softmax",
      captured: "捕获值", noqk: "为控制页面大小，未保存此头的 q 与 k（上限由 qk_budget 设定）。保存了 q/k 的头：",
      noqkNone: "此追踪没有 q 与 k（追踪时未保留 qkv）。",
      noqkMerged: "没有 q 与 k：同一字符的字节片段已合并为完整字符（用 merge_pieces=False 追踪可保留片段及其 q/k）。",
      noqkLong: "长输入：QK 视图由服务器计算任意查询的一行。请用 `attnlab serve --trace FILE` 打开此追踪。",
      stored32: "q 与 k 以 float32 保存：页面所做的计算与 Python 相同。",
      stored16: "q 与 k 以 float16 保存：在模型缩放下与 float32 相比的最大 |Δp| = ",
      fromServer: "每个键的 q·k 来自服务器（float64）；对全部键的 softmax 在页面中重新计算。" +
        "各行：模型缩放下权重最大的键，按位置排列。",
      otherKeys: "其余所有键",
      noqkBias: "此追踪用稠密偏置塑造分数：QK 视图由服务器计算（`attnlab serve --trace FILE`）。",
      distance: "距离", duplicate: "重复词元", induction: "归纳",
      pooled: "长输入：矩阵按每块 {b} 个词元分块池化（对块内查询取平均、对块内键求和；每行之和仍为 1）。",
      pooledRC: "长输入：矩阵按 {r} × {c}（查询 × 键）分块池化（对块内查询取平均、对块内键求和；每行之和仍为 1）。",
      hoverTok: "悬停在词元上以单独显示它的注意力；点击以选为查询。",
      clickHead: "点击一个头以打开它。",
      queries: "查询", keys: "键",
      geoNote: "把键平移到查询的质心，并把两者缩放到相同的平均范数（softmax 与 q·k 不变），" +
        "再做一次 PCA。",
      geoLong: "长输入：几何视图只绘制不超过 {n} 个词元的输入。",
      position: "位置", dimension: "维度", offset: "偏移 k",
      peNote: "PE[pos+k] = M_k·PE[pos]：每一对 (sin, cos) 转过 ω_i·k。" +
        "圆点：PE[pos]；箭头：M_k·PE[pos]；圆环：表中的 PE[pos+k]。",
      maxErr: "最大 |M_k·PE[pos] − PE[pos+k]| = ",
      entropy: "熵", max_weight: "最大权重", sink: "首词元", previous: "前一个",
      diagonal: "自身", redundancy: "冗余度", cluster: "簇", roles: "角色",
      diagNote: "分数由 attnlab 的分析模块计算（熵的单位为奈特；首词元、前一个、自身 = 落在第一个、" +
        "前一个、自己词元上的平均权重）。点击列标题排序，点击一行打开该头。",
      dq: "q", norm: "|q|",
      block: "块", tokens: "词元", prev: "◀", next: "▶",
      served: "点击词元查看它对各个键的精确注意力权重；点击矩阵中的块查看该块的精确权重（由服务器计算）。",
      unserved: "精确的行与块由服务器计算：`attnlab serve --trace FILE`。",
      loading: "加载中…", fetchError: "服务器没有响应：",
      rowOf: "该查询对各个键的精确注意力权重", topKeys: "权重最大的键", tile: "精确权重",
      clickBlock: "点击一个块查看它的精确权重。",
      nTokens: "{n} 个词元", pos: "位置",
      "role:sink": "汇聚", "role:previous-token": "前一个词元", "role:induction": "归纳",
      "role:self": "自身",
      stack: "注意力栈", "stack:self": "自注意力", "stack:encoder": "编码器自注意力",
      "stack:decoder": "解码器自注意力", "stack:cross": "交叉注意力",
      crossInfo: "行：目标词元（查询）· 列：源（键）",
      crossDiag: "交叉注意力：查询（目标）与键（源）是两段不同的文本，比较两者位置的分数" +
        "（首词元、前一个、自身、距离、重复、归纳）不适用，故不列出。",
      image: "图像",
      imageNote: "点击一个图块，把它选为查询：叠加层显示该查询在各图块上的注意力" +
        "（颜色与不透明度 ∝ 权重 ÷ 该行图块上的最大权重：蓝色最少，红色最多）。前缀词元单独列出。",
      imageLong: "此图像有 {n} 个词元，超过页面保存全部权重的上限（ExplorerConfig.max_tokens = " +
        "{m}）：请用 `attnlab serve --trace FILE` 打开此追踪以查看精确的行。",
      prefixTokens: "前缀词元", patches: "图块", onPatches: "落在图块上",
      patchMax: "图块上的最大权重", grid: "网格", audio: "音频", seconds: "{s} 秒",
      frame: "每个编码器位置 {s} 秒"
    }
  };

  // -- small DOM helpers ----------------------------------------------------------------
  function h(tag, attrs, parent, text) {
    var e = document.createElement(tag);
    for (var a in attrs || {}) e.setAttribute(a, attrs[a]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function s(tag, attrs, parent, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var a in attrs || {}) e.setAttribute(a, attrs[a]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function svgRoot(w, hgt, view) {
    return s("svg", {xmlns: SVGNS, width: w, height: hgt, viewBox: "0 0 " + w + " " + hgt,
      "class": "ax-svg", "data-view": view, "font-family": "system-ui, sans-serif",
      "font-size": 12});
  }
  function fmt(x, n) {
    if (!isFinite(x)) return String(x);
    var a = Math.abs(x);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
    return x.toFixed(n === undefined ? 4 : n);
  }
  function clamp(x, a, b) { return Math.max(a, Math.min(b, x)); }

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
  function decode(blob, raw) {
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
  function blue(v) {
    v = clamp(v, 0, 1) * (BLUES.length - 1);
    var i = Math.min(Math.floor(v), BLUES.length - 2), f = v - i, a = BLUES[i], b = BLUES[i + 1];
    return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
  }
  function css(rgb) { return "rgb(" + rgb.map(Math.round).join(",") + ")"; }
  function diverge(v) {  // -1 red .. 0 white .. 1 blue
    v = clamp(v, -1, 1);
    return v >= 0 ? [255 - 222 * v, 255 - 142 * v, 255 - 74 * v]
      : [255 + 77 * v, 255 + 180 * v, 255 + 175 * v];
  }
  /* Heat over a picture: cold (dark blue) for little weight to hot (dark red) for the most. */
  var HEAT = [[49, 54, 149], [69, 117, 180], [171, 217, 233], [254, 224, 144], [244, 109, 67],
    [165, 0, 38]];
  function heat(v) {
    v = clamp(v, 0, 1) * (HEAT.length - 1);
    var i = Math.min(Math.floor(v), HEAT.length - 2), f = v - i, a = HEAT[i], b = HEAT[i + 1];
    return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
  }
  function headColor(hd, H) { return "hsl(" + Math.round(360 * hd / Math.max(H, 1)) + ",65%,42%)"; }
  /* A colour map as a table of 256 RGB triples over [lo, hi]: one lookup per pixel. */
  function lut(fn, lo, hi) {
    var rgb = new Uint8Array(768);
    for (var i = 0; i < 256; i++) {
      var c = fn(lo + (hi - lo) * i / 255);
      rgb[3 * i] = Math.round(c[0]); rgb[3 * i + 1] = Math.round(c[1]); rgb[3 * i + 2] = Math.round(c[2]);
    }
    return {lo: lo, k: 255 / (hi - lo), rgb: rgb};
  }
  var BLUE = lut(blue, 0, 1), DIVERGE = lut(diverge, -1, 1);
  /* Write rows×cols values, coloured by the table, into ImageData at (x0, y0). */
  function paint(img, x0, y0, get, rows, cols, map) {
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
  function heatImage(get, rows, cols, map) {
    var c = document.createElement("canvas");
    c.width = cols; c.height = rows;
    var ctx = c.getContext("2d"), img = ctx.createImageData(cols, rows);
    paint(img, 0, 0, get, rows, cols, map);
    ctx.putImageData(img, 0, 0);
    return c.toDataURL("image/png");
  }

  // -- score shaping: what the trace's ScoreShape does, for one query row ---------------
  /* Probabilities of one query row at (scale, temp): z_j = scale·dot_j, soft-capped if the
   * model caps, plus the additive bias (ALiBi), masked keys at −∞, divided by temp,
   * softmax in float64; a learned sink logit (src.sink, divided by temp too) joins the
   * softmax and takes its share from every key. src: {dots, ok, bias, softcap, sink}. */
  function softmaxRow(src, scale, temp) {
    var n = src.dots.length, z = new Float64Array(n), p = new Float64Array(n), mx = -Infinity, j;
    var zs = (src.sink === null || src.sink === undefined) ? null : src.sink / temp;
    if (zs !== null) mx = zs;
    for (j = 0; j < n; j++) {
      if (!src.ok[j]) { z[j] = -Infinity; continue; }
      var v = scale * src.dots[j];
      if (src.softcap) v = src.softcap * Math.tanh(v / src.softcap);
      if (src.bias) v += src.bias[j];
      z[j] = v / temp;
      if (z[j] > mx) mx = z[j];
    }
    var sum = zs !== null ? Math.exp(zs - mx) : 0;
    for (j = 0; j < n; j++) { p[j] = src.ok[j] ? Math.exp(z[j] - mx) : 0; sum += p[j]; }
    for (j = 0; j < n; j++) p[j] = sum > 0 ? p[j] / sum : 0;
    return {z: z, p: p};
  }

  // -- the explorer --------------------------------------------------------------------
  function Explorer(root, data) {
    this.root = root;
    this.data = data;
    this.traces = [];
    this.cache = {};
    this.pending = {};
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

  Explorer.prototype.t = function (key, vars) {
    var text = I18N[this.s.lang][key] || key;
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
  function label(t) { return /^\s*$/.test(t) ? "␣" + t.replace(/ /g, "") : t; }

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

  // -- the server (only when the page came from `attnlab serve`) -------------------------
  /* GET api/<path>?<params> -> JSON with its blobs decoded; cached per URL; re-renders the
   * explorer when an answer arrives that the current state still wants. */
  Explorer.prototype.fetchApi = function (path, params) {
    var m = this.cur().meta, self = this;
    if (!m.api) return null;
    var qs = Object.keys(params).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]);
    }).join("&");
    var url = m.api + "/" + path + "?" + qs;
    if (url in this.cache) return this.cache[url];
    if (!(url in this.pending)) {
      var t0 = performance.now();
      this.pending[url] = fetch(url, {headers: {Accept: "application/json"}})
        .then(function (r) {
          return r.json().then(function (j) {
            if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
            return j;
          });
        })
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

  // -- the frame: toolbar, tabs, export, language ----------------------------------------
  Explorer.prototype.build = function () {
    var self = this, root = this.root;
    root.innerHTML = "";
    root.setAttribute("lang", this.s.lang);
    var bar = h("div", {"class": "ax-bar"}, root);
    if (this.data.inputs.length > 1) {
      h("label", {"data-i18n": "input"}, bar, this.t("input"));
      var inp = h("select", {"class": "ax-input", "aria-label": "input"}, bar);
      this.data.inputs.forEach(function (it, i) {
        h("option", {value: i}, inp, self.inputLabel(i));
      });
      inp.addEventListener("change", function () {
        self.s.input = +inp.value;
        self.setStack(self.data.inputs[self.s.input].stacks[0].t);
      });
    }
    this.stackBox = h("span", {"class": "ax-stackbox"}, bar);
    h("label", {"data-i18n": "layer"}, bar, this.t("layer"));
    this.selLayer = h("select", {"class": "ax-layer", "aria-label": "layer"}, bar);
    h("label", {"data-i18n": "head"}, bar, this.t("head"));
    this.selHead = h("select", {"class": "ax-head", "aria-label": "head"}, bar);
    h("label", {"data-i18n": "query"}, bar, this.t("query"));
    this.queryBox = h("span", {}, bar);
    this.selLayer.addEventListener("change", function () { self.s.layer = +self.selLayer.value; self.render(); });
    this.selHead.addEventListener("change", function () { self.s.head = +self.selHead.value; self.render(); });
    var right = h("span", {"class": "ax-right"}, bar);
    var ex1 = h("button", {type: "button", "class": "ax-export", "data-format": "svg",
      "data-i18n": "exportSvg"}, right, this.t("exportSvg"));
    var ex2 = h("button", {type: "button", "class": "ax-export", "data-format": "png",
      "data-i18n": "exportPng"}, right, this.t("exportPng"));
    ex1.addEventListener("click", function () { self.exportView("svg"); });
    ex2.addEventListener("click", function () { self.exportView("png"); });
    var lang = h("button", {type: "button", "class": "ax-lang", "data-i18n": "lang"}, right, this.t("lang"));
    lang.addEventListener("click", function () { self.setLang(self.s.lang === "zh" ? "en" : "zh"); });
    var tabs = h("div", {"class": "ax-tabs", role: "tablist"}, root);
    this.tabs = {};
    VIEWS.concat([IMAGE_VIEW]).forEach(function (v) {
      var b = h("button", {type: "button", role: "tab", "class": "ax-tab", "data-view": v,
        "data-i18n": v}, tabs, self.t(v));
      b.addEventListener("click", function () { self.show(v); });
      self.tabs[v] = b;
    });
    this.info = h("div", {"class": "ax-info"}, root);
    this.strip = h("div", {"class": "ax-strip"}, root);
    this.controls = h("div", {"class": "ax-controls"}, root);
    this.stage = h("div", {"class": "ax-stage"}, root);
    this.tip = h("div", {"class": "ax-tip", role: "status"}, root);
    this.tip.style.display = "none";
    this.refresh();
  };

  /* Show stack t (a trace of the current input): a new set of queries and keys. */
  Explorer.prototype.setStack = function (t) {
    this.s.t = t; this.s.query = 0; this.s.block = 0; this.s.tile = null;
    this.refresh();
  };

  /* The stack selector of the current input (only when it holds several stacks). */
  Explorer.prototype.fillStacks = function () {
    var self = this, box = this.stackBox, stacks = this.data.inputs[this.s.input].stacks;
    box.innerHTML = "";
    if (stacks.length < 2) return;
    h("label", {"data-i18n": "stack"}, box, this.t("stack"));
    var sel = h("select", {"class": "ax-stack", "aria-label": "stack"}, box);
    stacks.forEach(function (st) {
      h("option", {value: st.t, "data-stack": st.name, "data-i18n": "stack:" + st.name}, sel,
        self.t("stack:" + st.name));
    });
    sel.value = this.s.t;
    sel.addEventListener("change", function () { self.setStack(+sel.value); });
  };

  /* Long inputs choose the query with a number box (a <select> of 8,000 options is slow). */
  Explorer.prototype.refresh = function () {
    var m = this.cur().meta, self = this;
    this.fillStacks();
    this.tabs[IMAGE_VIEW].style.display = m.image ? "" : "none";
    if (this.s.view === IMAGE_VIEW && !m.image) this.s.view = "model";
    this.s.layer = clamp(this.s.layer, 0, m.L - 1);
    this.s.head = clamp(this.s.head, 0, m.H - 1);
    this.s.query = clamp(this.s.query, 0, m.Lq - 1);
    function fill(sel, n, lab) {
      sel.innerHTML = "";
      for (var i = 0; i < n; i++) h("option", {value: i}, sel, lab(i));
    }
    fill(this.selLayer, m.L, String);
    fill(this.selHead, m.H, String);
    this.queryBox.innerHTML = "";
    if (m.pooled) {
      this.selQuery = h("input", {type: "number", "class": "ax-query", "aria-label": "query",
        min: 0, max: m.Lq - 1, step: 1, value: this.s.query}, this.queryBox);
    } else {
      this.selQuery = h("select", {"class": "ax-query", "aria-label": "query"}, this.queryBox);
      fill(this.selQuery, m.Lq, function (i) { return i + ": " + m.tokens[i]; });
    }
    this.selQuery.addEventListener("change", function () {
      self.setQuery(clamp(Math.round(+self.selQuery.value) || 0, 0, m.Lq - 1));
    });
    self.render();
  };

  Explorer.prototype.setQuery = function (i) {
    this.s.query = i;
    this.s.block = this.blockOf(i);
    this.render();
  };

  /* The label of input i in the input selector, in the page's current language. */
  Explorer.prototype.inputLabel = function (i) {
    var it = this.data.inputs[i], tr = this.data.traces[it.stacks[0].t];
    var media = it.media && it.media.kind && it.media.kind !== "text"
      ? this.t(it.media.kind) + (it.media.path ? " " + it.media.path : "") : null;
    var text = (media || it.text || tr.text || tr.tokens.slice(0, 40).join(" ")) +
      (it.target ? " → " + it.target : "");
    return (i + 1) + ": " + text.slice(0, 40);
  };

  Explorer.prototype.setLang = function (lang) {
    var self = this;
    this.s.lang = lang;
    this.root.setAttribute("lang", lang);
    this.root.querySelectorAll("[data-i18n]").forEach(function (e) {
      e.textContent = self.t(e.getAttribute("data-i18n"));
    });
    this.root.querySelectorAll("select.ax-input option").forEach(function (o) {
      o.textContent = self.inputLabel(+o.value);
    });
    this.render();
  };

  Explorer.prototype.show = function (view) { this.s.view = view; this.render(); };

  Explorer.prototype.select = function (l, hd, view) {
    this.s.layer = l; this.s.head = hd;
    if (view) this.s.view = view;
    this.render();
  };

  Explorer.prototype.render = function () {
    var t0 = performance.now(), s = this.s, m = this.cur().meta;
    if (!this.stage) return;
    this.selLayer.value = s.layer; this.selHead.value = s.head;
    // a re-render (e.g. when a fetched row arrives) must not undo what the user is typing
    if (document.activeElement !== this.selQuery) this.selQuery.value = s.query;
    for (var v in this.tabs) this.tabs[v].setAttribute("aria-selected", v === s.view ? "true" : "false");
    this.root.setAttribute("data-view", s.view);
    this.root.setAttribute("data-layer", s.layer);
    this.root.setAttribute("data-head", s.head);
    this.root.setAttribute("data-query", s.query);
    this.root.setAttribute("data-block", s.block);
    this.controls.innerHTML = "";
    this.stage.innerHTML = "";
    this.hideTip();
    var inp = this.data.inputs[s.input], media = inp.media;
    var info = (m.model ? m.model + " · " : "") + (inp.stacks.length > 1 ? this.t("stack:" + m.stack) + " · " : "") +
      m.L + "×" + m.H + " · " + this.t("nTokens", {n: m.Lq});
    if (m.Lk !== m.Lq || m.cross) info += " × " + this.t("nTokens", {n: m.Lk});
    if (m.cross) info += " · " + this.t("crossInfo");
    if (media && media.kind === "audio" && isFinite(media.seconds))
      info += " · " + this.t("audio") + " " + this.t("seconds", {s: fmt(+media.seconds, 2)}) +
        (isFinite(media.frame_seconds) ? ", " + this.t("frame", {s: fmt(+media.frame_seconds, 3)}) : "");
    if (m.image) info += " · " + this.t("grid") + " " + m.image.grid[0] + "×" + m.image.grid[1];
    if (s.view !== "model" && s.view !== "positional" && s.view !== "diagnostics")
      info += " · " + this.t("layer") + " " + s.layer + " · " + this.t("head") + " " + s.head;
    this.info.textContent = info;
    this.root.setAttribute("data-stack", m.stack || "self");
    if (m.pooled && s.view !== "qk" && s.view !== "positional")
      h("div", {"class": "ax-note ax-pooled"}, this.controls, m.col_block && m.col_block !== m.block
        ? this.t("pooledRC", {r: m.block, c: m.col_block}) : this.t("pooled", {b: m.block}));
    this.renderStrip();
    this["view_" + s.view]();
    this.root.setAttribute("data-render-ms", (performance.now() - t0).toFixed(1));
  };

  Explorer.prototype.place = function (svg) { this.stage.appendChild(svg); return svg; };

  Explorer.prototype.showTip = function (evt, text) {
    var r = this.root.getBoundingClientRect();
    this.tip.textContent = text;
    this.tip.style.display = "block";
    this.tip.style.left = (evt.clientX - r.left + 14) + "px";
    this.tip.style.top = (evt.clientY - r.top + 14) + "px";
  };
  Explorer.prototype.hideTip = function () { if (this.tip) this.tip.style.display = "none"; };

  /* The exact row of the current query and head, from the server: {weights, top_…}, null
   * (static page), undefined while loading, {error} when the server failed. */
  Explorer.prototype.exactRow = function () {
    var s = this.s;
    return this.fetchApi("rows", {layer: s.layer, head: s.head, queries: s.query, top: 8});
  };

  // -- the token strip (long inputs): every block of the input, and one block's tokens ----
  Explorer.prototype.renderStrip = function () {
    var self = this, m = this.cur().meta, box = this.strip, st = this.s;
    box.innerHTML = "";
    if (!m.pooled) { box.style.display = "none"; return; }
    box.style.display = "";
    var nb = m.row_blocks.length, W = 900, bw = W / nb, hgt = 22;
    st.block = clamp(st.block, 0, nb - 1);
    var ex = m.api ? this.exactRow() : null, row = ex && ex.weights ? ex.weights : null;
    var mass = null, mx = 0;
    if (row) {  // the exact row summed per key block: where this query looks, at a glance
      mass = new Float64Array(m.col_blocks.length);
      m.col_blocks.forEach(function (cb, b) {
        for (var j = cb[0]; j < cb[1]; j++) mass[b] += row[j];
        mx = Math.max(mx, mass[b]);
      });
    }
    var nav = h("div", {"class": "ax-strip-bar"}, box);
    var prev = h("button", {type: "button", "class": "ax-prev", "aria-label": "previous block"}, nav, this.t("prev"));
    var svg = s("svg", {width: W, height: hgt, viewBox: "0 0 " + W + " " + hgt, "class": "ax-blocks"}, nav);
    var next = h("button", {type: "button", "class": "ax-next", "aria-label": "next block"}, nav, this.t("next"));
    h("span", {"class": "ax-strip-label"}, nav, this.t("block") + " " + st.block + " / " + nb +
      " · " + this.t("tokens") + " " + m.row_blocks[st.block][0] + "–" + (m.row_blocks[st.block][1] - 1));
    for (var b = 0; b < nb; b++) {
      var fill = mass && b < mass.length ? css(blue(Math.sqrt(mass[b] / (mx || 1))))
        : (b % 2 ? "#e3e6ee" : "#eef0f6");
      var r = s("rect", {x: (b * bw).toFixed(2), y: 2, width: Math.max(bw - 0.5, 0.5).toFixed(2),
        height: hgt - 4, fill: fill, "class": "ax-sblock", "data-block": b,
        stroke: b === st.block ? "#e4572e" : "none", "stroke-width": 2}, svg);
      s("title", {}, r, m.rows[b]);
    }
    svg.addEventListener("click", function (e) {
      var t = e.target.closest(".ax-sblock");
      if (t) { self.s.block = +t.getAttribute("data-block"); self.render(); }
    });
    prev.addEventListener("click", function () { self.s.block = Math.max(0, self.s.block - 1); self.render(); });
    next.addEventListener("click", function () { self.s.block = Math.min(nb - 1, self.s.block + 1); self.render(); });
    // the tokens of the selected block; coloured by the exact row when there is one
    var text = h("div", {"class": "ax-text"}, box);
    var span = m.row_blocks[st.block], rmax = 0, j;
    if (row) for (j = 0; j < row.length; j++) rmax = Math.max(rmax, row[j]);
    for (j = span[0]; j < span[1]; j++) {
      var a = {"class": "ax-t" + (j === st.query ? " ax-tsel" : ""), "data-i": j, title: j};
      if (row && j < row.length && row[j] > 0) {
        a.style = "background:" + css(blue(Math.sqrt(row[j] / (rmax || 1))));
        a["data-w"] = String(row[j]);
      }
      h("span", a, text, m.tokens[j]);
    }
    text.addEventListener("click", function (e) {
      var t = e.target.closest(".ax-t");
      if (t) self.setQuery(+t.getAttribute("data-i"));
    });
    h("div", {"class": "ax-hint"}, box, m.api ? this.t("served") : this.t("unserved"));
    if (!m.api) return;
    var note = h("div", {"class": "ax-rowinfo"}, box);
    if (ex === undefined) { note.textContent = this.t("loading"); return; }
    if (ex.error) { note.textContent = this.t("fetchError") + ex.error; note.classList.add("ax-bad"); return; }
    note.setAttribute("data-row", st.layer + ":" + st.head + ":" + st.query);
    note.textContent = this.t("rowOf") + " " + st.query + " “" + m.tokens[st.query] + "” · " +
      this.t("topKeys") + ": ";
    (ex.top_indices || []).forEach(function (kj, n) {
      var text = m.key_tokens[kj] + " (" + kj + ") " + fmt(ex.top_values[n], 3);
      if (m.cross) {  // keys of another text: nothing on the strip to go to
        h("span", {"class": "ax-topkey", "data-key": kj}, note, text);
        note.appendChild(document.createTextNode(" "));
        return;
      }
      var a = h("a", {href: "#", "class": "ax-topkey", "data-key": kj}, note, text);
      a.addEventListener("click", function (e) {
        e.preventDefault(); self.s.block = self.blockOf(kj); self.render();
      });
      note.appendChild(document.createTextNode(" "));
    });
  };

  // -- model view: layers × heads thumbnails ------------------------------------------
  /* Every head as a thumbnail of at most 64×64 (the max of each cell keeps thin diagonals
   * visible), all painted into one image: one PNG for the whole model, whatever its size. */
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

  // -- head view: arcs between query and key tokens (or blocks) -------------------------
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

  // -- matrix view: heatmap with token labels; long inputs: pooled map + exact tile -----
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

  // -- QK view: softmax(q·k·scale / T) recomputed live ---------------------------------
  Explorer.prototype.qkHead = function () {
    var T = this.cur(), n = T.qkIndex[this.s.layer + ":" + this.s.head];
    return n === undefined || !T.q ? null : n;
  };

  /* Which keys query i may see, and its additive bias, by the trace's score shaping. */
  Explorer.prototype.shapeRow = function (i, hd) {
    var T = this.cur(), m = T.meta, sh = m.shape || {}, l = this.s.layer, n = m.Lk;
    var off = m.Lk - m.Lq, ok = new Uint8Array(n), bias = null, j;
    var win = sh.window ? sh.window[l] : null;
    for (j = 0; j < n; j++) {
      var yes = !T.km || T.km[j];
      if (sh.causal && j > i + off) yes = false;
      if (win && j <= i + off - win) yes = false;
      ok[j] = yes ? 1 : 0;
    }
    if (sh.alibi) {
      bias = new Float64Array(n);
      for (j = 0; j < n; j++) bias[j] = -sh.alibi[hd] * (i + off - j);
    }
    var sk = sh.sinks ? sh.sinks[l] : null, sink = null;
    if (sk) sink = Array.isArray(sk[hd]) ? sk[hd][i] : sk[hd];
    return {ok: ok, bias: bias, softcap: sh.softcap ? sh.softcap[l] : null, sink: sink};
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
    var sh = this.shapeRow(i, hd), self = this;
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
        cells[a2][0].textContent = on ? fmt(r.z[j2] * self.s.temp, 3) : "−∞";
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

  // -- geometry view: queries and keys in one 2-D projection --------------------------
  Explorer.prototype.view_geometry = function () {
    var self = this, T = this.cur(), m = T.meta, n = this.qkHead();
    if (n === null) {
      h("div", {"class": "ax-note ax-noqk"}, this.controls,
        m.qk_missing === "long" ? this.t("geoLong", {n: m.max_tokens}) : this.noQkText());
      return;
    }
    h("div", {"class": "ax-note"}, this.controls, this.t("geoNote"));
    var size = 520, pad = 30, N = m.Lq + m.Lk, off = n * N * 2;
    var svg = svgRoot(size + 2 * pad + 160, size + 2 * pad, "geometry");
    function X(v) { return pad + (v + 1) / 2 * size; }
    function Y(v) { return pad + (1 - (v + 1) / 2) * size; }
    s("rect", {x: pad, y: pad, width: size, height: size, fill: "#fafbfe", stroke: "#e3e6ee"}, svg);
    var links = s("g", {"class": "ax-links"}, svg), pts = s("g", {}, svg);
    var qc = "#3451b2", kc = "#e4572e", a;
    for (a = 0; a < m.Lk; a++) {
      var kx = X(T.geo[off + 2 * (m.Lq + a)]), ky = Y(T.geo[off + 2 * (m.Lq + a) + 1]);
      var r = s("rect", {x: kx - 3.5, y: ky - 3.5, width: 7, height: 7, fill: kc, "fill-opacity": 0.75,
        "class": "ax-pt", "data-kind": "k", "data-i": a}, pts);
      s("title", {}, r, "k " + a + ": " + m.key_tokens[a]);
    }
    for (a = 0; a < m.Lq; a++) {
      var c = s("circle", {cx: X(T.geo[off + 2 * a]), cy: Y(T.geo[off + 2 * a + 1]), r: 4, fill: qc,
        "fill-opacity": a === this.s.query ? 1 : 0.7, "class": "ax-pt", "data-kind": "q", "data-i": a,
        stroke: a === this.s.query ? "#111" : "none"}, pts);
      s("title", {}, c, "q " + a + ": " + m.tokens[a]);
    }
    s("circle", {cx: size + 2 * pad + 12, cy: 40, r: 4, fill: qc}, svg);
    s("text", {x: size + 2 * pad + 22, y: 44}, svg, this.t("queries"));
    s("rect", {x: size + 2 * pad + 8, y: 56, width: 7, height: 7, fill: kc}, svg);
    s("text", {x: size + 2 * pad + 22, y: 64}, svg, this.t("keys"));
    var lab = s("text", {x: size + 2 * pad + 8, y: 96, "class": "ax-tok ax-geo-label"}, svg, "");
    function link(i) {
      links.innerHTML = "";
      var x0 = X(T.geo[off + 2 * i]), y0 = Y(T.geo[off + 2 * i + 1]);
      for (var b = 0; b < m.Lk && !m.pooled; b++) {
        var w = self.w(self.s.layer, self.s.head, i, b);
        if (w < 0.01) continue;
        s("line", {x1: x0, y1: y0, x2: X(T.geo[off + 2 * (m.Lq + b)]), y2: Y(T.geo[off + 2 * (m.Lq + b) + 1]),
          stroke: "#555", "stroke-opacity": clamp(w, 0.05, 1).toFixed(3), "stroke-width": 1 + 2 * w}, links);
      }
    }
    svg.addEventListener("mouseover", function (e) {
      var t = e.target;
      if (!t.classList || !t.classList.contains("ax-pt")) return;
      var i = +t.getAttribute("data-i"), kind = t.getAttribute("data-kind");
      lab.textContent = kind + " " + i + ": " + (kind === "q" ? m.tokens[i] : m.key_tokens[i]);
      if (kind === "q") link(i);
      self.showTip(e, lab.textContent);
    });
    svg.addEventListener("mouseout", function () { self.hideTip(); });
    svg.addEventListener("click", function (e) {
      var t = e.target;
      if (t.classList && t.classList.contains("ax-pt") && t.getAttribute("data-kind") === "q")
        self.setQuery(+t.getAttribute("data-i"));
    });
    link(this.s.query);
    this.place(svg);
  };

  // -- image view: the query's attention over the image's patches -----------------------
  /* The exact weights of the current query row over every key: from the page (short
   * inputs) or the server (long ones); null when neither has it, undefined while loading. */
  Explorer.prototype.queryRow = function () {
    var m = this.cur().meta, st = this.s, row, j;
    if (!m.pooled) {
      row = new Float64Array(m.Lk);
      for (j = 0; j < m.Lk; j++) row[j] = this.w(st.layer, st.head, st.query, j);
      return row;
    }
    if (!m.api) return null;
    var ex = this.exactRow();
    if (ex === undefined || ex === null) return ex;
    if (ex.error) return ex;
    return ex.weights;
  };

  Explorer.prototype.view_image = function () {
    var self = this, m = this.cur().meta, im = m.image, st = this.s;
    var rows = im.grid[0], cols = im.grid[1], np = im.prefix, q = st.query;
    h("div", {"class": "ax-note"}, this.controls, this.t("imageNote"));
    var row = this.queryRow();
    if (row === null) {
      h("div", {"class": "ax-note ax-noimage"}, this.controls,
        this.t("imageLong", {n: m.Lq, m: m.max_tokens}));
      return;
    }
    if (row === undefined) { h("div", {"class": "ax-note"}, this.controls, this.t("loading")); return; }
    if (row.error) {
      h("div", {"class": "ax-note ax-bad"}, this.controls, this.t("fetchError") + row.error);
      return;
    }
    var ih = im.image_size ? im.image_size[0] : rows * (im.patch_size || 16);
    var iw = im.image_size ? im.image_size[1] : cols * (im.patch_size || 16);
    var k = 448 / Math.max(ih, iw), W = iw * k, H = ih * k, pad = 10, side = 230;
    var svg = svgRoot(pad + W + 24 + side, Math.max(pad + H + 30, pad + 60 + 20 * np + 90), "image");
    svg.setAttribute("data-row", st.layer + ":" + st.head + ":" + q);
    s("image", {x: pad, y: pad, width: W, height: H, href: "data:image/png;base64," + im.png,
      preserveAspectRatio: "none", "class": "ax-photo",
      style: k >= 2 ? "image-rendering:pixelated" : ""}, svg);
    var pw = W / cols, ph = H / rows, mx = 0, onPatches = 0, j;
    for (j = np; j < m.Lk; j++) { mx = Math.max(mx, row[j]); onPatches += row[j]; }
    var g = s("g", {"class": "ax-overlay"}, svg);
    for (var r = 0; r < rows; r++) for (var c = 0; c < cols; c++) {
      var key = np + r * cols + c, v = row[key], a = mx > 0 ? v / mx : 0;
      var rect = s("rect", {x: (pad + c * pw).toFixed(2), y: (pad + r * ph).toFixed(2),
        width: pw.toFixed(2), height: ph.toFixed(2), fill: css(heat(a)),
        "fill-opacity": (0.2 + 0.6 * a).toFixed(4), stroke: key === q ? "#111" : "none",
        "stroke-width": key === q ? 2.5 : 0, "class": "ax-patch" + (key === q ? " ax-qpatch" : ""),
        "data-key": key, "data-r": r, "data-c": c, "data-w": String(v)}, g);
      s("title", {}, rect, m.key_tokens[key] + ": " + fmt(v, 5));
    }
    s("rect", {x: pad, y: pad, width: W, height: H, fill: "none", stroke: "#c9cfdd"}, svg);
    // the legend and the prefix tokens, apart from the grid
    var x0 = pad + W + 24, y = pad + 14;
    s("text", {x: x0, y: y, "font-weight": 600}, svg, this.t("query") + " " + q + ": ");
    s("text", {x: x0 + 90, y: y, "class": "ax-tok ax-sel"}, svg, m.tokens[q]);
    y += 22;
    s("text", {x: x0, y: y, fill: "#5b6478"}, svg, this.t("patchMax") + " = " + fmt(mx, 4));
    for (j = 0; j < 20; j++)  // the colour scale, 0 … the largest patch weight
      s("rect", {x: x0 + j * 8, y: y + 6, width: 8, height: 8, fill: css(heat(j / 19)),
        "fill-opacity": (0.2 + 0.6 * j / 19).toFixed(3)}, svg);
    s("text", {x: x0, y: y + 26, "font-size": 10, fill: "#5b6478"}, svg, "0");
    s("text", {x: x0 + 160, y: y + 26, "font-size": 10, fill: "#5b6478", "text-anchor": "end"}, svg, fmt(mx, 3));
    y += 30;
    y += 18;
    s("text", {x: x0, y: y, fill: "#5b6478", "class": "ax-onpatches", "data-w": String(onPatches)},
      svg, this.t("onPatches") + ": " + fmt(onPatches, 4));
    if (np > 0) {
      y += 28;
      s("text", {x: x0, y: y, "font-weight": 600}, svg, this.t("prefixTokens"));
      for (j = 0; j < np; j++) {
        y += 20;
        var pg = s("g", {"class": "ax-prefix" + (j === q ? " ax-qprefix" : ""), "data-key": j,
          "data-w": String(row[j]), style: "cursor:pointer"}, svg);
        s("rect", {x: x0 - 4, y: y - 14, width: side - 10, height: 19, fill: "#fff",
          "fill-opacity": 0}, pg);  // the whole line answers a click
        s("text", {x: x0, y: y, "class": "ax-tok" + (j === q ? " ax-sel" : "")}, pg, m.key_tokens[j]);
        s("rect", {x: x0 + 70, y: y - 10, width: (100 * row[j]).toFixed(2), height: 11,
          fill: css(heat(1)), "fill-opacity": 0.8}, pg);
        s("text", {x: x0 + 176, y: y, "class": "ax-num"}, pg, fmt(row[j], 4));
      }
    }
    svg.addEventListener("click", function (e) {
      var t = e.target.closest(".ax-patch, .ax-prefix");
      if (t) self.setQuery(+t.getAttribute("data-key"));
    });
    svg.addEventListener("mouseover", function (e) {
      var t = e.target.closest(".ax-patch");
      if (t) self.showTip(e, m.key_tokens[+t.getAttribute("data-key")] + ": " + fmt(+t.getAttribute("data-w"), 5));
    });
    svg.addEventListener("mouseout", function () { self.hideTip(); });
    this.place(svg);
  };

  // -- positional view: sinusoidal table and its rotations ------------------------------
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
    function update() {
      var pos = self.s.pos, k = self.s.off, maxErr = 0;
      mk1.setAttribute("y", top + pos * chh - 1); mk2.setAttribute("y", top + (pos + k) * chh - 1);
      for (var pi = 0; pi < d / 2; pi++) {  // every pair: rotate (sin, cos) by ω_i·k
        var phi = pe.omega[pi] * k, sn = P[pos * d + 2 * pi], cs = P[pos * d + 2 * pi + 1];
        var rs = sn * Math.cos(phi) + cs * Math.sin(phi), rc = cs * Math.cos(phi) - sn * Math.sin(phi);
        maxErr = Math.max(maxErr, Math.abs(rs - P[(pos + k) * d + 2 * pi]),
          Math.abs(rc - P[(pos + k) * d + 2 * pi + 1]));
      }
      parts.forEach(function (q) {
        var phi = pe.omega[q.pi] * k, sn = P[pos * d + 2 * q.pi], cs = P[pos * d + 2 * q.pi + 1];
        var rs = sn * Math.cos(phi) + cs * Math.sin(phi), rc = cs * Math.cos(phi) - sn * Math.sin(phi);
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

  // -- diagnostics: sortable head table --------------------------------------------
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

  // -- export ------------------------------------------------------------------------
  Explorer.prototype.svgText = function () {
    var svg = this.stage.querySelector("svg");
    if (!svg) return null;
    var clone = svg.cloneNode(true);
    clone.setAttribute("xmlns", SVGNS);
    var st = document.createElementNS(SVGNS, "style");
    st.textContent = ".ax-tok{fill:#1d2330}.ax-sel{fill:#e4572e;font-weight:600}" +
      ".ax-num{font-variant-numeric:tabular-nums}";
    clone.insertBefore(st, clone.firstChild);
    var bg = document.createElementNS(SVGNS, "rect");
    bg.setAttribute("width", "100%"); bg.setAttribute("height", "100%"); bg.setAttribute("fill", "#fff");
    clone.insertBefore(bg, st.nextSibling);
    return new XMLSerializer().serializeToString(clone);
  };

  Explorer.prototype.download = function (href, name) {
    var a = h("a", {href: href, download: name}, this.root);
    a.style.display = "none";
    a.click();
    a.remove();
  };

  Explorer.prototype.exportView = function (format) {
    var text = this.svgText(), self = this;
    if (!text) return;
    var name = "attnlab-" + this.s.view + "-L" + this.s.layer + "H" + this.s.head;
    var uri = "data:image/svg+xml;base64," + btoa(unescape(encodeURIComponent(text)));
    if (format === "svg") { this.download(uri, name + ".svg"); return; }
    var svg = this.stage.querySelector("svg");
    var w = +svg.getAttribute("width"), ht = +svg.getAttribute("height"), k = 2;
    var img = new Image();
    img.onload = function () {
      var c = document.createElement("canvas");
      c.width = Math.ceil(w * k); c.height = Math.ceil(ht * k);
      var ctx = c.getContext("2d");
      ctx.scale(k, k);
      ctx.drawImage(img, 0, 0, w, ht);
      self.download(c.toDataURL("image/png"), name + ".png");
    };
    img.src = uri;
  };

  // -- mounting ------------------------------------------------------------------------
  function mount(uid) {
    var root = document.getElementById(uid), src = document.getElementById(uid + "-data");
    if (!root || !src || root.__attnlab) return root && root.__attnlab;
    var data = JSON.parse(src.textContent);
    return mountData(root, data);
  }
  function mountData(root, data) {
    var ex = new Explorer(root, data);
    root.__attnlab = ex;
    var t0 = performance.now();
    return ex.load().then(function () {
      root.setAttribute("data-load-ms", (performance.now() - t0).toFixed(1));
      ex.build();
      root.setAttribute("data-ready", "1");
      root.setAttribute("data-first-render-ms", (performance.now() - t0).toFixed(1));
      return ex;
    });
  }
  window.AttnlabExplorer = {mount: mount, mountData: mountData, views: VIEWS.concat([IMAGE_VIEW])};
})();
