"""The pages of a memory-mapped trace file that one process holds, kept within a bound.

A trace opened with :meth:`attnlab.tracing.attention.AttentionTrace.open` is a view of the
file mapped copy-on-write: a page is read from disk (or the page cache) when a computation
first touches it, and then counts in the process's resident set until the mapping ends.
A pass over every layer of a file larger than memory would hold the whole file that way.
:class:`Resident` remembers the layer chunks read through
:meth:`~attnlab.tracing.attention.AttentionTrace.layer_tensor`, most recent last, and once
they hold more than ``limit`` bytes drops the oldest chunks' pages from the process
(``madvise(MADV_DONTNEED)``). Nothing is lost: the mapping is never written, so a dropped
page is the file's, and the next read of it maps it again from the page cache or the disk.
Tensors handed out before stay valid; only reading them again costs a page fault.

>>> import mmap, tempfile, torch
>>> with tempfile.TemporaryFile() as f:
...     _ = f.write(torch.arange(4 * 4096, dtype=torch.float32).numpy().tobytes())
...     f.flush()
...     mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
>>> t = torch.frombuffer(mm, dtype=torch.float32).view(4, 4096)  # 4 layers of 16 KiB
>>> r = Resident(mm, limit=2 * 4 * 4096)
>>> for layer in range(4):
...     r.touch(("q", layer), t[layer])
>>> r.held(), r.resident_bytes, r.dropped_bytes
([('q', 2), ('q', 3)], 32768, 32768)
>>> float(t[0, 7])  # a dropped page is read again, unchanged
7.0
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from collections import OrderedDict
from collections.abc import Hashable

from torch import Tensor

from attnlab._errors import check_int

__all__ = ["RESIDENT_BYTES", "Resident"]

#: What an opened trace keeps of its file in the resident set, by default: 1 GiB of the
#: layer chunks read most recently (at least the chunks of the layer read last).
RESIDENT_BYTES = 1 << 30

_PAGE = mmap.PAGESIZE


class Resident:
    """The layer chunks of one mapping ``mm`` a process has read, at most ``limit`` bytes of
    them resident (the chunks of the layer read last are never dropped, whatever their
    size). Thread-safe."""

    def __init__(self, mm: mmap.mmap, limit: int = RESIDENT_BYTES) -> None:
        self.limit = check_int("limit", limit)
        self._mm = mm
        self._size = len(mm)
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(mm)) if self._size else 0
        self._spans: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self.resident_bytes = 0
        self.dropped_bytes = 0
        self._lock = threading.Lock()

    def _span(self, view: Tensor) -> tuple[int, int] | None:
        """``view``'s bytes as offsets into the mapping, or None when it is not one
        contiguous piece of it (a copy, or a strided view)."""
        if not view.is_contiguous() or view.numel() == 0:
            return None
        start = view.data_ptr() - self._base
        end = start + view.numel() * view.element_size()
        return (start, end) if 0 <= start and end <= self._size else None

    def touch(self, key: Hashable, view: Tensor) -> None:
        """Note that the chunk ``key`` (e.g. ``("q", layer)``, whose layer is ``key[-1]``)
        was read as ``view``; drop the oldest chunks while more than ``limit`` bytes are
        held."""
        span = self._span(view)
        if span is None:
            return
        with self._lock:
            if key in self._spans:
                self._spans.move_to_end(key)
                return
            self._spans[key] = span
            self.resident_bytes += span[1] - span[0]
            layer = key[-1] if isinstance(key, tuple) else None
            for old in list(self._spans):
                if self.resident_bytes <= self.limit:
                    break
                if isinstance(old, tuple) and old[-1] == layer:
                    continue  # the layer being read stays
                self._drop(old)

    def release(self) -> None:
        """Drop every chunk held (e.g. after a pass over the whole file)."""
        with self._lock:
            for key in list(self._spans):
                self._drop(key)

    def held(self) -> list[Hashable]:
        """The chunks held, oldest first."""
        with self._lock:
            return list(self._spans)

    def _drop(self, key: Hashable) -> None:
        start, end = self._spans.pop(key)
        self.resident_bytes -= end - start
        self.dropped_bytes += end - start
        # only the pages wholly inside the chunk: a page it shares with a neighbour stays
        first = -(-start // _PAGE) * _PAGE
        last = end // _PAGE * _PAGE
        if last > first:
            self._mm.madvise(mmap.MADV_DONTNEED, first, last - first)
