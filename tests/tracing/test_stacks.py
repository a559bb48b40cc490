"""StackedTrace and load_trace: several attention stacks in one object and one file."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import (
    FORMAT_VERSION,
    AttentionTrace,
    StackedTrace,
    TraceFormatError,
    load_trace,
)

H, D = 2, 4
SRC, TGT = list("abcde"), ["x", "y", "z"]


def _qk_trace(stack, tokens, key_tokens=None, causal=False, key_mask=None, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    lq, lk = len(tokens), len(key_tokens or tokens)
    q = torch.randn(layers, H, lq, D, generator=g)
    k = torch.randn(layers, 1, lk, D, generator=g)
    v = torch.randn(layers, 1, lk, D, generator=g)
    shape = ScoreShape(scale=0.5, causal=causal, key_mask=key_mask)
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(layers)])
    return AttentionTrace(tokens, q=q, k=k, v=v, lse=lse, shapes=shape, stack=stack,
                          key_tokens=key_tokens, model="toy")


def _stacked(**kw):
    km = torch.tensor([True, True, True, True, False])  # the last source token is padding
    return StackedTrace({
        "cross": _qk_trace("cross", TGT, SRC, key_mask=km, seed=3),
        "encoder": _qk_trace("encoder", SRC, key_mask=km, layers=3, seed=1),
        "decoder": _qk_trace("decoder", TGT, causal=True, seed=2),
    }, model="toy-s2s", text="abcde", target="xyz", meta={"target_from": "given"}, **kw)


def _header(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8: 8 + n]), n, raw


def _rewrite(path, edit):
    header, n, raw = _header(path)
    meta = json.loads(header["__metadata__"]["attnlab"])
    edit(meta, header)
    header["__metadata__"]["attnlab"] = json.dumps(meta)
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])


def _assert_same_stacks(back, st):
    """``back`` holds the stacks of ``st``: the same names, text, labels, weights and v."""
    assert isinstance(back, StackedTrace) and back.names == st.names
    assert (back.model, back.text, back.target, back.meta) == (
        st.model, st.text, st.target, st.meta)
    for name in st:
        a, b = st[name], back[name]
        assert b.stack == name and b.tokens == a.tokens and b.key_tokens == a.key_tokens
        assert torch.equal(b.weights, a.weights) and torch.equal(b.v, a.v)
        assert b.causal == a.causal


def test_the_mapping_keeps_the_stacks_in_order_and_apart():
    st = _stacked()
    assert st.names == ("encoder", "decoder", "cross") and list(st) == list(st.names)
    assert len(st) == 3 and "cross" in st and "self" not in st
    assert dict(st.items())["encoder"].num_layers == 3 and st["decoder"].causal
    assert st["cross"].tokens == TGT and st["cross"].key_tokens == SRC
    assert st.model == "toy-s2s" and st.target == "xyz" and st.meta["target_from"] == "given"
    with pytest.raises(KeyError, match="holds encoder, decoder, cross"):
        st["self"]
    assert "cross: 2 layers x 2 heads, 3x5" in repr(st)


def test_round_trip_keeps_every_stack(tmp_path):
    st = _stacked()
    path = st.save(tmp_path / "s.safetensors")
    header, _, _ = _header(path)
    meta = json.loads(header["__metadata__"]["attnlab"])
    assert meta["format"] == "attnlab.StackedTrace" and meta["format_version"] == FORMAT_VERSION
    assert {n.split("/")[0] for n in header if n != "__metadata__"} == set(st.names)
    for back in (StackedTrace.load(path), load_trace(path)):
        _assert_same_stacks(back, st)
        assert torch.equal(back["encoder"].shapes[0].key_mask, st["encoder"].shapes[0].key_mask)
        assert float(back["cross"].weights[..., -1].abs().max()) == 0.0  # padding unseen


def test_one_stack_files_still_load_and_know_their_stack(tmp_path):
    t = _qk_trace("cross", TGT, SRC)
    p = t.save(tmp_path / "c.safetensors")
    back = load_trace(p)
    assert isinstance(back, AttentionTrace) and back.stack == "cross"
    assert torch.equal(back.weights, t.weights)
    # a version-3 file (no stack field) loads as the one stack of a model: "self"
    plain = _qk_trace("self", SRC)
    p3 = plain.save(tmp_path / "v3.safetensors")
    _rewrite(p3, lambda m, h: (m.update(format_version=3), m.pop("stack")))
    old = load_trace(p3)
    assert old.stack == "self" and torch.equal(old.weights, plain.weights)
    # a version-4 one-stack file with a stack no model has is refused, naming the field
    _rewrite(p, lambda m, h: m.update(stack="middle"))
    with pytest.raises(TraceFormatError, match="'stack' must be one of"):
        AttentionTrace.load(p)


def test_each_loader_refuses_the_other_kind_saying_what_to_use(tmp_path):
    ps = _stacked().save(tmp_path / "s.safetensors")
    with pytest.raises(TraceFormatError, match=r"several attention stacks.*load_trace"):
        AttentionTrace.load(ps)
    p1 = _qk_trace("self", SRC).save(tmp_path / "one.safetensors")
    with pytest.raises(TraceFormatError, match=r"one AttentionTrace.*load_trace"):
        StackedTrace.load(p1)


def test_corrupt_and_foreign_files_are_refused(tmp_path):
    from safetensors.torch import save_file

    path = _stacked().save(tmp_path / "s.safetensors")
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF  # a byte of the last tensor
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError, match=r"stack 'cross'.*sha256"):
        load_trace(bad)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, str(foreign))
    with pytest.raises(TraceFormatError, match="not an attnlab trace"):
        load_trace(foreign)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(TraceFormatError, match="not a safetensors file"):
        load_trace(junk)
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "missing.safetensors")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m, h: m.update(format_version=3), "reads 4 to"),
    (lambda m, h: m.update(format_version=FORMAT_VERSION + 1), "format_version"),
    (lambda m, h: m["stacks"].update(middle=m["stacks"]["cross"]), "'stacks' must be"),
    (lambda m, h: m["stacks"]["decoder"].update(stack="cross"), r"stack 'decoder'.*'stack'"),
    (lambda m, h: m["stacks"]["encoder"].update(tokens=[1, 2]), r"stack 'encoder'.*'tokens'"),
    (lambda m, h: m.update(target=3), "'target' must be null or a str"),
    (lambda m, h: m["stacks"]["cross"].update(tokens=["p", "q", "r"]),
     "cross stack's rows must be the decoder"),
])
def test_bad_stacked_metadata_is_refused_naming_what(tmp_path, edit, message):
    path = _stacked().save(tmp_path / "s.safetensors")
    _rewrite(path, edit)
    with pytest.raises(TraceFormatError, match=message):
        StackedTrace.load(path)


def test_a_tensor_of_no_stack_is_refused(tmp_path):
    path = _stacked().save(tmp_path / "s.safetensors")
    header, n, raw = _header(path)
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    header["stray"] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:] + bytes(8))
    with pytest.raises(TraceFormatError, match=r"\['stray'\] belong to no stack"):
        StackedTrace.load(path)


def test_bad_stacks_are_refused_naming_the_stack():
    enc = _qk_trace("encoder", SRC)
    with pytest.raises(ValueError, match="named among encoder, decoder, cross"):
        StackedTrace({"self": _qk_trace("self", SRC)})
    with pytest.raises(ValueError, match="at least one"):
        StackedTrace({})
    with pytest.raises(ValueError, match=r"stacks\['decoder'\] is a trace of stack 'encoder'"):
        StackedTrace({"decoder": enc})
    with pytest.raises(TypeError, match=r"stacks\['encoder'\] must be an AttentionTrace"):
        StackedTrace({"encoder": "trace"})
    with pytest.raises(TypeError, match="stacks must be a mapping"):
        StackedTrace([enc])
    cross = _qk_trace("cross", TGT, list("abcdf"))
    with pytest.raises(ValueError, match="cross stack's columns must be the encoder"):
        StackedTrace({"encoder": enc, "cross": cross})
    with pytest.raises(ValueError, match="stack must be one of"):
        _qk_trace("middle", SRC)
    # what is consistent is accepted: a decoder with its cross stack (nn.TransformerDecoder)
    dec = StackedTrace({"cross": _qk_trace("cross", TGT, SRC), "decoder":
                        _qk_trace("decoder", TGT, causal=True)})
    assert dec.names == ("decoder", "cross") and dec.model == "toy"


def test_merge_keeps_the_stack():
    t = _qk_trace("encoder", SRC).merge_tokens([[0, 1], [2], [3], [4]])
    assert t.stack == "encoder" and "stack='encoder'" in repr(t)


def test_a_stacked_file_opens_mapped_and_reads_as_it_loads(tmp_path):
    """StackedTrace.open maps the file: every stack's weights and values equal the loaded
    ones; each stack knows the file and its stack, and verify() passes; open_trace opens
    (not loads) a file of several stacks."""
    from attnlab.tracing import open_trace

    st = _stacked()
    path = st.save(tmp_path / "s.safetensors")
    loaded = StackedTrace.load(path)
    for opened in (StackedTrace.open(path), open_trace(path)):
        _assert_same_stacks(opened, loaded)
        for name in st:
            a, b = loaded[name], opened[name]
            assert b.opened_from == path
            assert torch.equal(b.weights_rows(1, 0, [0, 2]), a.weights_rows(1, 0, [0, 2]))
        assert opened.verify() is opened
    # the stacks share one bound on what the process holds of the file
    opened = StackedTrace.open(path, resident_bytes=1 << 20)
    assert len({id(t._resident) for t in opened.values()}) == 1


def test_an_opened_stacked_file_with_a_corrupt_tensor_is_refused_by_verify(tmp_path):
    """A flipped byte in the cross stack's last tensor: the header is sound, so open
    succeeds; verify() (and open_trace, which verifies) refuses it naming the stack and
    the sha256; the other stacks verify on their own."""
    from attnlab.tracing import open_trace

    path = _stacked().save(tmp_path / "s.safetensors")
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(bytes(raw))
    opened = StackedTrace.open(bad)
    assert opened["encoder"].verify() is opened["encoder"]
    with pytest.raises(TraceFormatError, match=r"stack 'cross'.*sha256"):
        opened.verify()
    with pytest.raises(TraceFormatError, match=r"stack 'cross'.*sha256"):
        open_trace(bad)
    assert isinstance(open_trace(bad, verify=False), StackedTrace)
    with pytest.raises(TraceFormatError, match=r"one AttentionTrace.*load_trace"):
        StackedTrace.open(_qk_trace("self", SRC).save(tmp_path / "one.safetensors"))


def test_one_stack_and_stacks_of_pass_their_kind_and_refuse_the_other():
    """What code that reads one stack (or every stack) asks of a trace: the trace itself
    when it is of that kind, a refusal naming what it got otherwise."""
    from attnlab import Error
    from attnlab.tracing import one_stack, stacks_of

    st, one = _stacked(), _qk_trace("decoder", TGT, causal=True)
    assert one_stack(one) is one and stacks_of(st) is st
    with pytest.raises(Error, match=r"the source must be one attention stack, got an "
                                    r"encoder–decoder trace of 3 stacks \(encoder, decoder, "
                                    r"cross\)"):
        one_stack(st, "the source")
    with pytest.raises(Error, match=r"trace must be an encoder–decoder model's stacked "
                                    r"trace, got AttentionTrace \(one stack\)"):
        stacks_of(one)
    with pytest.raises(TypeError, match="trace must be an AttentionTrace, got dict"):
        one_stack({"decoder": one})
