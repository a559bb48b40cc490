"""What every fuzz test asserts: a correct finite result, or a ValueError/TypeError whose
message names the argument at fault. Any other exception fails the test as it is."""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, settings

#: Derandomized (the same examples every run, no database): a failure is reproducible.
FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=60,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much])


class Refused(Exception):
    """Raised by :func:`call` for a clean refusal (so the caller can stop there)."""


def call(fn, *args, names: tuple[str, ...], **kwargs):
    """``fn(*args, **kwargs)``; a ValueError/TypeError must name one of ``names``, and is
    turned into :class:`Refused`. Any other exception propagates (and fails the test)."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        assert any(n in msg for n in names), (
            f"{type(exc).__name__} does not name any of {names}: {msg!r}")
        assert "\n" not in msg.strip() or len(msg) < 2000, msg
        raise Refused(msg) from exc


def finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


def close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    """|a - b| <= tol · (1 + |b|), elementwise, with -inf matching -inf."""
    a, b = a.double(), b.double()
    same_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    ok = same_inf | ((a - b).abs() <= tol * (1 + b.abs()))
    return bool(ok.all())


def tensor(gen: torch.Generator, shape, dtype=torch.float32, lo=-3.0, hi=3.0) -> torch.Tensor:
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def is_nan_free(x) -> bool:
    if isinstance(x, torch.Tensor):
        return not bool(torch.isnan(x).any()) if x.is_floating_point() else True
    if isinstance(x, float):
        return not math.isnan(x)
    return True
