"""The records :mod:`attnlab.tracing.media` writes into a trace's ``meta``: what the model
said of itself (:data:`ModelInfo`) and the input as the model saw it (``meta["input"]``:
:class:`ImageInput` for an image, :class:`AudioInput` for a sound)."""

from __future__ import annotations

from typing import Literal, TypedDict

__all__ = ["AudioInput", "ImageInput", "ModelInfo", "Scalar"]

#: A value of :data:`ModelInfo`.
Scalar = str | int | float | bool | None
#: ``meta["model_info"]``: the scalar fields of a loaded model's ``describe()`` (its name,
#: kind, sizes, ...); empty for a bare module, whose trace names it and its family instead.
ModelInfo = dict[str, Scalar]


class _Image(TypedDict):
    """The fields every :class:`ImageInput` has."""

    kind: Literal["image"]
    #: [rows, columns] of patches.
    grid: list[int]
    #: How many tokens come before the patches (``[CLS]``, ``[DIST]``, registers).
    prefix: int
    #: The patch's side in pixels, or [height, width] when they differ.
    patch_size: int | list[int]
    #: [height, width] in pixels of the image the model saw.
    image_size: list[int]
    #: The image as the model saw it (pixel values un-normalised to 0–255), a base64 PNG.
    image_png: str
    #: The file's name ("" for an image given in memory).
    path: str
    #: How the image was prepared (the folder's image processor, or resized and normalised).
    preprocess: str


class ImageInput(_Image, total=False):
    """``meta["input"]`` of an image's trace (:func:`attnlab.tracing.media.trace_image`)."""

    #: The rule that brought an image of more than 8 bits per channel to 8-bit RGB.
    conversion: str


class _Audio(TypedDict):
    """The fields every :class:`AudioInput` has."""

    kind: Literal["audio"]
    sample_rate: int
    #: The sound's length, in seconds (rounded to 6 digits).
    seconds: float
    #: How long each encoder position (or patch column) lasts, in seconds.
    frame_seconds: float
    #: The file's name ("" for samples given in memory).
    path: str
    #: The encoder's positions (tokens, for the spectrogram's patches).
    positions: int
    #: The positions that hold the sound (the others hear padding).
    real_positions: int
    #: How the input was prepared (the folder's feature extractor, or the family's default).
    preprocess: str


class AudioInput(_Audio, total=False):
    """``meta["input"]`` of a sound's trace (:func:`attnlab.tracing.media.trace_audio`):
    the window and padding of a model that hears a fixed window (Whisper, the Audio
    Spectrogram Transformer), and the grid of the spectrogram's patches."""

    #: [frequency bands, columns] of spectrogram patches.
    grid: list[int]
    #: How many tokens come before the patches.
    prefix: int
    #: The patch's side, in spectrogram bins and frames.
    patch_size: int
    #: The window the model hears, in seconds.
    window_seconds: float
    #: How the model pads or cuts its input to the window, in words.
    padding: str
