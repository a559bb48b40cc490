"""Traces of attention: capture from attnlab, torch and Hugging Face models; weights on demand.

* :class:`AttentionTrace` (:mod:`attnlab.tracing.attention`): per layer and head q, k, v and
  the log-sum-exp of each row, the score shaping as parameters; exact weights computed
  when asked (rows, tiles, pooled blocks, top-k), saved as safetensors.
* :func:`capture` / :class:`Capture` (:mod:`attnlab.tracing.capture`): record every attention
  call of a model while it runs; adapters per kind of model in :mod:`attnlab.tracing.adapters`.
* :func:`trace` (:mod:`attnlab.tracing.tracer`): one input through an already-loaded model.
* :class:`StackedTrace` / :func:`load_trace` / :func:`open_trace` / :func:`verify_across`
  (:mod:`attnlab.tracing.stacks`): the encoder, decoder and cross-attention stacks of an
  encoder–decoder model, kept apart; reading a trace file of either kind, whole or mapped,
  and checking a mapped one on several processes at once (``torchrun``).
* :data:`FORMAT_VERSION` / :class:`TraceFormatError` (:mod:`attnlab.tracing.trace_file`):
  the trace file format, written, read, checked and upgraded from older versions in one
  module.
"""

from attnlab.tracing.attention import FORMAT_VERSION, AttentionTrace, TraceFormatError
from attnlab.tracing.capture import AttentionRecord, Capture, UnreadableAttentionError, capture
from attnlab.tracing.stacks import (
    StackedTrace,
    load_trace,
    one_stack,
    open_trace,
    stacks_of,
    verify_across,
)
from attnlab.tracing.tracer import trace

__all__ = ["FORMAT_VERSION", "AttentionRecord", "AttentionTrace", "Capture",
           "StackedTrace", "TraceFormatError", "UnreadableAttentionError", "capture",
           "load_trace", "one_stack", "open_trace", "stacks_of", "trace", "verify_across"]
