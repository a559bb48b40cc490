"""Joining a ``torch.distributed`` process group under ``torchrun``: the one setup the
survey, the trainer and every distributed analysis use.

``join(device)`` reads torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``) and returns a :class:`Group`: one process when torchrun did not start
this one, else the group joined with nccl when this node has a GPU for each local process
(or ``device="cuda"`` asks for it) and gloo otherwise. ``leave(group)`` destroys the group
only if ``join`` created it. torch is imported inside the functions (layer 0 loads none).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["Group", "join", "leave"]

_DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Group:
    """Where this process stands: its ``rank`` in ``world`` processes, the ``backend``
    (None for one process), the ``device`` its tensors belong on, and whether ``join``
    created the group (``joined``: then ``leave`` destroys it)."""

    rank: int
    world: int
    backend: str | None
    device: Any
    joined: bool

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def _launched() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def join(device: str = "auto") -> Group:
    """Join torchrun's process group (or stand alone); ``device`` is ``"auto"``,
    ``"cpu"`` or ``"cuda"``."""
    import torch
    import torch.distributed as dist

    if device not in _DEVICES:
        raise ValueError(f"device: expected one of {', '.join(_DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for, but torch sees no GPU")
    if not _launched() or int(os.environ["WORLD_SIZE"]) <= 1:
        dev = torch.device("cuda" if device == "cuda" else "cpu")
        return Group(0, 1, None, dev, False)
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available()
                                and torch.cuda.device_count() >= local_world)
    if cuda:
        torch.cuda.set_device(local)
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("nccl" if cuda else "gloo")
    backend = str(dist.get_backend())
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    return Group(dist.get_rank(), dist.get_world_size(), backend, dev, joined)


def leave(group: Group) -> None:
    """Destroy the process group if :func:`join` created it."""
    if group.joined:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
