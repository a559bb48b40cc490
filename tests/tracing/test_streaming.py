"""Streamed traces (format version 5): capture(out=...) and trace(out=...) write each layer to
the file as it is recorded. The file's tensors equal the in-memory trace's bit for bit, the
merge and the labels are in its header, it is written atomically, what a file laid out from
the first layer cannot hold is refused by name, and version-4 files still open."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import trace_file, trace_stream
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.capture import capture
from attnlab.tracing.tracer import trace

transformers = pytest.importorskip("transformers")

from random_models import random_llama  # noqa: E402  (tests/random_models.py)

TENSORS = ("q", "k", "v", "lse", "context", "out_proj")


def _header(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return n, header, json.loads(header["__metadata__"]["attnlab"])


def _same(a: AttentionTrace, b: AttentionTrace) -> None:
    for name in TENSORS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and torch.equal(x, y), name
    assert [s.describe() for s in a.shapes] == [s.describe() for s in b.shapes]
    assert (a.tokens, a.token_ids, a.groups, a.meta) == (b.tokens, b.token_ids, b.groups, b.meta)


@pytest.fixture(scope="module")
def llama():
    return random_llama(layers=3, heads=4, kv_heads=2, hidden=32, positions=256)


def test_a_streamed_trace_equals_the_in_memory_trace_bit_for_bit(llama, tmp_path):
    ids = torch.randint(1, 97, (120,), generator=torch.Generator().manual_seed(0)).tolist()
    memory = trace(llama, ids, context=True)
    path = tmp_path / "s.safetensors"
    streamed = trace(llama, ids, context=True, out=path)
    assert streamed.opened_from == path and sorted(p.name for p in tmp_path.iterdir()) == [
        "s.safetensors"]  # no temp file left beside it
    _same(streamed, memory)
    for layer, head, rows in [(0, 0, [0, 7, 119]), (2, 3, range(60, 90))]:
        assert torch.equal(streamed.weights_rows(layer, head, rows),
                           memory.weights_rows(layer, head, rows))
    _, _, meta = _header(path)
    assert meta["format_version"] == trace_file.STREAM_FORMAT_VERSION == 5
    _same(AttentionTrace.load(path), memory)  # load checks every digest too
    assert streamed.verify() is streamed
    # the comparison can fail: another input's trace differs
    other = trace(llama, ids[::-1], context=True)
    assert not torch.equal(other.q, streamed.q)


def test_the_merge_and_the_labels_are_in_the_header(llama, tmp_path):
    ids = list(range(1, 31))
    groups = [[0], [1, 2], [3]] + [[i] for i in range(4, 30)]
    labels = ["a", "bc"] + [f"t{i}" for i in range(3, 30)]
    merge = (groups, labels, "pieces merged")
    with torch.no_grad(), capture(llama) as cap:
        llama(torch.tensor([ids]))
    memory = cap.trace(tokens=[f"p{i}" for i in range(30)], token_ids=ids, text="x",
                       model="toy", meta={"k": 1}, merge=merge)
    with torch.no_grad(), capture(llama, out=tmp_path / "m.safetensors") as cap:
        llama(torch.tensor([ids]))
    streamed = cap.trace(tokens=[f"p{i}" for i in range(30)], token_ids=ids, text="x",
                         model="toy", meta={"k": 1}, merge=merge)
    assert streamed.groups == memory.groups and streamed.tokens[:2] == ["a", "bc"]
    assert streamed.meta["merged"]["rule"] == "pieces merged"
    _same(streamed, memory)
    assert torch.equal(streamed.pooled(1, 2, 4), memory.pooled(1, 2, 4))


def test_a_header_that_outgrows_its_room_moves_the_data_once(tmp_path):
    g = torch.Generator().manual_seed(1)
    nl, nh, n, d = 3, 2, 40, 8
    q, k = torch.randn(2, nl, nh, n, d, generator=g).unbind(0)
    mask = torch.ones(n, dtype=torch.bool)
    mask[:3] = False
    shapes = [ScoreShape(scale=0.3, causal=True, key_mask=mask if i != 1 else None)
              for i in range(nl)]
    lse = torch.stack([row_logsumexp(q[i], k[i], shapes[i]) for i in range(nl)])
    ref = AttentionTrace([f"token number {i}" * 50 for i in range(n)], q=q, k=k, lse=lse,
                         shapes=shapes, text="long " * 5000)
    s = trace_stream.TraceStream(tmp_path / "t.safetensors", nl, reserve=0)
    for i in range(nl):
        s.add({"q": q[i], "k": k[i], "lse": lse[i]}, shapes[i])
    room = s._start
    s.write_header(ref._file_fields())  # ~150 kB of labels: far over the room kept
    assert s._start > room
    path = s.commit()
    back = AttentionTrace.open(path).verify()
    assert back.tokens == ref.tokens and torch.equal(back.q, q) and torch.equal(back.lse, lse)
    assert back.shapes[0].key_mask is not None and back.shapes[1].key_mask is None
    _, header, meta = _header(path)
    assert [k for k in header if k.startswith("shapes.")] == ["shapes.0.key_mask"]  # once
    assert [p.name for p in tmp_path.iterdir()] == ["t.safetensors"]
    assert torch.equal(back.weights_rows(2, 1, range(n)), ref.weights_rows(2, 1, range(n)))


def test_a_failed_forward_or_finish_leaves_no_file(llama, tmp_path):
    out = tmp_path / "t.safetensors"
    out.write_bytes(b"the old file")
    with pytest.raises(RuntimeError, match="boom"):
        with torch.no_grad(), capture(llama, out=out):
            llama(torch.tensor([[1, 2, 3]]))
            raise RuntimeError("boom")
    assert out.read_bytes() == b"the old file" and len(list(tmp_path.iterdir())) == 1
    with torch.no_grad(), capture(llama, out=out) as cap:
        llama(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="tokens has 2 entries; the trace has 3"):
        cap.trace(tokens=["a", "b"])
    assert out.read_bytes() == b"the old file" and len(list(tmp_path.iterdir())) == 1


def test_what_the_first_layer_s_layout_cannot_hold_is_refused(llama, tmp_path):
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad(), capture(llama, out=tmp_path / "a.safetensors", num_layers=5) as cap:
        llama(ids)
    with pytest.raises(ValueError, match="laid out for 5 layers but the model made 3"):
        cap.trace()
    with pytest.raises(ValueError, match="laid out for 2 layers and got one more"):
        with torch.no_grad(), capture(llama, out=tmp_path / "b.safetensors", num_layers=2):
            llama(ids)
    s = trace_stream.TraceStream(tmp_path / "c.safetensors", 2)
    shape = ScoreShape(scale=1.0)
    s.add({"q": torch.zeros(2, 4, 8), "k": torch.zeros(2, 4, 8), "lse": torch.zeros(2, 4)},
          shape)
    with pytest.raises(ValueError, match=r"layer 1: k is F32 \[1, 4, 8\], the first layer's "
                                         r"was F32 \[2, 4, 8\]"):
        s.add({"q": torch.zeros(2, 4, 8), "k": torch.zeros(1, 4, 8), "lse": torch.zeros(2, 4)},
              shape)
    with pytest.raises(ValueError, match="holds 1 of the 2 layers"):
        s.write_header({})
    s.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="give out=PATH too"):
        with capture(llama, num_layers=3):
            pass


def test_encoder_decoder_models_are_refused_before_they_run(tmp_path):
    model = torch.nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1,
                                 num_decoder_layers=1, dim_feedforward=32, batch_first=True)
    with pytest.raises(ValueError, match=r"several attention stacks \(encoder, decoder, cross\)"):
        with capture(model, out=tmp_path / "t.safetensors"):
            pass
    assert list(tmp_path.iterdir()) == []


def test_dense_weights_stream_too(llama, tmp_path):
    ids = [5, 6, 7, 8, 9]
    memory = trace(llama, ids, qkv=False)
    streamed = trace(llama, ids, qkv=False, out=tmp_path / "w.safetensors")
    assert not streamed.has_qk and torch.equal(streamed.weights, memory.weights)


def test_a_version_4_file_still_opens_and_save_still_writes_it(llama, tmp_path):
    t = trace(llama, list(range(1, 50)))
    path = t.save(tmp_path / "v4.safetensors")
    _, header, meta = _header(path)
    assert meta["format_version"] == 4
    assert all("layer_sha256" not in e for e in meta["tensors"].values())
    opened = AttentionTrace.open(path).verify()
    assert opened._layer_digests is None
    assert torch.equal(opened.weights_rows(1, 0, [48]), t.weights_rows(1, 0, [48]))
    # a streamed trace saved again is a version-4 file
    again = trace(llama, list(range(1, 50)), out=tmp_path / "v5.safetensors")
    assert _header(again.save(tmp_path / "back.safetensors"))[2]["format_version"] == 4


def _byte_tokenizer():
    """A byte-level BPE without merges (no files): a Chinese character is three pieces."""
    import warnings

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    t = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.PreTrainedTokenizerFast(tokenizer_object=t)


def test_a_text_s_merged_pieces_stream_into_the_header_room_kept_for_them(tmp_path,
                                                                          monkeypatch):
    model = random_llama(layers=2, heads=2, kv_heads=1, hidden=16, vocab=256, positions=1024)
    tok = _byte_tokenizer()
    text = "注意力是一种机制 attention, \"quoted\" \\ " * 12  # 3 pieces a character
    moved = []
    original = trace_stream.TraceStream._move_data
    monkeypatch.setattr(trace_stream.TraceStream, "_move_data",
                        lambda self, start: (moved.append(start), original(self, start)))
    streamed = trace(model, text, tokenizer=tok, out=tmp_path / "t.safetensors")
    memory = trace(model, text, tokenizer=tok)
    pieces = memory.meta["merged"]["piece_ids"]
    assert streamed.groups is not None and len(streamed.groups) < len(pieces)
    assert streamed.tokens[:3] == ["注", "意", "力"]
    _same(streamed, memory)
    assert moved == []  # the tracer's estimate of the labels' room was enough

