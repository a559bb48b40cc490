"""Bad input files for image= and audio= (attnlab.tracing.inputs): each is one line naming
the argument, never a traceback from Pillow or wave; a sound longer than the model hears is
refused from its header, or only its first window is read."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import wave
from pathlib import Path

import numpy as np
import pytest

from attnlab.tracing.inputs import (
    SAMPLE_RATE,
    read_audio,
    read_image,
    read_wav,
    wav_header,
)
from limits import SLOW_CHILD_S

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageFile  # noqa: E402


def _wav(path: Path, seconds: float = 0.5) -> Path:
    n = int(seconds * SAMPLE_RATE)
    x = 0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / SAMPLE_RATE)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes((x * 32767).astype("<i2").tobytes())
    return path


def _image_bytes(fmt: str) -> bytes:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def _one_line_naming(exc: pytest.ExceptionInfo, name: str) -> str:
    """The refusal's text, checked: one line, naming the argument, no chained traceback."""
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(name), msg
    e = exc.value
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__), msg
    return msg


def _bad_files(tmp_path: Path, good: bytes, suffix: str) -> dict[str, Path]:
    rng = np.random.default_rng(7)
    out = {"random bytes": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
           "header only": good[:44], "zero bytes": b"", "first half": good[: len(good) // 2]}
    paths = {}
    for what, data in out.items():
        p = tmp_path / f"{what.replace(' ', '_')}{suffix}"
        p.write_bytes(data)
        paths[what] = p
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    paths["a directory"] = folder
    return paths


@pytest.mark.parametrize("what", ["random bytes", "header only", "zero bytes", "first half",
                                  "a directory"])
def test_bad_wav_files_are_one_line_naming_the_argument(tmp_path, what):
    good = _wav(tmp_path / "good.wav").read_bytes()
    path = _bad_files(tmp_path, good, ".wav")[what]
    for read in (read_wav, wav_header, lambda p: read_audio(p, most=100, truncate=True)):
        with pytest.raises(ValueError) as exc:
            read(path)
        msg = _one_line_naming(exc, "audio")
        assert path.name in msg and ("PCM WAV" in msg or "directory" in msg), msg
    with pytest.raises(ValueError) as exc:
        read_wav(path, "--audio")
    _one_line_naming(exc, "--audio")


def test_wav_headers_with_damaged_fields_are_refused_in_one_line(tmp_path):
    """Random bytes changed in a real header: every outcome is the file read or a one-line
    ValueError (wave's own RuntimeError and struct errors included)."""
    good = bytearray(_wav(tmp_path / "good.wav", seconds=0.05).read_bytes())
    rng = np.random.default_rng(3)
    refused = 0
    for i in range(200):
        raw = bytearray(good)
        for _ in range(3):
            raw[int(rng.integers(0, 44))] = int(rng.integers(0, 256))
        path = tmp_path / f"d{i}.wav"
        path.write_bytes(bytes(raw))
        try:
            read_wav(path)
        except ValueError as err:
            assert "\n" not in str(err) and str(err).startswith("audio"), str(err)
            refused += 1
    assert refused > 50  # most damaged headers are refused, none with another exception


@pytest.mark.parametrize("what", ["random bytes", "header only", "zero bytes", "first half",
                                  "a directory"])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP"])
def test_bad_image_files_are_one_line_naming_the_argument(tmp_path, fmt, what):
    path = _bad_files(tmp_path, _image_bytes(fmt), f".{fmt.lower()}")[what]
    with pytest.raises(ValueError) as exc:
        read_image(path)
    msg = _one_line_naming(exc, "image")
    assert path.name in msg, msg


@pytest.mark.parametrize("fmt", ["JPEG", "GIF", "WEBP", "BMP", "TIFF"])
def test_truncated_images_of_every_format_are_refused_not_completed(tmp_path, fmt):
    """A file whose data ends early is refused naming the argument, never decoded with its
    missing part filled in; Pillow's LOAD_TRUNCATED_IMAGES stays off."""
    if fmt == "WEBP":
        from PIL import features

        if not features.check("webp"):
            pytest.skip("this Pillow reads no WebP")
    data = _image_bytes(fmt)
    whole = tmp_path / f"whole.{fmt.lower()}"
    whole.write_bytes(data)
    assert read_image(whole).size == (64, 48)
    for keep in (0.5, 0.9):
        path = tmp_path / f"cut{int(keep * 100)}.{fmt.lower()}"
        path.write_bytes(data[: int(len(data) * keep)])
        with pytest.raises(ValueError) as exc:
            read_image(path)
        msg = _one_line_naming(exc, "image")
        assert repr(path.name) in msg and "truncated" in msg, msg
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_a_damaged_png_is_one_line(tmp_path):
    data = bytearray(_image_bytes("PNG"))
    at = data.index(b"IDAT") + 40
    data[at:at + 8] = bytes(8)
    path = tmp_path / "damaged.png"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as exc:
        read_image(path)
    _one_line_naming(exc, "image")


def test_audio_longer_than_the_model_hears_is_refused_from_its_header(tmp_path):
    wav = _wav(tmp_path / "one.wav", seconds=1.0)
    with pytest.raises(ValueError) as exc:
        read_audio(wav, most=SAMPLE_RATE // 2)
    msg = _one_line_naming(exc, "audio")
    assert "1.00 s" in msg and "at most 0.5 s" in msg and "truncate=True" in msg, msg
    cut, was = read_audio(wav, most=SAMPLE_RATE // 2, truncate=True)
    assert cut.shape == (SAMPLE_RATE // 2,) and was == 1.0
    np.testing.assert_array_equal(cut, read_wav(wav)[: SAMPLE_RATE // 2])
    whole, was = read_audio(wav, most=SAMPLE_RATE)
    assert whole.shape == (SAMPLE_RATE,) and was is None
    arr, was = read_audio(read_wav(wav), most=4000, truncate=True)
    assert arr.shape == (4000,) and was == 1.0
    with pytest.raises(ValueError, match=r"audio: 1.00 s, the model accepts at most 0.25 s"):
        read_audio(read_wav(wav), most=4000)


def _two_hours(path: Path) -> Path:
    """A 16 kHz mono 16-bit WAV of two hours of silence: its header says so and its data is
    there (written sparsely: 230 MB long, next to nothing on disk)."""
    import struct

    frames = 2 * 3600 * SAMPLE_RATE
    data = 2 * frames
    header = (b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt "
              + struct.pack("<IHHIIHH", 16, 1, 1, SAMPLE_RATE, 2 * SAMPLE_RATE, 2, 16)
              + b"data" + struct.pack("<I", data))
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + data)  # the samples: silence, not written block by block
    return path


def test_two_hours_of_audio_are_refused_or_cut_without_reading_the_file(tmp_path):
    """Whisper hears its window (1 s for this tiny one): two hours are refused from the
    header without truncate, and with truncate only the window is read: the process's peak
    memory grows by far less than the file's 230 MB."""
    pytest.importorskip("transformers")
    wav = _two_hours(tmp_path / "two_hours.wav")
    size = wav.stat().st_size
    assert size > 230_000_000 and wav_header(wav).seconds == 7200.0
    code = textwrap.dedent(f"""
        import resource, warnings
        import torch, transformers
        from attnlab.tracing import trace
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
            vocab_size=96, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
            decoder_ffn_dim=48, num_mel_bins=80, max_source_positions=50,
            max_target_positions=32, decoder_start_token_id=1, eos_token_id=2,
            pad_token_id=0, bos_token_id=1, attn_implementation="eager")).eval()
        import numpy as np
        trace(model, audio=np.zeros(16000, np.float32), target=[3])  # warm: imports, caches
        def peak():
            from attnlab._proc import peak_rss_bytes  # this process's own peak (VmHWM)
            return peak_rss_bytes()
        before = peak()
        try:
            trace(model, audio={str(wav)!r}, target=[3])
        except ValueError as e:
            print("refused:", e)
        refused = peak() - before
        st = trace(model, audio={str(wav)!r}, target=[3], truncate=True)
        print("cut:", st.meta["truncated_from_seconds"], st.meta["input"]["seconds"])
        print("growth:", refused, peak() - before)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=SLOW_CHILD_S)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
    assert lines["refused"].startswith("audio: 7,200.00 s, the model accepts at most 1 s"), lines
    assert "truncate=True" in lines["refused"]
    assert lines["cut"] == "7200.0 1.0", lines
    refused, cut = (int(v) for v in lines["growth"].split())
    assert refused < 20_000_000 and cut < 40_000_000 < size, (refused, cut)
