"""The training loop: one process, or many under ``torchrun`` (DDP).

Each step ``i`` trains on ``task.batch(i, batch_size, seed)``, the *global* batch; a process
of rank ``r`` among ``world`` keeps its slice ``r``. The loss of a slice is its summed
cross-entropy over scored positions divided by the scored count of the global batch, times
``world``, so that DDP's gradient average is exactly the gradient of the global mean: the
same run on 1 or N processes follows the same trajectory up to float rounding.

The learning rate is a linear warmup then a constant, a function of the step alone, so a
run stopped at step N and resumed reaches step 2N with the weights an uninterrupted run
has, bit for bit on the same machine. Only rank 0 writes files or shows progress, and
only while it holds the run folder's lock (:func:`attnlab._io.lock_folder`): a second
training into the same folder is refused at once, naming the first's pid, or waits for it
(``wait=True``, ``--wait``).

>>> import tempfile
>>> from attnlab.train.config import TrainConfig, add_arguments
>>> cfg = TrainConfig.for_task("copy", steps=3, num_layers=1, num_heads=2, embed_dim=16,
...                           batch_size=8)
>>> r = train(cfg, tempfile.mkdtemp(), quiet=True)
>>> r.step, 0.0 <= r.eval_accuracy <= 1.0
(3, True)
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._dist import join, leave
from attnlab._io import atomic_write_bytes, check_output_dir, is_temp_of, lock_folder
from attnlab._proc import torch_threads
from attnlab.train.checkpoint import (
    CHECKPOINT_NAME,
    METRICS_NAME,
    PLOT_NAME,
    RUN_FILES,
    build_model,
    is_run_config,
    load_checkpoint,
    remove_stale_temps,
    save_checkpoint,
    write_config,
)
from attnlab.train.config import TrainConfig, add_arguments
from attnlab.train.tasks import Batch, Task, get_task

if TYPE_CHECKING:  # the heads' scoring is imported where it runs
    from attnlab.train.heads import HeadScores, LookupScores, TaskHeads

__all__ = ["MetricsRow", "TrainResult", "TrainResultJSON", "add_arguments", "evaluate",
           "plot_metrics", "prepare_run_dir", "read_metrics", "train"]

#: The name of the run folder's lock (``lock_folder`` keeps it in ``.attnlab-lock-train``).
LOCK_NAME = "train"
_LOCK_FILE = f".attnlab-lock-{LOCK_NAME}"


class _Logged(TypedDict):
    """The training loss and accuracy over a logged window of steps."""

    loss: float
    accuracy: float


class MetricsRow(TypedDict):
    """One line of metrics.jsonl: a training line (``lr``) every ``log_every`` steps, and
    at the end one ``final`` line with the held-out evaluation and the run's speed."""

    step: int
    loss: float  # training loss over the window that ends at ``step``
    accuracy: float
    lr: NotRequired[float]
    eval_loss: NotRequired[float]  # the final line only, from here on
    eval_accuracy: NotRequired[float]
    final: NotRequired[bool]  # True
    seconds: NotRequired[float]
    tokens_per_s: NotRequired[float]
    world_size: NotRequired[int]
    heads: NotRequired[TaskHeads]  # the heads the task is about (none for most tasks)


class TrainResultJSON(TypedDict):
    """A :class:`TrainResult` as JSON (``attnlab train --json``)."""

    run_dir: str
    task: str
    step: int
    start_step: int
    loss: float
    accuracy: float
    eval_loss: float
    eval_accuracy: float
    seconds: float
    tokens_per_s: float
    world_size: int
    heads: TaskHeads | None


@dataclass
class TrainResult:
    run_dir: Path
    config: TrainConfig
    step: int  # steps completed in total
    start_step: int  # where this invocation began (0 unless resumed)
    loss: float  # training loss averaged over the last logged window
    accuracy: float
    eval_loss: float  # held-out split
    eval_accuracy: float
    seconds: float  # wall time of this invocation's training loop
    tokens_per_s: float
    world_size: int = 1
    heads: TaskHeads | None = None  # the task's heads: previous-token / induction heads
    #                                      (induction), lookup heads (assoc-recall)
    extra: dict[str, Any] = field(default_factory=dict)  # anything else a caller keeps with it

    def heads_text(self) -> str:
        """The heads found, in one line ("" when the task reports none), e.g.
        ``previous-token head L0H3 (score 0.41), induction head L1H0 (score 0.99)``."""
        heads = self.heads or {}
        found = [("previous-token head", heads.get("previous_token")),
                 ("induction head", heads.get("induction")),
                 ("lookup head (query key -> value after it)", heads.get("query_to_value"))]
        return ", ".join(f"{label} L{h['layer']}H{h['head']} (score {h['score']:.2f})"
                         for label, h in found if h is not None)

    def to_json(self) -> TrainResultJSON:
        return {
            "run_dir": str(self.run_dir), "task": self.config.task, "step": self.step,
            "start_step": self.start_step, "loss": self.loss, "accuracy": self.accuracy,
            "eval_loss": self.eval_loss, "eval_accuracy": self.eval_accuracy,
            "seconds": round(self.seconds, 3), "tokens_per_s": round(self.tokens_per_s, 1),
            "world_size": self.world_size, "heads": self.heads,
        }


# --------------------------------------------------------------------------------------
# set-up: checked before any work
# --------------------------------------------------------------------------------------


def prepare_run_dir(out: str | os.PathLike[str], *, resume: bool, force: bool = False) -> Path:
    """Check ``out`` before any work and create it if needed; ``ValueError`` naming ``--out``.

    ``out`` must be a new or empty folder, or an attnlab run (its ``config.json`` written by
    ``attnlab train``); a run that already holds a checkpoint needs ``resume``. A non-empty
    folder that is not an attnlab run is refused unless ``force``, and even then a file
    there under one of the names attnlab writes (:data:`RUN_FILES`) is never overwritten.
    With ``resume``, a checkpoint must be there. The run's lock file is not a foreign entry.
    """
    path = _check_out(out, resume=resume)
    first_rank = os.environ.get("RANK", "0") == "0"  # the others start after rank 0 wrote
    if first_rank and path.is_dir():
        _check_not_foreign(path, out, resume=resume, force=force)
    for name in RUN_FILES:
        p = path / name
        if (p.exists() or p.is_symlink()) and not p.is_file():
            raise ValueError(f"--out {out}: {name} there is not a regular file; attnlab "
                             f"needs to write that file")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".attnlab-probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"--out {out}: directory is not writable ({exc.strerror})") from None
    if not resume and first_rank and (path / CHECKPOINT_NAME).exists():
        raise ValueError(f"--out {out}: already holds a checkpoint; pass --resume to continue "
                         f"it or choose another directory")
    return path


def _check_out(out: str | os.PathLike[str], *, resume: bool) -> Path:
    """What :func:`prepare_run_dir` checks before it creates anything."""
    path = check_output_dir(out, arg="--out")
    if resume and not (path / CHECKPOINT_NAME).is_file():
        raise ValueError(f"--resume: no checkpoint at {path / CHECKPOINT_NAME}; train "
                         f"without --resume first")
    return path


@contextlib.contextmanager
def _run_lock(out: str | os.PathLike[str], *, resume: bool, wait: bool) -> Iterator[None]:
    """Rank 0 holds ``out``'s lock while the block runs (other ranks write nothing), and
    removes the lock file at the end, while still holding it, so that a finished run's
    folder holds only its files (a killed run's lock file stays; the next run takes it
    over). A run that locked a file another had just removed finds another pid in the
    file now at that name, and locks again."""
    if os.environ.get("RANK", "0") != "0":
        yield
        return
    _check_out(out, resume=resume)  # refused before the folder is made
    lock = Path(out) / _LOCK_FILE
    for _ in range(100):
        with lock_folder(out, name=LOCK_NAME, wait=wait):
            try:
                mine = lock.read_text(encoding="ascii").strip() == str(os.getpid())
            except FileNotFoundError:
                mine = False
            if not mine:
                continue
            try:
                yield
            finally:
                lock.unlink(missing_ok=True)
            return
    raise OSError(f"--out {out}: could not take the folder's lock ({lock} keeps changing)")


def _check_not_foreign(path: Path, out: Any, *, resume: bool, force: bool) -> None:
    """Refuse a folder holding files attnlab did not write (see :func:`prepare_run_dir`)."""
    if is_run_config(path):
        return  # an attnlab run: its RUN_FILES are attnlab's own
    entries = sorted(p.name for p in path.iterdir() if p.name != _LOCK_FILE
                     and not any(is_temp_of(p, n) for n in RUN_FILES))
    ours = {CHECKPOINT_NAME} if resume else set()  # a checkpoint is verified when loaded
    clash = [n for n in RUN_FILES if n in entries and n not in ours]
    if clash:
        raise ValueError(f"--out {out}: holds {', '.join(clash)} not written by attnlab train; "
                         f"attnlab never overwrites a file it did not write: choose another "
                         f"directory")
    others = [n for n in entries if n not in ours]
    if others and not force:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise ValueError(f"--out {out}: is not empty ({len(others)} entries: {shown}) and is "
                         f"not an attnlab run; choose a new or empty directory, or pass --force "
                         f"to write attnlab's files beside them")


# --------------------------------------------------------------------------------------
# loss, evaluation
# --------------------------------------------------------------------------------------


def _scored_sums(model: nn.Module, b: Batch) -> tuple[Tensor, Tensor]:
    """(summed cross-entropy, number of correct predictions) over scored positions."""
    logits = model(b.inputs)  # (B, N, V)
    sel = logits[b.scored]  # (S, V)
    tgt = b.targets[b.scored]  # (S,)
    loss_sum = F.cross_entropy(sel, tgt, reduction="sum")
    correct = (sel.detach().argmax(-1) == tgt).sum()
    return loss_sum, correct


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, config: TrainConfig,
             device: torch.device | str = "cpu") -> tuple[float, float]:
    """(loss, accuracy) on the held-out split: ``config.eval_batches`` fixed batches."""
    was_training = model.training
    model.eval()
    loss = correct = count = 0.0
    for i in range(config.eval_batches):
        b = _to(task.batch(i, config.batch_size, config.seed, split="eval"), device)
        s, c = _scored_sums(model, b)
        loss, correct, count = loss + float(s), correct + float(c), count + float(b.scored.sum())
    model.train(was_training)
    return loss / count, correct / count


def _to(b: Batch, device: torch.device | str) -> Batch:
    if torch.device(device).type == "cpu":
        return b
    return Batch(b.inputs.to(device), b.targets.to(device), b.scored.to(device))


# --------------------------------------------------------------------------------------
# metrics.jsonl and the plot
# --------------------------------------------------------------------------------------


def read_metrics(run_dir: str | os.PathLike[str]) -> list[MetricsRow]:
    """The valid lines of metrics.jsonl (a line cut short by a kill is skipped)."""
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return []
    rows: list[MetricsRow] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(cast(MetricsRow, row))  # a line this module wrote (it has a step)
    return rows


def _rewrite_metrics(run_dir: Path, upto: int) -> None:
    """Keep the training lines up to the checkpoint's step; drop later ones and old finals."""
    rows = [r for r in read_metrics(run_dir) if r["step"] <= upto and not r.get("final")]
    atomic_write_bytes(run_dir / METRICS_NAME,
                       "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))


def _append_metrics(f, row: MetricsRow) -> None:
    f.write(json.dumps(row) + "\n")
    f.flush()


def plot_metrics(rows: list[MetricsRow], title: str = ""):
    """Loss (log scale) and accuracy against step, train and held-out: a matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_rows = [r for r in rows if not r.get("final")]
    final = [r for r in rows if r.get("final")]
    steps = [r["step"] for r in train_rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    ax1.plot(steps, [r["loss"] for r in train_rows], color="#3451b2", label="train")
    ax1.set_yscale("log")
    ax1.set_xlabel("step")
    ax1.set_ylabel("loss (scored positions)")
    ax2.plot(steps, [r["accuracy"] for r in train_rows], color="#3451b2", label="train")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_xlabel("step")
    ax2.set_ylabel("accuracy")
    if final:
        f = final[-1]
        ax1.scatter([f["step"]], [f["eval_loss"]], color="#b3261e", zorder=3, label="held-out")
        ax2.scatter([f["step"]], [f["eval_accuracy"]], color="#b3261e", zorder=3,
                    label=f"held-out {f['eval_accuracy']:.3f}")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _write_plot(run_dir: Path, config: TrainConfig) -> None:
    import io

    import matplotlib.pyplot as plt

    fig = plot_metrics(read_metrics(run_dir), f"attnlab train --task {config.task}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(run_dir / PLOT_NAME, buf.getvalue())


# --------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------


def _progress(quiet: bool):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}  acc {task.fields[acc]}  {task.fields[tps]} tok/s"),
        TimeElapsedColumn(), TimeRemainingColumn(),
        console=Console(stderr=True, quiet=quiet), disable=quiet,
    )


def train(config: TrainConfig, out: str | os.PathLike[str], *, resume: bool = False,
          force: bool = False, quiet: bool = False, progress: Any = None,
          wait: bool = False) -> TrainResult:
    """Train ``config`` into the run directory ``out`` (see the module docstring).

    ``out``: a new or empty folder, or an attnlab run (``resume`` to continue its
    checkpoint); ``force`` allows a non-empty folder that is not a run, whose files are left
    alone (see :func:`prepare_run_dir`).

    ``progress``: an existing rich ``Progress`` to add a task to (the report uses this);
    otherwise one is created on stderr unless ``quiet``. Under ``torchrun`` (``WORLD_SIZE``
    > 1) the process group is joined here (nccl when this node has a GPU for each local
    process, gloo otherwise) and left at the end.

    One training writes ``out`` at a time: another one's is refused with
    :class:`~attnlab._io.FolderBusyError` naming ``--out`` and its pid, or, with ``wait``,
    waited for.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    with _run_lock(out, resume=resume, wait=wait):
        run_dir = prepare_run_dir(out, resume=resume, force=force)
        task = get_task(config.task)
        group = join("auto")
        try:
            with torch_threads(config.threads):
                return _train(config, task, run_dir, resume, quiet, progress, group.rank,
                              group.world, group.device)
        finally:
            leave(group)


@dataclass(frozen=True)
class _Setup:
    """What a training process steps: its model, the same wrapped in DDP when ``world`` > 1
    (else the model itself), its optimizer, and the step it starts from."""

    model: nn.Module
    ddp: nn.Module
    optimizer: torch.optim.Optimizer
    start: int


def _set_up(config: TrainConfig, run_dir: Path, resume: bool, writer: bool, world: int,
            device: torch.device) -> _Setup:
    """The seeded model and its optimizer (restored from the checkpoint when ``resume``);
    the ``writer`` (rank 0) also writes the run folder's config and resets its metrics (a
    new run: none and a step-0 checkpoint; a resumed one: its lines up to the checkpoint)."""
    torch.manual_seed(config.seed)
    model = build_model(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    start = 0
    if resume:
        start = load_checkpoint(run_dir, model, optimizer, config=config)
    if writer:
        remove_stale_temps(run_dir)
        write_config(run_dir, config)
        if resume:
            _rewrite_metrics(run_dir, start)
        else:
            (run_dir / METRICS_NAME).unlink(missing_ok=True)
            save_checkpoint(run_dir, model, optimizer, step=0, config=config)
    ddp = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()
    return _Setup(model, ddp, optimizer, start)


def _train_step(config: TrainConfig, task: Task, run: _Setup, step: int, rank: int,
                world: int, device: torch.device) -> tuple[Tensor, float]:
    """One optimizer step on this process's slice of step ``step``'s global batch, at the
    step's learning rate: ((loss sum, correct, scored count) of the global batch, summed
    over the processes, as float64; the learning rate)."""
    lr = config.lr * min(1.0, (step + 1) / max(1, config.warmup_steps))
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    full = task.batch(step, config.batch_size, config.seed)
    count = float(full.scored.sum())
    b = _to(full.slice(rank, world), device)
    loss_sum, correct = _scored_sums(run.ddp, b)
    loss = loss_sum * (world / count)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip)
    run.optimizer.step()
    stats = torch.tensor([float(loss_sum.detach()), float(correct), 0.0],
                         dtype=torch.float64)
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(stats)
    stats[2] = count
    return stats, lr


def _last_logged(run_dir: Path, resume: bool) -> _Logged:
    """The loss and accuracy of the run's last metrics line (NaN for a new run): what a
    resumed run that has nothing left to do reports."""
    last: _Logged = {"loss": float("nan"), "accuracy": float("nan")}
    for row in read_metrics(run_dir) if resume else []:
        last = {"loss": row["loss"], "accuracy": row["accuracy"]}
    return last


def _finish_metrics(metrics: Any, run_dir: Path, config: TrainConfig,
                    row: MetricsRow) -> None:
    """Append the final ``row`` to metrics.jsonl, close it and write the plot."""
    _append_metrics(metrics, row)
    metrics.close()
    _write_plot(run_dir, config)


def _train(config: TrainConfig, task: Task, run_dir: Path, resume: bool, quiet: bool,
           progress: Any, rank: int, world: int, device: torch.device) -> TrainResult:
    if config.batch_size % world:
        raise ValueError(f"--batch-size {config.batch_size} must be divisible by the number "
                         f"of processes ({world})")
    writer = rank == 0
    run = _set_up(config, run_dir, resume, writer, world, device)
    start = run.start
    tokens_per_step = config.batch_size * (task.seq_len - 1)
    own_progress = progress is None and writer
    if own_progress:
        progress = _progress(quiet)
        progress.start()
    bar = None
    if progress is not None and writer:
        bar = progress.add_task(f"train {task.name}", total=config.steps, completed=start,
                                loss="-", acc="-", tps="-")
    window = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, scored count
    last = _last_logged(run_dir, resume)
    metrics = open(run_dir / METRICS_NAME, "a", encoding="utf-8") if writer else None
    t0 = time.perf_counter()
    try:
        for step in range(start, config.steps):
            stats, lr = _train_step(config, task, run, step, rank, world, device)
            window += stats
            done = step + 1
            if done % config.log_every == 0 or done == config.steps:
                last = {"loss": float(window[0] / window[2]),
                        "accuracy": float(window[1] / window[2])}
                window.zero_()
                if metrics is not None:
                    _append_metrics(metrics, {"step": done, **last, "lr": lr})
            if writer and (done % config.checkpoint_every == 0 or done == config.steps):
                save_checkpoint(run_dir, run.model, run.optimizer, step=done, config=config)
            if bar is not None:
                el = time.perf_counter() - t0
                progress.update(bar, completed=done, loss=f"{last['loss']:.3f}",
                                acc=f"{last['accuracy']:.3f}",
                                tps=f"{(done - start) * tokens_per_step / max(el, 1e-9):,.0f}")
        seconds = time.perf_counter() - t0
        eval_loss, eval_acc = evaluate(run.model, task, config, device)
        heads = _find_heads(run.model, task, config, device)
        done = max(start, config.steps)
        tps = (done - start) * tokens_per_step / max(seconds, 1e-9)
        if metrics is not None:
            row: MetricsRow = {
                "step": done, **last, "eval_loss": eval_loss, "eval_accuracy": eval_acc,
                "final": True, "seconds": round(seconds, 3), "tokens_per_s": round(tps, 1),
                "world_size": world,
            }
            if heads:
                row["heads"] = heads
            _finish_metrics(metrics, run_dir, config, row)
            metrics = None
        if bar is not None:
            progress.update(bar, description=f"train {task.name}: held-out acc {eval_acc:.3f}")
    finally:
        if metrics is not None:
            metrics.close()
        if own_progress:
            progress.stop()
    return TrainResult(run_dir, config, done, start, last["loss"], last["accuracy"], eval_loss,
                       eval_acc, seconds, tps, world, heads)


def _find_heads(model: nn.Module, task: Task, config: TrainConfig,
                device: torch.device) -> TaskHeads | None:
    """The heads the run's task is about, scored on 16 held-out sequences (see
    :mod:`attnlab.train.heads`): previous-token and induction heads for ``induction``, the
    query position's lookup heads for ``assoc-recall``; None for the other tasks."""
    from attnlab.train.heads import score_heads, score_lookup_heads

    scorers: dict[str, Callable[[nn.Module, Tensor], HeadScores | LookupScores]] = {
        "induction": score_heads, "assoc-recall": score_lookup_heads}
    scorer = scorers.get(task.name)
    if scorer is None:
        return None
    idx = task.batch(0, 16, config.seed, split="eval").inputs.to(device)
    try:
        return scorer(model.eval(), idx).to_json()
    finally:
        model.train()
