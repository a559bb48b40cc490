"""AttentionTrace: what one forward pass of a model attended to, per layer and head.

Tensors (all float32 on the CPU, ``L`` layers, ``H`` query heads, ``N`` tokens)::

    weights  (L, H, Lq, Lk)   softmax probabilities (rows sum to 1, or 0 if fully masked)
    q        (L, H, Lq, d)    per-head queries, after RoPE where the model uses it
    k        (L, H, Lk, d)    per-head keys (grouped-query models: repeated per query head)
    v        (L, H, Lk, dv)   per-head values
    scores   (L, H, Lq, Lk)   scaled scores + mask, before the softmax (-inf where masked)
    context  (L, H, Lq, dv)   per-head outputs, weights @ v

Only ``weights`` is required. Files are safetensors with the JSON metadata stored in the
header under the key ``"attnlab"`` and a ``format_version``; no pickle anywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab._io import atomic_write_bytes

__all__ = ["AttentionTrace", "TraceFormatError", "FORMAT_VERSION"]

FORMAT_VERSION = 1
_OPTIONAL = ("q", "k", "v", "scores", "context")


class TraceFormatError(ValueError):
    """A file that is not a readable attnlab trace (corrupt, foreign, or too new)."""


@dataclass
class AttentionTrace:
    """Attention of one input through one model.

    >>> w = torch.softmax(torch.randn(2, 3, 4, 4), dim=-1)
    >>> t = AttentionTrace(tokens=["a", "b", "c", "d"], weights=w, model="toy")
    >>> t.num_layers, t.num_heads, t.seq_len
    (2, 3, 4)
    """

    tokens: list[str]
    weights: Tensor  # (L, H, Lq, Lk)
    q: Tensor | None = None
    k: Tensor | None = None
    v: Tensor | None = None
    scores: Tensor | None = None
    context: Tensor | None = None
    model: str = ""
    causal: bool = False
    scale: float | None = None
    token_ids: list[int] | None = None
    key_tokens: list[str] | None = None  # for cross-attention; default = tokens
    text: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.weights, Tensor) or self.weights.dim() != 4:
            got = (tuple(self.weights.shape) if isinstance(self.weights, Tensor)
                   else type(self.weights).__name__)
            raise ValueError(f"weights must be a tensor (L, H, Lq, Lk), got {got}")
        self.tokens = [str(t) for t in self.tokens]
        nl, nh, lq, lk = self.weights.shape
        keys = self.key_tokens if self.key_tokens is not None else self.tokens
        if len(self.tokens) != lq or len(keys) != lk:
            raise ValueError(
                f"weights (L, H, Lq, Lk)={tuple(self.weights.shape)} do not match "
                f"{len(self.tokens)} query tokens and {len(keys)} key tokens"
            )
        for name in _OPTIONAL:
            t = getattr(self, name)
            if t is None:
                continue
            if not isinstance(t, Tensor) or t.dim() != 4 or tuple(t.shape[:2]) != (nl, nh):
                got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"{name} must be a tensor with shape ({nl}, {nh}, ., .), got {got}")
            n = lq if name in ("q", "context") else lk
            if name == "scores":
                if tuple(t.shape[2:]) != (lq, lk):
                    raise ValueError(
                        f"scores must have shape {(nl, nh, lq, lk)}, got {tuple(t.shape)}")
            elif t.shape[2] != n:
                raise ValueError(f"{name} must have length {n} in dim 2, got {tuple(t.shape)}")
        if self.token_ids is not None and len(self.token_ids) != lq:
            raise ValueError(f"token_ids has {len(self.token_ids)} entries for {lq} tokens")

    # -- shape ----------------------------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def num_heads(self) -> int:
        return self.weights.shape[1]

    @property
    def seq_len(self) -> int:
        return self.weights.shape[2]

    @property
    def head_dim(self) -> int | None:
        return None if self.q is None else self.q.shape[-1]

    def head(self, layer: int, head: int) -> Tensor:
        """(Lq, Lk) weights of one head; negative indices count from the end."""
        nl, nh = self.num_layers, self.num_heads
        if not -nl <= layer < nl:
            raise IndexError(f"layer must be in [0, {nl}), got {layer}")
        if not -nh <= head < nh:
            raise IndexError(f"head must be in [0, {nh}), got {head}")
        return self.weights[layer, head]

    # -- views ----------------------------------------------------------------------------

    def merge_tokens(self, groups: list[list[int]], labels: list[str] | None = None, *,
                     rule: str = "weights summed over keys, averaged over queries"
                     ) -> AttentionTrace:
        """Merge consecutive tokens (e.g. byte pieces of one character) into one.

        With groups ``G``, the merged weight from group ``a`` to group ``b`` is
        ``W'[a, b] = mean_{i in a} sum_{j in b} W[i, j]``: summed over keys, averaged over
        queries, so every row still sums to 1. q, k, v, scores and context belong to the
        pieces and are dropped; ``meta["merged"]`` records the groups and the rule.

        >>> w = torch.tensor([[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]]],
        ...                  dtype=torch.float64)
        >>> t = AttentionTrace(tokens=["a", "b1", "b2"], weights=w).merge_tokens(
        ...     [[0], [1, 2]], ["a", "b"])
        >>> t.tokens, t.weights[0, 0].tolist()
        (['a', 'b'], [[1.0, 0.0], [0.35, 0.65]])
        """
        n = self.seq_len
        if self.key_tokens is not None:
            raise ValueError("merge_tokens needs self-attention (no separate key_tokens)")
        flat = [i for g in groups for i in g]
        if flat != list(range(n)):
            raise ValueError(
                f"groups must split 0..{n - 1} into consecutive runs, got {groups}"
            )
        if labels is None:
            labels = ["".join(self.tokens[i] for i in g) for g in groups]
        if len(labels) != len(groups):
            raise ValueError(f"{len(labels)} labels for {len(groups)} groups")
        m = torch.zeros(len(groups), n, dtype=self.weights.dtype)  # (G, N) membership
        for a, g in enumerate(groups):
            m[a, g] = 1.0
        w = self.weights @ m.T  # (L, H, N, G): summed over keys
        w = (m / m.sum(-1, keepdim=True)) @ w  # (L, H, G, G): averaged over queries
        ids = None
        meta = dict(self.meta)
        meta["merged"] = {"rule": rule, "groups": groups, "pieces": list(self.tokens),
                          "piece_ids": self.token_ids}
        return AttentionTrace(tokens=list(labels), weights=w, model=self.model,
                              causal=self.causal, scale=self.scale, token_ids=ids,
                              text=self.text, meta=meta)

    # -- files ----------------------------------------------------------------------------

    def _metadata(self) -> dict[str, Any]:
        return {
            "format": "attnlab.AttentionTrace",
            "format_version": FORMAT_VERSION,
            "tokens": self.tokens,
            "key_tokens": self.key_tokens,
            "token_ids": self.token_ids,
            "model": self.model,
            "causal": self.causal,
            "scale": self.scale,
            "text": self.text,
            "meta": self.meta,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a ``.safetensors`` file atomically (temp file, fsync, rename)."""
        from safetensors.torch import save

        path = Path(path)
        tensors = {"weights": self.weights}
        for name in _OPTIONAL:
            t = getattr(self, name)
            if t is not None:
                tensors[name] = t
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
        blob = save(tensors, metadata={"attnlab": json.dumps(self._metadata(),
                                                             ensure_ascii=False)})
        atomic_write_bytes(path, blob)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AttentionTrace:
        """Read a trace written by :meth:`save`; anything else raises TraceFormatError."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no trace file at {path}")
        try:
            with safe_open(str(path), framework="pt") as f:
                header = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as exc:  # safetensors raises several types for bad bytes
            raise TraceFormatError(f"{path} is not a safetensors file ({exc})") from None
        raw = header.get("attnlab")
        if raw is None:
            raise TraceFormatError(f"{path} is a safetensors file but not an attnlab trace")
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{path}: corrupt attnlab metadata ({exc})") from None
        if meta.get("format") != "attnlab.AttentionTrace":
            raise TraceFormatError(f"{path} holds {meta.get('format')!r}, not an AttentionTrace")
        version = meta.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise TraceFormatError(
                f"{path} has format_version {version!r}; this attnlab reads up to {FORMAT_VERSION}"
            )
        if "weights" not in tensors:
            raise TraceFormatError(f"{path} has no 'weights' tensor")
        try:
            return cls(
                tokens=meta["tokens"], weights=tensors["weights"],
                **{n: tensors.get(n) for n in _OPTIONAL},
                model=meta.get("model", ""), causal=bool(meta.get("causal", False)),
                scale=meta.get("scale"), token_ids=meta.get("token_ids"),
                key_tokens=meta.get("key_tokens"), text=meta.get("text"),
                meta=meta.get("meta") or {},
            )
        except (KeyError, ValueError) as exc:
            raise TraceFormatError(f"{path}: inconsistent trace ({exc})") from None

    def _repr_html_(self) -> str:
        """Jupyter shows the interactive explorer (self-contained, no network)."""
        from attnlab.viz.explorer import Explorer

        return Explorer(self).to_html()

    def __repr__(self) -> str:
        extra = [n for n in _OPTIONAL if getattr(self, n) is not None]
        return (f"AttentionTrace(model={self.model!r}, layers={self.num_layers}, "
                f"heads={self.num_heads}, tokens={self.seq_len}, causal={self.causal}, "
                f"with={extra})")
