"""Tiny random Hugging Face models, built offline from their configuration classes: the one
place that makes them.

* :func:`tiny_model` — the model of a family that the support matrix
  (:mod:`attnlab.tracing.support`) checks: a text decoder, encoder or encoder–decoder from
  :func:`tiny_config` (2 layers, hidden size 32, 4 heads over 2 key/value heads, vocabulary
  96, a sliding window of :data:`WINDOW` and a soft-cap of 2 where the family has them,
  weights drawn large enough that attention is far from uniform), or a vision or speech
  family from :data:`TINY_VISION`, :data:`TINY_WHISPER`, :data:`TINY_SPEECH_SEQ2SEQ` and
  :data:`TINY_AUDIO_ENCODER` (:func:`tiny_media_model`);
* the named models the report shows and measures: :func:`tiny_bart`, :func:`tiny_vit`,
  :func:`tiny_whisper` (weights of standard deviation :data:`INIT_STD`) and
  :func:`tiny_llama`.

Every one has eager attention (the softmax ``output_attentions`` returns), is seeded
(``torch.manual_seed(seed)`` right before it is made) and is in eval mode.

>>> m = tiny_model("llama")
>>> type(m).__name__, m.config.num_hidden_layers, m.config._attn_implementation
('LlamaModel', 2, 'eager')
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from attnlab._errors import Error
from attnlab._text import one_line
from attnlab.tracing.families import TEXT_KINDS, families, mappings

__all__ = ["INIT_STD", "TINY_AUDIO_ENCODER", "TINY_SPECTROGRAM", "TINY_SPEECH_SEQ2SEQ",
           "TINY_VISION", "TINY_WHISPER", "WINDOW", "NotBuiltError", "media_families",
           "text_model", "tiny_bart", "tiny_config", "tiny_llama", "tiny_media_model",
           "tiny_model", "tiny_vit", "tiny_whisper"]

#: The sliding window given to every text family that has one.
WINDOW = 4
#: The most parameters a tiny text model may have (a config field left large is refused).
_MAX_PARAMS = 3_000_000
#: The vocabulary size of every tiny text model.
_VOCAB_SIZE = 96

#: The values every tiny config gets, for each field its config class has (by name or
#: through the class's ``attribute_map``).
_TINY: dict[str, int | float] = dict(
    vocab_size=_VOCAB_SIZE, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
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
_TINY_SEQ2SEQ: dict[str, int | float] = dict(
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

#: The sizes of every tiny vision model the support matrix checks (fields its config has):
#: a 32 x 32 image in 8 x 8 patches (a 4 x 4 grid), 2 layers, 4 heads.
TINY_VISION: dict[str, int | float | bool] = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
    image_size=32, patch_size=8, initializer_range=0.2, num_register_tokens=2,
    use_relative_position_bias=True)
_TINY_TEXT: dict[str, int] = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=48, vocab_size=64)
#: The tiny Whisper the support matrix checks: 2 + 2 layers, a 1 s window (50 positions).
TINY_WHISPER: dict[str, int | float] = dict(
    vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, num_mel_bins=80,
    max_source_positions=50, max_target_positions=32, decoder_start_token_id=1,
    eos_token_id=2, pad_token_id=0, bos_token_id=1, init_std=0.2)
#: The other tiny speech encoder–decoders (fields their configs have): 2 + 2 layers, 4 heads
#: and small convolutions.
TINY_SPEECH_SEQ2SEQ: dict[str, int | float] = dict(
    vocab_size=96, hidden_size=32, d_model=32, intermediate_size=48, encoder_layers=2,
    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=48, decoder_ffn_dim=48, encoder_num_hidden_layers=2,
    decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
    encoder_num_key_value_heads=4, decoder_num_key_value_heads=4, conv_channels=32,
    decoder_start_token_id=1, eos_token_id=2, pad_token_id=0, bos_token_id=1, init_std=0.2,
    initializer_range=0.2)


#: The tiny speech encoders the support matrix checks: two convolutions of stride 5 and 2
#: (a frame every 10 samples), 2 layers, 4 heads; 0.1 s of sound is 159 frames.
TINY_AUDIO_ENCODER: dict[str, int | float | tuple[int, ...]] = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
    conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4, initializer_range=0.2)
#: The tiny Audio Spectrogram Transformer besides: 32 mel bins x 64 frames in 16 x 16
#: patches of stride 8 (3 x 7 of them).
TINY_SPECTROGRAM: dict[str, int] = dict(num_mel_bins=32, max_length=64, patch_size=16,
                                        frequency_stride=8, time_stride=8)


#: The standard deviation of the named models' random weights: ten times the usual 0.02,
#: so that the heads' scores spread and their patterns differ (at 0.02 every head is near
#: uniform).
INIT_STD = 0.2


# -- one builder ------------------------------------------------------------------------------


def _quiet() -> Any:
    """Silence transformers' logging and Python warnings (tiny configs leave some special
    token ids outside the vocabulary, and some fields unused)."""
    from attnlab.tracing.media import _quiet as quiet

    return quiet()


def _eager(cls: Any, values: dict[str, Any]) -> Any:
    """A config of class ``cls`` with ``values`` and eager attention."""
    with _quiet():
        return cls(**values, attn_implementation="eager")


def _seeded(model_cls: Any, config: Any, seed: int, **kwargs: Any) -> Any:
    """``model_cls(config)`` with weights drawn after ``torch.manual_seed(seed)``, in eval
    mode."""
    import torch

    with _quiet():
        torch.manual_seed(seed)
        return model_cls(config, **kwargs).eval()


def _kwargs_for(config_cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that are fields of ``config_cls``."""
    with _quiet():
        base = config_cls()
    return {k: v for k, v in values.items() if hasattr(base, k)}


def _cause(exc: BaseException, limit: int = 160) -> str:
    """``"ExceptionType: its message"`` on one line, the message cut to ``limit``."""
    return f"{type(exc).__name__}: {one_line(exc, limit)}"


# -- text families ----------------------------------------------------------------------------


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
    return _eager(cls, kw)


def _tiny_parts(cls: Any, kind: str, depth: int = 2) -> dict[str, Any]:
    """Tiny configs for the parts (``sub_configs``) of a composite config, and theirs."""
    out: dict[str, Any] = {}
    default = None
    for name, sub in (getattr(cls, "sub_configs", None) or {}).items():
        if isinstance(sub, type) and sub.__name__ == "AutoConfig":  # the default's own class
            if default is None:
                with _quiet():
                    default = cls()
            sub = type(getattr(default, name, None))
            if not hasattr(sub, "model_type"):
                continue
        if isinstance(sub, type) and depth > 0:
            kw = {**_tiny_kwargs(sub, kind), **_tiny_parts(sub, kind, depth - 1)}
            with _quiet():
                out[name] = sub(**kw)
    return out


def _tiny_kwargs(cls: Any, kind: str) -> dict[str, Any]:
    """The small values :func:`tiny_config` gives the config class ``cls``."""
    with _quiet():
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
            if isinstance(val, int) and not isinstance(val, bool) and val >= _VOCAB_SIZE - 8:
                kw[name] = 0
            elif isinstance(val, list):
                kw[name] = [0]
    layers = getattr(base, "num_hidden_layers", None)
    for name in fields:
        val = getattr(base, name, None)
        if isinstance(val, list) and layers and len(val) == layers and name not in kw:
            firsts: dict[str, Any] = {}
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

    auto = mappings()
    name = _SEQ2SEQ_CLASSES.get(family) or auto.MODEL_MAPPING_NAMES.get(family)
    if name is None or (kind == "decoder" and family not in auto.MODEL_MAPPING_NAMES):
        name = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[family]
    if isinstance(name, (list, tuple)):
        name = name[0]
    return getattr(transformers, name)



class NotBuiltError(Error):
    """A tiny model that cannot be made offline (the message is the support matrix's
    reason: ``"not built: ..."``)."""


def text_model(family: str, kind: str, seed: int = 0) -> Any:
    """The tiny model of the text ``family`` of ``kind`` (``decoder``, ``encoder`` or
    ``encoder-decoder``): its base model from :func:`tiny_config` (the sequence-to-sequence
    class where the base model needs more than text), seeded, eval mode;
    :class:`NotBuiltError` when it cannot be made offline or would exceed 3M parameters."""
    import torch

    try:
        config = tiny_config(family, kind)
        cls = _model_class(family, kind)
        with torch.device("meta"), _quiet():
            probe = cls(config)
        n_params = sum(p.numel() for p in probe.parameters())
        big = max(probe.named_parameters(), key=lambda kv: kv[1].numel())[0] if (
            n_params > _MAX_PARAMS) else ""
        del probe
        if n_params <= _MAX_PARAMS:
            return _seeded(cls, config, seed)
    except Exception as exc:
        raise NotBuiltError(f"not built: its tiny config or model fails offline "
                            f"({_cause(exc)})") from exc
    raise NotBuiltError(f"not built: the smallest config attnlab makes still has "
                        f"{n_params / 1e6:.0f}M parameters (largest: {big})")


def media_families() -> list[str]:
    """The vision and speech families :func:`tiny_media_model` builds (those attnlab traces)."""
    from attnlab.tracing import media

    return [*media.VISION_FAMILIES, *media._TOWER_FAMILIES, *media._SAME_AS,
            *media.SPEECH_FAMILIES, *media.AUDIO_ENCODER_FAMILIES]


def tiny_model(family: str, seed: int = 0) -> Any:
    """The tiny random model of ``family`` that the support matrix checks: a text decoder,
    encoder or encoder–decoder (:func:`text_model`: the base model, without a
    language-model head) or a vision or speech family that attnlab traces
    (:func:`tiny_media_model`); ``ValueError`` when it cannot be built offline."""
    if family in media_families():
        return tiny_media_model(family, seed)
    kind = dict(families()).get(family)
    if kind not in TEXT_KINDS:
        raise ValueError(f"family must be a text decoder, encoder or encoder–decoder of the "
                         f"installed transformers, or a vision or speech family attnlab "
                         f"traces, got {family!r} ({kind or 'unknown'})")
    try:
        return text_model(family, kind, seed)
    except NotBuiltError as exc:
        raise ValueError(f"{family}: {exc}") from None


# -- vision and speech families ---------------------------------------------------------------


def tiny_media_model(family: str, seed: int = 0) -> Any:
    """The tiny random model that the support matrix checks, of a family in
    :data:`attnlab.tracing.media.VISION_FAMILIES` (or a text-image model whose vision tower
    is one), ``SPEECH_FAMILIES`` or ``AUDIO_ENCODER_FAMILIES``."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    from attnlab.tracing import media

    known = media_families()
    if family not in known:
        raise ValueError(f"family must be one of {sorted(known)}, got {family!r}")
    cls = CONFIG_MAPPING[family]
    model_cls = None
    if family in media.AUDIO_ENCODER_FAMILIES:
        with _quiet():
            inner = getattr(cls(), "encoder_config", None)  # Parakeet: an encoder config
        sizes = {**TINY_AUDIO_ENCODER, **(
            TINY_SPECTROGRAM if family == "audio-spectrogram-transformer" else {})}
        config = (_eager(cls, _kwargs_for(cls, sizes)) if inner is None else _eager(
            cls, {"encoder_config": _kwargs_for(type(inner), TINY_AUDIO_ENCODER)}))
    elif family in media.SPEECH_FAMILIES:
        values = TINY_WHISPER if family == "whisper" else _kwargs_for(cls, TINY_SPEECH_SEQ2SEQ)
        config = _eager(cls, values)
        model_cls = getattr(transformers, MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES[family])
    elif family in media._TOWER_FAMILIES:
        with _quiet():
            vision_cls = type(cls().vision_config)
        extra = {"qformer_config": dict(hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=4, intermediate_size=48,
                                        encoder_hidden_size=32)} if family == "blip-2" else {}
        config = _eager(cls, dict(text_config=_TINY_TEXT,
                                  vision_config=_kwargs_for(vision_cls, TINY_VISION), **extra))
    else:
        config = _eager(cls, _kwargs_for(cls, TINY_VISION))
    if model_cls is None:
        # (a media family maps to one class name; transformers' table also holds tuples)
        model_cls = getattr(transformers, cast(str, MODEL_MAPPING_NAMES[family]))
    return _seeded(model_cls, config, seed)


# -- the named models -------------------------------------------------------------------------


def tiny_bart(seed: int = 0, *, vocab_size: int = 96) -> Any:
    """A BART with 2 encoder and 2 decoder layers of 4 heads, d_model 32, weights of
    standard deviation :data:`INIT_STD` (with its language-model head)."""
    from transformers import BartConfig, BartForConditionalGeneration

    config = _eager(BartConfig, dict(
        vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
        init_std=INIT_STD))
    return _seeded(BartForConditionalGeneration, config, seed)


def tiny_vit(seed: int = 0) -> Any:
    """A ViT of :data:`TINY_VISION`'s sizes (2 layers of 4 heads, 8 × 8 patches) over
    48 × 48 images (a 6 × 6 grid), a feed-forward of 64, no pooling layer."""
    from transformers import ViTConfig, ViTModel

    values = {**TINY_VISION, "intermediate_size": 64, "image_size": 48,
              "initializer_range": INIT_STD}
    return _seeded(ViTModel, _eager(ViTConfig, _kwargs_for(ViTConfig, values)), seed,
                   add_pooling_layer=False)


def tiny_whisper(seed: int = 0, *, vocab_size: int = 96) -> Any:
    """A Whisper of :data:`TINY_WHISPER`'s sizes (2 encoder and 2 decoder layers of 4 heads,
    80 mel bins, 50 encoder positions: a 1 s window), a feed-forward of 64, 16 target
    positions and no suppressed tokens (with its language-model head)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    values: dict[str, int | float | list[int]] = {
        **TINY_WHISPER, "vocab_size": vocab_size, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "max_target_positions": 16, "suppress_tokens": [], "begin_suppress_tokens": [],
        "init_std": INIT_STD}
    return _seeded(WhisperForConditionalGeneration, _eager(WhisperConfig, values), seed)


def tiny_llama(seed: int = 0, max_length: int = 4096) -> Any:
    """A random-weight Llama with its language-model head (2 layers, 4 heads sharing 2
    key/value heads of 8, vocabulary 128, ``max_length`` positions) for quick runs of the
    long-context measurements."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = _eager(LlamaConfig, dict(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_length))
    return _seeded(LlamaForCausalLM, config, seed)
