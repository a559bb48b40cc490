"""Traces of attention: capture from attnlab, torch and Hugging Face models; weights on demand.

* :class:`AttentionTrace` (:mod:`attnlab.tracing.attention`): per layer and head q, k, v and
  the log-sum-exp of each row, the score shaping as parameters; exact weights computed
  when asked (rows, tiles, pooled blocks, top-k), saved as safetensors.
* :func:`capture` / :class:`Capture` (:mod:`attnlab.tracing.capture`): record every attention
  call of a model while it runs; adapters per kind of model in :mod:`attnlab.tracing.adapters`.
* :func:`trace` (:mod:`attnlab.tracing.tracer`): one input through an already-loaded model.
"""

from attnlab.tracing.attention import FORMAT_VERSION, AttentionTrace, TraceFormatError
from attnlab.tracing.capture import AttentionRecord, Capture, UnreadableAttentionError, capture
from attnlab.tracing.tracer import trace

__all__ = ["FORMAT_VERSION", "AttentionRecord", "AttentionTrace", "Capture",
           "TraceFormatError", "UnreadableAttentionError", "capture", "trace"]
