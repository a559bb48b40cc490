// -- the token strip (long inputs): every block of the input, and one block's tokens ----
import { Explorer, blue, clamp, css, fmt, h, s } from "./core.js";
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
  h("div", {"class": "ax-hint"}, box, !m.api ? this.t("unserved")
    : this.t(this.transport.kind === "kernel" ? "servedKernel" : "served"));
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
