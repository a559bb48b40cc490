"""AttentionTrace and capture from attnlab, torch and Hugging Face models."""

from attnlab.trace.trace import FORMAT_VERSION, AttentionTrace, TraceFormatError

__all__ = ["FORMAT_VERSION", "AttentionTrace", "TraceFormatError"]
