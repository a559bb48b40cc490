"""Which Hugging Face architecture families attnlab traces exactly: the support matrix.

Every family of the installed transformers is listed with its kind
(:func:`attnlab.tracing.families.families`). Each kind with a checker in :data:`CHECKERS` is
checked (text decoders, text encoders, text encoder–decoders, vision and speech models); the
other kinds (multimodal, time series, other) are listed as ``not yet`` with that reason.

Each family is checked on its tiny random model, built offline from its config class
(:func:`attnlab.tracing.tiny.tiny_model`: for text 2 layers, hidden size 32, 4 heads over 2
key/value heads, vocabulary 96, a sliding window of 4 and a soft-cap of 2 where the family
has them, so that over 12 tokens they matter, and weights drawn large enough that attention
is far from uniform). :func:`check_family` runs 12 token ids through a text model twice:
once with ``attn_implementation="eager"`` and ``output_attentions=True`` (the reference),
once through :func:`attnlab.tracing.tracer.trace`, and compares them with
:func:`attnlab.tracing.verify.check_stack` (the one comparison the report uses too):

* the trace's weights with the model's own attention maps: ``exact`` needs a difference of
  at most :data:`EXACT_TOL` (float32 rounding: attnlab computes ``exp(s − lse)`` where eager
  divides by a sum, so up to a few 1e-7 remain), layer by layer, head by head;
* the weights recomputed from the trace's q and k alone with the trace's: at most
  :data:`RECOMPUTE_TOL`;
* the layer count (the trace has as many layers as the model returns attention maps), the
  causal flag (decoders causal, encoders not) and the labels (token ids without a
  tokenizer are labelled by their ids).

An encoder–decoder family (2 + 2 layers, :data:`TARGET_LEN` target ids after the 12 source
ids) is traced with ``trace(model, source, target=target)`` and each stack of the
:class:`~attnlab.tracing.stacks.StackedTrace` is checked the same way against the model's
own ``encoder_attentions``, ``decoder_attentions`` and ``cross_attentions``: the encoder
bidirectional, the decoder causal, cross-attention rows labelled with the target ids and
its columns with the source ids (:func:`eager_stack_maps`, :func:`judge`). A vision or
speech family is traced on an image of 16 patches or 0.5 s of sound
(:func:`check_media_family`) and each stack checked the same way.

A family is ``exact`` when all of this holds; ``refused`` when attnlab raises
:class:`~attnlab.tracing.adapters._base.UnreadableAttentionError` (the reason names the
module class and what is missing); ``no attention`` when the model returns no attention
maps (state-space, recurrent and Fourier-mixing models); ``not built`` when its tiny model
cannot be built or run offline (with the cause); ``wrong`` when a trace was made but does
not match, which is a defect (the test suite allows none).

>>> r = check_family("llama")
>>> r.status, r.kind, r.layers, r.max_weight_error <= EXACT_TOL
('exact', 'decoder', 2, True)
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch

from attnlab._errors import Error
from attnlab._proc import torch_threads
from attnlab.tracing._hf_forward import forward_params
from attnlab.tracing.adapters._base import UnreadableAttentionError
from attnlab.tracing.families import families, text_families
from attnlab.tracing.tiny import (  # noqa: F401 (_OVERRIDES: the per-family values, here too)
    _OVERRIDES,
    _VOCAB_SIZE,
    WINDOW,
    NotBuiltError,
    _cause,
    text_model,
    tiny_config,
    tiny_model,
)
from attnlab.tracing.verify import EXACT_TOL, RECOMPUTE_TOL, StackCheck, check_stack, worst

__all__ = ["CHECKERS", "EXACT_TOL", "NOT_YET", "RECOMPUTE_TOL", "SEQ_LEN", "STATUSES",
           "TARGET_LEN", "WINDOW", "FamilyResult", "FamilyRow", "StackErrors", "SupportMatrix",
           "check_family", "check_media_family", "checked_families", "compare_trace", "counts",
           "eager_maps", "eager_stack_maps", "families", "judge", "support_matrix",
           "text_families", "tiny_config", "tiny_model", "to_json", "to_markdown", "to_summary"]

#: Tokens run through each tiny model; longer than :data:`WINDOW`, so windows matter.
SEQ_LEN = 12
#: The statuses a family can have, best first.
STATUSES = ("exact", "refused", "no attention", "not built", "not yet", "wrong")
#: The reason given for each kind that is listed but not checked.
NOT_YET = {
    "speech": "not yet: speech or audio input",
    "vision": "not yet: image or video input",
    "multimodal": "not yet: image or audio input alongside text",
    "time series": "not yet: time-series input",
    "other": "not yet: a part of a larger model or another input, in no text task mapping",
}


class FamilyRow(TypedDict):
    """One row of the support matrix as JSON (:meth:`FamilyResult.to_dict`): the fields of
    :class:`FamilyResult`, errors as floats or None."""

    family: str
    kind: str
    status: str
    reason: str
    model_class: str
    layers: int | None
    heads: int | None
    max_weight_error: float | None
    max_recompute_error: float | None
    compared: str
    features: list[str]
    seconds: float
    stacks: dict[str, int]


class SupportMatrix(TypedDict):
    """The support matrix as JSON (:func:`to_json`)."""

    #: The installed transformers' version.
    transformers: str
    seq_len: int
    window: int
    exact_tolerance: float
    recompute_tolerance: float
    #: How many families have each status (every status, zeros included).
    counts: dict[str, int]
    families: list[FamilyRow]


class StackErrors(TypedDict):
    """A trace's stack against the model's own maps (:func:`compare_trace`)."""

    #: The largest |Δ| of the weights.
    weights: float
    #: The largest |Δ| of the weights rebuilt from q and k under the recorded shapes.
    recomputed: float
    #: "" or how the weights were compared (:data:`attnlab.tracing.verify.SINK_RULE`).
    compared: str


class _Measured(TypedDict, total=False):
    """The fields of a :class:`FamilyResult` a checker fills as it goes (by their names)."""

    model_class: str
    layers: int | None
    heads: int | None
    max_weight_error: float | None
    max_recompute_error: float | None
    compared: str
    features: list[str]
    stacks: dict[str, int]


@dataclass
class FamilyResult:
    """One row of the support matrix (see the module docstring for the statuses)."""

    family: str
    kind: str
    status: str
    reason: str = ""
    model_class: str = ""
    layers: int | None = None
    heads: int | None = None
    max_weight_error: float | None = None
    max_recompute_error: float | None = None
    compared: str = ""
    features: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stacks: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> FamilyRow:
        """JSON-ready (errors as floats or None)."""
        return {"family": self.family, "kind": self.kind, "status": self.status,
                "reason": self.reason, "model_class": self.model_class, "layers": self.layers,
                "heads": self.heads, "max_weight_error": self.max_weight_error,
                "max_recompute_error": self.max_recompute_error, "compared": self.compared,
                "features": list(self.features), "seconds": self.seconds,
                "stacks": dict(self.stacks)}

    def detail(self) -> str:
        """One line: the errors and what shapes the scores, or the reason."""
        if self.status != "exact":
            return self.reason
        parts = [f"max |Δw| {self.max_weight_error:.1e}",
                 f"recomputed {self.max_recompute_error:.1e}"]
        if self.stacks:
            parts.append(" + ".join(f"{n} {k}" for n, k in self.stacks.items()) + " layers")
        if self.compared:
            parts.append(self.compared)
        return "; ".join(parts + self.features)


# -- the families -----------------------------------------------------------------------------


def checked_families() -> list[str]:
    """Every family whose kind has a checker in :data:`CHECKERS`."""
    return [n for n, k in families() if k in CHECKERS]


def _features(trace: Any) -> list[str]:
    """What shapes the scores of the trace, in words (windows, soft-cap, sinks, ...)."""
    shapes = trace.shapes
    out = []
    windows = sorted({s.window for s in shapes if s.window is not None})
    if windows:
        every = all(s.window is not None for s in shapes)
        out.append(f"window {', '.join(map(str, windows))}"
                   + ("" if every else " (alternating with full layers)"))
    if any(s.softcap is not None for s in shapes):
        out.append("soft-cap")
    if any(s.sinks is not None for s in shapes):
        out.append("sink logits")
    if any(s.alibi_slopes is not None for s in shapes):
        out.append("ALiBi")
    if any(s.bias is not None for s in shapes):
        out.append("additive bias")
    if trace.num_kv_heads < trace.num_heads:
        out.append(f"grouped keys {trace.num_heads}/{trace.num_kv_heads}")
    scales = {round(s.scale * math.sqrt(trace.head_dim), 6) for s in shapes} if (
        trace.head_dim) else set()
    if scales and scales != {1.0}:
        out.append("scale ≠ 1/√d")
    return out


# -- the check --------------------------------------------------------------------------------


def compare_trace(trace: Any, reference: list[torch.Tensor]) -> StackErrors:
    """The trace's weights against the model's own attention maps (one (1, H, Lq, Lk)
    tensor per layer): ``{"weights": max |Δ|, "recomputed": max |Δ| of the weights rebuilt from q
    and k under the recorded shapes, "compared": "" or how}``, as
    :func:`attnlab.tracing.verify.check_stack` measures them (its sink rule included).
    ``ValueError`` when the trace and the maps differ in layers, heads or positions."""
    check = check_stack(trace, reference, recompute=True)
    if not check.shape_ok:
        raise ValueError(check.problems[-1])
    return _errors(check)


def _errors(check: StackCheck) -> StackErrors:
    return {"weights": check.weights_error, "recomputed": check.recompute_error,
            "compared": check.compared}


def check_family(family: str, *, seq_len: int = SEQ_LEN, seed: int = 0) -> FamilyResult:
    """Build the tiny model of ``family`` and check attnlab's trace of it against the
    model's own eager attention (see the module docstring)."""
    kinds = dict(families())
    if family not in kinds:
        raise ValueError(f"family must be a model type of the installed transformers, got "
                         f"{family!r}")
    kind = kinds[family]
    checker = CHECKERS.get(kind)
    if checker is None:
        return FamilyResult(family, kind, "not yet", NOT_YET[kind])
    t0 = time.perf_counter()
    try:
        with torch_threads(1):  # tiny matrices: one thread is many times faster than several
            result = checker(family, kind, seq_len, seed)
    except NotBuiltError as exc:
        result = FamilyResult(family, kind, "not built", str(exc))
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def _check(family: str, kind: str, seq_len: int, seed: int) -> FamilyResult:
    from attnlab.tracing.stacks import StackedTrace
    from attnlab.tracing.tracer import trace as run_trace

    model = text_model(family, kind, seed)  # NotBuiltError: check_family's "not built"
    name = type(model).__name__
    res = functools.partial(FamilyResult, family, kind)
    ids = torch.randint(3, _VOCAB_SIZE - 8, (1, seq_len),
                        generator=torch.Generator().manual_seed(seed))
    try:
        reference = eager_maps(model, ids)
    except Exception as exc:
        return res("not built", f"not built: its eager forward fails on token ids "
                   f"({_cause(exc)})", model_class=name)
    maps = [a for a in reference if isinstance(a, torch.Tensor) and a.dim() == 4
            and tuple(a.shape[-2:]) == (seq_len, seq_len)]
    try:
        t = run_trace(model, ids[0].tolist(), merge_pieces=False)
    except UnreadableAttentionError as exc:
        return res("refused", f"refused: {exc}", model_class=name)
    except Exception as exc:
        if not maps and "no attention module" in str(exc):
            return res("no attention", "no attention: the 2-layer tiny model has no attention "
                       "module and returns no attention maps", model_class=name)
        return res("wrong", f"wrong: tracing fails ({_cause(exc)})", model_class=name)
    if not maps:
        return res("wrong", "wrong: a trace was made but the model returns no attention maps",
                   model_class=name)
    if isinstance(t, StackedTrace):  # (a text model of one stack, traced as one)
        raise Error(f"{name}: traced as several attention stacks, not one")
    info: _Measured = {"model_class": name, "layers": t.num_layers, "heads": t.num_heads}
    try:
        errors, problems = judge(t, maps, ids[0].tolist())
    except ValueError as exc:
        return res("wrong", f"wrong: {exc}", **info)
    info.update({"max_weight_error": errors["weights"],
                 "max_recompute_error": errors["recomputed"], "compared": errors["compared"],
                 "features": _features(t)})
    if problems:
        return res("wrong", "wrong: " + "; ".join(problems), **info)
    return res("exact", "", **info)


def judge(trace: Any, maps: list[torch.Tensor], ids: list[int],
          key_ids: list[int] | None = None) -> tuple[StackErrors, list[str]]:
    """(:func:`compare_trace`'s errors, the problems found): those of
    :func:`attnlab.tracing.verify.check_stack` (weights beyond :data:`EXACT_TOL`, recomputed
    weights beyond :data:`RECOMPUTE_TOL`, a layer whose causal flag disagrees with the
    model's own maps), labels that are not the token ids (and, for cross-attention, key
    labels that are not ``key_ids``). No problems means exact. Raises ``ValueError`` when
    the trace and the maps do not even have the same layers and heads."""
    check = check_stack(trace, maps, recompute=True)
    if not check.shape_ok:
        raise ValueError(check.problems[-1])
    problems = list(check.problems)
    if trace.tokens != [str(i) for i in ids] or trace.token_ids != list(ids):
        problems.append("labels are not the token ids")
    if key_ids is not None and (trace.key_tokens or trace.tokens) != [str(i) for i in key_ids]:
        problems.append("key labels are not the source token ids")
    return _errors(check), problems


def eager_maps(model: Any, ids: torch.Tensor) -> list[Any]:
    """The model's own attention maps under eager attention, run as the tracer runs it."""
    base = getattr(model, "base_model", model)
    params = forward_params(base)
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                              "output_attentions": True}
    if "use_cache" in params:
        kwargs["use_cache"] = False
    with torch.no_grad():
        out = base(**kwargs)
    maps = getattr(out, "attentions", None)
    return list(maps) if maps else []


#: Target tokens run through the decoder of each tiny encoder–decoder model: fewer than
#: :data:`SEQ_LEN`, so that a source and a target position mixed up would show.
TARGET_LEN = 9
#: The model's own attention outputs of each stack of an encoder–decoder model.
_STACK_OUTPUTS = {"encoder": "encoder_attentions", "decoder": "decoder_attentions",
                  "cross": "cross_attentions"}


def eager_stack_maps(model: Any, ids: torch.Tensor, target: torch.Tensor
                     ) -> dict[str, list[torch.Tensor]]:
    """An encoder–decoder model's own attention maps under eager attention, per stack
    (``encoder``, ``decoder``, ``cross``), run as the tracer runs it."""
    base = getattr(model, "base_model", model)
    params = forward_params(base)
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                              "decoder_input_ids": target, "output_attentions": True}
    if "decoder_attention_mask" in params:
        kwargs["decoder_attention_mask"] = torch.ones_like(target)
    if "use_cache" in params:
        kwargs["use_cache"] = False
    with torch.no_grad():
        out = base(**kwargs)
    maps = {}
    for stack, field_name in _STACK_OUTPUTS.items():
        got = getattr(out, field_name, None)
        maps[stack] = [a for a in (got or ()) if isinstance(a, torch.Tensor) and a.dim() == 4]
    return maps


def _check_seq2seq(family: str, kind: str, seq_len: int, seed: int) -> FamilyResult:
    """:func:`check_family` for an encoder–decoder family: ``seq_len`` source ids and
    :data:`TARGET_LEN` target ids; each stack of the trace (encoder, decoder, cross) judged
    against the model's own ``encoder_attentions``, ``decoder_attentions`` and
    ``cross_attentions`` (weights, recomputation, layers, causal flags, labels: source ids
    for the encoder and the cross columns, target ids for the decoder and the cross rows)."""
    from attnlab.tracing.stacks import StackedTrace
    from attnlab.tracing.tracer import trace as run_trace

    model = text_model(family, kind, seed)  # NotBuiltError: check_family's "not built"
    name = type(model).__name__
    res = functools.partial(FamilyResult, family, kind)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, _VOCAB_SIZE - 8, (1, seq_len), generator=g)
    target = torch.randint(3, _VOCAB_SIZE - 8, (1, TARGET_LEN), generator=g)
    try:
        reference = eager_stack_maps(model, ids, target)
    except Exception as exc:
        return res("not built", f"not built: its eager forward fails on source and target "
                   f"ids ({_cause(exc)})", model_class=name)
    try:
        t = run_trace(model, ids[0].tolist(), target=target[0].tolist())
    except UnreadableAttentionError as exc:
        return res("refused", f"refused: {exc}", model_class=name)
    except Exception as exc:
        return res("wrong", f"wrong: tracing fails ({_cause(exc)})", model_class=name)
    if not isinstance(t, StackedTrace):
        return res("wrong", f"wrong: the trace is one stack ({t.stack!r}), not the encoder, "
                   "decoder and cross-attention apart", model_class=name)
    src, tgt = ids[0].tolist(), target[0].tolist()
    rows = {"encoder": (src, None), "decoder": (tgt, None), "cross": (tgt, src)}
    info: _Measured = {"model_class": name, "layers": sum(x.num_layers for x in t.values()),
                       "heads": t[t.names[0]].num_heads,
                       "stacks": {n: x.num_layers for n, x in t.items()}}
    problems: list[str] = []
    largest = {"weights": 0.0, "recomputed": 0.0}
    compared: list[str] = []
    features: list[str] = []
    for stack, (q_ids, k_ids) in rows.items():
        maps = reference[stack]
        if stack not in t:
            problems.append(f"the trace has no {stack} stack ({len(maps)} maps)")
            continue
        if not maps:
            problems.append(f"the model returns no {_STACK_OUTPUTS[stack]}")
            continue
        try:
            errors, found = judge(t[stack], maps, q_ids, k_ids)
        except ValueError as exc:
            problems.append(f"{stack}: {exc}")
            continue
        want_causal = stack == "decoder"
        if any(s.causal != want_causal and s.bias is None for s in t[stack].shapes):
            found.append(f"marked causal={not want_causal}")
        problems += [f"{stack}: {p}" for p in found]
        largest["weights"] = max(largest["weights"], errors["weights"])
        largest["recomputed"] = max(largest["recomputed"], errors["recomputed"])
        if errors["compared"]:
            compared.append(f"{stack}: {errors['compared']}")
        features += [f"{stack}: {f}" for f in _features(t[stack])]
    info.update({"max_weight_error": largest["weights"],
                 "max_recompute_error": largest["recomputed"], "compared": "; ".join(compared),
                 "features": features})
    if problems:
        return res("wrong", "wrong: " + "; ".join(problems), **info)
    return res("exact", "", **info)


def _test_image() -> Any:
    """A 52 x 40 image of seeded noise."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (40, 52, 3), dtype=np.uint8))


def _test_sound(seconds: float = 0.5) -> Any:
    """``seconds`` of a 440 Hz tone in seeded noise at 16 kHz, float32."""
    import numpy as np

    from attnlab.tracing.media import SAMPLE_RATE

    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    noise = np.random.default_rng(0).standard_normal(n)
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * noise).clip(-1, 1).astype(np.float32)


def _media_pairs(model: Any, family: str) -> list[tuple[Any, Any]]:
    """(each stack of the trace of the family's tiny model, the model's own maps for it)."""
    import transformers

    from attnlab.tracing import media
    from attnlab.tracing.stacks import StackedTrace

    if family in media.AUDIO_ENCODER_FAMILIES:
        sound = _test_sound(0.1 if family not in media._FEATURE_ENCODERS else 1.0)
        got = media.trace_audio(model, sound)
        tower, _ = media._speech_model(model, family)
        name = media._FEATURE_ENCODERS.get(family, "Wav2Vec2FeatureExtractor")
        key = "input_features" if family in media._FEATURE_ENCODERS else "input_values"
        with media._quiet():
            config: Any = tower.config  # (a Hugging Face config, of the model's own class)
            fe = (transformers.ASTFeatureExtractor(
                num_mel_bins=config.num_mel_bins, max_length=config.max_length)
                if family == "audio-spectrogram-transformer" else getattr(transformers, name)())
            inputs = {key: fe(sound, sampling_rate=media.SAMPLE_RATE, return_tensors="pt")[key]}
        with torch.no_grad():
            return [(got, tower(**inputs, output_attentions=True).attentions)]
    if family in media.SPEECH_FAMILIES:
        sound = _test_sound()
        st = media.trace_audio(model, sound, target=[5, 9, 17, 2])
        if not isinstance(st, StackedTrace):  # (a speech encoder–decoder: three stacks)
            raise Error(f"{family}: traced as one attention stack, not three")
        inputs = media._SpeechInput(model, family, None, sound, family, False).kwargs
        with torch.no_grad():
            out = model(**inputs, decoder_input_ids=torch.tensor([[1, 5, 9, 17, 2]]),
                        output_attentions=True)
        return [(st["encoder"], out.encoder_attentions), (st["decoder"], out.decoder_attentions),
                (st["cross"], out.cross_attentions)]
    img = _test_image()
    got = media.trace_image(model, img)
    tower, _ = media._vision_tower(model, family)
    pixels, _, _ = media.image_inputs(tower, img, None)
    with torch.no_grad():
        return [(got, tower(pixel_values=pixels, output_attentions=True).attentions)]


def check_media_family(family: str, kind: str, seq_len: int = SEQ_LEN, seed: int = 0
                       ) -> FamilyResult:
    """The support matrix's row of a vision or speech family: checked on its tiny model
    (:func:`attnlab.tracing.tiny.tiny_media_model`: an image of 16 patches; 0.5 s of sound
    in a 1 s window) against the model's own eager ``output_attentions``, every stack by
    :func:`attnlab.tracing.verify.check_stack`; or refused with the reason
    (:data:`attnlab.tracing.media.REFUSED_FAMILIES`); or ``not yet`` (the kind's reason).
    ``seq_len`` is not used (the input's size is the model's)."""
    from attnlab.tracing.media import REFUSED_FAMILIES
    from attnlab.tracing.tiny import media_families, tiny_media_model

    res = functools.partial(FamilyResult, family, kind)
    if family in REFUSED_FAMILIES:
        why = REFUSED_FAMILIES[family]
        return res("no attention" if why.startswith("no attention") else "refused",
                   why if why.startswith("no attention") else f"refused: {why}")
    if family not in media_families():
        what = ("audio input is traced for Whisper, Moonshine, Speech2Text and the speech "
                "encoders of wav2vec 2.0's kind" if kind == "speech" else (
                    "image input is traced for ViT-like families (a class token, registers "
                    "and a grid of patches)"))
        return res("not yet", f"{NOT_YET[kind]}: not checked ({what})")
    try:
        model = tiny_media_model(family, seed)
    except Exception as exc:
        return res("not built", f"not built: its tiny model fails offline ({_cause(exc)})")
    res = functools.partial(res, model_class=type(model).__name__)
    try:
        pairs = _media_pairs(model, family)
    except UnreadableAttentionError as exc:
        return res("refused", f"refused: {exc}")
    except Exception as exc:
        return res("wrong", f"wrong: tracing fails ({_cause(exc)})")
    checks = [check_stack(t, maps, recompute=True) for t, maps in pairs]
    problems = [p if len(checks) == 1 else f"{c.stack}: {p}" for c in checks for p in c.problems]
    largest = worst(checks)
    first = pairs[0][0]
    stacks = ", ".join(f"{t.stack} {t.seq_len}x{t.key_len}" for t, _ in pairs)
    info = dict(layers=first.num_layers, heads=first.num_heads,
                max_weight_error=largest["weights"], max_recompute_error=largest["recomputed"],
                compared="; ".join(f"{c.stack}: {c.compared}" for c in checks if c.compared),
                features=[("image: " if kind == "vision" else "audio: ") + stacks])
    if problems:
        return res("wrong", "wrong: " + "; ".join(problems), **info)
    return res("exact", "", **info)


#: How each kind of family is checked: kind -> ``checker(family, kind, seq_len, seed)``
#: returning a :class:`FamilyResult`. A kind without a checker is listed as ``not yet``
#: with its :data:`NOT_YET` reason; supporting a new kind is one entry here.
CHECKERS: dict[str, Callable[[str, str, int, int], FamilyResult]] = {
    "decoder": _check,
    "encoder": _check,
    "encoder-decoder": _check_seq2seq,
    "vision": check_media_family,
    "speech": check_media_family,
}


# -- the matrix -------------------------------------------------------------------------------


def support_matrix(only: Iterable[str] | None = None,
                   on_result: Callable[[FamilyResult], Any] | None = None
                   ) -> list[FamilyResult]:
    """One :class:`FamilyResult` per family (all of them, or ``only`` those), checked ones
    by :func:`check_family`; ``on_result`` is called with each as it is made."""
    kinds = dict(families())
    names = list(kinds) if only is None else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in kinds]
    if unknown:
        raise ValueError(f"not model types of the installed transformers: {unknown}")
    out = []
    for n in names:
        r = check_family(n)
        out.append(r)
        if on_result is not None:
            on_result(r)
    return out


def counts(results: Iterable[FamilyResult]) -> dict[str, int]:
    """How many families have each status (every status listed, zeros included)."""
    out = dict.fromkeys(STATUSES, 0)
    for r in results:
        out[r.status] += 1
    return out


def to_json(results: list[FamilyResult]) -> SupportMatrix:
    """The matrix as JSON: the transformers version, the counts, one object per family."""
    import transformers

    return {"transformers": transformers.__version__, "seq_len": SEQ_LEN, "window": WINDOW,
            "exact_tolerance": EXACT_TOL, "recompute_tolerance": RECOMPUTE_TOL,
            "counts": counts(results), "families": [r.to_dict() for r in results]}


def to_markdown(results: list[FamilyResult]) -> str:
    """The matrix as Markdown: a summary line, then one table row per family."""
    import transformers

    c = counts(results)
    lines = [f"Support matrix for transformers {transformers.__version__} "
             f"(`attnlab support --markdown`): " + ", ".join(
                 f"{n} {s}" for s, n in c.items() if n) + ".",
             "",
             f"Each text family is checked on a tiny random model ({SEQ_LEN} tokens, window "
             f"{WINDOW}): trace weights against `output_attentions` (eager) within "
             f"{EXACT_TOL:g}, weights recomputed from q and k within {RECOMPUTE_TOL:g}; "
             f"encoder–decoder families with {TARGET_LEN} target tokens, each stack "
             "(encoder, decoder, cross) against its own maps.",
             "",
             "| family | kind | status | details |",
             "|---|---|---|---|"]
    order = {s: i for i, s in enumerate(STATUSES)}
    for r in sorted(results, key=lambda r: (order[r.status], r.kind, r.family)):
        detail = r.detail().replace("|", "\\|")
        lines.append(f"| {r.family} | {r.kind} | {r.status} | {detail} |")
    return "\n".join(lines) + "\n"


#: Statuses whose families :func:`to_summary` lists by name (the others by count per kind).
_NAMED = ("exact", "refused", "no attention")


def to_summary(results: list[FamilyResult]) -> str:
    """The matrix in brief, as Markdown (the table of docs/families.md): one row per status
    and kind, naming the families where they are exact, refused or have no attention, counting them
    per kind otherwise (each family's reason is in :func:`to_markdown`)."""
    import transformers

    order = {s: i for i, s in enumerate(STATUSES)}
    groups: dict[tuple[str, str], list[str]] = {}
    for r in sorted(results, key=lambda r: (order[r.status], r.kind, r.family)):
        groups.setdefault((r.status, r.kind), []).append(r.family)
    lines = [f"Transformers {transformers.__version__}, {len(results)} families "
             "(`attnlab support --summary`):", "", "| status | kind | families |",
             "|---|---|---|"]
    for status in STATUSES:
        keys = [k for k in groups if k[0] == status]
        if not keys:
            continue
        if status in _NAMED:
            lines += [f"| {status} | {kind} ({len(groups[status, kind])}) | "
                      f"{', '.join(groups[status, kind])} |" for _, kind in keys]
        else:
            total = sum(len(groups[k]) for k in keys)
            per_kind = ", ".join(f"{kind} {len(groups[status, kind])}" for _, kind in keys)
            lines.append(f"| {status} | all ({total}) | {per_kind} |")
    return "\n".join(lines) + "\n"
