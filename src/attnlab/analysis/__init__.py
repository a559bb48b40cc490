"""Head diagnostics on attention traces: entropy, saturation, sinks, previous-token,
self and induction heads, redundancy with a clustering, and the recomputation check."""

from attnlab.analysis.heads import (
    HeadDiagnostics,
    Thresholds,
    cluster_heads,
    diagnose,
    diagnose_model,
    head_scores,
    induction_scores,
    pattern_similarity,
    recompute_errors,
    repeated_random_tokens,
)

__all__ = ["HeadDiagnostics", "Thresholds", "cluster_heads", "diagnose", "diagnose_model",
           "head_scores", "induction_scores", "pattern_similarity", "recompute_errors",
           "repeated_random_tokens"]
