"""Attention in the order of transformers' eager path, one tile of rows at a time: what the
Hugging Face adapter computes for a captured call whose scores it cannot hand to a fused
kernel (a mask of the model's own, soft-capping, sink logits, short inputs)."""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.core.scores import ScoreShape, row_tiles

__all__ = ["EAGER_TILE_BYTES", "eager_order"]


def eager_order(query: Tensor, key: Tensor, value: Tensor, rule: ScoreShape,
                 key_mask: Tensor | None, dense: Tensor | None, dropout: float,
                 sinks: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Attention in the order of transformers' eager path, one tile of rows at a time.

    ``(q·kᵀ)·scale`` (soft-capped), plus the mask (hidden keys at the dtype's most negative
    number, as eager's float mask), softmax in float32, times v: the same operations on
    the same numbers as ``eager_attention_forward`` of Llama- and BERT-style models, so the
    output is theirs bit for bit, in O(tile · Lk) memory. ``dense`` (the model's own float
    mask, a position bias) is added before the rule and ``key_mask`` hide keys. With
    ``sinks`` (B|1, H, Lq|1) each row gets one more logit, the row's maximum is subtracted and the
    sink's column is dropped after the softmax, as gpt-oss's eager path does. The row's
    log-sum-exp comes from the tile: ``lse = max_j s_ij − log max_j p_ij``; ``-inf`` for
    a row with no visible key (and no sink). ``rule`` gives the scale, soft-cap, causal and
    window; ``key_mask`` (B, Lk) the padding. Returns out (B, H, Lq, dv) and lse (B, H, Lq) float32.
    """
    b, h, lq, d = query.shape
    h_kv, lk = key.shape[1], key.shape[2]
    g = h // h_kv
    low = torch.finfo(query.dtype).min
    kt = key.transpose(2, 3)  # (B, H_kv, d, Lk)
    out = query.new_empty(b, h, lq, value.shape[-1])
    lse = torch.empty(b, h, lq, device=query.device)
    for r0, r1 in row_tiles(lq, lk, max(1, EAGER_TILE_BYTES // (4 * (lk + 1) * h * b))):
        rows = r1 - r0
        qt = query[:, :, r0:r1].reshape(b, h_kv, g * rows, d)  # a group's heads, stacked
        s = torch.matmul(qt, kt).view(b, h, rows, lk).mul_(rule.scale)
        if rule.softcap is not None:
            s = torch.tanh(s / rule.softcap).mul_(rule.softcap)
        if dense is not None:  # (B|1, H|1, Lq|1, Lk)
            s = s + (dense if dense.shape[-2] == 1 else dense[..., r0:r1, :])
        _hide_(s, rule, r0, r1, lq, lk, low)
        if key_mask is not None:
            s.masked_fill_(~key_mask[:, None, None, :], low)
        top = None
        if sinks is not None:  # (B|1, H, Lq|1)
            col = sinks if sinks.shape[-1] == 1 else sinks[:, :, r0:r1]
            col = col.to(device=s.device, dtype=s.dtype)[..., None]
            s = torch.cat([s, col.expand(b, h, rows, 1)], dim=-1)
            top = s.max(dim=-1, keepdim=True).values
            s = s - top
        p = torch.softmax(s, dim=-1, dtype=torch.float32)
        m, at = s.max(dim=-1)  # the row's largest score and where: p there is 1 / Σ exp
        tile_lse = m.float() - torch.log(p.gather(-1, at[..., None])[..., 0])
        if top is not None:  # the scores were shifted by their maximum: shift lse back
            tile_lse = tile_lse + top[..., 0].float()
            p = p[..., :lk]
        lse[:, :, r0:r1] = tile_lse.masked_fill_(m <= low / 2, float("-inf"))
        p = p.to(query.dtype)
        if dropout > 0.0:
            p = torch.nn.functional.dropout(p, p=dropout, training=True)
        o = torch.matmul(p.reshape(b, h_kv, g * rows, lk), value)  # (B, H_kv, G·rows, dv)
        out[:, :, r0:r1] = o.view(b, h, rows, -1)
    return out, lse


#: Bytes of float32 scores in one tile of the eager-order path (all heads). Each tile's
#: scores and probabilities are new tensors: at 64 MiB glibc gives each its own mapping,
#: zero-filled page by page and unmapped after the tile (SmolLM2 at 2,048 tokens: 2.1
#: million page faults a trace, 6.7 s); at 8 MiB, under glibc's largest mmap threshold, the
#: freed memory is reused (1.0 million faults as in the rest of the forward, 4.8 s; 2.6 →
#: 1.8 s at 1,024 tokens).
EAGER_TILE_BYTES = 8 << 20


def _hide_(s: Tensor, rule: ScoreShape, r0: int, r1: int, lq: int, lk: int,
           low: float) -> None:
    """Set the scores of keys hidden by the causal/window rule to ``low``, in place, for a
    tile of rows [r0, r1): whole column ranges at once, the rule itself only on the
    columns where rows of the tile disagree (at most 2 x rows of them)."""
    if not rule.causal and rule.window is None:
        return
    c0, c1 = rule.key_range(r0, r1, lq=lq, lk=lk)
    s[..., :c0].fill_(low)
    s[..., c1:].fill_(low)
    off = lk - lq
    seen_by_all_from = max(c0, r1 - 1 + off - rule.window + 1) if rule.window else c0
    last = r0 + off + (rule.window if not rule.causal and rule.window is not None
                       else 1)  # keys every row of the tile sees
    seen_by_all_to = max(seen_by_all_from, min(c1, last))
    rows = torch.arange(r0, r1, device=s.device)
    for a, b in ((c0, seen_by_all_from), (seen_by_all_to, c1)):
        if b > a:
            keep = rule.visible(rows, torch.arange(a, b, device=s.device), lq=lq, lk=lk)
            if keep is not None:  # (always: the rule is causal or a window)
                s[..., a:b].masked_fill_(~keep, low)
