"""Images and sounds as inputs of a trace: vision transformers and speech models.

``trace(model, image=PATH_OR_PIL)`` runs one image through a Hugging Face vision transformer
and returns an :class:`~attnlab.tracing.attention.AttentionTrace` (stack ``"self"``) whose
tokens are the model's prefix tokens (``"[CLS]"``, ``"[DIST]"``, ``"[REG0]"``…) then one
token per patch labelled ``"r{row}c{col}"`` (0-based, row-major). The image is prepared by
the model folder's own image processor (``preprocessor_config.json``) when it has one, else
resized to the config's ``image_size`` (bilinear) and normalised with the ImageNet mean and
standard deviation; ``meta["input"]["preprocess"]`` says which, and
``meta["input"]["image_png"]`` holds the image exactly as the model saw it (the pixel values
un-normalised back to 0–255), as a base64 PNG.

``trace(model, audio=PATH, target=None)`` runs one 16 kHz mono 16-bit PCM WAV file (read
with the standard library's :mod:`wave`) through a speech encoder–decoder (Whisper,
Moonshine, Speech2Text: :data:`SPEECH_FAMILIES`) and returns a
:class:`~attnlab.tracing.stacks.StackedTrace`: the encoder's self-attention over time
positions labelled by their start (``"0.00s"``, ``"0.02s"``…), the decoder's self-attention
over its text tokens, and the cross-attention from those tokens to the time positions. The
input is prepared by the folder's feature extractor when it has one, else as the family
does by default: Whisper's log-mel features (a ``WhisperFeatureExtractor`` built from the
config), Speech2Text's filter banks, Moonshine's waveform itself. Whisper pads every input
to its full window (30 s: 1500 encoder positions) and refuses a shorter one, so the trace
keeps every position; ``meta["input"]["real_positions"]`` says how many hold the sound (the
others hear their input as it is). The decoder's tokens are
``target`` (text, tokenized by the model's tokenizer, or token ids), or else the model's
own greedy choice, token by token from its start token (``meta["target_from"]``). A speech
encoder without a decoder (wav2vec 2.0, HuBERT, data2vec-audio, SEW, UniSpeech, Parakeet
CTC, w2v-BERT, ...: :data:`AUDIO_ENCODER_FAMILIES`) gives one stack over its frames,
labelled the same way; the Audio Spectrogram Transformer's tokens are ``[CLS]``, ``[DIST]``
and patches of its spectrogram labelled by frequency band and start (``"f2@0.40s"``).

Families are listed in :data:`VISION_FAMILIES` (traced exactly: the weights equal the
model's own ``output_attentions``; a text-image model's vision tower is traced),
:data:`REFUSED_FAMILIES` (refused with the reason), :data:`SPEECH_FAMILIES` and
:data:`AUDIO_ENCODER_FAMILIES`; :func:`attnlab.tracing.support.check_media_family` is their
row of the support matrix, on the tiny models of :mod:`attnlab.tracing.tiny`.

>>> import numpy as np
>>> from PIL import Image
>>> from transformers import ViTConfig, ViTModel
>>> vit = ViTModel(ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
...                          intermediate_size=32, image_size=16, patch_size=8))
>>> t = trace_image(vit, Image.fromarray(np.zeros((20, 30, 3), np.uint8)))
>>> t.tokens, t.meta["input"]["grid"]
(['[CLS]', 'r0c0', 'r0c1', 'r1c0', 'r1c1'], [2, 2])
"""

from __future__ import annotations

import base64
import inspect
import io
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab._errors import check_int
from attnlab._text import one_line
from attnlab.tracing._media_records import AudioInput, ImageInput, ModelInfo
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.capture import Capture, capture
from attnlab.tracing.decode import (
    check_ids,
    fit_target,
    generated_text,
    greedy,
    id_labels,
    needs_target,
    next_logits,
    start_id,
    target_ids,
)
from attnlab.tracing.inputs import (  # noqa: F401 (MAX_IMAGE_PIXELS: importable here too)
    MAX_IMAGE_PIXELS,
    SAMPLE_RATE,
    read_audio,
    read_image,
    read_wav,
)
from attnlab.tracing.preprocess import (  # noqa: F401 (the ImageNet statistics: here too)
    IMAGENET_MEAN,
    IMAGENET_STD,
    SpeechInput,
    encoder_features,
    folder_file,
    image_inputs,
    pair,
    quiet,
    whisper_extractor,
)
from attnlab.tracing.stacks import StackedTrace

__all__ = ["AUDIO_ENCODER_FAMILIES", "IMAGENET_MEAN", "IMAGENET_STD", "REFUSED_FAMILIES",
           "SAMPLE_RATE", "SPEECH_FAMILIES", "VISION_FAMILIES", "image_inputs", "read_image",
           "read_wav", "time_labels", "trace_audio", "trace_image", "trace_media"]

#: Tokens the model's own greedy generation adds at most when no target is given.
MAX_NEW_TOKENS = 8


def _cls(_config: Any) -> list[str]:
    return ["[CLS]"]


def _cls_registers(config: Any) -> list[str]:
    n = int(getattr(config, "num_register_tokens", 0) or 0)
    return ["[CLS]", *(f"[REG{i}]" for i in range(n))]


#: Vision families traced exactly, each with the tokens its encoder puts before the patches
#: (a function of the config), in the model's own order.
VISION_FAMILIES: dict[str, Callable[[Any], list[str]]] = {
    "vit": _cls,
    "vit_msn": _cls,
    "deit": lambda _c: ["[CLS]", "[DIST]"],
    "beit": _cls,
    "data2vec-vision": _cls,  # refused by capture: its attention is computed inline
    "dinov2": _cls,
    "dinov2_with_registers": _cls_registers,
    "dinov3_vit": _cls_registers,
    "clip_vision_model": _cls,
    "siglip_vision_model": lambda _c: [],
    "ijepa": lambda _c: [],
    "chinese_clip_vision_model": _cls,
    "altclip_vision_model": _cls,
    "metaclip_2_vision_model": _cls,
    "owlvit_vision_model": _cls,
    "owlv2_vision_model": _cls,
    "clipseg_vision_model": _cls,
    "blip_vision_model": _cls,  # refused by capture: its attention is computed inline
    "blip_2_vision_model": _cls,
    "mlcd_vision_model": _cls,
    "aimv2_vision_model": lambda _c: [],
    "tipsv2_vision_model": _cls_registers,
    "dpt": _cls,
    "pixio": lambda c: [f"[CLS{i}]" for i in range(int(getattr(c, "n_cls_tokens", 1)))],
    "vitdet": lambda _c: [],  # refused by capture: its attention is computed inline
}
#: Vision families refused, with the reason.
REFUSED_FAMILIES: dict[str, str] = {
    **dict.fromkeys(
        ("swin", "swinv2", "donut-swin", "maskformer-swin", "swin2sr"),
        "windowed attention: each layer attends within shifted windows of patches (one "
        "attention map per window), not one map over the image"),
    **dict.fromkeys(("dinat", "nat"), "neighbourhood attention: each patch attends to a "
                    "window around it, computed outside the attention interface"),
    **dict.fromkeys(("pvt", "pvt_v2", "segformer", "glpn"),
                    "spatial-reduction attention: keys and values are pooled patches, "
                    "not the patches"),
    "vit_mae": "random masking: the encoder sees a random quarter of the patches on each "
               "call",
    **dict.fromkeys(("hiera", "levit", "mobilevit", "mobilevitv2", "efficientformer"),
                    "hierarchical or convolutional stages: attention over pooled or "
                    "reshaped feature maps, not over the image's patches"),
    **dict.fromkeys(("convnext", "convnextv2", "resnet", "regnet", "efficientnet",
                     "mobilenet_v1", "mobilenet_v2", "poolformer", "focalnet", "van",
                     "bit", "dinov3_convnext", "textnet", "timm_backbone"),
                    "no attention: a convolutional (or pooling) network has no attention "
                    "to trace"),
}
#: Speech families traced exactly (encoder, decoder and cross-attention).
SPEECH_FAMILIES = ("whisper", "moonshine", "speech_to_text")
#: Speech encoders without a decoder (CTC, self-supervised and classification models): one
#: stack of self-attention over their frames (or spectrogram patches). WavLM and SEW-D
#: compute their attention inline: capture refuses them, naming the module.
AUDIO_ENCODER_FAMILIES = ("wav2vec2", "hubert", "data2vec-audio", "sew", "unispeech",
                          "unispeech-sat", "wav2vec2-conformer", "wavlm", "sew-d",
                          "parakeet_ctc", "wav2vec2-bert", "audio-spectrogram-transformer")
#: Speech encoders that read filter banks, not the waveform: their default extractor.
_FEATURE_ENCODERS = {"parakeet_ctc": "ParakeetFeatureExtractor",
                     "wav2vec2-bert": "SeamlessM4TFeatureExtractor"}
#: The model classes that wrap a vision tower (``.vision_model``) with a text model.
_TOWER_FAMILIES = {"clip": "clip_vision_model", "siglip": "siglip_vision_model",
                   "chinese_clip": "chinese_clip_vision_model",
                   "altclip": "altclip_vision_model", "metaclip_2": "metaclip_2_vision_model",
                   "owlvit": "owlvit_vision_model", "owlv2": "owlv2_vision_model",
                   "clipseg": "clipseg_vision_model", "blip": "blip_vision_model",
                   "blip-2": "blip_2_vision_model", "tipsv2": "tipsv2_vision_model"}
#: Families whose model is a vision family under another name.
_SAME_AS = {"mlcd": "mlcd_vision_model"}


# -- the model --------------------------------------------------------------------------------


def _unpack(model: Any) -> tuple[nn.Module, str, str | None, ModelInfo, Any]:
    """(module, name, folder, model_info, tokenizer) of a loaded model or a module."""
    if isinstance(model, nn.Module):
        cfg = getattr(model, "config", None)
        folder = getattr(cfg, "_name_or_path", None) or None
        return model, type(model).__name__, folder, {}, None
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module):
        describe = getattr(model, "describe", None)
        described = describe() if callable(describe) else {}
        info: ModelInfo = {k: v for k, v in described.items()
                           if isinstance(v, (str, int, float, bool, type(None)))}
        folder = getattr(model, "path", None) or getattr(
            getattr(inner, "config", None), "_name_or_path", None) or None
        return (inner, str(getattr(model, "name", type(inner).__name__)), folder, info,
                getattr(model, "tokenizer", None))
    raise TypeError("model must be a loaded model (attnlab.models.load(...)) or a Hugging Face "
                    f"torch.nn.Module, got {type(model).__name__}")


def _family(module: nn.Module) -> str:
    return str(getattr(getattr(module, "config", None), "model_type", "") or "")


def _vision_tower(net: nn.Module, name: str) -> tuple[nn.Module, str]:
    """The module that turns pixels into patch tokens, and its family."""
    family = _family(net)
    if not family:
        raise ValueError(f"image= needs a Hugging Face vision transformer; {name} "
                         f"({type(net).__name__}) has no config.model_type")
    tower = getattr(net, "vision_model", None)  # a text-image model: its vision tower
    if family not in VISION_FAMILIES and isinstance(tower, nn.Module) and (
            _family(tower) in VISION_FAMILIES or family in _TOWER_FAMILIES):
        net = tower
        family = _family(net) or _TOWER_FAMILIES[family]
    else:  # a classifier (ViTForImageClassification ...): its base model, when it has one
        inner = getattr(net, "base_model", None)
        if inner is not net and isinstance(inner, nn.Module) and _takes_pixels(inner):
            net = inner
    if family in REFUSED_FAMILIES:
        raise ValueError(f"{name} ({family}) cannot be traced from an image: "
                         f"{REFUSED_FAMILIES[family]}")
    if family not in VISION_FAMILIES:
        raise ValueError(f"image= needs a vision transformer of a family attnlab traces "
                         f"({', '.join(sorted(VISION_FAMILIES))}); {name} is {family!r}")
    if not _takes_pixels(net):
        raise ValueError(f"image= needs a model that takes pixel_values; {name} "
                         f"({type(net).__name__}) does not")
    return net, family


def _run(module: nn.Module, name: str, what: str, **inputs: Any) -> Any:
    """``module(**inputs)`` without gradients; a failure inside the model (other than
    attnlab's own refusal) becomes one ``ValueError`` naming the model and its input."""
    from attnlab.tracing.adapters._base import UnreadableAttentionError

    try:
        with torch.no_grad():
            return module(**inputs)
    except UnreadableAttentionError:
        raise
    except Exception as exc:
        raise ValueError(f"{name} cannot run on {what} ({type(exc).__name__}: "
                         f"{one_line(exc, 300)})") from exc


def _takes_pixels(module: nn.Module) -> bool:
    try:
        return "pixel_values" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


# -- images -----------------------------------------------------------------------------------


def _png_base64(pixels: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _record_filter(cap: Capture, keep: Callable[[str], bool]) -> Capture:
    """A capture holding only the records whose module name ``keep`` accepts."""
    sub = Capture(cap.root, cap.qkv, cap.context)
    sub.records = [r for r in cap.records if keep(r.name)]
    return sub


def _one(t: Any) -> AttentionTrace:
    if isinstance(t, StackedTrace):
        if len(t) != 1:
            raise ValueError(f"expected one attention stack, got {', '.join(t.names)}")
        return next(iter(t.values()))
    return t


def _restack(t: AttentionTrace, stack: str, *, tokens: list[str],
             key_tokens: list[str] | None = None, token_ids: list[int] | None = None,
             text: str | None = None, meta: dict[str, Any] | None = None,
             model: str = "") -> AttentionTrace:
    """The same tensors and score shapes, labelled as one stack of a model."""
    dense = None if t.has_qk else t.weights
    return AttentionTrace(tokens, weights=dense, q=t.q, k=t.k, v=t.v, lse=t.lse,
                          context=t.context, shapes=list(t.shapes), model=model or t.model,
                          token_ids=token_ids, key_tokens=key_tokens, text=text,
                          meta={**t.meta, **(meta or {})}, stack=stack)


def trace_image(model: Any, image: Any, *, qkv: bool = True, context: bool = False,
                max_memory: int | str | None = None) -> AttentionTrace:
    """One image through a vision transformer (see the module docstring).

    Args:
        model: a loaded model (``attnlab.models.load(folder)``) or a Hugging Face module of
            a family in :data:`VISION_FAMILIES` (a classifier's base model and CLIP/SigLIP's
            vision tower are used).
        image: a path to an image file (PNG, JPEG, anything Pillow reads) or a PIL image.
        qkv, context, max_memory: as :func:`attnlab.tracing.tracer.trace`.

    Returns:
        an :class:`AttentionTrace` (stack ``"self"``): tokens the prefix tokens then the
        patches ``"r{row}c{col}"``; ``meta["input"]`` as the module docstring says.
    """
    net, name, folder, info, _tok = _unpack(model)
    tower, family = _vision_tower(net, name)
    img = read_image(image)
    pixels, seen, how = image_inputs(tower, img, folder)
    ph, pw = pair(getattr(tower.config, "patch_size", None), "patch_size")
    rows, cols = pixels.shape[-2] // ph, pixels.shape[-1] // pw
    prefix = VISION_FAMILIES[family](tower.config)
    tokens = prefix + [f"r{r}c{c}" for r in range(rows) for c in range(cols)]
    if max_memory is not None:
        from attnlab.tracing.budget import check_trace_budget

        check_trace_budget(tower, len(tokens), max_memory, what="image",
                           keep_weights=not qkv, keep_context=context)
    was_training = tower.training
    tower.eval()
    try:
        with capture(tower, qkv=qkv, context=context) as cap:
            _run(tower, name, f"the {pixels.shape[-2]}x{pixels.shape[-1]} image it was given",
                 pixel_values=pixels)
    except ValueError as exc:
        if "no attention module" in str(exc):
            raise ValueError(f"{name} ({family}) has no attention module attnlab can read: "
                             "nothing to trace") from None
        raise
    finally:
        tower.train(was_training)
    first = cap.records[0] if cap.records else None
    if first is None or first.batch != 1 or first.dims[1:] != (len(tokens), len(tokens)):
        got = "nothing" if first is None else (
            f"{first.batch} map(s) of {first.dims[1]}x{first.dims[2]} positions")
        raise ValueError(
            f"{name} ({family}) attends over {got}, not the {len(prefix)} prefix token(s) and "
            f"{rows}x{cols} patches of its image; refused rather than mislabelled")
    source = str(getattr(image, "filename", "") or "") if not isinstance(
        image, (str, os.PathLike)) else str(image)
    meta: dict[str, Any] = {"model_info": info or {"name": name, "family": family},
                            "family": family}
    input_meta: ImageInput = {
        "kind": "image", "grid": [rows, cols], "prefix": len(prefix),
        "patch_size": ph if ph == pw else [ph, pw],
        "image_size": [int(pixels.shape[-2]), int(pixels.shape[-1])],
        "image_png": _png_base64(seen), "path": Path(source).name if source else "",
        "preprocess": how}
    meta["input"] = input_meta
    if img.info.get("attnlab_conversion"):
        input_meta["conversion"] = img.info["attnlab_conversion"]
    t = _one(cap.trace(tokens=tokens, model=name, meta=meta, release=True))
    if t.stack != "self":
        t = _restack(t, "self", tokens=tokens)
    return t


# -- sound ------------------------------------------------------------------------------------


def time_labels(n: int, frame_seconds: float) -> list[str]:
    """``n`` labels of time positions: the start of each, in seconds (``"0.02s"``).

    >>> time_labels(3, 0.02)
    ['0.00s', '0.02s', '0.04s']
    >>> time_labels(3, 0.00125)
    ['0.00000s', '0.00125s', '0.00250s']
    """
    digits = next((d for d in range(2, 7) if abs(round(frame_seconds, d) - frame_seconds)
                   < 1e-12), 6)  # enough digits for every label to be exact (0.02 s: 2)
    return [f"{i * frame_seconds:.{digits}f}s" for i in range(n)]


def _speech_model(net: Any, name: str) -> tuple[Any, str]:
    """(the speech model of ``net``, a Hugging Face model of its own class; its family)."""
    family = _family(net)
    if family not in SPEECH_FAMILIES and family not in AUDIO_ENCODER_FAMILIES:
        raise ValueError(f"audio= needs a speech model of a family attnlab traces "
                         f"({', '.join((*SPEECH_FAMILIES, *AUDIO_ENCODER_FAMILIES))}); {name} "
                         f"is {family or 'not one'!r}")
    if family in AUDIO_ENCODER_FAMILIES:
        inner = getattr(net, "base_model", None)  # a CTC or classification head: its encoder
        if inner is not net and isinstance(inner, nn.Module) and _family(inner) == family:
            net = inner
    return net, family


def _trace_audio_encoder(net: Any, family: str, name: str, folder: str | None,
                         info: ModelInfo, samples: np.ndarray, source: str, *,
                         qkv: bool, context: bool,
                         max_memory: int | str | None) -> AttentionTrace:
    """A speech encoder's self-attention over the frames of a waveform (one stack)."""
    config = net.config
    features = _FEATURE_ENCODERS.get(family)
    fe, prepared, how = encoder_features(folder, features, samples, name)
    frames: int | None
    if features is not None:  # filter banks every 10 ms, subsampled by the encoder
        inputs = {"input_features": prepared["input_features"]}
        if family == "parakeet_ctc":
            sub = getattr(config, "encoder_config", config).subsampling_factor
            stride = int(fe.hop_length) * int(sub)
        else:  # wav2vec2-bert: the extractor stacks `stride` frames of 10 ms
            stride = SAMPLE_RATE // 100 * int(fe.stride)
        frames = None  # the encoder's own count, read from the trace
        estimate = samples.size // stride + 1
    else:
        values = prepared["input_values"]
        inputs = {"input_values": values}
        squeeze = int(getattr(config, "squeeze_factor", 1) or 1)
        stride = int(np.prod(config.conv_stride)) * squeeze
        frames = int(net._get_feat_extract_output_lengths(values.shape[-1])) // squeeze
        if frames < 1:
            raise ValueError(f"audio is {samples.size / SAMPLE_RATE:.4f} s: too short for "
                             f"{name}, which needs at least {sum(config.conv_kernel)} samples")
        estimate = frames
    if max_memory is not None:
        from attnlab.tracing.budget import check_trace_budget

        check_trace_budget(net, estimate, max_memory, what="audio", keep_weights=not qkv,
                           keep_context=context)
    was_training = net.training
    net.eval()
    try:
        with capture(net, qkv=qkv, context=context) as cap:
            _run(net, name, f"{samples.size / SAMPLE_RATE:g} s of audio", **inputs)
    finally:
        net.train(was_training)
    first = cap.records[0] if cap.records else None
    if frames is None and first is not None:
        frames = first.dims[1]
    if (first is None or frames is None or first.batch != 1
            or first.dims[1:] != (frames, frames)):
        got = "nothing" if first is None else f"{first.dims[1]}x{first.dims[2]} positions"
        raise ValueError(f"{name} ({family}) attends over {got}, not the {frames} frames of "
                         "its waveform; refused rather than mislabelled")
    frame_seconds = stride / SAMPLE_RATE
    meta: dict[str, Any] = {"model_info": info or {"name": name, "family": family},
                            "family": family}
    heard: AudioInput = {"kind": "audio", "sample_rate": SAMPLE_RATE,
                         "seconds": round(samples.size / SAMPLE_RATE, 6),
                         "frame_seconds": frame_seconds, "path": source, "positions": frames,
                         "real_positions": frames, "preprocess": how}
    meta["input"] = heard
    tokens = time_labels(frames, frame_seconds)
    t = _one(cap.trace(tokens=tokens, model=name, meta=meta, release=True))
    return t if t.stack == "self" else _restack(t, "self", tokens=tokens)


def _spectrogram_samples(config: Any) -> int:
    """The samples the Audio Spectrogram Transformer's window hears (``max_length`` frames
    of 25 ms every 10 ms), and a second more: what is read of a longer sound."""
    return (int(config.max_length) - 1) * 160 + 400 + SAMPLE_RATE


def _trace_spectrogram(net: Any, name: str, pre: Path | None, info: ModelInfo,
                       samples: np.ndarray, source: str, *, qkv: bool, context: bool,
                       max_memory: int | str | None,
                       seconds: float | None = None) -> AttentionTrace:
    """The Audio Spectrogram Transformer: its log-mel spectrogram (a frame every 10 ms,
    padded or cut to ``config.max_length`` frames) in overlapping patches, as an image of
    frequency bands (rows) by time (columns) behind ``[CLS]`` and ``[DIST]``; a patch is
    labelled ``"f{row}@{start}s"``."""
    import transformers

    config = net.config
    with quiet():
        if pre is not None:
            fe = transformers.AutoFeatureExtractor.from_pretrained(pre.parent,
                                                                   local_files_only=True)
            how = f"the model's feature extractor ({type(fe).__name__}, {pre.name})"
        else:
            fe = transformers.ASTFeatureExtractor(num_mel_bins=int(config.num_mel_bins),
                                                  max_length=int(config.max_length))
            how = (f"ASTFeatureExtractor for the config ({config.num_mel_bins} mel bins, "
                   f"{config.max_length} frames; the folder has no preprocessor_config.json)")
        values = fe(samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_values"]
    p, fs, ts = int(config.patch_size), int(config.frequency_stride), int(config.time_stride)
    rows = (int(config.num_mel_bins) - p) // fs + 1
    cols = (int(config.max_length) - p) // ts + 1
    column_seconds = ts / 100
    tokens = ["[CLS]", "[DIST]"] + [f"f{r}@{c * column_seconds:.2f}s" for r in range(rows)
                                    for c in range(cols)]
    if max_memory is not None:
        from attnlab.tracing.budget import check_trace_budget

        check_trace_budget(net, len(tokens), max_memory, what="audio", keep_weights=not qkv,
                           keep_context=context)
    was_training = net.training
    net.eval()
    try:
        with capture(net, qkv=qkv, context=context) as cap:
            _run(net, name, f"a spectrogram {tuple(values.shape)}", input_values=values)
    finally:
        net.train(was_training)
    first = cap.records[0] if cap.records else None
    if first is None or first.batch != 1 or first.dims[1:] != (len(tokens), len(tokens)):
        raise ValueError(f"{name} does not attend over the 2 + {rows}x{cols} patches of its "
                         "spectrogram; refused rather than mislabelled")
    seconds = samples.size / SAMPLE_RATE if seconds is None else seconds
    window = int(config.max_length) / 100
    meta: dict[str, Any] = {"model_info": info or {"name": name}, "family": _family(net)}
    heard: AudioInput = {
        "kind": "audio", "sample_rate": SAMPLE_RATE, "seconds": round(seconds, 6),
        "frame_seconds": column_seconds, "path": source, "positions": len(tokens),
        "real_positions": 2 + rows * min(cols, math.ceil(seconds / column_seconds - 1e-9)),
        "grid": [rows, cols], "prefix": 2, "patch_size": p, "window_seconds": window,
        "preprocess": how,
        "padding": f"{name} pads or cuts every input to {window:g} s of spectrogram; patch "
                   f"columns start every {column_seconds:g} s"}
    meta["input"] = heard
    if seconds > window:
        meta["truncated_from_seconds"] = round(seconds, 4)
    t = _one(cap.trace(tokens=tokens, model=name, meta=meta, release=True))
    return t if t.stack == "self" else _restack(t, "self", tokens=tokens)


def _trace_encoder_only(net: Any, family: str, name: str, folder: str | None,
                        info: ModelInfo, audio: Any, target: Any, *, qkv: bool,
                        context: bool, max_memory: int | str | None) -> AttentionTrace:
    """``audio`` through a speech encoder of :data:`AUDIO_ENCODER_FAMILIES` (no decoder, so
    no ``target``): its self-attention over the frames, or the spectrogram patches."""
    if target is not None:
        raise ValueError(f"target= is for speech models with a decoder "
                         f"({', '.join(SPEECH_FAMILIES)}); {name} ({family}) has none")
    source = "" if isinstance(audio, np.ndarray) else Path(audio).name
    if family == "audio-spectrogram-transformer":  # it hears its window, cut or padded
        samples, _cut = read_audio(audio, most=_spectrogram_samples(net.config),
                                   truncate=True)
        seconds = _cut if _cut is not None else samples.size / SAMPLE_RATE
        return _trace_spectrogram(net, name, folder_file(folder, "preprocessor_config.json"),
                                  info, samples, source, qkv=qkv, context=context,
                                  max_memory=max_memory, seconds=seconds)
    samples, _ = read_audio(audio)
    return _trace_audio_encoder(net, family, name, folder, info, samples, source, qkv=qkv,
                                context=context, max_memory=max_memory)


def _decoder_limit(config: Any) -> int:
    """The positions a speech decoder holds (its config's first integer of
    ``max_target_positions``, ``max_position_embeddings``; else no limit)."""
    return next((int(v) for v in (getattr(config, a, None) for a in (
        "max_target_positions", "max_position_embeddings")) if isinstance(v, int)), 1 << 30)


def _speech_target_ids(net: Any, encoder: Any, name: str, tok: Any, inp: SpeechInput,
                       target: Any, *, start: int, limit: int, max_new_tokens: int,
                       truncate: bool, meta: dict[str, Any]) -> tuple[list[int], str | None]:
    """(the decoder's token ids, behind the start token and fitted to ``limit``; their
    text): ``target``'s, or the model's greedy generation when it is None. Records in
    ``meta`` where they came from and what was cut (call with the model in eval mode)."""
    config = net.config
    if target is None:
        logits_of = next_logits(net, config)
        if logits_of is None:
            raise needs_target(name, net, " (and its config ties none to the token "
                               "embedding)")
        encoded = _run(encoder, name, "its audio", **inp.kwargs)
        eos = getattr(config, "eos_token_id", None)
        ids = greedy(logits_of, encoded, start, eos if isinstance(eos, int) else None,
                     int(config.vocab_size), min(max_new_tokens, limit - 1))
        target_text = generated_text(tok, ids)
        meta["target_from"] = "generated"
    else:
        ids, target_text = target_ids(target, tok, start=start, name=name)
        ids = ids if ids[0] == start else [start, *ids]
        meta["target_from"] = "given"
    ids, target_cut = fit_target(ids, limit, truncate=truncate)
    if target_cut is not None:
        meta["target_truncated_from"] = target_cut
    check_ids(ids, int(config.vocab_size), name, "target")
    return ids, target_text


def _speech_input_meta(inp: SpeechInput, audio: Any, name: str,
                       positions: int) -> AudioInput:
    """The ``meta["input"]`` of a speech trace whose encoder has ``positions`` frames."""
    real = min(positions, math.ceil(inp.seconds / inp.frame_seconds - 1e-9))
    info: AudioInput = {
        "kind": "audio", "sample_rate": SAMPLE_RATE,
        "seconds": round(inp.seconds, 6), "frame_seconds": inp.frame_seconds,
        "path": "" if isinstance(audio, np.ndarray) else Path(audio).name,
        "positions": positions, "real_positions": real, "preprocess": inp.how}
    if inp.window is not None:
        info["window_seconds"] = inp.window
        info["padding"] = (
            f"{name} pads every input to its {inp.window:g} s window and refuses a shorter "
            f"one, so all its positions are kept; the first {real} hold the sound")
    return info


_CROSS = re.compile(r"(^|\.)(encoder_attn|crossattention|cross_attn)(\.|$)")


def _speech_stacks(cap: Capture, name: str, times: list[str], labels: list[str],
                   ids: list[int]) -> dict[str, AttentionTrace]:
    """The ``encoder``, ``decoder`` and ``cross`` stacks of a speech model's capture
    (encoder rows labelled by ``times``, decoder rows by ``labels``); refuses a missing
    stack or one whose layers differ in shape."""
    parts = {
        "encoder": _record_filter(cap, lambda n: ".encoder." in f".{n}."),
        "decoder": _record_filter(cap, lambda n: ".decoder." in f".{n}."
                                  and not _CROSS.search(n)),
        "cross": _record_filter(cap, lambda n: bool(_CROSS.search(n))),
    }
    stacks: dict[str, AttentionTrace] = {}
    for stack, sub in parts.items():
        if not sub.records:
            raise ValueError(f"{name}: no {stack} attention was recorded; refused rather "
                             "than incomplete")
        rows = times if stack == "encoder" else labels
        keys = times if stack == "cross" else None
        t = _one(sub.trace(tokens=rows, key_tokens=keys, model=name, release=True))
        if len(t.meta.get("layer_names", [])) != len(sub.records) and t.meta.get("skipped"):
            raise ValueError(f"{name}: the {stack} layers differ in shape "
                             f"({t.meta['skipped']}); refused rather than incomplete")
        stacks[stack] = _restack(t, stack, tokens=rows, key_tokens=keys,
                                 token_ids=None if stack == "encoder" else ids)
    return stacks


def trace_audio(model: Any, audio: Any, *, target: Any = None, tokenizer: Any = None,
                qkv: bool = True, context: bool = False, truncate: bool = False,
                max_new_tokens: int = MAX_NEW_TOKENS,
                max_memory: int | str | None = None) -> StackedTrace | AttentionTrace:
    """One WAV file through a speech encoder–decoder (see the module docstring), or
    through a speech encoder of :data:`AUDIO_ENCODER_FAMILIES` (wav2vec 2.0, HuBERT, ...):
    then an :class:`AttentionTrace` (stack ``"self"``) over the frames, labelled by their
    start like the encoder positions of a StackedTrace.

    Args:
        model: a loaded model or a Hugging Face module of a family in
            :data:`SPEECH_FAMILIES` (with its head, e.g.
            ``WhisperForConditionalGeneration``, or a base model such as ``WhisperModel``:
            without a target it generates through the token embedding its config ties the
            head to) or :data:`AUDIO_ENCODER_FAMILIES`.
        audio: a path to a 16 kHz mono 16-bit PCM WAV file, or its samples: a 1-D float
            array at 16 kHz, in [-1, 1].
        target: the decoder's text (tokenized with special tokens) or token ids (the start
            token is put first when missing); None: the model's greedy generation.
        tokenizer: overrides the loaded model's tokenizer.
        qkv, context: as :func:`attnlab.tracing.tracer.trace`.
        truncate: keep the first window of a longer sound (else ``ValueError``).
        max_new_tokens: at most this many generated tokens when no target is given (and no
            more than the decoder's positions hold).

    Returns:
        a :class:`StackedTrace` with stacks ``encoder``, ``decoder`` and ``cross``.
    """
    net, name, folder, info, tok = _unpack(model)
    net, family = _speech_model(net, name)
    tok = tokenizer if tokenizer is not None else tok
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    if family in AUDIO_ENCODER_FAMILIES:
        return _trace_encoder_only(net, family, name, folder, info, audio, target, qkv=qkv,
                                   context=context, max_memory=max_memory)
    config = net.config
    window = (whisper_extractor(config, folder)[0].n_samples if family == "whisper"
              else None)  # the samples Whisper hears; the others hear all of the sound
    samples, cut_from = read_audio(audio, most=window, truncate=truncate)
    inp = SpeechInput(net, family, folder, samples, name, truncate)
    meta: dict[str, Any] = {"model_info": info or {"name": name, "family": family},
                            "family": family}
    if cut_from is not None or inp.truncated_from is not None:
        meta["truncated_from_seconds"] = cut_from if cut_from is not None else (
            inp.truncated_from)
    start = start_id(net)
    limit = _decoder_limit(config)
    encoder = net.get_encoder()
    was_training = net.training
    net.eval()
    try:
        ids, target_text = _speech_target_ids(net, encoder, name, tok, inp, target,
                                              start=start, limit=limit,
                                              max_new_tokens=max_new_tokens,
                                              truncate=truncate, meta=meta)
        if max_memory is not None:  # the encoder's positions dominate what the trace keeps
            from attnlab.tracing.budget import check_trace_budget

            frames = math.ceil((inp.window or inp.seconds) / inp.frame_seconds - 1e-9)
            check_trace_budget(net, frames + len(ids), max_memory, what="audio",
                               keep_weights=not qkv, keep_context=context)
        with capture(net, qkv=qkv, context=context) as cap:
            _run(getattr(net, "model", net), name, f"its audio and {len(ids)} decoder tokens",
                 **inp.kwargs, decoder_input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        net.train(was_training)
    enc = [r for r in cap.records if ".encoder." in f".{r.name}."]
    if not enc:
        raise ValueError(f"{name}: no encoder attention was recorded; refused rather than "
                         "incomplete")
    positions = enc[0].dims[1]
    meta["input"] = _speech_input_meta(inp, audio, name, positions)
    stacks = _speech_stacks(cap, name, time_labels(positions, inp.frame_seconds),
                            id_labels(tok, ids), ids)
    cap.records = []
    return StackedTrace(stacks, model=name, text=None, target=target_text or None, meta=meta)


# -- dispatch ---------------------------------------------------------------------------------


def trace_media(model: Any, text_or_token_ids: Any = None, *, image: Any = None,
                audio: Any = None, target: Any = None, tokenizer: Any = None, qkv: bool = True,
                context: bool = False, truncate: bool = False,
                max_memory: int | str | None = None,
                max_new_tokens: int = MAX_NEW_TOKENS) -> AttentionTrace | StackedTrace:
    """What :func:`attnlab.tracing.tracer.trace` does with ``image=`` or ``audio=``."""
    if image is not None and audio is not None:
        raise ValueError("give image= or audio=, not both")
    if text_or_token_ids is not None:
        kind = "image" if image is not None else "audio"
        raise ValueError(f"give text_or_token_ids or {kind}=, not both (a speech model's "
                         "text is target=)")
    if image is not None:
        if target is not None:
            raise ValueError("target= is for encoder–decoder and speech models, not image=")
        return trace_image(model, image, qkv=qkv, context=context, max_memory=max_memory)
    return trace_audio(model, audio, target=target, tokenizer=tokenizer, qkv=qkv,
                       context=context, truncate=truncate, max_new_tokens=max_new_tokens,
                       max_memory=max_memory)


# the names tracing.support and tracing.tiny use
_SpeechInput, _quiet = SpeechInput, quiet
