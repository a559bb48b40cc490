"""AttentionTrace.open: a trace file memory-mapped, read only where asked, checked in full by
verify() — against AttentionTrace.load, bit for bit, and against a corrupted file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing.attention import AttentionTrace, TraceFormatError

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from attnlab.tracing import trace

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(cfg).eval()
    t = trace(model, torch.randint(1, 97, (200,)).tolist())
    return t, t.save(tmp_path_factory.mktemp("open") / "t.safetensors")


def test_an_opened_trace_gives_the_loaded_traces_bits(saved):
    t, path = saved
    opened, loaded = AttentionTrace.open(path), AttentionTrace.load(path)
    assert opened.verify() is opened
    for layer, head, rows in [(0, 0, [0, 5, 199]), (1, 3, range(100, 140))]:
        assert torch.equal(opened.weights_rows(layer, head, rows),
                           loaded.weights_rows(layer, head, rows))
    assert torch.equal(opened.pooled(1, 2, 16), loaded.pooled(1, 2, 16))
    assert opened.meta["positional"] == t.meta["positional"]
    assert torch.equal(opened.value_weighted_rows(1, None, [150]),
                       loaded.value_weighted_rows(1, None, [150]))


def test_a_corrupt_byte_is_found_by_verify_not_by_open(saved, tmp_path):
    _, path = saved
    raw = bytearray(path.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    start, _ = header["q"]["data_offsets"]
    raw[8 + n + start + 7] ^= 0x40  # one bit of q
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(raw))
    opened = AttentionTrace.open(bad)  # the header is fine
    with pytest.raises(TraceFormatError, match="'q' does not match the sha256"):
        opened.verify()
    with pytest.raises(TraceFormatError, match="sha256"):
        AttentionTrace.load(bad)
    with pytest.raises(ValueError, match="was not opened"):
        AttentionTrace.load(path).verify()


def test_opening_a_large_trace_reads_only_what_is_asked(tmp_path):
    """A 400 MB trace opened in a fresh process: one row of one head costs a few MB.

    Only layer 2's head 1 is read: its q and k are random and its log-sum-exp exact, so the
    row read sums to 1; the other layers and heads, and v, are zeros that fill the file. The
    control, in the same process after the opened trace is dropped: loading the file and
    reading the same row raises the process's peak by the whole file."""
    g = torch.Generator().manual_seed(0)
    nl, nh, n, d = 8, 8, 8192, 64
    q = torch.zeros(nl, nh, n, d)
    k = torch.zeros(nl, nh, n, d)
    v = torch.zeros(nl, nh, n, d)
    q[2, 1] = torch.randn(n, d, generator=g)
    k[2, 1] = torch.randn(n, d, generator=g)
    shape = ScoreShape(scale=0.125, causal=True)
    lse = torch.zeros(nl, nh, n)  # exact for the head read below
    lse[2, 1] = row_logsumexp(q[2, 1:2], k[2, 1:2], shape)[0]
    path = AttentionTrace([str(i) for i in range(n)], q=q, k=k, v=v, lse=lse,
                          shapes=shape).save(tmp_path / "big.safetensors")
    assert path.stat().st_size > 350e6

    code = textwrap.dedent(f"""
        import torch
        from attnlab._proc import peak_rss_bytes  # this process's own peak (VmHWM)
        from attnlab.tracing.attention import AttentionTrace
        for how in (AttentionTrace.open, AttentionTrace.load):
            before = peak_rss_bytes()
            t = how({str(path)!r})
            row = t.weights_rows(2, 1, [{n - 1}])
            print(peak_rss_bytes() - before, float(row.sum()))
            del t, row
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    grew, total, grew_load, total_load = int(out[0]), float(out[1]), int(out[2]), float(out[3])
    assert abs(total - 1.0) < 1e-4
    assert grew < 60e6, f"opening and one row grew the process by {grew / 1e6:.0f} MB"
    assert grew_load > 350e6 and total_load == total  # the control: load reads the whole file
