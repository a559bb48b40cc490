"""`attnlab trace` and `attnlab explore` with --image and --audio, run in-process on tiny
random model folders: the files they write hold the traces, bad input is one line naming
the argument (exit 2)."""

from __future__ import annotations

import json
import warnings
import wave
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from attnlab import cli  # noqa: E402
from attnlab.tracing.stacks import StackedTrace, load_trace  # noqa: E402


@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny-vit")
    cfg = tf.ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=32, image_size=32, patch_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tf.ViTModel(cfg).save_pretrained(d)
        tf.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny-whisper")
    cfg = tf.WhisperConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, num_mel_bins=80,
        max_source_positions=50, max_target_positions=32, decoder_start_token_id=1,
        eos_token_id=2, pad_token_id=0, bos_token_id=1)
    tf.WhisperForConditionalGeneration(cfg).save_pretrained(d)
    return d


def _png(path: Path) -> Path:
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)).save(path)
    return path


def _wav(path: Path, rate: int = 16000) -> Path:
    x = (np.sin(np.arange(rate // 2) * 0.07) * 9000).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(x.tobytes())
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_trace_image(vit_dir, tmp_path, capsys):
    out = tmp_path / "img.safetensors"
    rc, stdout, _ = _run(capsys, "trace", "--model", str(vit_dir), "--image",
                         str(_png(tmp_path / "x.png")), "--out", str(out), "--json")
    assert rc == 0
    info = json.loads(stdout)
    assert info["stacks"]["self"] == {"layers": 2, "heads": 2, "causal": False,
                                      "queries": 17, "keys": 17}
    t = load_trace(out)
    assert t.tokens[:2] == ["[CLS]", "r0c0"] and t.meta["input"]["grid"] == [4, 4]
    assert t.meta["input"]["path"] == "x.png"


def test_trace_audio(whisper_dir, tmp_path, capsys):
    out = tmp_path / "speech.safetensors"
    rc, stdout, _ = _run(capsys, "trace", "--model", str(whisper_dir), "--audio",
                         str(_wav(tmp_path / "s.wav")), "--out", str(out), "--json")
    assert rc == 0
    info = json.loads(stdout)
    assert list(info["stacks"]) == ["encoder", "decoder", "cross"]
    assert info["stacks"]["cross"]["keys"] == 50
    st = load_trace(out)
    assert isinstance(st, StackedTrace) and st.meta["target_from"] == "generated"
    assert st["encoder"].tokens[1] == "0.02s" and st.meta["input"]["real_positions"] == 25


def test_explore_image(vit_dir, tmp_path, capsys):
    out = tmp_path / "x.html"
    rc, stdout, _ = _run(capsys, "explore", "--model", str(vit_dir), "--image",
                         str(_png(tmp_path / "x.png")), "--out", str(out), "--json")
    assert rc == 0 and out.is_file()
    assert json.loads(stdout)["tokens"] == [17]


@pytest.mark.parametrize("argv, match", [
    (["--image", "{tmp}/missing.png"], "--image .*missing.png: image must be a path to an "
                                       "image file"),
    (["--audio", "{tmp}/44k.wav"], "--audio .*44k.wav: audio must be a 16 kHz mono 16-bit "
                                   "PCM WAV file, got '44k.wav' with 44100 Hz"),
])
def test_bad_media_is_one_line(whisper_dir, tmp_path, capsys, argv, match):
    _wav(tmp_path / "44k.wav", rate=44100)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc, _, err = _run(capsys, "trace", "--model", str(whisper_dir), *argv, "--out",
                      str(tmp_path / "t.safetensors"))
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and __import__("re").search(match, lines[0]), err


def test_image_on_a_speech_model(whisper_dir, tmp_path, capsys):
    rc, _, err = _run(capsys, "trace", "--model", str(whisper_dir), "--image",
                      str(_png(tmp_path / "x.png")), "--out", str(tmp_path / "t.safetensors"))
    assert rc == 2 and "image= needs a vision transformer" in err and "'whisper'" in err


def test_target_text_without_a_tokenizer_names_target(whisper_dir, tmp_path, capsys):
    rc, _, err = _run(capsys, "trace", "--model", str(whisper_dir), "--audio",
                      str(_wav(tmp_path / "s.wav")), "--target", "hello",
                      "--out", str(tmp_path / "t.safetensors"))
    assert rc == 2 and "--target text needs a tokenizer" in err, err
