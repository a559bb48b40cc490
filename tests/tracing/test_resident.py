"""An opened trace holds a bounded part of its file: the layer chunks read through
layer_tensor stay in the process's memory up to ``resident_bytes``, the oldest let go first
(madvise), and every read still gives the file's bits — measured in the process's own
resident file pages (``RssFile``), and against the same passes with no bound."""

from __future__ import annotations

import mmap

import pytest
import torch

from attnlab.tracing._resident import Resident
from attnlab.tracing.attention import AttentionTrace

transformers = pytest.importorskip("transformers")

from random_models import random_llama  # noqa: E402  (tests/random_models.py)

MIB = 2**20


def _rss_file() -> int:
    """This process's resident pages that are a file's (bytes)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    pytest.fail("/proc/self/status has no RssFile line")


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    from attnlab.tracing import trace

    model = random_llama(layers=6, heads=4, kv_heads=2, hidden=32, positions=256)
    ids = torch.randint(1, 97, (200,), generator=torch.Generator().manual_seed(1)).tolist()
    path = tmp_path_factory.mktemp("resident") / "t.safetensors"
    trace(model, ids, out=path)
    return path, trace(model, ids)


def _layer_bytes(t: AttentionTrace, layer: int) -> int:
    return sum(t.layer_tensor(n, layer).nbytes for n in ("q", "k", "lse"))


def test_a_pass_over_every_layer_holds_one_layer_and_gives_the_same_scores(streamed):
    from attnlab.analysis.heads import diagnose

    path, memory = streamed
    one = _layer_bytes(memory, 0)
    bounded = AttentionTrace.open(path, resident_bytes=one)
    unbounded = AttentionTrace.open(path, resident_bytes=1 << 40)
    want = diagnose(memory)
    for t in (bounded, unbounded):
        got = diagnose(t)
        for name, s in want.scores.items():
            assert torch.equal(got.scores[name], s), name
        assert torch.equal(got.similarity, want.similarity)
    # the bound: one layer's q, k and lse held, the five before let go; without it, all six
    assert bounded._resident.resident_bytes <= one
    assert {key[-1] for key in bounded._resident.held()} == {5}
    assert bounded._resident.dropped_bytes >= 5 * one
    assert unbounded._resident.resident_bytes >= 6 * one
    assert unbounded._resident.dropped_bytes == 0
    # what was let go reads back as the file's bits
    assert torch.equal(bounded.weights_rows(0, 1, [7, 199]), memory.weights_rows(0, 1, [7, 199]))


def test_verify_lets_each_layer_go_after_checking_it(streamed):
    path, _ = streamed
    t = AttentionTrace.open(path)
    assert t.verify() is t
    assert t._resident.held() == [] and t._resident.resident_bytes == 0
    assert t._resident.dropped_bytes > 0


def test_the_bound_holds_in_the_process_resident_file_pages(tmp_path):
    """A 192 MiB file read layer by layer: with a bound of one layer (32 MiB) the process
    holds about one layer of it; with none, the whole file."""
    layers, heads, n, d = 6, 4, 8192, 64
    g = torch.Generator().manual_seed(0)
    q = torch.randn(layers, heads, n, d, generator=g)
    t = AttentionTrace(tokens=["x"] * n, q=q, k=q.clone(), lse=torch.zeros(layers, heads, n),
                       causal=True)
    path = t.save(tmp_path / "big.safetensors")
    del t, q
    one = 2 * heads * n * d * 4  # a layer's q and k: 16 MiB
    grown = {}
    for limit in (one, 1 << 40):
        opened = AttentionTrace.open(path, resident_bytes=limit)
        before = _rss_file()
        total = 0.0
        for layer in range(layers):
            total += float(opened.layer_tensor("q", layer).sum())
            total += float(opened.layer_tensor("k", layer).sum())
        grown[limit] = _rss_file() - before
        opened._resident.release()
        assert _rss_file() - before < 8 * MIB  # and all of it let go on release
        del opened
    assert grown[one] < one + 24 * MIB, grown
    assert grown[1 << 40] > layers * one - 24 * MIB, grown


def test_the_layer_being_read_stays_whatever_the_bound():
    mm = mmap.mmap(-1, 8 * mmap.PAGESIZE)
    t = torch.frombuffer(mm, dtype=torch.uint8).view(2, 2, 2 * mmap.PAGESIZE)
    r = Resident(mm, limit=0)
    r.touch(("q", 0), t[0, 0])
    r.touch(("k", 0), t[0, 1])  # layer 0 is being read: both chunks stay
    assert r.held() == [("q", 0), ("k", 0)]
    r.touch(("q", 1), t[1, 0])  # a new layer: the old one goes
    assert r.held() == [("q", 1)] and r.dropped_bytes == 4 * mmap.PAGESIZE
    r.touch(("q", 1), t[1, 0])  # read again: counted once
    assert r.resident_bytes == 2 * mmap.PAGESIZE
    r.touch(("copy", 1), t[1, 1].clone())  # not the mapping's bytes: not counted
    r.touch(("strided", 1), t[1, :, ::2])
    assert r.held() == [("q", 1)]
    for bad in (-1, 1.5, True, None):
        with pytest.raises(ValueError, match="limit must be an int >= 0, got"):
            Resident(mm, limit=bad)
