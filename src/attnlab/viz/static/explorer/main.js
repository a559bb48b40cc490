/* The last part: mounting an explorer on a page, and the one global it defines:
 * window.AttnlabExplorer = {mount(uid), mountData(root, payload, transport), scoreRow(shape,
 * o), softmaxRow(src, scale, temp), httpTransport, commTransport(model)}; scoreRow and
 * softmaxRow are core.js's score shaping of one query row (from the page's own q and k;
 * from the server's answer), for tests against Python; the transports are where a
 * mounted explorer asks for exact data (default HTTP; the Jupyter widget's comm). */
import { Explorer, commTransport, httpTransport, scoreRow, softmaxRow } from "./core.js";
function mount(uid) {
  var root = document.getElementById(uid), src = document.getElementById(uid + "-data");
  if (!root || !src || root.__attnlab) return root && root.__attnlab;
  var data = JSON.parse(src.textContent);
  return mountData(root, data);
}
function mountData(root, data, transport) {
  var ex = new Explorer(root, data, transport);
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
window.AttnlabExplorer = {mount: mount, mountData: mountData, scoreRow: scoreRow,
  softmaxRow: softmaxRow, httpTransport: httpTransport, commTransport: commTransport};
