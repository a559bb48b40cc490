"""Input files of a trace, read and checked: images (any format Pillow reads) and 16 kHz
mono 16-bit PCM WAV files, each refused in one line naming the argument when it is not what
a model can read.

Images: the path is checked, the declared size is read before any pixel is decoded (at most
:data:`MAX_IMAGE_PIXELS`), a file whose data ends early is refused, and the pixels become
8-bit RGB by a stated rule (:func:`read_image`). Sound: the WAV header is checked against the
file and the samples read a second at a time (:func:`read_wav`); a 1-D float array of
samples is checked the same way.

Depends on numpy, Pillow (imported when an image is read) and the standard library.
"""

from __future__ import annotations

import os
import struct
import warnings
import wave
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnlab._text import one_line, too_long

__all__ = ["MAX_IMAGE_PIXELS", "SAMPLE_RATE", "TRUNCATE_HINT", "WavHeader", "read_audio",
           "read_image", "read_wav", "wav_header"]

#: The only sample rate a speech trace reads (every supported speech model's).
SAMPLE_RATE = 16000
#: How a caller of the Python API (and of the command) keeps the first part of an input
#: longer than the model accepts.
TRUNCATE_HINT = "truncate=True (CLI: --truncate)"


def _path(value: Any, name: str, what: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path to {what}, got {type(value).__name__}")
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"{name} must be a path to {what}, got {str(path)!r}: "
                         f"{'a directory' if path.is_dir() else 'no such file'}")
    return path


#: The largest image attnlab reads, in pixels (its header is checked before any pixel is
#: decoded): 64 megapixels, more than any camera's; a model sees a few hundred patches.
MAX_IMAGE_PIXELS = 64_000_000


def _to_rgb(img: Any, name: str) -> tuple[Any, str | None]:
    """``img`` as 8-bit RGB, and the rule applied when it was not 8-bit (None otherwise).

    16-bit and 32-bit integer images are scaled by their range (65,535 → 255, not clipped);
    float images (mode ``F``) must hold values in [0, 1], scaled to 0–255 (else refused);
    palette, alpha, grayscale and CMYK images are converted as Pillow does (alpha dropped).
    """
    from PIL import Image

    mode = img.mode
    if mode.startswith("I;16") or mode == "I":
        a = np.asarray(img, dtype=np.float64)
        top = 65535.0 if mode.startswith("I;16") or a.max(initial=0) <= 65535 else a.max()
        if a.min(initial=0) < 0:
            raise ValueError(f"{name} has negative {mode} pixel values (min {a.min():g}); "
                             "attnlab reads integer images of 0..65535")
        out = np.rint(a * (255.0 / top)).astype(np.uint8)
        return Image.fromarray(out, "L").convert("RGB"), f"{mode}: scaled 0–{top:g} to 0–255"
    if mode == "F":
        a = np.asarray(img, dtype=np.float64)
        if not np.isfinite(a).all() or a.min(initial=0) < 0 or a.max(initial=0) > 1:
            raise ValueError(f"{name} is a float image (mode F) with values in "
                             f"[{np.nanmin(a):g}, {np.nanmax(a):g}]; attnlab reads float "
                             "images of values in [0, 1]")
        out = np.rint(a * 255.0).astype(np.uint8)
        return Image.fromarray(out, "L").convert("RGB"), "F: scaled [0, 1] to 0–255"
    return img.convert("RGB"), None


_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by colour type


def _png_data_missing(path: Path) -> str | None:
    """Why a (non-interlaced) PNG file's pixel data is short of what its header declares,
    or None when it is whole (or not a PNG, or interlaced). Decompressed in pieces and
    counted, never held: memory stays that of one piece."""
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return None
        expected = None
        inflate, got = zlib.decompressobj(), 0
        while True:
            head = f.read(8)
            if len(head) < 8:
                break
            length, kind = struct.unpack(">I4s", head)
            data = f.read(length)
            f.read(4)  # the CRC (Pillow checks it)
            if kind == b"IHDR" and len(data) >= 13:
                w, h, depth, colour, _c, _f, interlace = struct.unpack(">IIBBBBB", data[:13])
                if interlace or colour not in _PNG_CHANNELS:
                    return None
                expected = h * (1 + -(-w * _PNG_CHANNELS[colour] * depth // 8))
            elif kind == b"IDAT" and expected is not None:
                buf = data
                while buf and got <= expected:
                    got += len(inflate.decompress(buf, 1 << 20))
                    buf = inflate.unconsumed_tail
            elif kind == b"IEND":
                break
    if expected is None or got >= expected:
        return None
    return (f"its pixel data ends early ({got:,} of the {expected:,} bytes its header "
            "declares): the file is truncated")


def _undecodable(name: str, path: Path, exc: BaseException) -> str:
    """Why Pillow could not decode a file it identified, as one line naming ``name``."""
    why = one_line(exc)
    kind = path.suffix.lstrip(".").upper() or "image"
    if isinstance(exc, zlib.error):  # attnlab's own count of a PNG's pixel data
        return f"{name} {path.name!r}: its compressed pixel data is damaged ({why})"
    if "truncated" in why.lower() or isinstance(exc, (EOFError, struct.error)):
        return (f"{name} {path.name!r}: its data ends early ({kind}: {why}): the file is "
                "truncated")
    if isinstance(exc, PermissionError) or not os.access(path, os.R_OK):
        return f"{name} {path.name!r}: the file cannot be read ({why})"
    return (f"{name} {path.name!r}: Pillow cannot decode its {kind} data ({why}): the file "
            "is truncated or damaged")


def read_image(image: Any, name: str = "image") -> Any:
    """``image`` (a path to any file Pillow reads, PNG and JPEG included, or a PIL image) as
    an RGB PIL image, turned upright by its EXIF orientation.

    Its declared size is checked before any pixel is decoded (at most
    :data:`MAX_IMAGE_PIXELS`); a file whose data ends early is refused; 16-bit, 32-bit and
    float images are scaled to 8 bits by :func:`_to_rgb`'s rule, which is recorded in the
    returned image's ``info["attnlab_conversion"]`` (and so in the trace's
    ``meta["input"]["conversion"]``). Raises ``TypeError`` for another kind of value and
    ``ValueError`` naming ``name`` for a missing, unreadable, truncated or oversized file.
    """
    from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

    if isinstance(image, Image.Image):
        img = image
    else:
        if not isinstance(image, (str, os.PathLike)):
            raise TypeError(f"{name} must be a path to an image file or a PIL image, got "
                            f"{type(image).__name__}")
        path = _path(image, name, "an image file (PNG, JPEG, ...)")
        try:
            with warnings.catch_warnings():  # the size is checked below, by attnlab's limit
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                opened = Image.open(path)
            with opened:
                w, h = opened.size
                if w * h > MAX_IMAGE_PIXELS:
                    raise ValueError(
                        f"{name} {path.name!r} declares {w}x{h} pixels ({w * h:,}); attnlab "
                        f"reads images of at most {MAX_IMAGE_PIXELS:,} pixels (resize it)")
                if ImageFile.LOAD_TRUNCATED_IMAGES:  # another library's setting: not ours
                    raise ValueError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set: attnlab "
                                     "will not read images whose data may be missing")
                short = _png_data_missing(path) if opened.format == "PNG" else None
                if short is not None:
                    raise ValueError(f"{name} {path.name!r}: {short}")
                img = ImageOps.exif_transpose(opened)
                img.load()
        except Image.DecompressionBombError as exc:  # far past the limit: Pillow's refusal
            raise ValueError(f"{name} {path.name!r}: attnlab reads images of at most "
                             f"{MAX_IMAGE_PIXELS:,} pixels (resize it); Pillow: {exc}") from None
        except UnidentifiedImageError as exc:
            raise ValueError(f"{name} must be an image file Pillow can read (PNG, JPEG, ...), "
                             f"got {path.name!r}: {one_line(exc)}") from None
        except (OSError, SyntaxError, struct.error, EOFError, zlib.error) as exc:
            raise ValueError(_undecodable(name, path, exc)) from None
    if img.width < 1 or img.height < 1:
        raise ValueError(f"{name} is empty ({img.width}x{img.height} pixels)")
    rgb, rule = _to_rgb(img, name)
    if rule is not None:
        rgb.info["attnlab_conversion"] = rule
    return rgb


@dataclass(frozen=True)
class WavHeader:
    """What a WAV file's header says, checked against the file: nothing of its samples read."""

    path: Path
    frames: int
    rate: int

    @property
    def seconds(self) -> float:
        return self.frames / self.rate


def _want(name: str) -> str:
    return f"{name} must be a {SAMPLE_RATE // 1000} kHz mono 16-bit PCM WAV file"


def wav_header(audio: Any, name: str = "audio") -> WavHeader:
    """The header of a 16 kHz mono 16-bit PCM WAV file, checked, reading no sample.

    The frame count it declares is checked against the file's size (a header may claim
    hours for a file of a second); another rate, more than one channel, other samples than
    16-bit, a file that is not a WAV (random bytes, a header cut short, an empty file), a
    directory or an unreadable file raise ``ValueError`` naming ``name``, what is expected
    and what the file holds.
    """
    path = _path(audio, name, "a 16 kHz mono 16-bit PCM WAV file")
    want = _want(name)
    try:
        size = path.stat().st_size
        with wave.open(str(path), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            declared = w.getnframes()
    except RuntimeError:  # the standard library's wave, seeking past a chunk's end
        raise ValueError(f"{want}, got {path.name!r}: not a PCM WAV file (a chunk runs past "
                         "the end of the file)") from None
    except (wave.Error, EOFError, struct.error) as exc:
        raise ValueError(f"{want}, got {path.name!r}: not a PCM WAV file "
                         f"({one_line(exc)})") from None
    except OSError as exc:
        raise ValueError(f"{want}, got {path.name!r}: it cannot be read "
                         f"({one_line(exc)})") from None
    if declared * channels * width > size:
        raise ValueError(
            f"{want}, got {path.name!r} whose header declares {declared:,} frames "
            f"({declared / max(rate, 1):,.1f} s, {declared * channels * width:,} "
            f"bytes) in a file of {size:,} bytes: the file is truncated or its header "
            "is wrong")
    problems = []
    if rate != SAMPLE_RATE:
        problems.append(f"{rate} Hz")
    if channels != 1:
        problems.append(f"{channels} channels")
    if width != 2:
        problems.append(f"{8 * width}-bit samples")
    if problems:
        raise ValueError(f"{want}, got {path.name!r} with {', '.join(problems)}; convert it, "
                         "e.g. ffmpeg -i IN -ar 16000 -ac 1 -c:a pcm_s16le OUT.wav")
    if declared == 0:
        raise ValueError(f"{want} holding some sound, got {path.name!r} with no samples")
    return WavHeader(path, declared, rate)


def read_wav(audio: Any, name: str = "audio", *, max_frames: int | None = None
             ) -> np.ndarray:
    """The samples of a 16 kHz mono 16-bit PCM WAV file as float32 in [-1, 1): all of
    them, or the first ``max_frames``; the rest of the file is never read.

    The header is checked first (:func:`wav_header`), then the samples are read a second
    at a time: memory follows what is read, not what the file claims. A file that holds
    fewer frames than its header declares raises ``ValueError`` naming ``name``.
    """
    head = wav_header(audio, name)
    wanted = head.frames if max_frames is None else min(head.frames, max(0, int(max_frames)))
    parts, got = [], 0
    try:
        with wave.open(str(head.path), "rb") as w:
            while got < wanted:
                chunk = w.readframes(min(head.rate, wanted - got))
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk) // 2
    except (wave.Error, EOFError, struct.error, OSError, RuntimeError) as exc:
        raise ValueError(f"{_want(name)}, got {head.path.name!r}: its samples cannot be read "
                         f"({one_line(exc)})") from None
    if got < wanted:
        raise ValueError(f"{_want(name)}, got {head.path.name!r} whose header declares "
                         f"{head.frames:,} frames but which holds {got:,}: the file is "
                         "truncated or its header is wrong")
    samples = np.frombuffer(b"".join(parts), dtype="<i2").astype(np.float32) / 32768.0
    if samples.size == 0:
        raise ValueError(f"{_want(name)} holding some sound, got {head.path.name!r} with no "
                         "samples")
    return samples


def read_audio(audio: Any, name: str = "audio", *, most: int | None = None,
               truncate: bool = False) -> tuple[np.ndarray, float | None]:
    """The samples a model hears of ``audio`` (a path to a WAV file, :func:`read_wav`, or a
    1-D float array of samples at 16 kHz in [-1, 1]), and the seconds it lasted when it was
    cut (None when it was not).

    ``most``: the most samples the model hears (None: no limit). A longer sound is refused
    from its header alone (``ValueError`` naming ``name``, its duration and the most
    accepted) unless ``truncate``: then only its first ``most`` samples are read.
    """
    if isinstance(audio, np.ndarray):
        samples = _checked_array(audio, name)
        total = samples.size
    elif isinstance(audio, (str, os.PathLike)):
        samples, total = None, wav_header(audio, name).frames
    else:
        raise TypeError(f"{name} must be a path to a 16 kHz mono 16-bit PCM WAV file or a "
                        f"1-D float array of samples, got {type(audio).__name__}")
    cut = most is not None and total > most
    if cut and not truncate and most is not None:  # (cut: there is a most)
        raise ValueError(too_long(name, f"{total / SAMPLE_RATE:,.2f}",
                                  f"{most / SAMPLE_RATE:g} s", "s", flag=TRUNCATE_HINT))
    if samples is None:
        samples = read_wav(audio, name, max_frames=most if cut else None)
    elif cut:
        samples = samples[:most]
    return samples, (round(total / SAMPLE_RATE, 4) if cut else None)


def _checked_array(audio: np.ndarray, name: str) -> np.ndarray:
    if audio.ndim != 1 or audio.dtype.kind != "f" or audio.size == 0:
        raise ValueError(f"{name} as an array must be 1-D float samples at {SAMPLE_RATE} Hz, "
                         f"got dtype {audio.dtype} shape {audio.shape}")
    if not np.isfinite(audio).all() or np.abs(audio).max() > 1.0:
        raise ValueError(f"{name} as an array must hold finite samples in [-1, 1], got values "
                         f"in [{np.nanmin(audio):.3g}, {np.nanmax(audio):.3g}]")
    return audio.astype(np.float32)
