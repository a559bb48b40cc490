"""Whether a trace equals a model's own attention: one comparison, one tolerance, one sink rule.

:func:`check_stack` compares one stack of a trace (an :class:`~attnlab.tracing.attention
.AttentionTrace`: ``self``, ``encoder``, ``decoder`` or ``cross``) with the model's own
attention maps for it (``output_attentions``: one (1, H, Lq, Lk) or (H, Lq, Lk) tensor per
layer, or one (L, H, Lq, Lk) tensor), head by head in float64, so that a long encoder never
needs every layer's weights at once; :func:`verify` does it for every stack of a
:class:`~attnlab.tracing.stacks.StackedTrace` (or the one stack of a trace). Each gives a
:class:`StackCheck`:

* the **weights**: the trace's weights against the maps, at most :data:`EXACT_TOL` apart
  (float32 rounding: attnlab computes ``exp(s − lse)`` where eager divides by a sum). The
  rounding of ``s − lse`` grows with the size of the log-sum-exp, so a stack whose rows reach
  ``|lse|`` above :data:`LSE_SCALE` is held to ``EXACT_TOL · max|lse| / LSE_SCALE``
  (:func:`tolerance`; a real model's peaked heads reach ``|lse|`` of 30 or more, a tiny
  random one stays below 8). That one rule judges every stack, and the recompute check too;
* the **sink rule**: a model with learned sink logits may return its softmax *before* the
  sink's share (and scale its output instead). When the trace has sinks and its weights are
  farther than :data:`EXACT_TOL` from the maps, the rows of its sink layers are compared
  renormalised to sum to 1, if that is closer (``compared`` says so: :data:`SINK_RULE`);
* the **recompute check**: the weights rebuilt from the trace's q and k alone (each row's
  log-sum-exp recomputed, :func:`attnlab.core.scores.row_logsumexp`, then
  :func:`attnlab.core.weights.shaped_weights` under the recorded
  :class:`~attnlab.core.scores.ScoreShape`) against the trace's, at most :data:`RECOMPUTE_TOL`
  apart (scaled as the weights): the captured log-sum-exp, q, k and score shape agree;
* the **causal flag**: a layer marked causal has maps that are zero above the diagonal (random
  weights make them nonzero everywhere else), a layer marked bidirectional has not (layers
  with an additive bias are not judged: the bias may mask);
* the **sizes**: as many layers as maps, and each map (heads, queries, keys) as the trace's.

A check passes when it found no problem (:attr:`StackCheck.problems`).

>>> import torch
>>> from attnlab.tracing.attention import AttentionTrace
>>> w = torch.softmax(torch.randn(1, 2, 3, 3), -1)
>>> t = AttentionTrace(tokens=list("abc"), weights=w)
>>> c = check_stack(t, [w])
>>> (c.layers, c.heads, c.queries, c.keys), c.weights_error < 1e-6, c.passed
((1, 2, 3, 3), True, True)
>>> check_stack(t, [w.flip(-1)]).problems[0][:36]
'weights differ from output_attention'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.core.scores import row_logsumexp
from attnlab.core.weights import shaped_weights
from attnlab.tracing.attention import AttentionTrace

__all__ = ["EXACT_TOL", "LSE_SCALE", "RECOMPUTE_TOL", "SINK_RULE", "StackCheck", "check_stack",
           "tolerance", "verify", "worst"]

#: The largest difference between the trace's weights and the model's ``output_attentions``
#: for a stack to count as exact (float32 rounding of ``exp(s − lse)`` against softmax).
EXACT_TOL = 1e-6
#: The largest difference between weights recomputed from q and k and the trace's.
RECOMPUTE_TOL = 1e-5
#: The size of log-sum-exp up to which the tolerances hold as they are (see :func:`tolerance`).
LSE_SCALE = 8.0
#: What ``compared`` says when the sink rule was applied.
SINK_RULE = "rows renormalised: the model returns its softmax before the sink's share"


@dataclass(frozen=True)
class StackCheck:
    """One stack of a trace against the model's own maps (see the module docstring).

    ``weights_error`` is the largest |trace − maps| (``inf`` when the sizes differ),
    ``weights_tol`` and ``recompute_tol`` the tolerances the stack was held to
    (:func:`tolerance`),
    ``head_errors`` the same per layer and head (empty when the sizes differ),
    ``recompute_error`` the largest |weights from q and k − trace's weights| (NaN when not
    recomputed), ``compared`` empty or :data:`SINK_RULE`."""

    stack: str
    layers: int
    heads: int
    queries: int
    keys: int
    shape_ok: bool
    weights_error: float
    recompute_error: float
    weights_tol: float = EXACT_TOL
    recompute_tol: float = RECOMPUTE_TOL
    head_errors: tuple[tuple[float, ...], ...] = ()
    compared: str = ""
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """No problem found: the trace is this stack of the model, exactly."""
        return not self.problems


def tolerance(base: float, trace: AttentionTrace) -> float:
    """``base`` scaled to the trace's largest finite ``|lse|`` over :data:`LSE_SCALE`
    (``base`` itself when that is smaller, or when the trace holds dense weights only).

    >>> import torch
    >>> w = torch.softmax(torch.randn(1, 1, 2, 2), -1)
    >>> tolerance(EXACT_TOL, AttentionTrace(tokens=["a", "b"], weights=w)) == EXACT_TOL
    True
    """
    if trace.lse is None or not trace.lse.numel():
        return base
    top = 0.0
    for layer in range(trace.num_layers):
        lse = trace.layer_tensor("lse", layer)  # one layer at a time, read checked
        finite = lse[torch.isfinite(lse)]
        if finite.numel():
            top = max(top, float(finite.abs().max()))
    return base * max(1.0, top / LSE_SCALE)


def _maps(reference: Any) -> list[Tensor]:
    """Each layer's (H, Lq, Lk) map, float64, from what ``output_attentions`` gives."""
    if isinstance(reference, Tensor):
        if reference.dim() != 4:
            raise ValueError(f"reference must be one (L, H, Lq, Lk) tensor or one map per "
                             f"layer, got a tensor of shape {tuple(reference.shape)}")
        layers = list(reference)
    elif isinstance(reference, Sequence) and not isinstance(reference, (str, bytes)):
        layers = list(reference)
    else:
        raise TypeError(f"reference must be a tensor or a sequence of tensors (one per layer), "
                        f"got {type(reference).__name__}")
    out = []
    for i, m in enumerate(layers):
        if not isinstance(m, Tensor) or m.dim() not in (3, 4):
            got = tuple(m.shape) if isinstance(m, Tensor) else type(m).__name__
            raise ValueError(f"reference[{i}] must be a (1, H, Lq, Lk) or (H, Lq, Lk) tensor, "
                             f"got {got}")
        out.append((m[0] if m.dim() == 4 else m).detach().double())
    return out


def _sizes_problem(trace: AttentionTrace, maps: list[Tensor]) -> str:
    want = (trace.num_heads, trace.seq_len, trace.key_len)
    if len(maps) != trace.num_layers:
        return f"{trace.num_layers} layers traced, the model returns {len(maps)} maps"
    shapes = sorted({tuple(m.shape) for m in maps})
    if shapes != [want]:
        return (f"the trace holds weights {(trace.num_layers, *want)} (layers, heads, queries, "
                f"keys), the model's own maps are {shapes[0] if len(shapes) == 1 else shapes}"
                f"{' (they differ in shape between layers)' if len(shapes) > 1 else ''}")
    return ""


def _can_recompute(trace: AttentionTrace) -> str:
    """Why the weights cannot be rebuilt from q and k ("" when they can)."""
    if not trace.has_qk:
        return "the trace holds no q and k to recompute its weights from"
    if trace.groups is not None:
        return "the trace merges pieces into tokens; its weights are not recomputed"
    return ""


def _renormalised(w: Tensor) -> Tensor:
    share = w.sum(-1, keepdim=True)
    return w / share.masked_fill(share == 0, 1.0)


def check_stack(trace: AttentionTrace, reference: Any, *, stack: str | None = None,
                recompute: bool | None = None) -> StackCheck:
    """One stack of a trace against the model's own maps for it (``reference``: one
    (1, H, Lq, Lk) or (H, Lq, Lk) tensor per layer, or one (L, H, Lq, Lk) tensor).

    ``stack`` names the result (default ``trace.stack``). ``recompute``: ``True`` requires
    the recompute check (a trace without q and k is a problem), ``False`` leaves it out,
    ``None`` (default) does it when the trace holds q and k."""
    if not isinstance(trace, AttentionTrace):
        raise TypeError(f"trace must be an AttentionTrace (one stack), got "
                        f"{type(trace).__name__}")
    maps = _maps(reference)
    name = trace.stack if stack is None else stack
    sizes = dict(stack=name, layers=trace.num_layers, heads=trace.num_heads,
                 queries=trace.seq_len, keys=trace.key_len)
    problems: list[str] = []
    why_not = _can_recompute(trace) if recompute is not False else "not asked"
    if why_not and recompute:
        problems.append(why_not)
    wrong_size = _sizes_problem(trace, maps)
    tols = dict(weights_tol=tolerance(EXACT_TOL, trace),
                recompute_tol=tolerance(RECOMPUTE_TOL, trace))
    if wrong_size:
        return StackCheck(**sizes, shape_ok=False, weights_error=math.inf,
                          recompute_error=math.nan, **tols, problems=(wrong_size, *problems))
    raw: list[list[float]] = []
    renorm: list[list[float]] = []
    rec = 0.0
    lq, lk = trace.seq_len, trace.key_len
    shapes = trace.shapes
    for layer, want in enumerate(maps):
        sinks = bool(shapes) and shapes[layer].sinks is not None
        lse = None
        if not why_not:
            shape = trace.score_shape(layer)
            q, k = trace.layer_tensor("q", layer), trace.layer_tensor("k", layer)  # checked
            lse = row_logsumexp(q, k, shape)  # (H, Lq), recomputed
        raw.append([])
        renorm.append([])
        for h in range(trace.num_heads):
            got = trace.head_weights(layer, h).double()
            err = float((got - want[h]).abs().max()) if got.numel() else 0.0
            raw[-1].append(err)
            renorm[-1].append(float((_renormalised(got) - want[h]).abs().max())
                              if sinks and got.numel() else err)
            if lse is not None:
                w = shaped_weights(q[h], k[trace.kv_head(h)], lse[h], shape, rows=range(lq),
                                   head=h, lq=lq, lk=lk)
                if w.numel():
                    rec = max(rec, float((w.double() - got).abs().max()))
    head_errors, compared = raw, ""
    weights_error = max((e for row in raw for e in row), default=0.0)
    worst_renorm = max((e for row in renorm for e in row), default=0.0)
    if weights_error > tols["weights_tol"] and worst_renorm < weights_error:  # the sink rule
        head_errors, compared, weights_error = renorm, SINK_RULE, worst_renorm
    if weights_error > tols["weights_tol"]:
        problems.append(f"weights differ from output_attentions by {weights_error:.2e}")
    recompute_error = math.nan if why_not else rec
    if recompute_error > tols["recompute_tol"]:
        problems.append(f"weights recomputed from q and k differ by {recompute_error:.2e}")
    for layer, (shape, m) in enumerate(zip(shapes, maps)):
        upper = bool((m.triu(1) != 0).any())  # whether a query sees later keys
        if shape.bias is None and shape.causal == upper:
            problems.append(f"layer {layer} is marked causal={shape.causal} but its maps "
                            f"{'do' if upper else 'do not'} reach later keys")
    return StackCheck(**sizes, shape_ok=True, weights_error=weights_error,
                      recompute_error=recompute_error, **tols,
                      head_errors=tuple(tuple(r) for r in head_errors), compared=compared,
                      problems=tuple(problems))


def verify(trace: Any, reference: Any, *, recompute: bool | None = None
           ) -> dict[str, StackCheck]:
    """Every stack of ``trace`` against the model's own maps: ``{stack: StackCheck}``.

    ``trace`` is an :class:`AttentionTrace` (then ``reference`` is its maps, or a mapping
    holding them under its stack's name) or a :class:`~attnlab.tracing.stacks.StackedTrace`
    or any mapping of stack names to traces (then ``reference`` maps each stack's name to
    its maps; a stack missing from it is a ``ValueError``). ``recompute`` as
    :func:`check_stack`.

    >>> import torch
    >>> w = torch.softmax(torch.randn(1, 2, 3, 3), -1)
    >>> t = AttentionTrace(tokens=list("abc"), weights=w, stack="encoder")
    >>> {n: c.passed for n, c in verify({"encoder": t}, {"encoder": (w,)}).items()}
    {'encoder': True}
    """
    if isinstance(trace, AttentionTrace):
        if isinstance(reference, Mapping):
            traces = {trace.stack: trace}
        else:
            return {trace.stack: check_stack(trace, reference, recompute=recompute)}
    elif isinstance(trace, Mapping):
        traces = dict(trace.items())
    else:
        raise TypeError(f"trace must be an AttentionTrace, a StackedTrace or a mapping of "
                        f"stack names to traces, got {type(trace).__name__}")
    if not isinstance(reference, Mapping):
        raise TypeError(f"reference must map each stack's name to its maps, got "
                        f"{type(reference).__name__}")
    out = {}
    for name, t in traces.items():
        if name not in reference:
            raise ValueError(f"reference has no attention for stack {name!r}; it holds "
                             f"{sorted(reference)}")
        out[name] = check_stack(t, reference[name], stack=name, recompute=recompute)
    return out


def worst(checks: Mapping[str, StackCheck] | Sequence[StackCheck]) -> dict[str, float]:
    """The largest errors over several stacks: ``{"weights": ..., "recomputed": ...}``
    (recomputation NaN when no stack was recomputed)."""
    items = list(checks.values() if isinstance(checks, Mapping) else checks)
    rec = [c.recompute_error for c in items if not math.isnan(c.recompute_error)]
    return {"weights": max((c.weights_error for c in items), default=0.0),
            "recomputed": max(rec) if rec else math.nan}
