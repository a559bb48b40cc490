"""The report's "architectures" part: an encoder–decoder, a vision and a speech transformer,
each traced by attnlab, checked against the model's own attention, and shown in the
explorer.

The three models are tiny and have **random weights** (seeded), built in a second from
Hugging Face ``transformers`` configurations — no checkpoint is downloaded or shipped:

* **BART** (encoder–decoder): a source sentence and its target, both tokenized by a small
  word-level tokenizer made here, traced with ``trace(model, source, target=...)`` into a
  ``StackedTrace`` (encoder self-, decoder self- and cross-attention).
* **ViT**: an image drawn here (stripes, a disc, a triangle on a plain ground), traced with
  ``trace(model, image=...)``: the class token, then one token per patch.
* **Whisper**: a generated one-second chirp (a tone rising from 200 Hz to 3 kHz) written as a
  16 kHz WAV file, traced with ``trace(model, audio=..., target=...)``.

For every stack the part checks that the weights attnlab computes from what it captured
equal the model's own ``output_attentions`` (eager attention, the same inputs), that the
explorer's QK view (softmax of q·kᵀ recomputed from the captured q and k) gives the same
weights, and how many layers, heads, queries and keys the stack has. The pictures show each
architecture's attention *structure* (which stacks, which tokens are queries and which are
keys, the decoder's causal mask, the patch grid, the time positions) — with random weights
they show nothing learned.
"""

from __future__ import annotations

import math
import tempfile
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.report.explorer import qk_view_error
from attnlab.report.html import BiText, ReportContext, Section, bilingual, escape, fmt, table
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.explorer import Explorer, ExplorerConfig

__all__ = ["build", "WEIGHTS_TOL", "QK_TOL", "SOURCE", "TARGET", "SPEECH_TARGET", "VOCAB",
           "draw_image", "chirp", "write_wav", "word_tokenizer", "tiny_bart", "tiny_vit",
           "tiny_whisper", "stack_checks", "Checked", "INIT_STD", "trace_bart", "trace_vit",
           "trace_whisper", "CASES"]

#: weights from the capture against the model's eager softmax: float32 rounding apart
WEIGHTS_TOL = 1e-5
#: the QK view's float64 recomputation from the captured q and k against the weights
QK_TOL = 1e-4
SOURCE = "the cat sat on the mat because it was tired"
TARGET = "die katze saß auf der matte weil sie müde war"
SPEECH_TARGET = "a tone rising from low to high"
#: the word-level vocabulary of the tokenizer made here (ids in this order)
VOCAB = ("<pad> <s> </s> <unk> " + SOURCE + " " + TARGET + " " + SPEECH_TARGET).split()
SAMPLE_RATE = 16000
#: the standard deviation of the random weights: ten times the usual 0.02, so that the
#: heads' scores spread and their patterns differ (at 0.02 every head is near uniform)
INIT_STD = 0.2

_ZH = {
    "model": "模型", "stack": "注意力栈", "layers × heads": "层 × 头",
    "queries × keys": "查询 × 键", "max |trace − output_attentions|":
    "最大 |追踪权重 − output_attentions|", "max |QK view − weights|":
    "最大 |QK 视图 − 权重|", "result": "结果", "seconds": "秒",
    "input": "输入", "what attnlab checked": "attnlab 检查了什么",
}
_STACK = {"self": BiText("self-attention", "自注意力"),
          "encoder": BiText("encoder self-attention", "编码器自注意力"),
          "decoder": BiText("decoder self-attention", "解码器自注意力"),
          "cross": BiText("cross-attention (target → source)", "交叉注意力（目标 → 源）")}


# --------------------------------------------------------------------------------------
# inputs made here: a tokenizer, an image, a sound
# --------------------------------------------------------------------------------------


def word_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` over :data:`VOCAB`, splitting on whitespace (no special
    tokens added), so that the traces are labelled with words.

    >>> tok = word_tokenizer()
    >>> tok("the cat sat")["input_ids"], tok.convert_ids_to_tokens([5])
    ([4, 5, 6], ['cat'])
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for w in VOCAB:
        vocab.setdefault(w, len(vocab))
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def draw_image(size: int = 96) -> Any:
    """A picture with structure (a PIL RGB image, ``size`` × ``size``): vertical stripes
    across the top, a red disc at the lower right, a green triangle at the lower left.

    >>> im = draw_image(48)
    >>> im.size, im.getpixel((47, 47)) != im.getpixel((0, 0))
    ((48, 48), True)
    """
    from PIL import Image, ImageDraw

    s = size / 96
    img = Image.new("RGB", (size, size), (250, 245, 230))
    d = ImageDraw.Draw(img)
    for x in range(0, 96, 12):
        d.rectangle([x * s, 0, (x + 5) * s, 40 * s], fill=(40, 90, 200))
    d.ellipse([50 * s, 50 * s, 90 * s, 90 * s], fill=(220, 60, 40))
    d.polygon([(5 * s, 90 * s), (27 * s, 50 * s), (46 * s, 90 * s)], fill=(40, 160, 70))
    return img


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


# --------------------------------------------------------------------------------------
# tiny random models
# --------------------------------------------------------------------------------------


def _eager(config: Any) -> Any:
    config._attn_implementation = "eager"  # the softmax output_attentions returns
    return config


def tiny_bart(seed: int = 0) -> Any:
    """A BART with 2 encoder and 2 decoder layers of 4 heads, d_model 32, random weights."""
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(seed)
    cfg = _eager(BartConfig(
        vocab_size=len(VOCAB), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
        init_std=INIT_STD))
    return BartForConditionalGeneration(cfg).eval()


def tiny_vit(seed: int = 0) -> Any:
    """A ViT with 2 layers of 4 heads, 48 × 48 images in 8 × 8 patches (6 × 6 grid)."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    cfg = _eager(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, image_size=48, patch_size=8,
                           initializer_range=INIT_STD))
    return ViTModel(cfg, add_pooling_layer=False).eval()


def tiny_whisper(seed: int = 0) -> Any:
    """A Whisper with 2 encoder and 2 decoder layers of 4 heads, 80 mel bins and 50 encoder
    positions (a 1 s window), over :data:`VOCAB`."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(seed)
    cfg = _eager(WhisperConfig(
        vocab_size=len(VOCAB), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_mel_bins=80, max_source_positions=50,
        max_target_positions=16, decoder_start_token_id=1, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, suppress_tokens=[], begin_suppress_tokens=[], init_std=INIT_STD))
    return WhisperForConditionalGeneration(cfg).eval()


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------


class Checked:
    """One stack's checks: sizes and the two errors (NaN when not measured)."""

    def __init__(self, name: str, trace: AttentionTrace, reference: torch.Tensor) -> None:
        self.name = name
        self.layers, self.heads = trace.num_layers, trace.num_heads
        self.queries, self.keys = trace.seq_len, trace.key_len
        mine = torch.stack([torch.stack([trace.head_weights(layer, h)
                                         for h in range(trace.num_heads)])
                            for layer in range(trace.num_layers)]).double()
        ref = reference.double()
        self.shape_ok = tuple(mine.shape) == tuple(ref.shape)
        self.weights_error = (float((mine - ref).abs().max()) if self.shape_ok
                              else float("inf"))
        self.qk_error = qk_view_error(trace)

    @property
    def passed(self) -> bool:
        qk_ok = math.isnan(self.qk_error) or self.qk_error <= QK_TOL
        return self.shape_ok and self.weights_error <= WEIGHTS_TOL and qk_ok


def stack_checks(traces: dict[str, AttentionTrace], reference: dict[str, Any]
                 ) -> list[Checked]:
    """Each stack of ``traces`` against the model's ``output_attentions`` for it
    (``reference[name]``: a tuple of (1, H, Lq, Lk) tensors, one per layer).

    >>> w = torch.softmax(torch.randn(1, 2, 3, 3), -1)
    >>> t = AttentionTrace(tokens=list("abc"), weights=w[0][None])
    >>> c = stack_checks({"self": t}, {"self": (w,)})[0]
    >>> (c.layers, c.heads, c.queries, c.keys), c.weights_error < 1e-6, c.passed
    ((1, 2, 3, 3), True, True)
    >>> stack_checks({"self": t}, {"self": (w.flip(-1),)})[0].passed
    False
    """
    out = []
    for name, t in traces.items():
        layers = reference.get(name)
        if layers is None:
            raise ValueError(f"reference has no attention for stack {name!r}; it holds "
                             f"{sorted(reference)}")
        out.append(Checked(name, t, torch.cat([x.detach() for x in layers], dim=0)))
    return out


Case = tuple[Any, dict[str, AttentionTrace], dict[str, Any], tuple[str, str]]


def trace_bart(tok: Any) -> Case:
    """:func:`tiny_bart` traced on :data:`SOURCE` → :data:`TARGET`: ``(StackedTrace, its
    stacks, the model's own output_attentions per stack for the same token ids, what the
    input is in English and Chinese)``."""
    from attnlab.tracing.tracer import trace

    model = tiny_bart()
    st = trace(model, SOURCE, target=TARGET, tokenizer=tok)
    enc_ids, dec_ids = st["encoder"].token_ids, st["decoder"].token_ids
    with torch.no_grad():
        out = model(input_ids=torch.tensor([enc_ids]), decoder_input_ids=torch.tensor([dec_ids]),
                    output_attentions=True, use_cache=False)
    ref = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions,
           "cross": out.cross_attentions}
    what = f"“{SOURCE}” → “{TARGET}”"
    return st, dict(st.items()), ref, (what, what)


def trace_vit(tok: Any) -> Case:
    """:func:`tiny_vit` traced on :func:`draw_image` (as :func:`trace_bart`; ``tok`` is not
    used); the reference gets the pixel values attnlab prepares."""
    from attnlab.tracing.media import image_inputs
    from attnlab.tracing.tracer import trace

    model, img = tiny_vit(), draw_image()
    t = trace(model, image=img)
    pixels, _, _ = image_inputs(model, img, None)
    with torch.no_grad():
        out = model(pixel_values=pixels, output_attentions=True)
    return t, {"self": t}, {"self": out.attentions}, (
        "a 96 × 96 drawing (stripes, a disc, a triangle), resized to 48 × 48",
        "一幅 96 × 96 的图（条纹、圆盘、三角形），缩放到 48 × 48")


def trace_whisper(tok: Any) -> Case:
    """:func:`tiny_whisper` traced on a one-second :func:`chirp` written as a WAV file, with
    :data:`SPEECH_TARGET` as the decoder's text (as :func:`trace_bart`); the reference's
    log-mel features are computed here, independently, from the samples the file holds."""
    from transformers import WhisperFeatureExtractor

    from attnlab.tracing.tracer import trace

    model = tiny_whisper()
    samples = chirp(1.0)
    with tempfile.TemporaryDirectory(prefix="attnlab-") as tmp:
        path = write_wav(Path(tmp) / "chirp.wav", samples)
        st = trace(model, audio=path, target=SPEECH_TARGET, tokenizer=tok)
    cfg = model.config
    frames = 2 * cfg.max_source_positions  # the model's window: 2 mel frames per position
    fe = WhisperFeatureExtractor(feature_size=cfg.num_mel_bins, sampling_rate=SAMPLE_RATE,
                                 hop_length=160, chunk_length=frames * 160 / SAMPLE_RATE)
    fe.n_samples, fe.nb_max_frames = frames * 160, frames
    pcm = (np.clip(samples, -1, 1) * 32767).round().astype("<i2")  # what the file holds
    features = fe(pcm.astype(np.float32) / 32768.0, sampling_rate=SAMPLE_RATE,
                  return_tensors="pt")["input_features"]
    with torch.no_grad():
        out = model.model(input_features=features,
                          decoder_input_ids=torch.tensor([st["decoder"].token_ids]),
                          output_attentions=True, use_cache=False)
    ref = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions,
           "cross": out.cross_attentions}
    return st, dict(st.items()), ref, (
        f"a 1 s chirp rising from 200 Hz to 3 kHz (16 kHz WAV) · target “{SPEECH_TARGET}”",
        f"1 秒的线性调频音，从 200 Hz 升到 3 kHz（16 kHz WAV）· 目标文本“{SPEECH_TARGET}”")


#: (key, title, Chinese title, the case, the view and the stack its explorer opens on)
CASES: tuple[tuple[str, str, str, Callable[..., Any], str, str], ...] = (
    ("bart", "BART (encoder–decoder)", "BART（编码器–解码器）", trace_bart, "head", "cross"),
    ("vit", "ViT (vision)", "ViT（视觉）", trace_vit, "image", "self"),
    ("whisper", "Whisper (speech)", "Whisper（语音）", trace_whisper, "matrix", "cross"),
)


# --------------------------------------------------------------------------------------
# the section
# --------------------------------------------------------------------------------------


def _intro() -> str:
    return bilingual(
        "Three architectures beyond a single self-attention stack, each a tiny model with "
        "random weights (seeded) built from its transformers configuration: BART (an "
        "encoder–decoder: encoder self-, decoder self- and cross-attention), ViT (an image "
        "cut into patches) and Whisper (a sound: time positions as keys, the decoder's text "
        "as queries). The weights are random, so the explorers show each architecture's "
        "attention structure — the stacks, which tokens are queries and which are keys, the "
        "decoder's causal mask, the patch grid — not learned behaviour (the weights are drawn "
        f"with standard deviation {INIT_STD}, ten times the usual, so that the heads differ). "
        "attnlab ships no real checkpoint of these kinds, so none is used.",
        "三种超出单一自注意力栈的架构，各用一个随机权重（固定种子）的小模型，"
        "由 transformers 的配置直接构建：BART（编码器–解码器：编码器自注意力、"
        "解码器自注意力与交叉注意力）、ViT（把图像切成图块）与 Whisper（声音："
        "时间位置作为键，解码器的文本作为查询）。权重是随机的，所以下面的浏览器"
        "展示的是各架构的注意力结构——有哪些注意力栈、哪些词元是查询、哪些是键、"
        "解码器的因果掩码、图块网格——而不是学到的行为（权重按标准差 "
        f"{INIT_STD} 抽取，是通常取值的十倍，使各个头彼此不同）。attnlab 不附带这几类模型的"
        "真实检查点，因此没有使用。")


def _case_html(title: str, title_zh: str, what: tuple[str, str], checks: list[Checked],
               explorer: Explorer, seconds: float) -> str:
    rows = [(_STACK.get(c.name, BiText(c.name, c.name)), f"{c.layers} × {c.heads}",
             f"{c.queries} × {c.keys}", fmt(c.weights_error), fmt(c.qk_error), c.passed)
            for c in checks]
    head = ["stack", "layers × heads", "queries × keys", "max |trace − output_attentions|",
            "max |QK view − weights|", "result"]
    body = (f'<h3><span class="en">{escape(title)}</span><span class="zh" lang="zh">'
            f"{escape(title_zh)}</span></h3>")
    body += bilingual(f"Input: {what[0]}. Traced, checked and drawn in {seconds:.1f} s.",
                      f"输入：{what[1]}。追踪、检查与绘制共用 {seconds:.1f} 秒。")
    return body + table(head, rows, passed_col=5, catalog=_ZH) + explorer.to_html()


def build(ctx: ReportContext) -> Section:
    """The part: each architecture traced, checked and shown (a failed case is a failed
    row with the reason, never a missing part)."""
    tok = word_tokenizer()
    parts = [_intro()]
    rows: list[tuple[str, str, bool | None]] = []
    ok = True
    for key, title, title_zh, case, view, stack in CASES:
        t0 = time.perf_counter()
        try:
            obj, traces, ref, what = case(tok)
            checks = stack_checks(traces, ref)
            ex = Explorer(obj, uid=f"ax-arch-{key}", config=ExplorerConfig(view=view),
                          stack=stack)
            ex.payload()
        except (ValueError, TypeError, NotImplementedError, RuntimeError) as exc:
            ok = False
            msg = f"{type(exc).__name__}: {exc}"
            ctx.log(f"architectures: {key} failed ({msg})")
            parts.append(f'<h3><span class="en">{escape(title)}</span><span class="zh" '
                         f'lang="zh">{escape(title_zh)}</span></h3>')
            parts.append(bilingual(f"Not traced: {msg}", f"未能追踪：{msg}", cls="bad"))
            rows.append((f"{key}: traced", msg[:80], False))
            continue
        seconds = time.perf_counter() - t0
        parts.append(_case_html(title, title_zh, what, checks, ex, seconds))
        for c in checks:
            ok = ok and c.passed
            rows.append((f"{key} {c.name}: weights = output_attentions",
                         f"{c.weights_error:.1e}", c.passed))
    return Section("architectures", "Architectures: encoder–decoder, vision, speech",
                   "架构：编码器–解码器、视觉、语音", "".join(parts), passed=ok, rows=rows)
