"""Sound for the report's speech cases: a chirp made here, a sentence spoken by espeak-ng
and resampled to 16 kHz with numpy's FFT, written as mono 16-bit WAV files.

>>> x = resample(chirp(0.05, rate=22050), 22050, SAMPLE_RATE)
>>> x.shape
(800,)
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from attnlab._errors import Error, check_int
from attnlab.tracing.inputs import SAMPLE_RATE

__all__ = ["SAMPLE_RATE", "SpeechUnavailableError", "chirp", "resample", "speak", "write_wav"]


class SpeechUnavailableError(Error, RuntimeError):
    """What the real speech case needs (espeak-ng, the model package) is not installed;
    the message says how to install it."""


def chirp(seconds: float = 1.0, f0: float = 200.0, f1: float = 3000.0,
          rate: int = SAMPLE_RATE) -> np.ndarray:
    """A linear chirp from ``f0`` to ``f1`` Hz over ``seconds``, amplitude 0.5, float64.

    >>> x = chirp(0.01)
    >>> x.shape, round(float(abs(x).max()), 2) <= 0.5
    ((160,), True)
    """
    t = np.arange(int(round(seconds * rate))) / rate
    return 0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t ** 2))


def write_wav(path: str | Path, samples: np.ndarray, rate: int = SAMPLE_RATE) -> Path:
    """``samples`` in [-1, 1] as a mono 16-bit PCM WAV file at ``rate`` (atomically)."""
    from attnlab._io import atomic_open

    pcm = (np.clip(samples, -1, 1) * 32767).round().astype("<i2").tobytes()
    path = Path(path)
    with atomic_open(path, "wb") as f, wave.open(f, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return path



def resample(x: np.ndarray, rate_from: int, rate_to: int) -> np.ndarray:
    """``x`` (1-D, sampled at ``rate_from`` Hz) at ``rate_to`` Hz, band-limited, with numpy's
    FFT: the real spectrum is cut (or zero-padded) to the new length's bins and inverted at
    that length (the method of ``scipy.signal.resample``), so that nothing at or above the
    new Nyquist frequency folds back as an alias. The signal is treated as periodic, which
    holds for speech that starts and ends in silence.

    >>> t = np.arange(22050) / 22050
    >>> y = resample(np.sin(2 * np.pi * 440 * t), 22050, 16000)
    >>> y.shape, bool(np.abs(y - np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).max()
    ...                    < 1e-6)
    ((16000,), True)
    """
    for name, r in (("rate_from", rate_from), ("rate_to", rate_to)):
        check_int(name, r, minimum=1)  # (in Hz)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"x must be 1-D samples, got shape {x.shape}")
    n = int(round(x.size * rate_to / rate_from))
    spec = np.fft.rfft(x)
    keep = n // 2 + 1
    out = np.zeros(keep, dtype=complex)
    m = min(keep, spec.size)
    out[:m] = spec[:m]
    if n % 2 == 0 and n < x.size:  # a tone at exactly the new Nyquist frequency is ambiguous
        out[-1] = 0
    return np.fft.irfft(out, n) * (n / x.size)


def _wav_bytes(data: bytes) -> tuple[int, np.ndarray]:
    """(sample rate, float64 samples) of mono 16-bit PCM WAV bytes; espeak-ng writing to a
    pipe leaves the sizes in the header unset, so the data chunk runs to the end."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("espeak-ng did not write a WAV file")
    at, rate, fmt_ok = 12, 0, False
    while at + 8 <= len(data):
        kind, size = data[at:at + 4], int.from_bytes(data[at + 4:at + 8], "little")
        body = data[at + 8:]
        if kind == b"fmt ":
            channels = int.from_bytes(body[2:4], "little")
            rate = int.from_bytes(body[4:8], "little")
            bits = int.from_bytes(body[14:16], "little")
            fmt_ok = channels == 1 and bits == 16
        elif kind == b"data":
            if not fmt_ok:
                raise ValueError("espeak-ng wrote a WAV file that is not mono 16-bit PCM")
            pcm = body[:min(size, len(body)) // 2 * 2]
            return rate, np.frombuffer(pcm, "<i2").astype(np.float64) / 32768.0
        at += 8 + size + (size & 1)
    raise ValueError("espeak-ng wrote a WAV file without a data chunk")


def speak(text: str, path: str | Path) -> tuple[Path, int]:
    """``text`` spoken by espeak-ng (Debian's ``espeak-ng``, its default English voice),
    resampled from espeak-ng's rate (22,050 Hz) to 16 kHz with :func:`resample` and written
    to ``path`` as a 16 kHz mono 16-bit WAV file. Returns (the path, espeak-ng's rate).

    Raises :class:`SpeechUnavailableError` with the install line when espeak-ng is missing.
    """
    import shutil
    import subprocess

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty str, got {text!r}")
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SpeechUnavailableError(
            "espeak-ng is not installed; install it with: apt-get install espeak-ng   (or: "
            "make setup)")
    run = subprocess.run([exe, "--stdout", text], capture_output=True, timeout=60)
    if run.returncode != 0:
        raise SpeechUnavailableError(f"espeak-ng failed ({run.returncode}): "
                                     f"{run.stderr.decode(errors='replace').strip()[:200]}")
    rate, x = _wav_bytes(run.stdout)
    y = resample(x, rate, SAMPLE_RATE)
    peak = float(np.abs(y).max())
    if peak > 1.0:  # the band limit can overshoot a full-scale sample by a little
        y = y / peak
    return write_wav(path, y), rate
