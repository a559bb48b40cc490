"""Sounds as inputs of a trace: speech encoder–decoders and speech encoders.

``trace(model, audio=PATH, target=None)`` (:func:`attnlab.tracing.media.trace_media`, which
hands a sound to :func:`trace_audio`) runs one 16 kHz mono 16-bit PCM WAV file (read
with the standard library's :mod:`wave`) through a speech encoder–decoder (Whisper,
Moonshine, Speech2Text: :data:`SPEECH_FAMILIES`) and returns a
:class:`~attnlab.tracing.stacks.StackedTrace`: the encoder's self-attention over time
positions labelled by their start (``"0.00s"``, ``"0.02s"``…), the decoder's self-attention
over its text tokens, and the cross-attention from those tokens to the time positions. The
input is prepared by the folder's feature extractor when it has one, else as the family
does by default: Whisper's log-mel features (a ``WhisperFeatureExtractor`` built from the
config), Speech2Text's filter banks, Moonshine's waveform itself. Whisper pads every input
to its full window (30 s: 1500 encoder positions) and refuses a shorter one, so the trace
keeps every position; ``meta["input"]["real_positions"]`` says how many hold the sound (the
others hear their input as it is). The decoder's tokens are
``target`` (text, tokenized by the model's tokenizer, or token ids), or else the model's
own greedy choice, token by token from its start token (``meta["target_from"]``). A speech
encoder without a decoder (wav2vec 2.0, HuBERT, data2vec-audio, SEW, UniSpeech, Parakeet
CTC, w2v-BERT, ...: :data:`AUDIO_ENCODER_FAMILIES`) gives one stack over its frames,
labelled the same way; the Audio Spectrogram Transformer's tokens are ``[CLS]``, ``[DIST]``
and patches of its spectrogram labelled by frequency band and start (``"f2@0.40s"``).

:mod:`attnlab.tracing.media` traces images, and its names include this module's public
ones (:func:`trace_audio`, :func:`time_labels` and the families).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab._errors import check_int
from attnlab.tracing._media_parts import _family, _one, _record_filter, _restack, _run, _unpack
from attnlab.tracing._media_records import AudioInput, ModelInfo
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.capture import Capture, capture
from attnlab.tracing.decode import (
    check_ids,
    fit_target,
    generated_text,
    greedy,
    id_labels,
    needs_target,
    next_logits,
    start_id,
    target_ids,
)
from attnlab.tracing.inputs import SAMPLE_RATE, read_audio
from attnlab.tracing.preprocess import (
    SpeechInput,
    encoder_features,
    folder_file,
    quiet,
    whisper_extractor,
)
from attnlab.tracing.stacks import StackedTrace

__all__ = ["AUDIO_ENCODER_FAMILIES", "MAX_NEW_TOKENS", "SPEECH_FAMILIES", "time_labels",
           "trace_audio"]

#: Tokens the model's own greedy generation adds at most when no target is given.
MAX_NEW_TOKENS = 8
#: Speech families traced exactly (encoder, decoder and cross-attention).
SPEECH_FAMILIES = ("whisper", "moonshine", "speech_to_text")
#: Speech encoders without a decoder (CTC, self-supervised and classification models): one
#: stack of self-attention over their frames (or spectrogram patches). WavLM and SEW-D
#: compute their attention inline: capture refuses them, naming the module.
AUDIO_ENCODER_FAMILIES = ("wav2vec2", "hubert", "data2vec-audio", "sew", "unispeech",
                          "unispeech-sat", "wav2vec2-conformer", "wavlm", "sew-d",
                          "parakeet_ctc", "wav2vec2-bert", "audio-spectrogram-transformer")
#: Speech encoders that read filter banks, not the waveform: their default extractor.
_FEATURE_ENCODERS = {"parakeet_ctc": "ParakeetFeatureExtractor",
                     "wav2vec2-bert": "SeamlessM4TFeatureExtractor"}


def time_labels(n: int, frame_seconds: float) -> list[str]:
    """``n`` labels of time positions: the start of each, in seconds (``"0.02s"``).

    >>> time_labels(3, 0.02)
    ['0.00s', '0.02s', '0.04s']
    >>> time_labels(3, 0.00125)
    ['0.00000s', '0.00125s', '0.00250s']
    """
    digits = next((d for d in range(2, 7) if abs(round(frame_seconds, d) - frame_seconds)
                   < 1e-12), 6)  # enough digits for every label to be exact (0.02 s: 2)
    return [f"{i * frame_seconds:.{digits}f}s" for i in range(n)]


def _speech_model(net: Any, name: str) -> tuple[Any, str]:
    """(the speech model of ``net``, a Hugging Face model of its own class; its family)."""
    family = _family(net)
    if family not in SPEECH_FAMILIES and family not in AUDIO_ENCODER_FAMILIES:
        raise ValueError(f"audio= needs a speech model of a family attnlab traces "
                         f"({', '.join((*SPEECH_FAMILIES, *AUDIO_ENCODER_FAMILIES))}); {name} "
                         f"is {family or 'not one'!r}")
    if family in AUDIO_ENCODER_FAMILIES:
        inner = getattr(net, "base_model", None)  # a CTC or classification head: its encoder
        if inner is not net and isinstance(inner, nn.Module) and _family(inner) == family:
            net = inner
    return net, family


def _trace_audio_encoder(net: Any, family: str, name: str, folder: str | None,
                         info: ModelInfo, samples: np.ndarray, source: str, *,
                         qkv: bool, context: bool,
                         max_memory: int | str | None) -> AttentionTrace:
    """A speech encoder's self-attention over the frames of a waveform (one stack)."""
    config = net.config
    features = _FEATURE_ENCODERS.get(family)
    fe, prepared, how = encoder_features(folder, features, samples, name)
    frames: int | None
    if features is not None:  # filter banks every 10 ms, subsampled by the encoder
        inputs = {"input_features": prepared["input_features"]}
        if family == "parakeet_ctc":
            sub = getattr(config, "encoder_config", config).subsampling_factor
            stride = int(fe.hop_length) * int(sub)
        else:  # wav2vec2-bert: the extractor stacks `stride` frames of 10 ms
            stride = SAMPLE_RATE // 100 * int(fe.stride)
        frames = None  # the encoder's own count, read from the trace
        estimate = samples.size // stride + 1
    else:
        values = prepared["input_values"]
        inputs = {"input_values": values}
        squeeze = int(getattr(config, "squeeze_factor", 1) or 1)
        stride = int(np.prod(config.conv_stride)) * squeeze
        frames = int(net._get_feat_extract_output_lengths(values.shape[-1])) // squeeze
        if frames < 1:
            raise ValueError(f"audio is {samples.size / SAMPLE_RATE:.4f} s: too short for "
                             f"{name}, which needs at least {sum(config.conv_kernel)} samples")
        estimate = frames
    if max_memory is not None:
        from attnlab.tracing.budget import check_trace_budget

        check_trace_budget(net, estimate, max_memory, what="audio", keep_weights=not qkv,
                           keep_context=context)
    was_training = net.training
    net.eval()
    try:
        with capture(net, qkv=qkv, context=context) as cap:
            _run(net, name, f"{samples.size / SAMPLE_RATE:g} s of audio", **inputs)
    finally:
        net.train(was_training)
    first = cap.records[0] if cap.records else None
    if frames is None and first is not None:
        frames = first.dims[1]
    if (first is None or frames is None or first.batch != 1
            or first.dims[1:] != (frames, frames)):
        got = "nothing" if first is None else f"{first.dims[1]}x{first.dims[2]} positions"
        raise ValueError(f"{name} ({family}) attends over {got}, not the {frames} frames of "
                         "its waveform; refused rather than mislabelled")
    frame_seconds = stride / SAMPLE_RATE
    meta: dict[str, Any] = {"model_info": info or {"name": name, "family": family},
                            "family": family}
    heard: AudioInput = {"kind": "audio", "sample_rate": SAMPLE_RATE,
                         "seconds": round(samples.size / SAMPLE_RATE, 6),
                         "frame_seconds": frame_seconds, "path": source, "positions": frames,
                         "real_positions": frames, "preprocess": how}
    meta["input"] = heard
    tokens = time_labels(frames, frame_seconds)
    t = _one(cap.trace(tokens=tokens, model=name, meta=meta, release=True))
    return t if t.stack == "self" else _restack(t, "self", tokens=tokens)


def _spectrogram_samples(config: Any) -> int:
    """The samples the Audio Spectrogram Transformer's window hears (``max_length`` frames
    of 25 ms every 10 ms), and a second more: what is read of a longer sound."""
    return (int(config.max_length) - 1) * 160 + 400 + SAMPLE_RATE


def _trace_spectrogram(net: Any, name: str, pre: Path | None, info: ModelInfo,
                       samples: np.ndarray, source: str, *, qkv: bool, context: bool,
                       max_memory: int | str | None,
                       seconds: float | None = None) -> AttentionTrace:
    """The Audio Spectrogram Transformer: its log-mel spectrogram (a frame every 10 ms,
    padded or cut to ``config.max_length`` frames) in overlapping patches, as an image of
    frequency bands (rows) by time (columns) behind ``[CLS]`` and ``[DIST]``; a patch is
    labelled ``"f{row}@{start}s"``."""
    import transformers

    config = net.config
    with quiet():
        if pre is not None:
            fe = transformers.AutoFeatureExtractor.from_pretrained(pre.parent,
                                                                   local_files_only=True)
            how = f"the model's feature extractor ({type(fe).__name__}, {pre.name})"
        else:
            fe = transformers.ASTFeatureExtractor(num_mel_bins=int(config.num_mel_bins),
                                                  max_length=int(config.max_length))
            how = (f"ASTFeatureExtractor for the config ({config.num_mel_bins} mel bins, "
                   f"{config.max_length} frames; the folder has no preprocessor_config.json)")
        values = fe(samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_values"]
    p, fs, ts = int(config.patch_size), int(config.frequency_stride), int(config.time_stride)
    rows = (int(config.num_mel_bins) - p) // fs + 1
    cols = (int(config.max_length) - p) // ts + 1
    column_seconds = ts / 100
    tokens = ["[CLS]", "[DIST]"] + [f"f{r}@{c * column_seconds:.2f}s" for r in range(rows)
                                    for c in range(cols)]
    if max_memory is not None:
        from attnlab.tracing.budget import check_trace_budget

        check_trace_budget(net, len(tokens), max_memory, what="audio", keep_weights=not qkv,
                           keep_context=context)
    was_training = net.training
    net.eval()
    try:
        with capture(net, qkv=qkv, context=context) as cap:
            _run(net, name, f"a spectrogram {tuple(values.shape)}", input_values=values)
    finally:
        net.train(was_training)
    first = cap.records[0] if cap.records else None
    if first is None or first.batch != 1 or first.dims[1:] != (len(tokens), len(tokens)):
        raise ValueError(f"{name} does not attend over the 2 + {rows}x{cols} patches of its "
                         "spectrogram; refused rather than mislabelled")
    seconds = samples.size / SAMPLE_RATE if seconds is None else seconds
    window = int(config.max_length) / 100
    meta: dict[str, Any] = {"model_info": info or {"name": name}, "family": _family(net)}
    heard: AudioInput = {
        "kind": "audio", "sample_rate": SAMPLE_RATE, "seconds": round(seconds, 6),
        "frame_seconds": column_seconds, "path": source, "positions": len(tokens),
        "real_positions": 2 + rows * min(cols, math.ceil(seconds / column_seconds - 1e-9)),
        "grid": [rows, cols], "prefix": 2, "patch_size": p, "window_seconds": window,
        "preprocess": how,
        "padding": f"{name} pads or cuts every input to {window:g} s of spectrogram; patch "
                   f"columns start every {column_seconds:g} s"}
    meta["input"] = heard
    if seconds > window:
        meta["truncated_from_seconds"] = round(seconds, 4)
    t = _one(cap.trace(tokens=tokens, model=name, meta=meta, release=True))
    return t if t.stack == "self" else _restack(t, "self", tokens=tokens)


def _trace_encoder_only(net: Any, family: str, name: str, folder: str | None,
                        info: ModelInfo, audio: Any, target: Any, *, qkv: bool,
                        context: bool, max_memory: int | str | None) -> AttentionTrace:
    """``audio`` through a speech encoder of :data:`AUDIO_ENCODER_FAMILIES` (no decoder, so
    no ``target``): its self-attention over the frames, or the spectrogram patches."""
    if target is not None:
        raise ValueError(f"target= is for speech models with a decoder "
                         f"({', '.join(SPEECH_FAMILIES)}); {name} ({family}) has none")
    source = "" if isinstance(audio, np.ndarray) else Path(audio).name
    if family == "audio-spectrogram-transformer":  # it hears its window, cut or padded
        samples, _cut = read_audio(audio, most=_spectrogram_samples(net.config),
                                   truncate=True)
        seconds = _cut if _cut is not None else samples.size / SAMPLE_RATE
        return _trace_spectrogram(net, name, folder_file(folder, "preprocessor_config.json"),
                                  info, samples, source, qkv=qkv, context=context,
                                  max_memory=max_memory, seconds=seconds)
    samples, _ = read_audio(audio)
    return _trace_audio_encoder(net, family, name, folder, info, samples, source, qkv=qkv,
                                context=context, max_memory=max_memory)


def _decoder_limit(config: Any) -> int:
    """The positions a speech decoder holds (its config's first integer of
    ``max_target_positions``, ``max_position_embeddings``; else no limit)."""
    return next((int(v) for v in (getattr(config, a, None) for a in (
        "max_target_positions", "max_position_embeddings")) if isinstance(v, int)), 1 << 30)


def _speech_target_ids(net: Any, encoder: Any, name: str, tok: Any, inp: SpeechInput,
                       target: Any, *, start: int, limit: int, max_new_tokens: int,
                       truncate: bool, meta: dict[str, Any]) -> tuple[list[int], str | None]:
    """(the decoder's token ids, behind the start token and fitted to ``limit``; their
    text): ``target``'s, or the model's greedy generation when it is None. Records in
    ``meta`` where they came from and what was cut (call with the model in eval mode)."""
    config = net.config
    if target is None:
        logits_of = next_logits(net, config)
        if logits_of is None:
            raise needs_target(name, net, " (and its config ties none to the token "
                               "embedding)")
        encoded = _run(encoder, name, "its audio", **inp.kwargs)
        eos = getattr(config, "eos_token_id", None)
        ids = greedy(logits_of, encoded, start, eos if isinstance(eos, int) else None,
                     int(config.vocab_size), min(max_new_tokens, limit - 1))
        target_text = generated_text(tok, ids)
        meta["target_from"] = "generated"
    else:
        ids, target_text = target_ids(target, tok, start=start, name=name)
        ids = ids if ids[0] == start else [start, *ids]
        meta["target_from"] = "given"
    ids, target_cut = fit_target(ids, limit, truncate=truncate)
    if target_cut is not None:
        meta["target_truncated_from"] = target_cut
    check_ids(ids, int(config.vocab_size), name, "target")
    return ids, target_text


def _speech_input_meta(inp: SpeechInput, audio: Any, name: str,
                       positions: int) -> AudioInput:
    """The ``meta["input"]`` of a speech trace whose encoder has ``positions`` frames."""
    real = min(positions, math.ceil(inp.seconds / inp.frame_seconds - 1e-9))
    info: AudioInput = {
        "kind": "audio", "sample_rate": SAMPLE_RATE,
        "seconds": round(inp.seconds, 6), "frame_seconds": inp.frame_seconds,
        "path": "" if isinstance(audio, np.ndarray) else Path(audio).name,
        "positions": positions, "real_positions": real, "preprocess": inp.how}
    if inp.window is not None:
        info["window_seconds"] = inp.window
        info["padding"] = (
            f"{name} pads every input to its {inp.window:g} s window and refuses a shorter "
            f"one, so all its positions are kept; the first {real} hold the sound")
    return info


_CROSS = re.compile(r"(^|\.)(encoder_attn|crossattention|cross_attn)(\.|$)")


def _speech_stacks(cap: Capture, name: str, times: list[str], labels: list[str],
                   ids: list[int]) -> dict[str, AttentionTrace]:
    """The ``encoder``, ``decoder`` and ``cross`` stacks of a speech model's capture
    (encoder rows labelled by ``times``, decoder rows by ``labels``); refuses a missing
    stack or one whose layers differ in shape."""
    parts = {
        "encoder": _record_filter(cap, lambda n: ".encoder." in f".{n}."),
        "decoder": _record_filter(cap, lambda n: ".decoder." in f".{n}."
                                  and not _CROSS.search(n)),
        "cross": _record_filter(cap, lambda n: bool(_CROSS.search(n))),
    }
    stacks: dict[str, AttentionTrace] = {}
    for stack, sub in parts.items():
        if not sub.records:
            raise ValueError(f"{name}: no {stack} attention was recorded; refused rather "
                             "than incomplete")
        rows = times if stack == "encoder" else labels
        keys = times if stack == "cross" else None
        t = _one(sub.trace(tokens=rows, key_tokens=keys, model=name, release=True))
        if len(t.meta.get("layer_names", [])) != len(sub.records) and t.meta.get("skipped"):
            raise ValueError(f"{name}: the {stack} layers differ in shape "
                             f"({t.meta['skipped']}); refused rather than incomplete")
        stacks[stack] = _restack(t, stack, tokens=rows, key_tokens=keys,
                                 token_ids=None if stack == "encoder" else ids)
    return stacks


def trace_audio(model: Any, audio: Any, *, target: Any = None, tokenizer: Any = None,
                qkv: bool = True, context: bool = False, truncate: bool = False,
                max_new_tokens: int = MAX_NEW_TOKENS,
                max_memory: int | str | None = None) -> StackedTrace | AttentionTrace:
    """One WAV file through a speech encoder–decoder (see the module docstring), or
    through a speech encoder of :data:`AUDIO_ENCODER_FAMILIES` (wav2vec 2.0, HuBERT, ...):
    then an :class:`AttentionTrace` (stack ``"self"``) over the frames, labelled by their
    start like the encoder positions of a StackedTrace.

    Args:
        model: a loaded model or a Hugging Face module of a family in
            :data:`SPEECH_FAMILIES` (with its head, e.g.
            ``WhisperForConditionalGeneration``, or a base model such as ``WhisperModel``:
            without a target it generates through the token embedding its config ties the
            head to) or :data:`AUDIO_ENCODER_FAMILIES`.
        audio: a path to a 16 kHz mono 16-bit PCM WAV file, or its samples: a 1-D float
            array at 16 kHz, in [-1, 1].
        target: the decoder's text (tokenized with special tokens) or token ids (the start
            token is put first when missing); None: the model's greedy generation.
        tokenizer: overrides the loaded model's tokenizer.
        qkv, context: as :func:`attnlab.tracing.tracer.trace`.
        truncate: keep the first window of a longer sound (else ``ValueError``).
        max_new_tokens: at most this many generated tokens when no target is given (and no
            more than the decoder's positions hold).

    Returns:
        a :class:`StackedTrace` with stacks ``encoder``, ``decoder`` and ``cross``.
    """
    net, name, folder, info, tok = _unpack(model)
    net, family = _speech_model(net, name)
    tok = tokenizer if tokenizer is not None else tok
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    if family in AUDIO_ENCODER_FAMILIES:
        return _trace_encoder_only(net, family, name, folder, info, audio, target, qkv=qkv,
                                   context=context, max_memory=max_memory)
    config = net.config
    window = (whisper_extractor(config, folder)[0].n_samples if family == "whisper"
              else None)  # the samples Whisper hears; the others hear all of the sound
    samples, cut_from = read_audio(audio, most=window, truncate=truncate)
    inp = SpeechInput(net, family, folder, samples, name, truncate)
    meta: dict[str, Any] = {"model_info": info or {"name": name, "family": family},
                            "family": family}
    if cut_from is not None or inp.truncated_from is not None:
        meta["truncated_from_seconds"] = cut_from if cut_from is not None else (
            inp.truncated_from)
    start = start_id(net)
    limit = _decoder_limit(config)
    encoder = net.get_encoder()
    was_training = net.training
    net.eval()
    try:
        ids, target_text = _speech_target_ids(net, encoder, name, tok, inp, target,
                                              start=start, limit=limit,
                                              max_new_tokens=max_new_tokens,
                                              truncate=truncate, meta=meta)
        if max_memory is not None:  # the encoder's positions dominate what the trace keeps
            from attnlab.tracing.budget import check_trace_budget

            frames = math.ceil((inp.window or inp.seconds) / inp.frame_seconds - 1e-9)
            check_trace_budget(net, frames + len(ids), max_memory, what="audio",
                               keep_weights=not qkv, keep_context=context)
        with capture(net, qkv=qkv, context=context) as cap:
            _run(getattr(net, "model", net), name, f"its audio and {len(ids)} decoder tokens",
                 **inp.kwargs, decoder_input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        net.train(was_training)
    enc = [r for r in cap.records if ".encoder." in f".{r.name}."]
    if not enc:
        raise ValueError(f"{name}: no encoder attention was recorded; refused rather than "
                         "incomplete")
    positions = enc[0].dims[1]
    meta["input"] = _speech_input_meta(inp, audio, name, positions)
    stacks = _speech_stacks(cap, name, time_labels(positions, inp.frame_seconds),
                            id_labels(tok, ids), ids)
    cap.records = []
    return StackedTrace(stacks, model=name, text=None, target=target_text or None, meta=meta)
