// -- export ------------------------------------------------------------------------
import { Explorer, SVGNS, h } from "./core.js";
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
