"""Rollout and the score's decomposition (attnlab.tracing.attribution), against dense
float64 references built independently: the model's own eager attention maps, and the
model library's own rotary embedding."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import trace
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.attribution import (
    band_lift,
    band_pairs,
    rollout,
    rollout_rows,
    score_parts,
    value_weighted_rows,
)
from random_models import random_llama

transformers = pytest.importorskip("transformers")

N = 256


@pytest.fixture(scope="module")
def llama():
    return random_llama(layers=3)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(1, 97, (N,), generator=torch.Generator().manual_seed(1)).tolist()


@pytest.fixture(scope="module")
def traced(llama, ids):
    return trace(llama, ids)


def _dense_rollout(maps: list[torch.Tensor], residual: bool = True) -> torch.Tensor:
    """Abnar & Zuidema in float64 from the model's own (H, N, N) maps, first layer first."""
    n = maps[0].shape[-1]
    out = torch.eye(n, dtype=torch.float64)
    for a in maps:
        mix = a.double().mean(0)
        if residual:
            mix = 0.5 * mix + 0.5 * torch.eye(n, dtype=torch.float64)
        out = mix @ out
    return out


@pytest.fixture(scope="module")
def eager_maps(llama, ids):
    with torch.no_grad():
        out = llama(torch.tensor([ids]), output_attentions=True)
    return [a[0] for a in out.attentions]


def test_rollout_rows_equal_the_dense_product_of_the_models_own_maps(traced, eager_maps):
    ref = _dense_rollout(eager_maps)
    rows = [0, 1, 17, 128, N - 1]
    got = rollout_rows(traced, rows)
    assert got.dtype == torch.float64 and got.shape == (len(rows), N)
    assert torch.allclose(got, ref[rows], atol=1e-6, rtol=0)
    # the whole matrix, in small tiles, is the same product
    whole = rollout(traced, tile_rows=37)
    assert torch.allclose(whole, ref, atol=1e-6, rtol=0)
    assert torch.allclose(whole.sum(1), torch.ones(N, dtype=torch.float64), atol=1e-9)
    # causal: nothing flows from a later token
    assert float(whole.triu(1).abs().max()) == 0.0


def test_a_rollout_without_the_residual_is_caught(traced, eager_maps):
    """The wrong variant (no ½·I) is far from attnlab's rows at the tolerance used above."""
    wrong = _dense_rollout(eager_maps, residual=False)
    got = rollout_rows(traced, [N - 1, 100])
    assert float((got - wrong[[N - 1, 100]]).abs().max()) > 1e-3


def test_rollout_refuses_what_it_cannot_compose(traced):
    bare = AttentionTrace(traced.tokens, q=traced.q, k=traced.k, v=traced.v, lse=traced.lse,
                          shapes=list(traced.shapes))
    with pytest.raises(ValueError, match="output projection"):
        rollout_rows(bare, [3], value_weighted=True)
    with pytest.raises(ValueError, match="output projection"):
        bare.value_weighted_rows(0, 0, [1])
    with pytest.raises(IndexError, match="rows"):
        rollout_rows(traced, [N])
    with pytest.raises(TypeError, match="AttentionTrace"):
        rollout_rows({"decoder": traced}, [1])
    q = torch.randn(1, 2, 3, 4)
    k = torch.randn(1, 2, 5, 4)
    shape = ScoreShape(scale=0.5)
    cross = AttentionTrace(list("abc"), q=q, k=k, lse=row_logsumexp(q[0], k[0], shape)[None],
                           shapes=shape, key_tokens=list("vwxyz"), stack="cross")
    with pytest.raises(ValueError, match="same tokens"):
        rollout_rows(cross, [0])


# -- the score decomposed ----------------------------------------------------------------


def test_bands_sum_to_the_score_and_the_geometry_holds(traced):
    for layer, head, i, j in [(0, 0, 200, 3), (2, 3, N - 1, N - 2), (1, 1, 50, 50)]:
        p = score_parts(traced, layer, head, i, j, pairing="half")
        total = sum(b["value"] for b in p["bands"])
        assert abs(total - p["score"]) <= 1e-6 * max(1.0, abs(p["score"]))
        geo = p["scale"] * p["q_norm"] * p["k_norm"] * p["cos"]
        assert abs(geo - p["score"]) <= 1e-6 * max(1.0, abs(p["score"]))
        # the shaped score of a Llama (no cap, no bias) is the score, visible keys only
        assert p["shaped"] == pytest.approx(p["score"], abs=1e-6)
        dims = sorted(d for b in p["bands"] for d in b["dims"])
        assert dims == list(range(traced.head_dim))
    hidden = score_parts(traced, 0, 0, 3, 200, pairing="half")
    assert hidden["shaped"] == -math.inf


def test_a_missing_band_does_not_sum_to_the_score(traced):
    p = score_parts(traced, 1, 2, 120, 40, pairing="half")
    short = sum(b["value"] for b in p["bands"][1:])
    assert abs(short - p["score"]) > 1e-4


def _rotated(pairs_q: torch.Tensor, pairs_k: torch.Tensor, i: int, j: int, d: int):
    """q0, k0 rotated by the Llama library's own RoPE at positions i and j."""
    from transformers.models.llama import modeling_llama as ml

    cfg = transformers.LlamaConfig(hidden_size=d * 2, num_attention_heads=2,
                                   max_position_embeddings=4096)
    rope = ml.LlamaRotaryEmbedding(cfg)
    pos = torch.tensor([[i, j]])
    cos, sin = rope(pairs_q[None, None], pos)
    q, _ = ml.apply_rotary_pos_emb(pairs_q[None, None], pairs_q[None, None], cos, sin)
    _, k = ml.apply_rotary_pos_emb(pairs_k[None, None], pairs_k[None, None], cos, sin)
    return q[0, 0], k[0, 0], rope.inv_freq


def test_the_half_pairing_is_the_one_llamas_rope_rotates():
    """Each band of a rotated pair is |q_p||k_p|·cos(φ_p + (i−j)θ_p) in the model's own
    pairing; the interleaved pairing does not give that."""
    d, i, j = 16, 700, 40
    g = torch.Generator().manual_seed(3)
    q0, k0 = torch.randn(2, d, generator=g), torch.randn(2, d, generator=g)
    q_rot, k_rot, inv_freq = _rotated(q0, k0, i, j, d)
    qs = torch.zeros(1, 1, 2, d)
    ks = torch.zeros(1, 1, 2, d)
    qs[0, 0, 1] = q_rot[0]
    ks[0, 0, 0] = k_rot[1]
    shape = ScoreShape(scale=1.0)
    meta = {"positional": {"kind": "rope", "pairing": "half", "rotary_dim": d,
                           "base": 10000.0}}
    t = AttentionTrace(["a", "b"], q=qs, k=ks, lse=row_logsumexp(qs[0], ks[0], shape)[None],
                       shapes=shape, meta=meta)

    def expected(pairing: str) -> list[float]:
        out = []
        for p, (a, b) in enumerate(band_pairs(d, pairing)):
            zq = complex(q0[0, a], q0[0, b])
            zk = complex(k0[1, a], k0[1, b])
            theta = float(inv_freq[p])
            out.append(abs(zq) * abs(zk) * math.cos(math.atan2(zq.imag, zq.real)
                                                    - math.atan2(zk.imag, zk.real)
                                                    + (i - j) * theta))
        return out

    got = score_parts(t, 0, 0, 1, 0)
    assert got["layout"]["source"] == "trace"
    assert [b["value"] for b in got["bands"]] == pytest.approx(expected("half"), abs=1e-4)
    assert [b["freq"] for b in got["bands"]] == pytest.approx(inv_freq.tolist(), rel=1e-6)
    wrong = score_parts(t, 0, 0, 1, 0, pairing="interleaved")
    assert max(abs(a - b) for a, b in zip([x["value"] for x in wrong["bands"]],
                                          expected("half"))) > 1e-2


def test_band_lift_sums_to_the_heads_lift_against_a_dense_reference(traced):
    layer, head = 2, 1
    got = band_lift(traced, layer, head, pairing="half", tile_rows=31)
    q = traced.q[layer, head].double()
    k = traced.k[layer, traced.kv_head(head)].double()
    s = traced.score_shape(layer).scale * q @ k.T
    alpha = traced.head_weights(layer, head).double()
    vis = torch.ones(N, N).tril().bool()
    mean_vis = (s * vis).sum(1) / vis.sum(1)
    ref = float(((alpha * s).sum(1) - alpha.sum(1) * mean_vis).sum())
    assert got["lift"] == pytest.approx(ref, rel=1e-9, abs=1e-9)
    assert sum(b["lift"] for b in got["bands"]) == pytest.approx(got["lift"], rel=1e-9)
    assert sum(b["share"] for b in got["bands"]) == pytest.approx(1.0, abs=1e-9)


def test_band_lift_finds_the_one_band_that_carries_a_pattern():
    """Keys differ only in dimensions (1, 5): that band carries all of the lift; an
    uncentred measure (the raw attention-weighted score) would credit every band."""
    n, d = 12, 8
    g = torch.Generator().manual_seed(5)
    shared = torch.randn(d, generator=g)
    k = shared.repeat(n, 1)
    k[:, 1] = torch.linspace(-2, 2, n)
    k[:, 5] = torch.linspace(2, -1, n)
    q = torch.randn(n, d, generator=g) + 1.0
    shape = ScoreShape(scale=1.0, causal=True)
    qq, kk = q[None, None], k[None, None]
    t = AttentionTrace([str(x) for x in range(n)], q=qq, k=kk,
                       lse=row_logsumexp(qq[0], kk[0], shape)[None], shapes=shape)
    got = band_lift(t, 0, 0, pairing="half")
    shares = {tuple(b["dims"]): b["share"] for b in got["bands"]}
    assert shares[(1, 5)] == pytest.approx(1.0, abs=1e-9)
    assert all(abs(v) < 1e-9 for dims, v in shares.items() if dims != (1, 5))
    raw = (q * (t.head_weights(0, 0).double().float() @ k)).sum(0)  # uncentred, per dim
    assert float(raw[[0, 4]].sum().abs()) > 1e-2


def test_weights_only_traces_and_bad_layouts_are_refused_with_the_reason():
    w = torch.softmax(torch.randn(1, 1, 3, 3), -1)
    dense = AttentionTrace(list("abc"), weights=w)
    with pytest.raises(ValueError, match="q and k"):
        score_parts(dense, 0, 0, 1, 1)
    with pytest.raises(ValueError, match="pairing must be one of"):
        band_pairs(4, "spiral")
    with pytest.raises(ValueError, match="rotary_dim"):
        band_pairs(4, "half", 3)


# -- value-weighted attention -------------------------------------------------------------


def _moved_dense(llama, traced, layer):
    """(H, N, E) float64: v_j · W_O^h from the model's own o_proj weight, sliced here."""
    w = llama.model.layers[layer].self_attn.o_proj.weight.detach().double()  # (E, H·d)
    d = traced.v.shape[-1]
    return torch.stack([traced.v[layer, traced.kv_head(h)].double()
                        @ w[:, h * d:(h + 1) * d].T for h in range(traced.num_heads)])


def test_the_contributions_sum_to_what_enters_the_residual_stream(llama, ids, traced,
                                                                  eager_maps):
    """Σ_h Σ_j α^h_ij v_j W_O^h is the o_proj output the model computed (no bias here)."""
    seen = {}
    layer = 1
    hook = llama.model.layers[layer].self_attn.o_proj.register_forward_hook(
        lambda m, i, o: seen.update(out=o.detach()[0].double()))
    try:
        with torch.no_grad():
            llama(torch.tensor([ids]))
    finally:
        hook.remove()
    moved = _moved_dense(llama, traced, layer)
    alpha = eager_maps[layer].double()  # (H, N, N)
    total = torch.einsum("hik,hke->ie", alpha, moved)
    assert torch.allclose(total, seen["out"], atol=1e-5)
    assert traced.meta["positional"]["pairing"] == "half"
    inv = llama.model.rotary_emb.inv_freq
    assert traced.meta["positional"]["freqs"] == pytest.approx(inv.tolist(), rel=1e-7)


def test_value_weighted_rows_equal_their_dense_definition(llama, traced, eager_maps):
    layer, rows = 2, [0, 9, 100, N - 1]
    moved = _moved_dense(llama, traced, layer)
    alpha = eager_maps[layer].double()
    for h in (0, 3):
        ref = alpha[h, rows] * moved[h].norm(dim=-1)
        got = traced.value_weighted_rows(layer, h, rows)
        assert torch.allclose(got.double(), ref, atol=1e-5, rtol=1e-4)
        wrong = alpha[h, rows] * moved[(h + 1) % 4].norm(dim=-1)  # another head's W_O slice
        assert float((got.double() - wrong).abs().max()) > 1e-3
    ref_all = torch.einsum("hik,hke->ike", alpha[:, rows], moved).norm(dim=-1)
    got_all = value_weighted_rows(traced, layer, None, rows)
    assert torch.allclose(got_all.double(), ref_all, atol=1e-5, rtol=1e-4)
    # a weight is not an importance: the norm of the sum differs from the mean weight's order
    assert not torch.equal(got_all.argsort(dim=-1), alpha[:, rows].mean(0).argsort(dim=-1))


def test_value_weighted_rollout_equals_its_dense_product(llama, traced, eager_maps):
    n = N
    out = torch.eye(n, dtype=torch.float64)
    for layer, a in enumerate(eager_maps):
        m = torch.einsum("hik,hke->ike", a.double(), _moved_dense(llama, traced, layer))
        m = m.norm(dim=-1)
        m = m / m.sum(1, keepdim=True)
        out = (0.5 * m + 0.5 * torch.eye(n, dtype=torch.float64)) @ out
    rows = [5, N - 1]
    got = traced.rollout_rows(rows, value_weighted=True)
    assert torch.allclose(got, out[rows], atol=1e-6)
    assert float((got - rollout_rows(traced, rows)).abs().max()) > 1e-4  # not the plain one


def test_the_projection_and_the_layout_survive_a_file(traced, tmp_path):
    back = AttentionTrace.load(traced.save(tmp_path / "t.safetensors"))
    assert torch.equal(back.out_proj, traced.out_proj)
    assert back.meta["positional"] == traced.meta["positional"]
    assert back.score_parts(1, 2, 50, 7) == traced.score_parts(1, 2, 50, 7)
