"""A streamed (version-5) trace opened memory-mapped: each layer's chunk of a tensor is checked
against its own sha256 the first time an on-demand method reads it, so a corrupt layer is
found when read and names the tensor and the layer; the other layers read as before;
verify() and load() check every layer; a manifest without its layer digests is refused."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from attnlab.tracing.attention import AttentionTrace, TraceFormatError
from attnlab.tracing.tracer import trace

transformers = pytest.importorskip("transformers")

from random_models import random_llama  # noqa: E402  (tests/random_models.py)
from trace_files import flip_layer_bit  # noqa: E402  (tests/trace_files.py)


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    model = random_llama(layers=4, heads=4, kv_heads=2, hidden=32, positions=128)
    path = tmp_path_factory.mktemp("v5") / "t.safetensors"
    ids = torch.randint(1, 97, (64,), generator=torch.Generator().manual_seed(3)).tolist()
    trace(model, ids, out=path)
    return path, trace(model, ids)


_flip = flip_layer_bit


def _rewrite(path, out, edit):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = json.loads(header["__metadata__"]["attnlab"])
    edit(meta)
    header["__metadata__"]["attnlab"] = json.dumps(meta)
    blob = json.dumps(header).encode()
    blob += b" " * (n - len(blob))
    assert len(blob) == n  # the header's room holds the edit
    out.write_bytes(raw[:8] + blob + raw[8 + n:])
    return out


def test_a_corrupt_layer_is_found_when_first_read_naming_tensor_and_layer(streamed, tmp_path):
    path, memory = streamed
    bad = _flip(path, tmp_path / "bad.safetensors", "q", 2)
    t = AttentionTrace.open(bad)  # the header is fine: nothing read yet
    assert torch.equal(t.weights_rows(0, 1, [10, 63]), memory.weights_rows(0, 1, [10, 63]))
    assert torch.equal(t.pooled(3, 0, 8), memory.pooled(3, 0, 8))
    with pytest.raises(TraceFormatError, match="tensor 'q' layer 2 does not match the sha256"):
        t.weights_rows(2, 0, [5])
    with pytest.raises(TraceFormatError, match="tensor 'q' layer 2"):
        t.weights_tile(2, 3, range(4), range(4))  # still refused, whichever head
    with pytest.raises(TraceFormatError, match="tensor 'q' layer 2"):
        t.verify()
    with pytest.raises(TraceFormatError, match="tensor 'q' layer 2"):
        AttentionTrace.load(bad)
    # the intact file: the same reads pass, and each chunk read was checked, once
    good = AttentionTrace.open(path)
    assert torch.equal(good.weights_rows(2, 0, [5]), memory.weights_rows(2, 0, [5]))
    assert {("q", 2), ("k", 2), ("lse", 2)} <= good._layer_digests.checked()
    assert ("q", 1) not in good._layer_digests.checked()
    assert good.verify() is good


def test_every_tensor_and_every_reader_is_checked(streamed, tmp_path):
    path, _ = streamed
    for name, layer, read in [
            ("k", 3, lambda t: t.topk(3, 2, 40, 5)),
            ("lse", 1, lambda t: t.head_weights(1, 0)),
            ("v", 0, lambda t: t.value_weighted_rows(0, 1, [3])),
            ("out_proj", 2, lambda t: t.value_weighted_rows(2, None, [3]))]:
        bad = _flip(path, tmp_path / f"{name}.safetensors", name, layer, at=1)
        t = AttentionTrace.open(bad)
        with pytest.raises(TraceFormatError, match=f"tensor {name!r} layer {layer} "):
            read(t)
        read_other = AttentionTrace.open(bad)
        read_other.layer_tensor(name, (layer + 1) % 4)  # another layer of it is fine
    merged = AttentionTrace.open(_flip(path, tmp_path / "m.safetensors", "q", 1)).merge_tokens(
        [[0, 1]] + [[i] for i in range(2, 64)])
    with pytest.raises(TraceFormatError, match="tensor 'q' layer 1"):
        merged.weights_rows(1, 0, [0])  # a merged view still reads through the check


def test_a_manifest_without_its_layer_digests_is_refused(streamed, tmp_path):
    path, _ = streamed
    cases = [
        (lambda m: m["tensors"]["q"].pop("layer_sha256"), "'tensors.q.layer_sha256' must be "
         "a list of 4 sha256"),
        (lambda m: m["tensors"]["k"].update(layer_sha256=["0" * 64] * 3), "tensors.k"),
        (lambda m: m["tensors"]["lse"].update(layer_sha256=[1, 2, 3, 4]), "tensors.lse"),
    ]
    for i, (edit, message) in enumerate(cases):
        bad = _rewrite(path, tmp_path / f"e{i}.safetensors", edit)
        with pytest.raises(TraceFormatError, match=message):
            AttentionTrace.open(bad)
    # a wrong layer digest with intact bytes: the layer is refused when read
    bad = _rewrite(path, tmp_path / "w.safetensors",
                   lambda m: m["tensors"]["q"]["layer_sha256"].__setitem__(0, "0" * 64))
    t = AttentionTrace.open(bad)
    t.weights_rows(1, 0, [3])
    with pytest.raises(TraceFormatError, match="tensor 'q' layer 0"):
        t.weights_rows(0, 0, [3])


def test_layer_tensor_names_what_it_reads(streamed):
    path, memory = streamed
    t = AttentionTrace.open(path)
    assert torch.equal(t.layer_tensor("q", -1), memory.q[3])
    with pytest.raises(ValueError, match="name must be one of weights, q, k"):
        t.layer_tensor("scores", 0)
    with pytest.raises(ValueError, match="this trace holds no context"):
        t.layer_tensor("context", 0)
    with pytest.raises(IndexError, match=r"layer must be in \[0, 4\), got 4"):
        t.layer_tensor("q", 4)


def test_verify_reads_through_the_traces_own_mapping_and_counts_every_chunk(streamed, tmp_path):
    path, _ = streamed
    t = AttentionTrace.open(path)
    assert t._layer_digests.checked() == set()
    assert t.verify() is t
    every = {(n, layer) for n, d in t._layer_digests.digests.items() for layer in range(len(d))}
    assert t._layer_digests.checked() == every  # a first read after verify() hashes nothing
    # a trace checked against another file than its own maps that file: the check is the file's
    bad = _flip(path, tmp_path / "bad.safetensors", "k", 2)
    from attnlab.tracing.trace_file import verify_one

    with pytest.raises(TraceFormatError, match="tensor 'k' layer 2"):
        verify_one(bad, AttentionTrace.open(path))


def test_processes_sharing_verify_check_every_chunk_once_and_find_a_corrupt_one(streamed,
                                                                                tmp_path):
    """verify(share=(rank, world)), as the processes of a torchrun group make it together
    (attnlab.tracing.verify_across): each checks every world-th layer of each tensor, so
    that together they check every chunk exactly once, and a corrupt layer is found by the
    process whose share holds it, by none of the others."""
    path, _ = streamed
    world = 3
    shares = []
    for rank in range(world):
        t = AttentionTrace.open(path)
        assert t.verify(share=(rank, world)) is t
        shares.append(t._layer_digests.checked())
    every = {(name, layer) for name, d in AttentionTrace.open(path)._layer_digests.digests.items()
             for layer in range(len(d))}
    assert set().union(*shares) == every
    assert sum(len(s) for s in shares) == len(every)  # none twice
    assert shares[1] == {(name, layer) for name, layer in every if layer % world == 1}
    bad = _flip(path, tmp_path / "bad.safetensors", "q", 2)
    for rank in range(world):
        t = AttentionTrace.open(bad)
        if rank == 2 % world:
            with pytest.raises(TraceFormatError, match="tensor 'q' layer 2 does not match"):
                t.verify(share=(rank, world))
        else:
            assert t.verify(share=(rank, world)) is t
    for share in [(2, 2), (-1, 2), (0, 0), (0.0, 1), [0, 1]]:
        with pytest.raises(ValueError, match=r"share: expected \(rank, world\)"):
            AttentionTrace.open(path).verify(share=share)


def test_a_file_without_layer_digests_is_verified_whole_tensor_by_tensor(streamed,
                                                                           tmp_path):
    """A file without a sha256 per layer (saved whole, version 4): each tensor is checked
    whole by one process of the group (the i-th tensor, in name order, by process
    i % world), so a corrupt tensor is found by exactly one."""
    _, memory = streamed
    path = memory.save(tmp_path / "whole.safetensors")
    names = sorted(AttentionTrace.open(path)._mapped)
    assert names[:2] == ["k", "lse"]  # one tensor for each of the two processes
    for name in names[:2]:
        bad = flip_layer_bit(path, tmp_path / f"bad-{name}.safetensors", name, 1)
        found = []
        for rank in range(2):
            try:
                AttentionTrace.open(bad).verify(share=(rank, 2))
            except TraceFormatError as exc:
                assert f"tensor {name!r} does not match the sha256" in str(exc)
                found.append(rank)
        assert found == [names.index(name) % 2]
