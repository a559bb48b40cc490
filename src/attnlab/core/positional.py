"""Positional encodings: the sinusoidal table and its rotations, RoPE, ALiBi.

The sinusoidal table (Vaswani et al., article 001)::

    PE[pos, 2i]   = sin(pos / base^(2i/embed_dim))
    PE[pos, 2i+1] = cos(pos / base^(2i/embed_dim))

Each (sin, cos) pair is a point on a circle turning at angular frequency
ω_i = base^(-2i/embed_dim); moving ``k`` positions turns every pair by ω_i·k, so
``PE[pos+k] = M_k @ PE[pos]`` with one block-diagonal rotation M_k for all pos
(:func:`relative_rotation`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.core._checks import check_int, check_real

__all__ = [
    "frequencies",
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "relative_rotation",
    "RotaryEmbedding",
    "apply_rotary",
    "alibi_slopes",
    "alibi_bias",
]


def _check_dim(name: str, d: object, *, even: bool = True) -> int:
    d = check_int(name, d, minimum=1)
    if even and d % 2:
        raise ValueError(f"{name} must be even (sin/cos pairs), got {d}")
    return d


def _check_real(name: str, x: object) -> float:
    return check_real(name, x)


def _check_tensor(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def frequencies(embed_dim: int, base: float = 10000.0,
                dtype: torch.dtype = torch.float64) -> Tensor:
    """(embed_dim/2,) angular frequencies ω_i = base^(-2i/embed_dim); wavelength is 2π/ω_i."""
    embed_dim = _check_dim("embed_dim", embed_dim)
    base = _check_real("base", base)
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    i = torch.arange(0, embed_dim, 2, dtype=torch.float64)
    return torch.pow(float(base), -i / embed_dim).to(dtype)


def sinusoidal_table(
    n_positions: int,
    embed_dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """(n_positions, embed_dim) table: sin on even dims, cos on odd dims.

    >>> pe = sinusoidal_table(50, 16)
    >>> pe.shape, float(pe[0, 0]), float(pe[0, 1])
    (torch.Size([50, 16]), 0.0, 1.0)
    """
    n_positions = check_int("n_positions", n_positions)
    omega = frequencies(embed_dim, base)  # (d/2,)
    angle = torch.arange(n_positions, dtype=torch.float64)[:, None] * omega[None, :]
    pe = torch.empty(n_positions, embed_dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``x`` of shape (B, N, embed_dim).

    ``offset`` shifts positions (for decoding with a cache). Inputs longer than
    ``max_len`` raise instead of being truncated.
    """

    pe: Tensor

    def __init__(self, embed_dim: int, max_len: int = 4096, base: float = 10000.0,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.embed_dim = _check_dim("embed_dim", embed_dim)
        self.max_len = check_int("max_len", max_len)
        dropout = _check_real("dropout", dropout)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.register_buffer("pe", sinusoidal_table(max_len, embed_dim, base), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_tensor("x", x)
        offset = check_int("offset", offset)
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x must have shape (B, N, {self.embed_dim}), got {tuple(x.shape)}"
            )
        n = x.shape[1]
        if offset + n > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + n - 1} exceed max_len={self.max_len}"
            )
        return self.dropout(x + self.pe[offset : offset + n].to(x.dtype))


def relative_rotation(
    offset: int | float,
    embed_dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """(embed_dim, embed_dim) block-diagonal M with ``PE[pos + offset] = M @ PE[pos]`` for all pos.

    Block i acts on the pair (sin ω_i p, cos ω_i p) as the rotation
    ``[[cos ω_i k, sin ω_i k], [-sin ω_i k, cos ω_i k]]`` (angle-sum formulas).

    >>> pe = sinusoidal_table(20, 8, dtype=torch.float64)
    >>> m = relative_rotation(3, 8)
    >>> bool(torch.allclose(pe[3:] , pe[:-3] @ m.T))
    True
    """
    omega = frequencies(embed_dim, base)
    theta = omega * _check_real("offset", offset)
    c, s = torch.cos(theta), torch.sin(theta)
    m = torch.zeros(embed_dim, embed_dim, dtype=torch.float64)
    idx = torch.arange(0, embed_dim, 2)
    m[idx, idx] = c
    m[idx, idx + 1] = s
    m[idx + 1, idx] = -s
    m[idx + 1, idx + 1] = c
    return m.to(dtype)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` (..., N, d) by RoPE angles, half-split layout (as in Llama/GPT-NeoX).

    ``cos``/``sin`` are (N, d) with the d/2 angles repeated twice.
    """
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        _check_tensor(name, t)
    if x.shape[-1] % 2 or cos.shape != sin.shape or cos.shape[-1] != x.shape[-1]:
        raise ValueError(
            f"x (..., N, d) needs an even d and cos, sin of one shape (N, d); got x "
            f"{tuple(x.shape)}, cos {tuple(cos.shape)}, sin {tuple(sin.shape)}"
        )
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos + rotated * sin


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al.): ⟨R_m q, R_n k⟩ depends only on m − n.

    ``forward(x, offset=0)`` rotates ``x`` of shape (..., N, head_dim) as positions
    ``offset .. offset+N-1``; pass ``positions`` (N,) for arbitrary positions. Uses the
    half-split layout of Llama/SmolLM2 (dims i and i + d/2 form a pair).

    >>> rope = RotaryEmbedding(8)
    >>> q, k = torch.randn(1, 8), torch.randn(1, 8)
    >>> a = rope(q, positions=torch.tensor([5])) @ rope(k, positions=torch.tensor([2])).T
    >>> b = rope(q, positions=torch.tensor([13])) @ rope(k, positions=torch.tensor([10])).T
    >>> bool(torch.allclose(a, b, atol=1e-5))
    True
    """

    inv_freq: Tensor

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.head_dim = _check_dim("head_dim", head_dim)
        self.base = float(base)
        self.register_buffer(
            "inv_freq", frequencies(head_dim, base, dtype=torch.float32), persistent=False
        )

    def angles(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # (N, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (N, d)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        _check_tensor("x", x)
        offset = check_int("offset", offset)
        if x.shape[-1] != self.head_dim:
            raise ValueError(
                f"x must have last dim head_dim={self.head_dim}, got shape {tuple(x.shape)}"
            )
        n = x.shape[-2]
        if positions is None:
            positions = torch.arange(offset, offset + n, device=x.device)
        elif not isinstance(positions, Tensor) or positions.shape != (n,):
            got = tuple(positions.shape) if isinstance(positions, Tensor) else positions
            raise ValueError(
                f"positions must be a tensor of shape ({n},) to match x {tuple(x.shape)}, "
                f"got {got!r}"
            )
        cos, sin = self.angles(positions.to(x.device), x.dtype)
        return apply_rotary(x, cos, sin)


def alibi_slopes(num_heads: int) -> Tensor:
    """(num_heads,) ALiBi slopes: 2^(-8/n), 2^(-16/n), ... (Press et al.).

    For a head count that is not a power of two, the slopes of the nearest lower power of
    two are followed by every other slope of the next power (the paper's recipe).

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    num_heads = check_int("num_heads", num_heads, minimum=1)

    def power_of_2(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_2(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_2(closest) + power_of_2(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(num_heads: int, lq: int, lk: int | None = None) -> Tensor:
    """(H, Lq, Lk) float mask ``-slope_h · (p_q − p_k)`` for keys at or before the query.

    Bottom-right aligned like the causal mask; add it to the scores (it is a float mask).
    Future keys get a positive bias here; combine with a causal mask to hide them.
    """
    lq = check_int("lq", lq)
    lk = lq if lk is None else check_int("lk", lk)
    slopes = alibi_slopes(num_heads)
    pos_q = torch.arange(lq)[:, None] + (lk - lq)
    pos_k = torch.arange(lk)[None, :]
    dist = (pos_q - pos_k).to(torch.float32)  # (Lq, Lk)
    return -slopes[:, None, None] * dist[None]
