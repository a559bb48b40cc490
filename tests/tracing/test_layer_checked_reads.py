"""Every reader of a trace's stored q, k, v, context and out_proj reads them through
``AttentionTrace.layer_tensor``, so on a streamed (version-5) trace opened memory-mapped a
layer corrupted on disk is refused when first read, naming the tensor and the layer: the
recompute and verify checks, the score's parts and band lift, the QK view (one row, the
pieces of a merged token, the page's payload), the figures, the attribution payload and
its key norms, eviction's key norms and the report's QK check. On the intact file each
reader answers as on the trace loaded in memory; and a reader that indexes a stored tensor
directly is caught by a guard on the tensors (shown to catch one)."""

from __future__ import annotations

import contextvars
import dataclasses
import math

import numpy as np
import pytest
import torch

from attnlab.analysis.eviction import key_scores
from attnlab.analysis.recompute import recompute_errors
from attnlab.report.explorer import qk_view_error
from attnlab.tracing.attention import AttentionTrace, TraceFormatError
from attnlab.tracing.attribution import band_lift
from attnlab.tracing.tracer import trace
from attnlab.tracing.verify import verify
from attnlab.viz.api import qk_data
from attnlab.viz.attribution_payload import attribution_payload, key_norms
from attnlab.viz.figures import decomposition, qk_projection
from attnlab.viz.qk import qk_payload

transformers = pytest.importorskip("transformers")

from random_models import random_llama  # noqa: E402  (tests/random_models.py)
from trace_files import flip_layer_bit  # noqa: E402  (tests/trace_files.py)

N = 24  # tokens
GROUPS = [[0], [1, 2], [3, 4, 5]] + [[i] for i in range(6, N)]  # a merge of pieces
STORED = ("q", "k", "v", "lse", "context", "out_proj")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The intact streamed file, its in-memory reference maps, a trace of another input,
    and a maker of copies with one layer of one tensor corrupted."""
    model = random_llama(layers=2, heads=4, kv_heads=2, hidden=32, positions=64)
    root = tmp_path_factory.mktemp("checked")
    ids = torch.randint(1, 97, (N,), generator=torch.Generator().manual_seed(5)).tolist()
    path = root / "t.safetensors"
    trace(model, ids, context=True, out=path)
    other = trace(model, ids[::-1], context=True)

    def corrupt(name: str, layer: int):
        return _flip(path, root / f"{name}{layer}.safetensors", name, layer)

    return path, AttentionTrace.load(path).weights, other, corrupt


def _flip(path, out, name, layer, at=5):
    """A copy of ``path`` with one bit flipped inside ``layer``'s chunk of tensor ``name``
    (made once per name and layer)."""
    return out if out.exists() else flip_layer_bit(path, out, name, layer, at)


def _merged(t: AttentionTrace) -> AttentionTrace:
    return t.merge_tokens(GROUPS)


def _figure_data(fig) -> list:
    """What a figure draws: each axes' scatter offsets and image arrays."""
    def data(x) -> torch.Tensor:
        return torch.as_tensor(np.asarray(np.ma.getdata(x)))

    return [([data(c.get_offsets()) for c in ax.collections],
             [data(im.get_array()) for im in ax.images]) for ax in fig.axes]


# (id, the tensor corrupted, its layer, the reader: trace, reference maps -> its answer)
CASES = [
    ("verify", "q", 1, lambda t, maps: verify(t, maps)),
    ("score_parts", "k", 1, lambda t, maps: t.score_parts(1, 2, 9, 4)),
    ("score_parts-merged", "q", 1, lambda t, maps: _merged(t).score_parts(1, 3, 2, 1)),
    ("band_lift", "q", 0, lambda t, maps: band_lift(t, 0, 1)),
    ("qk_data", "q", 1, lambda t, maps: qk_data(t, 1, 2, 9, top=6)),
    ("qk_data-merged", "k", 0, lambda t, maps: qk_data(_merged(t), 0, 1, 2, top=6)),
    ("qk_payload", "k", 1, lambda t, maps: qk_payload(t, [(0, 1), (1, 3)], "f32")),
    ("qk_payload-f16", "q", 0, lambda t, maps: qk_payload(t, [(0, 2)], "f16")),
    ("qk_projection", "q", 1, lambda t, maps: _figure_data(qk_projection(t, 1, 2))),
    ("decomposition", "k", 0, lambda t, maps: _figure_data(decomposition(t, 0, 3))),
    ("key_norms", "v", 0, lambda t, maps: key_norms(t)),
    # 8000 bytes: the key norms, the first head's weights, q and k, the rollout
    ("attribution_payload", "out_proj", 1,
     lambda t, maps: attribution_payload(t, budget=8000, first=(1, 2), pooled=False)),
    ("attribution_payload-merged", "q", 0,
     lambda t, maps: attribution_payload(_merged(t), budget=8000, first=(0, 1), pooled=False)),
    ("recompute-v", "v", 1, lambda t, maps: recompute_errors(t, tile_rows=8)),
    ("recompute-context", "context", 0, lambda t, maps: recompute_errors(t)),
    ("eviction-knorm", "k", 1, lambda t, maps: key_scores(t, 1, 0, "knorm", context=18)),
    ("qk_view_error", "q", 0, lambda t, maps: qk_view_error(t)),
]
IDS = [c[0] for c in CASES]


def _same(a, b) -> bool:
    """Whether two answers are equal to the bit (tensors of one dtype; NaN equals NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))))
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return type(a) is type(b) and _same(dataclasses.asdict(a), dataclasses.asdict(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_corrupt_layer_is_refused_by_every_reader(case, files):
    _, name, layer, read = case
    _, maps, _, corrupt = files
    bad = AttentionTrace.open(corrupt(name, layer))  # the header is fine: nothing read yet
    with pytest.raises(TraceFormatError, match=f"tensor {name!r} layer {layer} does not match"):
        read(bad, maps)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_intact_file_reads_as_the_loaded_trace(case, files):
    _, name, layer, read = case
    path, maps, other, _ = files
    opened = AttentionTrace.open(path)
    got = read(opened, maps)
    assert (name, layer) in opened._layer_digests.checked()  # the layer read was checked
    want = read(AttentionTrace.load(path), maps)
    assert _same(got, want)
    assert not _same(read(other, maps), want)  # the comparison can fail: another input


_INSIDE = contextvars.ContextVar("inside_layer_tensor", default=False)
_METADATA = {"dim", "size", "numel", "element_size", "is_floating_point"}
_PROPERTIES = {"shape", "dtype", "device", "ndim", "nbytes", "itemsize", "layout"}


class _Guarded(torch.Tensor):
    """A stored tensor whose values only ``AttentionTrace.layer_tensor`` may read: any other
    operation than asking its shape, dtype or size raises (the result of an allowed read
    is a plain tensor)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        prop = getattr(getattr(func, "__self__", None), "__name__", None)
        metadata = name in _METADATA or (name == "__get__" and prop in _PROPERTIES)
        if not (_INSIDE.get() or metadata):
            raise AssertionError(f"a stored tensor read around layer_tensor: {name} {prop}")
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


@pytest.fixture
def guarded(monkeypatch):
    """A function guarding a trace's stored tensors (in place, no copy), with
    ``layer_tensor`` the one reader allowed."""
    original = AttentionTrace.layer_tensor

    def layer_tensor(self, name, layer):
        token = _INSIDE.set(True)
        try:
            return original(self, name, layer)
        finally:
            _INSIDE.reset(token)

    monkeypatch.setattr(AttentionTrace, "layer_tensor", layer_tensor)

    def guard(t: AttentionTrace) -> AttentionTrace:
        for name in STORED:
            if getattr(t, name) is not None:
                setattr(t, name, getattr(t, name).as_subclass(_Guarded))
        return t

    return guard


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_reader_reads_the_stored_tensors_through_layer_tensor(case, files, guarded):
    _, _, _, read = case
    path, maps, _, _ = files
    t = guarded(AttentionTrace.load(path))
    assert _same(read(t, maps), read(AttentionTrace.load(path), maps))


def test_the_guard_catches_a_direct_read(files, guarded):
    path, _, _, _ = files
    t = guarded(AttentionTrace.load(path))
    assert t.layer_tensor("q", 1)[2, 3].shape == (t.head_dim,)  # through layer_tensor: read
    assert t.num_heads == 4 and t.q.shape[0] == 2  # the shape: no read
    for direct in (lambda: t.q[1, 2, 3], lambda: t.k[1], lambda: t.v.double(),
                   lambda: t.out_proj.sum()):
        with pytest.raises(AssertionError, match="read around layer_tensor"):
            direct()
