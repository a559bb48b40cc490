"""A survey process's saved state: where it lies, writing it atomically, reading it back,
and resuming from it (or refusing a state that another run left).

Each process writes its sums with a fingerprint of corpus, model and settings, the next
batch to run and whether it is done to ``OUT/state/rank-R-of-W.safetensors``; the tensors
are the float64 sums of :class:`~attnlab.analysis.survey_result.SurveySums`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict, cast

from torch import Tensor

from attnlab._io import atomic_write_bytes, remove_stale_temps
from attnlab._text import one_line

__all__ = ["STATE_DIR", "StateMeta", "read_state", "resume", "state_path", "write_state"]

STATE_DIR = "state"


class StateMeta(TypedDict):
    """What a state file says of the sums it holds (its safetensors metadata, as JSON)."""

    fingerprint: str  # the corpus, settings, model and scores, hashed
    rank: int
    world: int
    split: str  # how the processes share the work: "batches" or "heads"
    format: str  # :data:`attnlab.analysis.survey_result.FORMAT`
    next_batch: int  # the first global batch not yet added
    done: bool


def state_path(out: Path, rank: int, world: int) -> Path:
    """The state file of process ``rank`` of ``world`` under the survey's folder ``out``."""
    return out / STATE_DIR / f"rank-{rank}-of-{world}.safetensors"


def write_state(path: Path, tensors: dict[str, Tensor], meta: StateMeta) -> None:
    """Write ``tensors`` and ``meta`` (JSON) to ``path`` atomically."""
    from safetensors.torch import save

    data = save({k: v.contiguous() for k, v in tensors.items()},
                metadata={"attnlab": json.dumps(meta, sort_keys=True)})
    atomic_write_bytes(path, data)


def read_state(path: Path) -> tuple[dict[str, Tensor], StateMeta]:
    """The tensors and meta of a state file; a damaged file is a ``ValueError`` saying how
    to go on. The meta is trusted to be :func:`write_state`'s once its ``fingerprint``
    matches (:func:`resume` checks it first)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            # the metadata write_state wrote (a file without any gives {}: no fingerprint)
            meta = cast(StateMeta, json.loads((f.metadata() or {}).get("attnlab", "{}")))
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # a damaged file: say which and how to go on
        raise ValueError(f"{path}: not a readable survey state ({type(exc).__name__}: "
                         f"{one_line(exc)}); delete it to start that process over") from exc
    return tensors, meta


def resume(out: Path, rank: int, world: int, fingerprint: str, restart: bool
           ) -> tuple[dict[str, Tensor] | None, int, bool]:
    """This process's saved sums, the next batch and whether it was done: ``(None, 0,
    False)`` when there is no state (or ``restart`` discards it). A state of another
    number of processes, or of another corpus, model or settings (``fingerprint``), is
    refused with a ``ValueError`` saying what to do."""
    path = state_path(out, rank, world)
    remove_stale_temps(path.parent, [path.name])  # a write cut short by a kill
    if restart:
        path.unlink(missing_ok=True)
    folder = out / STATE_DIR
    others = sorted(p.name for p in folder.glob("rank-*-of-*.safetensors")
                    if not p.name.endswith(f"-of-{world}.safetensors")) if (
        folder.is_dir() and not restart) else []
    if others:
        raise ValueError(f"{out}: holds the state of a run with another number of processes "
                         f"({', '.join(others)}); resume it with as many processes, or use "
                         f"a new --out (or delete {folder})")
    if not path.is_file():
        return None, 0, False
    tensors, meta = read_state(path)
    if meta.get("fingerprint") != fingerprint:
        raise ValueError(f"{out}: holds the state of a survey of another corpus, model "
                         f"or settings; use a new --out, or delete {folder} to "
                         f"start this one over")
    return tensors, int(meta["next_batch"]), bool(meta["done"])
