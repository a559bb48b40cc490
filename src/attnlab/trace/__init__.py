"""Traces of attention: capture from attnlab, torch and Hugging Face models; weights on demand.

* :class:`AttentionTrace` (:mod:`attnlab.trace.attention`): per layer and head q, k, v and
  the log-sum-exp of each row, the score shaping as parameters; exact weights computed
  when asked (rows, tiles, pooled blocks, top-k), saved as safetensors.
* :func:`capture` / :class:`Capture` (:mod:`attnlab.trace.capture`): record every attention
  call of a model while it runs; adapters per kind of model in :mod:`attnlab.trace.adapters`.
* :func:`trace` (:mod:`attnlab.trace.tracer`): one input through an already-loaded model.
"""

from attnlab.trace.attention import FORMAT_VERSION, AttentionTrace, TraceFormatError
from attnlab.trace.capture import AttentionRecord, Capture, capture
from attnlab.trace.tracer import trace

__all__ = ["FORMAT_VERSION", "AttentionRecord", "AttentionTrace", "Capture",
           "TraceFormatError", "capture", "trace"]
