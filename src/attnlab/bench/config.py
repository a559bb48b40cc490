"""What ``attnlab bench`` measures: :class:`BenchConfig`.

>>> BenchConfig().sizes, BenchConfig().backward
((256, 1024, 4096), False)
>>> BenchConfig.quick().sizes
(256, 1024)
>>> BenchConfig(sizes=(0,))
Traceback (most recent call last):
...
ValueError: sizes must be positive ints, got [0]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch

from attnlab._errors import check_int, check_optional_int

__all__ = ["BenchConfig", "BenchConfigJSON"]


class BenchConfigJSON(TypedDict):
    """A :class:`BenchConfig` as plain JSON (:meth:`BenchConfig.to_json`): every field by
    name, tuples as lists."""

    sizes: list[int]
    batch: int
    heads: int
    head_dim: int
    repeats: int
    backward: bool
    causal: list[bool]
    max_weights_bytes: int
    long_n: int
    long_rows: int | None
    mha_embed_dim: int
    gemm_n: int
    devices: list[str]
    seed: int


def _default_devices() -> tuple[str, ...]:
    return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. The defaults are the table of docs/benchmarks.md, about two minutes
    on two quiet cores (forward only; ``backward=True`` and longer ``sizes`` for more)."""

    sizes: tuple[int, ...] = (256, 1024, 4096)  # N: from cache-sized to where N² dominates
    batch: int = 1  # B = 1: the latency case; heads give the parallel work
    heads: int = 8  # H = 8, d = 64: a GPT-2-small-like head layout
    head_dim: int = 64
    repeats: int = 3  # the median of 3 shrugs off one preempted run
    backward: bool = False  # also forward+backward (about 3.5x the forward's time)
    causal: tuple[bool, ...] = (False, True)
    #: explicit/naive/torch-MHA need B·H·N² weights (naive several copies): skip above this
    max_weights_bytes: int = 1 << 30
    long_n: int = 32768  # chunked: length of the long probe (naive weights would be 32 GB)
    #: the probe runs the last this many query rows against all long_n keys: the same tiles
    #: and the same time per row as all of them, an eighth of the wait (None = all rows)
    long_rows: int | None = 4096
    mha_embed_dim: int = 512  # E for the module comparison (H = heads)
    gemm_n: int = 2048  # the GEMM peak is measured on (n x n) @ (n x n)
    devices: tuple[str, ...] = field(default_factory=_default_devices)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1
                                 for s in self.sizes):
            raise ValueError(f"sizes must be positive ints, got {list(self.sizes)}")
        for name in ("batch", "heads", "head_dim", "repeats", "long_n", "mha_embed_dim",
                     "gemm_n"):
            check_int(name, getattr(self, name), minimum=1)
        check_optional_int("long_rows (at most long_n)", self.long_rows, minimum=1,
                           maximum=self.long_n)

    @classmethod
    def quick(cls, **kw: Any) -> BenchConfig:
        """A smoke run of ~20 s: two sizes, forward only, the long probe on 256 query rows."""
        base: dict[str, Any] = dict(sizes=(256, 1024), long_rows=256, gemm_n=1024,
                                    devices=("cpu",))
        base.update(kw)
        return cls(**base)

    def to_json(self) -> BenchConfigJSON:
        """The config as plain JSON (tuples as lists); ``BenchConfig.from_json`` reads it."""
        return {"sizes": list(self.sizes), "batch": self.batch, "heads": self.heads,
                "head_dim": self.head_dim, "repeats": self.repeats, "backward": self.backward,
                "causal": list(self.causal), "max_weights_bytes": self.max_weights_bytes,
                "long_n": self.long_n, "long_rows": self.long_rows,
                "mha_embed_dim": self.mha_embed_dim, "gemm_n": self.gemm_n,
                "devices": list(self.devices), "seed": self.seed}

    @classmethod
    def from_json(cls, doc: BenchConfigJSON) -> BenchConfig:
        """The config :meth:`to_json` wrote (lists back to tuples)."""
        return cls(sizes=tuple(doc["sizes"]), batch=doc["batch"], heads=doc["heads"],
                   head_dim=doc["head_dim"], repeats=doc["repeats"], backward=doc["backward"],
                   causal=tuple(doc["causal"]), max_weights_bytes=doc["max_weights_bytes"],
                   long_n=doc["long_n"], long_rows=doc["long_rows"],
                   mha_embed_dim=doc["mha_embed_dim"], gemm_n=doc["gemm_n"],
                   devices=tuple(doc["devices"]), seed=doc["seed"])
