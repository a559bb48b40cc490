"""Images and sounds as inputs: vision transformers and Whisper traced exactly.

Every family is checked on a tiny random model against its own eager ``output_attentions``
on inputs prepared independently here (PIL resize + ImageNet normalisation; the Whisper
feature extractor), weights recomputed from q and k, labels and ``meta["input"]``.
"""

from __future__ import annotations

import base64
import io
import warnings
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from limits import CHILD_S

pytest.importorskip("transformers")
import transformers  # noqa: E402
from PIL import Image  # noqa: E402

from attnlab.core.scores import row_logsumexp  # noqa: E402
from attnlab.core.weights import shaped_weights  # noqa: E402
from attnlab.tracing import trace  # noqa: E402
from attnlab.tracing.adapters._base import UnreadableAttentionError  # noqa: E402
from attnlab.tracing.media import IMAGENET_MEAN, IMAGENET_STD, read_wav  # noqa: E402
from attnlab.tracing.stacks import StackedTrace, load_trace  # noqa: E402

transformers.logging.set_verbosity_error()

EXACT = 1e-6
RECOMPUTE = 1e-5
SIZE, PATCH = 32, 8  # a 4 x 4 grid of patches
_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            image_size=SIZE, patch_size=PATCH, initializer_range=0.2,
            attn_implementation="eager")


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _build(config_cls, model_cls, **extra):
    base = config_cls()
    kw = {k: v for k, v in _VIT.items() if hasattr(base, k) or k == "attn_implementation"}
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model_cls(config_cls(**kw, **extra)).eval()


def _png(tmp_path: Path, h: int = 40, w: int = 52, name: str = "cat.png") -> Path:
    rng = np.random.default_rng(1)
    path = tmp_path / name
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
    return path


def _imagenet_pixels(path: Path, size: int = SIZE) -> tuple[torch.Tensor, np.ndarray]:
    seen = np.asarray(Image.open(path).convert("RGB").resize((size, size),
                                                             Image.Resampling.BILINEAR))
    x = torch.from_numpy(seen.copy()).float().div(255).permute(2, 0, 1)
    mean, std = torch.tensor(IMAGENET_MEAN)[:, None, None], torch.tensor(IMAGENET_STD)[:, None,
                                                                                        None]
    return ((x - mean) / std)[None], seen


def _eager(tower, pixels):
    with torch.no_grad():
        return [a[0] for a in tower(pixel_values=pixels, output_attentions=True).attentions]


def _recompute_error(t) -> float:
    """Largest difference between the trace's weights and weights rebuilt from q and k
    alone (the log-sum-exp recomputed too) under the recorded score shapes."""
    got = t.weights
    group = t.num_heads // t.num_kv_heads
    err = 0.0
    for layer in range(t.num_layers):
        shape = t.score_shape(layer)
        lse = row_logsumexp(t.q[layer], t.k[layer], shape)
        w = shaped_weights(t.q[layer], t.k[layer].repeat_interleave(group, 0), lse, shape,
                           rows=range(t.seq_len), head=list(range(t.num_heads)),
                           lq=t.seq_len, lk=t.key_len)
        err = max(err, float((w - got[layer]).abs().max()))
    return err


def _weight_error(t, maps) -> float:
    want = torch.stack([m.float() for m in maps])
    assert tuple(t.weights.shape) == tuple(want.shape)
    return float((t.weights - want).abs().max())


# -- vision -----------------------------------------------------------------------------------

VISION = {
    "vit": (transformers.ViTConfig, transformers.ViTModel, {}, ["[CLS]"]),
    "vit_msn": (transformers.ViTMSNConfig, transformers.ViTMSNModel, {}, ["[CLS]"]),
    "deit": (transformers.DeiTConfig, transformers.DeiTModel, {}, ["[CLS]", "[DIST]"]),
    "beit": (transformers.BeitConfig, transformers.BeitModel,
             {"use_relative_position_bias": True}, ["[CLS]"]),
    "dinov2": (transformers.Dinov2Config, transformers.Dinov2Model, {}, ["[CLS]"]),
    "dinov2_with_registers": (transformers.Dinov2WithRegistersConfig,
                              transformers.Dinov2WithRegistersModel,
                              {"num_register_tokens": 3}, ["[CLS]", "[REG0]", "[REG1]", "[REG2]"]),
    "dinov3_vit": (transformers.DINOv3ViTConfig, transformers.DINOv3ViTModel,
                   {"num_register_tokens": 2}, ["[CLS]", "[REG0]", "[REG1]"]),
    "clip_vision_model": (transformers.CLIPVisionConfig, transformers.CLIPVisionModel, {},
                          ["[CLS]"]),
    "siglip_vision_model": (transformers.SiglipVisionConfig, transformers.SiglipVisionModel,
                            {}, []),
    "ijepa": (transformers.IJepaConfig, transformers.IJepaModel, {}, []),
}
PATCHES = [f"r{r}c{c}" for r in range(SIZE // PATCH) for c in range(SIZE // PATCH)]


@pytest.mark.parametrize("family", list(VISION))
def test_vision_family_exact(family, tmp_path):
    config_cls, model_cls, extra, prefix = VISION[family]
    model = _build(config_cls, model_cls, **extra)
    path = _png(tmp_path)
    t = trace(model, image=path)
    pixels, seen = _imagenet_pixels(path)
    tower = getattr(model, "vision_model", model)
    maps = _eager(tower, pixels)
    assert t.stack == "self" and t.num_layers == len(maps) == 2 and not t.causal
    assert t.tokens == prefix + PATCHES
    assert _weight_error(t, maps) <= EXACT
    assert _recompute_error(t) <= RECOMPUTE
    info = t.meta["input"]
    assert info["kind"] == "image" and info["grid"] == [4, 4] and info["prefix"] == len(prefix)
    assert info["patch_size"] == PATCH and info["image_size"] == [SIZE, SIZE]
    assert info["path"] == "cat.png" and "ImageNet" in info["preprocess"]
    png = np.asarray(Image.open(io.BytesIO(base64.b64decode(info["image_png"]))))
    assert png.shape == (SIZE, SIZE, 3) and np.array_equal(png, seen)
    assert t.meta["family"] == family


def test_vision_wrong_preparation_is_caught(tmp_path):
    """The comparison can fail: the same image normalised otherwise (mean 0.5, std 0.5, as
    ViT's own processor does) gives other weights than the trace made with ImageNet's."""
    model = _build(transformers.ViTConfig, transformers.ViTModel)
    path = _png(tmp_path)
    t = trace(model, image=path)
    _, seen = _imagenet_pixels(path)
    x = torch.from_numpy(seen.copy()).float().div(255).permute(2, 0, 1)
    wrong = ((x - 0.5) / 0.5)[None]
    assert _weight_error(t, _eager(model, wrong)) > 1e-3


def test_vision_tower_of_a_two_tower_model(tmp_path):
    config = transformers.CLIPConfig(
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                         intermediate_size=48, vocab_size=64),
        vision_config={k: v for k, v in _VIT.items() if k != "attn_implementation"},
        projection_dim=16, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.CLIPModel(config).eval()
    path = _png(tmp_path)
    t = trace(model, image=Image.open(path))
    pixels, _ = _imagenet_pixels(path)
    assert t.tokens == ["[CLS]", *PATCHES]
    assert _weight_error(t, _eager(model.vision_model, pixels)) <= EXACT


def test_vision_folder_processor_and_classifier(tmp_path):
    """A folder with preprocessor_config.json: its processor prepares the image (mean 0.5,
    std 0.5, size 32 from a larger image); the PNG is what the model saw; a classifier's
    base model is traced. Loaded through attnlab.models.load, the folder's own path."""
    from attnlab.models import load

    model = _build(transformers.ViTConfig, transformers.ViTForImageClassification)
    folder = tmp_path / "vit"
    model.save_pretrained(folder)
    proc = transformers.ViTImageProcessor(size={"height": SIZE, "width": SIZE})
    proc.save_pretrained(folder)
    model = transformers.ViTForImageClassification.from_pretrained(
        folder, attn_implementation="eager").eval()
    path = _png(tmp_path, 64, 48, name="dog.jpg.png")
    t = trace(model, image=path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded_proc = transformers.AutoImageProcessor.from_pretrained(folder)
        pixels = loaded_proc(images=Image.open(path).convert("RGB"),
                             return_tensors="pt")["pixel_values"]
    assert "image processor" in t.meta["input"]["preprocess"]
    assert _weight_error(t, _eager(model.vit, pixels)) <= EXACT
    png = np.asarray(Image.open(io.BytesIO(base64.b64decode(t.meta["input"]["image_png"]))))
    unnorm = ((pixels[0] * 0.5 + 0.5) * 255).round().clamp(0, 255).byte().permute(1, 2, 0)
    assert np.array_equal(png, unnorm.numpy())
    expect = np.asarray(Image.open(path).convert("RGB").resize((SIZE, SIZE),
                                                               Image.Resampling.BILINEAR))
    assert np.abs(png.astype(int) - expect.astype(int)).max() <= 1
    # the same folder through attnlab.models.load: AutoModel gives the base ViTModel
    loaded = load(folder)
    t2 = trace(loaded, image=path)
    assert t2.tokens == t.tokens and "image processor" in t2.meta["input"]["preprocess"]
    assert torch.allclose(t2.weights, t.weights, atol=1e-6)


def test_vision_trace_saves_and_loads(tmp_path):
    model = _build(transformers.DeiTConfig, transformers.DeiTModel)
    t = trace(model, image=_png(tmp_path))
    back = load_trace(t.save(tmp_path / "img.safetensors"))
    assert back.tokens == t.tokens and back.meta["input"] == t.meta["input"]
    assert torch.equal(back.weights, t.weights)


def test_vision_refusals(tmp_path):
    path = _png(tmp_path)
    swin = transformers.SwinModel(transformers.SwinConfig(
        embed_dim=16, depths=[2], num_heads=[2], image_size=SIZE, patch_size=4, window_size=4,
        attn_implementation="eager")).eval()
    with pytest.raises(ValueError, match="swin.*windowed attention"):
        trace(swin, image=path)
    convnext = transformers.ConvNextModel(transformers.ConvNextConfig(
        hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, image_size=SIZE)).eval()
    with pytest.raises(ValueError, match="convnext.*no attention"):
        trace(convnext, image=path)
    d2v = _build(transformers.Data2VecVisionConfig, transformers.Data2VecVisionModel)
    with pytest.raises(UnreadableAttentionError, match="Data2VecVisionSelfAttention"):
        trace(d2v, image=path)
    bert = transformers.BertModel(transformers.BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
        vocab_size=32)).eval()
    with pytest.raises(ValueError, match="image= needs a vision transformer.*'bert'"):
        trace(bert, image=path)


def test_image_argument_errors(tmp_path):
    model = _build(transformers.ViTConfig, transformers.ViTModel)
    with pytest.raises(ValueError, match="image must be a path to an image file.*no such"):
        trace(model, image=tmp_path / "missing.png")
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    with pytest.raises(ValueError, match="image must be an image file Pillow can read.*notes"):
        trace(model, image=bad)
    with pytest.raises(TypeError, match="image must be a path .* got int"):
        trace(model, image=3)
    with pytest.raises(ValueError, match="not both"):
        trace(model, "text", image=_png(tmp_path))
    with pytest.raises(TypeError, match="image= or audio="):
        trace(model)


# -- speech -----------------------------------------------------------------------------------

POSITIONS = 50  # a 1 s window: 100 mel frames, 50 encoder positions of 0.02 s


def _whisper(cls=transformers.WhisperForConditionalGeneration):
    config = transformers.WhisperConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, num_mel_bins=80,
        max_source_positions=POSITIONS, max_target_positions=32, decoder_start_token_id=1,
        eos_token_id=2, pad_token_id=0, bos_token_id=1, init_std=0.2,
        attn_implementation="eager")
    torch.manual_seed(0)
    return cls(config).eval()


def _wav(path: Path, seconds: float = 0.5, rate: int = 16000, channels: int = 1,
         width: int = 2) -> Path:
    n = int(seconds * rate)
    t = np.arange(n) / rate
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.random.default_rng(0).standard_normal(n)
    if width == 2:
        data = (x * 32767).astype("<i2")
    else:
        data = ((x + 1) * 127).astype(np.uint8)
    data = np.repeat(data[:, None], channels, axis=1)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(data.tobytes())
    return path


def _features(path: Path) -> torch.Tensor:
    fe = transformers.WhisperFeatureExtractor(feature_size=80, sampling_rate=16000,
                                              hop_length=160, chunk_length=1)
    return fe(read_wav(path), sampling_rate=16000, return_tensors="pt")["input_features"]


def test_whisper_exact_with_target(tmp_path):
    model = _whisper()
    wav = _wav(tmp_path / "hello.wav")
    st = trace(model, audio=wav, target=[5, 9, 17, 2])
    assert isinstance(st, StackedTrace) and st.names == ("encoder", "decoder", "cross")
    ids = [1, 5, 9, 17, 2]
    with torch.no_grad():
        out = model(input_features=_features(wav), decoder_input_ids=torch.tensor([ids]),
                    output_attentions=True)
    times = [f"{0.02 * i:.2f}s" for i in range(POSITIONS)]
    for name, maps in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                       ("cross", out.cross_attentions)):
        t = st[name]
        assert t.stack == name and t.num_layers == 2
        assert _weight_error(t, [m[0] for m in maps]) <= EXACT, name
        assert _recompute_error(t) <= RECOMPUTE, name
    assert st["encoder"].tokens == times and not st["encoder"].causal
    assert st["decoder"].tokens == [str(i) for i in ids] and st["decoder"].causal
    assert st["cross"].tokens == st["decoder"].tokens and st["cross"].key_tokens == times
    info = st.meta["input"]
    assert info["kind"] == "audio" and info["sample_rate"] == 16000
    assert info["seconds"] == 0.5 and info["frame_seconds"] == 0.02
    assert info["path"] == "hello.wav" and info["real_positions"] == 25
    assert info["positions"] == POSITIONS and st.meta["target_from"] == "given"
    # the comparison can fail: another decoder input gives other cross-attention
    with torch.no_grad():
        other = model(input_features=_features(wav), decoder_input_ids=torch.tensor([[1, 6, 9,
                                                                                       17, 2]]),
                      output_attentions=True)
    assert _weight_error(st["cross"], [m[0] for m in other.cross_attentions]) > 1e-3


def test_whisper_generates_greedily(tmp_path):
    model = _whisper()
    wav = _wav(tmp_path / "a.wav")
    st = trace(model, audio=wav)
    assert st.meta["target_from"] == "generated"
    ids = st["decoder"].token_ids
    assert ids[0] == 1 and 2 <= len(ids) <= 32  # at most the decoder's 32 positions
    assert len(trace(model, audio=wav, max_new_tokens=3)["decoder"].token_ids) <= 4
    with torch.no_grad():
        logits = model(input_features=_features(wav), decoder_input_ids=torch.tensor([ids]),
                       use_cache=False).logits[0]
    assert ids[1:] == logits[:-1].argmax(-1).tolist()  # each token is the greedy choice
    back = load_trace(st.save(tmp_path / "speech.safetensors"))
    assert isinstance(back, StackedTrace) and back.meta["input"] == st.meta["input"]
    assert torch.equal(back["cross"].weights, st["cross"].weights)


def test_whisper_base_model_generates_through_tied_embedding(tmp_path):
    """A WhisperModel (what AutoModel loads) has no head: greedy generation goes through the
    token embedding the config ties the head to, and chooses what the model with its head
    chooses; untied, it needs a target."""
    full = _whisper()
    base = _whisper(transformers.WhisperModel)
    base.load_state_dict(full.model.state_dict())
    wav = _wav(tmp_path / "a.wav")
    got = trace(base, audio=wav)
    assert got["decoder"].token_ids == trace(full, audio=wav)["decoder"].token_ids
    base.config.tie_word_embeddings = False
    with pytest.raises(ValueError, match="no language-model head.*target="):
        trace(base, audio=wav)
    st = trace(base, audio=wav, target=[3, 4])
    assert st["decoder"].tokens == ["1", "3", "4"]
    with pytest.raises(ValueError, match="target text needs a tokenizer"):
        trace(base, audio=wav, target="hello")
    with pytest.raises(ValueError, match=r"target holds ids in \[1, 500\]"):
        trace(base, audio=wav, target=[500])


def test_whisper_long_audio(tmp_path):
    model = _whisper()
    wav = _wav(tmp_path / "long.wav", seconds=1.5)
    with pytest.raises(ValueError, match=r"audio: 1.50 s, the model accepts at most 1 s; "
                                         r"pass truncate=True"):
        trace(model, audio=wav, target=[3])
    st = trace(model, audio=wav, target=[3], truncate=True)
    assert st.meta["truncated_from_seconds"] == 1.5 and st.meta["input"]["real_positions"] == 50


@pytest.mark.parametrize("kwargs, match", [
    (dict(channels=2), "mono 16-bit PCM WAV file, got 'x.wav' with 2 channels"),
    (dict(rate=44100), "16 kHz .* got 'x.wav' with 44100 Hz"),
    (dict(width=1), "got 'x.wav' with 8-bit samples"),
    (dict(seconds=0), "holding some sound, got 'x.wav' with no samples"),
])
def test_wav_errors(tmp_path, kwargs, match):
    wav = _wav(tmp_path / "x.wav", **kwargs)
    with pytest.raises(ValueError, match=match):
        trace(_whisper(), audio=wav)


def test_audio_argument_errors(tmp_path):
    model = _whisper()
    text = tmp_path / "x.wav"
    text.write_text("RIFF? no")
    with pytest.raises(ValueError, match="audio must be a 16 kHz mono 16-bit PCM WAV file, "
                                         "got 'x.wav': not a PCM WAV file"):
        trace(model, audio=text)
    with pytest.raises(ValueError, match="audio must be a path .* no such file"):
        trace(model, audio=tmp_path / "none.wav")
    with pytest.raises(TypeError, match="audio must be a path .* got list"):
        trace(model, audio=[0.0, 0.1])
    vit = _build(transformers.ViTConfig, transformers.ViTModel)
    with pytest.raises(ValueError, match="audio= needs a speech model .* 'vit'"):
        trace(vit, audio=_wav(tmp_path / "a.wav"))


def test_text_or_token_ids_for_a_vision_or_speech_model_name_the_input_it_reads():
    """Token ids given to a model that reads an image or a sound: one message naming what
    to give instead, before the model runs (not transformers' own error from inside it)."""
    vit = _build(transformers.ViTConfig, transformers.ViTModel)
    with pytest.raises(ValueError, match=r"reads pixel_values \(an image\).*give image="):
        trace(vit, [1, 2, 3])
    for model in (_whisper(), _wav2vec2()):
        with pytest.raises(ValueError, match=r"reads input_(features|values).*give audio="):
            trace(model, [1, 2, 3])


# -- speech encoders ------------------------------------------------------------------------


def _wav2vec2(**extra):
    config = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, initializer_range=0.2, vocab_size=32,
        attn_implementation="eager", **extra)
    torch.manual_seed(0)
    return transformers.Wav2Vec2ForCTC(config).eval()


def test_speech_encoder_exact(tmp_path):
    model = _wav2vec2()
    wav = _wav(tmp_path / "w.wav", seconds=0.1)
    t = trace(model, audio=wav)
    x = torch.from_numpy(read_wav(wav).astype(np.float64))
    values = ((x - x.mean()) / torch.sqrt(x.var(unbiased=False) + 1e-7)).float()[None]
    with torch.no_grad():
        maps = [a[0] for a in model.wav2vec2(input_values=values,
                                             output_attentions=True).attentions]
    assert t.stack == "self" and t.num_layers == 2 and not t.causal and t.seq_len == 159
    assert _weight_error(t, maps) <= EXACT and _recompute_error(t) <= RECOMPUTE
    assert t.tokens[:3] == ["0.000000s", "0.000625s", "0.001250s"]  # a frame every 10 samples
    info = t.meta["input"]
    assert info["kind"] == "audio" and info["frame_seconds"] == 10 / 16000
    assert info["positions"] == 159 and info["path"] == "w.wav" and "defaults" in info["preprocess"]
    # the comparison can fail: the raw waveform (not normalised) gives other weights
    with torch.no_grad():
        raw = [a[0] for a in model.wav2vec2(input_values=x.float()[None],
                                            output_attentions=True).attentions]
    assert _weight_error(t, raw) > 10 * EXACT
    with pytest.raises(ValueError, match="target= is for speech models with a decoder"):
        trace(model, audio=wav, target=[1, 2])


def test_speech_encoder_folder_feature_extractor(tmp_path):
    model = _wav2vec2()
    folder = tmp_path / "w2v"
    model.save_pretrained(folder)
    transformers.Wav2Vec2FeatureExtractor(do_normalize=False).save_pretrained(folder)
    model = transformers.Wav2Vec2ForCTC.from_pretrained(folder,
                                                        attn_implementation="eager").eval()
    wav = _wav(tmp_path / "w.wav", seconds=0.1)
    t = trace(model, audio=wav)
    assert "the model's feature extractor" in t.meta["input"]["preprocess"]
    with torch.no_grad():
        maps = [a[0] for a in model.wav2vec2(input_values=torch.from_numpy(read_wav(wav))[None],
                                             output_attentions=True).attentions]
    assert _weight_error(t, maps) <= EXACT


def test_memory_budget_is_checked_before_the_model_runs(tmp_path):
    from attnlab.tracing.budget import MemoryBudgetError

    vit = _build(transformers.ViTConfig, transformers.ViTModel)
    with pytest.raises(MemoryBudgetError, match="image: 17 tokens"):
        trace(vit, image=_png(tmp_path), max_memory="1KB")
    with pytest.raises(MemoryBudgetError, match="audio: 54 tokens"):  # 50 positions + 4 ids
        trace(_whisper(), audio=_wav(tmp_path / "a.wav"), target=[5, 6, 7], max_memory="1KB")
    with pytest.raises(MemoryBudgetError, match="audio: 159 tokens"):
        trace(_wav2vec2(), audio=_wav(tmp_path / "b.wav", seconds=0.1), max_memory="1KB")
    assert trace(vit, image=_png(tmp_path), max_memory="1GB").seq_len == 17


def test_a_model_that_cannot_run_on_the_prepared_image(tmp_path):
    folder = tmp_path / "vit"
    _build(transformers.ViTConfig, transformers.ViTModel).save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 48, "width": 48}).save_pretrained(folder)
    model = transformers.ViTModel.from_pretrained(folder, attn_implementation="eager")
    with pytest.raises(ValueError, match="ViTModel cannot run on the 48x48 image it was given"):
        trace(model, image=_png(tmp_path))


def test_moonshine_reads_the_waveform_without_a_window(tmp_path):
    """Moonshine hears the waveform itself, of any length: its encoder positions (one per
    384 samples, 0.024 s) all hold the sound, and it generates greedily too."""
    from attnlab.tracing.tiny import tiny_media_model

    model = tiny_media_model("moonshine")
    wav = _wav(tmp_path / "m.wav", seconds=0.5)
    st = trace(model, audio=wav, target=[5, 6, 2])
    with torch.no_grad():
        out = model(input_values=torch.from_numpy(read_wav(wav))[None],
                    decoder_input_ids=torch.tensor([[1, 5, 6, 2]]), output_attentions=True)
    for name, maps in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                       ("cross", out.cross_attentions)):
        assert _weight_error(st[name], [m[0] for m in maps]) <= EXACT, name
        assert _recompute_error(st[name]) <= RECOMPUTE, name
    info = st.meta["input"]
    assert info["positions"] == info["real_positions"] == 19 and "window_seconds" not in info
    assert st["encoder"].tokens[:2] == ["0.000s", "0.024s"] and st["decoder"].causal
    gen = trace(model, audio=wav, max_new_tokens=4)
    ids = gen["decoder"].token_ids
    with torch.no_grad():
        logits = model(input_values=torch.from_numpy(read_wav(wav))[None],
                       decoder_input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    assert ids[1:] == logits[:-1].argmax(-1).tolist()


def test_spectrogram_patches_are_labelled_by_band_and_time(tmp_path):
    from attnlab.tracing.tiny import tiny_media_model

    model = tiny_media_model("audio-spectrogram-transformer")  # 32 bins x 64 frames, stride 8
    wav = _wav(tmp_path / "a.wav", seconds=0.3)
    t = trace(model, audio=wav)
    fe = transformers.ASTFeatureExtractor(num_mel_bins=32, max_length=64)
    values = fe(read_wav(wav), sampling_rate=16000, return_tensors="pt")["input_values"]
    with torch.no_grad():
        maps = [a[0] for a in model(input_values=values, output_attentions=True).attentions]
    assert _weight_error(t, maps) <= EXACT and _recompute_error(t) <= RECOMPUTE
    assert t.tokens[:4] == ["[CLS]", "[DIST]", "f0@0.00s", "f0@0.08s"]
    assert t.tokens[-1] == "f2@0.48s" and t.meta["input"]["grid"] == [3, 7]


def _lie(wav: Path, data_bytes: int) -> Path:
    """Rewrite the size of the WAV's data chunk (bytes 40-43 of the canonical header)."""
    raw = bytearray(wav.read_bytes())
    assert raw[36:40] == b"data"
    raw[40:44] = data_bytes.to_bytes(4, "little")
    wav.write_bytes(bytes(raw))
    return wav


def test_a_wav_header_that_lies_is_refused_before_its_claim_is_allocated(tmp_path):
    """A 1 s file whose header declares ~37 hours is refused from the header and the file's
    size, before anything is read; one that claims a few frames more than it holds is
    refused after reading what it holds (a second at a time), naming the argument."""
    import resource
    import subprocess
    import sys

    wav = _lie(_wav(tmp_path / "hours.wav", seconds=1.0), 4_200_000_000)
    with pytest.raises(ValueError, match=r"audio must be .* 'hours.wav' whose header declares "
                                         r"2,100,000,000 frames \(131,250.0 s.*truncated or "
                                         r"its header is wrong"):
        read_wav(wav)
    # under a 1 GiB address-space cap (the claim is 4.2 GB): a one-line refusal, no
    # MemoryError
    code = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({1 << 30}, {1 << 30}))\n"
            f"from attnlab.tracing.media import read_wav\n"
            f"try:\n    read_wav({str(wav)!r})\nexcept ValueError as e:\n    print('refused')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=CHILD_S)
    assert r.stdout.strip() == "refused", r.stderr[-2000:]
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # untouched
    short = _wav(tmp_path / "short.wav", seconds=0.5)
    _lie(short, 2 * 8000 + 40)  # 20 frames more than the 8,000 it holds, within its size
    with pytest.raises(ValueError, match=r"'short.wav' whose header declares 8,020 frames but "
                                         r"which holds 8,000"):
        read_wav(short)
    assert read_wav(_wav(tmp_path / "fine.wav", seconds=0.5)).shape == (8000,)


def _declared_png(path: Path, w: int, h: int, rows: int, depth: int = 8) -> Path:
    """A grayscale PNG whose header declares w x h pixels and whose data holds ``rows``."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    raw = b"".join(b"\0" + bytes(w * depth // 8) for _ in range(rows))
    path.write_bytes(b"\x89PNG\r\n\x1a\n"
                     + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return path


def test_images_that_lie_are_refused_from_their_header_in_one_line(tmp_path, recwarn):
    from attnlab.tracing.media import MAX_IMAGE_PIXELS, read_image

    with pytest.raises(ValueError, match=r"image 'big.png' declares 12000x12000 pixels "
                                         r"\(144,000,000\); attnlab reads images of at most"):
        read_image(_declared_png(tmp_path / "big.png", 12000, 12000, 1))
    with pytest.raises(ValueError, match=rf"image 'bomb.png': attnlab reads images of at most "
                                         rf"{MAX_IMAGE_PIXELS:,} pixels"):
        read_image(_declared_png(tmp_path / "bomb.png", 30000, 30000, 1))
    with pytest.raises(ValueError, match=r"image 'short.png': its pixel data ends early "
                                         r"\(201 of the 40,200 bytes .*truncated"):
        read_image(_declared_png(tmp_path / "short.png", 200, 200, 1))
    assert read_image(_declared_png(tmp_path / "whole.png", 200, 200, 200)).size == (200, 200)
    assert not [w for w in recwarn if "DecompressionBomb" in type(w.message).__name__]


def test_16_bit_and_float_images_are_scaled_and_the_rule_recorded(tmp_path):
    from PIL import Image

    from attnlab.tracing.media import read_image

    ramp = (np.arange(64 * 64, dtype=np.float64).reshape(64, 64) / (64 * 64 - 1))
    sixteen = tmp_path / "g16.png"
    Image.fromarray(np.rint(ramp * 65535).astype(np.uint16)).save(sixteen)
    img = read_image(sixteen)
    got = np.asarray(img)[..., 0].astype(np.float64)
    assert np.abs(got - np.rint(ramp * 255)).max() <= 1  # scaled, not clipped to white
    assert (got == 255).mean() < 0.01 and "scaled 0–65535 to 0–255" in \
        img.info["attnlab_conversion"]
    f = read_image(Image.fromarray(ramp.astype(np.float32), "F"))
    assert np.abs(np.asarray(f)[..., 0] - np.rint(ramp * 255)).max() <= 1  # not truncated to 0
    assert f.info["attnlab_conversion"] == "F: scaled [0, 1] to 0–255"
    with pytest.raises(ValueError, match=r"image is a float image \(mode F\) with values in "
                                         r"\[0, 2\]"):
        read_image(Image.fromarray((2 * ramp).astype(np.float32), "F"))
    plain = read_image(Image.fromarray(np.zeros((4, 4, 3), np.uint8)))
    assert "attnlab_conversion" not in plain.info
    # and the trace records what was done
    vit = _build(transformers.ViTConfig, transformers.ViTModel)
    t = trace(vit, image=sixteen)
    assert t.meta["input"]["conversion"].startswith("I")
