"""The explorer's Python side: encoding, escaping, pooled maps and their size, q/k storage,
the QK view's arithmetic under every score shaping, and that no dense map is ever asked."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from explorer_traces import TEXT, dense_pooled, synthetic_trace, toy_trace

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.explorer import (
    Explorer,
    ExplorerConfig,
    _fit_pooled,
    _geometry,
    _top2,
    block_spans,
    coarsen_pooled,
    decode_blob,
    encode_blob,
    json_for_html,
    qk_row_probs,
)


def _data(html: str, uid: str) -> dict:
    m = re.search(rf'<script type="application/json" id="{uid}-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def toy() -> AttentionTrace:
    return toy_trace()


@pytest.fixture(scope="module")
def long_trace() -> AttentionTrace:
    return synthetic_trace(600, layers=2, heads=3, kv_heads=1)


@pytest.fixture
def no_dense(monkeypatch):
    """Make the dense ``trace.weights`` fail: the explorer must not need it."""
    def refuse(self):
        raise AssertionError("the dense trace.weights was used")

    monkeypatch.setattr(AttentionTrace, "weights", property(refuse))


def test_json_for_html_escapes_what_would_end_the_script():
    token = "</script><script>alert(1)</script>&\u2028"
    raw = json.dumps({"t": token}, ensure_ascii=False)
    assert "</script>" in raw  # the naive encoding would end the script element here
    safe = json_for_html({"t": token})
    assert "<" not in safe and ">" not in safe and "&" not in safe and "\u2028" not in safe
    assert json.loads(safe) == {"t": token}


def test_page_embeds_tokens_safely_and_round_trips_them(toy):
    html = Explorer(toy, uid="ax-fixed").to_html()
    # exactly our three script elements close; the token "</script>" does not close one
    assert html.count("</script>") == 3
    data = _data(html, "ax-fixed")
    assert data["format_version"] == 2
    assert data["traces"][0]["tokens"] == list(TEXT)
    assert "注" in data["traces"][0]["tokens"]  # whole characters, not bytes
    assert 'id="ax-fixed"' in html
    urls = set(re.findall(r"https?://[^\s\"')]+", html)) - {"http://www.w3.org/2000/svg"}
    assert not urls  # the SVG namespace is a name, not a request; nothing else is there


def test_short_input_maps_are_every_weight_within_quantization(toy, no_dense):
    small = Explorer(toy).payload()["traces"][0]
    assert not small["pooled"] and small["weights"]["dtype"] == "u16"
    dense = torch.stack([torch.stack([toy.head_weights(l_, h) for h in range(toy.num_heads)])
                         for l_ in range(toy.num_layers)]).double()
    err16 = float((decode_blob(small["weights"]) - dense).abs().max())
    assert err16 <= small["weights_error"] + 1e-9 == 0.5 / 65535 + 1e-9
    big = Explorer(toy, config=ExplorerConfig(weights_budget=0)).payload()["traces"][0]
    assert big["weights"]["dtype"] == "u8"
    err8 = float((decode_blob(big["weights"]) - dense).abs().max())
    assert 0.5 / 65535 < err8 <= 0.5 / 255 + 1e-9


def test_qk_float32_when_it_fits_else_float16_with_measured_error(toy):
    qk = Explorer(toy).payload()["traces"][0]["qk"]
    assert qk["dtype"] == "f32" and len(qk["heads"]) == toy.num_layers * toy.num_heads
    q = decode_blob(qk["q"]).float()
    assert torch.equal(q[0], toy.q[0, 0])  # first stored head = the one the page opens on
    d = toy.head_dim
    cfg = ExplorerConfig(qk_budget=3 * (toy.seq_len * d * 2) * 2)  # three heads in float16
    qk16 = Explorer(toy, config=cfg, layer=1, head=2).payload()["traces"][0]["qk"]
    assert qk16["dtype"] == "f16" and qk16["heads"][0] == [1, 2] and len(qk16["heads"]) == 3
    q16, k16 = decode_blob(qk16["q"]), decode_blob(qk16["k"])
    shape, rows, n = toy.score_shape(1), range(toy.seq_len), toy.seq_len
    exact = qk_row_probs(toy.q[1, 2], toy.k[1, toy.kv_head(2)], shape, rows=rows, lq=n, lk=n)
    stored = qk_row_probs(q16[0], k16[qk16["k_of"][0]], shape, rows=rows, lq=n, lk=n)
    assert qk16["storage_error"][0] == pytest.approx(float((exact - stored).abs().max()))
    assert 0 < qk16["storage_error"][0] < 5e-3


def test_grouped_query_heads_share_one_stored_k():
    t = synthetic_trace(20, layers=2, heads=4, kv_heads=2)
    qk = Explorer(t).payload()["traces"][0]["qk"]
    k = decode_blob(qk["k"]).float()
    assert k.shape[0] == 2 * 2  # (layers × kv heads), not one copy per query head
    for (layer, head), n in zip(qk["heads"], qk["k_of"]):
        assert torch.equal(k[n], t.k[layer, head // 2])
    wrong = [qk["kv_heads"].index([layer, head % 2]) for layer, head in qk["heads"]]
    assert any(not torch.equal(k[n], t.k[layer, head // 2])
               for (layer, head), n in zip(qk["heads"], wrong))


@pytest.mark.parametrize("rule", [
    {}, {"window": 3}, {"softcap": 2.0}, {"alibi_slopes": torch.tensor([0.5, 0.25, 0.1, 0.05])},
    {"key_mask": torch.tensor([True] * 9 + [False] * 3), "causal": False},
    {"sinks": torch.tensor([2.5, 12.0, 4.0, 0.5])},  # a learned logit per head
    {"sinks": torch.linspace(6, 12, 48).view(4, 12)},  # one per head and query row
])
def test_qk_view_arithmetic_is_the_traces_attention_under_each_shaping(rule):
    t = synthetic_trace(12, layers=1, heads=4, d=8, **rule)
    shape, rows = t.score_shape(0), list(range(12))
    for h in range(4):
        got = qk_row_probs(t.q[0, h], t.k[0, h], shape, rows=rows, lq=12, lk=12, head=h)
        assert torch.allclose(got, t.weights_rows(0, h, rows).double(), atol=1e-6)
    # the same arithmetic without the rule is not this attention
    if rule:
        plain = ScoreShape(scale=shape.scale, causal=True)
        bad = qk_row_probs(t.q[0, 1], t.k[0, 1], plain, rows=rows, lq=12, lk=12, head=1)
        assert (bad - t.weights_rows(0, 1, rows).double()).abs().max() > 1e-3
    unscaled = qk_row_probs(t.q[0, 1], t.k[0, 1], shape, rows=rows, lq=12, lk=12, head=1,
                            scale=1.0)
    assert (unscaled - t.weights_rows(0, 1, rows).double()).abs().max() > 1e-3


def test_page_carries_the_score_shaping_rules():
    slopes = torch.tensor([0.5, 0.25])
    t = synthetic_trace(10, layers=2, heads=2, window=4, softcap=3.0, alibi_slopes=slopes)
    sh = Explorer(t).payload()["traces"][0]["shape"]
    assert sh["causal"] and sh["window"] == [4, 4] and sh["softcap"] == [3.0, 3.0]
    assert sh["alibi"] == [0.5, 0.25] and sh["key_mask"] is None and not sh["bias"]


def test_block_spans_and_coarsening_are_exact_and_an_unweighted_mean_is_not(long_trace):
    t, n = long_trace, long_trace.seq_len
    assert block_spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    fine = torch.stack([t.pooled(0, h, 7) for h in range(3)])  # 86 blocks, the last of 5
    coarse, rows, cols = coarsen_pooled(fine, block_spans(n, 7), block_spans(n, 7), 4)
    assert rows == cols == block_spans(n, 28)
    for h in range(3):
        assert torch.allclose(coarse[h], t.pooled(0, h, 28), atol=1e-6)
        assert torch.allclose(coarse[h].double(), dense_pooled(t.head_weights(0, h), 28),
                              atol=1e-6)
    groups = [list(range(g, min(g + 4, 86))) for g in range(0, 86, 4)]
    unweighted = torch.stack([fine[:, g].mean(-2) for g in groups], -2)  # each block alike
    unweighted = torch.stack([unweighted[..., g].sum(-1) for g in groups], -1)
    assert (unweighted - coarse).abs().max() > 1e-3  # the short last block counts less


def test_long_input_is_pooled_every_head_and_equals_the_dense_definition(long_trace, no_dense):
    t = long_trace
    tr = Explorer(t).payload()["traces"][0]
    assert tr["pooled"] and tr["qk"] is None and tr["qk_missing"] == "long"
    b = tr["block"]
    assert b >= math.ceil(t.seq_len / 128) and len(tr["rows"]) == math.ceil(t.seq_len / b)
    assert tr["row_blocks"][0] == [0, b] and tr["rows"][0].startswith(f"0–{b - 1} w0")
    maps = decode_blob(tr["weights"])  # (L, H, R, C)
    assert tuple(maps.shape) == (2, 3, len(tr["rows"]), len(tr["cols"]))
    step = tr["weights_error"]
    sums = maps.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=step * maps.shape[-1])
    for layer, head in ((0, 0), (1, 2)):
        exact = dense_pooled(t.head_weights(layer, head), b)
        assert (maps[layer, head] - exact).abs().max() <= step + 1e-6
        # pooling by the mean over keys (not the sum) is not this map: rows would not sum to 1
        mean_keys = exact / torch.tensor([min(b, t.seq_len - c) for c in range(0, t.seq_len, b)])
        assert (maps[layer, head] - mean_keys).abs().max() > 0.1
    assert len(tr["tokens"]) == t.seq_len  # the token strip sees every token


def test_page_stays_in_its_budget_by_coarser_blocks():
    t = synthetic_trace(512, layers=2, heads=3, d=16)
    cfg = ExplorerConfig()
    maps = torch.stack([torch.stack([t.pooled(l_, h, 4) for h in range(3)]) for l_ in range(2)])
    got = []
    for room in (10**8, 40_000, 10_000, 2_000):
        blob, rows, _ = _fit_pooled(t, cfg, room, maps, 4)
        assert len(blob["b64"]) <= room
        got.append((rows[0][1], blob["dtype"]))
        sums = decode_blob(blob).sum(-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=0.5 / 255 * len(rows) + 1e-6)
    # uint16 at the finest blocks, then uint8, then coarser blocks as the room shrinks
    assert got[:3] == [(4, "u16"), (4, "u8"), (8, "u8")] and got[3][0] > 8
    # the whole page: under a budget it can meet, whatever that budget
    size = len(Explorer(t).to_page().encode("utf-8"))
    ex = Explorer(t, config=ExplorerConfig(page_budget=size - 50_000))
    assert len(ex.to_page().encode("utf-8")) <= size - 50_000
    assert ex.payload()["traces"][0]["block"] > 4


def test_diagnostics_table_is_the_analysis_modules(toy):
    from attnlab.analysis import diagnose

    table = Explorer(toy).payload()["traces"][0]["diagnostics"]
    assert table["columns"][:2] == ["layer", "head"] and "entropy" in table["columns"]
    expected = diagnose(toy).scores
    assert len(table["rows"]) == toy.num_layers * toy.num_heads
    for row in table["rows"]:
        for name, v in expected.items():
            assert row[name] == pytest.approx(float(v[row["layer"], row["head"]]), abs=1e-6)


def test_dense_weight_traces_still_explore(no_dense):
    w = torch.softmax(torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(0)), -1)
    t = AttentionTrace(tokens=list("abcde"), weights=w, causal=False)
    tr = Explorer(t).payload()["traces"][0]
    assert tr["qk"] is None and tr["qk_missing"] == "none"
    assert torch.allclose(decode_blob(tr["weights"]), w.double(), atol=1e-5)


def test_blob_encoding_round_trips_each_dtype():
    x = torch.tensor([[0.0, 0.25], [0.5, 1.0]])
    for dtype, tol in (("u16", 0.5 / 65535), ("u8", 0.5 / 255), ("f16", 1e-3), ("f32", 0),
                       ("f64", 0)):
        for gz in (False, True):
            assert torch.allclose(decode_blob(encode_blob(x, dtype, gz=gz)), x.double(),
                                  atol=tol)
    assert decode_blob(encode_blob(torch.tensor([True, False]), "b8")).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="dtype must be one of"):
        encode_blob(x, "u4")


def test_geometry_trick_keeps_dot_products_and_pca_is_right():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 50, 8, generator=g, dtype=torch.float64) * torch.linspace(3, .2, 8,
                                                                              dtype=torch.float64)
    c = x.transpose(1, 2) @ x
    v = _top2(c)
    _, u = torch.linalg.eigh(c)
    overlap = (v.transpose(1, 2) @ u[..., -2:]).abs()  # (3, 2, 2): a permutation matrix
    assert torch.allclose(overlap.sum(-1), torch.ones(3, 2, dtype=torch.float64), atol=1e-6)
    assert float(overlap.amax(-1).min()) > 1 - 1e-6
    wrong = _top2(c, squarings=0, iters=1)  # one step of power iteration is not converged
    assert float((wrong.transpose(1, 2) @ u[..., -2:]).abs().amax(-1).min()) < 1 - 1e-3
    q, k = torch.randn(1, 20, 8, generator=g) + 3, torch.randn(1, 30, 8, generator=g) - 2
    xy = _geometry(q, k)
    assert xy.shape == (1, 50, 2) and float(xy.abs().max()) == pytest.approx(1.0)
    # the translation the picture uses leaves each query's softmax over keys unchanged
    shifted = k - k.mean(1, keepdim=True) + q.mean(1, keepdim=True)
    shape = ScoreShape(scale=0.3)
    rows = range(20)
    assert torch.allclose(qk_row_probs(q[0], k[0], shape, rows=rows, lq=20, lk=30),
                          qk_row_probs(q[0], shifted[0], shape, rows=rows, lq=20, lk=30))


def test_explorer_arguments_are_checked(toy):
    with pytest.raises(TypeError, match="AttentionTrace"):
        Explorer([toy.q])
    with pytest.raises(ValueError, match="layer, head"):
        Explorer(toy, layer=5)
    with pytest.raises(ValueError, match="api must hold one URL prefix"):
        Explorer(toy, api=["a", "b"])
    with pytest.raises(ValueError, match="max_tokens"):
        ExplorerConfig(max_tokens=1)
    with pytest.raises(ValueError, match="page_budget"):
        ExplorerConfig(page_budget=-1)
    with pytest.raises(ValueError, match="view"):
        ExplorerConfig(view="nope")
    with pytest.raises(ValueError, match="factor must be a positive int"):
        coarsen_pooled(torch.zeros(2, 2), [(0, 1), (1, 2)], [(0, 1), (1, 2)], 0)


def test_save_writes_a_whole_page_and_repr_html(tmp_path):
    t = toy_trace("ab c")
    path = Explorer(t, uid="ax-s").save(tmp_path / "x.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page
    assert "connect-src" not in page  # a saved page may not talk to anything
    assert [p.name for p in tmp_path.iterdir()] == ["x.html"]  # no temp file left behind
    with pytest.raises(ValueError, match=".html"):
        Explorer(t).save(tmp_path / "x.txt")
    frag = Explorer(t)._repr_html_()  # what Jupyter shows
    assert frag.startswith('<div class="attnlab-explorer"') and "<html" not in frag
    uid = re.search(r'id="(ax-[0-9a-f]+)"', frag).group(1)
    assert math.isclose(_data(frag, uid)["traces"][0]["scale"][0], t.score_shape(0).scale)


def test_row_logsumexp_helper_agrees_with_the_trace():
    """The synthetic traces above are real traces: rows sum to 1, lse consistent."""
    t = synthetic_trace(30, layers=1, heads=2)
    rows = t.weights_rows(0, 1, range(30))
    assert torch.allclose(rows.sum(-1), torch.ones(30), atol=1e-5)
    lse = row_logsumexp(t.q[0], t.k[0], t.score_shape(0))
    assert torch.equal(lse, t.lse[0])


@pytest.mark.models
@pytest.mark.filterwarnings("ignore:.*unknown to minilm")
def test_explore_command_writes_the_page(tmp_path, capsys):
    pytest.importorskip("transformers")
    from attnlab.cli import main

    out = tmp_path / "cat.html"
    assert main(["explore", "--model", "minilm", "--text", "The cat sat.", "--text2", "注意力",
                 "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["path"] == str(out) and info["tokens"] == [6, 5]
    assert info["bytes"] == out.stat().st_size
    data = _data(out.read_text(encoding="utf-8"), re.search(
        r'id="(ax-[0-9a-f]+)"', out.read_text(encoding="utf-8")).group(1))
    assert [t["tokens"] for t in data["traces"]][1] == ["[CLS]", "注", "意", "力", "[SEP]"]
    assert main(["explore", "--model", "minilm", "--text", "x", "--out", str(tmp_path / "a.txt")]) \
        == 2
    assert "--out must name a .html or .htm file" in capsys.readouterr().err
