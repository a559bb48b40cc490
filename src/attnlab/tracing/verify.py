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

* the **precision**: a model run in half precision (bfloat16, float16; ``meta["precision"]``
  says so, :func:`attnlab.tracing.precision.precision_of`, or else the maps' own dtype)
  rounds its scores before its softmax, so its maps are farther from the trace's exact
  weights than float32 rounding. Its stack is held, entry by entry, to the bound
  :func:`attnlab.tracing.precision.weight_bound` derives: ``|p̃ − p| ≤ p·(e^{2ε} − 1) + u·p̃ +
  tol₃₂`` with ``ε`` each row's largest score rounding (``c·u·max|s|``, ``u`` the dtype's
  unit roundoff) and ``tol₃₂`` the float32 rule's tolerance; ``weights_tol`` is then that
  bound over the whole stack (``e^{2ε} − 1 + u + tol₃₂``), ``bound_ratio`` the largest
  ``|p̃ − p| / bound`` (at most 1 to pass). The trace's own rows still sum to 1 within
  float32 rounding (its log-sum-exp is computed in float32 from the q and k it stores), and
  the recompute check keeps the float32 rule. :func:`half_precision_check` measures both
  for a Hugging Face model run in a half-precision dtype.

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

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import Tensor

from attnlab.core.scores import row_logsumexp
from attnlab.core.weights import shaped_weights
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.precision import (
    dtype_named,
    is_half,
    precision_of,
    row_score_error,
    unit_roundoff,
    weight_bound,
)

__all__ = ["EXACT_TOL", "LSE_SCALE", "RECOMPUTE_TOL", "SINK_RULE", "PrecisionCheck", "StackCheck",
           "check_stack", "half_precision_check", "precision_check", "row_sum_error",
           "stack_precision", "tolerance", "verify", "worst"]

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
    recomputed), ``compared`` empty or :data:`SINK_RULE`. ``precision`` is the dtype the
    model ran in (``"float32"`` for the float32 rule); in half precision ``weights_tol`` is
    the half-precision bound over the stack and ``bound_ratio`` the largest
    |trace − maps| / the entry's own bound (NaN in float32)."""

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
    precision: str = "float32"
    bound_ratio: float = math.nan

    @property
    def passed(self) -> bool:
        """No problem found: the trace is this stack of the model, exactly."""
        return not self.problems


class _Sizes(TypedDict):
    """What a stack was compared over: :class:`StackCheck`'s fields of these names."""

    stack: str
    layers: int
    heads: int
    queries: int
    keys: int


class _Tolerances(TypedDict):
    """What a stack was held to: :class:`StackCheck`'s fields of these names."""

    weights_tol: float
    recompute_tol: float


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


def _reference_dtype(reference: Any) -> torch.dtype | None:
    if isinstance(reference, Tensor):
        return reference.dtype
    if isinstance(reference, Sequence) and reference and isinstance(reference[0], Tensor):
        return reference[0].dtype
    return None


def stack_precision(trace: AttentionTrace, reference: Any = None) -> torch.dtype:
    """The dtype the model ran in, for the rule its maps are held to: ``meta["precision"]
    ["dtype"]`` (:func:`attnlab.tracing.precision.precision_of`), else the dtype of the
    maps when it is a half-precision one (maps cannot be more exact than their dtype), else
    float32.

    >>> w = torch.softmax(torch.randn(1, 1, 2, 2), -1)
    >>> t = AttentionTrace(tokens=["a", "b"], weights=w, meta={"precision": {"dtype": "float16"}})
    >>> stack_precision(t), stack_precision(AttentionTrace(tokens=["a", "b"], weights=w),
    ...                                     [w.bfloat16()])
    (torch.float16, torch.bfloat16)
    """
    info = trace.meta.get("precision")
    if info is not None:
        if not isinstance(info, Mapping) or "dtype" not in info:
            raise ValueError(f"trace.meta['precision'] must be a mapping with a 'dtype' (as "
                             f"precision_of gives), got {info!r}")
        return dtype_named(info["dtype"])
    dt = _reference_dtype(reference)
    if dt is not None and dt.is_floating_point and is_half(dt):
        return dt
    return torch.float32


def _renormalised(w: Tensor) -> Tensor:
    share = w.sum(-1, keepdim=True)
    return w / share.masked_fill(share == 0, 1.0)


@dataclass(frozen=True)
class _Errors:
    """What comparing a trace's weights with the model's maps measured: per layer and head
    the largest |trace − maps| (``raw``) and the same with rows renormalised where the
    layer has sinks (``renorm``; ``raw``'s value elsewhere); the largest |trace − maps| /
    the entry's bound, raw and renormalised (``ratios``, 0 unless bounded); the largest
    row score error (``eps_max``); the largest |weights from q and k − trace's|
    (``recompute``, 0 unless recomputed)."""

    raw: list[list[float]]
    renorm: list[list[float]]
    ratios: tuple[float, float]
    eps_max: float
    recompute: float


def _measure(trace: AttentionTrace, maps: list[Tensor], dtype: torch.dtype, base: float, *,
             recompute: bool, bound: bool) -> _Errors:
    """Compare each head of ``trace`` with the model's ``maps`` (of the right sizes);
    ``recompute``: also rebuild its weights from q and k; ``bound``: also hold them to the
    half-precision bound of ``dtype`` entry by entry (float32 term ``base``)."""
    raw: list[list[float]] = []
    renorm: list[list[float]] = []
    ratios = [0.0, 0.0]  # the largest |trace − maps| / bound, raw and renormalised
    eps_max = 0.0
    rec = 0.0
    lq, lk = trace.seq_len, trace.key_len
    shapes = trace.shapes
    for layer, want in enumerate(maps):
        sinks = bool(shapes) and shapes[layer].sinks is not None
        lse = row_eps = None
        if recompute or bound:
            shape = trace.score_shape(layer)
            q, k = trace.layer_tensor("q", layer), trace.layer_tensor("k", layer)  # checked
        if recompute:
            lse = row_logsumexp(q, k, shape)  # (H, Lq), recomputed
        if bound:
            row_eps = row_score_error(q, k, shape, dtype)  # (H, Lq)
            eps_max = max(eps_max, float(row_eps.max()) if row_eps.numel() else 0.0)
        raw.append([])
        renorm.append([])
        for h in range(trace.num_heads):
            got = trace.head_weights(layer, h).double()
            err = float((got - want[h]).abs().max()) if got.numel() else 0.0
            raw[-1].append(err)
            renorm[-1].append(float((_renormalised(got) - want[h]).abs().max())
                              if sinks and got.numel() else err)
            if row_eps is not None and got.numel():
                for i, g in enumerate((got, _renormalised(got) if sinks else got)):
                    limit = weight_bound(g, want[h], row_eps[h], dtype, base)
                    ratios[i] = max(ratios[i], float(((g - want[h]).abs() / limit).max()))
            if lse is not None:
                w = shaped_weights(q[h], k[trace.kv_head(h)], lse[h], shape, rows=range(lq),
                                   head=h, lq=lq, lk=lk)
                if w.numel():
                    rec = max(rec, float((w.double() - got).abs().max()))
    return _Errors(raw, renorm, (ratios[0], ratios[1]), eps_max, rec)


def _causal_problems(trace: AttentionTrace, maps: list[Tensor]) -> list[str]:
    """A problem for each layer without a bias whose recorded causal flag the model's maps
    contradict."""
    problems = []
    for layer, (shape, m) in enumerate(zip(trace.shapes, maps)):
        upper = bool((m.triu(1) != 0).any())  # whether a query sees later keys
        if shape.bias is None and shape.causal == upper:
            problems.append(f"layer {layer} is marked causal={shape.causal} but its maps "
                            f"{'do' if upper else 'do not'} reach later keys")
    return problems


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
    dtype = stack_precision(trace, reference)
    half = is_half(dtype)
    maps = _maps(reference)
    name = trace.stack if stack is None else stack
    # StackCheck's fields, by group
    sizes = _Sizes(stack=name, layers=trace.num_layers, heads=trace.num_heads,
                   queries=trace.seq_len, keys=trace.key_len)
    problems: list[str] = []
    why_not = _can_recompute(trace) if recompute is not False else "not asked"
    if why_not and recompute:
        problems.append(why_not)
    wrong_size = _sizes_problem(trace, maps)
    tols = _Tolerances(weights_tol=tolerance(EXACT_TOL, trace),
                       recompute_tol=tolerance(RECOMPUTE_TOL, trace))
    base = tols["weights_tol"]
    precision = str(dtype).removeprefix("torch.") if half else "float32"
    no_qk = _can_recompute(trace) if half else ""
    if no_qk:  # the bound needs each row's scores
        problems.append(f"the {precision} rule needs each row's scores: {no_qk}")
    if wrong_size:
        return StackCheck(**sizes, shape_ok=False, weights_error=math.inf,
                          recompute_error=math.nan, **tols, problems=(wrong_size, *problems),
                          precision=precision)
    errors = _measure(trace, maps, dtype, base, recompute=not why_not,
                      bound=half and not no_qk)
    raw, renorm, ratios = errors.raw, errors.renorm, errors.ratios
    head_errors, compared = raw, ""
    weights_error = max((e for row in raw for e in row), default=0.0)
    worst_renorm = max((e for row in renorm for e in row), default=0.0)
    ratio = math.nan
    if half:  # the half-precision bound over the stack, and entry by entry (module docstring)
        u = unit_roundoff(dtype)
        tols["weights_tol"] = math.expm1(2 * errors.eps_max) + u + base
        ratio = ratios[0]
        if ratio > 1 and ratios[1] < ratio:  # the sink rule
            head_errors, compared, weights_error, ratio = renorm, SINK_RULE, worst_renorm, \
                ratios[1]
        if ratio > 1:
            problems.append(
                f"weights differ from output_attentions by {weights_error:.2e}, beyond the "
                f"{precision} bound at some entry (|trace − maps| / bound = "
                f"{ratio:.3g}, must be at most 1)")
    else:
        if weights_error > tols["weights_tol"] and worst_renorm < weights_error:  # sink rule
            head_errors, compared, weights_error = renorm, SINK_RULE, worst_renorm
        if weights_error > tols["weights_tol"]:
            problems.append(f"weights differ from output_attentions by {weights_error:.2e}")
    recompute_error = math.nan if why_not else errors.recompute
    if recompute_error > tols["recompute_tol"]:
        problems.append(f"weights recomputed from q and k differ by {recompute_error:.2e}")
    problems.extend(_causal_problems(trace, maps))
    return StackCheck(**sizes, shape_ok=True, weights_error=weights_error,
                      recompute_error=recompute_error, **tols,
                      head_errors=tuple(tuple(r) for r in head_errors), compared=compared,
                      problems=tuple(problems), bound_ratio=ratio, precision=precision)


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


def row_sum_error(trace: AttentionTrace) -> float:
    """The largest ``|Σ_j p_ij − 1|`` over the trace's rows that see a key (its weights
    ``exp(s − lse)`` computed on demand, head by head): float32 rounding for a trace whose
    log-sum-exp matches the scores it recomputes, in any model dtype.

    >>> w = torch.softmax(torch.randn(1, 2, 3, 3), -1)
    >>> row_sum_error(AttentionTrace(tokens=list("abc"), weights=w)) < 1e-6
    True
    """
    if not isinstance(trace, AttentionTrace):
        raise TypeError(f"trace must be an AttentionTrace (one stack), got "
                        f"{type(trace).__name__}")
    worst_err = 0.0
    for layer in range(trace.num_layers):
        for h in range(trace.num_heads):
            total = trace.head_weights(layer, h).double().sum(-1)
            seen = total != 0  # a row that sees no key is all zeros in a trace
            if bool(seen.any()):
                worst_err = max(worst_err, float((total[seen] - 1).abs().max()))
    return worst_err


@dataclass(frozen=True)
class PrecisionCheck:
    """A trace of a model run in one dtype against that model's own maps.

    ``dtype`` the model's (``"bfloat16"``, ``"float32"``, ...); ``row_sum_error`` the largest
    ``|Σ_j p_ij − 1|`` of the trace's rows (:func:`row_sum_error`), held to
    :data:`RECOMPUTE_TOL` (1e-5) whatever the dtype; ``weights_error`` the largest
    |trace − maps| and ``weights_tol`` the bound it is held to (the float32 rule, or the
    half-precision bound over the stack: :func:`check_stack`); ``bound_ratio`` the largest
    |trace − maps| / the entry's own bound (half precision; NaN in float32); ``tokens`` the
    input's length; ``problems`` as :attr:`StackCheck.problems`."""

    dtype: str
    tokens: int
    row_sum_error: float
    weights_error: float
    weights_tol: float
    bound_ratio: float = math.nan
    problems: tuple[str, ...] = ()

    @property
    def rows_ok(self) -> bool:
        return self.row_sum_error <= RECOMPUTE_TOL

    @property
    def weights_ok(self) -> bool:
        return self.weights_error <= self.weights_tol and not self.problems

    @property
    def passed(self) -> bool:
        return self.rows_ok and self.weights_ok


def precision_check(trace: AttentionTrace, reference: Any) -> PrecisionCheck:
    """:class:`PrecisionCheck` of one stack against the model's own maps (``reference`` as
    :func:`check_stack`; the rule from ``trace.meta["precision"]`` or the maps' dtype)."""
    chk = check_stack(trace, reference, recompute=False)
    rows = row_sum_error(trace)
    problems = chk.problems
    if rows > RECOMPUTE_TOL:
        problems = (*problems, f"rows of the trace sum to 1 ± {rows:.2e}, beyond "
                               f"{RECOMPUTE_TOL:g}")
    return PrecisionCheck(dtype=chk.precision, tokens=trace.seq_len, row_sum_error=rows,
                          weights_error=chk.weights_error, weights_tol=chk.weights_tol,
                          bound_ratio=chk.bound_ratio, problems=problems)


def half_precision_check(model: Any, token_ids: Sequence[int] | Tensor,
                         dtype: torch.dtype = torch.bfloat16) -> PrecisionCheck:
    """Trace a Hugging Face model run in ``dtype`` on ``token_ids`` and check it against the
    model's own eager maps in that dtype (:func:`precision_check`).

    The model is copied and the copy cast to ``dtype`` with eager attention (the model
    itself is left as it is); its ``meta["precision"]`` comes from
    :func:`attnlab.tracing.precision.precision_of`. One forward with ``output_attentions``
    and one captured forward, so for short inputs."""
    from attnlab.tracing.capture import capture  # capture may come to use this module

    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a Hugging Face model (an nn.Module with a config), "
                        f"got {type(model).__name__}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(1, -1)
    if not ids.numel():
        raise ValueError("token_ids must hold at least one token id, got none")
    m: Any = copy.deepcopy(model).to(dtype).eval()  # (a Hugging Face model, of its own class)
    if hasattr(m, "set_attn_implementation"):
        m.set_attn_implementation("eager")
    with torch.no_grad():
        maps = m(input_ids=ids, output_attentions=True).attentions
        with capture(m) as cap:
            m(input_ids=ids)
    t = cap.trace(token_ids=ids[0].tolist(), meta={"precision": precision_of(m)})
    if not isinstance(t, AttentionTrace):
        raise TypeError(f"model must have one attention stack; it has {list(t)}")
    return precision_check(t, [a[0] for a in maps])
