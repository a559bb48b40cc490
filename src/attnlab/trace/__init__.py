"""AttentionTrace and capture from attnlab, torch and Hugging Face models.

The package is also callable: ``attnlab.trace(model, text)`` is
:func:`attnlab.trace.tracer.trace`, while ``attnlab.trace.AttentionTrace`` and
``from attnlab.trace import capture`` keep working as for any package.
"""

import sys
import types

from attnlab.trace.capture import AttentionRecord, Capture, capture
from attnlab.trace.trace import FORMAT_VERSION, AttentionTrace, TraceFormatError
from attnlab.trace.tracer import trace

__all__ = ["FORMAT_VERSION", "AttentionRecord", "AttentionTrace", "Capture",
           "TraceFormatError", "capture", "trace"]


class _CallableModule(types.ModuleType):
    """``attnlab.trace(...)`` calls :func:`trace`; attribute access is the package's."""

    def __call__(self, *args, **kwargs):
        return trace(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
