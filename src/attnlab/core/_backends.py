"""The ``"chunked"`` and ``"linear"`` backends of ``scaled_dot_product_attention``.

Arguments arrive checked (see :func:`attnlab.core.functional.scaled_dot_product_attention`).
"""

from __future__ import annotations

from torch import Tensor


def dispatch(
    backend: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    causal: bool,
    scale: float,
    dropout_p: float,
    return_weights: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    if backend == "chunked":
        from attnlab.core.chunked import _chunked
        from attnlab.core.weights import _weights_from_lse

        out, lse = _chunked(q, k, v, mask, causal, scale, dropout_p)
        if not return_weights:
            return out
        # every weight, rebuilt exactly from the logsumexp (this is N x N again: asked for)
        return out, _weights_from_lse(q, k, lse, mask, causal, scale)
    if backend == "linear":
        from attnlab.core.linear import _linear

        if dropout_p > 0.0:
            raise ValueError(f"the linear backend has no dropout; got dropout_p={dropout_p}")
        return _linear(q, k, v, mask, causal, return_weights)
    raise ValueError(f"backend must be 'chunked' or 'linear' here, got {backend!r}")
