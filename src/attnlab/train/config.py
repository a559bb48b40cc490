"""``TrainConfig``: everything a training run depends on, frozen, checked on creation.

Its command-line options are built from the fields (:mod:`attnlab._options`): one table,
:data:`OPTIONS`, gives each option's help and :data:`FLAGS` the flags that are not the
field's name; :func:`add_arguments` serves both ``attnlab train`` and ``python -m
attnlab.train`` / ``torchrun -m attnlab.train``, and :func:`config_from_args` turns the
parsed values into a config (the task's defaults fill what was not given).

>>> c = TrainConfig.for_task("induction", steps=10)
>>> c.steps, c.task, c.head_dim
(10, 'induction', 16)
>>> TrainConfig(embed_dim=60, num_heads=8)
Traceback (most recent call last):
...
ValueError: --dim (embed_dim=60) must be divisible by --heads (num_heads=8)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from attnlab._errors import check_int
from attnlab._options import add_dataclass_options, flag_of
from attnlab._options import config_from_args as _config_from_args
from attnlab.train.tasks import get_task, task_names

if TYPE_CHECKING:  # the model's config is imported where it is built: no torch for --help
    from attnlab.nn.transformer import GPTConfig

__all__ = ["FLAGS", "OPTIONS", "RESUME_MAY_CHANGE", "TrainConfig", "TrainConfigDict",
           "add_arguments", "config_from_args"]

#: The flags that are not ``--`` and the field's name.
FLAGS = {"num_layers": "--layers", "num_heads": "--heads", "embed_dim": "--dim"}

#: The fields ``attnlab train`` sets, with each option's help (a field's default is added).
OPTIONS = {
    "steps": "optimizer steps in total (default: the task's)",
    "num_layers": "transformer blocks",
    "num_heads": "attention heads per block",
    "embed_dim": "embedding size, divisible by --heads",
    "batch_size": "global batch, split over processes",
    "lr": "AdamW learning rate (default: the task's)",
    "seed": "seed of the init and of every batch",
    "checkpoint_every": "steps between checkpoints",
    "log_every": "steps between metrics lines",
    "threads": "torch threads per process",
    "token_shift": "add a learned embedding of the previous token to each position's input "
                   "(default: the task's; on for assoc-recall)",
}


def _named(field: str) -> str:
    """How a message names a field: ``--layers (num_layers)``, or the bare name of a field
    that has no option."""
    return f"{flag_of(field, FLAGS)} ({field})" if field in OPTIONS else field

class _AddedLater(TypedDict):
    """The fields added after runs were first written."""

    token_shift: bool


#: Fields added after runs were first written, with the value those runs had.
_ADDED_LATER: _AddedLater = {"token_shift": False}


class TrainConfigDict(TypedDict):
    """Every field of a :class:`TrainConfig` by name: the ``config`` of a run's config.json
    and of its checkpoints (:meth:`TrainConfig.to_dict`)."""

    task: str
    steps: int
    num_layers: int
    num_heads: int
    embed_dim: int
    positional: str
    batch_size: int
    lr: float
    weight_decay: float
    warmup_steps: int
    grad_clip: float
    seed: int
    checkpoint_every: int
    log_every: int
    eval_batches: int
    threads: int
    token_shift: NotRequired[bool]  # absent in runs written before it existed (then False)

#: Fields a resumed run may change; every other field must match the checkpoint's.
RESUME_MAY_CHANGE = frozenset({"steps", "checkpoint_every", "log_every", "threads"})


@dataclass(frozen=True)
class TrainConfig:
    task: str = "induction"  # the flagship: two heads that must cooperate
    steps: int = 600  # induction passes 95% held-out by step ~150 and its heads settle by 600
    num_layers: int = 2  # two layers are the minimum for an induction circuit
    num_heads: int = 4  # a few heads, so that specialization is visible (not forced)
    embed_dim: int = 64  # head_dim 16: tiny models train in minutes on a CPU
    positional: str = "learned"  # GPT-2's absolute positions: "look one token back" is a
    #                              plain query-key match of positions, so a previous-token
    #                              head forms early (with "rope" the induction task is solved
    #                              too, but layer 0 stays diffuse and no clean head forms)
    batch_size: int = 64  # sequences per optimizer step (the global batch, over all ranks)
    lr: float = 3e-3  # AdamW; high is fine for models this small with pre-LN
    weight_decay: float = 0.01  # mild; no parameter-group tricks needed at this size
    warmup_steps: int = 50  # linear warmup, then constant: the schedule never depends on
    #                         `steps`, so a run extended with --resume stays exact
    grad_clip: float = 1.0  # guards the early steps against rare spikes
    seed: int = 0  # model init and every batch derive from it
    checkpoint_every: int = 200  # a SIGKILL loses at most this many steps
    log_every: int = 25  # one metrics.jsonl line per this many steps
    eval_batches: int = 8  # held-out batches (of batch_size) for the final eval_accuracy
    threads: int = 1  # torch threads per process: matmuls this small gain little from more,
    #                   and a thread waiting for a busy core stalls every step
    token_shift: bool = False  # add a learned embedding of the previous token to each input
    #                            (attnlab.train.tokenshift): assoc-recall's default, where it
    #                            stands in for the previous-token head a plain GPT does not
    #                            learn in time (see the task in tasks.py)

    def __post_init__(self) -> None:
        get_task(self.task)
        for name in ("steps", "num_layers", "num_heads", "embed_dim", "batch_size",
                     "checkpoint_every", "log_every", "eval_batches", "threads"):
            check_int(_named(name), getattr(self, name), minimum=1)
        if self.positional not in ("rope", "learned"):
            raise ValueError(f"positional must be 'rope' or 'learned', got {self.positional!r}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{flag_of('embed_dim', FLAGS)} (embed_dim={self.embed_dim}) must "
                             f"be divisible by {flag_of('num_heads', FLAGS)} "
                             f"(num_heads={self.num_heads})")
        if self.positional == "rope" and self.head_dim % 2:
            raise ValueError(f"positional 'rope' needs an even head_dim (--dim / --heads), got "
                             f"{self.embed_dim} / {self.num_heads} = {self.head_dim}")
        for name in ("lr", "grad_clip"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{_named(name)} must be a positive finite number, got {v!r}")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        check_int("warmup_steps", self.warmup_steps)
        check_int("--seed", self.seed)
        if not isinstance(self.token_shift, bool):
            raise ValueError(f"{_named('token_shift')} must be True or False, got "
                             f"{self.token_shift!r}")

    @classmethod
    def for_task(cls, task: str, **overrides: Any) -> TrainConfig:
        """The task's default run (its steps, lr and ``Task.config`` settings), with
        ``overrides`` (None values are ignored)."""
        t = get_task(task)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown TrainConfig field(s) {unknown}; expected {sorted(known)}")
        kw: dict[str, Any] = {"task": task, "steps": t.default_steps, "lr": t.default_lr,
                              **dict(t.config)}
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    def gpt_config(self, vocab_size: int, block_size: int) -> GPTConfig:
        """The model this run trains: attnlab's decoder-only ``GPT``."""
        from attnlab.nn.transformer import GPTConfig

        return GPTConfig(vocab_size=vocab_size, block_size=block_size,
                         num_layers=self.num_layers, num_heads=self.num_heads,
                         embed_dim=self.embed_dim, dropout=0.0, positional=self.positional)

    def to_dict(self) -> TrainConfigDict:
        """Every field by name (the ``config`` of config.json and of a checkpoint)."""
        return {"task": self.task, "steps": self.steps, "num_layers": self.num_layers,
                "num_heads": self.num_heads, "embed_dim": self.embed_dim,
                "positional": self.positional, "batch_size": self.batch_size, "lr": self.lr,
                "weight_decay": self.weight_decay, "warmup_steps": self.warmup_steps,
                "grad_clip": self.grad_clip, "seed": self.seed,
                "checkpoint_every": self.checkpoint_every, "log_every": self.log_every,
                "eval_batches": self.eval_batches, "threads": self.threads,
                "token_shift": self.token_shift}

    @classmethod
    def from_dict(cls, d: TrainConfigDict) -> TrainConfig:
        """The config :meth:`to_dict` wrote; unknown or missing fields raise ``ValueError``.

        >>> TrainConfig.from_dict({**TrainConfig().to_dict(), "n_embd": 64})
        Traceback (most recent call last):
        ...
        ValueError: config has unknown field(s) ['n_embd']; expected the fields of TrainConfig
        """
        if not isinstance(d, dict):
            raise TypeError(f"config must be a JSON object (dict), got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"config has unknown field(s) {unknown}; expected the fields of "
                             "TrainConfig")
        # runs written before a field existed ran without it
        full: TrainConfigDict = {**_ADDED_LATER, **d}
        missing = sorted(known - set(full))
        if missing:
            raise ValueError(f"config is missing field(s) {missing}")
        return cls(**full)

    def mismatches(self, other: TrainConfig) -> list[str]:
        """Fields (other than those a resume may change) that differ, as 'name: a != b'."""
        out = []
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name not in RESUME_MAY_CHANGE and a != b:
                out.append(f"{f.name}: {a!r} != {b!r}")
        return out


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The training arguments, shared by ``attnlab train`` and ``-m attnlab.train``: the
    config's :data:`OPTIONS` (no default of their own: the task's fill what is not given)
    and how the run goes (no torch is imported: ``--help`` prints at once)."""
    add_dataclass_options(p, TrainConfig, help={"task": f"one of: {', '.join(task_names())}"},
                          metavars={"task": "TASK"}, required=("task",))
    p.add_argument("--out", required=True, metavar="DIR",
                   help="run directory: config.json, checkpoint.safetensors, metrics.jsonl, "
                   "training.png")
    add_dataclass_options(p, TrainConfig, help=OPTIONS, flags=FLAGS, given_only=True)
    p.add_argument("--resume", action="store_true",
                   help="continue from DIR/checkpoint.safetensors up to --steps")
    p.add_argument("--wait", action="store_true",
                   help="if another training is writing DIR, wait for it to end (default: "
                   "refuse at once, naming its pid)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    p.add_argument("--force", action="store_true",
                   help="allow --out to be a non-empty folder that is not an attnlab run "
                   "(its files are left alone; a file named like one attnlab writes is "
                   "never overwritten)")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The run's config: the task's defaults, with each option given."""
    return _config_from_args(TrainConfig, args, flags=FLAGS, build=TrainConfig.for_task)
