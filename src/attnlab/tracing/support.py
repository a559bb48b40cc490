"""Which Hugging Face architecture families attnlab traces exactly: the support matrix.

Every family of the installed transformers is listed, from its auto mappings
(``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` and ``MODEL_MAPPING_NAMES``), and sorted by kind with
the task mappings. Each kind with a checker in :data:`CHECKERS` is checked (text decoders,
text encoders, text encoder–decoders here; vision and speech models through
:mod:`attnlab.tracing.media`); the other kinds (multimodal, time series, other) are listed
as ``not yet`` with that reason.

Each text family is checked on a tiny random model built offline from its config class
(:func:`tiny_config`: 2 layers, hidden size 32, 4 heads over 2 key/value heads, vocabulary
96, a sliding window of 4 and a soft-cap of 2 where the family has them, so that over 12
tokens they matter, and weights drawn large enough that attention is far from uniform).
:func:`check_family` runs 12 token ids through the model twice: once with
``attn_implementation="eager"`` and ``output_attentions=True`` (the reference), once through
:func:`attnlab.tracing.tracer.trace`, and compares:

* the trace's weights with the model's own attention maps: ``exact`` needs a difference of
  at most :data:`EXACT_TOL` (float32 rounding: attnlab computes ``exp(s − lse)`` where eager
  divides by a sum, so up to a few 1e-7 remain), layer by layer, head by head;
* the weights recomputed from the trace's q and k alone (:func:`attnlab.core.scores
  .row_logsumexp` and :func:`attnlab.core.weights.shaped_weights` under the recorded
  :class:`~attnlab.core.scores.ScoreShape`) with the trace's: at most :data:`RECOMPUTE_TOL`;
* the layer count (the trace has as many layers as the model returns attention maps), the
  causal flag (decoders causal, encoders not) and the labels (token ids without a
  tokenizer are labelled by their ids).

An encoder–decoder family (2 + 2 layers, :data:`TARGET_LEN` target ids after the 12 source
ids) is traced with ``trace(model, source, target=target)`` and each stack of the
:class:`~attnlab.tracing.stacks.StackedTrace` is checked the same way against the model's
own ``encoder_attentions``, ``decoder_attentions`` and ``cross_attentions``: the encoder
bidirectional, the decoder causal, cross-attention rows labelled with the target ids and
its columns with the source ids (:func:`eager_stack_maps`, :func:`judge`).

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

import dataclasses
import functools
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnlab.core.scores import row_logsumexp
from attnlab.core.weights import shaped_weights
from attnlab.tracing.adapters._base import UnreadableAttentionError

__all__ = ["CHECKERS", "EXACT_TOL", "NOT_YET", "RECOMPUTE_TOL", "SEQ_LEN", "STATUSES",
           "TARGET_LEN", "WINDOW", "FamilyResult", "check_family", "checked_families",
           "compare_trace", "counts", "eager_maps", "eager_stack_maps", "families", "judge",
           "support_matrix", "text_families", "tiny_config", "tiny_model", "to_json",
           "to_markdown", "to_summary"]

#: The largest difference between the trace's weights and the model's ``output_attentions``
#: for a family to count as exact (float32 rounding of ``exp(s − lse)`` against softmax).
EXACT_TOL = 1e-6
#: The largest difference between weights recomputed from q and k and the trace's.
RECOMPUTE_TOL = 1e-5
#: Tokens run through each tiny model; longer than :data:`WINDOW`, so windows matter.
SEQ_LEN = 12
#: The sliding window given to every family that has one.
WINDOW = 4
#: The statuses a family can have, best first.
STATUSES = ("exact", "refused", "no attention", "not built", "not yet", "wrong")
#: The most parameters a tiny model may have (a config field left large is refused).
_MAX_PARAMS = 3_000_000

#: The values every tiny config gets, for each field its config class has (by name or
#: through the class's ``attribute_map``).
_TINY: dict[str, Any] = dict(
    vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
    sliding_window=WINDOW, local_attention=2 * WINDOW, moe_intermediate_size=16,
    num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
    n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16,
    q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
    swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=8,
    shared_expert_intermediate_size=16, type_vocab_size=2, embedding_size=32, n_inner=48,
    ffn_dim=48, d_ff=48, attention_dropout=0.0, attention_probs_dropout_prob=0.0,
    attn_pdrop=0.0, hidden_dropout_prob=0.0, max_window_layers=0,
    # weights large enough that attention is far from uniform and a soft-cap of 2 bites
    initializer_range=0.12, attn_logit_softcapping=2.0,
)
#: The values an encoder–decoder family's tiny config also gets (2 + 2 layers, 4 heads on
#: both sides), for each field its config class has.
_TINY_SEQ2SEQ: dict[str, Any] = dict(
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, num_layers=2,
    num_decoder_layers=2, num_heads=4, d_kv=8, num_encoder_layers=2,
    num_encoder_attention_heads=4, num_decoder_attention_heads=4, decoder_ffn_embed_dim=48,
    encoder_ffn_embed_dim=48, src_vocab_size=96, tgt_vocab_size=96, dropout=0.0,
    activation_dropout=0.0, dropout_rate=0.0, max_length=64,
)
#: The model class checked where the family's base model needs more than text.
_SEQ2SEQ_CLASSES = {"seamless_m4t": "SeamlessM4TForTextToText",
                    "seamless_m4t_v2": "SeamlessM4Tv2ForTextToText"}
#: Family-specific values where the common ones do not make a valid tiny model.
_OVERRIDES: dict[str, dict[str, Any]] = {
    "codegen": {"rotary_dim": 4},
    "gptj": {"rotary_dim": 4},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": WINDOW},
    "esmc": {"num_key_value_heads": 4},
    "zaya": {"num_experts_per_tok": 1},
    # hybrids: one state-space (or linear-attention) layer and one attention layer
    "bamba": {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_n_groups": 1,
              "attn_layer_indices": [1]},
    "granitemoehybrid": {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_n_groups": 1,
                         "layer_types": ["mamba", "attention"]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
              "expert_layer_offset": 1},
    "nemotron_h": {"layers_block_type": ["linear_attention", "full_attention"]},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "reformer": {"axial_pos_embds_dim": [16, 16], "axial_pos_shape": [4, 16]},
}

_VISION = ("IMAGE_CLASSIFICATION", "IMAGE", "BACKBONE", "DEPTH_ESTIMATION", "OBJECT_DETECTION",
           "SEMANTIC_SEGMENTATION", "UNIVERSAL_SEGMENTATION", "INSTANCE_SEGMENTATION",
           "MASKED_IMAGE_MODELING", "VIDEO_CLASSIFICATION", "ZERO_SHOT_IMAGE_CLASSIFICATION",
           "ZERO_SHOT_OBJECT_DETECTION", "MASK_GENERATION", "KEYPOINT_DETECTION",
           "KEYPOINT_MATCHING", "IMAGE_SEGMENTATION", "IMAGE_MATTING", "IMAGE_TO_IMAGE",
           "POSE_ESTIMATION", "NORMAL_ESTIMATION", "POINTMAP_ESTIMATION",
           "TABLE_RECOGNITION", "CAUSAL_IMAGE_MODELING")
_MULTIMODAL = ("IMAGE_TEXT_TO_TEXT", "MULTIMODAL_LM", "DOCUMENT_QUESTION_ANSWERING",
               "VISUAL_QUESTION_ANSWERING", "TEXT_RECOGNITION", "RETRIEVAL")
_SPEECH = ("AUDIO_CLASSIFICATION", "AUDIO_FRAME_CLASSIFICATION", "AUDIO_XVECTOR", "CTC",
           "SPEECH_SEQ_2_SEQ", "TEXT_TO_SPECTROGRAM", "TEXT_TO_WAVEFORM", "RNNT", "TDT")
_SERIES = ("TIME_SERIES_CLASSIFICATION", "TIME_SERIES_PREDICTION", "TIME_SERIES_REGRESSION")
_ENCODER = ("MASKED_LM", "TEXT_ENCODING", "SEQUENCE_CLASSIFICATION", "TOKEN_CLASSIFICATION",
            "QUESTION_ANSWERING", "MULTIPLE_CHOICE", "NEXT_SENTENCE_PREDICTION")
#: The reason given for each kind that is listed but not checked.
NOT_YET = {
    "speech": "not yet: speech or audio input",
    "vision": "not yet: image or video input",
    "multimodal": "not yet: image or audio input alongside text",
    "time series": "not yet: time-series input",
    "other": "not yet: a part of a larger model or another input, in no text task mapping",
}


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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (errors as floats or None)."""
        return dataclasses.asdict(self)

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


def _mappings() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
        import transformers.models.auto.modeling_auto as auto
    except ImportError:
        raise ValueError("the support matrix needs transformers; install it with: "
                         "pip install 'attnlab[models]'") from None

    transformers.logging.set_verbosity_error()
    return auto


def _names(auto: Any, tasks: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for t in tasks:
        out |= set(getattr(auto, f"MODEL_FOR_{t}_MAPPING_NAMES", {}))
    return out


def families() -> list[tuple[str, str]]:
    """Every family (model type) of the installed transformers with a base or causal-LM
    model, and its kind: ``decoder``, ``encoder``, ``encoder-decoder`` (checked), or
    ``speech``, ``vision``, ``multimodal``, ``time series``, ``other`` (see
    :data:`CHECKERS`), sorted. A sequence-to-sequence family whose config is not an
    encoder–decoder one (a speech or audio language model) counts as speech or
    multimodal."""
    return list(_families())


@functools.lru_cache(maxsize=1)
def _families() -> tuple[tuple[str, str], ...]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    auto = _mappings()
    causal = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    everything = causal | set(auto.MODEL_MAPPING_NAMES)
    s2s = _names(auto, ("SEQ_TO_SEQ_CAUSAL_LM",))
    speech, vision = _names(auto, _SPEECH), _names(auto, _VISION)
    multimodal, series = _names(auto, _MULTIMODAL), _names(auto, _SERIES)
    encoder = _names(auto, _ENCODER)
    out = []
    for name in sorted(everything):
        if name in s2s and _is_encoder_decoder(CONFIG_MAPPING, name):
            kind = "encoder-decoder"
        elif name in speech:
            kind = "speech"
        elif name in vision:
            kind = "vision"
        elif name in multimodal:
            kind = "multimodal"
        elif name in series:
            kind = "time series"
        elif name in encoder and (name in _names(auto, ("MASKED_LM", "TEXT_ENCODING"))
                                  or name not in causal):
            kind = "encoder"
        elif name in causal:
            kind = "decoder"
        elif name in s2s:  # audio language models without a speech task mapping
            kind = "multimodal"
        else:
            kind = "other"
        out.append((name, kind))
    return tuple(out)


def _is_encoder_decoder(configs: Any, family: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(getattr(configs[family](), "is_encoder_decoder", False))
    except Exception:  # a config that cannot be made without arguments
        return False


def text_families() -> list[str]:
    """The text families :func:`check_family` checks: decoders, encoders and
    encoder–decoders."""
    return [n for n, k in families() if k in ("decoder", "encoder", "encoder-decoder")]


def checked_families() -> list[str]:
    """Every family whose kind has a checker in :data:`CHECKERS`."""
    return [n for n, k in families() if k in CHECKERS]


# -- a tiny model -----------------------------------------------------------------------------


def tiny_config(family: str, kind: str = "") -> Any:
    """A 2-layer config of ``family`` with small sizes (see the module docstring), eager
    attention, token ids below the vocabulary size; per-layer lists (layer types) cut to
    two entries that keep the kinds the family mixes (e.g. one sliding, one full layer);
    ``kind="decoder"`` sets ``is_decoder`` where the config has it; an encoder–decoder
    config made of an encoder and a decoder config (``sub_configs``) gets tiny ones."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[family]
    kw = _tiny_kwargs(cls, kind)
    if kind == "encoder-decoder":
        kw.update(_tiny_parts(cls, kind))
    kw.update(_OVERRIDES.get(family, {}))
    kw["attn_implementation"] = "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**kw)


def _tiny_parts(cls: Any, kind: str, depth: int = 2) -> dict[str, Any]:
    """Tiny configs for the parts (``sub_configs``) of a composite config, and theirs."""
    out: dict[str, Any] = {}
    default = None
    for name, sub in (getattr(cls, "sub_configs", None) or {}).items():
        if isinstance(sub, type) and sub.__name__ == "AutoConfig":  # the default's own class
            if default is None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    default = cls()
            sub = type(getattr(default, name, None))
            if not hasattr(sub, "model_type"):
                continue
        if isinstance(sub, type) and depth > 0:
            kw = {**_tiny_kwargs(sub, kind), **_tiny_parts(sub, kind, depth - 1)}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[name] = sub(**kw)
    return out


def _tiny_kwargs(cls: Any, kind: str) -> dict[str, Any]:
    """The small values :func:`tiny_config` gives the config class ``cls``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = cls()
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    amap = getattr(cls, "attribute_map", None) or {}
    kw: dict[str, Any] = {}
    tiny = {**_TINY, **_TINY_SEQ2SEQ} if kind == "encoder-decoder" else _TINY
    for k, v in tiny.items():
        name = amap.get(k, k)
        if name in fields:
            kw[name] = v
    for name in fields:
        val = getattr(base, name, None)
        if name.endswith("_token_id"):
            if isinstance(val, int) and not isinstance(val, bool) and val >= _TINY[
                    "vocab_size"] - 8:
                kw[name] = 0
            elif isinstance(val, list):
                kw[name] = [0]
    layers = getattr(base, "num_hidden_layers", None)
    for name in fields:
        val = getattr(base, name, None)
        if isinstance(val, list) and layers and len(val) == layers and name not in kw:
            firsts = {}
            for x in val:
                firsts.setdefault(str(x), x)
            kw[name] = (list(firsts.values()) + [val[0]] * 2)[:2]
    if "kv_lora_rank" in fields:  # latent attention: every query head has its own key
        kw[amap.get("num_key_value_heads", "num_key_value_heads")] = _TINY["num_attention_heads"]
    if kind == "decoder" and "is_decoder" in fields:
        kw["is_decoder"] = True
    return kw


def _model_class(family: str, kind: str) -> Any:
    import transformers

    auto = _mappings()
    name = _SEQ2SEQ_CLASSES.get(family) or auto.MODEL_MAPPING_NAMES.get(family)
    if name is None or (kind == "decoder" and family not in auto.MODEL_MAPPING_NAMES):
        name = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[family]
    if isinstance(name, (list, tuple)):
        name = name[0]
    return getattr(transformers, name)


def _cause(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}"


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


def compare_trace(trace: Any, reference: list[torch.Tensor]) -> dict[str, Any]:
    """The trace's weights against the model's own attention maps (one (1, H, Lq, Lk)
    tensor per layer): ``{"weights": max |Δ|, "recomputed": max |Δ| of the weights rebuilt from q
    and k under the recorded shapes, "compared": "" or how}``.

    Models that return the softmax before a sink logit's share (and scale their output
    instead) are compared with the trace's rows renormalised (``compared`` says so)."""
    shapes = sorted({tuple(r.shape) for r in reference})
    if len(shapes) != 1:
        raise ValueError(f"the model's own maps differ in shape between layers ({shapes}); "
                         "a trace stacks layers of one shape")
    want = torch.stack([r[0].float() for r in reference])  # (L, H, N, N)
    got = trace.weights
    if tuple(got.shape) != tuple(want.shape):
        raise ValueError(f"the trace holds weights {tuple(got.shape)} (layers, heads, queries, "
                         f"keys), the model's own maps are {tuple(want.shape)}")
    err = float((got - want).abs().max())
    compared = ""
    if err > EXACT_TOL and any(s.sinks is not None for s in trace.shapes):
        share = got.sum(-1, keepdim=True)
        renorm = got / share.masked_fill(share == 0, 1.0)
        err2 = float((renorm - want).abs().max())
        if err2 < err:
            err, compared = err2, ("rows renormalised: the model returns its softmax before "
                                   "the sink's share")
    rec = 0.0
    nq, nk = trace.q.shape[2], trace.k.shape[2]
    group = trace.num_heads // trace.num_kv_heads
    for layer in range(trace.num_layers):
        shape = trace.score_shape(layer)
        k = trace.k[layer].repeat_interleave(group, dim=0)
        lse = row_logsumexp(trace.q[layer], trace.k[layer], shape)
        w = shaped_weights(trace.q[layer], k, lse, shape, rows=range(nq),
                           head=list(range(trace.num_heads)), lq=nq, lk=nk)
        rec = max(rec, float((w - got[layer]).abs().max()))
    return {"weights": err, "recomputed": rec, "compared": compared}


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
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is many times faster than several
    try:
        result = checker(family, kind, seq_len, seed)
    finally:
        torch.set_num_threads(threads)
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


class _NotBuilt(Exception):
    """A tiny model that cannot be made offline (the message is the matrix's reason)."""


def _build(family: str, kind: str, seed: int) -> Any:
    try:
        config = tiny_config(family, kind)
        cls = _model_class(family, kind)
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe = cls(config)
        n_params = sum(p.numel() for p in probe.parameters())
        big = max(probe.named_parameters(), key=lambda kv: kv[1].numel())[0] if (
            n_params > _MAX_PARAMS) else ""
        del probe
        if n_params <= _MAX_PARAMS:
            torch.manual_seed(seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cls(config).eval()
    except Exception as exc:
        raise _NotBuilt(f"not built: its tiny config or model fails offline "
                        f"({_cause(exc)})") from exc
    raise _NotBuilt(f"not built: the smallest config attnlab makes still has "
                    f"{n_params / 1e6:.0f}M parameters (largest: {big})")


def tiny_model(family: str, seed: int = 0) -> Any:
    """The tiny random model of a text ``family`` that :func:`check_family` checks (eval
    mode, eager attention; the base model of an encoder–decoder family, without its
    language-model head); ``ValueError`` when it cannot be built offline."""
    kind = dict(families()).get(family)
    if kind not in ("decoder", "encoder", "encoder-decoder"):
        raise ValueError(f"family must be a text decoder, encoder or encoder–decoder of the "
                         f"installed transformers, got {family!r} ({kind or 'unknown'})")
    try:
        return _build(family, kind, seed)
    except _NotBuilt as exc:
        raise ValueError(f"{family}: {exc}") from None


def _check(family: str, kind: str, seq_len: int, seed: int) -> FamilyResult:
    from attnlab.tracing.tracer import trace as run_trace

    def res(status: str, reason: str = "", **kw: Any) -> FamilyResult:
        return FamilyResult(family, kind, status, reason, **kw)

    try:
        model = _build(family, kind, seed)
    except _NotBuilt as exc:
        return res("not built", str(exc))
    name = type(model).__name__
    ids = torch.randint(3, _TINY["vocab_size"] - 8, (1, seq_len),
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
    info = dict(model_class=name, layers=t.num_layers, heads=t.num_heads)
    try:
        errors, problems = judge(t, maps, ids[0].tolist())
    except ValueError as exc:
        return res("wrong", f"wrong: {exc}", **info)
    info.update(max_weight_error=errors["weights"], max_recompute_error=errors["recomputed"],
                compared=errors["compared"], features=_features(t))
    if problems:
        return res("wrong", "wrong: " + "; ".join(problems), **info)
    return res("exact", "", **info)


def judge(trace: Any, maps: list[torch.Tensor], ids: list[int],
          key_ids: list[int] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(:func:`compare_trace`'s errors, the problems found): weights beyond
    :data:`EXACT_TOL`, recomputed weights beyond :data:`RECOMPUTE_TOL`, a layer whose causal
    flag disagrees with the model's own maps (a causal layer's maps are zero above the
    diagonal; random weights make them nonzero everywhere else), labels that are not the
    token ids (and, for cross-attention, key labels that are not ``key_ids``). No problems
    means exact. Raises ``ValueError`` when the trace and the maps do not even have the
    same layers and heads."""
    errors = compare_trace(trace, maps)
    problems = []
    if errors["weights"] > EXACT_TOL:
        problems.append(f"weights differ from output_attentions by {errors['weights']:.2e}")
    if errors["recomputed"] > RECOMPUTE_TOL:
        problems.append(f"weights recomputed from q and k differ by {errors['recomputed']:.2e}")
    for layer, (shape, m) in enumerate(zip(trace.shapes, maps)):
        upper = bool((m[0].triu(1) != 0).any())  # whether a query sees later keys
        if shape.bias is None and shape.causal == upper:
            problems.append(f"layer {layer} is marked causal={shape.causal} but its maps "
                            f"{'do' if upper else 'do not'} reach later keys")
    if trace.tokens != [str(i) for i in ids] or trace.token_ids != list(ids):
        problems.append("labels are not the token ids")
    if key_ids is not None and (trace.key_tokens or trace.tokens) != [str(i) for i in key_ids]:
        problems.append("key labels are not the source token ids")
    return errors, problems


def eager_maps(model: Any, ids: torch.Tensor) -> list[Any]:
    """The model's own attention maps under eager attention, run as the tracer runs it."""
    import inspect

    base = getattr(model, "base_model", model)
    params = inspect.signature(base.forward).parameters
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
    import inspect

    base = getattr(model, "base_model", model)
    params = inspect.signature(base.forward).parameters
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

    def res(status: str, reason: str = "", **kw: Any) -> FamilyResult:
        return FamilyResult(family, kind, status, reason, **kw)

    try:
        model = _build(family, kind, seed)
    except _NotBuilt as exc:
        return res("not built", str(exc))
    name = type(model).__name__
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, _TINY["vocab_size"] - 8, (1, seq_len), generator=g)
    target = torch.randint(3, _TINY["vocab_size"] - 8, (1, TARGET_LEN), generator=g)
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
    info: dict[str, Any] = dict(model_class=name, layers=sum(x.num_layers for x in t.values()),
                                heads=t[t.names[0]].num_heads,
                                stacks={n: x.num_layers for n, x in t.items()})
    problems: list[str] = []
    worst = {"weights": 0.0, "recomputed": 0.0}
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
        for key in worst:
            worst[key] = max(worst[key], errors[key])
        if errors["compared"]:
            compared.append(f"{stack}: {errors['compared']}")
        features += [f"{stack}: {f}" for f in _features(t[stack])]
    info.update(max_weight_error=worst["weights"], max_recompute_error=worst["recomputed"],
                compared="; ".join(compared), features=features)
    if problems:
        return res("wrong", "wrong: " + "; ".join(problems), **info)
    return res("exact", "", **info)


def _check_media(family: str, kind: str, seq_len: int, seed: int) -> FamilyResult:
    """Vision and speech families: :func:`attnlab.tracing.media.check_media_family`."""
    from attnlab.tracing.media import check_media_family

    return FamilyResult(**check_media_family(family, kind, exact_tol=EXACT_TOL,
                                             recompute_tol=RECOMPUTE_TOL,
                                             not_yet=NOT_YET[kind], seed=seed))


#: How each kind of family is checked: kind -> ``checker(family, kind, seq_len, seed)``
#: returning a :class:`FamilyResult`. A kind without a checker is listed as ``not yet``
#: with its :data:`NOT_YET` reason; supporting a new kind is one entry here.
CHECKERS: dict[str, Callable[[str, str, int, int], FamilyResult]] = {
    "decoder": _check,
    "encoder": _check,
    "encoder-decoder": _check_seq2seq,
    "vision": _check_media,
    "speech": _check_media,
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


def to_json(results: list[FamilyResult]) -> dict[str, Any]:
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
