"""The explorer's Python side: encoding, escaping, pooling, q/k storage, scores, files."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

import attnlab
from attnlab.trace import AttentionTrace, capture
from attnlab.viz.explorer import (
    Explorer,
    ExplorerConfig,
    _geometry,
    _softmax_rows,
    _top2,
    decode_blob,
    json_for_html,
    pool_weights,
)

TEXT = "The cat sat </script><b>on</b> the mat 注意力"


def toy_trace(text: str = TEXT, layers: int = 2, heads: int = 4, seed: int = 0) -> AttentionTrace:
    """A seeded character-level attnlab GPT, traced with q/k (causal)."""
    torch.manual_seed(seed)
    cfg = attnlab.GPTConfig(vocab_size=128, block_size=1024, n_layer=layers, n_head=heads,
                            n_embd=16 * heads)
    model = attnlab.GPT(cfg).eval()
    with torch.no_grad():
        for block in model.blocks:  # sharper than the default init: the scale knob matters
            for prm in block.attn.parameters():
                prm.mul_(6.0)
    ids = torch.tensor([[ord(c) % 128 for c in text]])
    with torch.no_grad(), capture(model) as cap:
        model(ids)
    return cap.trace(tokens=list(text), model="toy-gpt", text=text)


def _data(html: str, uid: str) -> dict:
    m = re.search(rf'<script type="application/json" id="{uid}-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_json_for_html_escapes_what_would_end_the_script():
    token = "</script><script>alert(1)</script>&\u2028"
    raw = json.dumps({"t": token}, ensure_ascii=False)
    assert "</script>" in raw  # the naive encoding would end the script element here
    safe = json_for_html({"t": token})
    assert "<" not in safe and ">" not in safe and "&" not in safe and "\u2028" not in safe
    assert json.loads(safe) == {"t": token}


def test_page_embeds_tokens_safely_and_round_trips_them():
    t = toy_trace()
    html = Explorer(t, uid="ax-fixed").to_html()
    # exactly our three script elements close; the token "</script>" does not close one
    assert html.count("</script>") == 3
    data = _data(html, "ax-fixed")
    assert data["traces"][0]["tokens"] == list(TEXT)
    assert "注" in data["traces"][0]["tokens"]  # whole characters, not bytes
    assert 'id="ax-fixed"' in html
    urls = set(re.findall(r"https?://[^\s\"')]+", html)) - {"http://www.w3.org/2000/svg"}
    assert not urls  # the SVG namespace is a name, not a request; nothing else is there


def test_weights_encoding_round_trips_within_quantization():
    t = toy_trace()
    small = Explorer(t).payload()["traces"][0]["weights"]
    assert small["dtype"] == "u16" and small["gz"]
    err16 = float((decode_blob(small) - t.weights.double()).abs().max())
    assert err16 <= 0.5 / 65535 + 1e-9
    big = Explorer(t, config=ExplorerConfig(weights_budget=0)).payload()["traces"][0]["weights"]
    assert big["dtype"] == "u8"
    err8 = float((decode_blob(big) - t.weights.double()).abs().max())
    assert 0.5 / 65535 < err8 <= 0.5 / 255 + 1e-9


def test_qk_float32_when_it_fits_else_float16_with_measured_error():
    t = toy_trace()
    qk = Explorer(t).payload()["traces"][0]["qk"]
    assert qk["dtype"] == "f32" and len(qk["heads"]) == t.num_layers * t.num_heads
    q = decode_blob(qk["q"]).float()
    assert torch.equal(q[0], t.q[0, 0])  # first stored head = the one the page opens on
    cfg = ExplorerConfig(qk_budget=3 * (t.seq_len * 16 * 2) * 2)  # three heads in float16
    qk16 = Explorer(t, config=cfg, layer=1, head=2).payload()["traces"][0]["qk"]
    assert qk16["dtype"] == "f16" and qk16["heads"][0] == [1, 2] and len(qk16["heads"]) == 3
    q16, k16 = decode_blob(qk16["q"]), decode_blob(qk16["k"])
    exact = _softmax_rows(t.q[1, 2], t.k[1, 2], t.scale, True)
    stored = _softmax_rows(q16[0], k16[0], t.scale, True)
    assert qk16["storage_error"][0] == pytest.approx(float((exact - stored).abs().max()))
    assert 0 < qk16["storage_error"][0] < 5e-3


def test_softmax_rows_is_what_the_model_computed():
    t = toy_trace()
    p = _softmax_rows(t.q.flatten(0, 1), t.k.flatten(0, 1), t.scale, True)
    assert float((p - t.weights.flatten(0, 1).double()).abs().max()) < 1e-5
    unscaled = _softmax_rows(t.q.flatten(0, 1), t.k.flatten(0, 1), 1.0, True)
    assert float((unscaled - t.weights.flatten(0, 1).double()).abs().max()) > 1e-3
    no_mask = _softmax_rows(t.q.flatten(0, 1), t.k.flatten(0, 1), t.scale, False)
    assert float((no_mask - t.weights.flatten(0, 1).double()).abs().max()) > 1e-3


def test_pooled_rows_still_sum_to_one_and_mean_pooling_would_not():
    w = torch.softmax(torch.randn(2, 3, 10, 10, generator=torch.Generator().manual_seed(0)), -1)
    rows = [(0, 4), (4, 8), (8, 10)]
    cols = [(0, 4), (4, 8), (8, 10)]
    p = pool_weights(w, rows, cols)
    assert p.shape == (2, 3, 3, 3)
    assert torch.allclose(p.sum(-1), torch.ones(2, 3, 3, dtype=torch.float64))
    assert float(p[0, 0, 1, 2]) == pytest.approx(float(w[0, 0, 4:8, 8:10].sum(-1).mean()))
    mean_both = torch.stack([torch.stack([w[..., a:b, c:d].mean((-1, -2)) for c, d in cols], -1)
                             for a, b in rows], -2)
    assert not torch.allclose(mean_both.sum(-1), torch.ones(2, 3, 3))


def test_long_input_is_pooled_and_stays_small():
    n = 600
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 2, n, 8, generator=g), torch.randn(2, 2, n, 8, generator=g)
    w = _softmax_rows(q.flatten(0, 1), k.flatten(0, 1), 8 ** -0.5, True).float().view(2, 2, n, n)
    t = AttentionTrace(tokens=[f"w{i}" for i in range(n)], weights=w, q=q, k=k, causal=True,
                       scale=8 ** -0.5)
    tr = Explorer(t).payload()["traces"][0]
    assert tr["pooled"] and len(tr["rows"]) == len(tr["cols"]) == 120  # blocks of 5 tokens
    assert tr["weights"]["shape"] == [2, 2, 120, 120]
    assert tr["row_blocks"][0] == [0, 5] and tr["rows"][0].startswith("0–4 w0")
    pooled = decode_blob(tr["weights"])
    assert torch.allclose(pooled.sum(-1), torch.ones(2, 2, 120, dtype=torch.float64), atol=1e-3)
    assert len(tr["tokens"]) == n  # the QK view still sees every token


def test_diagnostics_table_is_the_analysis_modules():
    from attnlab.analysis import diagnose

    t = toy_trace()
    table = Explorer(t).payload()["traces"][0]["diagnostics"]
    assert table["columns"][:2] == ["layer", "head"] and "entropy" in table["columns"]
    expected = diagnose(t).scores
    assert len(table["rows"]) == t.num_layers * t.num_heads
    for row in table["rows"]:
        for name, v in expected.items():
            assert row[name] == pytest.approx(float(v[row["layer"], row["head"]]), abs=1e-6)


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
    assert torch.allclose(_softmax_rows(q, k, 0.3, False), _softmax_rows(q, shifted, 0.3, False))


def test_explorer_arguments_are_checked():
    t = toy_trace()
    with pytest.raises(TypeError, match="AttentionTrace"):
        Explorer([t.weights])
    with pytest.raises(ValueError, match="layer, head"):
        Explorer(t, layer=5)
    with pytest.raises(ValueError, match="max_tokens"):
        ExplorerConfig(max_tokens=1)
    with pytest.raises(ValueError, match="view"):
        ExplorerConfig(view="nope")


def test_save_writes_a_whole_page_and_repr_html(tmp_path):
    t = toy_trace("ab c")
    path = Explorer(t, uid="ax-s").save(tmp_path / "x.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page
    assert [p.name for p in tmp_path.iterdir()] == ["x.html"]  # no temp file left behind
    with pytest.raises(ValueError, match=".html"):
        Explorer(t).save(tmp_path / "x.txt")
    frag = t._repr_html_()
    assert frag.startswith('<div class="attnlab-explorer"') and "<html" not in frag
    assert math.isclose(_data(frag, re.search(r'id="(ax-[0-9a-f]+)"', frag).group(1))
                        ["traces"][0]["scale"], t.scale)


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
    assert "--out must name an .html file" in capsys.readouterr().err
