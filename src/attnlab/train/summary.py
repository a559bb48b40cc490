"""The induction run that the report trains, and what it found, as data.

:func:`ensure_run` trains ``attnlab train --task induction`` into a directory (or reuses a
finished run with the same config, or resumes a killed one); :func:`summarize_run` reads a
run back: its metrics, every head's previous-token and induction scores, the heads found,
and the checks of the claim that different heads learn different relations. The report's
"trained model" section (:mod:`attnlab.report.trained_model`) draws them.

An ``assoc-recall`` run is read back the same way, with its own checks: the held-out
accuracy and a lookup head, whose attention from the query key goes to the value after the
key's earlier occurrence (:func:`attnlab.train.heads.score_lookup_heads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from attnlab.train.checkpoint import (
    RUN_FILES,
    CheckpointError,
    is_run_config,
    is_run_dir,
    load_run,
    read_config,
    remove_stale_temps,
)
from attnlab.train.config import TrainConfig
from attnlab.train.heads import (
    HeadScores,
    LookupScores,
    capture_weights,
    score_heads,
    score_lookup_heads,
)
from attnlab.train.tasks import Task, get_task
from attnlab.train.trainer import MetricsRow, read_metrics, train

__all__ = ["ACCURACY_TARGET", "INDUCTION_THRESHOLD", "LOOKUP_ACCURACY_TARGET",
           "LOOKUP_THRESHOLD", "PREVIOUS_THRESHOLD", "STANDOUT", "RunSummary", "ensure_run",
           "summarize_run"]

ACCURACY_TARGET = 0.95  # held-out accuracy on the induction positions
# A head is "found" when its score clears an absolute bar and stands out from the others
# (>= 3x the median head). Attention spread evenly over the earlier tokens of a 32-token
# sequence scores about 0.1 on either score.
PREVIOUS_THRESHOLD = 0.3  # the trained layer-0 heads share the job; the best reaches ~0.42
INDUCTION_THRESHOLD = 0.5  # most of the mass on the tokens after earlier occurrences
STANDOUT = 3.0  # times the lower median of all heads' scores
LOOKUP_ACCURACY_TARGET = 0.9  # assoc-recall: held-out accuracy on the answer
# A head that attends from the query key evenly to the six values scores ~0.17 on the value
# score (the plain GPT's best head: 0.15); a lookup head puts most of its attention there.
LOOKUP_THRESHOLD = 0.5


def ensure_run(run_dir: str | Path, config: TrainConfig, progress: Any = None) -> None:
    """Make ``run_dir`` a finished run of ``config``: reuse it if it is one, resume it if it
    was cut short, otherwise train it afresh.

    Only an attnlab run's own files (:data:`~attnlab.train.checkpoint.RUN_FILES`) are ever
    replaced; a folder that holds anything else and is not an attnlab run is refused with
    :class:`CheckpointError`, and nothing in it is touched.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise CheckpointError(f"run_dir {run_dir} is a file, not a folder")
    if run_dir.exists() and any(run_dir.iterdir()) and not is_run_config(run_dir):
        raise CheckpointError(
            f"run_dir {run_dir} holds files but is not an attnlab run; refusing to train "
            "over them (give an empty or new folder)"
        )
    if run_dir.exists():
        try:
            same = read_config(run_dir) == config
        except CheckpointError:
            same = False
        finished = same and any(r.get("final") and r["step"] >= config.steps
                                for r in read_metrics(run_dir))
        if finished and is_run_dir(run_dir):
            return
        if same and is_run_dir(run_dir):
            try:
                train(config, run_dir, resume=True, progress=progress, quiet=progress is None)
                return
            except CheckpointError:
                pass
        for name in RUN_FILES:  # a stale or different attnlab run: only its own files go
            (run_dir / name).unlink(missing_ok=True)
        remove_stale_temps(run_dir)
    train(config, run_dir, progress=progress, quiet=progress is None, force=True)


@dataclass
class RunSummary:
    """What one finished run learned.

    ``checks`` are (claim, value as text, passed); ``example_weights`` (L, H, N, N) are the
    attention of every head on ``example_tokens``, one held-out sequence; ``lookup``: the
    query position's lookup scores (``assoc-recall`` runs; None otherwise).
    """

    run_dir: Path
    config: TrainConfig
    task: Task
    metrics: list[MetricsRow]
    final: MetricsRow  # the run's final line (held-out evaluation)
    scores: HeadScores
    checks: list[tuple[str, str, bool]]
    example_tokens: list[str]
    example_weights: Tensor
    lookup: LookupScores | None = None

    @property
    def passed(self) -> bool:
        return all(ok for _, _, ok in self.checks)


def summarize_run(run_dir: str | Path, *, seed: int = 0) -> RunSummary:
    """Read a finished run: score every head on held-out batches of its task and check that
    a previous-token head and an induction head stand out, in that layer order (for an
    ``assoc-recall`` run: that the accuracy reaches :data:`LOOKUP_ACCURACY_TARGET` and a
    lookup head stands out)."""
    run_dir = Path(run_dir)
    model, tok = load_run(run_dir)
    config = read_config(run_dir)
    task = get_task(config.task)
    rows = read_metrics(run_dir)
    final = next((r for r in reversed(rows) if r.get("final")), None)
    if final is None:
        raise CheckpointError(f"{run_dir}: the run has no final evaluation yet")
    scores = score_heads(model, task.batch(0, 16, seed, split="eval").inputs)
    example = task.batch(1, 1, seed, split="eval").inputs
    acc = float(final["eval_accuracy"])
    lookup = None
    if task.name == "assoc-recall":
        lookup = score_lookup_heads(model, task.batch(0, 64, seed, split="eval").inputs)
        checks = _lookup_checks(acc, lookup)
    else:
        checks = _induction_checks(acc, scores)
    return RunSummary(run_dir=run_dir, config=config, task=task, metrics=rows, final=final,
                      scores=scores, checks=checks,
                      example_tokens=tok.decode_tokens(example[0]),
                      example_weights=capture_weights(model, example)[:, 0], lookup=lookup)


def _lookup_checks(acc: float, lookup: LookupScores) -> list[tuple[str, str, bool]]:
    vl, vh, vs = lookup.best_value
    return [
        (f"held-out accuracy on the recalled value >= {LOOKUP_ACCURACY_TARGET}", f"{acc:.4g}",
         acc >= LOOKUP_ACCURACY_TARGET),
        (f"lookup head found (attention from the query key to the value after its earlier "
         f"occurrence >= {LOOKUP_THRESHOLD}, >= {STANDOUT:g}x median)", f"L{vl}H{vh} {vs:.2f}",
         vs >= LOOKUP_THRESHOLD and vs >= STANDOUT * float(lookup.value.median())),
    ]


def _induction_checks(acc: float, scores: HeadScores) -> list[tuple[str, str, bool]]:
    pl, ph, ps = scores.best_previous_token
    il, ih, is_ = scores.best_induction
    return [
        (f"held-out accuracy on induction positions >= {ACCURACY_TARGET}", f"{acc:.4g}",
         acc >= ACCURACY_TARGET),
        (f"previous-token head found (score >= {PREVIOUS_THRESHOLD}, >= {STANDOUT:g}x median)",
         f"L{pl}H{ph} {ps:.2f}", ps >= PREVIOUS_THRESHOLD
         and ps >= STANDOUT * float(scores.previous_token.median())),
        (f"induction head found (score >= {INDUCTION_THRESHOLD}, >= {STANDOUT:g}x median)",
         f"L{il}H{ih} {is_:.2f}", is_ >= INDUCTION_THRESHOLD
         and is_ >= STANDOUT * float(scores.induction.median())),
        ("induction head sits above the previous-token head (layer order)",
         f"{il} > {pl}", il > pl),
    ]
