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


def page_weights(a: dict, tr: dict) -> list[torch.Tensor]:
    """Each kept head's weights (Lq, Lk) as the page computes them from the payload: its
    float32 weights, or the page's map refined, ``(W + (F − ½)·span)·step`` (W and F the
    stored integers over their maximum, as ``decode_blob`` gives them)."""
    maps = decode_blob(tr["weights"])
    step = {"u16": 1 / 65535, "u8": 1 / 255}[tr["weights"]["dtype"]]
    out = []
    for (layer, h), wb, fb in zip(a["heads"], a["weights"], a["fine"]):
        out.append(decode_blob(wb) if wb is not None else
                   maps[layer, h] + (decode_blob(fb) - 0.5) * a["fine_span"] * step)
    return out


def value_errors(trace: AttentionTrace, a: dict, tr: dict) -> dict[tuple[int, int], float]:
    """Per kept head, the largest |value-weighted row the page computes (its weight × the key
    norm, in float64) − ``value_weighted_rows``| over every query."""
    norms, n = decode_blob(a["norms"]), trace.seq_len
    return {(layer, h): float((w * norms[layer, h]
                               - trace.value_weighted_rows(layer, h, range(n)).double())
                              .abs().max())
            for (layer, h), w in zip(a["heads"], page_weights(a, tr))}


def payload_errors(trace: AttentionTrace, a: dict, tr: dict) -> dict[str, float]:
    """The largest |what the page computes from payload ``a`` − AttentionTrace's|, per array:
    rollout rows, each stored head's weights (the page's map refined) and value-weighted
    rows (weight × key norm, as the page multiplies them), its q and k, and the score's
    bands of a few pairs (summed over each band's dimensions, as the page does)."""
    n, lk, err, qk = trace.seq_len, trace.key_len, {}, tr["qk"]
    if a["rollout"] is not None:
        err["rollout"] = (decode_blob(a["rollout"]) - trace.rollout_rows(range(n))).abs().max()
    norms = decode_blob(a["norms"]) if a["norms"] is not None else None
    for (layer, h), w, qb, kb in zip(a["heads"], page_weights(a, tr), a["q"], a["k"]):
        err[f"weights {layer},{h}"] = (w - trace.weights_rows(layer, h, range(n))).abs().max()
        if norms is not None:
            want = trace.value_weighted_rows(layer, h, range(n)).double()
            err[f"value {layer},{h}"] = (w * norms[layer, h] - want).abs().max()
        if qb is None and (qk is None or [layer, h] not in qk["heads"]
                           or qk["dtype"] != "f32"):
            assert w.shape == (n, lk)
            continue  # no q and k in float32 on the page: the parts come from the server
        if qb is None:  # the page reads them from the QK payload
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
    err = payload_errors(vt, a, tr)
    assert len(err) == 1 + 3 * 8 and max(err.values()) <= TOL, err
    # the toy's q and k are all in the QK payload as float32: not stored twice
    assert tr["qk"]["dtype"] == "f32" and a["q"] == [None] * 8


def test_a_wrong_head_slice_in_the_payload_fails_the_check(vt, monkeypatch):
    """The check sees a payload built with the next head's slice of the output projection,
    and the page's arithmetic done wrong: without the norms, without the refinement of the
    maps, with another head's refinement or another head's map."""
    def wrong_norms(trace):
        nh = trace.num_heads
        return torch.stack([torch.stack([
            (trace.v[layer, trace.kv_head(h)].float() @ trace.out_proj[layer, (h + 1) % nh])
            .norm(dim=-1) for h in range(nh)]) for layer in range(trace.num_layers)])

    monkeypatch.setattr(ap, "key_norms", wrong_norms)
    a, tr = _attr(vt)
    err = payload_errors(vt, a, tr)
    assert min(v for k, v in err.items() if k.startswith("value")) > 100 * TOL
    assert max(v for k, v in err.items() if k.startswith("weights")) <= TOL
    monkeypatch.undo()
    a, tr = _attr(vt)
    assert max(value_errors(vt, a, tr).values()) <= TOL  # the right arithmetic
    n, maps = vt.seq_len, decode_blob(tr["weights"])
    norms = decode_blob(a["norms"])

    def worst(rows):  # the largest |row − value_weighted_rows| over the kept heads
        return max(float((rows(layer, h) - vt.value_weighted_rows(layer, h, range(n))
                          .double()).abs().max()) for layer, h in a["heads"])

    exact = dict(zip(map(tuple, a["heads"]), page_weights(a, tr)))
    assert worst(lambda layer, h: exact[layer, h]) > 100 * TOL  # no norms: the weights
    assert worst(lambda layer, h: maps[layer, h] * norms[layer, h]) > 10 * TOL  # map alone
    assert worst(lambda layer, h: exact[layer, (h + 1) % 4] * norms[layer, h]) > 100 * TOL
    swapped = dict(a, fine=[a["fine"][0], a["fine"][2], a["fine"][1], *a["fine"][3:]])
    err = value_errors(vt, swapped, tr)  # heads (0,1) and (0,2) refined by each other's
    assert err[0, 1] > 10 * TOL and err[0, 2] > 10 * TOL and err[0, 0] <= TOL


def test_the_wrong_rope_pairing_fails_the_band_check(vt, monkeypatch):
    def interleaved(trace):
        p = trace.score_parts(0, 0, 0, 0, pairing="interleaved")
        return [{k: b[k] for k in ("dims", "rotated", "freq", "wavelength")}
                for b in p["bands"]], p["layout"]

    monkeypatch.setattr(ap, "_layout", interleaved)
    a, tr = _attr(vt)
    with pytest.raises(AssertionError):  # the bands are other dimensions than the trace's
        payload_errors(vt, a, tr)


def test_the_budget_bounds_what_is_embedded_and_keeps_the_first_head_first(vt):
    n, nl, nh, d = vt.seq_len, vt.num_layers, vt.num_heads, vt.head_dim
    rollout, norms, qk = n * n * 4, nl * nh * n * 4, 2 * n * d * 4
    fine16, fine8 = n * n * 2, n * n  # a head's refinement of its u16 map: 32 or 24 bits

    def raw(a):  # the bytes the page receives, counted from the blobs themselves
        size = {"u8": 1, "u16": 2, "f32": 4}
        blobs = [a["rollout"], a["norms"], *a["weights"], *a["fine"], *a["q"], *a["k"]]
        return sum(decode_blob(b).numel() * size[b["dtype"]] for b in blobs if b is not None)

    # q/k left out of the QK payload: the attribution view keeps its own, after every
    # head's rows; each head's exact weights cost 2 bytes a weight where all fit, else 1
    every = norms + rollout + qk + nl * nh * fine16
    for budget, dtype, with_qk in ((every + 3 * qk, "u16", 4), (every, "u16", 1),
                                   (every - 1, "u8", 1 + (nl * nh * (fine16 - fine8) - 1) // qk)):
        ex = Explorer(vt, layer=1, head=2,
                      config=ExplorerConfig(attribution_budget=budget, qk_budget=0))
        tr = ex.payload()["traces"][0]
        a = tr["attribution"]
        assert a["heads"][:3] == [[1, 2], [0, 0], [0, 1]] and len(a["heads"]) == nl * nh
        assert {b["dtype"] for b in a["fine"]} == {dtype} and a["weights"] == [None] * 8
        assert sum(x is not None for x in a["q"]) == with_qk and a["q"][0] is not None
        assert a["bytes"] == raw(a) <= budget
        err = payload_errors(vt, a, tr)
        assert max(err.values()) <= TOL
        # 32 bits a weight: the page's weights are the trace's to 1.2e-10; 24 bits: 3e-8
        assert max(v for k, v in err.items() if k.startswith("weights")) <= (
            1.2e-10 if dtype == "u16" else 3.1e-8)
    # a small budget: the key norms, the first head, the rollout, then the other heads
    ex = Explorer(vt, layer=1, head=2, config=ExplorerConfig(
        attribution_budget=norms + qk + rollout + 3 * fine8, qk_budget=0))
    a = ex.payload()["traces"][0]["attribution"]
    assert a["heads"] == [[1, 2], [0, 0], [0, 1]] and a["q"][1:] == [None, None]
    assert a["bytes"] == raw(a) == norms + qk + rollout + 3 * fine8
    # the key norms and the first head come before the rollout (q/k: in the QK payload)
    a, _ = _attr(vt, attribution_budget=norms + fine8)
    assert a["heads"] == [[0, 0]] and a["norms"] is not None and a["rollout"] is None
    assert a["rollout_missing"] == "budget" and a["bytes"] == norms + fine8
    a, _ = _attr(vt, attribution_budget=rollout - 1)  # each part taken if it still fits
    assert a["rollout"] is None and a["rollout_missing"] == "budget"
    assert len(a["heads"]) == (rollout - 1 - norms) // fine8 and a["norms"] is not None
    a, _ = _attr(vt, attribution_budget=norms - 1)
    assert (a["rollout"], a["norms"], a["heads"], a["bytes"]) == (None, None, [], 0)
    assert (a["rollout_missing"], a["value_missing"]) == ("budget", "budget")
    # two traces on a page share the budget
    ex = Explorer([vt, vt], config=ExplorerConfig(attribution_budget=2 * (rollout + norms
                                                                          + 2 * fine8)))
    assert [len(t["attribution"]["heads"]) for t in ex.payload()["traces"]] == [2, 2]


def smollm2_like(n: int = 23) -> AttentionTrace:
    """SmolLM2-135M's shape (30 layers × 9 heads, 3 key/value heads, d = 64, all 64
    dimensions rotated) on a short text: 270 heads, where a float32 copy of each head's
    weights and q/k kept 48 of them within the budget."""
    return value_trace(n, layers=30, heads=9, kv_heads=3, d=64, rotary=64, seed=5)


@pytest.fixture(scope="module")
def small_lm() -> AttentionTrace:
    return smollm2_like()


def test_every_head_of_a_short_text_has_its_exact_rows_on_the_page(small_lm):
    a, tr = _attr(small_lm)
    heads = [[layer, h] for layer in range(30) for h in range(9)]
    assert sorted(a["heads"]) == heads and a["bytes"] <= 700_000
    assert tr["qk"]["dtype"] == "f16"  # q and k not in float32: the view keeps its own ...
    assert 30 <= sum(q is not None for q in a["q"]) < 270  # ... for as many heads as fit
    err = value_errors(small_lm, a, tr)
    assert len(err) == 270 and max(err.values()) <= TOL, max(err.values())
    norms = decode_blob(a["norms"])
    assert float(norms.max()) > 1  # norms that would magnify an error of the map
    err = payload_errors(small_lm, a, tr)
    assert max(err.values()) <= TOL and err["rollout"] <= 1e-6


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
    page.wait_for_selector(".attnlab-explorer[data-ready]")
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
    page.wait_for_selector(f"svg[data-view=attribution][data-row='{row}']")


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
    page.wait_for_selector(f".ax-parts[data-pair='{pair}']")
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
def test_every_heads_value_row_on_the_page_is_the_traces(page, small_lm, tmp_path):
    """Layer 18, head 6 of a SmolLM2-shaped trace (270 heads), a head the float32 copies
    left out: the page's value-weighted row is the trace's, and not another head's, nor
    the row of the page's maps without their refinement."""
    ex = Explorer(small_lm, uid="ax-lm")
    path = ex.save(tmp_path / "lm.html")
    _open(page, path, layer=18, head=6, query=20)
    _kind(page, "value", "value:18:6:20")
    got = _cells(page)
    want = small_lm.value_weighted_rows(18, 6, [20])[0].double()
    assert got.shape == (23,) and (got - want).abs().max() <= TOL
    tr = ex.payload()["traces"][0]
    norms = decode_blob(tr["attribution"]["norms"])
    coarse = decode_blob(tr["weights"])[18, 6, 20] * norms[18, 6]
    assert (coarse - want).abs().max() > TOL  # the map alone is not the trace's row
    other = small_lm.value_weighted_rows(18, 5, [20])[0].double()
    assert (got - other).abs().max() > 100 * TOL
    _kind(page, "weights", "weights:18:6:20")
    # the head's weights, all rows at once (what the payload refined its map to), within a
    # step of the refinement (a u16 refinement of a u16 map: 1.02 / 65535² ≈ 2.4e-10; its
    # rounding is half of that)
    shown = _cells(page)
    assert (shown - small_lm.head_weights(18, 6)[20].double()).abs().max() <= 1.02 / 65535**2
    # and the trace's one row to float32 rounding: a row alone and all rows at once round
    # their scores differently (up to 5.7e-6 of a weight over this trace's 270 heads and 23
    # rows, measured on an AMD EPYC; the same 1e-7 absolute was met on some CPUs only)
    one = small_lm.weights_rows(18, 6, [20])[0].double()
    assert torch.allclose(shown, one, rtol=2e-5, atol=1e-9)
    assert not torch.allclose(shown, small_lm.weights_rows(18, 6, [19])[0].double(),
                              rtol=2e-5, atol=1e-9)  # another row is not within it
    assert page.query_selector(".ax-attr-missing") is None


def _said(page, why):
    """The message of the view (the row's or the score's), checked for plain words: no
    configuration name, and the way to the exact view named."""
    sel = ".ax-attr-missing" if why != "attrPartsBudget" else ".ax-parts-missing"
    page.wait_for_selector(f"{sel}[data-why={why}]")
    text = page.text_content(sel)
    assert "ExplorerConfig" not in text and "_budget" not in text
    assert "attnlab serve --trace FILE" in text
    return text


@pytest.mark.browser
def test_the_page_says_what_it_lacks(page, vt, tmp_path):
    # a head beyond the budget (the key norms, the first head and the rollout fit)
    n = vt.seq_len
    budget = vt.num_layers * vt.num_heads * n * 4 + n * n + n * n * 4
    path = Explorer(vt, uid="ax-b", config=ExplorerConfig(attribution_budget=budget)).save(
        tmp_path / "budget.html")
    _open(page, path, layer=0, head=0, query=20)
    page.wait_for_selector("svg[data-row='weights:0:0:20']")
    page.select_option(".ax-head", "1")
    assert _said(page, "attrBudget") == (
        "To stay small, this page holds the exact weights of 1 of the 8 heads of this text "
        "(40 tokens): L0H0. For this head, open the trace live: `attnlab serve --trace FILE` "
        "(or the Jupyter widget).")
    page.click(".ax-lang")
    assert "8 个头中 1 个头的精确权重：L0H0" in _said(page, "attrBudget")
    page.click(".ax-lang")
    _kind(page, "rollout", "rollout:*:*:20")  # the whole model's: still on the page
    assert (_cells(page) - vt.rollout_rows([20])[0]).abs().max() <= TOL
    # every head's rows, q and k of the first head only (none in float32 in the QK payload)
    every = vt.num_layers * vt.num_heads * n * (4 + 2 * n) + n * n * 4 + 2 * n * 12 * 4
    path = Explorer(vt, uid="ax-p", config=ExplorerConfig(attribution_budget=every,
                                                          qk_budget=0)).save(tmp_path / "p.html")
    _open(page, path, layer=0, head=1, query=20)
    _kind(page, "value", "value:0:1:20")
    assert (_cells(page) - vt.value_weighted_rows(0, 1, [20])[0]).abs().max() <= TOL
    assert _said(page, "attrPartsBudget").startswith(
        "No decomposition: taking a score apart needs the head's q and k in full precision; "
        "to stay small, this page holds them for 1 of the 8 heads: L0H0.")
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


@pytest.mark.browser
def test_a_long_text_says_in_plain_words_how_to_see_every_head(page, tmp_path):
    long = synthetic_trace(300, layers=1, heads=2, d=8)
    path = Explorer(long, uid="ax-long").save(tmp_path / "long.html")
    page.goto(path.as_uri())
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    if page.get_attribute(".attnlab-explorer", "lang") != "en":
        page.click(".ax-lang")
    page.click(".ax-tab[data-view=attribution]")
    assert _said(page, "attrLong") == (
        "This text is long (300 tokens): the page keeps pooled maps, not the exact weights "
        "this view needs. For every head exactly, open the trace live: `attnlab serve "
        "--trace FILE` (or the Jupyter widget).")
    page.click(".ax-lang")
    text = _said(page, "attrLong")
    assert text.startswith("这段文本较长（300 个词元）") and "Jupyter 小部件" in text


def test_the_views_messages_name_no_setting_in_either_language():
    import json
    from pathlib import Path

    import attnlab.viz

    words = json.loads((Path(attnlab.viz.__file__).parent / "static" / "explorer" /
                        "i18n.json").read_text(encoding="utf-8"))["words"]
    keys = ["attrLong", "attrBudget", "attrRolloutBudget", "attrNormsBudget",
            "attrPartsBudget"]
    for key in keys:
        en, zh = words[key]
        for text in (en, zh):
            assert "ExplorerConfig" not in text and "budget" not in text, (key, text)
            assert "`attnlab serve --trace FILE`" in text and "Jupyter" in text, (key, text)
        assert "{n}" in en and "{n}" in zh or key == "attrPartsBudget", key
        assert any("\u4e00" <= c <= "\u9fff" for c in zh), key
