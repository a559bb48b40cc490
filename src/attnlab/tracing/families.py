"""Which kind each Hugging Face architecture family of the installed transformers is.

Every family (model type) with a base or causal-LM model, from the auto mappings
(``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` and ``MODEL_MAPPING_NAMES``), sorted by kind with the
task mappings: ``decoder``, ``encoder``, ``encoder-decoder``, ``speech``, ``vision``,
``multimodal``, ``time series`` or ``other``. The support matrix
(:mod:`attnlab.tracing.support`) checks some kinds; the tiny models
(:mod:`attnlab.tracing.tiny`) are built by kind.

>>> dict(families())["llama"], dict(families())["t5"]
('decoder', 'encoder-decoder')
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterable
from typing import Any

__all__ = ["TEXT_KINDS", "families", "mappings", "text_families"]

#: The kinds of text families: checked by the support matrix with token ids.
TEXT_KINDS = ("decoder", "encoder", "encoder-decoder")

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


def mappings() -> Any:
    """transformers' auto model mappings (offline); ``ValueError`` saying how to install
    transformers when it is missing."""
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
    model, and its kind: ``decoder``, ``encoder``, ``encoder-decoder``, ``speech``,
    ``vision``, ``multimodal``, ``time series`` or ``other``, sorted. A sequence-to-sequence
    family whose config is not an encoder–decoder one (a speech or audio language model)
    counts as speech or multimodal."""
    return list(_families())


@functools.lru_cache(maxsize=1)
def _families() -> tuple[tuple[str, str], ...]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    auto = mappings()
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
    """The text families: decoders, encoders and encoder–decoders (:data:`TEXT_KINDS`), the
    ones the support matrix checks with token ids."""
    return [n for n, k in families() if k in TEXT_KINDS]

