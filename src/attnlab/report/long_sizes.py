"""The sizes and budgets of the report's long-contexts part
(:mod:`attnlab.report.long_contexts`): which token counts the curve takes, from the
environment, and how much memory the dense (eager ``output_attentions``) curve may use,
with the prediction that stops it before a process would pass that budget.

>>> sizes_up_to(1000)
[256, 512]
>>> dense_bytes(1024, num_layers=30, num_heads=9) / 1e9  # SmolLM2 at 1,024 tokens
1.212153856
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from attnlab._errors import check_int

__all__ = ["SIZES", "DEFAULT_DENSE_BUDGET_BYTES", "TOKENS_ENV", "BUDGET_ENV", "sizes_up_to",
           "max_tokens_from_env", "dense_budget_bytes", "dense_bytes", "predicted_eager_bytes"]

#: The curve's token counts.
SIZES = (256, 512, 1024, 2048, 4096, 8192)
#: The dense curve's memory budget unless the machine has less than twice as much.
DEFAULT_DENSE_BUDGET_BYTES = 8_000_000_000
TOKENS_ENV = "ATTNLAB_REPORT_LONG_TOKENS"
BUDGET_ENV = "ATTNLAB_REPORT_DENSE_BUDGET_GB"
_GB = 1e9


# -- settings ---------------------------------------------------------------------------------


def sizes_up_to(max_tokens: int) -> list[int]:
    """The sizes of :data:`SIZES` up to ``max_tokens`` (``[max_tokens]`` if none is).

    >>> sizes_up_to(8192)
    [256, 512, 1024, 2048, 4096, 8192]
    >>> sizes_up_to(100)
    [100]
    """
    check_int("max_tokens", max_tokens, minimum=1)
    return [n for n in SIZES if n <= max_tokens] or [max_tokens]


def max_tokens_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """``$ATTNLAB_REPORT_LONG_TOKENS``, or 8192.

    >>> max_tokens_from_env({}), max_tokens_from_env({"ATTNLAB_REPORT_LONG_TOKENS": "512"})
    (8192, 512)
    """
    raw = environ.get(TOKENS_ENV, "").strip()
    if not raw:
        return SIZES[-1]
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{TOKENS_ENV} must be a positive whole number of tokens, got {raw!r}")
    return n


def _total_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def dense_budget_bytes(environ: Mapping[str, str] = os.environ,
                       total_memory: int | None = None) -> int:
    """The dense curve's budget: ``$ATTNLAB_REPORT_DENSE_BUDGET_GB`` GB, else 8 GB or half
    of ``total_memory`` (this machine's, by default) if that is less.

    >>> dense_budget_bytes({}, total_memory=24 * 10**9), dense_budget_bytes({}, 8 * 10**9)
    (8000000000, 4000000000)
    >>> dense_budget_bytes({"ATTNLAB_REPORT_DENSE_BUDGET_GB": "2.5"})
    2500000000
    """
    raw = environ.get(BUDGET_ENV, "").strip()
    if raw:
        try:
            gb = float(raw)
        except ValueError:
            gb = float("nan")
        if not (gb > 0 and math.isfinite(gb)):
            raise ValueError(f"{BUDGET_ENV} must be a positive number of GB, got {raw!r}")
        return int(gb * _GB)
    total = _total_memory() if total_memory is None else total_memory
    return DEFAULT_DENSE_BUDGET_BYTES if total is None else min(DEFAULT_DENSE_BUDGET_BYTES,
                                                                total // 2)


# -- the stop rule ----------------------------------------------------------------------------


def dense_bytes(n: int, *, num_layers: int, num_heads: int) -> int:
    """The attention memory of a Hugging Face eager forward with ``output_attentions`` at
    ``n`` tokens, float32: every layer's weights, kept to be returned (L·H·N²), and in the
    layer being computed its scores and masked scores (2·H·N²) and the causal mask (N²)."""
    return 4 * n * n * (num_layers * num_heads + 2 * num_heads + 1)


def predicted_eager_bytes(n: int, *, num_layers: int, num_heads: int, base_bytes: int) -> int:
    """The predicted peak of an eager process: ``base_bytes`` (the model and the runtime)
    plus :func:`dense_bytes`.

    >>> predicted_eager_bytes(4096, num_layers=30, num_heads=9, base_bytes=10**9) > 8 * 10**9
    True
    """
    return int(base_bytes) + dense_bytes(n, num_layers=num_layers, num_heads=num_heads)
