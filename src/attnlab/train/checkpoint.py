"""Run directories and checkpoints: safetensors + JSON only, written atomically.

A run directory holds::

    config.json              {"format_version": 1, "kind": "attnlab.train.run", "config": {...},
                              "task": {...}, "model": {...GPTConfig...}}
    checkpoint.safetensors   weights, AdamW state, RNG state and step, all tensors; the JSON
                             metadata carries the config and a SHA-256 of every tensor
    metrics.jsonl            one JSON object per logged step
    training.png             loss and accuracy against step

Nothing here uses pickle: loading an untrusted checkpoint cannot run code. A file that is
truncated, altered, or made for another config is refused with :class:`CheckpointError`,
in one line: the metadata (kind, version, checksum, ``config``, ``step``) and the shape,
dtype and finiteness of every weight, optimizer and RNG tensor are checked against the
model before anything is loaded. Writes go to a temp file in the same folder, are
fsynced, then renamed over the old file, so a process killed at any instant leaves either
the old checkpoint or the new one (and at most a ``.NAME.attnlab-XXXXXXXX.tmp`` file, which
the next run removes; no other file is ever deleted).

>>> import tempfile, torch
>>> from attnlab.train.config import TrainConfig
>>> cfg = TrainConfig.for_task("copy", embed_dim=16, num_heads=2, num_layers=1)
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
from typing import TypedDict, cast

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor, nn

from attnlab._errors import Error
from attnlab._io import atomic_write_bytes
from attnlab._io import remove_stale_temps as _remove_temps
from attnlab.train.config import TrainConfig, TrainConfigDict
from attnlab.train.tasks import Task, get_task

__all__ = [
    "FORMAT_VERSION",
    "RUN_FILES",
    "CheckpointError",
    "RunTokenizer",
    "build_model",
    "is_run_config",
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
#: Every file ``attnlab train`` writes into a run directory (and nothing else).
RUN_FILES = (CONFIG_NAME, CHECKPOINT_NAME, METRICS_NAME, PLOT_NAME)
_RUN_KIND = "attnlab.train.run"
_CKPT_KIND = "attnlab.train.checkpoint"


class CheckpointError(Error):
    """A checkpoint or run directory that cannot be used (corrupt, mismatched, missing)."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def build_model(config: TrainConfig) -> nn.Module:
    """A freshly initialized ``GPT`` for ``config`` (seeded by ``config.seed``); with
    ``config.token_shift``, :class:`attnlab.train.tokenshift.GPT`."""
    from attnlab.nn.transformer import GPT

    model_class: type[GPT] = GPT
    if config.token_shift:  # a subclass of the plain GPT
        from attnlab.train.tokenshift import GPT as TokenShiftGPT

        model_class = TokenShiftGPT

    task = get_task(config.task)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return model_class(config.gpt_config(task.vocab_size, task.seq_len - 1))


def remove_stale_temps(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Delete the temp files a killed writer left for the run's own files (never read).

    Only attnlab's exact temp names for :data:`RUN_FILES` are removed; any other file in the
    folder, hidden or not, is left alone.
    """
    return _remove_temps(run_dir, RUN_FILES)


# --------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------


class TaskJSON(TypedDict):
    """The task of a run, as its config.json records it (for people: a run is rebuilt
    from its ``config``)."""

    name: str
    relation: str
    symbols: list[str]  # the text of each token id
    seq_len: int
    n_specials: int


def _task_json(task: Task) -> TaskJSON:
    return {"name": task.name, "relation": task.relation, "symbols": list(task.symbols),
            "seq_len": task.seq_len, "n_specials": task.n_specials}


def write_config(run_dir: str | os.PathLike[str], config: TrainConfig) -> None:
    task = get_task(config.task)
    doc = {
        "format_version": FORMAT_VERSION,
        "kind": _RUN_KIND,
        "config": config.to_dict(),
        "task": _task_json(task),
        "model": {"class": ("attnlab.train.tokenshift.GPT" if config.token_shift
                            else "attnlab.GPT"),
                  **asdict(config.gpt_config(task.vocab_size, task.seq_len - 1))},
    }
    atomic_write_bytes(Path(run_dir) / CONFIG_NAME,
                       (json.dumps(doc, indent=2) + "\n").encode("utf-8"))


def _config_from_json(obj: object, where: str) -> TrainConfig:
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where}: 'config' must be a JSON object, got "
                              f"{type(obj).__name__}")
    try:
        # a JSON object that claims to be a TrainConfig's fields: from_dict checks them
        return TrainConfig.from_dict(cast(TrainConfigDict, obj))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{where}: invalid 'config' ({_one_line(exc)})") from None


def read_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """The run's :class:`TrainConfig`; ``CheckpointError`` if config.json is not ours."""
    path = Path(run_dir) / CONFIG_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file; is {run_dir} a training run?") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: unreadable config ({_one_line(exc)})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    if doc.get("kind") != _RUN_KIND:
        raise CheckpointError(f"{path}: not an attnlab training run (kind={doc.get('kind')!r})")
    if doc.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {doc.get('format_version')!r} is not "
                              f"supported (expected {FORMAT_VERSION})")
    if "config" not in doc:
        raise CheckpointError(f"{path}: missing field 'config'")
    return _config_from_json(doc["config"], str(path))


def is_run_config(path: str | os.PathLike[str]) -> bool:
    """True if ``path/config.json`` exists and was written by ``attnlab train``."""
    try:
        doc = json.loads((Path(path) / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == _RUN_KIND


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
    """The tensors and metadata of an intact attnlab checkpoint (kind, version, checksum)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no checkpoint to resume from") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: unreadable ({exc.strerror})") from None
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict):
            raise ValueError("__metadata__ is not an object")
        tensors = st_load(data)
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"{path}: corrupt or not a safetensors file "
                              f"({_one_line(exc)[:200]})") from None
    if meta.get("kind") != _CKPT_KIND:
        raise CheckpointError(f"{path}: not an attnlab training checkpoint "
                              f"(kind={meta.get('kind')!r})")
    if meta.get("format_version") != str(FORMAT_VERSION):
        raise CheckpointError(f"{path}: format_version {meta.get('format_version')!r} is not "
                              f"supported (expected {FORMAT_VERSION})")
    if "sha256" not in meta:
        raise CheckpointError(f"{path}: missing field 'sha256' in the metadata")
    if meta["sha256"] != _digest(tensors):
        raise CheckpointError(f"{path}: checksum mismatch, the file is corrupt")
    return tensors, meta


def _saved_config(path: Path, meta: dict[str, str]) -> TrainConfig:
    if "config" not in meta:
        raise CheckpointError(f"{path}: missing field 'config' in the metadata")
    try:
        obj = json.loads(meta["config"])
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: field 'config' is not JSON ({_one_line(exc)})") from None
    return _config_from_json(obj, str(path))


def _saved_step(path: Path, tensors: dict[str, Tensor], meta: dict[str, str]) -> int:
    if "step" not in tensors:
        raise CheckpointError(f"{path}: missing tensor 'step'")
    t = tensors["step"]
    if t.dtype != torch.int64 or t.dim() != 0:
        raise CheckpointError(f"{path}: tensor 'step' must be an int64 scalar, got "
                              f"{t.dtype} of shape {tuple(t.shape)}")
    step = int(t)
    if step < 0:
        raise CheckpointError(f"{path}: tensor 'step' must be >= 0, got {step}")
    if "step" not in meta:
        raise CheckpointError(f"{path}: missing field 'step' in the metadata")
    if meta["step"] != str(step):
        raise CheckpointError(f"{path}: field 'step' ({meta['step']!r}) disagrees with the "
                              f"tensor 'step' ({step})")
    return step


def _describe(t: Tensor) -> str:
    return f"{t.dtype} {tuple(t.shape)}"


def _expect(path: Path, name: str, t: Tensor, shape: tuple[int, ...], dtype: torch.dtype,
            *, finite: bool = True) -> None:
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        raise CheckpointError(f"{path}: {name} is {_describe(t)}, the model expects "
                              f"{dtype} {tuple(shape)}")
    if finite and t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise CheckpointError(f"{path}: {name} holds NaN or infinite values")


def _optim_spec(optimizer: torch.optim.Optimizer | None, p: Tensor
                ) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """What Adam/AdamW keep per parameter (the optimizer attnlab train uses)."""
    spec = {"step": ((), torch.float32), "exp_avg": (tuple(p.shape), p.dtype),
            "exp_avg_sq": (tuple(p.shape), p.dtype)}
    groups = optimizer.param_groups if optimizer is not None else []
    if any(g.get("amsgrad") for g in groups):
        spec["max_exp_avg_sq"] = (tuple(p.shape), p.dtype)
    return spec


def _check_optim(path: Path, tensors: dict[str, Tensor], model: nn.Module,
                 optimizer: torch.optim.Optimizer | None) -> dict[str, dict[str, Tensor]]:
    """Optimizer state per parameter name, every tensor checked against its parameter."""
    if optimizer is not None and not isinstance(optimizer, (torch.optim.Adam,
                                                            torch.optim.AdamW)):
        raise TypeError(f"optimizer must be torch.optim.AdamW (what attnlab train uses), got "
                        f"{type(optimizer).__name__}")
    params = dict(model.named_parameters())
    state: dict[str, dict[str, Tensor]] = {}
    for key, t in tensors.items():
        if not key.startswith("optim/"):
            continue
        pname, _, field = key[len("optim/"):].rpartition("/")
        if pname not in params:
            raise CheckpointError(f"{path}: {key}: the model has no parameter {pname!r}")
        spec = _optim_spec(optimizer, params[pname])
        if field not in spec:
            raise CheckpointError(f"{path}: {key}: unexpected optimizer state {field!r} "
                                  f"(expected {sorted(spec)})")
        shape, dtype = spec[field]
        _expect(path, key, t, shape, dtype)
        if field in ("step", "exp_avg_sq", "max_exp_avg_sq") and bool((t < 0).any()):
            raise CheckpointError(f"{path}: {key} must be >= 0")
        state.setdefault(pname, {})[field] = t
    for pname, fields in state.items():
        want = set(_optim_spec(optimizer, params[pname]))
        if set(fields) != want:
            raise CheckpointError(f"{path}: optimizer state of {pname} has "
                                  f"{sorted(fields)}, expected {sorted(want)}")
    return state


def _check_rng(path: Path, tensors: dict[str, Tensor]) -> None:
    if "rng/torch_cpu" not in tensors:
        raise CheckpointError(f"{path}: missing tensor 'rng/torch_cpu'")
    n = torch.get_rng_state().numel()
    _expect(path, "rng/torch_cpu", tensors["rng/torch_cpu"], (n,), torch.uint8)
    if "rng/torch_cuda" in tensors:
        t = tensors["rng/torch_cuda"]
        if t.dtype != torch.uint8 or t.dim() != 1:
            raise CheckpointError(f"{path}: rng/torch_cuda is {_describe(t)}, expected a "
                                  f"1-D uint8 tensor")


def _check_tensors(path: Path, tensors: dict[str, Tensor], meta: dict[str, str],
                   model: nn.Module, optimizer: torch.optim.Optimizer | None
                   ) -> tuple[dict[str, Tensor], dict[str, dict[str, Tensor]]]:
    """Every tensor of the file against the model and optimizer, before anything is loaded.

    Returns the full state dict (tied aliases filled in) and the optimizer state per name.
    """
    for key in tensors:
        if not (key.startswith(("model/", "optim/")) or key in ("step", "rng/torch_cpu",
                                                                 "rng/torch_cuda")):
            raise CheckpointError(f"{path}: unexpected tensor {key!r}")
    weights = {k[len("model/"):]: v for k, v in tensors.items() if k.startswith("model/")}
    try:
        tied = json.loads(meta.get("tied", "{}"))
    except (ValueError, RecursionError):
        tied = None
    if not (isinstance(tied, dict) and all(isinstance(a, str) and isinstance(b, str)
                                           for a, b in tied.items())):
        raise CheckpointError(f"{path}: field 'tied' must map parameter names to names")
    for alias, target in tied.items():
        if target not in weights or alias in weights:
            raise CheckpointError(f"{path}: field 'tied' maps {alias!r} to {target!r}, which "
                                  f"does not fit the stored weights")
        weights[alias] = weights[target]
    expected = model.state_dict()
    if set(weights) != set(expected):
        missing, extra = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
        raise CheckpointError(f"{path}: weights do not fit the model (missing {missing}, "
                              f"unexpected {extra})")
    for name, t in expected.items():
        w = weights[name]
        if tuple(w.shape) != tuple(t.shape):
            raise CheckpointError(f"{path}: {name} has shape {tuple(w.shape)}, "
                                  f"the model expects {tuple(t.shape)}")
        _expect(path, f"model/{name}", w, tuple(t.shape), t.dtype)
    state = _check_optim(path, tensors, model, optimizer)
    _check_rng(path, tensors)
    return weights, state


def checkpoint_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """The config recorded inside the checkpoint (verifies the file)."""
    path = Path(run_dir) / CHECKPOINT_NAME
    _, meta = _read_checkpoint(path)
    return _saved_config(path, meta)


def load_checkpoint(run_dir: str | os.PathLike[str], model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None, *,
                    config: TrainConfig | None = None, restore_rng: bool = True) -> int:
    """Load the checkpoint into ``model`` (and ``optimizer``); returns its step.

    ``config``: the config the caller is about to run; a checkpoint made for a different
    task, model shape, seed, batch or optimizer setting is refused (only the fields in
    ``RESUME_MAY_CHANGE`` may differ). Everything in the file is checked first (metadata,
    and the shape, dtype and finiteness of every weight, optimizer and RNG tensor against
    the model): a file that does not fit raises :class:`CheckpointError` and changes nothing.
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    tensors, meta = _read_checkpoint(path)
    saved = _saved_config(path, meta)
    step = _saved_step(path, tensors, meta)
    if config is not None:
        diff = config.mismatches(saved)
        if diff:
            raise CheckpointError(f"{path}: made for a different run; differing settings "
                                  f"(requested != checkpoint): {'; '.join(diff)}")
    weights, state = _check_tensors(path, tensors, meta, model, optimizer)
    model.load_state_dict(weights)
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                saved_state = state.get(names[id(p)])
                if saved_state:
                    optimizer.state[p] = {k: v.clone().to(p.device) if k != "step"
                                          else v.clone() for k, v in saved_state.items()}
    if restore_rng:
        torch.set_rng_state(tensors["rng/torch_cpu"])
        if "rng/torch_cuda" in tensors and torch.cuda.is_available():
            try:
                torch.cuda.set_rng_state(tensors["rng/torch_cuda"])
            except RuntimeError as exc:
                raise CheckpointError(f"{path}: rng/torch_cuda does not fit this GPU "
                                      f"({_one_line(exc)})") from None
    return step


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
    return p.is_dir() and (p / CHECKPOINT_NAME).is_file() and is_run_config(p)


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
