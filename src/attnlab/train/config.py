"""``TrainConfig``: everything a training run depends on, frozen, checked on creation.

One argument builder, :func:`add_arguments`, serves both ``attnlab train`` and
``python -m attnlab.train`` / ``torchrun -m attnlab.train``, and :func:`config_from_args`
turns the parsed values into a config (task defaults fill what was not given).

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
from typing import TYPE_CHECKING, Any

from attnlab.train.tasks import get_task, task_names

if TYPE_CHECKING:  # the model's config is imported where it is built: no torch for --help
    from attnlab.nn.transformer import GPTConfig

__all__ = ["TrainConfig", "add_arguments", "config_from_args", "RESUME_MAY_CHANGE"]

#: Fields added after runs were first written, with the value those runs had.
_ADDED_LATER: dict[str, Any] = {"token_shift": False}

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
        for name, flag in [("steps", "--steps"), ("num_layers", "--layers"),
                           ("num_heads", "--heads"), ("embed_dim", "--dim"),
                           ("batch_size", "--batch-size"),
                           ("checkpoint_every", "--checkpoint-every"),
                           ("log_every", "--log-every"), ("eval_batches", "eval_batches"),
                           ("threads", "--threads")]:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{flag} ({name}) must be a positive integer, got {v!r}")
        if self.positional not in ("rope", "learned"):
            raise ValueError(f"positional must be 'rope' or 'learned', got {self.positional!r}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"--dim (embed_dim={self.embed_dim}) must be divisible by --heads "
                             f"(num_heads={self.num_heads})")
        if self.positional == "rope" and self.head_dim % 2:
            raise ValueError(f"positional 'rope' needs an even head_dim (--dim / --heads), got "
                             f"{self.embed_dim} / {self.num_heads} = {self.head_dim}")
        for name, flag in [("lr", "--lr"), ("grad_clip", "grad_clip")]:
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{flag} ({name}) must be a positive finite number, got {v!r}")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) \
                or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--seed must be an integer >= 0, got {self.seed!r}")
        if not isinstance(self.token_shift, bool):
            raise ValueError(f"--token-shift (token_shift) must be True or False, got "
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

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (the ``config`` of config.json and of a checkpoint)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
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
        d = {**_ADDED_LATER, **d}  # runs written before a field existed ran without it
        missing = sorted(known - set(d))
        if missing:
            raise ValueError(f"config is missing field(s) {missing}")
        return cls(**d)

    def mismatches(self, other: TrainConfig) -> list[str]:
        """Fields (other than those a resume may change) that differ, as 'name: a != b'."""
        out = []
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name not in RESUME_MAY_CHANGE and a != b:
                out.append(f"{f.name}: {a!r} != {b!r}")
        return out


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The training arguments, shared by ``attnlab train`` and ``-m attnlab.train`` (no
    torch is imported: ``--help`` prints at once)."""
    p.add_argument("--task", required=True, metavar="TASK",
                   help=f"one of: {', '.join(task_names())}")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="run directory: config.json, checkpoint.safetensors, metrics.jsonl, "
                   "training.png")
    p.add_argument("--steps", type=int, help="optimizer steps in total (default: the task's)")
    p.add_argument("--layers", type=int, help="transformer blocks (default 2)")
    p.add_argument("--heads", type=int, help="attention heads per block (default 4)")
    p.add_argument("--dim", type=int, help="embedding size, divisible by --heads (default 64)")
    p.add_argument("--batch-size", type=int, help="global batch, split over processes "
                   "(default 64)")
    p.add_argument("--lr", type=float, help="AdamW learning rate (default: the task's)")
    p.add_argument("--seed", type=int, help="seed of the init and of every batch (default 0)")
    p.add_argument("--checkpoint-every", type=int, help="steps between checkpoints "
                   "(default 200)")
    p.add_argument("--log-every", type=int, help="steps between metrics lines (default 25)")
    p.add_argument("--threads", type=int, help="torch threads per process (default 1)")
    p.add_argument("--token-shift", action=argparse.BooleanOptionalAction, default=None,
                   help="add a learned embedding of the previous token to each position's "
                   "input (default: the task's; on for assoc-recall)")
    p.add_argument("--resume", action="store_true",
                   help="continue from DIR/checkpoint.safetensors up to --steps")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    p.add_argument("--force", action="store_true",
                   help="allow --out to be a non-empty folder that is not an attnlab run "
                   "(its files are left alone; a file named like one attnlab writes is "
                   "never overwritten)")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig.for_task(
        args.task, steps=args.steps, num_layers=args.layers, num_heads=args.heads,
        embed_dim=args.dim,
        batch_size=args.batch_size, lr=args.lr, seed=args.seed,
        checkpoint_every=args.checkpoint_every, log_every=args.log_every, threads=args.threads,
        token_shift=getattr(args, "token_shift", None),
    )
