"""The conditions the inventory states for claims of both articles: ``IID_*``, the
assumptions of the variance argument (√d_k); ``NORM_*``, the score is a cosine only for
unit vectors. Stated once, here (pure data)."""

from __future__ import annotations

__all__ = ["IID_EN", "IID_ZH", "NORM_EN", "NORM_ZH"]

IID_EN = ("Only when the components of q and k are independent with mean 0 and variance 1; "
           "with mean μ each product has variance 1 + 2μ² (measured), and trained q, k are "
           "neither independent nor unit-variance.")
IID_ZH = ("仅当 q、k 的各分量相互独立、均值为 0、方差为 1 时成立；若均值为 μ，每个乘积的方差变为 "
           "1 + 2μ²（实测），而训练后的 q、k 既不独立，方差也不为 1。")
NORM_EN = ("The score is the cosine only for unit vectors: q·k = |q||k|cos θ, not bounded by 1, "
           "and the lengths carry part of the score's spread (measured per head). Within one "
           "query's row |q| is common to every key, and on the trained head measured the key "
           "lengths do not reorder what the angle gives.")
NORM_ZH = ("只有单位向量的点积才等于夹角余弦：q·k = |q||k|cos θ，其值不以 1 为界，"
           "分数的波动有一部分来自向量长度（逐头实测）。同一查询的一行之内 |q| 对所有键相同；"
           "在实测的训练后的头上，键的长度并不打乱夹角给出的顺序。")
