"""What the attention backends share: argument checks, the default scale, the grouped-head
layout, and the tiles of scores with their masks.

Private to :mod:`attnlab.core`. The public entry points (``scaled_dot_product_attention``,
``chunked_attention``, ``linear_attention``) check their arguments here, then hand
checked values to the backends, which trust them.

Grouped heads. ``k`` and ``v`` may have fewer heads than ``q`` (dim -3, ``H % H_kv ==
0``): query head ``h`` reads key/value head ``h // (H / H_kv)``. Inside, every backend
works on ``q4 (n_kv, G, Lq, d)``, ``k3 (n_kv, Lk, d)``, ``v3 (n_kv, Lk, dv)`` with ``G``
query heads per key head, so one GEMM serves a whole group and k/v are never repeated.
Plain attention is ``G = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import cast, overload

import torch
from torch import Tensor

from attnlab.core._checks import broadcast_shapes, check_int, check_real
from attnlab.core.masks import _band, causal, combine

# --------------------------------------------------------------------------------------
# the default scale and argument checks (public boundary)
# --------------------------------------------------------------------------------------


def default_scale(head_dim: int) -> float:
    """The scale of the scores, ``1/√d_k``: it keeps their variance at 1 for unit-variance
    q and k, whatever the head dimension (article 000's √d_k argument).

    >>> default_scale(64)
    0.125
    """
    return 1.0 / math.sqrt(check_int("head_dim", head_dim, minimum=1))


def _check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def _check_scale(scale: object, head_dim: int) -> float:
    """None -> the default; otherwise a finite, non-zero real number."""
    if scale is None:
        return default_scale(head_dim)
    return check_real("scale", scale, nonzero=True)


def _check_dropout(dropout_p: object) -> float:
    return check_real("dropout_p", dropout_p, low=0.0, high=1.0, high_open=True)


def _qkv_tensor(name: str, t: object) -> Tensor:
    """``t`` itself, checked: a floating-point tensor with at least 2 dims."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < 2:
        raise ValueError(
            f"{name} must have shape (..., L, d) with at least 2 dims, got shape "
            f"{tuple(t.shape)}"
        )
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    return t


def _check_qkv(q: object, k: object, v: object) -> tuple[tuple[int, ...], int]:
    """Checks q (..., Lq, d), k (..., Lk, d), v (..., Lk, dv).

    Returns ``(batch, group)``: the batch dims of the output (heads last) and ``G``, the
    number of query heads per key/value head (1 unless k/v have fewer heads than q).
    """
    q, k, v = _qkv_tensor("q", q), _qkv_tensor("k", k), _qkv_tensor("v", v)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k, v must be on one device, got q {q.device}, k {k.device}, v {v.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dim d, got q {tuple(q.shape)} and k "
            f"{tuple(k.shape)}"
        )
    if q.shape[-1] == 0:
        raise ValueError(f"q and k must have a head dim d >= 1, got q {tuple(q.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length Lk (dim -2), got k {tuple(k.shape)} and v "
            f"{tuple(v.shape)}"
        )
    qb, kb, vb = q.shape[:-2], k.shape[:-2], v.shape[:-2]
    try:
        kvb = broadcast_shapes(kb, vb)
    except ValueError:
        raise ValueError(
            f"batch dims of k {tuple(k.shape)} and v {tuple(v.shape)} do not broadcast"
        ) from None
    try:
        return broadcast_shapes(qb, kvb), 1
    except ValueError:
        pass
    # grouped-query attention: k/v hold H_kv heads (dim -3), each shared by H / H_kv queries
    if qb and kvb and kvb[-1] > 1 and qb[-1] > 0 and qb[-1] % kvb[-1] == 0:
        try:
            outer = broadcast_shapes(qb[:-1], kvb[:-1])
            return (*outer, qb[-1]), qb[-1] // kvb[-1]
        except ValueError:
            pass
    raise ValueError(
        f"batch dims of q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not "
        f"broadcast (grouped-query attention needs k and v with H_kv heads at dim -3 "
        f"dividing q's H)"
    )


def _check_mask(
    mask: object, scores_shape: tuple[int, ...], device: torch.device | None = None
) -> None:
    """A bool or float mask broadcastable to the scores; a float mask may hold -inf
    (blocked) but never +inf or NaN, which would turn whole rows into NaN."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"mask must be bool (True = may attend) or floating (added to the scores), got "
            f"dtype {mask.dtype}"
        )
    try:
        shape = broadcast_shapes(mask.shape, scores_shape)
    except ValueError:
        shape = None
    if shape != torch.Size(scores_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"(..., Lq, Lk) = {tuple(scores_shape)}"
        )
    if device is not None and mask.device != device:
        raise ValueError(f"mask must be on q's device {device}, got {mask.device}")
    if mask.is_floating_point() and mask.numel():
        top = mask.detach().max()  # NaN anywhere makes the max NaN: one reduction
        if not bool(top < math.inf):
            raise ValueError(
                f"a float mask may hold finite values and -inf (blocked), got "
                f"{'NaN' if bool(torch.isnan(mask).any()) else '+inf'}"
            )


def _check_inputs(q: object, k: object, v: object, mask: object
                  ) -> tuple[tuple[int, ...], int]:
    """:func:`_check_qkv`, then ``mask`` (unless None) against the scores' shape and q's
    device: the tensors every entry point takes. Returns ``(batch, group)``."""
    batch, group = _check_qkv(q, k, v)
    if mask is not None:
        q, k = cast(Tensor, q), cast(Tensor, k)  # _check_qkv checked both
        _check_mask(mask, (*batch, q.shape[-2], k.shape[-2]), q.device)
    return batch, group


# --------------------------------------------------------------------------------------
# layout and whole masks
# --------------------------------------------------------------------------------------


def _kv_batch(batch: tuple[int, ...], group: int) -> tuple[int, ...]:
    """The batch dims of k and v: ``batch`` with H / G heads last."""
    return batch if group == 1 else (*batch[:-1], batch[-1] // group)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums are kept in: float32 for half precision, else ``dtype`` itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@overload
def _flatten(
    q: Tensor, k: Tensor, v: Tensor, batch: tuple[int, ...], group: int
) -> tuple[Tensor, Tensor, Tensor]: ...
@overload
def _flatten(
    q: Tensor, k: Tensor, v: None, batch: tuple[int, ...], group: int
) -> tuple[Tensor, Tensor, None]: ...
def _flatten(
    q: Tensor, k: Tensor, v: Tensor | None, batch: tuple[int, ...], group: int
) -> tuple[Tensor, Tensor, Tensor | None]:
    """q4 (n_kv, G, Lq, d), k3 (n_kv, Lk, d), v3 (n_kv, Lk, dv): views where possible."""
    lq, d = q.shape[-2:]
    lk = k.shape[-2]
    kv_batch = _kv_batch(batch, group)
    n_kv = math.prod(kv_batch)
    q4 = q.expand(*batch, lq, d).reshape(n_kv, group, lq, d)
    k3 = k.expand(*kv_batch, lk, d).reshape(n_kv, lk, d)
    v3 = None if v is None else v.expand(*kv_batch, *v.shape[-2:]).reshape(n_kv, *v.shape[-2:])
    return q4, k3, v3


def _fold(t: Tensor) -> Tensor:
    """(n, G, rows, x) -> (n, G·rows, x): a view for G = 1 or whole rows, else a copy."""
    n, g, rows, x = t.shape
    return t[:, 0] if g == 1 else t.reshape(n, g * rows, x)


def _merged_mask(
    mask: Tensor | None, is_causal: bool, lq: int, lk: int, dtype: torch.dtype,
    device: torch.device,
) -> Tensor | None:
    """One mask (bool, or float of ``dtype``) equivalent to ``mask`` and ``causal`` together."""
    merged = combine(mask, causal(lq, lk, device=device) if is_causal else None)
    if merged is None:
        return None
    if merged.dim() < 2:  # a key mask (Lk,) or a scalar: give it its row dim
        merged = merged.reshape(1, -1)
    if merged.dtype != torch.bool and merged.dtype != dtype:
        merged = merged.to(dtype)
    return merged


def _masked_scores(q4: Tensor, k3: Tensor, merged: Tensor | None, scale: float,
                   batch: tuple[int, ...], refill: bool = True) -> Tensor:
    """Every score ``scale · Q Kᵀ + M`` (..., H, Lq, Lk) with plain (differentiable) ops,
    from q4 (n_kv, G, Lq, d), k3 (n_kv, Lk, d) and a :func:`_merged_mask`; the G query heads
    of a key head are one GEMM. A score a bool mask blocks is -inf; one a float mask blocks
    is set to -inf again when ``refill`` (see :func:`_keys_undo_mask`)."""
    n_kv, group, lq, d = q4.shape
    lk = k3.shape[-2]
    s = torch.matmul(q4.reshape(n_kv, group * lq, d), k3.transpose(1, 2))
    s = (s * scale).view(*batch, lq, lk)  # (..., H, Lq, Lk)
    if merged is None:
        return s
    if merged.dtype == torch.bool:
        return s.masked_fill(~merged, -math.inf)
    s = s + merged
    return s.masked_fill(merged == -math.inf, -math.inf) if refill else s


def _dead_rows(mask: Tensor | None) -> Tensor | None:
    """Bool (..., Lq, 1): rows where no key may be attended, or None when there are none."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        dead = ~mask.any(dim=-1, keepdim=True)
    else:
        dead = (mask == -math.inf).all(dim=-1, keepdim=True)
    return dead if bool(dead.any()) else None


def _all_finite(t: Tensor) -> bool:
    """No NaN/inf in t. One reduction, no temporary: a NaN or inf anywhere makes the sum
    non-finite; only then (or on overflow) is each entry checked. Half-precision values
    are summed in float32 (fewer overflows to settle entry by entry); twenty times as fast
    as ``torch.isfinite(t).all()`` on a layer of a trace's q.

    >>> _all_finite(torch.ones(3)), _all_finite(torch.tensor([1.0, float("nan")]))
    (True, False)
    >>> big = torch.full((2,), 3e38)  # finite values whose float32 sum overflows
    >>> bool(torch.isfinite(big.sum())), _all_finite(big)
    (False, True)
    """
    if t.is_floating_point() and bool(torch.isfinite(t.sum(dtype=torch.float32))):
        return True
    return bool(torch.isfinite(t).all())


def _keys_undo_mask(mask: Tensor | None, k3: Tensor) -> bool:
    """Whether NaN/inf in a key could undo a blocked score: a float mask blocks by adding
    -inf, which a NaN or +inf score turns back into NaN."""
    return mask is not None and mask.dtype != torch.bool and not _all_finite(k3)


def _finite_split(t: Tensor) -> tuple[Tensor, Tensor | None]:
    """(t with NaN/inf zeroed, bool map of where they were) or (t, None) if all finite."""
    if _all_finite(t):
        return t, None
    bad = ~torch.isfinite(t)
    return t.masked_fill(bad, 0.0), bad


# --------------------------------------------------------------------------------------
# tiles
# --------------------------------------------------------------------------------------

#: Bytes of scores per tile of the explicit path. Each tile is a view into the weights
#: tensor, written once by one GEMM, masked and softmaxed in place and multiplied by V
#: while it is still hot, so the size costs no memory; it trades cache residency (small)
#: against the per-call cost of torch's thread pool (large), which dominates on a busy
#: machine.
_TILE_BYTES = 32 << 20
#: Fewer rows than this per tile costs more in per-call overhead than cache misses save.
_MIN_ROWS = 32
#: Under ``causal`` the rows are cut into this many blocks (all heads at once), so that
#: the keys no row of a block may see (about 3/8 of them) are neither multiplied nor
#: exponentiated.
_CAUSAL_BLOCKS = 4


def _tile_grid(
    n: int, lq: int, lk: int, itemsize: int, causal: bool = False
) -> Iterator[tuple[int, int, int, int]]:
    """(h0, h1, r0, r1): heads [h0, h1) x query rows [r0, r1).

    Small maps go several heads at a time (all rows); large ones one head and a block of
    rows at a time, so that ``weights[h0:h1, r0:r1]`` is one contiguous piece (softmax in
    place). Under ``causal`` every head goes at once, in a few blocks of rows. For
    grouped heads pass the key heads as ``n`` and ``itemsize · G``.
    """
    per_head = max(1, lq * lk * itemsize)
    if causal and lq >= _CAUSAL_BLOCKS * _MIN_ROWS:
        rows = min(-(-lq // _CAUSAL_BLOCKS), _TILE_BYTES // max(1, n * lk * itemsize))
        rows = max(_MIN_ROWS, rows)
        for r0 in range(0, lq, rows):
            yield 0, n, r0, min(lq, r0 + rows)
        return
    if per_head <= _TILE_BYTES:
        g = max(1, _TILE_BYTES // per_head)
        for h0 in range(0, n, g):
            yield h0, min(n, h0 + g), 0, lq
        return
    rows = max(_MIN_ROWS, _TILE_BYTES // max(1, lk * itemsize))
    for h in range(n):
        for r0 in range(0, lq, rows):
            yield h, h + 1, r0, min(lq, r0 + rows)


class _MaskTiles:
    """Hands out the piece of a broadcastable mask under one tile, without expanding it.

    Heads are counted in query heads (``batch`` is the output's batch dims).
    """

    def __init__(self, mask: Tensor | None, batch: tuple[int, ...], dtype: torch.dtype) -> None:
        self.mask = None
        self.is_bool = False
        if mask is None:
            return
        self.is_bool = mask.dtype == torch.bool
        if not self.is_bool and mask.dtype != dtype:
            mask = mask.to(dtype)
        m = mask.reshape((1,) * (len(batch) + 2 - mask.dim()) + tuple(mask.shape))
        self.shared = all(s == 1 for s in m.shape[:-2])
        self.mask = m.reshape(m.shape[-2:]) if self.shared else m.expand(*batch, *m.shape[-2:])
        self.batch = batch
        self._flat: Tensor | None = None

    def tile(self, h0: int, h1: int, r0: int, r1: int, c1: int, c0: int = 0) -> Tensor | None:
        """The mask under heads [h0, h1), rows [r0, r1), keys [c0, c1); broadcastable."""
        m = self.mask
        if m is None:
            return None
        rows = slice(r0, r1) if m.shape[-2] > 1 else slice(None)
        cols = slice(c0, c1) if m.shape[-1] > 1 else slice(None)
        if self.shared:
            return m[rows, cols]
        if h1 - h0 == 1:
            idx, h = [], h0
            for s in reversed(self.batch):
                idx.append(h % s)
                h //= s
            return m[tuple(reversed(idx))][rows, cols]
        if h0 == 0 and h1 == math.prod(self.batch):
            piece = m[..., rows, cols]
            return piece.reshape(h1, *piece.shape[-2:])  # copies at most one tile
        if self._flat is None:
            self._flat = m.reshape(math.prod(self.batch), *m.shape[-2:])
        return self._flat[h0:h1, rows, cols]


def _causal_fill_(s: Tensor, r0: int, offset: int, cache: dict) -> None:
    """Set -inf where key j > query i + offset, for a tile of rows [r0, ...) and keys [0, c).

    Only the last columns of a tile hold blocked keys, and with equal-sized row blocks
    their pattern repeats: ``cache`` keeps each triangle once per call.
    """
    rows, c = s.shape[-2], s.shape[-1]
    first = max(0, r0 + offset + 1)  # first key column any row of this tile must not see
    if first < c:
        key = (rows, c - first, r0 + offset - first)
        blocked = cache.get(key)
        if blocked is None:
            blocked = cache[key] = ~_band(rows, c - first, key[2], device=s.device)
        s[..., first:].masked_fill_(blocked, -math.inf)


def _scores(
    q: Tensor, k: Tensor, tiles: _MaskTiles, h: slice, r0: int, r1: int, c0: int, c1: int,
    causal: bool, offset: int, scale: float, triangles: dict, out: Tensor | None = None,
    *, q_tile: Tensor | None = None, k_bad: bool = False,
) -> Tensor:
    """S = scale · Q[r0:r1] K[c0:c1]ᵀ with every blocked entry at -inf: (heads, rows, cols).

    ``q`` is (n, Lq, d), or (n_kv, G, Lq, d) for grouped heads, whose tile then holds the
    G query heads of each key head one after the other: (heads, G·rows, cols). ``q_tile``
    is that tile when the caller already has it; ``k_bad`` says k holds NaN/inf, which a
    float mask's -inf must still block.
    """
    group = q.shape[1] if q.dim() == 4 else 1
    rows = r1 - r0
    if q_tile is None:
        q_tile = q[h, r0:r1] if q.dim() == 3 else _fold(q[h, :, r0:r1])
    m = tiles.tile(h.start * group, h.stop * group, r0, r1, c1, c0)
    kt = k[h, c0:c1].transpose(1, 2)  # (heads, d, cols)
    float_mask = m is not None and not tiles.is_bool
    if m is not None and float_mask and group == 1:
        s = torch.baddbmm(m, q_tile, kt, alpha=scale, out=out)
    elif out is not None:
        s = torch.baddbmm(out, q_tile, kt, beta=0.0, alpha=scale, out=out)
    else:
        s = torch.bmm(q_tile, kt).mul_(scale)
    s4 = s
    if group > 1:
        s4 = s.view(s.shape[0], group, rows, s.shape[-1])
        if m is not None and m.dim() == 3:
            m = m.reshape(s.shape[0], group, *m.shape[-2:])
        if m is not None and float_mask:
            s4.add_(m)
    if m is not None and tiles.is_bool:
        s4.masked_fill_(~m, -math.inf)
    elif m is not None and float_mask and k_bad:  # NaN + (-inf) is NaN: block those keys again
        s4.masked_fill_(m == -math.inf, -math.inf)
    if causal:
        _causal_fill_(s4, r0, offset - c0, triangles)
    return s
