"""Operands whose results do not depend on where their bytes live.

A BLAS GEMM may take another path, with another order of additions and so other
rounding, when its operands start at another address: a tensor read from a file can sit
at an 8-byte offset where a freshly computed one sits at a 64-byte boundary, and on some
CPUs (AMD EPYC with AVX-512, for one) the same trace then gives weights that differ in
the last bits. attnlab's exact weights are a function of the values only: every entry
point that multiplies q by k (or weights by v) passes its operands through
:func:`aligned`, so what reaches the GEMM always starts on a 64-byte boundary (PyTorch's
CPU allocator aligns every allocation to 64 bytes), and the offsets of the tiles inside
it are the same whoever made the tensor.

>>> buf = torch.zeros(66)
>>> view = buf[2:66]                      # 8 bytes past a 64-byte boundary
>>> view.data_ptr() % ALIGNMENT, aligned(view).data_ptr() % ALIGNMENT
(8, 0)
>>> t = torch.zeros(4, 4)
>>> aligned(t) is t                       # already aligned: no copy
True
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ALIGNMENT", "aligned", "is_aligned"]

#: The byte boundary every GEMM operand starts on (PyTorch's CPU allocation alignment).
ALIGNMENT = 64


def is_aligned(t: Tensor) -> bool:
    """Whether ``t``'s first element starts on an :data:`ALIGNMENT` boundary (always True
    off the CPU, where the placement is the device's business, and for empty tensors)."""
    return t.device.type != "cpu" or t.numel() == 0 or t.data_ptr() % ALIGNMENT == 0


def aligned(t: Tensor) -> Tensor:
    """``t`` itself when it starts on a 64-byte boundary, else a contiguous copy (a fresh
    allocation, which does). Differentiable, like ``clone``."""
    if not isinstance(t, Tensor) or is_aligned(t):
        return t
    return t.clone(memory_format=torch.contiguous_format)
