// -- the frame: toolbar, tabs, export buttons, language; state changes, render, tooltips
import { Explorer, clamp, fmt, h, s } from "./core.js";
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
  this.views.forEach(function (v) {
    var b = h("button", {type: "button", role: "tab", "class": "ax-tab", "data-view": v,
      "data-i18n": v}, tabs, self.t(v));
    b.addEventListener("click", function () { self.show(v); });
    self.tabs[v] = b;
  });
  this.info = h("div", {"class": "ax-info"}, root);
  this.genBox = h("div", {"class": "ax-gen"}, root);
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
  this.views.forEach(function (v) { self.tabs[v].style.display = self.shown(v) ? "" : "none"; });
  if (!this.shown(this.s.view)) this.s.view = this.views[0];
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
    var gen = (m.generation && m.generation.generated) || [];
    fill(this.selQuery, m.Lq, function (i) {  // a generated token is marked ✦
      return i + ": " + m.tokens[i] + (gen.indexOf(i) >= 0 ? " ✦" : "");
    });
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

/* Whether view v has something to draw for the current trace: a view may say so with
 * Explorer.prototype.shown_<v>(meta) (the image view: only for an image); else it has. */
Explorer.prototype.shown = function (v) {
  var f = this["shown_" + v];
  return f ? f.call(this, this.cur().meta) : true;
};

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
  this.renderGeneration();
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
