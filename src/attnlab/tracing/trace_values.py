"""The checks of a trace file's values once its tensors are read: what no model gives
(non-finite tensors, a log-sum-exp of NaN or +inf, -inf on a row that sees keys, dense
weights that are not a distribution). Used by :mod:`attnlab.tracing.trace_file` when a
trace is loaded or verified.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab.core._tiles import _all_finite
from attnlab.core.scores import TILE_BYTES, ScoreShape

__all__ = ["check_values"]


def check_values(path: Path | str, tensors: dict[str, Tensor],
                 shapes: tuple[ScoreShape, ...], error: type[Exception],
                 seen: Callable[[tuple[str, int], Tensor], None] | None = None,
                 share: tuple[int, int] = (0, 1)) -> None:
    """Refuse values no model gives: non-finite q, k, v, context or score-shape tensors,
    an ``lse`` of NaN or +inf (or -inf on a row that sees a key), dense weights that are
    not a distribution per row. ``shapes``: the built trace's score shapes; ``error``: the
    exception raised, naming ``path`` and the tensor (the format's ``TraceFormatError``);
    ``seen((name, layer), chunk)`` after each layer of q, k, v, context and out_proj is
    read (a mapped file's pages can then be let go, layer by layer). ``share=(rank,
    world)``: of q, k, v, context and out_proj, only the layers ``rank, rank + world, ...``
    (the other processes of ``world`` check the others); the rest is small and checked
    whole."""
    def bad(name: str, what: str) -> Exception:
        return error(f"{path}: tensor {name!r} {what}")

    rank, world = share
    for name in ("q", "k", "v", "context", "out_proj"):
        x = tensors.get(name)
        if x is None:
            continue
        # a layer at a time: the check's own memory is one layer's, whatever the file's size
        for layer in range(rank, x.shape[0], world):
            xl = x[layer]
            if not _all_finite(xl):
                raise bad(name, "holds NaN or infinite values")
            if seen is not None:
                seen((name, layer), xl)
    for i, s in enumerate(shapes):
        for field in ("alibi_slopes", "sinks"):
            x = getattr(s, field)
            if x is not None and not bool(torch.isfinite(x).all()):
                raise bad(f"shapes.{i}.{field}", "holds NaN or infinite values")
        if s.bias is not None and bool((s.bias.isnan() | (s.bias == math.inf)).any()):
            raise bad(f"shapes.{i}.bias", "holds NaN or +inf (only -inf hides a key)")
    lse = tensors.get("lse")
    if lse is not None:
        _check_lse(lse, tensors.get("q"), tensors.get("k"), shapes, bad)
    w = tensors.get("weights")
    if w is not None:
        tol = 1e-4 + torch.finfo(w.dtype).eps  # float32 sums; rounding of the stored values
        for layer in range(w.shape[0]):
            wl = w[layer].double()
            if not bool(torch.isfinite(wl).all()) or bool((wl < 0).any()):
                raise bad("weights", f"holds NaN, infinite or negative values (layer {layer})")
            sums = wl.sum(-1)
            sink = bool(shapes) and shapes[layer].sinks is not None
            ok = (sums <= 1 + tol) if sink else ((sums - 1).abs() <= tol).logical_or(sums == 0)
            if not bool(ok.all()):
                raise bad("weights", f"has rows that do not sum to 1 (layer {layer})")


def _check_lse(lse: Tensor, q: Tensor | None, k: Tensor | None,
               shapes: tuple[ScoreShape, ...], bad: Any) -> None:
    """``lse`` is finite, or ``-inf`` on exactly the rows whose shaped scores are all
    ``-inf`` (a row that sees no key)."""
    if any(bool((ll.isnan() | (ll == math.inf)).any()) for ll in lse):
        raise bad("lse", "holds NaN or +inf")
    if q is None or k is None:
        return
    nq, nk = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]  # query head h reads key head h // group
    step = max(1, TILE_BYTES // max(1, 4 * nk))
    empties = torch.stack([(ll == -math.inf).any(-1) for ll in lse])  # (L, H)
    for layer, head in empties.nonzero().tolist():
        empty = (lse[layer, head] == -math.inf).nonzero()[:, 0]
        for rows in empty.split(step):
            s = shapes[layer].scores(q[layer, head, rows], k[layer, head // group],
                                     rows=rows, head=head, lq=nq, lk=nk)
            if bool((s > -math.inf).any()):
                raise bad("lse", f"is -inf on a row that sees keys (layer {layer}, head "
                          f"{head})")
