// -- a generation: where the prompt ends, and each generated token's row, step by step ----
/* For a trace of a generation (meta.generation: prompt_tokens, generated), a bar under the
 * page's summary: the prompt's length, the generated tokens as chips (the selected query
 * marked), and buttons that step the query through the generation, one generated token at
 * a time: each view then shows that token's row, the keys it could see when the model
 * chose the next one (a causal model: the prompt and the tokens generated before it). */
import { Explorer, h, s } from "./core.js";
Explorer.prototype.renderGeneration = function () {
  var self = this, m = this.cur().meta, g = m.generation, s = this.s;
  if (this.genBox) this.genBox.innerHTML = "";
  if (!g || !g.generated || !g.generated.length) {
    this.root.removeAttribute("data-generated");
    return;
  }
  var box = this.genBox, gen = g.generated, at = gen.indexOf(s.query);
  this.root.setAttribute("data-generated", String(gen.length));
  this.root.setAttribute("data-prompt-tokens", String(g.prompt_tokens));
  h("span", {"class": "ax-gen-info", "data-i18n-vars": "1"}, box,
    this.t("genInfo", {p: g.prompt_tokens, n: gen.length}) + (g.chat ? " · " + this.t("genChat") : ""));
  var prev = h("button", {type: "button", "class": "ax-gen-prev", "aria-label": this.t("genPrev")},
    box, "◀");
  var next = h("button", {type: "button", "class": "ax-gen-next", "aria-label": this.t("genNext")},
    box, "▶");
  h("span", {"class": "ax-gen-step"}, box, at >= 0
    ? this.t("genStep", {i: at + 1, n: gen.length, tok: m.tokens[s.query]})
    : this.t("genPromptRow"));
  var chips = h("span", {"class": "ax-gen-chips"}, box);
  gen.forEach(function (q, i) {
    h("span", {"class": "ax-gen-tok" + (q === s.query ? " ax-tsel" : ""), "data-i": q,
      title: q}, chips, m.tokens[q]);
  });
  chips.addEventListener("click", function (e) {
    var t = e.target.closest(".ax-gen-tok");
    if (t) self.setQuery(+t.getAttribute("data-i"));
  });
  prev.disabled = at === 0;
  next.disabled = at === gen.length - 1;
  prev.addEventListener("click", function () {
    self.setQuery(at > 0 ? gen[at - 1] : gen[gen.length - 1]);
  });
  next.addEventListener("click", function () {
    self.setQuery(at >= 0 && at < gen.length - 1 ? gen[at + 1] : gen[0]);
  });
};
