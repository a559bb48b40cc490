"""A trace's on-demand computations run where its tensors are — checked without a GPU.

Mechanism (two parts, used together):

1. **The meta device.** Each computation runs on ``trace.to("meta")``: tensors with shapes
   and no data. Torch itself raises when a CPU tensor made without ``device=`` is mixed into
   most meta ops (``masked_fill``, ``add``, ``index_add_``, comparisons), and whenever a
   value is read back (``.item()``, ``int()``, ``.tolist()``, ``.numpy()``, ``.cpu()``), so a
   run that completes made no such tensor there. The result's device and shape are checked
   (the shape against the same computation on the CPU).
2. **A dispatch mode** (:class:`DeviceAudit`, a ``TorchDispatchMode``) active during the
   meta run sees every aten op with its tensor arguments. It is stricter than meta alone,
   which quietly accepts a CPU index in ``index_select``/``index`` or a CPU operand of
   ``matmul`` (CUDA does not): any op whose tensors are on two devices fails, explicit
   copies excepted (a host→device copy is an *upload*, counted; a device→host copy is a
   *read*). Every value read back from the device (``aten._local_scalar_dense``, the op
   behind ``.item()``/``int()``/``float()``/``bool()``) is counted; it fails the run unless
   the test allows reads, and on meta (no data) an allowed read answers a placeholder the
   test chooses.

Why not the dispatch mode on a CPU trace: there every tensor is on the CPU, so a tensor
made without ``device=`` is indistinguishable from a correct one; the check would be
vacuous. On meta it is not: the deliberately wrong variants below (a helper that makes
``torch.arange(n)`` without the device; positions not sent to the device; a value read
back) each make the checks fail, and one of them passes on meta alone, which is why the
mode is there.

What cannot run on meta by nature, because it reads values back, runs on meta under the
mode with reads allowed, and the reads are counted: ``rollout_rows``/``rollout`` read how
far the rollout row reaches, two numbers per layer (the placeholder answers "every key",
the conservative value); ``score_parts`` and ``band_lift`` return Python numbers. The
weights, tiles, pooled maps, top-k, head maps, dense weights and value-weighted rows read
nothing back (asserted: zero reads).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import _merge, attribution
from attnlab.tracing.attention import AttentionTrace

aten = torch.ops.aten
CPU = torch.device("cpu")
_TRANSFERS = {aten._to_copy.default, aten.copy_.default}


class DeviceAudit(TorchDispatchMode):
    """Fails any op whose tensors lie on two devices (copies apart), counts uploads and the
    values read back from ``device``; ``reads``: None (a read fails) or the placeholder a
    read of a meta tensor answers."""

    def __init__(self, device: str | torch.device, reads: float | None = None) -> None:
        super().__init__()
        self.device, self.allow = torch.device(device), reads
        self.ops = self.uploads = self.reads = 0

    def _read(self, what: str) -> None:
        self.reads += 1
        if self.allow is None:
            raise AssertionError(f"{what}: a value read back from {self.device}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        self.ops += 1
        devices = {t.device for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)}
        if func is aten._local_scalar_dense.default and args[0].device != CPU:
            self._read(str(func))
            if args[0].device.type == "meta":  # no data: the test's placeholder
                dtype = args[0].dtype
                return (bool(self.allow) if dtype == torch.bool else
                        float(self.allow) if dtype.is_floating_point else int(self.allow))
        elif func in _TRANSFERS:
            src = args[1].device if func is aten.copy_.default else args[0].device
            dst = (args[0].device if func is aten.copy_.default
                   else torch.device(kwargs.get("device") or src))
            if src == CPU and dst != CPU:
                self.uploads += 1
            elif src != CPU and dst == CPU:
                self._read(f"{func} to the CPU")
        elif len(devices) > 1:
            raise AssertionError(f"{func} mixes tensors on {sorted(map(str, devices))}")
        return func(*args, **kwargs)


# ---------------------------------------------------------------------------------------
# traces: every kind of score shape, grouped heads, values and the output projection
# ---------------------------------------------------------------------------------------

L, H, H_KV, D, DV, E = 2, 4, 2, 8, 6, 10


def _trace(shape: ScoreShape, nq: int = 12, nk: int | None = None, seed: int = 0,
           **kw: object) -> AttentionTrace:
    nk = nq if nk is None else nk
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(L, H, nq, D, generator=g)
    k = torch.randn(L, H_KV, nk, D, generator=g)
    v = torch.randn(L, H_KV, nk, DV, generator=g)
    out_proj = torch.randn(L, H, DV, E, generator=g)
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(L)])
    tokens = [f"t{i}" for i in range(nq)]
    return AttentionTrace(tokens, q=q, k=k, v=v, lse=lse, out_proj=out_proj, shapes=shape,
                          **kw)


def _key_mask(n: int) -> Tensor:
    km = torch.ones(n, dtype=torch.bool)
    km[-2:] = False  # right padding
    return km


def _traces() -> dict[str, AttentionTrace]:
    causal = _trace(ScoreShape(scale=D ** -0.5, causal=True))
    padded = _trace(ScoreShape(scale=D ** -0.5, causal=True, key_mask=_key_mask(12)))
    shaped = _trace(ScoreShape(scale=D ** -0.5, window=4, softcap=5.0,
                               alibi_slopes=torch.tensor([0.5, 0.25, 0.125, 0.0625]),
                               sinks=torch.randn(H), bias=torch.randn(1, 12, 12)), seed=1)
    windowed = _trace(ScoreShape(scale=D ** -0.5, causal=True, window=3), seed=2)
    cross = _trace(ScoreShape(scale=D ** -0.5, key_mask=_key_mask(9)), nq=7, nk=9, seed=3,
                   stack="cross", key_tokens=[f"s{i}" for i in range(9)])
    merged = padded.merge_tokens([[0], [1, 2], [3], [4, 5, 6], [7], [8], [9], [10, 11]])
    dense = AttentionTrace([f"t{i}" for i in range(12)], weights=causal.weights.clone(),
                           causal=True)
    return {"causal": causal, "padded": padded, "shaped": shaped, "windowed": windowed,
            "cross": cross, "merged": merged, "dense": dense}


TRACES = _traces()

#: The computations that return tensors: none reads a value back from the device.
TENSOR_COMPUTATIONS = {
    "weights_rows": lambda t: t.weights_rows(1, 3, [0, 2, t.seq_len - 1]),
    "weights_rows_slice": lambda t: t.weights_rows(0, 1, slice(1, None, 2)),
    "weights_tile": lambda t: t.weights_tile(1, 2, range(1, 5), [0, 3, 4]),
    "topk": lambda t: torch.stack([x.double() for x in t.topk(0, 1, t.seq_len - 1, 3)]),
    "iter_row_tiles": lambda t: torch.cat([w for _, _, w in t.iter_row_tiles(1, 0, 5)]),
    "head_weights": lambda t: t.head_weights(0, 2),
    "pooled_blocks": lambda t: t.pooled(1, 1, 3),
    "pooled_spans": lambda t: t.pooled(0, 3, [(0, 2), (2, 5), (5, t.seq_len)]),
    "weights": lambda t: t.weights,
    "value_weighted_head": lambda t: attribution.value_weighted_rows(t, 1, 2, [0, 3]),
    "value_weighted_layer": lambda t: t.value_weighted_rows(0, None, range(t.seq_len)),
}
_NEEDS_VALUES = {"value_weighted_head", "value_weighted_layer"}
_NEEDS_SPANS = {"pooled_spans"}  # spans: self-attention only


def _cases() -> list[tuple[str, str]]:
    out = []
    for tname, t in TRACES.items():
        for cname in TENSOR_COMPUTATIONS:
            if cname in _NEEDS_VALUES and t.v is None:
                continue
            if cname in _NEEDS_SPANS and t.seq_len != t.key_len:
                continue
            out.append((tname, cname))
    return out


@pytest.mark.parametrize(("trace_name", "computation"), _cases())
def test_tensor_computations_run_on_the_traces_device(trace_name: str,
                                                      computation: str) -> None:
    t, fn = TRACES[trace_name], TENSOR_COMPUTATIONS[computation]
    want = fn(t)
    meta = t.to("meta")
    with DeviceAudit("meta") as audit:
        got = fn(meta)
    assert got.device.type == "meta"
    assert got.shape == want.shape and got.dtype == want.dtype
    assert audit.reads == 0
    stored = t.groups is None and not t.weights_from_qk and computation in (
        "weights", "head_weights")  # a dense trace's own tensor: nothing to compute
    assert audit.ops > 0 or stored


# rollout reads how far its row reaches, two numbers per layer; the placeholder answers
# "every key" (the value that visits every tile)
ROLLOUTS = {
    "rollout_rows": lambda t: attribution.rollout_rows(t, [3, t.seq_len - 1], tile_rows=5),
    "rollout_value_weighted": lambda t: t.rollout_rows([0, 4], value_weighted=True),
    "rollout": lambda t: attribution.rollout(t),
}


@pytest.mark.parametrize("trace_name", ["causal", "padded", "shaped", "windowed", "merged",
                                        "dense"])
@pytest.mark.parametrize("computation", list(ROLLOUTS))
def test_rollout_runs_on_the_device_reading_two_numbers_a_layer(trace_name: str,
                                                               computation: str) -> None:
    t, fn = TRACES[trace_name], ROLLOUTS[computation]
    if computation == "rollout_value_weighted" and t.v is None:
        # a dense trace has no values: the rollout refuses it, on the device as here
        for trace in (t, t.to("meta")):
            with pytest.raises(ValueError, match="needs the trace's v"):
                fn(trace)
        return
    want = fn(t)
    meta = t.to("meta")
    with DeviceAudit("meta", reads=t.unmerged().seq_len) as audit:
        got = fn(meta)
    assert got.device.type == "meta" and got.shape == want.shape and got.dtype == want.dtype
    assert audit.reads == 2 * L


@pytest.mark.parametrize("trace_name", ["causal", "shaped", "cross", "merged"])
def test_score_parts_and_band_lift_compute_on_the_device(trace_name: str) -> None:
    t = TRACES[trace_name]
    want_parts = attribution.score_parts(t, 1, 2, t.seq_len - 1, 1, pairing="half")
    want_lift = attribution.band_lift(t, 0, 3, pairing="interleaved", tile_rows=4)
    meta = t.to("meta")
    with DeviceAudit("meta", reads=0.5) as audit:
        parts = attribution.score_parts(meta, 1, 2, t.seq_len - 1, 1, pairing="half")
        lift = attribution.band_lift(meta, 0, 3, pairing="interleaved", tile_rows=4)
    assert audit.reads > 0  # they return Python numbers: read back, by nature
    assert set(parts) == set(want_parts) and set(lift) == set(want_lift)
    assert all(math.isfinite(b["lift"]) for b in lift["bands"])


# ---------------------------------------------------------------------------------------
# the checks are not vacuous: deliberately wrong variants fail them
# ---------------------------------------------------------------------------------------


def _visible_without_device(self: ScoreShape, rows: Tensor, cols: Tensor | None, *, lq: int,
                            lk: int) -> Tensor | None:
    """ScoreShape.visible as it would be with ``torch.arange(lk)`` made on the CPU."""
    keep = None
    pos_q = (rows + (lk - lq))[:, None]
    pos_k = (torch.arange(lk) if cols is None else cols)[None, :]  # no device=: wrong
    if self.causal:
        keep = pos_k <= pos_q
    if self.key_mask is not None:
        km = self.key_mask.to(rows.device)
        km = (km if cols is None else km[cols])[None, :]
        keep = km if keep is None else keep & km
    return keep


def test_a_cpu_arange_mixed_in_fails_on_meta(monkeypatch: pytest.MonkeyPatch) -> None:
    t = TRACES["padded"]  # rows up to the last: every key, so visible() makes the positions
    right = t.weights_rows(1, 0, [0, 11])
    monkeypatch.setattr(ScoreShape, "visible", _visible_without_device)
    assert torch.equal(t.weights_rows(1, 0, [0, 11]), right)  # the CPU cannot tell
    meta = t.to("meta")
    with pytest.raises(RuntimeError, match="device"):  # torch's own check, on meta alone
        meta.weights_rows(1, 0, [0, 11])
    with pytest.raises(AssertionError, match="mixes tensors on"), DeviceAudit("meta"):
        meta.weights_rows(1, 0, [0, 11])


def test_positions_left_on_the_host_pass_meta_alone_but_not_the_audit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AttentionTrace, "_on_device", lambda self, positions: positions)
    meta = TRACES["causal"].to("meta")
    assert meta.weights_rows(0, 0, [1, 2]).device.type == "meta"  # meta alone: blind here
    with pytest.raises(AssertionError, match="index_select.*mixes tensors on"), \
            DeviceAudit("meta"):
        meta.weights_rows(0, 0, [1, 2])


def test_a_value_read_back_fails_the_tensor_computations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    merge = _merge.merge

    def merge_and_look(raw: Tensor, *args: object) -> Tensor:
        out = merge(raw, *args)
        assert float(out.sum()) >= 0  # a sync on an accelerator
        return out

    monkeypatch.setattr(_merge, "merge", merge_and_look)
    TRACES["merged"].weights_rows(0, 0, [1])  # fine on the CPU
    meta = TRACES["merged"].to("meta")
    with pytest.raises(RuntimeError, match="meta"):
        meta.weights_rows(0, 0, [1])
    with pytest.raises(AssertionError, match="read back from meta"), DeviceAudit("meta"):
        meta.weights_rows(0, 0, [1])


# ---------------------------------------------------------------------------------------
# AttentionTrace.to, device and the kernel's reason
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("trace_name", list(TRACES))
def test_to_moves_every_tensor_and_leaves_the_trace_unchanged(trace_name: str) -> None:
    t = TRACES[trace_name]
    meta = t.to(torch.device("meta"))
    assert meta is not t and meta.device.type == "meta" and t.device == CPU
    for name in ("q", "k", "v", "lse", "context", "out_proj"):
        a, b = getattr(t, name), getattr(meta, name)
        assert (a is None) == (b is None)
        if a is not None:
            assert a.device == CPU and b.device.type == "meta" and a.shape == b.shape
    for before, after in zip(t.shapes, meta.shapes, strict=True):
        assert before.describe() == after.describe()
        assert set(before.tensors()) == set(after.tensors())
        assert all(x.device.type == "meta" for x in after.tensors().values())
        assert all(x.device == CPU for x in before.tensors().values())
    assert (meta.tokens, meta.key_tokens, meta.groups, meta.stack, meta.causal) == (
        t.tokens, t.key_tokens, t.groups, t.stack, t.causal)


def test_to_cpu_round_trip_is_bit_for_bit() -> None:
    t = TRACES["padded"]
    back = t.to("cpu")
    assert back is not t and back.q is t.q  # nothing to move: shared, as Tensor.to does
    for name in ("causal", "shaped", "merged", "cross"):
        a, b = TRACES[name], TRACES[name].to("cpu")
        assert torch.equal(a.weights_rows(1, 3, range(a.seq_len)),
                           b.weights_rows(1, 3, range(b.seq_len)))
    m = TRACES["merged"]
    assert torch.equal(attribution.rollout_rows(m, [2, 7], value_weighted=True),
                       attribution.rollout_rows(m.to("cpu"), [2, 7], value_weighted=True))
    assert torch.equal(t.value_weighted_rows(0, None, [3, 9]),
                       t.to("cpu").value_weighted_rows(0, None, [3, 9]))


def test_to_refuses_what_it_cannot_do(tmp_path) -> None:  # noqa: ANN001
    t = TRACES["causal"]
    with pytest.raises(TypeError, match="device must be a torch.device"):
        t.to("nowhere")
    with pytest.raises(ValueError, match="meta device, which holds shapes only"):
        t.to("meta").to("cpu")
    path = t.save(tmp_path / "t.safetensors")
    opened = AttentionTrace.open(path)
    with pytest.raises(ValueError, match=r"AttentionTrace.load\(path\).*\.to\('meta'\)"):
        opened.to("meta")
    same = opened.to("cpu")
    assert same is not opened and torch.equal(same.weights_rows(0, 1, [4]),
                                              t.weights_rows(0, 1, [4]))


def test_a_trace_of_tensors_on_two_devices_is_refused() -> None:
    t = TRACES["padded"]
    with pytest.raises(ValueError, match=r"lse must be on the device of q \(meta\), got lse "
                                         r"on cpu"):
        AttentionTrace(t.tokens, q=t.q.to("meta"), k=t.k.to("meta"), lse=t.lse,
                       shapes=t.to("meta").shapes)
    with pytest.raises(ValueError, match=r"shapes\[0\]\.key_mask must be on the device of q"):
        AttentionTrace(t.tokens, q=t.q.to("meta"), k=t.k.to("meta"), lse=t.lse.to("meta"),
                       shapes=t.shapes)


def test_the_kernel_says_it_is_cpu_only() -> None:
    t = TRACES["causal"]
    assert t.to("meta").why_not_kernel(build=False) == (
        "the tensors are on meta, the kernel is CPU-only")
    assert TRACES["shaped"].why_not_kernel(build=False) == "the kernel has no soft-cap"
    assert "dense weights" in TRACES["dense"].why_not_kernel()
