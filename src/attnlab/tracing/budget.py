"""The memory a trace will need, estimated and checked before a model runs.

Every entry point that runs a model on a user's text (``attnlab trace/explore/diagnose``,
the server, :func:`attnlab.tracing.tracer.trace` with ``max_memory=``) calls
:func:`check_trace_budget` with the number of **tokens** (not characters) first, and
refuses with :class:`MemoryBudgetError` (a ``ValueError``) that states the budget and the
estimate, before anything is allocated.

The estimate, in bytes, for ``N`` tokens through a model of ``L`` layers, ``H`` query heads,
``H_kv`` key/value heads of size ``d``, hidden size ``E``, feed-forward width ``F`` and
vocabulary ``V`` (all float32, 4 bytes a number)::

    kept      = 4 · L · N · (H·d [q] + 2·H_kv·d [k, v] + H [lse])
              + 4 · L · N · H·d  for each head's output, when the trace keeps the context
              + 4 · L · H · N²   for dense weights, when a trace keeps them (no q/k, or v1)
              + 4 · L · H · N²   for raw scores, when asked for
    forward   = 4 · N · (4·E + (H + 2·H_kv)·d + 3·F)   one block's activations (no grad)
              + 4 · N · V                  vocabulary logits, where the traced forward makes
                                           them (attnlab's own models; a Hugging Face model
                                           is traced through its base model, without them)
              + 4 · min(N², 2²²)           the mask a Hugging Face model builds: dense up to
                                           4M entries, one per key above (the adapter's
                                           DENSE_MASK_MAX_ENTRIES)
              + 4 · min(TILE, 4 · H · N²)  the attention's working tiles: a tile of scores
                                           (at most TILE = 64 MiB, one layer's scores when
                                           smaller), its probabilities, and the eager
                                           check's two
              + 8 · H · N²                 scores and probabilities of one layer, if its
                                           attention path materialises them
    estimate  = KEPT_COPIES · kept + forward

A trace **streamed** to its file as the model runs (``streamed=True``:
``trace(..., out=PATH)``, ``attnlab trace`` when the whole trace would not fit, or
``--stream``) keeps one layer at a time: ``kept`` is then that of one layer (``kept / L``),
so the estimate is one layer plus the forward pass, whatever the number of layers; what the
file holds is written to disk, not kept. When even that does not fit, the input is refused
before the model runs, as any other.

The trace's tensors exist once (the records move into the trace layer by layer, and
saving streams them to the file), but the pages the forward pass frees around them are not
all handed back at once: ``KEPT_COPIES = 2`` covers both. ``context`` counts only when the
trace keeps it. The model's own weights are not counted: they are loaded already.

Calibrated on SmolLM2-135M (``L=30, H=9, H_kv=3, d=64, E=576, F=1536``): the peak resident
set of a whole ``attnlab trace`` process (``/usr/bin/time -v``) above that of a 7-token
trace, the worst of two runs, measured / estimated: 1,022 tokens 0.21 / 0.40 GiB; 2,048
tokens 0.49 / 0.77 GiB (the eager order's 8 MiB tiles; 0.36 and 0.66 GiB with 64 MiB ones);
4,096 tokens 0.70 / 1.27 GiB; 8,192 tokens 1.31 / 2.28 GiB (kept 0.89 GiB, counted twice).
Streamed (``benchmarks/trace_streaming.py``: the growth of a fresh process's peak over its
resident set once the model is loaded, which also counts the first forward's fixed costs,
about 0.3 GiB, that the 7-token baseline removes above), measured / estimated: 8,192 tokens
0.67 / 0.57 GiB; 16,384 tokens 0.92 / 0.86 GiB; 32,768 tokens 1.29 / 1.46 GiB. One copy
(``KEPT_COPIES = 1``) fell short at 1,022 tokens with 64 MiB tiles; with 8 MiB ones it
covers every point measured, at 8,192 tokens by 6 %: the second copy is the margin a budget
needs across allocators and machines.

>>> shape = ModelShape(num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
...                    hidden_size=32, ff_size=128, vocab_size=100)
>>> estimate_trace_bytes(shape, 10).total
44320
>>> check_trace_budget(shape, 10_000, "1MB")
Traceback (most recent call last):
...
attnlab.tracing.budget.MemoryBudgetError: 10000 tokens need about 292.16 MiB of memory ...
>>> parse_memory("512MiB"), parse_memory("4GB")
(536870912, 4000000000)
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from attnlab._errors import ArgumentTypeError, Error, check_int

__all__ = [
    "DENSE_MASK_ENTRIES",
    "KEPT_COPIES",
    "MemoryBudgetError",
    "MemoryEstimate",
    "ModelShape",
    "SURVEY_CHUNK",
    "SURVEY_CHUNK_COPIES",
    "SurveyEstimate",
    "check_survey_budget",
    "check_text",
    "check_trace_budget",
    "count_tokens",
    "default_budget",
    "estimate_survey_bytes",
    "estimate_trace_bytes",
    "first_int",
    "format_bytes",
    "machine_memory",
    "max_tokens_within",
    "model_shape",
    "parse_memory",
    "resolve_budget",
    "TILE",
]

KEPT_COPIES = 2  # the trace + what the forward pass frees but keeps resident (measured)
#: Entries up to which a Hugging Face model's mask is dense (the adapter's
#: ``DENSE_MASK_MAX_ENTRIES``; above, one entry per key).
DENSE_MASK_ENTRIES = 1 << 22
#: The attention's working memory, as four tiles of scores of at most this size: the tile,
#: its probabilities and the eager check's two (measured: what 1,022 tokens take beyond the
#: trace and the activations). The eager order's tiles are smaller
#: (``adapters._eager.EAGER_TILE_BYTES``); the allowance also covers the fused kernel's
#: buffers above 2,048 tokens (a streamed 8,192-token trace's peak needs it).
TILE = 64 << 20
DEFAULT_FRACTION = 0.5  # of the machine's memory (or of its cgroup limit, if lower)
_FALLBACK_TOTAL = 8 * 2**30  # when the machine's memory cannot be read
_FLOAT = 4  # bytes of a float32


class MemoryBudgetError(Error):
    """An input whose trace would need more memory than the budget allows."""


# --------------------------------------------------------------------------------------
# sizes: parsing, printing, the machine's default
# --------------------------------------------------------------------------------------

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([A-Za-z]*)")


def parse_memory(text: str, *, name: str = "--max-memory") -> int:
    """A memory size in bytes from ``"4GB"``, ``"512MiB"``, ``"1.5GiB"`` or ``"1000000"``.

    Strict: a non-negative decimal number, then nothing (bytes) or one of B, KB, MB, GB, TB
    (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive, no space.

    >>> parse_memory("1.5KiB")
    1536
    >>> parse_memory("4 GB")
    Traceback (most recent call last):
    ...
    ValueError: --max-memory must be a size such as 4GB, 512MiB or 1000000 (bytes), got '4 GB'
    """
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a string such as '4GB', got {type(text).__name__}")
    m = _SIZE.fullmatch(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in ("", *_UNITS):
        raise ValueError(f"{name} must be a size such as 4GB, 512MiB or 1000000 (bytes), got "
                         f"{text!r}")
    value = int(float(m.group(1)) * _UNITS.get(unit, 1))
    if value < 1:
        raise ValueError(f"{name} must be at least 1 byte, got {text!r}")
    return value


def format_bytes(n: float) -> str:
    """``1536 -> '1.50 KiB'``: binary units, two decimals."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _machine_memory() -> int:
    total = _FALLBACK_TOTAL
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:  # a container's limit (cgroup v2), when lower than the machine's memory
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return int(total)


def machine_memory() -> int:
    """This machine's memory in bytes (or its container's limit, if lower)."""
    return _machine_memory()


def default_budget() -> int:
    """Half the machine's memory (or of its container's limit, if lower)."""
    return int(_machine_memory() * DEFAULT_FRACTION)


def resolve_budget(budget: int | str | None, *, name: str = "max_memory") -> int:
    """A budget in bytes: ``None`` -> :func:`default_budget`, a string -> :func:`parse_memory`,
    a positive int as is."""
    if budget is None:
        return default_budget()
    if isinstance(budget, str):
        return parse_memory(budget, name=name)
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise ArgumentTypeError(f"{name} must be a number of bytes, a size string such as "
                                f"'4GB', or None, got {type(budget).__name__}")
    return check_int(name, budget, minimum=1)


# --------------------------------------------------------------------------------------
# the model's shape
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs to know about a model (see the module docstring)."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    ff_size: int
    vocab_size: int = 0
    logits: bool = True  # the forward pass computes vocabulary logits (causal LMs)
    n2_mask: bool = False  # the model builds one N×N mask (Hugging Face models do)
    eager_scores: bool = False  # its attention materialises (H, N, N) scores per layer

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size",
                     "ff_size", "vocab_size"):
            check_int(f"ModelShape.{name}", getattr(self, name))


def first_int(obj: Any, *names: str) -> int | None:
    """The first of ``names`` that ``obj`` (an object or a dict: a model, a module, a
    config) holds as an int > 0, else None; a read the object refuses (a config that
    keeps the value per layer) counts as absent.

    >>> first_int({"n_head": 0, "num_heads": 4}, "n_head", "num_heads"), first_int({}, "x")
    (4, None)
    """
    for n in names:
        try:
            v = obj.get(n) if isinstance(obj, dict) else getattr(obj, n, None)
        except Exception:  # configs that refuse a global read of a per-layer value
            v = None
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _from_config(cfg: Any, *, hf: bool) -> ModelShape:
    layers = first_int(cfg, "num_hidden_layers", "num_layers", "n_layer", "n_layers")
    heads = first_int(cfg, "num_attention_heads", "num_heads", "n_head", "n_heads")
    hidden = first_int(cfg, "hidden_size", "embed_dim", "d_model", "n_embd", "dim")
    if layers is None or heads is None or hidden is None:
        raise TypeError(f"cannot read layers, heads and hidden size from a "
                        f"{type(cfg).__name__}; give a ModelShape")
    kv = first_int(cfg, "num_key_value_heads", "num_kv_heads") or heads
    head_dim = first_int(cfg, "head_dim") or hidden // heads
    ff = first_int(cfg, "intermediate_size", "ff_dim", "n_inner", "ffn_dim") or 4 * hidden
    vocab = first_int(cfg, "vocab_size") or 0
    # a Hugging Face model is traced through its base model: no vocabulary logits
    return ModelShape(num_layers=layers, num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                      hidden_size=hidden, ff_size=ff, vocab_size=vocab,
                      logits=vocab > 0 and not hf, n2_mask=hf)


def _from_module(module: Any) -> ModelShape:
    cfg = getattr(module, "config", None)
    hf = cfg is not None and hasattr(cfg, "model_type")
    if cfg is not None:
        try:
            shape = _from_config(cfg, hf=hf)
        except TypeError:
            shape = None
        if shape is not None:
            return shape
    attns = [m for m in module.modules()
             if first_int(m, "num_heads") and first_int(m, "head_dim") and hasattr(m, "scale")]
    if not attns:
        raise TypeError(f"{type(module).__name__} has no attention module attnlab knows; "
                        f"give a ModelShape")
    a = attns[0]
    heads, d = a.num_heads, a.head_dim
    hidden = first_int(a, "embed_dim") or heads * d
    return ModelShape(num_layers=len(attns), num_heads=heads,
                      num_kv_heads=first_int(a, "num_kv_heads") or heads, head_dim=d,
                      hidden_size=hidden, ff_size=4 * hidden, vocab_size=0, logits=False)


def model_shape(model_like: Any) -> ModelShape:
    """A :class:`ModelShape` from a ``LoadedModel``-like object (``.model`` and
    ``num_layers``, ``num_heads``, ``num_kv_heads``, ``head_dim``), an ``nn.Module``
    (Hugging Face or attnlab), a config object or dict, or a ``ModelShape`` itself."""
    if isinstance(model_like, ModelShape):
        return model_like
    inner = getattr(model_like, "model", None)
    if inner is not None and hasattr(inner, "modules") and first_int(model_like, "num_layers"):
        try:
            base = _from_module(inner)
        except TypeError:
            base = None
        heads = first_int(model_like, "num_heads") or (base.num_heads if base else 1)
        d = first_int(model_like, "head_dim") or (base.head_dim if base else 1)
        hidden = base.hidden_size if base else heads * d
        return ModelShape(
            num_layers=model_like.num_layers, num_heads=heads,
            num_kv_heads=(first_int(model_like, "num_kv_heads")
                          or (base.num_kv_heads if base else heads)), head_dim=d,
            hidden_size=hidden, ff_size=base.ff_size if base else 4 * hidden,
            vocab_size=base.vocab_size if base else 0,
            logits=base.logits if base else False,
            n2_mask=base.n2_mask if base else False,
            eager_scores=base.eager_scores if base else False)
    if hasattr(model_like, "modules") and callable(model_like.modules):
        return _from_module(model_like)
    return _from_config(model_like, hf=hasattr(model_like, "model_type"))


# --------------------------------------------------------------------------------------
# the estimate
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a trace of ``num_tokens`` needs: ``total = KEPT_COPIES · kept + forward``."""

    num_tokens: int
    kept: int
    forward: int
    total: int
    streamed: bool = False  # kept is one layer's: the trace is streamed to its file

    def describe(self) -> str:
        what = "kept of one layer while the trace streams to its file" if self.streamed else (
            "kept by the trace")
        return (f"about {format_bytes(self.total)} of memory ({format_bytes(self.kept)} "
                f"{what}, counted {KEPT_COPIES}x, + {format_bytes(self.forward)} for the "
                f"forward pass)")


def _check_tokens(num_tokens: Any) -> int:
    return check_int("num_tokens", num_tokens)


def estimate_trace_bytes(model_like: Any, num_tokens: int, *, keep_context: bool = False,
                         keep_weights: bool = False, keep_scores: bool = False,
                         streamed: bool = False) -> MemoryEstimate:
    """The estimate of the module docstring for ``num_tokens`` tokens through ``model_like``.

    ``keep_context``: the trace stores each head's output too; ``keep_weights``: it stores
    dense (L, H, N, N) weights (a trace made without q/k; q, k, v and lse stay counted,
    as capture may hold them on the way); ``keep_scores``: it stores raw scores too;
    ``streamed``: the trace is written to its file layer by layer, so one layer is kept.

    >>> shape = ModelShape(num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64,
    ...                    hidden_size=576, ff_size=1536, vocab_size=49152)
    >>> whole, one = (estimate_trace_bytes(shape, 8192, streamed=s) for s in (False, True))
    >>> whole.kept == 30 * one.kept, whole.forward == one.forward
    (True, True)
    """
    if not isinstance(streamed, bool):
        raise TypeError(f"streamed must be a bool, got {type(streamed).__name__}")
    s = model_shape(model_like)
    n = _check_tokens(num_tokens)
    L, H, Hkv, d = s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim
    layers = min(L, 1) if streamed else L  # a streamed trace keeps one layer at a time
    kept = _FLOAT * layers * n * (H * d + 2 * Hkv * d + H + H * d * int(keep_context))
    kept += _FLOAT * layers * H * n * n * (int(keep_weights) + int(keep_scores))
    forward = _FLOAT * n * (4 * s.hidden_size + (H + 2 * Hkv) * d + 3 * s.ff_size)
    forward += _FLOAT * n * s.vocab_size if s.logits else 0
    forward += _FLOAT * min(n * n, DENSE_MASK_ENTRIES) if s.n2_mask else 0
    forward += 4 * min(TILE, _FLOAT * H * n * n)
    forward += 2 * _FLOAT * H * n * n if s.eager_scores else 0
    return MemoryEstimate(num_tokens=n, kept=kept, forward=forward,
                          total=KEPT_COPIES * kept + forward, streamed=streamed)


def max_tokens_within(model_like: Any, budget_bytes: int | str | None = None,
                      **keep: bool) -> int:
    """The most tokens whose estimate fits ``budget_bytes`` (the estimate grows with N)."""
    budget = resolve_budget(budget_bytes)
    shape = model_shape(model_like)
    lo, hi = 0, 1
    while hi < 1 << 40 and estimate_trace_bytes(shape, hi, **keep).total <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate_trace_bytes(shape, mid, **keep).total <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def check_trace_budget(model_config_like: Any, num_tokens: int,
                       budget_bytes: int | str | None = None, *, what: str = "",
                       **keep: bool) -> MemoryEstimate:
    """Refuse, before anything is allocated, a trace whose estimate exceeds the budget.

    ``budget_bytes``: bytes, a size string (``"4GB"``) or ``None`` for
    :func:`default_budget`. ``what`` prefixes the message (e.g. ``"text"``). ``keep``: as
    :func:`estimate_trace_bytes` takes them (``streamed=True``: one layer counted). Returns
    the estimate when it fits; raises :class:`MemoryBudgetError` stating both otherwise.
    """
    budget = resolve_budget(budget_bytes)
    est = estimate_trace_bytes(model_config_like, num_tokens, **keep)
    if est.total > budget:
        fit = max_tokens_within(model_config_like, budget, **keep)
        prefix = f"{what}: " if what else ""
        even = " even streamed to the file layer by layer" if est.streamed else ""
        raise MemoryBudgetError(
            f"{prefix}{num_tokens} tokens need {est.describe()}{even}, above the memory "
            f"budget of {format_bytes(budget)}; give a shorter input (about {fit} tokens "
            f"fit) or raise the budget (--max-memory, max_memory=)")
    return est


# --------------------------------------------------------------------------------------
# the survey: one batch of texts at a time, dense weights one layer at a time
# --------------------------------------------------------------------------------------

#: The float64 weights the survey reduces at once: a group of heads of one layer of a
#: batch, as many heads as fit (at least one; :func:`attnlab.analysis.survey.survey`).
SURVEY_CHUNK = 256 << 20
#: Working copies of that group its sums hold at once (its float64 copy, the tile's
#: masked rows, the distance weights and a product, or the entropy's logarithm and
#: product; measured: ``benchmarks/survey_memory.py``).
SURVEY_CHUNK_COPIES = 5


@dataclass(frozen=True)
class SurveyEstimate:
    """Bytes one batch of the survey needs (:func:`estimate_survey_bytes`)."""

    batch_size: int
    max_tokens: int
    weights: int
    reduce: int
    forward: int
    total: int

    def describe(self) -> str:
        return (f"about {format_bytes(self.total)} of memory ({format_bytes(self.weights)} "
                f"for one layer's dense weights, {format_bytes(self.reduce)} to reduce them, "
                f"{format_bytes(self.forward)} for the forward pass)")


def estimate_survey_bytes(model_like: Any, batch_size: int, max_tokens: int
                          ) -> SurveyEstimate:
    """The memory one batch of ``batch_size`` texts of up to ``max_tokens`` tokens needs in
    the survey, which runs the batch through the model and reduces each layer's dense
    weights as the layer runs (``B`` = ``batch_size``, ``N`` = ``max_tokens``, the rest as
    in the module docstring)::

        weights  = 4 · (B + 1) · H · N²        one layer's (B, H, N, N) float32 weights,
                                               and one text's as they are computed
        reduce   = SURVEY_CHUNK_COPIES · max(8 · B · N², min(SURVEY_CHUNK, 8 · B · H · N²))
                                               the float64 copies of one group of heads
        forward  = B · (forward of N tokens)   + KEPT_COPIES · B · (one layer's q, k, v, lse)
        total    = weights + reduce + forward

    >>> shape = ModelShape(num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64,
    ...                    hidden_size=576, ff_size=1536, vocab_size=49152)
    >>> one, eight = (estimate_survey_bytes(shape, b, 64) for b in (1, 8))
    >>> eight.weights == 9 * one.weights // 2, eight.total > one.total
    (True, True)
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("max_tokens", max_tokens, minimum=1)
    s = model_shape(model_like)
    b, n, h = batch_size, max_tokens, s.num_heads
    one_layer = estimate_trace_bytes(s, n, streamed=True)
    weights = _FLOAT * (b + 1) * h * n * n
    reduce = SURVEY_CHUNK_COPIES * max(8 * b * n * n, min(SURVEY_CHUNK, 8 * b * h * n * n))
    forward = b * (one_layer.forward + KEPT_COPIES * one_layer.kept)
    return SurveyEstimate(batch_size=b, max_tokens=n, weights=weights, reduce=reduce,
                          forward=forward, total=weights + reduce + forward)


def check_survey_budget(model_like: Any, batch_size: int, max_tokens: int,
                        budget_bytes: int | str | None = None) -> SurveyEstimate:
    """Refuse, before the survey runs, a batch whose estimate
    (:func:`estimate_survey_bytes`) exceeds the budget (``None``: :func:`default_budget`):
    :class:`MemoryBudgetError` names the settings and the largest of each that fits."""
    budget = resolve_budget(budget_bytes)
    est = estimate_survey_bytes(model_like, batch_size, max_tokens)
    if est.total <= budget:
        return est
    shape = model_shape(model_like)

    def largest(fits: Any, hi: int) -> int:
        lo = 0  # fits(lo) or lo == 0; the estimate grows with both settings
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    batches = largest(lambda k: estimate_survey_bytes(shape, k, max_tokens).total <= budget,
                      batch_size)
    tokens = largest(lambda k: k >= 2 and estimate_survey_bytes(
        shape, batch_size, k).total <= budget, max_tokens)
    ways = []
    if batches >= 1:
        ways.append(f"batch_size {batches} (--batch-size)")
    if tokens >= 2:
        ways.append(f"max_tokens {tokens} (--max-tokens)")
    fit = (f"at most {' or '.join(ways)} fit" if ways else
           "no batch of texts this long fits")
    raise MemoryBudgetError(
        f"a survey batch of {batch_size} texts of up to {max_tokens} tokens needs "
        f"{est.describe()}, above the memory budget of {format_bytes(budget)}; {fit}, or "
        f"raise the budget (--max-memory, max_memory=)")


# --------------------------------------------------------------------------------------
# the input: text checked, tokens counted
# --------------------------------------------------------------------------------------

# Characters that draw nothing although Unicode does not call them spaces or controls.
_BLANK = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u034f", "\u17b4", "\u17b5",
          "\u180e"}
_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me"}


def check_text(text: Any, name: str = "text") -> str:
    """``text`` if it is a str with at least one visible character; ``TypeError`` or
    ``ValueError`` naming ``name`` otherwise (lone surrogates included).

    >>> check_text("\\u200b\\u200d \\ufeff")
    Traceback (most recent call last):
    ...
    ValueError: text has no visible character (4 characters, all whitespace, zero-width, format or control characters); give at least one word
    """  # noqa: E501
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    for i, c in enumerate(text):
        if "\ud800" <= c <= "\udfff":
            raise ValueError(f"{name} holds a lone surrogate U+{ord(c):04X} at character {i}; "
                             f"{name} must be valid Unicode")
    if all(c.isspace() or c in _BLANK or unicodedata.category(c) in _INVISIBLE_CATEGORIES
           for c in text):
        if not text:
            raise ValueError(f"{name} is empty; give at least one word")
        raise ValueError(f"{name} has no visible character ({len(text)} characters, all "
                         f"whitespace, zero-width, format or control characters); give at "
                         f"least one word")
    return text


def count_tokens(tokenizer: Any, text: str) -> int:
    """How many tokens ``tokenizer`` makes of ``text``, special tokens included, as the
    tracer encodes it (a Hugging Face tokenizer, or any object with ``encode``)."""
    if tokenizer is None:
        raise ValueError("text needs a tokenizer to count its tokens; got none")
    if callable(tokenizer) and hasattr(tokenizer, "convert_ids_to_tokens"):
        return len(tokenizer(text, add_special_tokens=True)["input_ids"])
    if hasattr(tokenizer, "encode"):
        return len(tokenizer.encode(text))
    raise TypeError(f"tokenizer must be a Hugging Face tokenizer or have encode(text), got "
                    f"{type(tokenizer).__name__}")
