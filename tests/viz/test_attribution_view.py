"""The explorer's attribution view: the payload a static page embeds (attnlab.viz.
attribution_payload) against AttentionTrace's own measures, its budget, and the page in a
real headless Chromium — each kind's row, the score of a clicked pair taken apart, both
languages, and what the page says when it lacks something. Each check also runs on a wrong
variant (a wrong head slice, the wrong RoPE pairing, another head's row) that must fail it."""

from __future__ import annotations

import math

import pytest
import torch
from explorer_traces import synthetic_trace

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz import attribution_payload as ap
from attnlab.viz.codec import decode_blob
from attnlab.viz.explorer import Explorer, ExplorerConfig

TOL = 1e-5  # every number the page shows equals AttentionTrace's within this


def value_trace(n: int = 40, *, layers: int = 2, heads: int = 4, kv_heads: int = 2, d: int = 12,
                rotary: int = 8, seed: int = 3, **shape: object) -> AttentionTrace:
    """A q/k/v trace with each head's slice of an output projection (grouped-query heads,
    RoPE recorded as "half" pairing over ``rotary`` of ``d`` dimensions); scores of order 1."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(layers, heads, n, d, generator=g) * torch.linspace(0.6, 2.0, heads)[
        None, :, None, None]
    k = torch.randn(layers, kv_heads, n, d, generator=g)
    k[:, :, 0] += 1.5 * torch.randn(d, generator=g)  # a key many queries look at
    v = torch.randn(layers, kv_heads, n, d, generator=g)
    v[:, :, 0] *= 0.1  # ... which moves little
    out_proj = 0.5 * torch.randn(layers, heads, d, 20, generator=g)
    shape.setdefault("causal", True)
    shape.setdefault("scale", d ** -0.5)
    ss = ScoreShape(**shape)
    lse = torch.stack([row_logsumexp(q[i], k[i], ss) for i in range(layers)])
    freqs = [10000.0 ** (-2 * p / rotary) for p in range(rotary // 2)]
    meta = {"positional": {"kind": "rope", "pairing": "half", "rotary_dim": rotary,
                           "freqs": freqs, "base": 10000.0}}
    return AttentionTrace([f"t{i}" for i in range(n)], q=q, k=k, v=v, lse=lse,
                          out_proj=out_proj, shapes=ss, meta=meta, model="values")


@pytest.fixture(scope="module")
def vt() -> AttentionTrace:
    return value_trace()


def _attr(trace, **cfg) -> tuple[dict, dict]:
    tr = Explorer(trace, config=ExplorerConfig(**cfg)).payload()["traces"][0]
    return tr["attribution"], tr


def payload_errors(trace: AttentionTrace, a: dict, qk: dict | None) -> dict[str, float]:
    """The largest |what the page computes from payload ``a`` − AttentionTrace's|, per array:
    rollout rows, each stored head's weights and value-weighted rows (weight × key norm, as
    the page multiplies them), its q and k, and the score's bands of a few pairs (summed over
    each band's dimensions, as the page does)."""
    n, lk, err = trace.seq_len, trace.key_len, {}
    if a["rollout"] is not None:
        err["rollout"] = (decode_blob(a["rollout"]) - trace.rollout_rows(range(n))).abs().max()
    norms = decode_blob(a["norms"]) if a["norms"] is not None else None
    for (layer, h), wb, qb, kb in zip(a["heads"], a["weights"], a["q"], a["k"]):
        w = decode_blob(wb)
        err[f"weights {layer},{h}"] = (w - trace.weights_rows(layer, h, range(n))).abs().max()
        if norms is not None:
            want = trace.value_weighted_rows(layer, h, range(n)).double()
            err[f"value {layer},{h}"] = (w * norms[layer, h] - want).abs().max()
        if qb is None:  # the page reads them from the QK payload, which must hold them
            at = qk["heads"].index([layer, h])
            qs = decode_blob(qk["q"])[at]
            ks = decode_blob(qk["k"])[qk["k_of"][at]]
        else:
            qs, ks = decode_blob(qb), decode_blob(kb)
        for i, j in ((n - 1, 0), (n // 2, n // 3), (5, 5)):
            p = trace.score_parts(layer, h, i, j)
            got = [a2["dims"] for a2 in a["bands"]]
            assert got == [b["dims"] for b in p["bands"]]
            for b in a["bands"]:
                mine = sum(p["scale"] * float(qs[i, c]) * float(ks[j, c]) for c in b["dims"])
                want = next(x["value"] for x in p["bands"] if x["dims"] == b["dims"])
                err[f"band {layer},{h}"] = max(err.get(f"band {layer},{h}", 0.0),
                                               abs(mine - want))
        assert w.shape == (n, lk)
    return {k: float(v) for k, v in err.items()}


# -- the payload ------------------------------------------------------------------------------


def test_the_payload_gives_the_page_the_traces_numbers(vt):
    a, tr = _attr(vt)
    assert a["missing"] is None and a["heads"][0] == [0, 0] and len(a["heads"]) == 8
    assert a["value_missing"] is None and a["rollout_missing"] is None
    assert a["layout"]["pairing"] == "half" and a["layout"]["source"] == "trace"
    assert [b["rotated"] for b in a["bands"]] == [True] * 4 + [False] * 2  # 8 of 12 rotated
    err = payload_errors(vt, a, tr["qk"])
    assert len(err) == 1 + 3 * 8 and max(err.values()) <= TOL, err
    # the toy's q and k are all in the QK payload as float32: not stored twice
    assert tr["qk"]["dtype"] == "f32" and a["q"] == [None] * 8


def test_a_wrong_head_slice_in_the_payload_fails_the_check(vt, monkeypatch):
    """The check sees a payload built with the next head's slice of the output projection,
    and one whose weight maps are labelled with the wrong heads."""
    def wrong_norms(trace):
        nh = trace.num_heads
        return torch.stack([torch.stack([
            (trace.v[layer, trace.kv_head(h)].float() @ trace.out_proj[layer, (h + 1) % nh])
            .norm(dim=-1) for h in range(nh)]) for layer in range(trace.num_layers)])

    monkeypatch.setattr(ap, "key_norms", wrong_norms)
    a, tr = _attr(vt)
    err = payload_errors(vt, a, tr["qk"])
    assert min(v for k, v in err.items() if k.startswith("value")) > 100 * TOL
    assert max(v for k, v in err.items() if k.startswith("weights")) <= TOL
    monkeypatch.undo()
    a, tr = _attr(vt)
    a["weights"][1], a["weights"][2] = a["weights"][2], a["weights"][1]  # heads (0,1), (0,2)
    err = payload_errors(vt, a, tr["qk"])
    assert err["weights 0,1"] > 100 * TOL and err["weights 0,2"] > 100 * TOL
    assert err["weights 0,0"] <= TOL


def test_the_wrong_rope_pairing_fails_the_band_check(vt, monkeypatch):
    def interleaved(trace):
        p = trace.score_parts(0, 0, 0, 0, pairing="interleaved")
        return [{k: b[k] for k in ("dims", "rotated", "freq", "wavelength")}
                for b in p["bands"]], p["layout"]

    monkeypatch.setattr(ap, "_layout", interleaved)
    a, tr = _attr(vt)
    with pytest.raises(AssertionError):  # the bands are other dimensions than the trace's
        payload_errors(vt, a, tr["qk"])


def test_the_budget_bounds_what_is_embedded_and_keeps_the_first_head_first(vt):
    n, nl, nh, d = vt.seq_len, vt.num_layers, vt.num_heads, vt.head_dim
    rollout, norms, head = n * n * 4, nl * nh * n * 4, n * n * 4 + 2 * n * d * 4

    def raw(a):  # the float32 bytes the page receives, counted from the blobs themselves
        blobs = [a["rollout"], a["norms"], *a["weights"], *a["q"], *a["k"]]
        return sum(decode_blob(b).numel() * 4 for b in blobs if b is not None)

    # q/k left out of the QK payload: the attribution view keeps its own for its heads
    for budget, kept in ((rollout + norms + 3 * head, 3), (rollout + norms + 3 * head - 1, 2)):
        ex = Explorer(vt, layer=1, head=2,
                      config=ExplorerConfig(attribution_budget=budget, qk_budget=0))
        a = ex.payload()["traces"][0]["attribution"]
        assert a["heads"] == [[1, 2], [0, 0], [0, 1]][:kept]
        assert a["bytes"] == raw(a) == rollout + norms + kept * head <= budget
        assert all(x is not None for x in a["q"])
        assert max(payload_errors(vt, a, None).values()) <= TOL
    # the key norms and the first head come before the rollout (q/k: in the QK payload)
    a, _ = _attr(vt, attribution_budget=norms + n * n * 4)
    assert a["heads"] == [[0, 0]] and a["norms"] is not None and a["rollout"] is None
    assert a["rollout_missing"] == "budget" and a["bytes"] == norms + n * n * 4
    a, _ = _attr(vt, attribution_budget=rollout - 1)  # each part taken if it still fits
    assert a["rollout"] is None and a["rollout_missing"] == "budget" and a["heads"] == []
    assert a["norms"] is not None and a["bytes"] == norms
    a, _ = _attr(vt, attribution_budget=norms - 1)
    assert (a["rollout"], a["norms"], a["heads"], a["bytes"]) == (None, None, [], 0)
    assert (a["rollout_missing"], a["value_missing"]) == ("budget", "budget")
    # two traces on a page share the budget
    ex = Explorer([vt, vt], config=ExplorerConfig(attribution_budget=2 * (rollout + norms + head)))
    assert [len(t["attribution"]["heads"]) for t in ex.payload()["traces"]] == [1, 1]


def test_what_a_trace_lacks_is_named():
    w = torch.softmax(torch.randn(1, 2, 6, 6), -1)
    dense = _attr(AttentionTrace(list("abcdef"), weights=w))[0]
    assert (dense["value_missing"], dense["parts_missing"], dense["rollout_missing"]) == \
        ("none", "none", None)
    assert dense["bands"] is None and len(dense["heads"]) == 2
    merged = value_trace(8).merge_tokens([[0], [1, 2], [3], [4, 5, 6, 7]])
    a = _attr(merged)[0]
    # merged pieces lack nothing: every kind by the merge's rule (tests/viz/test_merged_views)
    assert (a["value_missing"], a["parts_missing"], a["rollout_missing"]) == (None, None, None)
    assert torch.allclose(decode_blob(a["rollout"]), merged.rollout_rows(range(4)), atol=TOL)
    cross = AttentionTrace(list("xy"), key_tokens=list("abc"), stack="cross",
                           weights=torch.softmax(torch.randn(1, 1, 2, 3), -1))
    assert _attr(cross)[0]["rollout_missing"] == "cross"
    long = _attr(synthetic_trace(300, layers=1, heads=2, d=8))[0]
    assert long["missing"] == "long" and long["rollout"] is None and long["heads"] == []


def test_the_plain_functions_are_the_traces_and_refuse_bad_arguments(vt):
    rows = ap.attribution_rows(vt, "value", 1, None, "3,30", encoding="list")
    assert torch.equal(torch.tensor(rows["values"]), vt.value_weighted_rows(1, None, [3, 30]))
    assert rows["head"] is None and rows["rows"] == [3, 30]
    roll = ap.attribution_rows(vt, "rollout", rows="10:12")
    assert torch.equal(decode_blob(roll["values"]), vt.rollout_rows([10, 11]))
    assert roll["sums"] == vt.rollout_rows([10, 11]).sum(-1).tolist()
    assert roll["sums"] == pytest.approx([1.0, 1.0], abs=1e-6)  # float32 weights mixed
    p = ap.score_parts_json(vt, 1, 3, 30, 35)  # a later key: causal, hidden
    assert p["visible"] is False and p["shaped"] is None
    assert p["score"] == vt.score_parts(1, 3, 30, 35)["score"]
    assert math.isclose(p["band_sum"], p["score"], abs_tol=TOL)
    bad = [(dict(kind="values", layer=0, head=0), 422, "kind must be one of 'weights', "
            "'value', 'rollout', got 'values'"),
           (dict(kind="weights", layer=2, head=0), 422, r"layer must be an int in \[0, 2\), got 2"),
           (dict(kind="weights", layer=0), 422, "head is required for kind 'weights'"),
           (dict(kind="value"), 422, "layer is required for kind 'value'"),
           (dict(kind="rollout", layer=0), 422, "layer must be omitted for kind 'rollout'"),
           (dict(kind="weights", layer=0, head=0, rows="1:x"), 422, "rows must be an int"),
           (dict(kind="weights", layer=0, head=0, rows="5:2"), 422, "0 <= start < stop <= 40"),
           (dict(kind="weights", layer=0, head=0, rows=[0, 40]), 422, r"\[0, 40\), got 40"),
           (dict(kind="weights", layer=0, head=0, rows=list(range(40)) * 7), 413, "limit is 256")]
    for kw, status, msg in bad:
        with pytest.raises(ap.AttributionError, match=msg) as exc:
            ap.attribution_rows(vt, **kw)
        assert exc.value.status == status
    w = torch.softmax(torch.randn(1, 1, 3, 3), -1)
    with pytest.raises(ap.AttributionError, match="needs the trace's v and each head's output "
                                                  "projection") as exc:
        ap.attribution_rows(AttentionTrace(list("abc"), weights=w), "value", 0, 0)
    assert exc.value.status == 409
    with pytest.raises(ap.AttributionError, match=r"j must be an int in \[0, 40\), got -1"):
        ap.score_parts_json(vt, 0, 0, 1, -1)


# -- the page in Chromium -------------------------------------------------------------------

@pytest.fixture(scope="module")
def vt_page(vt, tmp_path_factory):
    return Explorer(vt, uid="ax-attr").save(tmp_path_factory.mktemp("attr") / "values.html")


def _open(page, path, layer=1, head=3, query=30):
    page.goto(path.as_uri())
    page.wait_for_selector(".attnlab-explorer[data-ready]", timeout=20_000)
    if page.get_attribute(".attnlab-explorer", "lang") != "en":
        page.click(".ax-lang")
    page.set_viewport_size({"width": 1300, "height": 1100})
    page.select_option(".ax-layer", str(layer))
    page.select_option(".ax-head", str(head))
    page.select_option(".ax-query", str(query))
    page.click(".ax-tab[data-view=attribution]")


def _cells(page) -> torch.Tensor:
    return torch.tensor(page.eval_on_selector_all(
        ".ax-attr-cell", "els => els.map(e => +e.dataset.value)"), dtype=torch.float64)


def _kind(page, kind, row):
    page.click(f".ax-attr-kind[data-kind={kind}]")
    page.wait_for_selector(f"svg[data-view=attribution][data-row='{row}']", timeout=20_000)


@pytest.mark.browser
def test_each_kinds_row_on_the_page_is_the_traces(page, vt, vt_page, artifacts_dir):
    _open(page, vt_page)
    rows = {"weights": vt.weights_rows(1, 3, [30])[0], "value":
            vt.value_weighted_rows(1, 3, [30])[0], "rollout": vt.rollout_rows([30])[0]}
    # the wrong rows each check must tell apart: another head's, the unweighted one, and
    # the last layer's mean weights instead of the product through every layer
    wrong = {"weights": vt.weights_rows(1, 2, [30])[0], "value": rows["weights"],
             "rollout": torch.stack([vt.weights_rows(1, h, [30])[0] for h in range(4)]).mean(0)}
    for kind in ("weights", "value", "rollout"):
        _kind(page, kind, f"{kind}:{'*:*' if kind == 'rollout' else '1:3'}:30")
        got, want = _cells(page), rows[kind].double()
        assert got.shape == (40,) and (got - want).abs().max() <= TOL, kind
        assert (got - wrong[kind].double()).abs().max() > 100 * TOL, kind
        tops = page.eval_on_selector_all(".ax-attr-top", "els => els.map(e => +e.dataset.key)")
        assert tops == torch.topk(want, 8).indices.tolist()
        page.screenshot(path=str(artifacts_dir / f"explorer-attribution-{kind}.png"))
    total = float(page.get_attribute(".ax-attr-sum", "data-value"))
    assert total == pytest.approx(float(rows["rollout"].sum()), abs=TOL)
    assert page.get_attribute(".attnlab-explorer", "data-attr-kind") == "rollout"


def _parts(page, pair):
    page.wait_for_selector(f".ax-parts[data-pair='{pair}']", timeout=20_000)
    bands = page.eval_on_selector_all(".ax-band", "els => els.map(e => +e.dataset.value)")
    parts = dict(page.eval_on_selector_all(
        ".ax-part", "els => els.map(e => [e.dataset.part, e.dataset.value])"))
    return bands, parts


@pytest.mark.browser
def test_a_clicked_pairs_score_is_taken_apart_as_the_trace_does(page, vt, vt_page,
                                                                 artifacts_dir):
    _open(page, vt_page)
    page.click(".ax-attr-cell[data-key='12']")
    bands, parts = _parts(page, "1:3:30:12")
    want = vt.score_parts(1, 3, 30, 12)
    assert bands == pytest.approx([b["value"] for b in want["bands"]], abs=1e-9)
    for name in ("score", "shaped", "q_norm", "k_norm", "cos", "angle_deg"):
        assert float(parts[name]) == pytest.approx(want[name], abs=TOL), name
    assert float(parts["band_sum"]) == pytest.approx(want["score"], abs=TOL)
    assert abs(want["score"]) > 0.1  # a score whose parts are worth reading
    # the same dimensions paired as GPT-J pairs them are other bands: the check sees it
    other = vt.score_parts(1, 3, 30, 12, pairing="interleaved")
    assert max(abs(a - b["value"]) for a, b in zip(bands, other["bands"])) > 100 * TOL
    page.screenshot(path=str(artifacts_dir / "explorer-attribution-parts.png"))
    # a key after the query: causal, so hidden from it; the parts still add up
    page.click(".ax-attr-cell[data-key='35']")
    bands, parts = _parts(page, "1:3:30:35")
    assert parts["shaped"] == "" and vt.score_parts(1, 3, 30, 35)["shaped"] == -math.inf
    assert "masked" in page.text_content(".ax-part[data-part=shaped]")
    assert sum(bands) == pytest.approx(vt.score_parts(1, 3, 30, 35)["score"], abs=TOL)
    # the chosen key stays chosen across kinds and queries
    _kind(page, "value", "value:1:3:30")
    page.select_option(".ax-query", "38")
    bands, _ = _parts(page, "1:3:38:35")
    assert bands == pytest.approx([b["value"] for b in vt.score_parts(1, 3, 38, 35)["bands"]],
                                  abs=1e-9)


@pytest.mark.browser
def test_the_view_speaks_both_languages(page, vt_page):
    _open(page, vt_page)
    page.click(".ax-attr-cell[data-key='7']")
    page.wait_for_selector(".ax-parts[data-pair='1:3:30:7']")
    assert page.text_content(".ax-attr-kind[data-kind=value]") == "value-weighted"
    page.click(".ax-lang")
    assert page.text_content(".ax-tab[data-view=attribution]") == "归因"
    kinds = page.eval_on_selector_all(".ax-attr-kind", "els => els.map(e => e.textContent)")
    assert kinds == ["注意力权重", "值加权", "注意力展开"]
    assert "注意力权重" in page.text_content(".ax-attr-def")
    assert page.text_content(".ax-parts-title").startswith("查询 30 → 键 7 的分数")
    assert "频带" in page.text_content("svg[data-view=attribution]")
    page.click(".ax-attr-kind[data-kind=rollout]")
    assert "整个模型" in page.text_content("svg[data-view=attribution]")
    page.click(".ax-lang")
    assert page.text_content(".ax-parts-title").startswith("score of query 30 → key 7")


@pytest.mark.browser
def test_the_page_says_what_it_lacks(page, vt, tmp_path):
    # a head beyond the budget (the rollout and the first head fit): named, with the kept
    n = vt.seq_len
    budget = n * n * 4 + vt.num_layers * vt.num_heads * n * 4 + n * n * 4
    path = Explorer(vt, uid="ax-b", config=ExplorerConfig(attribution_budget=budget)).save(
        tmp_path / "budget.html")
    _open(page, path, layer=0, head=0, query=20)
    page.wait_for_selector("svg[data-row='weights:0:0:20']")
    page.select_option(".ax-head", "1")
    assert page.get_attribute(".ax-attr-missing", "data-why") == "attrBudget"
    assert page.text_content(".ax-attr-missing").endswith("Heads kept: L0H0")
    _kind(page, "rollout", "rollout:*:*:20")  # the whole model's: still on the page
    assert (_cells(page) - vt.rollout_rows([20])[0]).abs().max() <= TOL
    # a trace of weights only: no value-weighted row, no decomposition; said in Chinese too
    w = torch.softmax(torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(0)), -1)
    dense = AttentionTrace(list("abcdef"), weights=w)
    _open(page, Explorer(dense, uid="ax-d").save(tmp_path / "dense.html"), 0, 1, 4)
    page.wait_for_selector("svg[data-row='weights:0:1:4']")
    assert (_cells(page) - w[0, 1, 4].double()).abs().max() <= TOL
    assert page.get_attribute(".ax-parts-missing", "data-why") == "noqkNone"
    page.click(".ax-attr-kind[data-kind=value]")
    assert "output projection (out_proj)" in page.text_content(".ax-attr-missing")
    page.click(".ax-lang")
    assert "输出投影" in page.text_content(".ax-attr-missing")
