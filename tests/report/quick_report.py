"""A quick report (a few seconds): every part's section as the page shows it, from
stand-in numbers where the real part needs minutes (the experiments, the real models).

:data:`PROVIDERS` are ``build_report`` providers ("module:function"; this module is on the
test path): the claim inventory and one section per registry experiment, from results that
pass (one of them a finding) with formulas in their texts; the real parity part; the
explorer section on a toy GPT; and one small section for each other part, with the ids the
real parts use.
"""

from __future__ import annotations

import torch

from attnlab.experiments import EXPERIMENTS, Check, Result
from attnlab.experiments.claims import check_ids
from attnlab.report import claims as claims_part
from attnlab.report import experiments as experiments_part
from attnlab.report import explorer as explorer_part
from attnlab.report.html import ReportContext, Section, bilingual, table

PROVIDERS = [f"quick_report:{f}" for f in ("claims", "parity", "experiments", "explorer",
                                           "others")]
#: the experiment whose claim, in the quick report, does not hold, as it expected
FINDING = "multihead-cost"
#: the section id of each other part, with its status (None: shows, no verdict)
OTHERS = {"real-models": True, "architectures": True, "long-contexts": None,
          "attribution": True,
          "survey": True, "survey-smollm2": True, "trained-model": True}


def _checks_for(name: str) -> list[Check]:
    """One passing check for each check id of ``name`` the inventory reads."""
    return [Check(i, 0.0, "≤ 1", True, id=i) for i in check_ids(name)]


def _result(name: str) -> Result:
    finding = name == FINDING
    return Result(
        name=name, claim=r"The scores $q \cdot k / \sqrt{d_k}$ have unit variance.",
        claim_zh=r"分数 $q \cdot k / \sqrt{d_k}$ 的方差为 1。",
        quantity=r"$\mathrm{Var}(q \cdot k)$", quantity_zh=r"$\mathrm{Var}(q \cdot k)$",
        measured=1.0 if finding else 0.0, expected=0.0, tolerance=1e-3,
        checks=_checks_for(name), expect_holds=not finding,
        expect_why="known" if finding else "", caption=r"Weights $A_{i,j}$ sum to one.",
        caption_zh=r"权重 $A_{i,j}$ 之和为 1。")


def _results(ctx: ReportContext) -> list[Result]:
    if "experiments" not in ctx.cache:
        ctx.cache["experiments"] = [_result(n) for n in EXPERIMENTS]
    return ctx.cache["experiments"]


def claims(ctx: ReportContext) -> Section:
    _results(ctx)
    return claims_part.build(ctx)


def parity(ctx: ReportContext) -> Section:
    from attnlab.report import parity as parity_part

    return parity_part.build(ctx)


def experiments(ctx: ReportContext) -> list[Section]:
    _results(ctx)
    return experiments_part.build(ctx)


def explorer(ctx: ReportContext) -> Section:
    import attnlab
    from attnlab.tracing.tracer import trace
    from attnlab.viz.explorer import Explorer

    torch.manual_seed(0)
    gpt = attnlab.GPT(attnlab.GPTConfig(vocab_size=16, num_layers=2, num_heads=2,
                                        embed_dim=16))
    t = trace(gpt, [1, 2, 3, 4, 5, 6])
    t.tokens = ["The", " cat", " sat", " on", " the", " mat"]
    return explorer_part.section_for(Explorer(t, uid="ax-quick"), "The cat sat on the mat",
                                     model="toy GPT")


def others(ctx: ReportContext) -> list[Section]:
    out = []
    for sid, passed in OTHERS.items():
        body = bilingual(rf"{sid}: the weights $\mathrm{{softmax}}(QK^\top/\sqrt{{d_k}})$.",
                         rf"{sid}：权重 $\mathrm{{softmax}}(QK^\top/\sqrt{{d_k}})$。")
        body += table(["quantity", "value"], [(r"$\max_j A_{i,j}$", 0.5)])
        out.append(Section(sid, f"Part {sid}", f"部分 {sid}", body, passed))
    return out
