"""Score shaping: what turns ``q·kᵀ`` into the scores a softmax sees, kept as parameters.

One head's score of query row ``i`` and key ``j``::

    s_ij = scale · q_i·k_j                                  always
    s_ij = softcap · tanh(s_ij / softcap)                   softcap (Gemma 2 style)
    s_ij = s_ij − slope_h · (p_i − j)                       ALiBi slopes (H,)
    s_ij = s_ij + bias_h[i, j]                              a dense additive bias
    s_ij = −∞  where key j is hidden from row i             causal, window, key mask

Positions are bottom-right aligned, as everywhere in attnlab: row ``i`` of ``Lq`` sits at
key position ``p_i = i + (Lk − Lq)``. ``causal`` hides keys ``j > p_i``; ``window`` hides
keys at distance ``|p_i − j| >= window``: with ``causal`` a row sees its last ``window``
keys including its own (Mistral, Gemma 2), without it a band of ``window − 1`` keys on
each side (ModernBERT's local layers); ``key_mask`` (Lk,) hides the keys marked False
(padding).

A softmax row is fixed by its scores and one number, the row's logsumexp
``lse_i = log(Σ_j exp(s_ij) + exp(sink_h))``, where ``sinks`` (H,) are learned logits of a
key without a value that joins every row of head ``h`` (gpt-oss), or (H, Lq) one per row
when a model computes them from each token; without sinks the term is absent. Any weight
is then ``exp(s_ij − lse_i)``; with a sink a row sums to less than 1, the rest being the
share the sink took.

Every rule but ``bias`` is a handful of numbers, whatever the length, so a trace can keep
them instead of an N x N mask. ``bias`` is the escape hatch for a mask no rule describes;
it is dense (H|1, Lq|1, Lk|1) and therefore meant for short inputs only.

:meth:`ScoreShape.scores` gives any tile of scores, :meth:`ScoreShape.logsumexp` a row's
lse from its scores, :func:`row_logsumexp` the lse in tiles of rows, and :func:`attend` the
whole attention with its lse, never holding more than a tile.

>>> shape = ScoreShape(scale=0.5, causal=True, window=2)
>>> q = k = torch.eye(3)
>>> shape.scores(q, k, rows=torch.arange(3), lq=3, lk=3)
tensor([[0.5000,   -inf,   -inf],
        [0.0000, 0.5000,   -inf],
        [  -inf, 0.0000, 0.5000]])
>>> out, lse = attend(q[None], k[None], torch.eye(3)[None], shape)
>>> bool(torch.allclose(torch.exp(shape.scores(q, k, rows=torch.arange(3), lq=3, lk=3)
...     - lse[0, :, None]) @ torch.eye(3), out[0]))
True
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core._checks import check_int, check_optional_int
from attnlab.core._layout import aligned

__all__ = ["ScoreShape", "row_logsumexp", "attend", "row_tiles", "TILE_BYTES", "TENSOR_FIELDS"]

#: The tensor parameters of a :class:`ScoreShape`, in the order a trace file lists them.
TENSOR_FIELDS = ("key_mask", "alibi_slopes", "bias", "sinks")

#: Bytes of float32 scores one tile holds (rows x all keys): the only memory beyond the
#: inputs that :func:`row_logsumexp` and :func:`attend` use.
TILE_BYTES = 8 << 20

_Index = Tensor | Sequence[int] | range


def _as_positions(name: str, idx: _Index, size: int, device: torch.device) -> Tensor:
    """1-D long tensor of positions in [0, size), on ``device``.

    Positions given on the host (a range, a sequence, a CPU tensor) are checked on the host
    and then copied to ``device``, so that no check reads a value back from an accelerator;
    a tensor already on another device is checked where it is."""
    if isinstance(idx, Tensor) and idx.device.type != "cpu":
        return _checked(name, idx, size).to(device)
    return _host_positions(name, idx, size).to(device)


def _host(idx: object) -> torch.device:
    """Where positions given as ``idx`` are checked: their own device for a tensor, else
    the CPU."""
    return idx.device if isinstance(idx, Tensor) else torch.device("cpu")


def _host_positions(name: str, idx: _Index, size: int) -> Tensor:
    """:func:`_as_positions` on the CPU (where reading a bound costs nothing)."""
    if isinstance(idx, range):
        return _checked(name, torch.arange(idx.start, idx.stop, idx.step), size)
    if isinstance(idx, Tensor):  # a CPU tensor (_as_positions sends the others elsewhere)
        return _checked(name, idx, size)
    return _checked(name, torch.as_tensor(idx), size)


def _checked(name: str, t: Tensor, size: int) -> Tensor:
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool:
        raise TypeError(
            f"{name} must be a 1-D sequence of int positions, got dtype {t.dtype} shape "
            f"{tuple(t.shape)}"
        )
    t = t.long()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= size):
        raise ValueError(f"{name} must lie in [0, {size}), got {t.min().item()}..{t.max().item()}")
    return t


def _finite(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        want = "a positive finite float" if positive else "a finite float"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return value


@dataclass(frozen=True, eq=False)
class ScoreShape:
    """The parameters that shape one attention's scores (see the module docstring).

    Args:
        scale: multiplies ``q·k`` (usually ``default_scale(head_dim)``).
        causal: hide keys after the query's position (bottom-right aligned).
        window: hide keys at distance ``>= window`` from the query's position: with
            ``causal`` each row sees only its last ``window`` keys (itself included),
            without it ``window − 1`` keys on either side too.
        key_mask: (Lk,) bool, True = a real key, False = padding (hidden).
        softcap: ``softcap · tanh(s / softcap)`` on the scaled scores.
        alibi_slopes: (H,) ALiBi slopes; adds ``−slope_h · (p_i − j)``.
        bias: dense additive bias broadcastable to (H, Lq, Lk); ``-inf`` hides a key.
            Only for what no rule above describes, and so only for short inputs.
        sinks: (H,) learned sink logits, or (H, Lq) one per query row: each joins its
            row's softmax as one more key without a value (it takes a share, rows sum to
            less than 1).

    >>> ScoreShape(scale=0.125, causal=True).describe()
    {'scale': 0.125, 'causal': True, 'window': None, 'softcap': None}
    >>> ScoreShape(scale=1.0, window=0)
    Traceback (most recent call last):
    ...
    attnlab.ArgumentError: window must be a positive int, got 0
    """

    scale: float
    causal: bool = False
    window: int | None = None
    key_mask: Tensor | None = None
    softcap: float | None = None
    alibi_slopes: Tensor | None = None
    bias: Tensor | None = None
    sinks: Tensor | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _finite("scale", self.scale))
        if not isinstance(self.causal, bool):
            raise TypeError(f"causal must be a bool, got {type(self.causal).__name__}")
        check_optional_int("window", self.window, minimum=1)
        km = self.key_mask
        if km is not None and (not isinstance(km, Tensor) or km.dtype != torch.bool
                               or km.dim() != 1):
            got = (f"dtype {km.dtype} shape {tuple(km.shape)}" if isinstance(km, Tensor)
                   else type(km).__name__)
            raise ValueError(f"key_mask must be a 1-D bool tensor (Lk,), got {got}")
        if self.softcap is not None:
            object.__setattr__(self, "softcap",
                               _finite("softcap", self.softcap, positive=True))
        sl = self.alibi_slopes
        if sl is not None and (not isinstance(sl, Tensor) or not sl.is_floating_point()
                               or sl.dim() != 1):
            got = (f"dtype {sl.dtype} shape {tuple(sl.shape)}" if isinstance(sl, Tensor)
                   else type(sl).__name__)
            raise ValueError(f"alibi_slopes must be a 1-D float tensor (H,), got {got}")
        sk = self.sinks
        if sk is not None and (not isinstance(sk, Tensor) or not sk.is_floating_point()
                               or sk.dim() not in (1, 2)):
            got = (f"dtype {sk.dtype} shape {tuple(sk.shape)}" if isinstance(sk, Tensor)
                   else type(sk).__name__)
            raise ValueError(f"sinks must be a float tensor (H,) or (H, Lq), got {got}")
        b = self.bias
        if b is not None and (not isinstance(b, Tensor) or not b.is_floating_point()
                              or b.dim() != 3):
            got = (f"dtype {b.dtype} shape {tuple(b.shape)}" if isinstance(b, Tensor)
                   else type(b).__name__)
            raise ValueError(
                f"bias must be a float tensor broadcastable to (H, Lq, Lk) with 3 dims, got {got}"
            )

    # -- description ----------------------------------------------------------------------

    def describe(self) -> dict[str, float | int | bool | None]:
        """The scalar parameters, JSON-ready (tensors are not included): ``scale``,
        ``causal``, ``window`` and ``softcap``. A plain dict: a trace file's header adds
        the tensors' entries to it."""
        return {"scale": self.scale, "causal": self.causal, "window": self.window,
                "softcap": self.softcap}

    def tensors(self) -> dict[str, Tensor]:
        """The tensor parameters that are set, by field name."""
        return {n: t for n in TENSOR_FIELDS if (t := getattr(self, n)) is not None}

    def same_as(self, other: object) -> bool:
        """Equal parameters (tensors compared by value)."""
        if not isinstance(other, ScoreShape) or self.describe() != other.describe():
            return False
        for n in TENSOR_FIELDS:
            a, b = getattr(self, n), getattr(other, n)
            if (a is None) != (b is None):
                return False
            if a is not None and (a.shape != b.shape or not torch.equal(a, b)):
                return False
        return True

    def check(self, *, num_heads: int, lq: int, lk: int) -> None:
        """Raise ``ValueError`` if a tensor parameter does not fit H heads, Lq x Lk scores."""
        if self.key_mask is not None and self.key_mask.shape[0] != lk:
            raise ValueError(
                f"key_mask has {self.key_mask.shape[0]} entries for {lk} keys (Lk)")
        if self.alibi_slopes is not None and self.alibi_slopes.shape[0] != num_heads:
            raise ValueError(
                f"alibi_slopes has {self.alibi_slopes.shape[0]} entries for {num_heads} heads")
        if self.sinks is not None and (self.sinks.shape[0] != num_heads or (
                self.sinks.dim() == 2 and self.sinks.shape[1] != lq)):
            raise ValueError(f"sinks of shape {tuple(self.sinks.shape)} do not fit (H,) or "
                             f"(H, Lq) = ({num_heads}, {lq})")
        if self.bias is not None:
            hb, qb, kb = self.bias.shape
            if hb not in (1, num_heads) or qb not in (1, lq) or kb not in (1, lk):
                raise ValueError(
                    f"bias of shape {tuple(self.bias.shape)} does not broadcast to (H, Lq, Lk) "
                    f"= ({num_heads}, {lq}, {lk})"
                )

    # -- tiles ----------------------------------------------------------------------------

    def key_range(self, r0: int, r1: int, *, lq: int, lk: int) -> tuple[int, int]:
        """Keys [c0, c1) outside which rows [r0, r1) see nothing (causal and window)."""
        if r1 <= r0:
            return 0, 0
        offset = lk - lq
        if self.causal:
            c1 = max(0, min(lk, r1 + offset))
        elif self.window:
            c1 = max(0, min(lk, r1 - 1 + offset + self.window))
        else:
            c1 = lk
        c0 = max(0, min(c1, r0 + offset - self.window + 1)) if self.window else 0
        return c0, c1

    def visible(self, rows: Tensor, cols: Tensor | None, *, lq: int, lk: int) -> Tensor | None:
        """Bool (R, C): which keys each row may see by the rules (None = all of them).

        ``bias`` is not a rule: its ``-inf`` entries hide keys through the scores.
        """
        keep = None
        if self.causal or self.window is not None:
            pos_q = (rows + (lk - lq))[:, None]  # (R, 1)
            pos_k = (torch.arange(lk, device=rows.device) if cols is None else cols)[None, :]
            if self.causal:
                keep = pos_k <= pos_q
            if self.window is not None:
                near = (pos_k > pos_q - self.window) & (pos_k < pos_q + self.window)
                keep = near if keep is None else keep & near
        if self.key_mask is not None:
            km = self.key_mask.to(rows.device)
            km = (km if cols is None else km[cols])[None, :]
            keep = km if keep is None else keep & km
        return keep

    def scores(self, q_rows: Tensor, k: Tensor, *, rows: _Index, cols: _Index | None = None,
               head: int | Sequence[int] | Tensor = 0, lq: int, lk: int,
               scale: float | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
        """Shaped scores, ``-inf`` where a key is hidden: (R, C) for one head, (h, R, C) for
        several; float32 unless ``dtype`` says otherwise.

        Args:
            q_rows: (R, d) the queries of ``rows``; or (h, R, d) for ``h`` heads at once.
            k: (C, d) the keys of ``cols`` (all Lk keys when ``cols`` is None); or
                (h, C, d), each head's keys.
            rows: query positions (R,) in [0, Lq); cols: key positions (C,) or None.
            head: the query head (selects the ALiBi slope and the bias); a sequence of
                ``h`` heads with 3-D inputs.
            lq, lk: the full lengths (for the bottom-right alignment).
            scale: multiplies ``q·k`` instead of :attr:`scale` (the explorer's QK view turns
                it); the soft-cap, ALiBi and bias apply after it as always.
            dtype: the floating dtype the scores are computed in (float64 for the explorer).

        >>> s = ScoreShape(scale=1.0, softcap=2.0, alibi_slopes=torch.tensor([0.5]))
        >>> s.scores(torch.ones(1, 1), torch.ones(2, 1), rows=[0], lq=1, lk=2, scale=4.0,
        ...          dtype=torch.float64)  # 2·tanh(4/2) − 0.5·(1 − j)
        tensor([[1.4281, 1.9281]], dtype=torch.float64)
        """
        if not isinstance(q_rows, Tensor) or not isinstance(k, Tensor):
            raise TypeError("q_rows and k must be tensors")
        nd = q_rows.dim()
        if nd not in (2, 3) or k.dim() != nd or q_rows.shape[-1] != k.shape[-1] or (
                nd == 3 and q_rows.shape[0] != k.shape[0]):
            raise ValueError(
                f"q_rows (R, d) and k (C, d), or (h, R, d) and (h, C, d), must share h and d, "
                f"got {tuple(q_rows.shape)} and {tuple(k.shape)}"
            )
        heads = torch.as_tensor(head).long().reshape(-1)
        if heads.shape[0] != (q_rows.shape[0] if nd == 3 else 1):
            raise ValueError(f"head must be one int per head of q_rows, got {head!r}")
        # positions checked where they were given (the host, usually), then on the device
        hr = _as_positions("rows", rows, lq, _host(rows))
        hc = None if cols is None else _as_positions("cols", cols, lk, _host(cols))
        r, c = hr.to(q_rows.device), None if hc is None else hc.to(k.device)
        if r.shape[0] != q_rows.shape[-2]:
            raise ValueError(f"{r.shape[0]} rows for q_rows of shape {tuple(q_rows.shape)}")
        if k.shape[-2] != (lk if c is None else c.shape[0]):
            raise ValueError(
                f"k has {k.shape[-2]} keys, expected {lk if c is None else c.shape[0]}"
                f" ({'all Lk keys' if c is None else 'one per col'})"
            )
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        scale = self.scale if scale is None else _finite("scale", scale)
        q_rows, k = aligned(q_rows), aligned(k)  # rounding independent of placement
        return self._scores(q_rows, k, r, c,
                            heads.to(q_rows.device) if nd == 3 else int(heads[0]), lq, lk,
                            scale=scale, dtype=dtype, hr=hr, hc=hc)

    def _scores(self, q_rows: Tensor, k: Tensor, r: Tensor, c: Tensor | None,
                head: int | Tensor, lq: int, lk: int, *, scale: float | None = None,
                dtype: torch.dtype = torch.float32, hr: Tensor | None = None,
                hc: Tensor | None = None) -> Tensor:
        """:meth:`scores` on checked arguments (r, c: long tensors on the scores' device;
        ``head`` an int for 2-D inputs, a (h,) long tensor for 3-D ones). ``hr``, ``hc``:
        the same positions on the host, where the causal band is read without a sync (r
        and c when not given)."""
        scale = self.scale if scale is None else scale
        s = torch.matmul(q_rows.to(dtype), k.to(dtype).transpose(-2, -1)).mul_(scale)
        if self.softcap is not None:
            s = s.div_(self.softcap).tanh_().mul_(self.softcap)
        if self.alibi_slopes is not None:
            s = s.sub_(self._alibi(self.alibi_slopes, r, c, head, lq, lk, s.dim() == 3, s.dtype))
        if self.bias is not None:
            s = s.add_(self._bias(self.bias, r, c, head, s.dim() == 3, s.dtype))
        band = self._causal_band(r if hr is None else hr, c if hc is None else hc, lq=lq,
                                 lk=lk)
        if band is not None:  # only the columns some row may not see are masked
            j0 = band
            tail = torch.arange(j0, lk, device=r.device) if c is None else c[j0:]
            keep = self.visible(r, tail, lq=lq, lk=lk)
            if keep is not None:  # (always: a causal band is a rule)
                s[..., j0:].masked_fill_(~keep, float("-inf"))
            return s
        keep = self.visible(r, c, lq=lq, lk=lk)
        if keep is not None:
            s = s.masked_fill_(~keep, float("-inf"))
        return s

    @staticmethod
    def _alibi(slopes: Tensor, r: Tensor, c: Tensor | None, head: int | Tensor, lq: int,
               lk: int, several: bool, dtype: torch.dtype) -> Tensor:
        """``slope_h · (p_i − j)`` (R, C), or (h, R, C) for ``several`` heads: the ALiBi
        distance penalty that :meth:`scores` subtracts."""
        pos_q = (r + (lk - lq))[:, None]
        pos_k = (torch.arange(lk, device=r.device) if c is None else c)[None, :]
        slope = slopes.to(r.device, dtype)[head]
        if several:
            slope = slope[:, None, None]
        return (pos_q - pos_k).to(dtype) * slope

    @staticmethod
    def _bias(b: Tensor, r: Tensor, c: Tensor | None, head: int | Tensor, several: bool,
              dtype: torch.dtype) -> Tensor:
        """The dense bias of rows ``r`` and keys ``c`` (all keys when None), broadcastable
        to (R, C), or to (h, R, C) for ``several`` heads."""
        # b: the shape's bias (H|1, Lq|1, Lk|1)
        if b.shape[0] > 1:
            b = b[head]  # (Lq|1, Lk|1), or (h, Lq|1, Lk|1) for several heads
        elif not several:
            b = b[0]
        b = b.index_select(-2, r.to(b.device)) if b.shape[-2] > 1 else b
        if c is not None and b.shape[-1] > 1:
            b = b.index_select(-1, c.to(b.device))
        return b.to(r.device, dtype)

    # -- one head's rows, as the explorer shows them ----------------------------------------

    def additive(self, rows: _Index, *, head: int = 0, lq: int, lk: int,
                 dtype: torch.dtype = torch.float64) -> Tensor | None:
        """(R, Lk) what :meth:`scores` adds after the soft-cap for ``rows`` of one head:
        ``−slope_h · (p_i − j)`` plus the dense bias (``-inf`` where the bias hides a key);
        None when the shape has neither. A page that recomputes a row from ``q·k`` at its
        own scale adds this to ``softcap · tanh(scale · q·k / softcap)``.

        >>> ScoreShape(scale=1.0, alibi_slopes=torch.tensor([0.5, 0.25])).additive(
        ...     [2], head=1, lq=3, lk=3)
        tensor([[-0.5000, -0.2500,  0.0000]], dtype=torch.float64)
        >>> ScoreShape(scale=1.0).additive([0], lq=1, lk=1) is None
        True
        """
        if self.alibi_slopes is None and self.bias is None:
            return None
        r = _as_positions("rows", rows, lq, torch.device("cpu"))
        out = torch.zeros(r.shape[0], lk, dtype=dtype)
        if self.alibi_slopes is not None:
            out = out.sub_(self._alibi(self.alibi_slopes, r, None, head, lq, lk, False, dtype))
        if self.bias is not None:
            out = out.add_(self._bias(self.bias, r, None, head, False, dtype))
        return out

    def sink_logits(self, rows: _Index, *, head: int = 0) -> Tensor | None:
        """(R,) the learned sink logit of ``head`` for each query row (one per head, or one
        per head and row), or None when the shape has no sinks.

        >>> ScoreShape(scale=1.0, sinks=torch.tensor([0.5, 2.0])).sink_logits([0, 3], head=1)
        tensor([2., 2.])
        """
        if self.sinks is None:
            return None
        s = self.sinks[head]
        if s.dim() == 0:
            return s.expand(len(rows))
        return s[_as_positions("rows", rows, s.shape[0], s.device)]

    def probs(self, q_rows: Tensor, k: Tensor, *, rows: _Index, head: int = 0, lq: int,
              lk: int, scale: float | None = None, temperature: float = 1.0,
              dtype: torch.dtype = torch.float64) -> Tensor:
        """(R, Lk) the softmax rows of one head's ``rows`` over every key, at any ``scale``
        (default :attr:`scale`) and ``temperature``, computed in ``dtype`` (float64).

        The :meth:`scores` (capped, ALiBi and bias added, hidden keys ``-inf``) are divided
        by ``temperature``; a learned sink logit, divided by ``temperature`` too, joins each
        row's softmax and is then dropped, so the row sums to less than 1, as in the model.
        A row with no visible key (and no sink) is all zeros. At :attr:`scale` and
        temperature 1 this is the model's attention, ``exp(s − lse)``.

        >>> s = ScoreShape(scale=0.5, causal=True)
        >>> p = s.probs(torch.eye(2), torch.eye(2), rows=[0, 1], lq=2, lk=2)
        >>> [round(x, 6) for x in p[1].tolist()], p[0].tolist()  # sigmoid(0.5); causal row 0
        ([0.377541, 0.622459], [1.0, 0.0])
        >>> sunk = ScoreShape(scale=1.0, sinks=torch.tensor([0.0]))
        >>> sunk.probs(torch.zeros(1, 1), torch.zeros(1, 1), rows=[0], lq=1, lk=1).item()
        0.5
        """
        temperature = _finite("temperature", temperature, positive=True)
        check_int("head", head, minimum=None)
        if q_rows.dim() != 2:
            raise ValueError(f"q_rows must be (R, d) for one head, got {tuple(q_rows.shape)}")
        z = self.scores(q_rows, k, rows=rows, head=head, lq=lq, lk=lk, scale=scale,
                        dtype=dtype).div_(temperature)
        sink = self.sink_logits(rows, head=head)
        if sink is not None:  # one more logit in the softmax, whose share goes to no key
            z = torch.cat([z, sink.to(z.device, dtype)[:, None] / temperature], dim=-1)
            return torch.softmax(z, dim=-1)[:, :-1]
        return torch.nan_to_num(torch.softmax(z, dim=-1), nan=0.0)  # no visible key: zeros

    def logsumexp(self, s: Tensor, head: int | Sequence[int] | Tensor = 0,
                  rows: _Index | None = None) -> Tensor:
        """Each row's logsumexp from its shaped scores ``s`` (R, C), or (h, R, C) for ``h``
        heads (hidden keys ``-inf``), the sink included: ``log(Σ_j exp(s_j) + exp(sink))``.
        ``head`` selects the sink (an int, or one head per leading entry); ``rows`` (R,)
        the query rows, needed only for per-row sinks (H, Lq). A row with no visible key
        and no sink gets ``-inf``."""
        lse = torch.logsumexp(s, dim=-1)
        if self.sinks is None:
            return lse
        sink = self.sinks.to(s.device, lse.dtype)[torch.as_tensor(head, device=s.device)]
        if self.sinks.dim() == 2:  # (H, Lq): one per row
            if rows is None:
                raise ValueError("per-row sinks (H, Lq) need the rows of the scores")
            sink = sink[..., _as_positions("rows", rows, self.sinks.shape[1], s.device)]
        elif lse.dim() > sink.dim():
            sink = sink[..., None]
        return torch.logaddexp(lse, sink.expand_as(lse))

    def _causal_band(self, r: Tensor, c: Tensor | None, *, lq: int, lk: int) -> int | None:
        """For a plain causal shape over increasing rows and contiguous increasing columns:
        the first column that some row may not see (every column before it is visible to
        every row), else None (the general rule applies)."""
        if not self.causal or self.window is not None or self.key_mask is not None or (
                r.numel() == 0):
            return None
        if r.numel() > 1 and not bool((r[1:] > r[:-1]).all()):
            return None
        c0 = 0
        if c is not None:
            if c.numel() == 0 or (c.numel() > 1 and not bool((c[1:] - c[:-1] == 1).all())):
                return None
            c0 = int(c[0])
        width = lk if c is None else c.numel()
        return min(width, max(0, int(r[0]) + (lk - lq) + 1 - c0))


def row_tiles(lq: int, lk: int, tile_rows: int | None = None) -> Iterator[tuple[int, int]]:
    """(r0, r1) row ranges whose float32 scores over ``lk`` keys fit :data:`TILE_BYTES`."""
    if tile_rows is None:
        tile_rows = max(1, TILE_BYTES // max(1, 4 * lk))
    else:
        tile_rows = check_int("tile_rows", tile_rows, minimum=1)
    for r0 in range(0, lq, tile_rows):
        yield r0, min(lq, r0 + tile_rows)


def _check_heads(q: Tensor, k: Tensor, v: Tensor | None) -> tuple[int, int]:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t is None:
            continue
        if not isinstance(t, Tensor) or t.dim() != 3:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor (heads, L, dim), got {got}")
    h, h_kv = q.shape[0], k.shape[0]
    if h_kv < 1 or h % h_kv or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q (H, Lq, d) and k (H_kv, Lk, d) need H % H_kv == 0 and one d, got q "
            f"{tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if v is not None and (v.shape[0] != h_kv or v.shape[1] != k.shape[1]):
        raise ValueError(f"v must be (H_kv, Lk, dv) = ({h_kv}, {k.shape[1]}, .), got "
                         f"{tuple(v.shape)}")
    return h, h // h_kv


def _tiles(q: Tensor, k: Tensor, shape: ScoreShape, tile_rows: int | None
           ) -> Iterator[tuple[int, int, int, int, int, Tensor]]:
    """(head, r0, r1, c0, c1, scores of rows [r0, r1) and keys [c0, c1)) over every head."""
    h, group = _check_heads(q, k, None)
    lq, lk = q.shape[1], k.shape[1]
    shape.check(num_heads=h, lq=lq, lk=lk)
    for hd in range(h):
        kh = k[hd // group]
        for r0, r1 in row_tiles(lq, lk, tile_rows):
            c0, c1 = shape.key_range(r0, r1, lq=lq, lk=lk)
            hr, hc = torch.arange(r0, r1), torch.arange(c0, c1)  # the band read on the host
            rows, cols = hr.to(q.device), hc.to(q.device)
            yield hd, r0, r1, c0, c1, shape._scores(q[hd, r0:r1], kh[c0:c1], rows, cols, hd,
                                                    lq, lk, hr=hr, hc=hc)


def row_logsumexp(q: Tensor, k: Tensor, shape: ScoreShape, *,
                  tile_rows: int | None = None) -> Tensor:
    """(H, Lq) float32 logsumexp of each row of shaped scores, one tile of rows at a time.

    ``q`` (H, Lq, d), ``k`` (H_kv, Lk, d) with H a multiple of H_kv (grouped heads are
    not repeated). A head's sink logit is included (:meth:`ScoreShape.logsumexp`). A row
    with no visible key (and no sink) gets ``-inf``. Memory: one tile of scores.

    >>> q, k = torch.randn(2, 4, 5, 8).unbind(0)
    >>> lse = row_logsumexp(q, k, ScoreShape(scale=8 ** -0.5, causal=True), tile_rows=2)
    >>> from attnlab.core.masks import causal
    >>> ref = torch.logsumexp((q @ k.mT * 8 ** -0.5).masked_fill(~causal(5), float("-inf")), -1)
    >>> bool(torch.allclose(lse, ref, atol=1e-6))
    True
    """
    h, _ = _check_heads(q, k, None)
    q, k = aligned(q), aligned(k)  # rounding independent of where the bytes live
    lse = torch.full((h, q.shape[1]), float("-inf"), device=q.device)
    for hd, r0, r1, _c0, _c1, s in _tiles(q, k, shape, tile_rows):
        if s.shape[1] or shape.sinks is not None:
            lse[hd, r0:r1] = shape.logsumexp(s, hd, range(r0, r1))
    return lse


def attend(q: Tensor, k: Tensor, v: Tensor, shape: ScoreShape, *,
           tile_rows: int | None = None) -> tuple[Tensor, Tensor]:
    """Exact attention under any :class:`ScoreShape`, by tiles of rows: ``(out, lse)``.

    ``q`` (H, Lq, d), ``k`` (H_kv, Lk, d), ``v`` (H_kv, Lk, dv); returns ``out`` (H, Lq, dv)
    in float32 and ``lse`` (H, Lq). A row with no visible key gives 0 and ``lse = -inf``
    (the sink's logit with a sink). For what the core's attention cannot express (soft-cap,
    ALiBi slopes, a dense bias, sinks); memory is one tile of scores beyond the inputs.
    """
    h, group = _check_heads(q, k, v)
    q, k, v = aligned(q), aligned(k), aligned(v)  # rounding independent of placement
    lq = q.shape[1]
    out = torch.zeros(h, lq, v.shape[-1], device=q.device)
    lse = torch.full((h, lq), float("-inf"), device=q.device)
    vf = v.float()
    for hd, r0, r1, c0, c1, s in _tiles(q, k, shape, tile_rows):
        if not s.shape[1]:
            if shape.sinks is not None:
                lse[hd, r0:r1] = shape.logsumexp(s, hd, range(r0, r1))
            continue
        m = shape.logsumexp(s, hd, range(r0, r1))  # (rows,)
        lse[hd, r0:r1] = m
        p = s.sub_(m.masked_fill(m == float("-inf"), float("inf"))[:, None]).exp_()
        out[hd, r0:r1] = p @ vf[hd // group, c0:c1]
    return out, lse
