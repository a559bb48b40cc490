"""The explorer's views of a merged trace (byte pieces merged into characters): the QK
endpoint and the static QK view show a merged query's pieces against the key pieces, each
labelled as a piece of its character; the attribution endpoints and view follow the
merge's rule (computed on the pieces, summed over a key character's pieces, averaged over
the query's); 409 only where q and k are absent. Every number is checked against the
unmerged trace with the rule written out, and a wrong rule (mean over the key pieces,
another piece's row) fails the same check. In Chromium: a static page, and a served page
of 8,192 SmolLM2 pieces of the course's Chinese half (the articles' length)."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.serve.trace_api import create_trace_app
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.api import answer, qk_data
from attnlab.viz.codec import decode_blob
from attnlab.viz.explorer import Explorer
from servers import serve_in_thread

LOCAL = "http://127.0.0.1"
TOL = 1e-5
GROUPS = [[0], [1, 2], [3, 4, 5], [6], [7, 8, 9, 10], [11], [12, 13]]
LABELS = ["a", "苹", "果", "b", "𝄞", "c", "吃"]
N = 14


@pytest.fixture(scope="module")
def merged() -> AttentionTrace:
    """q, k, v, out_proj of 14 pieces (2 layers, 4 query heads on 2 key heads, RoPE recorded),
    merged into 7 tokens of 1 to 4 pieces."""
    g = torch.Generator().manual_seed(7)
    nl, nh, d = 2, 4, 8
    q = torch.randn(nl, nh, N, d, generator=g) * torch.linspace(0.8, 2.2, nh)[None, :, None,
                                                                                None]
    k = torch.randn(nl, 2, N, d, generator=g)
    v = torch.randn(nl, 2, N, d, generator=g) * torch.linspace(0.2, 2.0, N)[None, None, :,
                                                                              None]
    out_proj = 0.5 * torch.randn(nl, nh, d, 12, generator=g)
    shape = ScoreShape(scale=d ** -0.5, causal=True)
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(nl)])
    meta = {"positional": {"kind": "rope", "pairing": "half", "rotary_dim": d,
                           "freqs": [10000.0 ** (-2 * p / d) for p in range(d // 2)],
                           "base": 10000.0}}
    tokens = [LABELS[a] for a, grp in enumerate(GROUPS) for _ in grp]
    pieces = AttentionTrace(tokens, q=q, k=k, v=v, lse=lse, out_proj=out_proj, shapes=shape,
                            meta=meta, model="pieces")
    return pieces.merge_tokens(GROUPS, LABELS)


@pytest.fixture(scope="module")
def client(merged):
    return TestClient(create_trace_app([merged]), base_url=LOCAL)


def _get(client, path, **params):
    r = client.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def merge_row(piece_rows: torch.Tensor, rule: str = "sum") -> torch.Tensor:
    """A merged row from the rows of a query's pieces (P, N pieces), the rule written out:
    each key token's pieces summed (or, the wrong rule, averaged), then the mean over P."""
    cols = [piece_rows[:, g].double().sum(1) if rule == "sum" else
            piece_rows[:, g].double().mean(1) for g in GROUPS]
    return torch.stack(cols, 1).mean(0)


# -- the QK endpoint ------------------------------------------------------------------------

def test_the_qk_endpoint_answers_a_merged_query_with_its_pieces_rows(client, merged):
    u = merged.unmerged()
    got = _get(client, "/api/traces/t1/qk", layer=1, head=3, query=2, top=4)  # 果: 3 pieces
    assert got["merged"] is True and got["key_len"] == N and "byte pieces" in got["rule"]
    assert [p["label"] for p in got["query_pieces"]] == [
        "果 (piece 1 of 3)", "果 (piece 2 of 3)", "果 (piece 3 of 3)"]
    assert [p["piece"] for p in got["query_pieces"]] == [3, 4, 5]
    dots, w = decode_blob(got["dots"]), decode_blob(got["weights"])
    allowed = decode_blob(got["allowed"])
    assert dots.shape == (3, N) and w.shape == (3, N)
    for r, p in enumerate((3, 4, 5)):  # each row is the pieces trace's own QK row
        one = qk_data(u, 1, 3, p)
        assert torch.equal(dots[r], decode_blob(one["dots"]))
        assert torch.equal(allowed[r], decode_blob(one["allowed"]))
        assert (w[r] - decode_blob(one["weights"])).abs().max() <= 1e-6
        # and what the page recomputes from q·k at the model's scale is the piece's row
        z = (u.scale * dots[r]).masked_fill(~allowed[r].bool(), -math.inf)
        assert (torch.softmax(z, -1) - u.weights_rows(1, 3, [p])[0].double()).abs().max() <= TOL
    # the keys shown: each piece row's strongest and the query's own pieces, labelled
    keys = got["keys"]
    for r in range(3):
        assert set(torch.topk(w[r], 4).indices.tolist()) <= set(keys)
    assert {3, 4, 5} <= set(keys)
    for j, lab in zip(keys, got["key_pieces"]):
        a = next(a for a, grp in enumerate(GROUPS) if j in grp)
        assert lab["piece"] == j and lab["token"] == a and lab["count"] == len(GROUPS[a])
        assert lab["index"] == GROUPS[a].index(j) + 1
    assert next(x for x in got["key_pieces"] if x["piece"] == 2)["label"] == "苹 (piece 2 of 2)"
    assert torch.equal(decode_blob(got["k"]), u.k[1, 1, keys])
    # the merged row the other views show: the rule over these very rows, not another
    mw = decode_blob(got["merged_weights"]).double()
    assert (mw - merge_row(w)).abs().max() <= TOL
    assert (mw - merge_row(w, "mean")).abs().max() > 0.05
    assert (mw - merged.weights_rows(1, 3, [2])[0].double()).abs().max() == 0.0


def test_409_only_where_q_and_k_are_absent():
    w = torch.softmax(torch.randn(1, 1, 5, 5, generator=torch.Generator().manual_seed(1)), -1)
    dense = AttentionTrace(list("abcde"), weights=w).merge_tokens([[0], [1, 2], [3, 4]])
    c = TestClient(create_trace_app([dense]), base_url=LOCAL)
    r = c.get("/api/traces/t1/qk", params={"layer": 0, "head": 0, "query": 1})
    assert r.status_code == 409 and "keeps none (made without qkv)" in r.json()["error"]
    assert "merged" not in r.json()["error"]


def test_the_attribution_endpoints_follow_the_rule(client, merged):
    u = merged.unmerged()
    got = _get(client, "/api/traces/t1/attribution/rows", kind="value", layer=1, rows="2,4",
               encoding="list")
    vals = torch.tensor(got["values"], dtype=torch.float64)
    assert torch.equal(vals.float(), merged.value_weighted_rows(1, None, [2, 4]))
    for r, a in enumerate((2, 4)):
        ref = merge_row(u.value_weighted_rows(1, None, GROUPS[a]))
        assert (vals[r] - ref).abs().max() <= TOL
        assert (vals[r] - merge_row(u.value_weighted_rows(1, None, GROUPS[a]), "mean")
                ).abs().max() > 0.05
    roll = _get(client, "/api/traces/t1/attribution/rows", kind="rollout", rows="6")
    r6 = decode_blob(roll["values"])[0]
    assert (r6 - merge_row(u.rollout_rows(GROUPS[6]))).abs().max() <= TOL
    assert roll["sums"][0] == pytest.approx(1.0, abs=1e-6)
    p = _get(client, "/api/traces/t1/score_parts", layer=1, head=3, i=1, j=1)  # 苹 → 苹
    assert p["merged"] is True and (p["query_token"], p["key_token"]) == ("苹", "苹")
    pairs = {(x["i"], x["j"]): x for x in p["pairs"]}
    assert sorted(pairs) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    hidden = pairs[(1, 2)]  # the first piece may not see the second: causal
    assert hidden["visible"] is False and hidden["shaped"] is None
    assert hidden["query_token"] == "苹 (piece 1 of 2)" and hidden["key_token"] == \
        "苹 (piece 2 of 2)"
    for (a, b), x in pairs.items():
        want = u.score_parts(1, 3, a, b)
        assert x["score"] == want["score"] and x["band_sum"] == pytest.approx(want["score"],
                                                                               abs=TOL)


def test_the_static_payload_holds_the_pieces_q_k_and_merged_value_rows(merged):
    tr = Explorer(merged).payload()["traces"][0]
    u = merged.unmerged()
    assert tr["qk_missing"] == "budget" and tr["qk"]["lq"] == N and tr["qk"]["lk"] == N
    assert tr["pieces"]["sizes"] == [len(g) for g in GROUPS] and tr["pieces"]["count"] == N
    at = tr["qk"]["heads"].index([1, 3])
    assert torch.equal(decode_blob(tr["qk"]["q"])[at], u.q[1, 3])
    a = tr["attribution"]
    assert a["norms"] is None and a["value_missing"] is None and a["parts_missing"] is None
    for (layer, h), vb in zip(a["heads"], a["value"]):
        want = merged.value_weighted_rows(layer, h, range(7))
        assert (decode_blob(vb) - want).abs().max() <= TOL
    assert (decode_blob(a["rollout"]) - merged.rollout_rows(range(7))).abs().max() <= TOL


# -- in Chromium ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def merged_page(merged, tmp_path_factory):
    return Explorer(merged, uid="ax-merged").save(tmp_path_factory.mktemp("merged") / "m.html")


def _open(page, url, layer, head, query, view):
    page.goto(url)
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    if page.get_attribute(".attnlab-explorer", "lang") != "en":
        page.click(".ax-lang")
    page.set_viewport_size({"width": 1300, "height": 1100})
    page.select_option(".ax-layer", str(layer))
    page.select_option(".ax-head", str(head))
    if page.get_attribute(".ax-query", "type") == "number":
        page.fill(".ax-query", str(query))
        page.dispatch_event(".ax-query", "change")
    else:
        page.select_option(".ax-query", str(query))
    page.click(f".ax-tab[data-view={view}]")


def _probs(page) -> dict[int, float]:
    return dict(page.eval_on_selector_all(
        ".ax-p", "els => els.map(e => [+e.dataset.key, +e.dataset.p])"))


@pytest.mark.browser
def test_the_static_qk_view_shows_a_characters_pieces(page, merged, merged_page, artifacts_dir):
    u = merged.unmerged()
    _open(page, merged_page.as_uri(), 1, 3, 2, "qk")
    page.wait_for_selector("svg[data-view=qk][data-piece='3']")
    buttons = page.eval_on_selector_all(".ax-piece", "els => els.map(e => e.textContent)")
    assert buttons == ["果 (piece 1 of 3)", "果 (piece 2 of 3)", "果 (piece 3 of 3)"]
    assert "q and k belong to the pieces" in page.text_content(".ax-qk-pieces")
    page.click(".ax-piece[data-piece='1']")
    page.wait_for_selector("svg[data-view=qk][data-piece='4']")
    got = _probs(page)
    assert sorted(got) == list(range(N))  # every key piece
    want = u.weights_rows(1, 3, [4])[0].double()
    assert max(abs(got[j] - float(want[j])) for j in got) <= TOL
    other = u.weights_rows(1, 3, [5])[0].double()  # the next piece's row is another
    assert max(abs(got[j] - float(other[j])) for j in got) > 0.01
    labels = page.eval_on_selector_all(".ax-qkrow .ax-tok", "els => els.map(e => e.textContent)")
    assert labels[1:3] == ["苹 (piece 1 of 2)", "苹 (piece 2 of 2)"] and labels[0] == "a"
    page.screenshot(path=str(artifacts_dir / "explorer-merged-qk.png"))
    page.click(".ax-lang")
    assert page.text_content(".ax-piece[data-piece='1']") == "果（3 个字节片段中的第 2 个）"
    assert "字节片段" in page.text_content(".ax-qk-pieces")
    page.click(".ax-lang")
    # the geometry view: one point per piece, labelled
    page.click(".ax-tab[data-view=geometry]")
    titles = page.eval_on_selector_all("svg[data-view=geometry] .ax-pt title",
                                       "els => els.map(e => e.textContent)")
    assert len(titles) == 2 * N and "q 4: 果 (piece 2 of 3)" in titles
    assert "k 10: 𝄞 (piece 4 of 4)" in titles


@pytest.mark.browser
def test_the_attribution_view_of_a_merged_trace(page, merged, merged_page, artifacts_dir):
    u = merged.unmerged()
    _open(page, merged_page.as_uri(), 1, 3, 4, "attribution")
    cells = lambda: [float(x) for x in page.eval_on_selector_all(  # noqa: E731
        ".ax-attr-cell", "els => els.map(e => e.dataset.value)")]
    for kind, want in (("value", merged.value_weighted_rows(1, 3, [4])[0]),
                       ("rollout", merged.rollout_rows([4])[0])):
        page.click(f".ax-attr-kind[data-kind={kind}]")
        row = f"{kind}:{'*:*' if kind == 'rollout' else '1:3'}:4"
        page.wait_for_selector(f"svg[data-view=attribution][data-row='{row}']")
        got = torch.tensor(cells(), dtype=torch.float64)
        assert got.shape == (7,) and (got - want.double()).abs().max() <= TOL, kind
    page.click(".ax-attr-cell[data-key='2']")  # 𝄞 (4 pieces) → 果 (3 pieces): 12 pairs
    page.wait_for_selector(".ax-parts[data-pair='1:3:4:2']")
    pairs = page.eval_on_selector_all(".ax-pair", "els => els.map(e => e.dataset.pieces)")
    assert pairs == [f"{a}:{b}" for a in (7, 8, 9, 10) for b in (3, 4, 5)]
    page.click(".ax-pair[data-index='5']")  # 𝄞 piece 2 → 果 piece 3
    page.wait_for_selector(".ax-parts[data-pieces='8:5']")
    bands = page.eval_on_selector_all(".ax-band", "els => els.map(e => +e.dataset.value)")
    want = u.score_parts(1, 3, 8, 5)
    assert bands == pytest.approx([b["value"] for b in want["bands"]], abs=1e-9)
    wrong = u.score_parts(1, 3, 9, 5)  # the next query piece's
    assert max(abs(a - b["value"]) for a, b in zip(bands, wrong["bands"])) > 1e-3
    assert "𝄞 (piece 2 of 4) → 果 (piece 3 of 3)" in page.text_content(
        ".ax-pair[data-index='5']")
    page.screenshot(path=str(artifacts_dir / "explorer-merged-attribution.png"))


# -- served, at the articles' length ----------------------------------------------------------

LONG = 8192


@pytest.fixture(scope="module")
def long_merged():
    """The Chinese half of attnlab's course, its first 8,192 SmolLM2 byte-level pieces,
    through a tiny random Llama with sharpened q and k (×20, so that its heads attend to a
    few keys), merged into characters as ``trace`` does by default."""
    from attnlab import models
    from attnlab.report.long_text import long_text
    from attnlab.tracing.tracer import trace
    from random_models import random_llama

    tok = models.load("smollm2").tokenizer
    text = long_text({}).text
    net = random_llama(layers=2, heads=4, kv_heads=2, hidden=32, vocab=tok.vocab_size,
                       positions=LONG, eager=False)
    with torch.no_grad():
        for block in net.model.layers:
            block.self_attn.q_proj.weight.mul_(20.0)
            block.self_attn.k_proj.weight.mul_(20.0)
    return trace(net, text[text.index("# 01 · 向量与投影"):], tokenizer=tok, truncate=True,
                 max_tokens=LONG)


@pytest.mark.browser
@pytest.mark.models
@pytest.mark.slow
def test_the_served_qk_view_of_a_merged_chinese_text_of_the_articles_length(page, long_merged,
                                                                             artifacts_dir):
    t, u = long_merged, long_merged.unmerged()
    assert u.seq_len == LONG and t.groups is not None
    a = [b for b, grp in enumerate(t.groups) if len(grp) == 3][-1]  # near the 8,192nd piece
    mine = t.groups[a]
    got = answer(t, "qk", {"layer": 1, "head": 2, "query": a})  # what the widget asks too
    assert got["merged"] and [p["piece"] for p in got["query_pieces"]] == mine
    with serve_in_thread(create_trace_app([t])) as url:
        _open(page, url + "/", 1, 2, a, "qk")
        page.wait_for_selector(f"svg[data-view=qk][data-piece='{mine[0]}']")
        assert page.locator(".ax-bad").count() == 0  # no refusal: the view is there
        page.click(".ax-piece[data-piece='1']")
        page.wait_for_selector(f"svg[data-view=qk][data-piece='{mine[1]}']")
        label = page.text_content(".ax-piece[data-piece='1']")
        assert label == f"{t.tokens[a]} (piece 2 of 3)"
        shown = _probs(page)
        exact = u.weights_rows(1, 2, [mine[1]])[0].double()
        assert set(torch.topk(exact, 20).indices.tolist()) <= set(shown)
        assert max(abs(p - float(exact[j])) for j, p in shown.items()) <= 1e-6
        first = u.weights_rows(1, 2, [mine[0]])[0].double()
        assert max(abs(p - float(first[j])) for j, p in shown.items()) > 1e-3
        rest = float(page.get_attribute(".ax-prest", "data-p"))
        # the rest is what the shown keys leave (in the page's own float64 sum), so it is the
        # exact rest to within the shown keys' errors together (each within 1e-6 above: the
        # page's scores are float32; 1e-6 for the sum held on some CPUs only)
        assert rest == pytest.approx(1 - sum(shown.values()), abs=1e-12)
        err = sum(abs(p - float(exact[j])) for j, p in shown.items())
        assert abs(rest - (1 - sum(float(exact[j]) for j in shown))) <= err + 1e-12
        assert rest > 0.05  # most keys are not shown: a rest of 0 would pass nothing above
        page.screenshot(path=str(artifacts_dir / "explorer-merged-served-qk.png"))
