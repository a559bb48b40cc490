"""A model's input prepared from an image or a sound, as the model folder's own processor
does or, without one, as the family does by default: an image's pixel values (and the
image as the model sees it), a speech encoder–decoder's features (Whisper's log-mel window,
Speech2Text's filter banks, Moonshine's waveform).

>>> pair(16, "image_size"), pair([16, 24], "image_size")
((16, 16), (16, 24))
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnlab._text import one_line, too_long
from attnlab.tracing.inputs import SAMPLE_RATE, TRUNCATE_HINT

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "SpeechInput", "encoder_features", "folder_file",
           "image_inputs", "pair", "quiet", "whisper_extractor"]

#: The ImageNet mean and standard deviation (RGB) used when a model folder has no image
#: processor of its own.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def folder_file(folder: str | None, filename: str) -> Path | None:
    if not folder:
        return None
    path = Path(folder) / filename
    return path if path.is_file() else None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence transformers' logging and Python warnings while a processor is made."""
    import transformers

    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(level)


def pair(value: Any, name: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    raise ValueError(f"the model's config.{name} must be an int or a pair, got {value!r}")


def image_inputs(tower: nn.Module, img: Any, folder: str | None
                 ) -> tuple[Tensor, np.ndarray, str]:
    """(pixel values (1, 3, H, W), the image as the model sees it (H, W, 3) uint8, how it
    was prepared) for an RGB PIL image and a vision ``tower``.

    The folder's ``preprocessor_config.json`` is used when there is one (its processor
    resizes, crops and normalises); the pixels the model sees are then un-normalised back
    to 0–255 with its mean, standard deviation and rescale factor. Otherwise the image is
    resized to the config's ``image_size`` (bilinear) and normalised with
    :data:`IMAGENET_MEAN` / :data:`IMAGENET_STD`.
    """
    from PIL import Image

    config = tower.config
    pre = folder_file(folder, "preprocessor_config.json")
    if pre is not None:
        from transformers import AutoImageProcessor

        try:
            with quiet():
                proc = AutoImageProcessor.from_pretrained(pre.parent, local_files_only=True)
                pixels = proc(images=img, return_tensors="pt")["pixel_values"].float()
        except Exception as exc:
            raise ValueError(f"{pre}: the model's image processor cannot prepare the image "
                             f"({type(exc).__name__}: {one_line(exc)})") from None
        x = pixels[0].clone()
        if getattr(proc, "do_normalize", False):
            mean = torch.tensor(_channels(proc.image_mean, x.shape[0]))[:, None, None]
            std = torch.tensor(_channels(proc.image_std, x.shape[0]))[:, None, None]
            x = x * std + mean
        if getattr(proc, "do_rescale", False):
            x = x / float(proc.rescale_factor)
        seen = x.permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).numpy()
        how = f"the model's image processor ({type(proc).__name__}, {pre.name})"
        return pixels, seen, how
    h, w = pair(getattr(config, "image_size", None), "image_size")
    resized = img.resize((w, h), Image.Resampling.BILINEAR)
    seen = np.asarray(resized, dtype=np.uint8).copy()
    x = torch.from_numpy(seen).float().div(255.0).permute(2, 0, 1)
    mean = torch.tensor(IMAGENET_MEAN)[:, None, None]
    std = torch.tensor(IMAGENET_STD)[:, None, None]
    pixels = ((x - mean) / std)[None]
    how = (f"resized to the config's image_size {h}x{w} (bilinear), ImageNet mean and "
           "standard deviation (the model folder has no preprocessor_config.json)")
    return pixels, seen, how


def _channels(values: Any, n: int) -> list[float]:
    vals = [float(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    return vals * n if len(vals) == 1 else vals


def whisper_extractor(config: Any, folder: str | None) -> tuple[Any, str]:
    from transformers import WhisperFeatureExtractor

    pre = folder_file(folder, "preprocessor_config.json")
    if pre is not None:
        try:
            with quiet():
                fe = WhisperFeatureExtractor.from_pretrained(pre.parent, local_files_only=True)
        except Exception as exc:
            raise ValueError(f"{pre}: not a usable Whisper feature extractor "
                             f"({type(exc).__name__}: {one_line(exc)})") from None
        return fe, f"the model's feature extractor ({pre.name})"
    hop = 160
    frames = 2 * int(config.max_source_positions)  # two convolutions, the second of stride 2
    seconds = frames * hop / SAMPLE_RATE
    with quiet():
        fe = WhisperFeatureExtractor(feature_size=int(config.num_mel_bins),
                                     sampling_rate=SAMPLE_RATE, hop_length=hop,
                                     chunk_length=seconds)
    fe.n_samples = frames * hop
    fe.nb_max_frames = frames
    return fe, (f"WhisperFeatureExtractor built from the config ({config.num_mel_bins} mel "
                f"bins, {seconds:g} s window; the folder has no preprocessor_config.json)")


class SpeechInput:
    """What a speech encoder–decoder reads: its encoder's input, how long one encoder
    position lasts, its window (Whisper) and how the input was prepared."""

    def __init__(self, net: Any, family: str, folder: str | None, samples: np.ndarray,
                 name: str, truncate: bool) -> None:
        config = net.config
        self.seconds = samples.size / SAMPLE_RATE
        self.window: float | None = None
        self.truncated_from: float | None = None
        if family == "whisper":
            fe, self.how = whisper_extractor(config, folder)
            self.window = fe.n_samples / SAMPLE_RATE
            if samples.size > fe.n_samples:
                if not truncate:
                    raise ValueError(too_long("audio", f"{self.seconds:,.2f}",
                                              f"{self.window:g} s", "s", flag=TRUNCATE_HINT))
                self.truncated_from = round(self.seconds, 4)
                samples = samples[:fe.n_samples]
                self.seconds = self.window
            x = fe(samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_features"]
            self.kwargs = {"input_features": x}
            self.frame_seconds = fe.hop_length * (x.shape[-1] // int(
                config.max_source_positions)) / SAMPLE_RATE
            return
        from transformers import AutoFeatureExtractor, Speech2TextFeatureExtractor

        pre = folder_file(folder, "preprocessor_config.json")
        try:
            with quiet():
                if pre is not None:
                    fe = AutoFeatureExtractor.from_pretrained(pre.parent, local_files_only=True)
                    self.how = f"the model's feature extractor ({type(fe).__name__}, {pre.name})"
                elif family == "speech_to_text":
                    fe = Speech2TextFeatureExtractor(
                        feature_size=int(config.input_feat_per_channel))
                    self.how = ("Speech2TextFeatureExtractor defaults (80 log-mel filter banks "
                                "every 10 ms; the folder has no preprocessor_config.json)")
                else:
                    fe = None
                    self.how = ("the waveform as it is (the folder has no "
                                "preprocessor_config.json)")
                if family == "speech_to_text":
                    x = fe(samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")[
                        "input_features"]
                    self.kwargs = {"input_features": x}
                    hop = int(getattr(fe, "sampling_rate", SAMPLE_RATE) * 0.01)
                    self.frame_seconds = hop * 2 ** int(config.num_conv_layers) / SAMPLE_RATE
                else:  # moonshine: the waveform, three convolutions of stride 64, 3 and 2
                    x = (torch.from_numpy(samples)[None] if fe is None else fe(
                        samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")[
                        "input_values"])
                    self.kwargs = {"input_values": x}
                    self.frame_seconds = 64 * 3 * 2 / SAMPLE_RATE
        except ValueError:
            raise
        except Exception as exc:
            raise ValueError(f"{name}: its feature extractor cannot prepare the audio "
                             f"({type(exc).__name__}: {one_line(exc)})") from None


def encoder_features(folder: str | None, default: str | None, samples: np.ndarray, name: str
                     ) -> tuple[Any, Any, str]:
    """(feature extractor, its output, how) for a speech encoder without a decoder: the
    folder's own extractor, else ``default`` (the name of a transformers extractor of filter
    banks), else the waveform normalised by ``Wav2Vec2FeatureExtractor``."""
    import transformers

    pre = folder_file(folder, "preprocessor_config.json")
    with quiet():
        if pre is not None:
            try:
                fe = transformers.AutoFeatureExtractor.from_pretrained(pre.parent,
                                                                       local_files_only=True)
            except Exception as exc:
                raise ValueError(f"{pre}: not a usable feature extractor "
                                 f"({type(exc).__name__}: {one_line(exc)})") from None
            how = f"the model's feature extractor ({type(fe).__name__}, {pre.name})"
        elif default is not None:
            fe = getattr(transformers, default)()
            how = f"{default} defaults (the folder has no preprocessor_config.json)"
        else:
            fe = transformers.Wav2Vec2FeatureExtractor(sampling_rate=SAMPLE_RATE)
            how = ("Wav2Vec2FeatureExtractor defaults (waveform normalised to zero mean and "
                   "unit variance; the folder has no preprocessor_config.json)")
        try:
            prepared = fe(samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        except Exception as exc:
            raise ValueError(f"{name}: its feature extractor cannot prepare the audio "
                             f"({type(exc).__name__}: {one_line(exc)})") from None
    return fe, prepared, how
