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

``trace(model, audio=PATH, target=None)`` runs one WAV file through a speech encoder–decoder
(Whisper, Moonshine, Speech2Text: :data:`SPEECH_FAMILIES`) or a speech encoder without a
decoder (:data:`AUDIO_ENCODER_FAMILIES`): :mod:`attnlab.tracing.media_audio` traces sounds,
and says how their positions are labelled; :func:`trace_audio` and the families are
importable from here too.

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
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from attnlab.tracing._media_parts import _family, _one, _restack, _run, _unpack
from attnlab.tracing._media_records import ImageInput
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.capture import capture
from attnlab.tracing.inputs import (  # noqa: F401 (MAX_IMAGE_PIXELS: importable here too)
    MAX_IMAGE_PIXELS,
    SAMPLE_RATE,
    read_image,
    read_wav,
)
from attnlab.tracing.media_audio import (  # noqa: F401 (tracing.support reads the private ones)
    _FEATURE_ENCODERS,
    AUDIO_ENCODER_FAMILIES,
    MAX_NEW_TOKENS,
    SPEECH_FAMILIES,
    _speech_model,
    time_labels,
    trace_audio,
)
from attnlab.tracing.preprocess import (  # noqa: F401 (the ImageNet statistics: here too)
    IMAGENET_MEAN,
    IMAGENET_STD,
    SpeechInput,
    image_inputs,
    pair,
    quiet,
)
from attnlab.tracing.stacks import StackedTrace

__all__ = ["AUDIO_ENCODER_FAMILIES", "IMAGENET_MEAN", "IMAGENET_STD", "REFUSED_FAMILIES",
           "SAMPLE_RATE", "SPEECH_FAMILIES", "VISION_FAMILIES", "image_inputs", "read_image",
           "read_wav", "time_labels", "trace_audio", "trace_image", "trace_media"]


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
