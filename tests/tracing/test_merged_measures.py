"""Every measure of a merged trace (byte pieces merged into characters) against the dense
reference computed from the unmerged pieces with the merge's rule written out —
``M'[a, b] = mean_{i in a} sum_{j in b} M[i, j]`` — and against a wrong rule (mean over the
key pieces; the product of merged layers for rollout; a merged weight times a merged norm
for value-weighted rows) that must fail the same check. Then the same on a Chinese text of
the articles' length: attnlab's course, Chinese half, 8,192 SmolLM2 byte-level pieces
traced through a tiny random Llama."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.analysis.eviction import key_scores
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.attribution import band_lift, rollout

TOL = 1e-5
GROUPS = [[0], [1, 2], [3, 4, 5], [6], [7, 8, 9, 10], [11], [12, 13]]
LABELS = ["a", "苹", "果", "b", "𝄞", "c", "吃"]
N = 14


def _pieces_trace(seed: int = 5) -> AttentionTrace:
    """q, k, v, out_proj of 14 pieces, 2 layers, 4 query heads on 2 key heads, RoPE recorded
    as "half" pairing; scores of order 1 so that rows are neither one-hot nor flat."""
    g = torch.Generator().manual_seed(seed)
    nl, nh, hkv, d = 2, 4, 2, 8
    q = torch.randn(nl, nh, N, d, generator=g) * torch.linspace(0.8, 2.2, nh)[None, :, None,
                                                                                None]
    k = torch.randn(nl, hkv, N, d, generator=g)
    v = torch.randn(nl, hkv, N, d, generator=g) * torch.linspace(0.2, 2.0, N)[None, None, :,
                                                                                None]
    out_proj = 0.5 * torch.randn(nl, nh, d, 12, generator=g)
    shape = ScoreShape(scale=d ** -0.5, causal=True)
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(nl)])
    meta = {"positional": {"kind": "rope", "pairing": "half", "rotary_dim": d,
                           "freqs": [10000.0 ** (-2 * p / d) for p in range(d // 2)],
                           "base": 10000.0}}
    tokens = [LABELS[a] for a, grp in enumerate(GROUPS) for _ in grp]
    return AttentionTrace(tokens, q=q, k=k, v=v, lse=lse, out_proj=out_proj, shapes=shape,
                          meta=meta, model="pieces")


@pytest.fixture(scope="module")
def pieces() -> AttentionTrace:
    return _pieces_trace()


@pytest.fixture(scope="module")
def merged(pieces) -> AttentionTrace:
    return pieces.merge_tokens(GROUPS, LABELS)


# -- the dense references, written out from the raw tensors -----------------------------------

def merge_ref(m: torch.Tensor, rule: str = "sum keys, mean queries") -> torch.Tensor:
    """(G, G) from an (N, N) matrix of pieces, by ``rule``: the merge's own (summed over the
    key pieces, averaged over the query pieces) or the wrong ``"mean keys"``."""
    m = m.double()
    out = torch.empty(len(GROUPS), len(GROUPS), dtype=torch.float64)
    for a, ga in enumerate(GROUPS):
        for b, gb in enumerate(GROUPS):
            block = m[ga][:, gb]
            out[a, b] = (block.sum(1) if rule == "sum keys, mean queries"
                         else block.mean(1)).mean()
    return out


def weights_ref(t: AttentionTrace, layer: int, head: int) -> torch.Tensor:
    """softmax(scale·q kᵀ) under the causal mask, float64, from q and k themselves."""
    q, k = t.q[layer, head].double(), t.k[layer, head // 2].double()
    s = t.scale * q @ k.T
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, -1)


def moved_ref(t: AttentionTrace, layer: int, head: int) -> torch.Tensor:
    """(N, E): v_j W_O^h, what key piece j moves through head h."""
    return t.v[layer, head // 2].double() @ t.out_proj[layer, head].double()


def value_ref(t: AttentionTrace, layer: int, head: int | None) -> torch.Tensor:
    """α_ij·‖v_j W_O^h‖ (one head) or ‖Σ_h α^h_ij v_j W_O^h‖ (head None), as vectors."""
    if head is not None:
        return weights_ref(t, layer, head) * moved_ref(t, layer, head).norm(dim=-1)
    vec = sum(weights_ref(t, layer, h)[:, :, None] * moved_ref(t, layer, h)[None]
              for h in range(t.num_heads))  # (N, N, E)
    return vec.norm(dim=-1)


def rollout_ref(t: AttentionTrace, mix=None) -> torch.Tensor:
    """Â_L ··· Â_1 with Â_l = ½·A_l + ½·I, A_l the layer's mean head (or ``mix(layer)``)."""
    r = None
    for layer in range(t.num_layers):
        a = (mix(layer) if mix is not None else
             torch.stack([weights_ref(t, layer, h) for h in range(t.num_heads)]).mean(0))
        mixed = 0.5 * a + 0.5 * torch.eye(a.shape[0], dtype=torch.float64)
        r = mixed if r is None else mixed @ r
    return r


def _far(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


# -- on a short trace, every measure both ways ------------------------------------------------

def test_the_pieces_trace_is_the_same_tensors_labelled_as_before_the_merge(pieces, merged):
    u = merged.unmerged()
    assert u.q is merged.q and u.k is merged.k and u.v is merged.v and u.groups is None
    assert u.tokens == pieces.tokens and u.seq_len == N and "merged" not in u.meta
    assert merged.unmerged() is u and pieces.unmerged() is pieces
    assert merged.meta["merged"]["rule"] == "weights summed over keys, averaged over queries"
    # the reference itself: the pieces' weights are the model's softmax
    assert _far(u.weights[1, 3], weights_ref(pieces, 1, 3)) <= TOL


def test_merged_weights_are_the_rule_written_out(merged, pieces):
    for layer, head in ((0, 0), (1, 3)):
        ref = weights_ref(pieces, layer, head)
        got = merged.weights_rows(layer, head, range(len(GROUPS)))
        assert _far(got, merge_ref(ref)) <= TOL
        assert _far(got, merge_ref(ref, "mean keys")) > 0.05  # the wrong rule fails


def test_merged_value_weighted_rows_are_the_pieces_rows_merged(merged, pieces):
    rows = range(len(GROUPS))
    for layer, head in ((0, 1), (1, 2), (1, None)):
        ref = value_ref(pieces, layer, head)
        got = merged.value_weighted_rows(layer, head, rows)
        assert got.shape == (len(GROUPS), len(GROUPS))
        assert _far(got, merge_ref(ref)) <= TOL, head
        assert _far(got, merge_ref(ref, "mean keys")) > 0.05, head
    # a merged weight times its key token's mean norm is not the rule (the norms differ)
    norm = moved_ref(pieces, 1, 2).norm(dim=-1)
    token_norm = torch.tensor([float(norm[g].mean()) for g in GROUPS], dtype=torch.float64)
    wrong = merge_ref(weights_ref(pieces, 1, 2)) * token_norm
    assert _far(merged.value_weighted_rows(1, 2, rows), wrong) > 0.05


def test_merged_rollout_is_the_pieces_rollout_merged_once(merged, pieces):
    ref = rollout_ref(pieces)
    got = merged.rollout_rows(range(len(GROUPS)))
    assert got.dtype == torch.float64 and _far(got, merge_ref(ref)) <= TOL
    assert torch.allclose(got.sum(-1), torch.ones(len(GROUPS), dtype=torch.float64), atol=1e-6)
    assert _far(got, merge_ref(ref, "mean keys")) > 0.05
    # the product of merged layers is another matrix: not the rule
    merged_layers = rollout_ref(pieces, mix=lambda layer: merge_ref(torch.stack([
        weights_ref(pieces, layer, h) for h in range(4)]).mean(0)))
    assert _far(got, merged_layers) > 1e-3
    # value-weighted rollout: each layer mixed by the norms' rows, normalised, on the pieces
    def vmix(layer):
        a = value_ref(pieces, layer, None)
        return a / a.sum(1, keepdim=True)

    vref = rollout_ref(pieces, mix=vmix)
    vgot = merged.rollout_rows([2, 6], value_weighted=True)
    assert _far(vgot, merge_ref(vref)[[2, 6]]) <= TOL
    assert _far(vgot, merge_ref(vref, "mean keys")[[2, 6]]) > 0.05
    assert _far(rollout(merged), merge_ref(ref)) <= TOL  # the whole matrix likewise


def test_a_merged_pairs_score_is_the_list_of_its_piece_pairs_labelled(merged, pieces):
    p = merged.score_parts(1, 3, 2, 1)  # 果 (3 pieces) → 苹 (2 pieces)
    assert p["merged"] is True and (p["i"], p["j"]) == (2, 1) and len(p["pairs"]) == 6
    assert [x["label"] for x in p["query_pieces"]] == [
        "果 (piece 1 of 3)", "果 (piece 2 of 3)", "果 (piece 3 of 3)"]
    assert [x["label"] for x in p["key_pieces"]] == ["苹 (piece 1 of 2)", "苹 (piece 2 of 2)"]
    q, k = pieces.q[1, 3].double(), pieces.k[1, 1].double()
    for pair, (qi, kj) in zip(p["pairs"], [(a, b) for a in (3, 4, 5) for b in (1, 2)]):
        assert (pair["i"], pair["j"]) == (qi, kj)
        assert (pair["query_piece"]["piece"], pair["key_piece"]["piece"]) == (qi, kj)
        want = pieces.scale * float(q[qi] @ k[kj])
        assert pair["score"] == pytest.approx(want, abs=TOL)
        assert math.fsum(b["value"] for b in pair["bands"]) == pytest.approx(want, abs=TOL)
        # the neighbouring token's pieces give other scores: the pairing is checked
        assert abs(pieces.scale * float(q[qi + 3 if qi + 3 < N else 0] @ k[kj]) - want) > 1e-3
    # one piece each: one pair, labelled by the token alone
    one = merged.score_parts(0, 0, 3, 0)
    assert len(one["pairs"]) == 1 and one["pairs"][0]["query_piece"]["label"] == "b"
    assert one["pairs"][0]["score"] == pieces.score_parts(0, 0, 6, 0)["score"]


def test_band_lift_of_merged_rows_sums_over_their_pieces(merged, pieces):
    got = band_lift(merged, 1, 0, rows=[4])  # 𝄞: pieces 7..10
    assert (got["rows"], got["pieces"]) == (1, 4)
    w, s = weights_ref(pieces, 1, 0), pieces.scale * (pieces.q[1, 0].double()
                                                      @ pieces.k[1, 0].double().T)
    want = sum(float((w[i] * s[i]).sum() - w[i].sum() * s[i, :i + 1].mean()) for i in (7, 8, 9, 10))
    assert got["lift"] == pytest.approx(want, abs=TOL)
    assert abs(got["lift"] - want / 4) > 1e-3  # the mean over the pieces is not the rule
    assert sum(b["lift"] for b in got["bands"]) == pytest.approx(got["lift"], abs=TOL)
    whole = band_lift(merged, 1, 0)
    assert whole["lift"] == pytest.approx(band_lift(pieces, 1, 0)["lift"], abs=TOL)


def test_a_saved_merged_trace_measures_the_same(merged, tmp_path):
    back = AttentionTrace.open(merged.save(tmp_path / "merged.safetensors"))
    assert back.groups == merged.groups
    assert _far(back.rollout_rows([5]), merged.rollout_rows([5])) == 0.0
    assert _far(back.value_weighted_rows(0, None, [4]), merged.value_weighted_rows(0, None, [4])
                ) == 0.0


def test_eviction_refuses_a_merged_trace_saying_why(merged):
    with pytest.raises(ValueError, match=r"one key and value per piece .* merges its 14 pieces "
                                         r"into 7 tokens.*merge_pieces=False"):
        key_scores(merged, 0, 0, "h2o", context=4)
    assert key_scores(merged.unmerged(), 0, 0, "h2o", context=8).shape == (8,)


# -- a Chinese text of the articles' length -------------------------------------------------

LONG = 8192  # the articles' length in SmolLM2 pieces


@pytest.fixture(scope="module")
def long_merged():
    """The Chinese half of attnlab's course, its first 8,192 SmolLM2 byte-level BPE pieces,
    through a tiny random Llama whose q and k projections are sharpened (×20: its heads
    attend to a few keys, entropy about 3.6 nats, where a near-uniform random head would
    hide a wrong merge); merged into characters, as ``trace`` does by default."""
    from attnlab import models
    from attnlab.report.long_text import long_text
    from attnlab.tracing.tracer import trace
    from random_models import random_llama

    tok = models.load("smollm2").tokenizer  # byte-level BPE, offline
    text = long_text({}).text
    chinese = text[text.index("# 01 · 向量与投影"):]
    net = random_llama(layers=2, heads=4, kv_heads=2, hidden=32, vocab=tok.vocab_size,
                       positions=LONG, eager=False)
    with torch.no_grad():
        for block in net.model.layers:
            block.self_attn.q_proj.weight.mul_(20.0)
            block.self_attn.k_proj.weight.mul_(20.0)
    return trace(net, chinese, tokenizer=tok, truncate=True, max_tokens=LONG)


def merged_row_ref(piece_rows: torch.Tensor, groups: list[list[int]]) -> torch.Tensor:
    """One merged row from the rows of a token's pieces (P, N pieces): each key token's
    pieces summed (cumulative sums at the groups' bounds), then the mean over the P rows;
    float64."""
    cs = torch.cat([torch.zeros(piece_rows.shape[0], 1, dtype=torch.float64),
                    piece_rows.double().cumsum(-1)], -1)
    lo = torch.tensor([g[0] for g in groups])
    hi = torch.tensor([g[-1] + 1 for g in groups])
    return (cs[:, hi] - cs[:, lo]).mean(0)


@pytest.mark.models
def test_measures_of_a_merged_chinese_text_of_the_articles_length(long_merged):
    t, u = long_merged, long_merged.unmerged()
    g = t.groups
    assert u.seq_len == LONG and t.seq_len < LONG and t.has_qk
    triples = [a for a, grp in enumerate(g) if len(grp) == 3]
    a = triples[-1]  # the last character of three byte pieces, near the 8,192nd piece
    assert g[a][-1] > LONG - 200 and "\u4e00" <= t.tokens[a].strip() <= "\u9fff"
    mine = g[a]
    for layer, head in ((1, 3), (0, 0)):
        ref = merged_row_ref(u.weights_rows(layer, head, mine), g)
        got = t.weights_rows(layer, head, [a])[0]
        assert _far(got, ref) <= TOL and abs(float(got.sum()) - 1) <= 1e-5
        # weights of ~1/8,000 each: the rows compared by their L1 distance
        assert float((got - ref).abs().sum()) <= 1e-4
        wrong = ref / torch.tensor([len(x) for x in g])  # mean over the key pieces
        assert float((got - wrong).abs().sum()) > 0.1
    vref = merged_row_ref(u.value_weighted_rows(1, None, mine), g)
    vgot = t.value_weighted_rows(1, None, [a])[0]
    assert _far(vgot, vref) <= TOL and float((vgot - vref).abs().sum()) <= 1e-4 * float(vref.sum())
    vwrong = vref / torch.tensor([len(x) for x in g])
    assert float((vgot - vwrong).abs().sum()) > 0.1 * float(vref.sum())
    mid = next(b for b in triples if g[b][0] > LONG // 2)  # rollout visits the rows before it
    rref = merged_row_ref(u.rollout_rows(g[mid]), g)
    got = t.rollout_rows([mid])[0]
    assert _far(got, rref) <= TOL and got.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert float((got - rref).abs().sum()) <= 1e-4
    assert float((got - rref / torch.tensor([len(x) for x in g])).abs().sum()) > 0.1
    # the product of the merged layers (rows up to ``mid``: causal) is not the rule
    r = torch.zeros(t.seq_len, dtype=torch.float64)
    r[mid] = 1.0
    for layer in reversed(range(t.num_layers)):
        mean = sum(t.weights_rows(layer, h, range(mid + 1)).double() for h in range(4)) / 4
        r = 0.5 * (r[:mid + 1] @ mean) + 0.5 * r
    assert float((got - r).abs().sum()) > 0.01
    p = t.score_parts(1, 2, a, a - 1)
    assert len(p["pairs"]) == 3 * len(g[a - 1])
    assert p["query_pieces"][1]["label"] == f"{t.tokens[a]} (piece 2 of 3)"
    first = p["pairs"][0]
    want = u.score_shape(1).scale * float(u.q[1, 2, mine[0]] @ u.k[1, 1, g[a - 1][0]])
    assert first["score"] == pytest.approx(want, rel=1e-5, abs=1e-6)
