"""The sums behind every head score, and the scores from them: the one arithmetic.

The scores are those of :mod:`attnlab.analysis.scores` (its docstring states each
formula). Each is a ratio of two sums over query rows, so a head is scored by adding, tile
of rows by tile of rows, the float64 sums of :data:`SUMS` (:func:`tile_sums`), then
dividing (:func:`scores_from_sums`). Two callers, one arithmetic:

* the streamed scan over a trace (:func:`attnlab.analysis.scores.scan`): one head's tile of
  rows at a time, weights (T, C) as the trace gives them (float32);
* the survey (:mod:`attnlab.analysis.survey`): one layer of a padded batch of texts, every
  head at once, weights (B, H, N, N) in float64, each text's rows past its length left out
  (``lengths``; the padded keys hold no weight already, hidden by the key mask).

What a tile needs besides the weights — the query rows' key positions, the flat indices
of the single-key targets (first, previous and own token) and of the token-matching pairs
(duplicate, induction) — is a :class:`TileTargets`, built once per tile and shared by
every head.

>>> t = TileTargets(0, 3, 0, 3)
>>> s = dict(zip(SUMS, tile_sums(torch.eye(3), t).unbind(-1)))
>>> float(s["mass"]), float(s["diagonal"]), float(s["previous"]), float(s["first"])
(3.0, 3.0, 0.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["SUMS", "Occurrences", "TileTargets", "ratio", "scores_from_sums", "tile_sums"]

#: The float64 sums :func:`tile_sums` returns, in this order (the last axis): the rows'
#: mass, their entropies, largest weights, the mass on key 0 of the rows after it
#: (``sink``) and those rows' mass (``sink_mass``), the mass on the previous and the own
#: token, the distance-weighted mass, the mass on TransformerLens's duplicate and induction
#: targets, and the mass on key 0 of every row (``first``: Gu et al.'s importance of the
#: first token, times the number of rows).
SUMS = ("mass", "entropy", "max_weight", "sink", "sink_mass", "previous", "diagonal",
        "distance", "duplicate", "induction", "first")


class Occurrences:
    """Where each token of one sequence occurred before: ``ids`` sorted stably by id, so
    the earlier occurrences of the token at position p are
    ``pos[start[p] : start[p] + rank[p]]``; ``rank.sum()`` is the number of
    (position, earlier copy) pairs, the ones of TransformerLens's duplicate pattern."""

    def __init__(self, ids: Tensor) -> None:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        order = torch.sort(ids, stable=True).indices  # positions, grouped by id, in order
        self.pos = order
        self.start = torch.searchsorted(ids[order], ids)  # (Lk,) first slot of p's id
        slot = torch.empty_like(order)
        slot[order] = torch.arange(ids.numel())
        self.rank = slot - self.start  # (Lk,) how many times p's token occurred before p

    def __len__(self) -> int:
        return int(self.pos.numel())

    def earlier(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """(row, key) pairs: for each query row at key position ``pos[row]``, every earlier
        key holding the same token."""
        count = self.rank[pos]  # (T,)
        rows = torch.repeat_interleave(torch.arange(pos.numel()), count)
        first = torch.repeat_interleave(self.start[pos], count)
        within = torch.arange(rows.numel()) - torch.repeat_interleave(count.cumsum(0) - count,
                                                                      count)
        return rows, self.pos[first + within]


class TileTargets:
    """What one tile of query rows ``[r0, r1)`` needs, shared by every head and every
    sequence of a batch: query ``i`` sits at key position ``i + off``; ``lk`` keys.

    ``occurrences``: one :class:`Occurrences` per sequence of the batch (its keys' token
    ids, possibly fewer than ``lk``), for the duplicate and induction targets; None leaves
    them out. ``lengths``: each sequence's real length; rows at a position past it are left
    out of every sum (None: every row is real). ``stride``: the width of the tiles of
    weights this tile will be given (all ``lk`` keys by default; up to the last row's own
    position for a causal trace).
    """

    def __init__(self, r0: int, r1: int, off: int, lk: int,
                 occurrences: Sequence[Occurrences] | None = None, *,
                 lengths: Sequence[int] | None = None, stride: int | None = None) -> None:
        width = lk if stride is None else stride
        rows = torch.arange(r1 - r0)
        pos = torch.arange(r0, r1) + off  # (T,) key position of each query
        self.pos = pos
        self.pos64 = pos.double()
        self.first_ahead = int(pos.min()) + 1  # no key before this one is ahead of any row
        self.last_key = min(int(pos.max()) + 1, lk)  # keys from here on are ahead of all rows
        keys64 = torch.arange(lk, dtype=torch.float64)
        self.mass_and_key = torch.stack([torch.ones_like(keys64), keys64], dim=1)  # (Lk, 2)
        later = rows[pos >= 1]  # rows that have a previous token
        self.later = later
        self.first = rows * width  # flat index of (row, key 0)
        self.sink = later * width
        self.prev = later * width + pos[later] - 1
        self.own = rows * width + pos
        self.row_mask: Tensor | None = None
        if lengths is not None:  # (B, 1, T, 1): 1 on each sequence's real rows
            n = torch.as_tensor(list(lengths), dtype=torch.long)
            self.row_mask = (pos[None, :] < n[:, None]).double()[:, None, :, None]
        self.duplicate: tuple[Tensor, Tensor] | None = None
        self.induction: tuple[Tensor, Tensor] | None = None
        #: (B,) float64: how many (row, earlier copy) pairs the tile holds per sequence
        self.pairs: Tensor | None = None
        if occurrences is not None:
            # duplicate: earlier keys j < p_i with x_j = x_{p_i}; induction: the key after
            # each of them, j + 1 <= p_i
            seqs, flats, counts = [], [], []
            for b, occ in enumerate(occurrences):
                seen = rows[pos < len(occ)]  # rows whose position the ids cover
                r, j = occ.earlier(pos[seen])
                flats.append(seen[r] * width + j)
                seqs.append(torch.full((r.numel(),), b, dtype=torch.long))
                counts.append(r.numel())
            self.duplicate = (torch.cat(seqs), torch.cat(flats))
            self.induction = (self.duplicate[0], self.duplicate[1] + 1)
            self.pairs = torch.tensor(counts, dtype=torch.float64)


def _pairs_sum(flat: Tensor, pairs: tuple[Tensor, Tensor] | None) -> Tensor:
    """(B, H) float64 sums of ``flat`` (B, H, T·C) at the (sequence, flat index) pairs."""
    b, h = flat.shape[:2]
    if pairs is None:
        return torch.zeros(b, h, dtype=torch.float64)
    seq, idx = pairs
    if b == 1:
        return flat[..., idx].sum(-1, dtype=torch.float64)
    return torch.zeros(b, h, dtype=torch.float64).index_add_(0, seq, flat[seq, :, idx].double())


def tile_sums(w: Tensor, t: TileTargets) -> Tensor:
    """The float64 sums of :data:`SUMS` of one tile of weights: ``w`` (B, H, T, C) ->
    (B, H, len(SUMS)); ``w`` (T, C), one head of one sequence -> (len(SUMS),).

    Computed in ``w``'s dtype where a sum is per row (entropies: float32 weights give each
    row's entropy in float32, exact to ~1e-8 over the mean, as a float64 log costs tens of
    times more; give float64 weights for float64 entropies), every other sum in float64.
    """
    one = w.dim() == 2
    if one:
        w = w[None, None]
    if t.row_mask is not None:
        w = w * t.row_mask.to(w.dtype)  # the padded rows hold nothing
    f64 = torch.float64
    b, h = w.shape[:2]
    # keys after the last row's position hold no weight in a causal tile: skip them (zeros
    # add nothing to any sum below), after checking that they are zeros indeed
    c1 = t.last_key
    if c1 < w.shape[-1] and float(w[..., c1:].amax()) != 0.0:
        c1 = w.shape[-1]
    region = w[..., :c1]
    w64 = region.double()  # (B, H, T, C)
    mj = w64 @ t.mass_and_key[:c1]  # (B, H, T, 2): row mass, sum_j j W_ij
    m = mj[..., 0]
    # sum_j W_ij |p_i - j| = sum_j W_ij (p_i - j) + 2 sum_{j > p_i} W_ij (j - p_i)
    dist = (t.pos64 * m - mj[..., 1]).sum(-1)
    a = t.first_ahead
    if a < c1:
        ahead = (t.mass_and_key[a:c1, 1][None, :] - t.pos64[:, None]).clamp_min_(0.0)
        dist = dist + 2.0 * (w64[..., a:] * ahead).sum((-2, -1))
    flat = w.reshape(b, h, -1)
    tiny = torch.finfo(w.dtype).tiny
    sums = torch.stack([
        m.sum(-1),
        -(region * region.clamp_min(tiny).log()).sum(-1).double().sum(-1),
        region.amax(-1).sum(-1, dtype=f64),
        flat[..., t.sink].sum(-1, dtype=f64),
        m[..., t.later].sum(-1),
        flat[..., t.prev].sum(-1, dtype=f64),
        flat[..., t.own].sum(-1, dtype=f64),
        dist,
        _pairs_sum(flat, t.duplicate),
        _pairs_sum(flat, t.induction),
        flat[..., t.first].sum(-1, dtype=f64),
    ], dim=-1)
    return sums[0, 0] if one else sums


def ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den, 0 where den is 0 (no rows to score)."""
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))


def scores_from_sums(sums: Tensor, with_ids: bool) -> dict[str, Tensor]:
    """The scores of :data:`attnlab.analysis.scores.SCORE_NAMES` from sums (..., len(SUMS)):
    name -> (...) float64; ``duplicate`` and ``induction`` only ``with_ids``."""
    s = dict(zip(SUMS, sums.unbind(-1)))
    mass = s["mass"]
    out = {
        "entropy": ratio(s["entropy"], mass) + 0.0,  # + 0.0: no -0.0
        "max_weight": ratio(s["max_weight"], mass),
        "sink": ratio(s["sink"], s["sink_mass"]),
        "previous": ratio(s["previous"], mass),
        "diagonal": ratio(s["diagonal"], mass),
        "distance": ratio(s["distance"], mass),
    }
    if with_ids:
        out["duplicate"] = ratio(s["duplicate"], mass)
        out["induction"] = ratio(s["induction"], mass)
    return out
