"""Reading Hugging Face transformers models (BERT, GPT-2, Llama, SmolLM2, ... families).

Modern transformers models call their attention through ``ALL_ATTENTION_FUNCTIONS``,
keyed by ``config._attn_implementation``, and build their masks through
``ALL_MASK_ATTENTION_FUNCTIONS`` under the same key. This adapter registers one
implementation named ``"attnlab"`` in both (inert for every model whose config does not
name it) and, while capturing, points the configs of the observed attention modules at it
and marks those modules. Then, for each attention call:

* the **mask function** (called once per forward and mask kind;
  :mod:`attnlab.tracing.adapters._hf_masks`) recognises the model's rule (bidirectional,
  causal, causal sliding window, or a band around each query as ModernBERT's local layers
  use), checks it exactly against the model's own mask function tile by tile, and returns
  the model's own eager mask labelled with the rule and the padding's key mask, so that a
  model that builds something from its mask (Doge) builds it from the real one. Above
  :data:`DENSE_MASK_MAX_ENTRIES` it returns only the labelled (B, 1, 1, Lk) key mask
  (O(N)); a model that then changes its mask is refused. A mask no rule describes is the
  model's own, kept densely (short inputs only);
* the **attention function** reads the call: scale (any ``scaling``), soft-cap, sliding
  window, a position bias, sink logits (``s_aux``, or per-row ``sinks``). It computes the
  attention without an N x N tensor: up to :data:`EAGER_ORDER_MAX_TOKENS` tokens in the
  eager path's own order of operations, by tiles of rows
  (:func:`~attnlab.tracing.adapters._eager.eager_order`: the model's
  outputs equal its eager outputs bit for bit), beyond that with attnlab's
  :func:`~attnlab.core.functional.scaled_dot_product_attention` (``return_lse=True``:
  torch's fused CPU kernel or the chunked backend, O(N·d) memory, float32 rounding that
  differs from eager's as the model's own ``sdpa`` path does). Grouped key/value heads are
  never repeated. Every kind of call of each module (the prompt; a decoding step through
  its KV cache; each rule, dtype and set of arguments apart) is also run, the first time it
  comes in a capture, through the module's own
  ``eager_attention_forward`` on its first :data:`CHECK_TOKENS` tokens, with the mask the
  model passed: attnlab's weights and output must equal it there, or the call raises
  :class:`~attnlab.tracing.adapters._base.UnreadableAttentionError` naming the module (a
  module that shapes its scores in a way attnlab does not record is refused, never traced
  wrongly). It records q, k, v (after RoPE), the log-sum-exp and the
  :class:`~attnlab.core.scores.ScoreShape` for the captures that marked the module (a
  second call with the same q, k and mask, as differential attention makes, is the same
  map and is recorded once), and returns the output the model expects; while captured,
  the model returns no attention weights (``output_attentions``).

  For a model run in half precision (bfloat16, float16:
  :func:`~attnlab.tracing.precision.is_half`) the recorded log-sum-exp is computed in
  float32 from the float32 q and k the trace stores, under the recorded score shapes, by
  tiles of rows (:func:`~attnlab.tracing.adapters._base.exact_lse`), in both paths: the
  model's own comes from its scores rounded in its dtype, and ``exp(s − lse)`` of the
  trace's float32 scores would not sum to 1. The output handed back to the model is still
  the one its eager path computes in its dtype. The check against eager then holds
  attnlab's weights to the bound of :mod:`attnlab.tracing.precision`, entry by entry.

How the attention function knows a mask's label. transformers hands the mask function
the model's config (its ``config`` argument) and the attention function the module (whose
``config`` is the same object) and the mask the model passes: nothing else is common to
the two calls, and nothing rides on the mask tensor. Each capture's attach makes one
:class:`~attnlab.tracing.adapters._hf_masks.MaskLabels` (the rule, the real keys and
whether the mask is only the compact key mask, of each mask handed out, held by weak
reference to it: as long as the model holds the mask, that is its forward), and each route
of a config to attnlab registers it in
:data:`~attnlab.tracing.adapters._hf_masks.ROUTES` until the capture removes its handles;
both functions look it up there from the config and take it as an argument from then on.
A mask with no label that reaches the attention while a compact mask of the same capture
is still held was built by the model from that compact mask, which lacks the rule: that is
the refusal above. The capture's sink is out of the mask function's reach (it sees no
module, only the config), and a label set on the tensor or a flag per thread would be
state that no signature shows and no capture owns.

A module whose modeling file has no attention interface or no ``eager_attention_forward``
is not read here (:func:`unreadable_reason` says why); :mod:`attnlab.tracing.adapters.inline`
reads some of them, and capture refuses the others before the model runs.

Everything is put back in ``finally``. The helpers that describe a Hugging Face model
(:func:`is_causal_config`, :func:`max_length`, :func:`describe_model`) live here too, so
that :mod:`attnlab.models` and the tracer share them.
"""

from __future__ import annotations

import functools
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab._text import one_line
from attnlab.core.functional import default_scale, scaled_dot_product_attention
from attnlab.core.masks import combine, from_torch_key_padding_mask
from attnlab.core.scores import ScoreShape
from attnlab.tracing.adapters._base import (
    AttentionRecord,
    Handle,
    Restore,
    Sink,
    UnreadableAttentionError,
    attach_each,
    dense_weights,
    detached,
    exact_lse,
)
from attnlab.tracing.adapters._batch import (
    batch_item,
    key_mask_of,
    split_dense_mask,
    visible_rule,
)
from attnlab.tracing.adapters._eager import eager_order
from attnlab.tracing.adapters._hf_describe import (
    CAUSAL_TYPES,
    describe_model,
    is_causal_config,
    is_hf_model,
    is_hf_module,
    max_length,
)
from attnlab.tracing.adapters._hf_masks import ROUTES, MaskLabels, model_mask
from attnlab.tracing.precision import is_half, row_score_error, weight_bound

__all__ = ["ADAPTER", "CAUSAL_TYPES", "CHECK_TOKENS", "DENSE_MASK_MAX_ENTRIES",
           "EAGER_ORDER_MAX_TOKENS", "IMPLEMENTATION", "describe_model", "is_causal_config",
           "is_attention_class", "is_hf_model", "is_hf_module", "max_length", "unreadable_reason"]

#: The name under which attnlab registers its attention and mask functions.
IMPLEMENTATION = "attnlab"
#: Up to this many tokens (queries and keys) the attention of a captured Hugging Face model
#: is computed in the eager order (:func:`~attnlab.tracing.adapters._eager.eager_order`:
#: the model's outputs equal its eager path's bit for bit); above it, by attnlab's core
#: attention (torch's fused CPU kernel or the chunked backend), whose float32 rounding
#: differs from eager's as the model's own ``sdpa`` path does, and whose cost does not grow
#: with a materialised tile of scores.
EAGER_ORDER_MAX_TOKENS = 2048
#: Up to this many entries (batch x queries x keys) the mask function hands the model its
#: own eager mask (labelled with the rule it follows), so that a model that changes the mask
#: before its attention changes the real one; above it only the (B, 1, 1, Lk) key mask.
DENSE_MASK_MAX_ENTRIES = 1 << 22
#: Each attention call is also run through the module's own ``eager_attention_forward`` on
#: its first this-many tokens (queries and keys), and attnlab's weights and output must
#: equal it there: a module that shapes its scores in a way attnlab does not record is
#: refused, never traced wrongly.
CHECK_TOKENS = 32
_OBSERVERS = "_attnlab_observers"  # attribute on an observed attention module
_LAST = "_attnlab_last"  # on an observed module: the q, k and mask of its last call
# on an observed module: the kinds of call already checked against eager in this capture
# (a prompt; a decoding step through the cache; each rule, dtype and argument set apart)
_CHECKED = "_attnlab_checked"


# -- the mask function ------------------------------------------------------------------------


def _mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0,
          kv_offset: int = 0, mask_function: Any = None, attention_mask: Tensor | None = None,
          use_vmap: bool = False, device: Any = "cpu", dtype: torch.dtype = torch.float32,
          config: Any = None, **kwargs: Any) -> Tensor:
    """transformers' mask interface: :func:`~attnlab.tracing.adapters._hf_masks.model_mask`,
    labelled in the :class:`~attnlab.tracing.adapters._hf_masks.MaskLabels` of the capture
    that routes ``config``, compact above :data:`DENSE_MASK_MAX_ENTRIES` entries."""
    return model_mask(ROUTES.labels_for(config), DENSE_MASK_MAX_ENTRIES,
                      batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                      q_offset=q_offset, kv_offset=kv_offset, mask_function=mask_function,
                      attention_mask=attention_mask, use_vmap=use_vmap, device=device,
                      dtype=dtype)


# -- the attention function -------------------------------------------------------------------


def _read_mask(module: nn.Module, m: Tensor | None, is_causal: bool | None,
               sliding_window: int | None, lk: int, labels: MaskLabels | None
               ) -> tuple[bool, int | None, Tensor | None, Tensor | None]:
    """(causal, window, key mask (B, Lk) or None, the model's own dense float mask
    (B, H|1, Lq, Lk), 0 = visible, very negative = hidden, or None). ``labels`` are those
    of the capture that routes the module's config (None when no capture does)."""
    flash_causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal",
                                                                         False))
    window = sliding_window if flash_causal and sliding_window else None
    if m is None:
        return flash_causal, window, None, None
    label = None if labels is None else labels.label_of(m)
    if label is not None and label.rule is not None:
        causal, window = label.rule
        return causal, window, label.keys[:, :lk], None
    if label is None and labels is not None and labels.compact_in_use():
        raise UnreadableAttentionError(
            f"{type(module).__name__} changes the attention mask before its attention; "
            f"attnlab then needs the model's own dense mask, which it builds only up to "
            f"{DENSE_MASK_MAX_ENTRIES} entries (batch x queries x keys); this input has more "
            f"(keys: {lk}): trace a shorter input"
        )
    if m.dim() == 2:  # a 2-D padding mask, as flash attention receives it
        return flash_causal, window, m[:, -lk:].bool(), None
    if m.dim() == 4 and m.shape[-2] == 1:  # (B, 1, 1, Lk): a key mask only
        km = m[:, 0, 0, :lk]
        return flash_causal, window, (km if km.dtype == torch.bool
                                      else from_torch_key_padding_mask(km.float())), None
    m = m[..., :lk]
    if m.dtype == torch.bool:  # as eager_mask turns it into floats
        m = torch.zeros(m.shape, device=m.device).masked_fill_(~m, torch.finfo(torch.float32).min)
    return False, None, None, m


def _sinks(module: nn.Module, kwargs: dict[str, Any], h: int, lq: int) -> Tensor | None:
    """The sink logits the call passes (``s_aux`` (H,) or ``sinks`` (B|1, H, Lq|1, 1)) as
    (B|1, H, 1) or, one per query row, (B|1, H, Lq); None without sinks."""
    s = kwargs.get("s_aux")
    if s is None:
        s = kwargs.get("sinks")
    if s is None:
        return None
    if not isinstance(s, Tensor):
        raise UnreadableAttentionError(
            f"{type(module).__name__} passes sink logits as {type(s).__name__}, not a tensor")
    t = s.detach()
    if t.dim() == 1 and t.shape[0] == h:
        return t[None, :, None]
    if t.dim() == 4 and t.shape[1] == h and t.shape[2] in (1, lq) and t.shape[3] == 1:
        t = t[..., 0]
        if t.shape[2] > 1 and torch.equal(t, t[:, :, :1].expand_as(t)):
            t = t[:, :, :1]  # one per head after all
        return t
    raise UnreadableAttentionError(
        f"{type(module).__name__} passes sink logits of shape {tuple(t.shape)}; attnlab "
        f"records one sink logit per head ({h}) or per head and query row ({h}, {lq})"
    )


def _shapes(scale: float, causal: bool, window: int | None, key_mask: Tensor | None,
            softcap: float | None, dense: Tensor | None, sinks: Tensor | None, b: int
            ) -> list[ScoreShape]:
    """One ScoreShape per batch element (a dense mask's hidden entries become -inf)."""
    bias = None
    if dense is not None:  # hidden: at most half the mask dtype's most negative number
        low = torch.finfo(dense.dtype).min / 2 if dense.dtype.is_floating_point else -1e30
        d = dense.detach().cpu().float()
        bias = d.masked_fill(d <= low, float("-inf"))
    out = []
    for bi in range(b):
        sk = batch_item(sinks, bi)
        if sk is not None:  # (B|1, H, Lq|1) -> (H,) or (H, Lq)
            sk = sk.float()
            sk = sk[:, 0] if sk.shape[1] == 1 else sk
        out.append(ScoreShape(scale=scale, causal=causal, window=window,
                              key_mask=key_mask_of(key_mask, bi), softcap=softcap,
                              bias=batch_item(bias, bi), sinks=sk))
    return out


def _eager_function(module: nn.Module) -> Any:
    """The ``eager_attention_forward`` of the module's own modeling file, or None."""
    mod = sys.modules.get(type(module).__module__)
    fn = getattr(mod, "eager_attention_forward", None)
    return fn if callable(fn) else None


def _prefix_kwargs(kwargs: dict[str, Any], lq: int, lk: int, nq: int, nk: int
                   ) -> dict[str, Any]:
    """The call's keyword arguments for its first ``nq`` queries and ``nk`` keys: tensors
    laid out (..., Lq, Lk) or (..., Lq, 1) are cut to the prefix, the rest kept."""
    out = {}
    for name, v in kwargs.items():
        if isinstance(v, Tensor) and v.dim() >= 2 and v.shape[-2] == lq and (
                v.shape[-1] in (lk, 1)):
            v = v[..., :nq, :nk] if v.shape[-1] == lk else v[..., :nq, :]
        out[name] = v
    out["dropout"] = 0.0
    return out


def _check_prefix(lq: int, lk: int, rule: ScoreShape) -> tuple[int, int] | None:
    """(queries, keys) of the prefix the eager check runs on, or None when no prefix is
    an attention of the same kind (a long causal or windowed call with ``lq != lk``)."""
    if lq == lk:
        n = min(lq, CHECK_TOKENS)
        return n, n
    if lq * lk <= 4 * CHECK_TOKENS ** 2:
        return lq, lk
    if not rule.causal and rule.window is None:
        # cross-attention (no rule ties a query to a key position): the first queries over
        # the first keys is a smaller attention of the same kind, read the same way
        return min(lq, CHECK_TOKENS), min(lk, CHECK_TOKENS)
    return None


def _prefix_mask(query: Tensor, rule: ScoreShape, key_mask: Tensor | None,
                 given: Tensor | None, lk: int, nq: int, nk: int) -> Tensor:
    """The additive mask eager gets on the first ``nq`` queries and ``nk`` keys: the
    model's own ``given`` full (B, H|1, Lq, Lk) mask cut to them (a boolean one made
    additive), else one rebuilt from the rule and key mask attnlab read."""
    lq = query.shape[2]
    low = torch.finfo(query.dtype).min
    if isinstance(given, Tensor) and given.dim() == 4 and given.shape[-2] == lq and (
            given.shape[-1] >= lk):
        mask = given[..., :nq, :nk]
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=query.dtype,
                               device=query.device).masked_fill_(~mask, low)
        return mask
    keep = rule.visible(torch.arange(nq, device=query.device), None, lq=nq, lk=nk)
    keep = (torch.ones(nq, nk, dtype=torch.bool, device=query.device) if keep is None
            else keep)
    keep = keep[None, None]
    if key_mask is not None:
        keep = keep & key_mask[:, None, None, :nk].to(query.device)
    return torch.zeros(keep.shape, dtype=query.dtype, device=query.device).masked_fill_(
        ~keep, low)


@dataclass(frozen=True)
class _Tolerance:
    """How far attnlab's weights may be from eager's: ``eps`` entry by entry, or, for a
    half-precision model (``row_eps`` given, per row), within tracing.precision's bound of
    the exact ones (its float32 term ``base``: float32's eps, as a float32 model is held
    to)."""

    dtype: torch.dtype
    eps: float
    base: float
    row_eps: Tensor | None


def _tolerance(q32: Tensor, k32: Tensor, shapes: list[ScoreShape],
               dtype: torch.dtype) -> _Tolerance:
    """The :class:`_Tolerance` of a model computing in ``dtype``."""
    eps = max(1e-5, 16 * torch.finfo(dtype).eps)
    row_eps = (torch.stack([row_score_error(q32[bi], k32[bi], shapes[bi], dtype)
                            for bi in range(len(shapes))]) if is_half(dtype) else None)
    base = max(1e-5, 16 * torch.finfo(torch.float32).eps)
    return _Tolerance(dtype, eps, base, row_eps)


def _weights_err(got: Tensor, ref: Tensor, tol: _Tolerance) -> tuple[str, float, float]:
    """``("weights", error, allowed)`` of attnlab's weights ``got`` against eager's."""
    diff = (got - ref).abs()
    err = float(diff.max())
    if tol.row_eps is None:
        return ("weights", err, tol.eps)
    bound = weight_bound(got, ref, tol.row_eps, tol.dtype, tol.base)
    at = int((diff.double() / bound).argmax())  # the entry nearest its own bound
    if float(diff.flatten()[at]) <= float(bound.flatten()[at]):
        return ("weights", err, max(err, float(bound.flatten()[at])))
    return ("weights", float(diff.flatten()[at]), float(bound.flatten()[at]))


def _eager_errors(name: str, w: Tensor, out: Tensor, ref_w: Any, ref_out: Any,
                  seen: Tensor, tol: _Tolerance, sinks: bool,
                  shape: tuple[int, int, int, int]) -> list[tuple[str, float, float]]:
    """``(what, error, allowed)`` of attnlab's weights ``w`` (B, H, nq, nk) and output
    against what eager returned of them; raises when it returned neither. With ``sinks``,
    weights that differ are compared renormalised per row too (a model may return the
    softmax before the sink takes its share)."""
    b, h, nq, nk = shape
    errs = []
    if isinstance(ref_w, Tensor) and tuple(ref_w.shape) == (b, h, nq, nk):
        ref_w = detached(ref_w) * seen
        errs.append(_weights_err(w, ref_w, tol))
    ref_o = detached(ref_out)
    if ref_o is not None and ref_o.shape == (b, nq, h, out.shape[-1]):
        got = detached(out).transpose(1, 2)
        errs.append(("output", float((got - ref_o).abs().max()),
                     tol.eps * max(1.0, float(ref_o.abs().max()))))
    if not errs:
        raise UnreadableAttentionError(
            f"{name}: its eager_attention_forward returns neither weights (B, H, Lq, Lk) nor "
            "an output (B, Lq, H, dv) attnlab can compare with")
    if sinks and errs[0][0] == "weights" and not errs[0][1] <= errs[0][2]:
        # some models return the softmax before the sink takes its share (and scale the
        # output instead): the recorded weights, renormalised per row, must equal it
        share = w.sum(-1, keepdim=True)
        renorm = w / share.masked_fill(share == 0, 1.0)
        errs[0] = _weights_err(renorm, ref_w, tol)
    return errs


def _check_eager(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                 rule: ScoreShape, key_mask: Tensor | None, given: Tensor | None,
                 ours_dense: Tensor | None, sinks: Tensor | None,
                 kwargs: dict[str, Any]) -> None:
    """Run the module's own eager attention on the call's first :data:`CHECK_TOKENS` tokens
    and require attnlab's weights (``exp(s − lse)`` under the recorded shapes) and output
    to equal it; raise :class:`UnreadableAttentionError` otherwise.

    ``given`` is the mask the model passed: when it is a full (B, H|1, Lq, Lk) mask, eager
    gets it as it is (so attnlab's reading of it is checked too); a key mask only (long
    inputs) is rebuilt from the rule attnlab read, which its mask function was checked
    against. ``ours_dense`` is the dense additive term attnlab records (a mask no rule
    describes, a position bias)."""
    fn = _eager_function(module)
    name = type(module).__name__
    if fn is None:
        raise UnreadableAttentionError(
            f"{name} has no eager_attention_forward in {type(module).__module__}, so attnlab "
            "cannot check its reading of the module's attention against the model's own")
    b, h, lq, _ = query.shape
    lk = key.shape[2]
    prefix = _check_prefix(lq, lk, rule)
    if prefix is None:
        return
    nq, nk = prefix
    q, k, v = query[:, :, :nq], key[:, :, :nk], value[:, :, :nk]
    if sinks is not None:
        sinks = sinks[:, :, :nq]
    mask = _prefix_mask(query, rule, key_mask, given, lk, nq, nk)
    dense = None if ours_dense is None else ours_dense[..., :nq, :nk]
    km = None if key_mask is None else key_mask[:, :nk]
    try:
        with torch.no_grad():
            ref_out, ref_w = fn(module, q, k, v, mask, **_prefix_kwargs(kwargs, lq, lk, nq, nk))
    except Exception as exc:
        raise UnreadableAttentionError(
            f"{name}: its eager_attention_forward fails on the call's own inputs, so attnlab "
            f"cannot check its reading ({type(exc).__name__}: {one_line(exc)})") from exc
    with torch.no_grad():
        out, lse = eager_order(q, k, v, rule, km, dense, 0.0, sinks)
    shapes = _shapes(rule.scale, rule.causal, rule.window, km, rule.softcap, dense, sinks, b)
    q32, k32 = detached(q), detached(k)
    if is_half(query.dtype):  # what the trace records: lse in float32 from the float32 q, k
        lse = exact_lse(q32, k32, shapes)
    w = dense_weights(q32, k32, detached(lse), shapes)
    seen = torch.isfinite(detached(lse))[..., None]  # rows that see no key are 0 in a trace
    tolerance = _tolerance(q32, k32, shapes, query.dtype)
    errs = _eager_errors(name, w, out, ref_w, ref_out, seen, tolerance, sinks is not None,
                         (b, h, nq, nk))
    bad = [(what, e, tol) for what, e, tol in errs if not e <= tol]
    if bad:
        what, e, tol = bad[0]
        raise UnreadableAttentionError(
            f"{name} shapes its attention in a way attnlab does not record: on the first "
            f"{nq} tokens attnlab's {what} differ from its eager_attention_forward by "
            f"{e:.3g} (allowed {tol:.1g}); tracing it is refused rather than wrong")


def _rule_of_dense(dense: Tensor) -> tuple[bool, Tensor | None, Tensor | None]:
    """(causal, key mask (B, Lk) or None, what remains of ``dense``) for the model's own
    dense mask (B, H|1, Lq, Lk). A mask that is a causal or padding rule plus a term per key
    (what a model that adds ALiBi to its causal mask passes) becomes that rule and the term
    (B, H|1, 1, Lk), or no term where it is 0: O(Lk) kept instead of O(Lq·Lk), the same
    values added to the same scores, and the fast path when nothing remains. Any other
    mask stays as it is (not causal, no key mask)."""
    split = split_dense_mask(dense.detach())  # the term in the mask's dtype, as eager adds it
    rule = None if split is None else visible_rule(split[0])
    if rule is None or split is None:
        return False, None, dense
    causal, keys = rule
    term = split[1]
    return causal, keys, (term if bool(term.any()) else None)


def _unfilled_cut(module: nn.Module, key: Tensor, value: Tensor, mask: Tensor | None
                  ) -> tuple[Tensor, Tensor, Tensor | None]:
    """A causal call through a preallocated (static) KV cache reads all of its slots and
    hides the ones not yet filled from every query: those trailing keys are cut (they take
    weight 0 exactly), so the call is the attention over the keys it can see, as a dynamic
    cache's call is. Only for a causal module's self-attention (cross-attention's keys are
    another text's, padded or not), with a dense mask (B, H|1, Lq, Lk) that hides a run of
    trailing keys from every row, and more keys than queries."""
    if mask is None or mask.dim() != 4 or mask.shape[-1] != key.shape[2] or (
            mask.shape[-2] >= key.shape[2]) or not getattr(module, "is_causal", False):
        return key, value, mask
    seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    cols = seen.reshape(-1, seen.shape[-1]).any(dim=0)
    n = int(cols.nonzero().max()) + 1 if bool(cols.any()) else key.shape[2]
    if n >= key.shape[2] or n < mask.shape[-2]:
        return key, value, mask
    return key[:, :, :n].clone(), value[:, :, :n].clone(), mask[..., :n]


def _attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
               attention_mask: Tensor | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' attention interface: q (B, H, Lq, d), k, v (B, H_kv, Lk, .) ->
    output (B, Lq, H, dv), computed by attnlab, checked against the module's own eager
    attention on a prefix, and recorded for the observers."""
    b, h, lq, d = query.shape
    key, value, attention_mask = _unfilled_cut(module, key, value, attention_mask)
    lk = key.shape[2]
    scaling = kwargs.get("scaling")
    scale = float(scaling) if scaling is not None else default_scale(d)
    softcap = kwargs.get("softcap")
    softcap = None if softcap is None else float(softcap)
    labels = ROUTES.labels_for(getattr(module, "config", None))
    causal, window, key_mask, dense = _read_mask(module, attention_mask, kwargs.get("is_causal"),
                                                 kwargs.get("sliding_window"), lk, labels)
    position_bias = kwargs.get("position_bias")
    if position_bias is not None:  # T5-style relative bias: (B|1, H, Lq, Lk), added
        pb = position_bias[..., :lk]
        dense = pb if dense is None else dense + pb
    if dense is not None and not causal and window is None and key_mask is None:
        causal, key_mask, dense = _rule_of_dense(dense)
    sinks = _sinks(module, kwargs, h, lq)
    if key_mask is not None and bool(key_mask.all()):
        key_mask = None
    shapes = _shapes(scale, causal, window, key_mask, softcap, dense, sinks, b)
    dropout = float(kwargs.get("dropout") or 0.0)
    rule = ScoreShape(scale=scale, causal=causal, window=window, softcap=softcap)
    kind = (lq == lk, causal, window, softcap, dense is None, sinks is None, key_mask is None,
            query.dtype, tuple(sorted(kwargs)))
    checked = module.__dict__.get(_CHECKED)
    if not (module.training and dropout > 0.0) and (checked is None or kind not in checked):
        _check_eager(module, query, key, value, rule, key_mask, attention_mask, dense, sinks,
                     kwargs)
        if checked is not None:  # observed: this kind of call is checked once per capture
            checked.add(kind)
    if (softcap is not None or dense is not None or sinks is not None
            or max(lq, lk) <= EAGER_ORDER_MAX_TOKENS):
        out, lse = eager_order(query, key, value, rule, key_mask, dense, dropout, sinks)
    elif (got := _taken(module, query, key, value, scale, causal, window, key_mask,
                        dropout)) is not None:
        out, lse = got
    else:
        mask = None if key_mask is None else key_mask[:, None, None, :]
        if window is not None:
            band = rule.visible(torch.arange(lq, device=query.device), None, lq=lq, lk=lk)
            mask = combine(mask, band)
            causal = False
        out, lse = scaled_dot_product_attention(
            query, key, value, mask, causal=causal, scale=scale, dropout_p=dropout,
            return_lse=True)
    observers = list(module.__dict__.get(_OBSERVERS, ()))
    if observers:
        # the last call's q, k and mask by weak reference: holding them would keep every
        # layer's q and k alive until the capture ends (a streamed trace keeps one layer)
        last = module.__dict__.get(_LAST)
        module.__dict__[_LAST] = tuple(_weak(x) for x in (query, key, attention_mask))
        repeat = (last is not None and last[0]() is query and last[1]() is key
                  and last[2]() is attention_mask)
        if not repeat:  # a repeat: the same map again (differential attention, other values)
            if is_half(query.dtype):
                # the model's lse comes from its scores rounded in its dtype; the trace
                # recomputes scores in float32 from the float32 q and k it stores, so its
                # lse is computed the same way (by tiles of rows), and exp(s − lse) sums to
                # 1 within float32 rounding. The model's output is left as computed.
                lse = exact_lse(detached(query), detached(key), shapes)
            for cap in observers:
                _record(cap, module, query, key, value, lse, out, shapes)
    return out.transpose(1, 2).contiguous(), None


def _taken(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, scale: float,
           causal: bool, window: int | None, key_mask: Tensor | None, dropout: float
           ) -> tuple[Tensor, Tensor] | None:
    """The call's output and lse from the taker of a capture observing ``module``
    (:mod:`attnlab.tracing.forward_sums`), where one has a taker and the call is one
    sequence's self-attention without window, padding or dropout; else None."""
    taker = next((c.taker for c in module.__dict__.get(_OBSERVERS, ()) if c.taker is not None),
                 None)
    if (taker is None or query.shape[0] != 1
            or window is not None or key_mask is not None or dropout > 0.0
            or query.shape[2] != key.shape[2] or is_half(query.dtype)):
        return None
    got = taker.attention(query[0], key[0], value[0], scale=scale, causal=causal)
    return None if got is None else (got[0][None], got[1][None])


def _weak(x: Tensor | None) -> Any:
    """A weak reference to ``x`` (called: ``x`` while it lives, else None); None's is None."""
    return weakref.ref(x) if x is not None else (lambda: None)


def _record(cap: Sink, module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
            lse: Tensor, out: Tensor, shapes: list[ScoreShape]) -> None:
    q, k, lse32 = detached(query), detached(key), detached(lse)
    if cap.qkv:
        rec = AttentionRecord(name=cap.name_of(module), source=ADAPTER.name, shapes=shapes,
                              q=q, k=k, v=detached(value), lse=lse32)
    else:
        rec = AttentionRecord(name=cap.name_of(module), source=ADAPTER.name, shapes=shapes,
                              weights=dense_weights(q, k, lse32, shapes))
    if cap.context:
        rec.context = detached(out)
    cap.add(rec)


def _register() -> None:
    """Register attnlab's attention and mask functions with transformers (once)."""
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    if AttentionInterface._global_mapping.get(IMPLEMENTATION) is not _attention:
        AttentionInterface.register(IMPLEMENTATION, _attention)
    if AttentionMaskInterface._global_mapping.get(IMPLEMENTATION) is not _mask:
        AttentionMaskInterface.register(IMPLEMENTATION, _mask)


#: How transformers names its attention modules: ``...Attention``, and ``...MLA`` for the
#: multi-head latent attention of LongCat-Flash (transformers >= 5.25).
ATTENTION_CLASS_SUFFIXES = ("Attention", "MLA")


def is_attention_class(cls: type) -> bool:
    """Whether a transformers class name is that of an attention module."""
    return cls.__name__.endswith(ATTENTION_CLASS_SUFFIXES)


def unreadable_reason(module: nn.Module) -> str | None:
    """Why no adapter can read this Hugging Face attention module exactly, or None when it
    is not one (its class name ends in neither ``Attention`` nor ``MLA``) or the adapter
    reads it.

    attnlab reads a transformers attention module through the attention interface of its
    modeling file and checks its reading against that file's ``eager_attention_forward``;
    a module whose file has neither computes its softmax inline, out of reach."""
    cls = type(module)
    if not is_hf_module(module) or not is_attention_class(cls):
        return None
    if ADAPTER.matches(module):
        return None
    mod = sys.modules.get(cls.__module__)
    where = cls.__module__
    if mod is None or not hasattr(mod, "ALL_ATTENTION_FUNCTIONS"):
        return (f"{cls.__name__} computes its attention inline ({where} has no attention "
                "interface to route it through and no eager_attention_forward)")
    if _eager_function(module) is None:
        return (f"{cls.__name__} goes through the attention interface but {where} has no "
                "eager_attention_forward to check attnlab's reading against")
    return (f"{cls.__name__} does not go through the attention interface of {where} (it "
            "keeps no config to route it by), so attnlab has no softmax to read")


class _HuggingFaceAdapter:
    name = "huggingface"

    def matches(self, module: nn.Module) -> bool:
        cls = type(module)
        if not is_attention_class(cls):
            return False
        config = getattr(module, "config", None)
        if config is None or not hasattr(config, "_attn_implementation_internal"):
            return False
        mod = sys.modules.get(cls.__module__)
        return (mod is not None and hasattr(mod, "ALL_ATTENTION_FUNCTIONS")
                and _eager_function(module) is not None)

    def attach(self, cap: Sink, modules: list[nn.Module]) -> list[Handle]:
        _register()
        labels = MaskLabels()  # the masks handed out while this capture routes the configs
        configs = {id(m.config): m.config for m in modules}
        # each module observed by cap, then each config routed to attnlab: all or nothing
        steps = ([functools.partial(_observe, m, cap) for m in modules]
                 + [functools.partial(_route, c, labels) for c in configs.values()])
        return attach_each(steps, lambda step: [step()])


def _observe(m: nn.Module, cap: Sink) -> Handle:
    """``cap`` among the observers of ``m`` (until the handle is removed)."""
    m.__dict__.setdefault(_OBSERVERS, []).append(cap)
    m.__dict__.setdefault(_CHECKED, set())
    return Restore(lambda: _unobserve(m, cap))


def _route(config: Any, labels: MaskLabels) -> Handle:
    """``config``'s attention implementation set to attnlab's, and the masks built for it
    labelled in ``labels`` (until the handle is removed)."""
    before = config._attn_implementation_internal
    config._attn_implementation_internal = IMPLEMENTATION
    unroute = ROUTES.route(config, labels)

    def undo() -> None:
        unroute.remove()
        config._attn_implementation_internal = before

    return Restore(undo)


def _unobserve(m: nn.Module, cap: Sink) -> None:
    observers = m.__dict__.get(_OBSERVERS, [])
    if cap in observers:
        observers.remove(cap)
    if not observers:
        m.__dict__.pop(_OBSERVERS, None)
        m.__dict__.pop(_LAST, None)
        m.__dict__.pop(_CHECKED, None)


#: The adapter for Hugging Face models.
ADAPTER = _HuggingFaceAdapter()
