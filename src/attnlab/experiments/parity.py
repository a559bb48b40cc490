"""Parity: attnlab's attention equals PyTorch's, and the articles' own demos hold.

``run_parity(seed)`` returns one :class:`ParityCheck` per comparison, each with the max
absolute error measured and the tolerance it must stay under. Where PyTorch returns NaN
(``nn.MultiheadAttention`` on fully-masked rows) attnlab returns 0: those rows are compared
to 0, the rest to torch. ``seed_demos(seed)`` gives the articles' own demos as
(check, value, passed) rows. The report's parity section (:mod:`attnlab.report.parity`)
shows both.

Each comparison also measures its control: the same error, against the same torch
reference, of a deliberately wrong variant of attnlab's side (the scale left out, the mask
or padding ignored, non-causal where torch is causal, the other LayerNorm placement, no KV
cache, fp32 where fp64 is compared); a check passes only if the error is within the
tolerance *and* the wrong variant's is not, so that no tolerance loose enough to accept a
wrong implementation can pass. (Skipping the final LayerNorms of a post-LN
``nn.Transformer`` is no such variant: after a post-LN layer they change its output by only
about 6e-6, within 1e-5.) The numeric demos are put to the same test
(row sums and the mask tip against weights normalised over the wrong axis and weights
computed without the mask).

>>> ParityCheck("x", 2e-6, 1e-5).passed, ParityCheck("nan", float("nan"), 1e-5).passed
(True, False)
>>> ParityCheck("x", 2e-6, 1e-5, control=3e-6, wrong="a variant within the tolerance").passed
False
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core import masks
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.nn import (
    KVCache,
    MultiHeadAttention,
    SelfAttention,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)

__all__ = ["ParityCheck", "run_parity", "seed_demos", "ZH"]


@dataclass(frozen=True)
class ParityCheck:
    """One comparison with torch: ``max_error`` against ``tolerance``; ``control``: the
    same error of a deliberately wrong variant (``wrong`` / ``wrong_zh`` say which), which
    the tolerance must reject (None: no control measured)."""

    name: str
    max_error: float
    tolerance: float
    control: float | None = None
    wrong: str = ""
    wrong_zh: str = ""

    @staticmethod
    def _within(error: float, tolerance: float) -> bool:
        return math.isfinite(error) and error <= tolerance

    @property
    def control_holds(self) -> bool:
        """The wrong variant also passes the tolerance (then the check shows nothing)."""
        return self.control is not None and self._within(self.control, self.tolerance)

    @property
    def passed(self) -> bool:
        return self._within(self.max_error, self.tolerance) and not self.control_holds


def _check(name: str, error: float, tolerance: float, control: float, wrong: str,
           wrong_zh: str) -> ParityCheck:
    return ParityCheck(name, error, tolerance, float(control), wrong, wrong_zh)


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
    # each case: attnlab's arguments, and the wrong variant's (what it gets wrong)
    cases: dict[str, tuple[dict[str, Any], dict[str, Any], str, str]] = {
        "sdpa: no mask": (dict(), dict(scale=1.0), "the 1/√d scale left out", "漏掉 1/√d 缩放"),
        "sdpa: bool mask": (dict(mask=bool_mask), dict(), "the mask ignored", "忽略掩码"),
        "sdpa: float mask": (dict(mask=float_mask), dict(), "the float mask ignored",
                             "忽略浮点掩码"),
        "sdpa: custom scale": (dict(scale=0.37), dict(), "the default scale instead of 0.37",
                               "用默认缩放代替 0.37"),
    }
    for name, (kw, wrong_kw, wrong, wrong_zh) in cases.items():
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=kw.get("mask"),
                                             scale=kw.get("scale"))
        ours_fused = scaled_dot_product_attention(q, k, v, **kw)
        ours_explicit, _ = scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
        control = _err(scaled_dot_product_attention(q, k, v, **wrong_kw), ref)
        out.append(_check(name + " (fused)", _err(ours_fused, ref), 1e-5, control, wrong,
                          wrong_zh))
        out.append(_check(name + " (explicit)", _err(ours_explicit, ref), 1e-5, control, wrong,
                          wrong_zh))
    qs = q[..., :lk, :].contiguous() if lq >= lk else torch.randn(b, h, lk, d, generator=g)
    ref = F.scaled_dot_product_attention(qs, k, v, is_causal=True)
    ours, _ = scaled_dot_product_attention(qs, k, v, causal=True, return_weights=True)
    out.append(_check("sdpa: causal", _err(ours, ref), 1e-5,
                      _err(scaled_dot_product_attention(qs, k, v), ref),
                      "not causal (every key seen)", "非因果（看到所有键）"))
    # fully-masked rows: attnlab gives 0 (nn.MultiheadAttention gives NaN, see below)
    dead = bool_mask.clone()
    dead[:, :, 2, :] = False
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=dead)
    ours, w = scaled_dot_product_attention(q, k, v, dead, return_weights=True)
    alive = torch.ones(lq, dtype=torch.bool)
    alive[2] = False
    err_alive = _err(ours[:, :, alive], ref[:, :, alive])
    err_dead = max(float(ours[:, :, 2].abs().max()), float(w[:, :, 2].abs().max()))
    uniform = v.mean(-2)  # the dead row as if its weights were spread over every key
    out.append(_check("sdpa: fully-masked row is 0", max(err_alive, err_dead), 1e-5,
                      max(err_alive, float(uniform.abs().max())),
                      "the fully-masked row spread evenly over every key",
                      "被整行遮蔽的行均匀分给所有键"))
    q64, k64, v64 = q.double(), k.double(), v.double()
    ref = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=bool_mask)
    ours = scaled_dot_product_attention(q64, k64, v64, bool_mask, backend="explicit")
    fp32 = scaled_dot_product_attention(q, k, v, bool_mask, backend="explicit")
    out.append(_check("sdpa: fp64 bool mask", _err(ours, ref), 1e-12, _err(fp32, ref),
                      "computed in fp32", "以 fp32 计算"))
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
            bad_out, bad_w = ours(x, None if kdim is None else kv, need_weights=True)
            tag = f"MHA batch_first={batch_first} kdim={kdim}"
            pad, pad_zh = "the key padding mask ignored", "忽略键的填充掩码"
            out.append(_check(f"{tag}: output", _err(our_out, ref_out), 1e-5,
                              _err(bad_out, ref_out), pad, pad_zh))
            out.append(_check(f"{tag}: per-head weights", _err(our_w, ref_w), 1e-5,
                              _err(bad_w, ref_w), pad, pad_zh))
            gy = torch.randn_like(ref_out)
            g_ref = torch.autograd.grad(ref_out, [x, *m.parameters()], gy)
            g_our = torch.autograd.grad(our_out, [x], gy)
            g_bad = torch.autograd.grad(bad_out, [x], gy)
            out.append(_check(f"{tag}: grad wrt input", _err(g_our[0], g_ref[0]), 1e-4,
                              _err(g_bad[0], g_ref[0]), pad, pad_zh))
    # a fully-masked row: nn.MultiheadAttention returns NaN, attnlab returns 0
    m = nn.MultiheadAttention(e, h, batch_first=True)
    ours = MultiHeadAttention.from_torch(m)
    x = torch.randn(1, n, e, generator=g)
    allowed = torch.ones(n, n, dtype=torch.bool)
    allowed[1] = False
    with torch.no_grad():
        ref_out, _ = m(x, x, x, attn_mask=~allowed)
        our_out, _ = ours(x, mask=allowed)
        unmasked, _ = ours(x)
    torch_nan = bool(torch.isnan(ref_out[0, 1]).all())
    keep = allowed.any(-1)
    err = max(_err(our_out[:, keep], ref_out[:, keep]), float(our_out[0, 1].abs().max()))
    bad = max(_err(our_out[:, keep], ref_out[:, keep]), float(unmasked[0, 1].abs().max()))
    name = "MHA fully-masked row: attnlab 0" + (" (torch: NaN)" if torch_nan else "")
    out.append(_check(name, err, 1e-5, bad, "the fully-masked row computed without its mask",
                      "被整行遮蔽的行不加掩码计算"))
    return out


def _layer_checks(g: torch.Generator) -> list[ParityCheck]:
    out = []
    for norm_first in (False, True):
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                           norm_first=norm_first).eval()
        ours = TransformerEncoderLayer.from_torch(layer).eval()
        x = torch.randn(2, 5, 32, generator=g)
        with torch.no_grad():
            ref = layer(x)
            err = _err(ours(x), ref)
            ours.norm_first = not norm_first
            bad = _err(ours(x), ref)
            ours.norm_first = norm_first
        out.append(_check(f"TransformerEncoderLayer norm_first={norm_first}", err, 1e-5, bad,
                          "the other LayerNorm placement", "另一种 LayerNorm 位置"))
    mha = MultiHeadAttention(32, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 8, 32, generator=g)
    cache = KVCache()
    with torch.no_grad():
        full, _ = mha(x, causal=True)
        steps = torch.cat([mha(x[:, t:t + 1], causal=True, cache=cache)[0] for t in range(8)], 1)
        alone = torch.cat([mha(x[:, t:t + 1], causal=True)[0] for t in range(8)], 1)
    out.append(_check("KV cache (GQA) vs full causal forward", _err(steps, full), 1e-5,
                      _err(alone, full), "each step without the cache (sees only itself)",
                      "每一步都不用缓存（只看到自己）"))
    return out


def _cross_checks(g: torch.Generator) -> list[ParityCheck]:
    """Cross-attention: queries from one sequence, keys and values from another (the
    encoder's memory), with memory padding; outputs, weights and gradients."""
    out = []
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    e, h, b, lq, lk = 32, 4, 3, 5, 8
    m = nn.MultiheadAttention(e, h, batch_first=True)
    ours = MultiHeadAttention.from_torch(m)
    keep = torch.ones(b, lk, dtype=torch.bool)
    keep[0, -3:] = False  # memory padding
    for tag, distinct_v in (("key = value = memory", False), ("key ≠ value", True)):
        x = torch.randn(b, lq, e, generator=g, requires_grad=True)
        mem = torch.randn(b, lk, e, generator=g, requires_grad=True)
        val = torch.randn(b, lk, e, generator=g, requires_grad=True) if distinct_v else mem
        ref_out, ref_w = m(x, mem, val, key_padding_mask=~keep, need_weights=True,
                           average_attn_weights=False)
        our_out, our_w = ours(x, mem, val, key_mask=keep, need_weights=True)
        bad_out, bad_w = ours(x, mem, val, need_weights=True)
        pad, pad_zh = "the memory padding ignored", "忽略记忆的填充掩码"
        out.append(_check(f"cross-attention MHA, {tag}: output", _err(our_out, ref_out),
                          1e-5, _err(bad_out, ref_out), pad, pad_zh))
        out.append(_check(f"cross-attention MHA, {tag}: per-head weights",
                          _err(our_w, ref_w), 1e-5, _err(bad_w, ref_w), pad, pad_zh))
        inputs = [x, mem] + ([val] if distinct_v else [])
        gy = torch.randn(ref_out.shape, generator=g)
        g_ref = torch.autograd.grad(ref_out, inputs, gy)
        g_our = torch.autograd.grad(our_out, inputs, gy)
        g_bad = torch.autograd.grad(bad_out, inputs, gy)
        out.append(_check(f"cross-attention MHA, {tag}: grads wrt query and memory",
                          max(_err(a, c) for a, c in zip(g_our, g_ref)), 1e-4,
                          max(_err(a, c) for a, c in zip(g_bad, g_ref)), pad, pad_zh))
    return out


def _decoder_inputs(g: torch.Generator, b: int, lt: int, ls: int, e: int
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """tgt (B, Lt, E), memory (B, Ls, E), tgt keep (B, Lt), memory keep (B, Ls): the first
    target sequence ends in 2 padding tokens, the first memory in 3 (True = real token)."""
    tgt = torch.randn(b, lt, e, generator=g)
    mem = torch.randn(b, ls, e, generator=g)
    tgt_keep = torch.ones(b, lt, dtype=torch.bool)
    tgt_keep[0, -2:] = False
    mem_keep = torch.ones(b, ls, dtype=torch.bool)
    mem_keep[0, -3:] = False
    return tgt, mem, tgt_keep, mem_keep


def _decoder_checks(g: torch.Generator) -> list[ParityCheck]:
    """attnlab's TransformerDecoderLayer (``from_torch``) against torch's, with a causal
    target mask, target padding and memory padding; outputs and input gradients."""
    out = []
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    e, h, ff, b, lt, ls = 32, 4, 64, 2, 6, 9
    causal = torch.ones(lt, lt, dtype=torch.bool).triu(1)  # torch: True = may not attend
    for norm_first in (False, True):
        layer = nn.TransformerDecoderLayer(e, h, ff, dropout=0.0, batch_first=True,
                                           norm_first=norm_first).eval()
        ours = TransformerDecoderLayer.from_torch(layer).eval()
        tgt, mem, tgt_keep, mem_keep = _decoder_inputs(g, b, lt, ls, e)
        tgt.requires_grad_(True)
        mem.requires_grad_(True)
        ref = layer(tgt, mem, tgt_mask=causal, tgt_key_padding_mask=~tgt_keep,
                    memory_key_padding_mask=~mem_keep, tgt_is_causal=True)
        got = ours(tgt, mem, key_mask=tgt_keep, memory_key_mask=mem_keep, causal=True)
        bad = ours(tgt, mem, key_mask=tgt_keep, memory_key_mask=mem_keep, causal=False)
        tag = f"TransformerDecoderLayer norm_first={norm_first}"
        nc, nc_zh = "without the causal mask", "不加因果掩码"
        out.append(_check(f"{tag}: causal, tgt and memory padding", _err(got, ref), 1e-5,
                          _err(bad, ref), nc, nc_zh))
        gy = torch.randn(ref.shape, generator=g)
        g_ref = torch.autograd.grad(ref, [tgt, mem], gy)
        g_our = torch.autograd.grad(got, [tgt, mem], gy)
        g_bad = torch.autograd.grad(bad, [tgt, mem], gy)
        out.append(_check(f"{tag}: grads wrt tgt and memory",
                          max(_err(a, c) for a, c in zip(g_our, g_ref)), 1e-4,
                          max(_err(a, c) for a, c in zip(g_bad, g_ref)), nc, nc_zh))
    return out


def _stack_checks(g: torch.Generator) -> list[ParityCheck]:
    """The whole encoder-decoder stack, ``torch.nn.Transformer``, against attnlab's layers
    (each copied with ``from_torch``) and torch's two final LayerNorms.

    attnlab's :class:`~attnlab.nn.Transformer` is a token-level model (embeddings,
    positions, output head) with no ``from_torch``: ``nn.Transformer`` is the bare stack,
    which attnlab's layers rebuild here. Compared in inference mode (torch may take its
    fused fast path there) on the decoder output and on the encoder memory at real tokens.
    """
    out = []
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    e, h, ff, b, lt, ls = 32, 4, 64, 2, 6, 9
    for norm_first in (False, True):
        with warnings.catch_warnings():  # nested-tensor notices of torch's fast path
            warnings.simplefilter("ignore", UserWarning)
            model = nn.Transformer(e, h, num_encoder_layers=2, num_decoder_layers=2,
                                   dim_feedforward=ff, dropout=0.0, batch_first=True,
                                   norm_first=norm_first).eval()
        enc = [TransformerEncoderLayer.from_torch(lay).eval() for lay in model.encoder.layers]
        dec = [TransformerDecoderLayer.from_torch(lay).eval() for lay in model.decoder.layers]
        tgt, src, _, src_keep = _decoder_inputs(g, b, lt, ls, e)
        causal = torch.ones(lt, lt, dtype=torch.bool).triu(1)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ref = model(src, tgt, tgt_mask=causal, src_key_padding_mask=~src_keep,
                        memory_key_padding_mask=~src_keep, tgt_is_causal=True)
            ref_mem = model.encoder(src, src_key_padding_mask=~src_keep)
            outs = {}
            for keep in (src_keep, None):  # None: the wrong variant, padding ignored
                mem = src
                for lay in enc:
                    mem = lay(mem, key_mask=keep)
                mem = model.encoder.norm(mem)
                y = tgt
                for dlay in dec:
                    y = dlay(y, mem, memory_key_mask=keep, causal=True)
                outs[keep is None] = (model.decoder.norm(y), mem)
        tag = f"nn.Transformer (2 + 2 layers) norm_first={norm_first}"
        (y, mem), (bad_y, bad_mem) = outs[False], outs[True]
        pad, pad_zh = ("the source padding ignored (encoder and cross-attention)",
                       "忽略源序列的填充掩码（编码器与交叉注意力）")
        out.append(_check(f"{tag}: decoder output", _err(y, ref), 1e-5, _err(bad_y, ref), pad,
                          pad_zh))
        out.append(_check(f"{tag}: encoder memory at real tokens",
                          _err(mem[src_keep], ref_mem[src_keep]), 1e-5,
                          _err(bad_mem[src_keep], ref_mem[src_keep]), pad, pad_zh))
    return out


def run_parity(seed: int = 0) -> list[ParityCheck]:
    """Every parity comparison, deterministic for a given seed."""
    g = torch.Generator().manual_seed(seed)
    state = torch.random.get_rng_state()
    try:
        return (_sdpa_checks(g) + _mha_checks(g) + _layer_checks(g) + _cross_checks(g)
                + _decoder_checks(g) + _stack_checks(g))
    finally:
        torch.random.set_rng_state(state)


@dataclass(frozen=True)
class DemoMeasurement:
    """The articles' own demos on attnlab's modules, each beside the wrong weights the same
    demo must flag."""

    self_attention_shape: tuple[int, ...]  # 000: SelfAttention(512, 8) output on (2, 10, 512)
    weights_shape: tuple[int, ...]  # its weights (B, H, N, N)
    row_sum_dev: float  # max |row sum − 1| of those weights
    row_sum_dev_wrong: float  # the same, weights normalised over the query axis
    mha_shape: tuple[int, ...]  # 001: MultiHeadAttention(512, 8) output, causal mask
    leaked: float  # max weight on masked positions
    leaked_wrong: float  # the same, weights computed without the mask
    allclose: bool  # torch.allclose(attn.sum(-1), 1)
    allclose_wrong: bool  # the same, weights normalised over the query axis


def measure_demos(seed: int = 0) -> DemoMeasurement:
    """Run the articles' demos (seeds torch's global generator with ``seed``)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        sa = SelfAttention(embed_dim=512, num_heads=8)
        x = torch.randn(2, 10, 512)
        out, w = sa(x)
        wrong_axis = w / w.sum(-2, keepdim=True)  # normalised over the query axis
        mha = MultiHeadAttention(512, 8)
        causal = masks.causal(10)
        m_out, m_w = mha(x, mask=causal, need_weights=True)
        _, unmasked = mha(x, need_weights=True)
        wrong_cols = m_w / m_w.sum(-2, keepdim=True)  # normalised over the query axis
        return DemoMeasurement(
            tuple(out.shape), tuple(w.shape), float((w.sum(-1) - 1).abs().max()),
            float((wrong_axis.sum(-1) - 1).abs().max()), tuple(m_out.shape),
            float(m_w.masked_fill(causal, 0).abs().max()),
            float(unmasked.masked_fill(causal, 0).abs().max()),
            bool(torch.allclose(m_w.sum(-1), torch.ones(2, 8, 10))),
            bool(torch.allclose(wrong_cols.sum(-1), torch.ones(2, 8, 10))))


def demo_rows(m: DemoMeasurement) -> list[tuple[str, str, bool]]:
    """(check, value, passed) per demo; a demo passes only if its wrong weights fail it."""
    return [
        ("000 PureSelfAttention output shape", str(m.self_attention_shape),
         m.self_attention_shape == (2, 10, 512)),
        ("000 attention weights shape (B, H, N, N)", str(m.weights_shape),
         m.weights_shape == (2, 8, 10, 10)),
        ("000 max |row sum − 1|", f"{m.row_sum_dev:.1e}",
         m.row_sum_dev < 1e-5 and not m.row_sum_dev_wrong < 1e-5),
        ("001 MultiHeadAttention output shape", str(m.mha_shape), m.mha_shape == (2, 10, 512)),
        ("001 max weight on masked positions", f"{m.leaked:.1e}",
         m.leaked == 0.0 and m.leaked_wrong != 0.0),
        ("001 torch.allclose(attn.sum(-1), 1)", str(m.allclose),
         m.allclose and not m.allclose_wrong),
    ]


def seed_demos(seed: int = 0) -> list[tuple[str, str, bool]]:
    """The articles' own demos: shapes and the debugging checks of article 001."""
    return demo_rows(measure_demos(seed))


def _catalog() -> dict[str, str]:
    """English -> Chinese for every check name and demo row of this module."""
    zh: dict[str, str] = {}
    sdpa = {"no mask": "无掩码", "bool mask": "布尔掩码", "float mask": "浮点掩码",
            "custom scale": "自定义缩放因子"}
    for en, cn in sdpa.items():
        zh[f"sdpa: {en} (fused)"] = f"sdpa：{cn}（融合路径）"
        zh[f"sdpa: {en} (explicit)"] = f"sdpa：{cn}（显式路径）"
    zh["sdpa: causal"] = "sdpa：因果掩码"
    zh["sdpa: fully-masked row is {}"] = "sdpa：整行被遮蔽时输出为 {}"
    zh["sdpa: fp{} bool mask"] = "sdpa：fp{} 布尔掩码"
    parts = {"output": "输出", "per-head weights": "各头注意力权重",
             "grad wrt input": "对输入的梯度"}
    for bf in ("True", "False"):
        for kd in ("None", "{}"):
            for en, cn in parts.items():
                zh[f"MHA batch_first={bf} kdim={kd}: {en}"] = (
                    f"MHA batch_first={bf} kdim={kd}：{cn}")
    zh["MHA fully-masked row: attnlab {} (torch: NaN)"] = (
        "MHA 整行被遮蔽：attnlab 输出 {}（torch 输出 NaN）")
    zh["MHA fully-masked row: attnlab {}"] = "MHA 整行被遮蔽：attnlab 输出 {}"
    zh["KV cache (GQA) vs full causal forward"] = "KV 缓存（GQA）逐步解码 vs 完整因果前向"
    for tag, cn in (("key = value = memory", "键 = 值 = 记忆"), ("key ≠ value", "键 ≠ 值")):
        zh[f"cross-attention MHA, {tag}: output"] = f"交叉注意力 MHA，{cn}：输出"
        zh[f"cross-attention MHA, {tag}: per-head weights"] = (
            f"交叉注意力 MHA，{cn}：各头注意力权重")
        zh[f"cross-attention MHA, {tag}: grads wrt query and memory"] = (
            f"交叉注意力 MHA，{cn}：对查询和记忆的梯度")
    for nf in ("True", "False"):
        zh[f"TransformerEncoderLayer norm_first={nf}"] = f"TransformerEncoderLayer norm_first={nf}"
        dec = f"TransformerDecoderLayer norm_first={nf}"
        zh[f"{dec}: causal, tgt and memory padding"] = f"{dec}：因果掩码、目标序列与记忆的填充掩码"
        zh[f"{dec}: grads wrt tgt and memory"] = f"{dec}：对目标序列和记忆的梯度"
        stack = f"nn.Transformer ({{}} + {{}} layers) norm_first={nf}"
        stack_zh = f"nn.Transformer（{{}} + {{}} 层）norm_first={nf}"
        zh[f"{stack}: decoder output"] = f"{stack_zh}：解码器输出"
        zh[f"{stack}: encoder memory at real tokens"] = f"{stack_zh}：非填充位置的编码器记忆"
    zh.update({
        "000 PureSelfAttention output shape": "000 PureSelfAttention 输出形状",
        "000 attention weights shape (B, H, N, N)": "000 注意力权重形状 (B, H, N, N)",
        "000 max |row sum − 1|": "000 |行和 − 1| 的最大值",
        "001 MultiHeadAttention output shape": "001 MultiHeadAttention 输出形状",
        "001 max weight on masked positions": "001 被遮蔽位置上的最大权重",
        "001 torch.allclose(attn.sum(-1), 1)":
            "001 torch.allclose(attn.sum(-1), 1)（每行权重之和为 1）",
    })
    return zh


#: English -> Chinese for every check name and demo row (see :mod:`attnlab.i18n`).
ZH: dict[str, str] = _catalog()
