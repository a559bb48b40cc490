"""Capture attention from a running model: attnlab, torch and Hugging Face modules.

``with capture(model) as cap: model(x)`` records, for every attention call inside
``model``, the weights (B, H, Lq, Lk) and, unless ``qkv=False``, the per-head q, k, v
(B, H, N, d; after RoPE, grouped key/value heads repeated to the query heads) and the
per-head context (B, H, Lq, dv). ``cap.trace()`` turns the records into an
:class:`~attnlab.trace.trace.AttentionTrace`.

How each kind of module is read:

* attnlab ``MultiHeadAttention`` / ``SelfAttention``: forward hooks on their ``HookPoint``
  children, while :func:`attnlab.core.functional.weights_requested` makes them compute the
  weights on the explicit path.
* ``torch.nn.MultiheadAttention`` (also inside ``nn.TransformerEncoder``): a forward
  pre-hook asks for per-head weights (``need_weights=True, average_attn_weights=False``)
  and the output is given back as the caller asked for it; ``nn.TransformerEncoderLayer``'s
  fused fast path, which never calls its attention module, is switched off meanwhile.
* Hugging Face models (BERT, GPT-2, Llama families...): the model runs with
  ``attn_implementation="eager"`` and the ``eager_attention_forward`` function of its
  modeling file is wrapped, so the recorded weights are *the* tensors the model computed.

Nothing is installed outside a ``with`` block: hooks and wrappers are removed in
``finally``, so there is no cost when not capturing.

>>> import torch, attnlab
>>> mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
>>> x = torch.randn(1, 5, 16)
>>> with capture(mha) as cap:
...     out, _ = mha(x, x, x, need_weights=False)
>>> t = cap.trace()
>>> tuple(t.weights.shape), _ is None
((1, 4, 5, 5), True)
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.functional import weights_requested
from attnlab.core.masks import combine
from attnlab.nn.attention import MultiHeadAttention, SelfAttention
from attnlab.trace.trace import AttentionTrace

__all__ = ["AttentionRecord", "Capture", "capture"]


@dataclass
class AttentionRecord:
    """One call of one attention module (batch-first, all per head).

    ``mask`` is in attnlab's convention, broadcastable to (B, H, Lq, Lk): bool True = may
    attend, or float added to the scaled scores; ``causal`` adds the bottom-right aligned
    causal mask on top.
    """

    name: str
    weights: Tensor  # (B, H, Lq, Lk)
    q: Tensor | None = None  # (B, H, Lq, d)
    k: Tensor | None = None  # (B, H, Lk, d)
    v: Tensor | None = None  # (B, H, Lk, dv)
    context: Tensor | None = None  # (B, H, Lq, dv)
    scale: float | None = None
    mask: Tensor | None = None
    causal: bool = False
    source: str = ""

    def scores(self) -> Tensor | None:
        """q kᵀ·scale + mask (-inf where masked), or None without q and k."""
        if self.q is None or self.k is None:
            return None
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(self.q.shape[-1])
        s = (self.q.float() @ self.k.float().transpose(-2, -1)) * scale  # (B, H, Lq, Lk)
        return _apply_mask(s, self.mask, self.causal)


def _apply_mask(s: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    if mask is not None:
        if mask.dtype == torch.bool:
            s = s.masked_fill(~mask, float("-inf"))
        else:
            m = mask.float()
            # Hugging Face marks masked keys with the dtype's most negative number.
            s = s.masked_fill(m <= torch.finfo(m.dtype).min / 2, float("-inf")) + m.clamp_min(
                torch.finfo(torch.float32).min / 2)
    if causal:
        lq, lk = s.shape[-2:]
        keep = torch.ones(lq, lk, dtype=torch.bool, device=s.device).tril(lk - lq)
        s = s.masked_fill(~keep, float("-inf"))
    return s


class Capture:
    """Records of one ``capture`` block, in call order; ``trace()`` assembles them."""

    def __init__(self, root: nn.Module, qkv: bool) -> None:
        self.root = root
        self.qkv = qkv
        self.records: list[AttentionRecord] = []
        self._names = {id(m): n for n, m in root.named_modules()}
        self._lock = threading.Lock()

    def _add(self, rec: AttentionRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def __len__(self) -> int:
        return len(self.records)

    def trace(self, batch_index: int = 0, *, tokens: list[str] | None = None,
              model: str = "", causal: bool | None = None, scores: bool = False,
              token_ids: list[int] | None = None, text: str | None = None,
              meta: dict[str, Any] | None = None) -> AttentionTrace:
        """One input of the batch as an :class:`AttentionTrace` (layers in call order).

        Only attention calls with the same (H, Lq, Lk) as the first one are stacked
        (e.g. the self-attention of every layer); the names of the others are listed in
        ``meta["skipped"]``. ``tokens`` default to ``"0", "1", ...``.
        """
        if not self.records:
            raise ValueError(
                "nothing was captured: no attention module of the model ran inside the "
                "capture block (attnlab, torch.nn.MultiheadAttention and Hugging Face eager "
                "attention are recognised)"
            )
        b = self.records[0].weights.shape[0]
        if not -b <= batch_index < b:
            raise IndexError(f"batch_index must be in [0, {b}), got {batch_index}")
        shape = self.records[0].weights.shape[1:]
        kept = [r for r in self.records if r.weights.shape[1:] == shape]
        skipped = [r.name for r in self.records if r.weights.shape[1:] != shape]

        def stack(get) -> Tensor | None:
            parts = [get(r) for r in kept]
            if any(p is None for p in parts):
                return None
            if len({tuple(p.shape) for p in parts}) != 1:
                return None
            return torch.stack([p[batch_index].detach().float().cpu() for p in parts])

        weights = stack(lambda r: r.weights)  # (L, H, Lq, Lk)
        scales = [r.scale for r in kept]
        scale = scales[0] if len(set(scales)) == 1 else None
        if causal is None:
            causal = all(r.causal for r in kept)
        lq = weights.shape[-2]
        info = {"layer_names": [r.name for r in kept], "source": kept[0].source}
        if scale is None:
            info["scales"] = scales
        if skipped:
            info["skipped"] = skipped
        info.update(meta or {})
        return AttentionTrace(
            tokens=tokens if tokens is not None else [str(i) for i in range(lq)],
            weights=weights,
            q=stack(lambda r: r.q) if self.qkv else None,
            k=stack(lambda r: r.k) if self.qkv else None,
            v=stack(lambda r: r.v) if self.qkv else None,
            context=stack(lambda r: r.context) if self.qkv else None,
            scores=stack(lambda r: r.scores()) if (scores and self.qkv) else None,
            model=model or type(self.root).__name__, causal=bool(causal), scale=scale,
            token_ids=token_ids, text=text, meta=info,
        )


# -- attnlab modules ------------------------------------------------------------------------


def _hook_attnlab(cap: Capture, m: nn.Module, handles: list[Any]) -> None:
    pending: dict[str, Any] = {}
    name = cap._names.get(id(m), type(m).__name__)

    def pre(_mod, args, kwargs):
        pending.clear()
        pending["causal"] = bool(kwargs.get("causal", False))
        mask = kwargs.get("mask", args[1] if isinstance(m, SelfAttention) and len(args) > 1
                          else None)
        if mask is not None and mask.dim() == 3:  # (B, Lq, Lk) -> (B, 1, Lq, Lk)
            mask = mask[:, None]
        key_mask = kwargs.get("key_mask")
        if key_mask is not None:
            mask = combine(mask, key_mask[:, None, None, :])
        pending["mask"] = mask

    def keep(key):
        def hook(_mod, _inp, out):
            pending[key] = out.detach()
        return hook

    def done(_mod, _inp, out):
        if "weights" not in pending:
            return
        qkv = cap.qkv
        cap._add(AttentionRecord(
            name=name, weights=pending["weights"],
            q=pending.get("q") if qkv else None, k=pending.get("k") if qkv else None,
            v=pending.get("v") if qkv else None, context=out.detach() if qkv else None,
            scale=1.0 / math.sqrt(m.head_dim), mask=pending.get("mask"),
            causal=pending.get("causal", False), source="attnlab"))
        pending.clear()

    handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
    for key in ("q", "k", "v", "weights"):
        handles.append(getattr(m, f"hook_{key}").register_forward_hook(keep(key)))
    handles.append(m.hook_context.register_forward_hook(done))


# -- torch.nn.MultiheadAttention ------------------------------------------------------------

_MHA_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
             "average_attn_weights", "is_causal")


def _hook_torch_mha(cap: Capture, m: nn.MultiheadAttention, handles: list[Any]) -> None:
    asked: list[tuple[bool, bool]] = []
    pending: dict[str, Any] = {}
    name = cap._names.get(id(m), "MultiheadAttention")

    def pre(_mod, args, kwargs):
        call = dict(zip(_MHA_ARGS, args))
        call.update(kwargs)
        asked.append((bool(call.get("need_weights", True)),
                      bool(call.get("average_attn_weights", True))))
        query, key, value = call["query"], call["key"], call["value"]
        if not m.batch_first and query.dim() == 3:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if query.dim() == 2:
            query, key, value = query[None], key[None], value[None]
        b, lq, e = query.shape
        lk = key.shape[1]
        h = m.num_heads
        d = e // h
        mask = None
        attn_mask = call.get("attn_mask")
        if attn_mask is not None:
            mask = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask
            mask = mask.view(b, h, lq, lk) if mask.dim() == 3 else mask
        kpm = call.get("key_padding_mask")
        if kpm is not None:
            km = (~kpm if kpm.dtype == torch.bool else kpm > -1)[:, None, None, :]
            mask = combine(mask, km)
        pending.update(mask=mask, causal=False)
        if cap.qkv:
            if m._qkv_same_embed_dim:
                wq, wk, wv = m.in_proj_weight.split([e, e, e])
            else:
                wq, wk, wv = m.q_proj_weight, m.k_proj_weight, m.v_proj_weight
            bq = bk = bv = None
            if m.in_proj_bias is not None:
                bq, bk, bv = m.in_proj_bias.split([e, e, e])
            with torch.no_grad():
                pending["q"] = F.linear(query, wq, bq).view(b, lq, h, d).transpose(1, 2)
                pending["k"] = F.linear(key, wk, bk).view(b, lk, h, d).transpose(1, 2)
                pending["v"] = F.linear(value, wv, bv).view(b, lk, h, d).transpose(1, 2)
        kwargs = {k: v for k, v in call.items() if k not in ("query", "key", "value")}
        kwargs.update(need_weights=True, average_attn_weights=False)
        return (call["query"], call["key"], call["value"]), kwargs

    def post(_mod, _args, _kwargs, out):
        need, average = asked.pop()
        attn_out, w = out
        w4 = w if w.dim() == 4 else w[None]  # (B, H, Lq, Lk)
        ctx = None
        if cap.qkv:
            ctx = w4.detach() @ pending["v"]  # (B, H, Lq, d)
        cap._add(AttentionRecord(
            name=name, weights=w4.detach(), q=pending.get("q"), k=pending.get("k"),
            v=pending.get("v"), context=ctx, scale=1.0 / math.sqrt(m.head_dim),
            mask=pending.get("mask"), causal=False, source="torch"))
        pending.clear()
        if not need:
            return attn_out, None
        return attn_out, (w.mean(dim=-3) if average else w)

    handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
    handles.append(m.register_forward_hook(post, with_kwargs=True))


@contextlib.contextmanager
def _no_torch_fastpath() -> Iterator[None]:
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


# -- Hugging Face eager attention -----------------------------------------------------------

# Captures active in this context; the wrapped eager functions append to those that own
# the calling module.
_ACTIVE: contextvars.ContextVar[tuple[tuple[Capture, frozenset[int]], ...]] = (
    contextvars.ContextVar("attnlab_hf_capture", default=()))
_PATCH_LOCK = threading.Lock()
_PATCHED: dict[str, tuple[Any, int]] = {}  # modeling module name -> (original fn, users)


def _hf_modeling_module(m: nn.Module) -> Any | None:
    mod = sys.modules.get(type(m).__module__)
    if mod is None or not type(m).__name__.endswith("Attention"):
        return None
    fn = getattr(mod, "eager_attention_forward", None)
    return mod if callable(fn) else None


def _make_wrapper(original: Any) -> Any:
    def eager_attention_forward(module, query, key, value, attention_mask, *args, **kwargs):
        out, weights = original(module, query, key, value, attention_mask, *args, **kwargs)
        active = _ACTIVE.get()
        if active and weights is not None:
            scaling = kwargs.get("scaling", args[0] if args else None)
            for cap, owned in active:
                if id(module) in owned:
                    _record_hf(cap, module, query, key, value, attention_mask, scaling,
                               out, weights)
        return out, weights

    eager_attention_forward.__wrapped__ = original
    eager_attention_forward._attnlab_wrapper = True
    return eager_attention_forward


def _record_hf(cap: Capture, module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
               attention_mask: Tensor | None, scaling: float | None, out: Tensor,
               weights: Tensor) -> None:
    h = query.shape[1]
    d = query.shape[-1]
    q = k = v = ctx = None
    if cap.qkv:
        groups = h // key.shape[1]
        q = query.detach()  # (B, H, Lq, d), after RoPE
        k = key.detach().repeat_interleave(groups, dim=1) if groups > 1 else key.detach()
        v = value.detach().repeat_interleave(groups, dim=1) if groups > 1 else value.detach()
        ctx = out.detach().transpose(1, 2)  # (B, H, Lq, dv)
    mask = attention_mask
    if mask is not None:
        mask = mask.detach()[..., : key.shape[-2]]
    cap._add(AttentionRecord(
        name=cap._names.get(id(module), type(module).__name__), weights=weights.detach(),
        q=q, k=k, v=v, context=ctx, scale=float(scaling) if scaling is not None else d ** -0.5,
        mask=mask, causal=False, source="huggingface"))


def _patch(mod: Any) -> None:
    with _PATCH_LOCK:
        name = mod.__name__
        if name in _PATCHED:
            fn, users = _PATCHED[name]
            _PATCHED[name] = (fn, users + 1)
            return
        original = mod.eager_attention_forward
        _PATCHED[name] = (original, 1)
        mod.eager_attention_forward = _make_wrapper(original)


def _unpatch(mod: Any) -> None:
    with _PATCH_LOCK:
        name = mod.__name__
        fn, users = _PATCHED[name]
        if users > 1:
            _PATCHED[name] = (fn, users - 1)
            return
        del _PATCHED[name]
        mod.eager_attention_forward = fn


def _hf_attn_implementation(root: nn.Module) -> str | None:
    config = getattr(root, "config", None)
    return getattr(config, "_attn_implementation", None) if config is not None else None


# -- the context manager --------------------------------------------------------------------


@contextlib.contextmanager
def capture(module: nn.Module, *, qkv: bool = True) -> Iterator[Capture]:
    """Record every attention call inside ``module`` while the block runs.

    Args:
        module: any ``nn.Module``: an attnlab model, a torch model built from
            ``nn.MultiheadAttention`` / ``nn.TransformerEncoder``, or a Hugging Face model.
        qkv: also keep per-head q, k, v and context (costs memory, not compute).

    Yields:
        a :class:`Capture`; ``cap.records`` fill up as the model runs, ``cap.trace()``
        assembles an :class:`AttentionTrace`.

    A Hugging Face model loaded with another attention implementation (``sdpa``,
    ``flash_attention_2``) is switched to ``eager`` for the block and back afterwards.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    cap = Capture(module, qkv)
    handles: list[Any] = []
    patched: list[Any] = []
    owned: set[int] = set()
    found = False
    restore_impl = None
    with contextlib.ExitStack() as stack:
        try:
            for m in module.modules():
                if isinstance(m, (MultiHeadAttention, SelfAttention)):
                    _hook_attnlab(cap, m, handles)
                    found = True
                elif isinstance(m, nn.MultiheadAttention):
                    _hook_torch_mha(cap, m, handles)
                    found = True
                else:
                    mod = _hf_modeling_module(m)
                    if mod is not None:
                        owned.add(id(m))
                        if mod not in patched:
                            _patch(mod)
                            patched.append(mod)
            if not found and not owned:
                raise ValueError(
                    f"{type(module).__name__} has no attention module that attnlab can read "
                    "(attnlab MultiHeadAttention/SelfAttention, torch.nn.MultiheadAttention, "
                    "or a Hugging Face model with eager attention)"
                )
            impl = _hf_attn_implementation(module)
            if owned and impl not in (None, "eager"):
                if not hasattr(module, "set_attn_implementation"):
                    raise ValueError(
                        f"{type(module).__name__} uses attn_implementation={impl!r}, which "
                        "returns no weights; load it with attn_implementation='eager'"
                    )
                module.set_attn_implementation("eager")
                restore_impl = impl
            stack.enter_context(weights_requested())
            stack.enter_context(_no_torch_fastpath())
            token = _ACTIVE.set(_ACTIVE.get() + ((cap, frozenset(owned)),))
            try:
                yield cap
            finally:
                _ACTIVE.reset(token)
        finally:
            for hnd in handles:
                hnd.remove()
            for mod in patched:
                _unpatch(mod)
            if restore_impl is not None:
                module.set_attn_implementation(restore_impl)
