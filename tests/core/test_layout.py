"""Exact weights do not depend on where the bytes live (attnlab.core._layout).

A GEMM may round differently when its operands start at another address (seen on AMD
EPYC with AVX-512: a trace read from a file, its tensors 8 bytes past a 64-byte boundary,
gave weights 9.5e-7 away from the same trace in memory). Two kinds of check:

* the mechanism: whatever the caller's placement, the operands that reach a GEMM (torch's
  matmul family, or the compiled kernel) sit at the same places relative to a 64-byte
  boundary as for freshly allocated inputs — a spy records (call, shape, address mod 64)
  of each, and the check fails if any entry point forgets :func:`aligned` (shown by the
  wrong variant below, which passes misplaced views straight through);
* the result: misaligned views (a tensor placed at a byte offset of a larger buffer) give
  bit-identical weights, rows, tiles, pooled maps and log-sum-exps, on the kernel and on
  the PyTorch path, and a trace read back from a file has its tensors aligned.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.core import _kernel
from attnlab.core._layout import ALIGNMENT, aligned, is_aligned
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.core.scores import ScoreShape, attend, row_logsumexp
from attnlab.core.weights import attention_weights, pooled_attention_map, shaped_weights
from attnlab.tracing import AttentionTrace

OFFSETS = (4, 8, 16, 32, 60)  # bytes past a 64-byte boundary (float32: 1, 2, 4, 8, 15 elems)


def placed(t: torch.Tensor, offset_bytes: int) -> torch.Tensor:
    """A copy of ``t`` (contiguous) that starts ``offset_bytes`` past a 64-byte boundary."""
    step = t.element_size()
    assert offset_bytes % step == 0
    buf = torch.empty(t.numel() + ALIGNMENT // step + offset_bytes // step, dtype=t.dtype)
    start = (-buf.data_ptr() % ALIGNMENT + offset_bytes) // step
    view = buf[start: start + t.numel()].view(t.shape)
    view.copy_(t)
    assert view.data_ptr() % ALIGNMENT == offset_bytes
    return view


class _Spy:
    """Records the placement of every tensor handed to GEMM-calling functions."""

    GEMMS = ("matmul", "bmm", "baddbmm", "mm")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, tuple[int, ...], int]] = []
        for name in self.GEMMS:
            real = getattr(torch, name)
            monkeypatch.setattr(torch, name, self._wrap(name, real))
        real_mm = torch.Tensor.__matmul__
        monkeypatch.setattr(torch.Tensor, "__matmul__",
                            lambda a, b: (self._see("@", a, b), real_mm(a, b))[1])
        real_get = _kernel.get
        spy = self

        class Ops:
            def __init__(self, ops):
                self._ops = ops

            def __getattr__(self, name):
                fn = getattr(self._ops, name)
                return lambda *a, **k: (spy._see(f"kernel.{name}", *a), fn(*a, **k))[1]

        monkeypatch.setattr(_kernel, "get", lambda *a, **k: (
            None if (ops := real_get(*a, **k)) is None else Ops(ops)))

    def _see(self, where: str, *args) -> None:
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
                self.seen.append((where, tuple(a.shape), a.data_ptr() % ALIGNMENT))

    def run(self, fn, *args) -> list[tuple[str, tuple[int, ...], int]]:
        self.seen = []
        fn(*args)
        return self.seen

    def _wrap(self, name, real):
        return lambda *a, **k: (self._see(name, *a, *k.values()), real(*a, **k))[1]


def _inputs(seed=0, h=3, lq=37, lk=37, d=24):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(h, lq, d, generator=g)
    k = torch.randn(h, lk, d, generator=g)
    v = torch.randn(h, lk, d, generator=g)
    return q, k, v


def _all_results(q, k, v):
    """Every entry point that multiplies q by k, on (possibly misplaced) inputs."""
    shape = ScoreShape(scale=0.2, causal=True)
    capped = ScoreShape(scale=0.2, causal=True, softcap=5.0)
    lse = row_logsumexp(q, k, shape)
    out, lse_t = scaled_dot_product_attention(q[None], k[None], v[None], causal=True,
                                              scale=0.2, return_lse=True)
    return {
        "row_logsumexp": lse,
        "attend": attend(q, k, v, capped)[0],
        "sdpa": out, "sdpa lse": lse_t,
        "attention_weights": attention_weights(q, k, lse, causal=True, scale=0.2),
        "pooled_attention_map": pooled_attention_map(q, k, lse, causal=True, scale=0.2,
                                                     size=4),
        "shaped_weights rows": shaped_weights(q[1, 5:9], k[1], lse[1, 5:9], shape,
                                              rows=range(5, 9), lq=37, lk=37),
        "shaped_weights softcap": shaped_weights(q[0], k[0], lse[0], capped,
                                                 rows=range(37), lq=37, lk=37),
        "scores": shape.scores(q[2], k[2], rows=range(37), lq=37, lk=37),
    }


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "pytorch"])
def test_every_gemm_operand_is_aligned_whatever_the_callers_placement(monkeypatch, kernel):
    if not kernel:
        monkeypatch.setitem(_kernel._state, "tried", True)  # as ATTNLAB_NO_KERNEL=1 leaves it
        monkeypatch.setitem(_kernel._state, "ops", None)
    q, k, v = _inputs()
    spy = _Spy(monkeypatch)
    fresh = spy.run(_all_results, q, k, v)
    assert any(w.startswith("kernel.") for w, _, _ in fresh) == (kernel and _kernel.get()
                                                                  is not None)
    for offset in OFFSETS:
        assert spy.run(_all_results, *[placed(t, offset) for t in (q, k, v)]) == fresh


def test_the_spy_catches_an_entry_point_that_forgets_alignment(monkeypatch):
    """The wrong variant: ``aligned`` made a no-op, misplaced operands reach the GEMM."""
    import attnlab.core.scores as scores_mod
    import attnlab.core.weights as weights_mod

    for mod in (scores_mod, weights_mod):
        monkeypatch.setattr(mod, "aligned", lambda t: t)
    q, k, v = _inputs()
    spy = _Spy(monkeypatch)
    fresh = spy.run(_all_results, q, k, v)
    assert spy.run(_all_results, *[placed(t, 8) for t in (q, k, v)]) != fresh


@pytest.mark.parametrize("offset", OFFSETS)
def test_misplaced_inputs_give_the_same_bits(offset):
    q, k, v = _inputs(seed=offset)
    fresh = _all_results(q, k, v)
    moved = _all_results(*[placed(t, offset) for t in (q, k, v)])
    for name, ref in fresh.items():
        assert torch.equal(moved[name], ref), name


def test_aligned_copies_only_what_is_misplaced():
    t = torch.randn(5, 7)
    assert aligned(t) is t
    m = placed(t, 4)
    a = aligned(m)
    assert a is not m and is_aligned(a) and torch.equal(a, m)
    leaf = placed(t, 4).requires_grad_()
    aligned(leaf).sum().backward()  # differentiable, like clone
    assert torch.equal(leaf.grad, torch.ones_like(t))


def test_a_trace_read_back_is_aligned_and_gives_the_same_bits(tmp_path):
    layers, heads, n, d = 2, 3, 37, 24  # n·d·4 bytes is not a multiple of 64
    g = torch.Generator().manual_seed(3)
    q = torch.randn(layers, heads, n, d, generator=g)
    k = torch.randn(layers, heads, n, d, generator=g)
    v = torch.randn(layers, heads, n, d, generator=g)
    shapes = [ScoreShape(scale=d ** -0.5, causal=True)] * layers
    lse = torch.stack([row_logsumexp(q[i], k[i], shapes[i]) for i in range(layers)])
    fresh = AttentionTrace(tokens=[f"t{i}" for i in range(n)], q=q, k=k, v=v, lse=lse,
                           shapes=shapes, model="toy")
    # the same trace from tensors placed 8 bytes past a boundary, and read from a file
    moved = AttentionTrace(tokens=fresh.tokens, q=placed(q, 8), k=placed(k, 8),
                           v=placed(v, 8), lse=placed(lse, 8), shapes=shapes, model="toy")
    back = AttentionTrace.load(fresh.save(tmp_path / "t.safetensors"))
    assert all(is_aligned(t) for t in (back.q, back.k, back.v, back.lse))
    for other in (moved, back):
        for layer in range(layers):
            for head in range(heads):
                assert torch.equal(other.weights_rows(layer, head, [0, 17, 36]),
                                   fresh.weights_rows(layer, head, [0, 17, 36]))
                assert torch.equal(other.weights_tile(layer, head, slice(3, 30), slice(1, 20)),
                                   fresh.weights_tile(layer, head, slice(3, 30), slice(1, 20)))
                assert torch.equal(other.pooled(layer, head, 5), fresh.pooled(layer, head, 5))
        assert torch.equal(other.weights, fresh.weights)
