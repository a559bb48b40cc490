"""The claim inventory as data: every claim, code listing and recommendation of the two
articles (:data:`CLAIMS`, written per article in :mod:`.claims_000` and :mod:`.claims_001`)
and what attnlab measures beyond them (:data:`EXTENSIONS`).

The records are Python (:mod:`.claim_types`), not a JSON or TOML file: each is checked by
its type when the module is imported (a claim without evidence or a reason, a malformed
check id, a missing translation fail at once, naming the claim), the text needs no loader
or schema of its own, and shared wording (a condition used by several claims) is one
named constant instead of a copy. Nothing here computes: the verdicts are
:mod:`attnlab.experiments.claims`.

>>> len(CLAIMS) == len(CLAIMS_000) + len(CLAIMS_001), [e.experiment for e in EXTENSIONS]
(True, ['rope-relative', 'linear-attention', 'masking'])
"""

from __future__ import annotations

from .claim_types import Claim, Extension
from .claims_000 import CLAIMS_000
from .claims_001 import CLAIMS_001

__all__ = ["CLAIMS", "EXTENSIONS"]

#: Every claim, code listing and recommendation of the two articles, in reading order.
CLAIMS: tuple[Claim, ...] = CLAIMS_000 + CLAIMS_001

#: What attnlab measures beyond the two articles.
EXTENSIONS: tuple[Extension, ...] = (
    Extension("rope-relative",
              "Rotary position embeddings: the score ⟨R_m q, R_n k⟩ depends only on m − n.",
              "旋转位置编码：分数 ⟨R_m q, R_n k⟩ 只取决于 m − n。"),
    Extension("linear-attention",
              "elu+1 linear attention: its recurrent (RNN) form equals its parallel form, and "
              "its cost grows linearly in N.",
              "elu+1 线性注意力：递归（RNN）形式与并行形式相等，计算量随 N 线性增长。"),
    Extension("masking",
              "attnlab's rule for a row whose keys are all masked: its output is 0, not NaN.",
              "attnlab 对键全部被遮蔽的行的约定：输出为 0，而不是 NaN。",
              "dead-row-zero,dead-row-finite"),
)
