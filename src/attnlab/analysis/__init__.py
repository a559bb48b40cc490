"""Head analysis on attention traces, streamed over tiles of query rows (no N² memory).

:mod:`attnlab.analysis.scores`: the per-head scores (entropy, maximum weight, sink mass,
previous-token, self, duplicate-token and induction scores, mean attention distance) and
the heads' pattern similarity, streamed over a trace; their arithmetic, the sums of a tile
of weights, is :mod:`attnlab.analysis.sums` (the survey's too). :mod:`attnlab.analysis
.heads`: :func:`diagnose`, the roles heads earn, clusters of redundant heads.
:mod:`attnlab.analysis.recompute`: the check that a trace's weights and context follow
from its q, k and v. :mod:`attnlab.analysis.literature` (with
:mod:`attnlab.analysis.detection`): the scores as the literature defines them;
:mod:`attnlab.analysis.survey` (with :mod:`~attnlab.analysis.corpus` and
:mod:`~attnlab.analysis.survey_result`): per-head statistics over a corpus.
"""

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_exports

_NAMES = {
    **dict.fromkeys(("ROLES", "HeadDiagnostics", "StackedDiagnostics", "Thresholds",
                     "cluster_heads", "diagnose", "diagnose_model", "induction_trace",
                     "repeated_random_tokens"), "attnlab.analysis.heads"),
    "recompute_errors": "attnlab.analysis.recompute",
    **dict.fromkeys(("SCORE_NAMES", "head_scores", "pattern_similarity"),
                    "attnlab.analysis.scores"),
}

__all__ = ["ROLES", "SCORE_NAMES", "HeadDiagnostics", "StackedDiagnostics", "Thresholds",
           "cluster_heads", "diagnose", "diagnose_model", "head_scores", "induction_trace",
           "pattern_similarity", "recompute_errors", "repeated_random_tokens"]
__getattr__, __dir__ = lazy_exports(globals(), _NAMES)

if TYPE_CHECKING:  # for type checkers; at run time the names come on first use
    from attnlab.analysis.heads import (
        ROLES,
        HeadDiagnostics,
        StackedDiagnostics,
        Thresholds,
        cluster_heads,
        diagnose,
        diagnose_model,
        induction_trace,
        repeated_random_tokens,
    )
    from attnlab.analysis.recompute import recompute_errors
    from attnlab.analysis.scores import SCORE_NAMES, head_scores, pattern_similarity
