"""The trace file format module: one reader per version, the format told from the header,
traces built by the constructor given, and the stack names written once."""

from __future__ import annotations

import pytest
import torch

import attnlab.tracing.attention as attention_mod
import attnlab.tracing.stacks as stacks_mod
from attnlab.tracing import AttentionTrace, StackedTrace, TraceFormatError, _names, trace_file
from attnlab.tracing._pooling import pooled_blocks, pooled_spans, spans


def _dense(tokens, stack="self", key_tokens=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    lq, lk = len(tokens), len(key_tokens or tokens)
    w = torch.softmax(torch.randn(1, 2, lq, lk, generator=g), -1)
    return AttentionTrace(tokens, weights=w, key_tokens=key_tokens, stack=stack, model="toy")


def test_every_version_read_has_its_reader():
    newest = trace_file.STREAM_FORMAT_VERSION
    assert sorted(trace_file._READERS) == list(range(1, newest + 1))
    assert trace_file.FORMAT_VERSION == 4 and newest == 5  # save() writes 4, streaming 5
    assert attention_mod.FORMAT_VERSION == trace_file.FORMAT_VERSION
    assert attention_mod.TraceFormatError is trace_file.TraceFormatError is TraceFormatError


def test_the_format_is_told_from_the_header(tmp_path):
    one = _dense(list("abc")).save(tmp_path / "one.safetensors")
    st = StackedTrace({"decoder": _dense(["x", "y"], "decoder"),
                       "cross": _dense(["x", "y"], "cross", list("abc"), seed=1)})
    several = st.save(tmp_path / "st.safetensors")
    assert trace_file.file_format(one) == trace_file.ONE_STACK == "attnlab.AttentionTrace"
    assert trace_file.file_format(several) == trace_file.SEVERAL_STACKS
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(TraceFormatError, match="not a safetensors file"):
        trace_file.file_format(junk)
    with pytest.raises(FileNotFoundError, match="no trace file"):
        trace_file.file_format(tmp_path / "missing.safetensors")


def test_a_trace_is_built_by_the_constructor_given(tmp_path):
    class Marked(AttentionTrace):
        pass

    t = _dense(list("abcd"))
    path = t.save(tmp_path / "t.safetensors")
    back = Marked.load(path)
    assert type(back) is Marked and back.tokens == t.tokens
    assert torch.equal(back.weights, t.weights)
    assert type(AttentionTrace.load(path)) is AttentionTrace


def test_fields_round_trip_through_save_one_and_load_one(tmp_path):
    t = _dense(list("abc"), seed=2).merge_tokens([[0, 1], [2]], ["ab", "c"])
    path = trace_file.save_one(tmp_path / "t.safetensors", t._file_fields())
    back = trace_file.load_one(path, AttentionTrace)
    assert back.tokens == ["ab", "c"] and back.groups == [[0, 1], [2]]
    assert torch.equal(back.weights, t.weights)


def test_stack_names_are_written_once():
    assert attention_mod.STACKS is _names.STACKS
    assert stacks_mod.STACK_ORDER is _names.STACK_ORDER
    assert _names.STACK_ORDER == tuple(s for s in _names.STACKS if s != "self")
    with pytest.raises(ValueError, match="stack must be one of 'self', 'encoder'"):
        _dense(["a"], stack="middle")


def test_pooling_by_tiles_equals_the_dense_block_means():
    g = torch.Generator().manual_seed(0)
    w = torch.softmax(torch.randn(7, 7, generator=g), -1)

    def tile(r0, r1):
        return w[r0:r1]

    edges = [(0, 3), (3, 6), (6, 7)]
    want = torch.tensor([[w[a:b, c:d].sum(1).mean().item() for c, d in edges]
                         for a, b in edges])
    for step in (1, 2, 7):
        assert torch.allclose(pooled_blocks(tile, 7, 7, 3, step), want, atol=1e-6)
        assert torch.allclose(pooled_spans(tile, *spans(edges, 7, 7), step), want, atol=1e-6)
    with pytest.raises(ValueError, match="blocks must be a positive int"):
        spans(0, 7, 7)
    with pytest.raises(ValueError, match="spans need Lq == Lk"):
        spans([(0, 2)], 7, 5)
