"""Run directories and checkpoints: safetensors + JSON only, written atomically.

A run directory holds::

    config.json              {"format_version": 1, "kind": "attnlab.train.run", "config": {...},
                              "task": {...}, "model": {...GPTConfig...}}
    checkpoint.safetensors   weights, AdamW state, RNG state and step, all tensors; the JSON
                             metadata carries the config and a SHA-256 of every tensor
    metrics.jsonl            one JSON object per logged step
    training.png             loss and accuracy against step

Nothing here uses pickle: loading an untrusted checkpoint cannot run code. A file that is
truncated, altered, or made for another config is refused with :class:`CheckpointError`.
Writes go to a temp file in the same folder, are fsynced, then renamed over the old file,
so a process killed at any instant leaves either the old checkpoint or the new one.

>>> import tempfile, torch
>>> from attnlab.train.config import TrainConfig
>>> cfg = TrainConfig.for_task("copy", n_embd=16, n_head=2, n_layer=1)
>>> model = build_model(cfg)
>>> opt = torch.optim.AdamW(model.parameters())
>>> d = tempfile.mkdtemp()
>>> save_checkpoint(d, model, opt, step=0, config=cfg)
>>> load_checkpoint(d, model, opt, config=cfg)
0
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor, nn

from attnlab._io import atomic_write_bytes
from attnlab.train.config import TrainConfig
from attnlab.train.tasks import Task, get_task

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "RunTokenizer",
    "atomic_write_bytes",
    "build_model",
    "is_run_dir",
    "load_checkpoint",
    "load_run",
    "read_config",
    "save_checkpoint",
    "write_config",
]

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
CHECKPOINT_NAME = "checkpoint.safetensors"
METRICS_NAME = "metrics.jsonl"
PLOT_NAME = "training.png"
_RUN_KIND = "attnlab.train.run"
_CKPT_KIND = "attnlab.train.checkpoint"


class CheckpointError(ValueError):
    """A checkpoint or run directory that cannot be used (corrupt, mismatched, missing)."""


def build_model(config: TrainConfig) -> nn.Module:
    """A freshly initialized ``GPT`` for ``config`` (seeded by ``config.seed``)."""
    from attnlab.nn.transformer import GPT

    task = get_task(config.task)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return GPT(config.gpt_config(task.vocab_size, task.seq_len - 1))


# --------------------------------------------------------------------------------------
# atomic files
# --------------------------------------------------------------------------------------




def remove_stale_temps(run_dir: str | os.PathLike[str]) -> None:
    """Delete temp files a killed writer left behind (they are never read)."""
    for p in Path(run_dir).glob(".*.tmp"):
        p.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------


def _task_json(task: Task) -> dict[str, Any]:
    return {"name": task.name, "relation": task.relation, "symbols": list(task.symbols),
            "seq_len": task.seq_len, "n_specials": task.n_specials}


def write_config(run_dir: str | os.PathLike[str], config: TrainConfig) -> None:
    task = get_task(config.task)
    doc = {
        "format_version": FORMAT_VERSION,
        "kind": _RUN_KIND,
        "config": config.to_dict(),
        "task": _task_json(task),
        "model": {"class": "attnlab.GPT",
                  **asdict(config.gpt_config(task.vocab_size, task.seq_len - 1))},
    }
    atomic_write_bytes(Path(run_dir) / CONFIG_NAME,
                       (json.dumps(doc, indent=2) + "\n").encode("utf-8"))


def read_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """The run's :class:`TrainConfig`; ``CheckpointError`` if config.json is not ours."""
    path = Path(run_dir) / CONFIG_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file; is {run_dir} a training run?") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable config ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != _RUN_KIND:
        raise CheckpointError(f"{path}: not an attnlab training run (kind={doc.get('kind')!r})"
                              if isinstance(doc, dict) else f"{path}: not a JSON object")
    if doc.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {doc.get('format_version')!r} is not "
                              f"supported (expected {FORMAT_VERSION})")
    try:
        return TrainConfig.from_dict(doc["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: invalid config ({exc})") from None


# --------------------------------------------------------------------------------------
# checkpoint.safetensors
# --------------------------------------------------------------------------------------


def _unique_state(model: nn.Module) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The state dict without aliases (tied weights stored once) and the alias map."""
    tensors: dict[str, Tensor] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    tied: dict[str, str] = {}
    for name, t in model.state_dict().items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key in seen:
            tied[name] = seen[key]
        else:
            seen[key] = name
            tensors[name] = t
    return tensors, tied


def _digest(tensors: dict[str, Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def save_checkpoint(run_dir: str | os.PathLike[str], model: nn.Module,
                    optimizer: torch.optim.Optimizer, *, step: int,
                    config: TrainConfig) -> None:
    """Write weights, optimizer state, RNG state and ``step`` atomically to the run dir."""
    weights, tied = _unique_state(model)
    tensors: dict[str, Tensor] = {f"model/{k}": v.detach().cpu() for k, v in weights.items()}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, Tensor):
                    tensors[f"optim/{names[id(p)]}/{key}"] = value.detach().cpu()
    tensors["rng/torch_cpu"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng/torch_cuda"] = torch.cuda.get_rng_state()
    tensors["step"] = torch.tensor(step, dtype=torch.int64)
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    meta = {
        "format_version": str(FORMAT_VERSION),
        "kind": _CKPT_KIND,
        "step": str(step),
        "config": json.dumps(config.to_dict(), sort_keys=True),
        "tied": json.dumps(tied, sort_keys=True),
        "optimizer": json.dumps({"class": type(optimizer).__name__, "param_groups": groups},
                                default=str),
        "sha256": _digest(tensors),
    }
    atomic_write_bytes(Path(run_dir) / CHECKPOINT_NAME, st_save(tensors, metadata=meta))


def _read_checkpoint(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no checkpoint to resume from") from None
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        meta = header.get("__metadata__") or {}
        tensors = st_load(data)
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"{path}: corrupt or not a safetensors file ({exc})") from None
    if meta.get("kind") != _CKPT_KIND:
        raise CheckpointError(f"{path}: not an attnlab training checkpoint "
                              f"(kind={meta.get('kind')!r})")
    if meta.get("format_version") != str(FORMAT_VERSION):
        raise CheckpointError(f"{path}: format_version {meta.get('format_version')!r} is not "
                              f"supported (expected {FORMAT_VERSION})")
    if meta.get("sha256") != _digest(tensors):
        raise CheckpointError(f"{path}: checksum mismatch, the file is corrupt")
    return tensors, meta


def checkpoint_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """The config recorded inside the checkpoint (verifies the file)."""
    path = Path(run_dir) / CHECKPOINT_NAME
    _, meta = _read_checkpoint(path)
    return TrainConfig.from_dict(json.loads(meta["config"]))


def load_checkpoint(run_dir: str | os.PathLike[str], model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None, *,
                    config: TrainConfig | None = None, restore_rng: bool = True) -> int:
    """Load the checkpoint into ``model`` (and ``optimizer``); returns its step.

    ``config``: the config the caller is about to run; a checkpoint made for a different
    task, model shape, seed, batch or optimizer setting is refused (only the fields in
    ``RESUME_MAY_CHANGE`` may differ).
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    tensors, meta = _read_checkpoint(path)
    saved = TrainConfig.from_dict(json.loads(meta["config"]))
    if config is not None:
        diff = config.mismatches(saved)
        if diff:
            raise CheckpointError(f"{path}: made for a different run; differing settings "
                                  f"(requested != checkpoint): {'; '.join(diff)}")
    weights = {k[len("model/"):]: v for k, v in tensors.items() if k.startswith("model/")}
    tied = json.loads(meta.get("tied", "{}"))
    for alias, target in tied.items():
        if target in weights:
            weights[alias] = weights[target]
    expected = set(model.state_dict())
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise CheckpointError(f"{path}: weights do not fit the model (missing {missing}, "
                              f"unexpected {extra})")
    for name, t in model.state_dict().items():
        if tuple(weights[name].shape) != tuple(t.shape):
            raise CheckpointError(f"{path}: {name} has shape {tuple(weights[name].shape)}, "
                                  f"the model expects {tuple(t.shape)}")
    model.load_state_dict(weights)
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                prefix = f"optim/{names[id(p)]}/"
                state = {k[len(prefix):]: v.clone() for k, v in tensors.items()
                         if k.startswith(prefix)}
                if state:
                    optimizer.state[p] = {k: v.to(p.device) if k != "step" else v
                                          for k, v in state.items()}
    if restore_rng:
        torch.set_rng_state(tensors["rng/torch_cpu"])
        if "rng/torch_cuda" in tensors and torch.cuda.is_available():
            torch.cuda.set_rng_state(tensors["rng/torch_cuda"])
    return int(tensors["step"])


# --------------------------------------------------------------------------------------
# using a trained run: is_run_dir / load_run
# --------------------------------------------------------------------------------------


class RunTokenizer:
    """Text <-> ids for a task's symbols: whitespace-separated symbols such as ``3 17 5``.

    The task's sequences start with ``<bos>``; ``encode`` prepends it when the text does not.

    >>> tok = RunTokenizer(get_task("induction"))
    >>> ids = tok.encode("3 17 5 3")
    >>> tok.decode_tokens(ids)
    ['<bos>', '3', '17', '5', '3']
    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self.name = f"attnlab-train:{task.name}"
        self.symbols = task.symbols
        self._ids = {s: i for i, s in enumerate(task.symbols)}
        self.bos_id = self.bos_token_id = self._ids["<bos>"]
        self.all_special_ids = list(range(task.n_specials))

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        pieces = text.split()
        unknown = [p for p in pieces if p not in self._ids]
        if unknown:
            shown = ", ".join(self.symbols[:8]) + ", ..."
            raise ValueError(f"{self.name}: unknown symbol(s) {unknown[:5]}; the vocabulary "
                             f"is {self.vocab_size} symbols: {shown}")
        ids = [self._ids[p] for p in pieces]
        return ids if ids[:1] == [self.bos_id] else [self.bos_id] + ids

    def decode_tokens(self, ids: list[int] | Tensor) -> list[str]:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"{self.name}: token id(s) {bad[:5]} outside the vocabulary "
                             f"[0, {self.vocab_size})")
        return [self.symbols[i] for i in ids]

    def decode(self, ids: list[int] | Tensor) -> str:
        return " ".join(self.decode_tokens(ids))

    def example_text(self, seed: int = 0) -> str:
        """A held-out sequence of the task, as text (a good input to explore)."""
        b = self.task.batch(0, 1, seed, split="eval")
        return self.decode(b.inputs[0])  # exactly one model context (block_size tokens)

    def __repr__(self) -> str:
        return f"RunTokenizer({self.task.name!r}, vocab_size={self.vocab_size})"


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` is a training run directory (config.json of ours + checkpoint)."""
    p = Path(path)
    if not (p.is_dir() and (p / CONFIG_NAME).is_file() and (p / CHECKPOINT_NAME).is_file()):
        return False
    try:
        doc = json.loads((p / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == _RUN_KIND


def load_run(path: str | os.PathLike[str]) -> tuple[nn.Module, RunTokenizer]:
    """The trained model (eval mode, CPU) and its tokenizer from a run directory."""
    if not is_run_dir(path):
        raise CheckpointError(f"{path}: not an attnlab training run (expected {CONFIG_NAME} and "
                              f"{CHECKPOINT_NAME} written by `attnlab train`)")
    config = read_config(path)
    model = build_model(config)
    load_checkpoint(path, model, config=config, restore_rng=False)
    model.eval()
    return model, RunTokenizer(get_task(config.task))
