"""Work the analysis hands to a traced forward: the seam between tracing and analysis.

A trace keeps q, k, v and each row's log-sum-exp; an analysis of every head (``diagnose``,
the explorer's page) then computes every weight again from q and k, one more q·kᵀ and
exponential over the whole sequence, which the forward's own attention had just computed
and dropped. A :class:`SumsTaker` given to :func:`~attnlab.tracing.tracer.trace`
(``sums=``) is told, before the model runs, what the forward will see
(:meth:`SumsTaker.prepare`); the capture holds it (``Capture.taker``), and the adapters of
the modules it observes hand it each attention call they record
(:meth:`SumsTaker.attention`): it may compute that call's output and log-sum-exp itself,
together with whatever it sums from the same weights, or decline (None), and the call is
computed as without it. The trace is the same either way (its q, k, v are the model's; its
log-sum-exp is the one of those scores, within float32 rounding of the other path's).

Only attnlab's analysis implements a taker (:class:`attnlab.analysis.scores.ForwardSums`);
tracing knows nothing of what it sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from torch import Tensor

__all__ = ["SumsTaker"]


@runtime_checkable
class SumsTaker(Protocol):
    """What the tracer and the capture's adapters call."""

    def prepare(self, *, pieces: int, groups: list[list[int]] | None,
                token_ids: Sequence[int] | None, num_layers: int | None) -> None:
        """Before the forward: its ``pieces`` tokens as the model reads them, grouped into
        the trace's tokens (``groups``; None: one piece a token), their ids, and the number
        of attention calls the model makes (None where unknown)."""

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, scale: float,
                  causal: bool) -> tuple[Tensor, Tensor] | None:
        """One recorded self-attention call of one sequence, without mask, bias or
        soft-cap: q (H, L, d), k (H_kv, L, d), v (H_kv, L, dv). Returns its output
        (H, L, dv) and log-sum-exp (H, L), or None to leave the call to the capture."""
