"""AttentionTrace: weights on demand equal the dense softmax, both kinds of trace, merges,
the dense budget, and the file format (version 3, versions 2 and 1 still read, bad files
refused)."""

from __future__ import annotations

import json
import math
import struct

import pytest
import torch

import attnlab.tracing.attention as attention_mod
from attnlab.core.masks import causal as causal_mask
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import FORMAT_VERSION, AttentionTrace, TraceFormatError, trace_file

L, H, HKV, N, D = 2, 4, 2, 11, 8


def _qk(seed: int = 0, n: int = N):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(L, H, n, D, generator=g)
    k = torch.randn(L, HKV, n, D, generator=g)
    v = torch.randn(L, HKV, n, 3, generator=g)
    return q, k, v


def _trace(shape: ScoreShape, seed: int = 0, n: int = N, **kw) -> AttentionTrace:
    q, k, v = _qk(seed, n)
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(L)])
    return AttentionTrace(tokens=[f"t{i}" for i in range(n)], q=q, k=k, v=v, lse=lse,
                          shapes=shape, model="toy", **kw)


def _dense_ref(t: AttentionTrace) -> torch.Tensor:
    """(L, H, N, N) float64 softmax of the shaped scores, written out densely."""
    n = t.q.shape[2]
    out = torch.empty(L, H, n, n, dtype=torch.float64)
    for li in range(L):
        s = t.score_shape(li)
        for h in range(H):
            sc = (t.q[li, h].double() @ t.k[li, h // (H // HKV)].double().T) * s.scale
            keep = torch.ones(n, n, dtype=torch.bool)
            if s.causal:
                keep &= causal_mask(n, window=s.window)
            if s.key_mask is not None:
                keep &= s.key_mask[None]
            out[li, h] = torch.softmax(sc.masked_fill(~keep, -math.inf), -1)
    return out


KM = torch.tensor([True] * 9 + [False] * 2)


@pytest.mark.parametrize("rule", [dict(), dict(causal=True), dict(causal=True, window=3),
                                  dict(key_mask=KM)])
def test_on_demand_methods_equal_the_dense_softmax(rule):
    t = _trace(ScoreShape(scale=D ** -0.5, **rule))
    ref = _dense_ref(t)
    assert t.has_qk and (t.num_layers, t.num_heads, t.num_kv_heads) == (L, H, HKV)
    assert (t.weights.double() - ref).abs().max() < 1e-6
    assert (t.head_weights(1, 3).double() - ref[1, 3]).abs().max() < 1e-6
    rows = t.weights_rows(0, 2, [0, 5, 10])
    assert rows.shape == (3, N) and (rows.double() - ref[0, 2, [0, 5, 10]]).abs().max() < 1e-6
    tile = t.weights_tile(1, 1, slice(2, 7), range(3, 9))
    assert (tile.double() - ref[1, 1, 2:7, 3:9]).abs().max() < 1e-6
    tiles = list(t.iter_row_tiles(0, 0, tile_rows=4))
    assert [(a, b) for a, b, _ in tiles] == [(0, 4), (4, 8), (8, 11)]
    assert (torch.cat([w for _, _, w in tiles]).double() - ref[0, 0]).abs().max() < 1e-6
    vals, idx = t.topk(1, 2, 10, 3)
    want_vals, want_idx = torch.topk(ref[1, 2, 10], 3)
    assert torch.equal(idx, want_idx) and (vals.double() - want_vals).abs().max() < 1e-6
    # pooled: mean over the block's queries of the sum over its keys (rows still sum to 1)
    p = t.pooled(0, 1, 4)  # blocks [0,4) [4,8) [8,11)
    w = ref[0, 1]
    want = torch.stack([torch.stack([w[a:b, c:d].sum(-1).mean() for c, d in
                                     ((0, 4), (4, 8), (8, 11))]) for a, b in
                        ((0, 4), (4, 8), (8, 11))])
    assert (p.double() - want).abs().max() < 1e-6
    assert torch.allclose(p.sum(-1), torch.ones(3), atol=1e-5)
    spans = t.pooled(0, 1, [(0, 1), (1, 11)])
    assert (spans[1, 0].double() - w[1:, 0].mean()).abs() < 1e-6
    # a wrong pooling (the mean over the whole block) is a different picture
    assert (p.double() - want / torch.tensor([4.0, 4.0, 3.0], dtype=torch.float64)).abs().max(
    ) > 1e-2


@pytest.mark.parametrize("wrong", ["lse without the mask", "scale", "causal off"])
def test_wrong_stored_parameters_fail_the_comparison(wrong):
    right = ScoreShape(scale=D ** -0.5, causal=True)
    t = _trace(right)
    ref = _dense_ref(t)
    if wrong == "lse without the mask":  # lse of unmasked scores: rows no longer sum to 1
        bad_lse = torch.stack([row_logsumexp(t.q[i], t.k[i], ScoreShape(scale=D ** -0.5))
                               for i in range(L)])
        bad = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=bad_lse, shapes=right)
    elif wrong == "scale":
        bad = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse,
                             shapes=ScoreShape(scale=1.0, causal=True))
    else:
        bad = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse,
                             shapes=ScoreShape(scale=D ** -0.5))
    assert (bad.weights.double() - ref).abs().max() > 1e-2


def test_dense_trace_supports_every_method():
    t = _trace(ScoreShape(scale=D ** -0.5, causal=True))
    d = AttentionTrace(tokens=t.tokens, weights=t.weights.clone(), causal=True, model="toy")
    assert not d.has_qk and d.causal and d.num_kv_heads == H
    for name, args in (("weights_rows", (1, 2, [3, 4])),
                       ("weights_tile", (0, 3, range(2, 6), [0, 10])),
                       ("head_weights", (1, 1)), ("pooled", (0, 2, 3)),
                       ("topk", (1, 0, 7, 2))):
        a, b = getattr(d, name)(*args), getattr(t, name)(*args)
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert torch.allclose(x.float(), y.float(), atol=1e-6), name


def test_merge_sums_keys_and_averages_queries_on_both_kinds():
    t = _trace(ScoreShape(scale=D ** -0.5, causal=True))
    d = AttentionTrace(tokens=t.tokens, weights=t.weights.clone(), causal=True)
    groups = [[0], [1, 2], [3], [4, 5, 6], [7], [8], [9, 10]]
    w = t.weights.double()
    want = torch.zeros(L, H, 7, 7, dtype=torch.float64)
    for a, ga in enumerate(groups):
        for b, gb in enumerate(groups):
            want[..., a, b] = w[..., ga, :][..., gb].sum(-1).mean(-1)
    for trace in (t, d):
        m = trace.merge_tokens(groups)
        assert m.seq_len == 7 and m.tokens[1] == "t1t2"
        assert (m.weights.double() - want).abs().max() < 1e-6
        assert torch.allclose(m.weights.sum(-1), torch.ones(L, H, 7), atol=1e-5)
        assert (m.weights_tile(1, 2, [3], [1, 3]).double() - want[1, 2, 3, [1, 3]]).abs().max(
        ) < 1e-6
        assert m.meta["merged"]["groups"] == groups and m.token_ids is None
        # merging again composes the groups
        mm = m.merge_tokens([[0, 1], [2], [3], [4], [5], [6]])
        assert mm.groups[0] == [0, 1, 2]
    # a wrong rule (averaging over keys too) breaks the row sums
    wrong = w[..., 1:3, :][..., 1:3].mean((-1, -2))
    assert (want[..., 1, 1] - wrong).abs().max() > 1e-3
    with pytest.raises(ValueError, match="consecutive"):
        t.merge_tokens([[0, 2], [1], [3, 4, 5, 6, 7, 8, 9, 10]])


def test_dense_weights_refuse_above_the_budget(monkeypatch):
    t = _trace(ScoreShape(scale=D ** -0.5, causal=True))
    monkeypatch.setattr(attention_mod, "DENSE_BUDGET_BYTES", 1000)
    with pytest.raises(ValueError, match=r"DENSE_BUDGET_BYTES.*weights_rows.*pooled"):
        t.weights  # noqa: B018
    assert t.weights_rows(0, 0, [1]).shape == (1, N)  # on demand still works
    monkeypatch.setattr(attention_mod, "DENSE_BUDGET_BYTES", 1 << 30)
    assert t.weights.shape == (L, H, N, N)


def test_arguments_are_checked():
    t = _trace(ScoreShape(scale=D ** -0.5))
    with pytest.raises(IndexError, match=r"layer must be in \[0, 2\)"):
        t.head_weights(2, 0)
    with pytest.raises(IndexError, match=r"head must be in \[0, 4\)"):
        t.weights_rows(0, 4, [0])
    with pytest.raises(IndexError, match="queries"):
        t.weights_rows(0, 0, [N])
    with pytest.raises(ValueError, match="k must be an int"):
        t.topk(0, 0, 0, N + 1)
    with pytest.raises(ValueError, match="blocks"):
        t.pooled(0, 0, 0)
    with pytest.raises(ValueError, match="missing: lse"):
        AttentionTrace(tokens=t.tokens, q=t.q, k=t.k)
    with pytest.raises(ValueError, match="k must have shape"):
        AttentionTrace(tokens=t.tokens, q=t.q, k=torch.cat([t.k, t.k[:, :1]], 1), lse=t.lse)
    with pytest.raises(ValueError, match="tokens"):
        AttentionTrace(tokens=t.tokens[:-1], q=t.q, k=t.k, lse=t.lse)


# -- files --------------------------------------------------------------------------------


def test_round_trip_keeps_everything(tmp_path):
    km = torch.tensor([True] * 10 + [False])
    shapes = [ScoreShape(scale=0.3, causal=True, window=4, key_mask=km, softcap=3.0),
              ScoreShape(scale=0.3, causal=True, key_mask=km,
                         alibi_slopes=torch.tensor([0.5, 0.25, 0.125, 0.0625]))]
    q, k, v = _qk(1)
    lse = torch.stack([row_logsumexp(q[i], k[i], shapes[i]) for i in range(L)])
    t = AttentionTrace(tokens=[f"字{i}" for i in range(N)], q=q, k=k, v=v, lse=lse,
                       shapes=shapes, model="toy", token_ids=list(range(N)), text="x",
                       meta={"a": [1, 2]}).merge_tokens([[i] for i in range(9)] + [[9, 10]])
    path = t.save(tmp_path / "t.safetensors")
    back = AttentionTrace.load(path)
    assert back.tokens == t.tokens and back.groups == t.groups and back.meta == t.meta
    assert back.shapes[0].window == 4 and back.shapes[0].softcap == 3.0
    assert torch.equal(back.shapes[1].key_mask, km)
    assert torch.equal(back.weights, t.weights) and torch.equal(back.v, t.v)
    header = json.loads(path.read_bytes()[8: 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    meta = json.loads(header["__metadata__"]["attnlab"])
    assert meta["format_version"] == FORMAT_VERSION == 4
    assert "shapes.1.key_mask" not in header  # the same key mask is stored once
    # the file holds q, k, v, lse: O(N·d), never (N, N) weights
    assert "weights" not in header and header["k"]["shape"] == [L, HKV, N, D]


def _rewrite_metadata(path, edit) -> None:
    """Edit the attnlab metadata of a trace file in place (the tensors stay as they are)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8: 8 + n])
    meta = json.loads(header["__metadata__"]["attnlab"])
    edit(meta)
    header["__metadata__"]["attnlab"] = json.dumps(meta)
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])


def test_sinks_and_bands_round_trip_and_need_version_3(tmp_path):
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    shapes = [ScoreShape(scale=0.3, causal=True, window=3, sinks=sinks),
              ScoreShape(scale=0.3, window=3, sinks=torch.randn(H, N))]  # a band, per-row sinks
    q, k, v = _qk(2)
    lse = torch.stack([row_logsumexp(q[i], k[i], shapes[i]) for i in range(L)])
    t = AttentionTrace(tokens=[f"t{i}" for i in range(N)], q=q, k=k, v=v, lse=lse,
                       shapes=shapes, model="toy")
    assert bool((t.weights.sum(-1) < 1).all())  # every row gave the sink a share
    path = t.save(tmp_path / "s.safetensors")
    back = AttentionTrace.load(path)
    assert torch.equal(back.shapes[0].sinks, sinks) and back.shapes[1].window == 3
    assert not back.shapes[1].causal and torch.equal(back.weights, t.weights)
    # the same file calling itself version 2 is refused: version 2 has no sinks, no bands
    _rewrite_metadata(path, lambda m: m.update(format_version=2))
    with pytest.raises(TraceFormatError, match="only format_version 3 holds"):
        AttentionTrace.load(path)
    # a trace without them, labelled version 2 as attnlab 0.2 wrote it, still loads
    plain = _trace(ScoreShape(scale=0.3, causal=True, window=4))
    p2 = plain.save(tmp_path / "v2.safetensors")
    _rewrite_metadata(p2, lambda m: m.update(format_version=2))
    assert torch.equal(AttentionTrace.load(p2).weights, plain.weights)


def test_a_dense_trace_with_sinks_may_have_rows_below_one(tmp_path):
    shape = ScoreShape(scale=0.3, causal=True, sinks=torch.full((H,), 3.0))
    t = _trace(shape)
    dense = AttentionTrace(tokens=t.tokens, weights=t.weights, shapes=shape)
    back = AttentionTrace.load(dense.save(tmp_path / "d.safetensors"))
    assert torch.equal(back.weights, t.weights)
    # without the sink the same rows are refused: they do not sum to 1
    bare = AttentionTrace(tokens=t.tokens, weights=t.weights,
                          shapes=ScoreShape(scale=0.3, causal=True))
    with pytest.raises(TraceFormatError, match="do not sum to 1"):
        AttentionTrace.load(bare.save(tmp_path / "b.safetensors"))


def _write_v1(path, tensors, meta):
    """A version-1 file as attnlab 0.1.0 wrote it: dense weights plus optional tensors."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata={"attnlab": json.dumps(meta)})


def _v1_meta(**over):
    meta = {"format": "attnlab.AttentionTrace", "format_version": 1,
            "tokens": ["a", "b", "c"], "key_tokens": None, "token_ids": [5, 6, 7],
            "model": "old", "causal": True, "scale": 0.5, "text": "a b c",
            "meta": {"merged": {"groups": [[0], [1]]}}}
    meta.update(over)
    return meta


def test_v1_files_still_load(tmp_path):
    g = torch.Generator().manual_seed(2)
    w = torch.softmax(torch.randn(2, 3, 3, 3, generator=g), -1)
    q, k = torch.randn(2, 2, 3, 3, 4, generator=g).unbind(0)
    _write_v1(tmp_path / "v1.safetensors",
              {"weights": w, "q": q, "k": k, "scores": torch.zeros(2, 3, 3, 3)}, _v1_meta())
    t = AttentionTrace.load(tmp_path / "v1.safetensors")
    assert torch.equal(t.weights, w) and torch.equal(t.head_weights(1, 2), w[1, 2])
    assert t.causal and t.scale == 0.5 and t.token_ids == [5, 6, 7] and t.model == "old"
    assert t.has_qk and t.num_kv_heads == 3 and t.groups is None  # v1 weights came merged
    assert torch.allclose(t.pooled(0, 0, 2).sum(-1), torch.ones(2))
    t.save(tmp_path / "v2.safetensors")  # and it is written back as version 2
    assert torch.equal(AttentionTrace.load(tmp_path / "v2.safetensors").weights, w)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("tokens", ["a", 3, "c"], "'tokens' must be a list of str"),
    ("token_ids", [1, "2", 3], "'token_ids' must be null or a list of ints"),
    ("scale", float("inf"), "'scale' must be null or a finite float"),
    ("meta", [1], "'meta' must be a JSON object"),
    ("format_version", 6, "format_version 6"),
    ("causal", "yes", "'causal' must be a bool"),
])
def test_bad_metadata_is_refused_naming_the_field(tmp_path, field, value, message):
    w = torch.softmax(torch.randn(1, 1, 3, 3), -1)
    _write_v1(tmp_path / "bad.safetensors", {"weights": w}, _v1_meta(**{field: value}))
    with pytest.raises(TraceFormatError, match=message):
        AttentionTrace.load(tmp_path / "bad.safetensors")


def test_bad_tensors_are_refused(tmp_path):
    t = _trace(ScoreShape(scale=D ** -0.5, causal=True))
    path = t.save(tmp_path / "t.safetensors")
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8: 8 + n])
    meta = json.loads(header["__metadata__"]["attnlab"])
    meta["tensors"]["q"]["shape"] = [L, H, N, D + 1]  # the metadata disagrees with the file
    header["__metadata__"]["attnlab"] = json.dumps(meta)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    (tmp_path / "lie.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob
                                               + raw[8 + n:])
    with pytest.raises(TraceFormatError, match="tensor 'q' is F32"):
        AttentionTrace.load(tmp_path / "lie.safetensors")
    w = torch.softmax(torch.randn(1, 1, 3, 3), -1)
    _write_v1(tmp_path / "int.safetensors", {"weights": (w * 10).long()}, _v1_meta())
    with pytest.raises(TraceFormatError, match="must be a float tensor"):
        AttentionTrace.load(tmp_path / "int.safetensors")
    _write_v1(tmp_path / "short.safetensors", {"weights": w}, _v1_meta(tokens=["a", "b"]))
    with pytest.raises(TraceFormatError, match="inconsistent trace"):
        AttentionTrace.load(tmp_path / "short.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(TraceFormatError, match="not a safetensors file"):
        AttentionTrace.load(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError):
        AttentionTrace.load(tmp_path / "missing.safetensors")


def _resave(src, dst, edit, *, digests=True):
    """Rewrite the v2 file ``src`` as ``dst`` after ``edit(tensors)``; with ``digests`` the
    metadata states the edited tensors' sha256 (a crafted file), else the old ones."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(src), "pt") as f:
        header = f.metadata()
        tensors = {n: f.get_tensor(n) for n in f.keys()}
    edit(tensors)
    meta = json.loads(header["attnlab"])
    if digests:
        for name, x in tensors.items():
            meta["tensors"][name]["sha256"] = trace_file._sha256(x.contiguous())
    save_file(tensors, str(dst), metadata={"attnlab": json.dumps(meta)})
    return dst


def test_a_changed_tensor_is_refused_by_its_sha256(tmp_path):
    src = _trace(ScoreShape(scale=D ** -0.5, causal=True)).save(tmp_path / "t.safetensors")

    def nudge(ts):  # one log-sum-exp a little off: rows would no longer sum to 1
        ts["lse"][1, 2, 5] += 0.01

    stale = _resave(src, tmp_path / "stale.safetensors", nudge, digests=False)
    with pytest.raises(TraceFormatError, match="tensor 'lse' does not match the sha256"):
        AttentionTrace.load(stale)
    same = _resave(src, tmp_path / "same.safetensors", lambda ts: None, digests=False)
    assert torch.equal(AttentionTrace.load(same).lse, AttentionTrace.load(src).lse)
    no_digest = _resave(src, tmp_path / "none.safetensors", lambda ts: None, digests=False)
    raw = no_digest.read_bytes().replace(b'\\"sha256\\"', b'\\"sha257\\"')
    no_digest.write_bytes(raw)
    with pytest.raises(TraceFormatError, match=r"tensors\.\w+\.sha256"):
        AttentionTrace.load(no_digest)


@pytest.mark.parametrize(("name", "index", "value", "message"), [
    ("q", (0, 1, 2, 3), math.nan, "tensor 'q' holds NaN"),
    ("k", (1, 0, 4, 0), math.inf, "tensor 'k' holds NaN"),
    ("v", (0, 1, 0, 2), -math.inf, "tensor 'v' holds NaN"),
    ("lse", (1, 3, 7), math.nan, "tensor 'lse' holds NaN or \\+inf"),
    ("lse", (1, 3, 7), math.inf, "tensor 'lse' holds NaN or \\+inf"),
    ("lse", (1, 3, 7), -math.inf, "tensor 'lse' is -inf on a row that sees keys"),
])
def test_non_finite_values_are_refused_naming_the_tensor(tmp_path, name, index, value,
                                                         message):
    src = _trace(ScoreShape(scale=D ** -0.5, causal=True)).save(tmp_path / "t.safetensors")

    def put(ts):
        ts[name][index] = value

    bad = _resave(src, tmp_path / "bad.safetensors", put)
    with pytest.raises(TraceFormatError, match=message):
        AttentionTrace.load(bad)
    AttentionTrace.load(_resave(src, tmp_path / "good.safetensors", lambda ts: None))


def test_lse_is_minus_infinity_exactly_on_rows_that_see_no_key(tmp_path):
    # causal with the first two keys padding: query rows 0 and 1 see no key
    km = torch.tensor([False, False] + [True] * (N - 2))
    t = _trace(ScoreShape(scale=D ** -0.5, causal=True, key_mask=km))
    assert bool((t.lse[:, :, :2] == -math.inf).all()) and bool(t.lse[:, :, 2:].isfinite().all())
    back = AttentionTrace.load(t.save(tmp_path / "t.safetensors"))
    assert torch.equal(back.weights_rows(0, 0, [0, 1]), torch.zeros(2, N))


def test_v1_weights_must_be_distributions(tmp_path):
    w = torch.softmax(torch.randn(2, 3, 3, 3), -1)
    w[1, 2, 0] = 0.0  # a row that sees no key
    _write_v1(tmp_path / "ok.safetensors", {"weights": w}, _v1_meta())
    assert torch.equal(AttentionTrace.load(tmp_path / "ok.safetensors").weights, w)
    for where, value, message in [((0, 1, 2, 0), math.nan, "holds NaN"),
                                  ((0, 1, 2, 0), -0.25, "negative"),
                                  ((1, 0, 1, 1), 0.9, "do not sum to 1")]:
        bad = w.clone()
        bad[where] = value
        _write_v1(tmp_path / "bad.safetensors", {"weights": bad}, _v1_meta())
        with pytest.raises(TraceFormatError, match=f"tensor 'weights' .*{message}"):
            AttentionTrace.load(tmp_path / "bad.safetensors")
    q = torch.randn(2, 3, 3, 4)
    q[0, 0, 0, 0] = math.inf
    _write_v1(tmp_path / "q.safetensors", {"weights": w, "q": q, "k": q.abs()}, _v1_meta())
    with pytest.raises(TraceFormatError, match="tensor 'q' holds NaN"):
        AttentionTrace.load(tmp_path / "q.safetensors")
