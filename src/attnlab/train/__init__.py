"""Train tiny transformers on synthetic tasks and watch their heads specialize.

``attnlab train --task induction --out DIR`` (or ``python -m attnlab.train``, or
``torchrun --nproc_per_node=2 -m attnlab.train``) trains attnlab's own ``GPT`` on a task
whose solution needs a known attention relation, writes a resumable run directory, and
reports which heads became the previous-token and induction heads (for ``assoc-recall``,
the lookup heads).
"""

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and the API reference; at run time, _LAZY below
    from attnlab.train.checkpoint import CheckpointError, RunTokenizer, is_run_dir, load_run
    from attnlab.train.config import TrainConfig
    from attnlab.train.heads import HeadScores, LookupScores, score_heads, score_lookup_heads
    from attnlab.train.tasks import TASKS, Task, get_task
    from attnlab.train.trainer import TrainResult, evaluate, train

#: name -> the module that defines it, imported on first use (no torch for ``--help``)
_LAZY = {
    **dict.fromkeys(("CheckpointError", "RunTokenizer", "is_run_dir", "load_run"),
                    "attnlab.train.checkpoint"),
    "TrainConfig": "attnlab.train.config",
    **dict.fromkeys(("HeadScores", "LookupScores", "score_heads", "score_lookup_heads"),
                    "attnlab.train.heads"),
    **dict.fromkeys(("TASKS", "Task", "get_task"), "attnlab.train.tasks"),
    **dict.fromkeys(("TrainResult", "evaluate", "train"), "attnlab.train.trainer"),
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY)

__all__ = [
    "TASKS",
    "CheckpointError",
    "HeadScores",
    "LookupScores",
    "RunTokenizer",
    "Task",
    "TrainConfig",
    "TrainResult",
    "evaluate",
    "get_task",
    "is_run_dir",
    "load_run",
    "score_heads",
    "score_lookup_heads",
    "train",
]
