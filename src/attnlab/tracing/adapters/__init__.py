"""How capture reads each kind of model: one adapter per kind, one small interface.

An adapter (see :class:`~attnlab.tracing.adapters._base.Adapter`) is an object with

* ``name``: a short label recorded with each call (``"attnlab"``, ``"torch"``, ...);
* ``matches(module) -> bool``: whether it reads this module;
* ``attach(cap, modules) -> list of handles``: start observing ``modules`` (all the
  modules of one model it matched) for the capture ``cap``, which receives one
  :class:`~attnlab.tracing.adapters._base.AttentionRecord` per attention call through
  ``cap.add(record)``. Each handle's ``remove()`` undoes what attach did; capture removes
  them all in ``finally``.

An adapter only marks the modules it observes (hooks on them, an attribute on them or on
their own config): nothing global changes, so capturing one model never changes another's
path. Supporting a new kind of model is one new module here, added to :data:`ADAPTERS`.
"""

from __future__ import annotations

from attnlab.tracing.adapters._base import Adapter, AttentionRecord, Handle, Restore, Sink
from attnlab.tracing.adapters.attnlab import ADAPTER as ATTNLAB
from attnlab.tracing.adapters.huggingface import ADAPTER as HUGGINGFACE
from attnlab.tracing.adapters.inline import ADAPTER as INLINE
from attnlab.tracing.adapters.torch_mha import ADAPTER as TORCH_MHA

__all__ = ["ADAPTERS", "Adapter", "AttentionRecord", "Handle", "Restore", "Sink"]

#: The adapters capture tries, in order; the first that matches a module reads it.
ADAPTERS: tuple[Adapter, ...] = (ATTNLAB, TORCH_MHA, INLINE, HUGGINGFACE)
