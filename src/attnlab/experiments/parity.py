"""Parity: attnlab's attention equals PyTorch's, and the articles' own demos hold.

``run_parity(seed)`` returns one :class:`ParityCheck` per comparison, each with the max
absolute error measured and the tolerance it must stay under. Where PyTorch returns NaN
(``nn.MultiheadAttention`` on fully-masked rows) attnlab returns 0: those rows are compared
to 0, the rest to torch. ``seed_demos(seed)`` gives the articles' own demos as
(check, value, passed) rows. The report's parity section (:mod:`attnlab.report.parity`)
shows both.

>>> ParityCheck("x", 2e-6, 1e-5).passed, ParityCheck("nan", float("nan"), 1e-5).passed
(True, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core import masks
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.nn import KVCache, MultiHeadAttention, SelfAttention, TransformerEncoderLayer

__all__ = ["ParityCheck", "run_parity", "seed_demos"]


@dataclass(frozen=True)
class ParityCheck:
    name: str
    max_error: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return math.isfinite(self.max_error) and self.max_error <= self.tolerance


def _err(a: Tensor, b: Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).abs().max()) if a.numel() else 0.0


def _sdpa_checks(g: torch.Generator) -> list[ParityCheck]:
    out = []
    b, h, lq, lk, d = 2, 4, 7, 9, 16
    q = torch.randn(b, h, lq, d, generator=g)
    k = torch.randn(b, h, lk, d, generator=g)
    v = torch.randn(b, h, lk, d, generator=g)
    bool_mask = torch.rand(b, 1, lq, lk, generator=g) > 0.3
    bool_mask[..., 0] = True  # every row keeps a key here; fully-masked rows are tested apart
    float_mask = torch.randn(b, h, lq, lk, generator=g)
    cases = {
        "sdpa: no mask": dict(),
        "sdpa: bool mask": dict(mask=bool_mask),
        "sdpa: float mask": dict(mask=float_mask),
        "sdpa: custom scale": dict(scale=0.37),
    }
    for name, kw in cases.items():
        torch_kw = {"attn_mask": kw.get("mask"), "scale": kw.get("scale")}
        ref = F.scaled_dot_product_attention(q, k, v, **torch_kw)
        ours_fused = scaled_dot_product_attention(q, k, v, **kw)
        ours_explicit, _ = scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
        out.append(ParityCheck(name + " (fused)", _err(ours_fused, ref), 1e-5))
        out.append(ParityCheck(name + " (explicit)", _err(ours_explicit, ref), 1e-5))
    qs = q[..., :lk, :].contiguous() if lq >= lk else torch.randn(b, h, lk, d, generator=g)
    ref = F.scaled_dot_product_attention(qs, k, v, is_causal=True)
    ours, _ = scaled_dot_product_attention(qs, k, v, causal=True, return_weights=True)
    out.append(ParityCheck("sdpa: causal", _err(ours, ref), 1e-5))
    # fully-masked rows: attnlab gives 0 (nn.MultiheadAttention gives NaN, see below)
    dead = bool_mask.clone()
    dead[:, :, 2, :] = False
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=dead)
    ours, w = scaled_dot_product_attention(q, k, v, dead, return_weights=True)
    alive = torch.ones(lq, dtype=torch.bool)
    alive[2] = False
    err_alive = _err(ours[:, :, alive], ref[:, :, alive])
    err_dead = max(float(ours[:, :, 2].abs().max()), float(w[:, :, 2].abs().max()))
    out.append(ParityCheck("sdpa: fully-masked row is 0", max(err_alive, err_dead),
                           1e-5))
    q64, k64, v64 = q.double(), k.double(), v.double()
    ref = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=bool_mask)
    ours = scaled_dot_product_attention(q64, k64, v64, bool_mask, backend="explicit")
    out.append(ParityCheck("sdpa: fp64 bool mask", _err(ours, ref), 1e-12))
    return out


def _mha_checks(g: torch.Generator) -> list[ParityCheck]:
    out = []
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    e, h, b, n = 32, 4, 3, 6
    for batch_first in (True, False):
        for kdim in (None, 24):
            m = nn.MultiheadAttention(e, h, kdim=kdim, vdim=kdim, batch_first=batch_first)
            ours = MultiHeadAttention.from_torch(m)
            x = torch.randn(b, n, e, generator=g, requires_grad=True)
            kv = x if kdim is None else torch.randn(b, n + 2, kdim, generator=g,
                                                      requires_grad=True)
            key_mask = torch.ones(b, kv.shape[1], dtype=torch.bool)
            key_mask[0, -2:] = False
            tx = (lambda t: t) if batch_first else (lambda t: t.transpose(0, 1))
            ref_out, ref_w = m(tx(x), tx(kv), tx(kv), key_padding_mask=~key_mask,
                               need_weights=True, average_attn_weights=False)
            ref_out = tx(ref_out)
            our_out, our_w = ours(x, None if kdim is None else kv,
                                  key_mask=key_mask, need_weights=True)
            tag = f"MHA batch_first={batch_first} kdim={kdim}"
            out.append(ParityCheck(f"{tag}: output", _err(our_out, ref_out), 1e-5))
            out.append(ParityCheck(f"{tag}: per-head weights", _err(our_w, ref_w), 1e-5))
            gy = torch.randn_like(ref_out)
            g_ref = torch.autograd.grad(ref_out, [x, *m.parameters()], gy)
            g_our = torch.autograd.grad(our_out, [x], gy)
            out.append(ParityCheck(f"{tag}: grad wrt input", _err(g_our[0], g_ref[0]), 1e-4))
    # a fully-masked row: nn.MultiheadAttention returns NaN, attnlab returns 0
    m = nn.MultiheadAttention(e, h, batch_first=True)
    ours = MultiHeadAttention.from_torch(m)
    x = torch.randn(1, n, e, generator=g)
    allowed = torch.ones(n, n, dtype=torch.bool)
    allowed[1] = False
    with torch.no_grad():
        ref_out, _ = m(x, x, x, attn_mask=~allowed)
        our_out, _ = ours(x, mask=allowed)
    torch_nan = bool(torch.isnan(ref_out[0, 1]).all())
    keep = allowed.any(-1)
    err = max(_err(our_out[:, keep], ref_out[:, keep]), float(our_out[0, 1].abs().max()))
    name = "MHA fully-masked row: attnlab 0" + (" (torch: NaN)" if torch_nan else "")
    out.append(ParityCheck(name, err, 1e-5))
    return out


def _layer_checks(g: torch.Generator) -> list[ParityCheck]:
    out = []
    for norm_first in (False, True):
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                           norm_first=norm_first).eval()
        ours = TransformerEncoderLayer.from_torch(layer).eval()
        x = torch.randn(2, 5, 32, generator=g)
        with torch.no_grad():
            err = _err(ours(x), layer(x))
        out.append(ParityCheck(f"TransformerEncoderLayer norm_first={norm_first}", err, 1e-5))
    mha = MultiHeadAttention(32, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 8, 32, generator=g)
    cache = KVCache()
    with torch.no_grad():
        full, _ = mha(x, causal=True)
        steps = torch.cat([mha(x[:, t:t + 1], causal=True, cache=cache)[0] for t in range(8)], 1)
    out.append(ParityCheck("KV cache (GQA) vs full causal forward", _err(steps, full), 1e-5))
    return out


def run_parity(seed: int = 0) -> list[ParityCheck]:
    """Every parity comparison, deterministic for a given seed."""
    g = torch.Generator().manual_seed(seed)
    state = torch.random.get_rng_state()
    try:
        return _sdpa_checks(g) + _mha_checks(g) + _layer_checks(g)
    finally:
        torch.random.set_rng_state(state)


def seed_demos(seed: int = 0) -> list[tuple[str, str, bool]]:
    """The articles' own demos: shapes and the debugging checks of article 001."""
    torch.manual_seed(seed)
    rows = []
    with torch.no_grad():
        return _seed_demo_rows(rows)


def _seed_demo_rows(rows: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    sa = SelfAttention(embed_dim=512, num_heads=8)
    x = torch.randn(2, 10, 512)
    out, w = sa(x)
    rows.append(("000 PureSelfAttention output shape", str(tuple(out.shape)),
                 tuple(out.shape) == (2, 10, 512)))
    rows.append(("000 attention weights shape (B, H, N, N)", str(tuple(w.shape)),
                 tuple(w.shape) == (2, 8, 10, 10)))
    dev = float((w.sum(-1) - 1).abs().max())
    rows.append(("000 max |row sum − 1|", f"{dev:.1e}", dev < 1e-5))
    mha = MultiHeadAttention(512, 8)
    causal = masks.causal(10)
    out, w = mha(x, mask=causal, need_weights=True)
    rows.append(("001 MultiHeadAttention output shape", str(tuple(out.shape)),
                 tuple(out.shape) == (2, 10, 512)))
    leaked = float(w.masked_fill(causal, 0).abs().max())
    rows.append(("001 max weight on masked positions", f"{leaked:.1e}", leaked == 0.0))
    ok = bool(torch.allclose(w.sum(-1), torch.ones(2, 8, 10)))
    rows.append(("001 torch.allclose(attn.sum(-1), 1)", str(ok), ok))
    return rows
