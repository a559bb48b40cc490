"""The claim inventory: quotes verbatim, every claim decided by a registered experiment (or
saying why none can), verdicts computed both ways, its JSON, its command and its report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from articles import SKIP_WHY, article_text
from experiment_sizes import result_of

from attnlab.cli import main
from attnlab.experiments import EXPERIMENTS, Check, Result
from attnlab.experiments import claims as inv
from attnlab.experiments.claims import (
    CLAIM_VERDICTS,
    CLAIMS,
    EXTENSIONS,
    HEADLINE,
    JSON_KEYS,
    Claim,
    Evidence,
    verdicts,
)
from attnlab.report.claims_markdown import TIMED_VERDICT, markdown, page
from attnlab.report.html import text as html_text

HAN = re.compile(r"[\u4e00-\u9fff]")
DOC = Path(__file__).resolve().parents[2] / "docs" / "claims.md"


def _articles() -> dict[str, str] | None:
    """article number -> text (:mod:`articles`), or None when they are not here."""
    texts = {a: article_text(a) for a in inv.ARTICLES}
    return texts if all(t is not None for t in texts.values()) else None


def _zh(text: str) -> bool:
    """Chinese prose (it may name English terms): more Chinese characters than English
    words."""
    return len(HAN.findall(text)) > len(re.findall(r"[A-Za-z]+", text))


def _en(text: str) -> bool:
    """English prose (it may cite a Chinese word): far more ASCII letters than Chinese."""
    return len(re.findall(r"[A-Za-z]", text)) > 10 * len(HAN.findall(text))


def _result(name: str, measured: float = 0.0, *, checks=(), expect_holds: bool = True,
            origin: str = "article") -> Result:
    return Result(name=name, claim="c", claim_zh="论断", quantity="error", quantity_zh="误差",
                  measured=measured, expected=0.0, tolerance=1e-9, checks=list(checks),
                  expect_holds=expect_holds, expect_why="" if expect_holds else "known",
                  origin=origin)


def _claim(*evidence: Evidence, **kw) -> Claim:
    return Claim("t-claim", "000", "claim", "点积", "A test claim.", "一条测试论断。",
                 evidence=tuple(evidence), **kw)


# -- the inventory itself ---------------------------------------------------------------------


def test_every_quote_is_verbatim_in_its_article():
    texts = _articles()
    if texts is None:
        # justified: the articles' text is not in the repository (only beside a checkout)
        pytest.skip(SKIP_WHY)
    missing = [c.id for c in CLAIMS if c.quote_zh not in texts[c.article]]
    assert not missing, f"quotes not found verbatim in their article: {missing}"


def test_ids_are_unique_and_name_their_article():
    ids = [c.id for c in CLAIMS]
    assert len(ids) == len(set(ids))
    assert all(c.id.startswith(c.article + "-") for c in CLAIMS)
    assert {c.article for c in CLAIMS} == set(inv.ARTICLES)
    assert {c.kind for c in CLAIMS} == set(inv.KINDS)
    assert len(CLAIMS) >= 50


def test_no_field_is_empty_and_each_language_is_its_own():
    for c in CLAIMS:
        for field in ("quote_zh", "claim_en", "claim_zh"):
            assert getattr(c, field).strip(), (c.id, field)
        assert _zh(c.claim_zh) and _en(c.claim_en), c.id
        if c.testable:
            assert c.covered_by, c.id
        else:
            assert _zh(c.not_testable_zh) and _en(c.not_testable_en), c.id
        if c.conditions_en:
            assert _zh(c.conditions_zh) and _en(c.conditions_en), c.id


def test_every_testable_claim_is_covered_by_a_registered_experiment():
    unknown = {(c.id, n) for c in CLAIMS for n in c.covered_by if n not in EXPERIMENTS}
    assert not unknown, f"claims covered by unregistered experiments: {sorted(unknown)}"
    assert all(e.experiment in EXPERIMENTS for e in EXTENSIONS)


def test_every_experiment_covers_a_claim_or_is_an_extension():
    covering = set(inv.covering_experiments())
    extensions = {e.experiment for e in EXTENSIONS}
    orphans = [n for n in EXPERIMENTS if n not in covering | extensions]
    assert not orphans, f"experiments that decide no claim and are no extension: {orphans}"
    whole = {e.experiment for e in EXTENSIONS if e.whole}
    assert not whole & covering, "a whole-attnlab experiment cannot decide an article's claim"


def test_a_claim_is_testable_or_says_why_not_never_both():
    with pytest.raises(ValueError, match="needs evidence"):
        _claim()
    with pytest.raises(ValueError, match="no evidence"):
        _claim(Evidence("x"), not_testable_en="why", not_testable_zh="原因")
    with pytest.raises(ValueError, match="conditions_zh"):
        _claim(Evidence("x"), conditions_en="only if")
    with pytest.raises(ValueError, match="kind"):
        Claim("t", "000", "opinion", "点积", "x", "一", evidence=(Evidence("x"),))
    with pytest.raises(ValueError, match="unknown claim id 'nope'"):
        inv.claim("nope")


# -- verdicts, computed from results ---------------------------------------------------------


def test_verdict_holds_and_does_not_hold_from_the_result():
    c = _claim(Evidence("toy"))
    (v,) = verdicts([_result("toy", 0.0)], [c])
    assert v.verdict == "holds" and v.measurements[0].values == (0.0,)
    (v,) = verdicts([_result("toy", 0.5, expect_holds=False)], [c])
    assert v.verdict == "does not hold"
    assert v.measurements[0].values == (0.5,) and not v.defect  # a finding, not a defect
    (v,) = verdicts([_result("toy", 0.5)], [c])  # refuted although expected to hold: defect
    assert v.verdict == "does not hold" and v.defect


def test_conditions_and_not_testable_verdicts():
    c = _claim(Evidence("toy"), conditions_en="only if", conditions_zh="仅当")
    assert verdicts([_result("toy")], [c])[0].verdict == "holds under stated conditions"
    assert verdicts([_result("toy", 1.0)], [c])[0].verdict == "does not hold"
    n = Claim("t-n", "001", "claim", "比喻", "A metaphor.", "比喻。", not_testable_en="metaphor",
              not_testable_zh="比喻")
    (v,) = verdicts([], [n])
    assert v.verdict == "not testable" and v.measurements == ()



def _gap_result(gap_check: bool, control_check: bool) -> Result:
    """A fake experiment: a null result (``gap``, the effect the claim predicts) and a
    positive control (``gap-narrow``, a variant where the effect should appear)."""
    return _result("toy", 1.0, expect_holds=False, checks=[
        Check("gap", 0.0 if not gap_check else 1.0, "≥ 0.2", gap_check, id="gap"),
        Check("gap, narrow", 0.5 if control_check else 0.0, "≥ 0.2", control_check,
              support=True, id="gap-narrow")])


def test_a_null_result_without_a_positive_control_is_not_decided_here():
    null = _claim(Evidence("toy", "gap"), null_result=True)
    (v,) = verdicts([_gap_result(False, True)], [null])
    assert v.verdict == "not decided here" and v.positive_controls == ()
    assert "not decided here" in CLAIM_VERDICTS and inv.ZH["not decided here"] == "此处未能判定"
    assert "no positive control" in markdown([v])


def test_a_null_result_with_a_passing_positive_control_does_not_hold():
    null = _claim(Evidence("toy", "gap"), null_result=True,
                  positive_control=(Evidence("toy", "gap-narrow"),))
    (v,) = verdicts([_gap_result(False, True)], [null])
    assert v.verdict == "does not hold" and v.positive_controls[0].holds
    assert "Positive control" in markdown([v]) and "阳性对照" in markdown([v])
    # a positive control that fails (the setup shows the effect nowhere) decides nothing
    (v,) = verdicts([_gap_result(False, False)], [null])
    assert v.verdict == "not decided here"
    # the effect appears: the claim holds, whatever the control
    (v,) = verdicts([_gap_result(True, True)], [null])
    assert v.verdict == "holds"
    with pytest.raises(ValueError, match="null result"):
        _claim(Evidence("toy", "gap"), positive_control=(Evidence("toy", "gap-narrow"),))


def test_an_existence_claim_is_decided_only_by_a_witness():
    exists = _claim(Evidence("toy", "gap"), existence=True, search_en="two tasks, E = 64",
                    search_zh="两个任务，E = 64")
    (v,) = verdicts([_gap_result(True, True)], [exists])
    assert v.verdict == "holds"  # a witness
    (v,) = verdicts([_gap_result(False, True)], [exists])
    assert v.verdict == "not decided here"  # no witness found: never "does not hold"
    assert v.to_json()["search_en"] == "two tasks, E = 64"
    assert "search made: two tasks" in markdown([v]) and "所做的搜索" in markdown([v])
    with pytest.raises(ValueError, match="search"):
        _claim(Evidence("toy", "gap"), existence=True)

def test_evidence_parts_select_the_headline_or_checks_by_id():
    r = _result("toy", 0.0, checks=[Check("norm part", 2.0, "≤ 1", False, id="norm"),
                                    Check("angle part", 0.1, "≤ 1", True, id="angle")])
    assert not r.holds
    assert verdicts([r], [_claim(Evidence("toy", HEADLINE))])[0].verdict == "holds"
    assert verdicts([r], [_claim(Evidence("toy", "angle"))])[0].verdict == "holds"
    (v,) = verdicts([r], [_claim(Evidence("toy", "norm"))])
    assert v.verdict == "does not hold" and v.measurements[0].values == (2.0,)
    (v,) = verdicts([r], [_claim(Evidence("toy", "angle,norm"))])
    assert v.verdict == "does not hold" and v.measurements[0].values == (0.1, 2.0)
    # a text of the checks' names is no id: it selects nothing, loudly
    with pytest.raises(ValueError, match="no check has the id 'part'.*angle"):
        verdicts([r], [_claim(Evidence("toy", "part"))])


def test_a_typo_in_an_evidence_id_fails_loudly():
    r = _result("toy", 0.0, checks=[Check("angle part", 0.1, "≤ 1", True, id="angle")])
    with pytest.raises(ValueError, match=r"toy:angel: toy: no check has the id 'angel' "
                                         r"\(its check ids: angle\)"):
        verdicts([r], [_claim(Evidence("toy", "angel"))])
    with pytest.raises(ValueError, match="no check has the id 'angle'"):  # a check without id
        verdicts([_result("toy", checks=[Check("angle part", 0.1, "≤ 1", True)])],
                 [_claim(Evidence("toy", "angle"))])
    for bad in ("Angle", "angle part", "angle,,norm", "angle,angle"):
        with pytest.raises(ValueError, match="part"):
            Evidence("toy", bad)
    with pytest.raises(ValueError, match="lowercase slug"):
        Check("angle part", 0.1, "≤ 1", True, id="Angle part")
    with pytest.raises(ValueError, match="unique.*'angle'"):
        _result("toy", checks=[Check("a", 0.0, "≤ 1", True, id="angle"),
                               Check("b", 0.0, "≤ 1", True, id="angle")])


def test_renaming_a_check_keeps_its_evidence():
    c = _claim(*inv.evidence("toy:angle"))
    before = _result("toy", checks=[Check("angle part", 0.1, "≤ 1", True, id="angle"),
                                    Check("norm part", 2.0, "≤ 1", False, id="norm")])
    after = _result("toy", checks=[Check("norm share of Var(score)", 2.0, "≤ 1", False,
                                         id="norm"),
                                   Check("the angle's share, renamed", 0.1, "≤ 1", True,
                                         id="angle")])
    (v0,) = verdicts([before], [c])
    (v1,) = verdicts([after], [c])
    assert v0.verdict == v1.verdict == "holds"
    assert v0.measurements[0].values == v1.measurements[0].values == (0.1,)
    assert v1.measurements[0].quantities == ("the angle's share, renamed",)


def test_every_real_check_has_a_unique_id_and_the_inventory_names_real_ids(fast_results):
    for r in _available(fast_results):
        ids = [c.id for c in r.checks]
        assert all(ids) and len(set(ids)) == len(ids), (r.name, ids)
        missing = [i for i in inv.check_ids(r.name) if i not in ids]
        assert not missing, f"{r.name}: the inventory names check ids it lacks: {missing}"


def test_evidence_against_refutes_the_claim_when_the_experiment_holds():
    c = _claim(Evidence("toy", against=True))
    assert verdicts([_result("toy", 0.0)], [c])[0].verdict == "does not hold"
    assert verdicts([_result("toy", 1.0, expect_holds=False)], [c])[0].verdict == "holds"


def test_a_real_claim_follows_its_experiment_both_ways():
    c = inv.claim("001-pe-linear-shift")
    assert c.covered_by == ("pe-relative-position",)
    assert verdicts([_result("pe-relative-position", 0.0)], [c])[0].verdict == "holds"
    (v,) = verdicts([_result("pe-relative-position", 0.3)], [c])
    assert v.verdict == "does not hold" and v.to_json()["measured"][0]["numbers"][0][
        "measured"] == 0.3


def test_missing_results_are_named():
    with pytest.raises(ValueError, match="pe-relative-position"):
        verdicts([], [inv.claim("001-pe-linear-shift")])
    with pytest.raises(TypeError, match="Result"):
        verdicts([{"name": "x"}], [])


def test_json_keys_are_exactly_the_documented_ones():
    (v,) = verdicts([_result("toy")], [_claim(Evidence("toy"))])
    d = v.to_json()
    assert tuple(d) == JSON_KEYS
    assert {"id", "article", "quote_zh", "claim_en", "claim_zh", "covered_by", "verdict",
            "measured"} <= set(d)
    assert set(d["measured"][0]["numbers"][0]) == {"quantity", "measured", "expected_text"}
    json.dumps(d, allow_nan=False)
    out = inv.to_json([v])
    assert set(out) == {"claims", "extensions", "counts"}
    assert list(out["counts"]) == list(CLAIM_VERDICTS) and out["counts"]["holds"] == 1


def _available(fast_results) -> list[Result]:
    """The session's results, without those whose real model is not installed here."""
    return [r for r in fast_results.values() if isinstance(r, Result)]


def test_the_real_results_decide_every_claim(fast_results):
    """Every evidence part names checks the experiments really have (else ValueError)."""
    results = _available(fast_results)
    have = {r.name for r in results}
    decidable = [c for c in CLAIMS if set(c.covered_by) <= have]
    assert set(EXPERIMENTS) - have <= {"contextualisation"}  # the one needing a real model
    vs = verdicts(results, decidable)
    assert all(v.verdict in CLAIM_VERDICTS for v in vs)
    assert all((v.verdict == "not testable") == (not v.claim.testable) for v in vs)
    assert all(v.measurements or not v.claim.testable for v in vs)
    exts = inv.extension_verdicts(results)
    assert [e.extension for e in exts] == list(EXTENSIONS)
    md = markdown(vs, exts)
    assert md.count("\n| `") == len(decidable) + len(EXTENSIONS)


def _masked(text: str) -> str:
    """``text`` with the numbers of each table row's last two cells (what was measured, in
    English and in Chinese, which depends on the sizes and the machine) blanked, their signs
    with them (a control that is zero up to rounding prints −0.0001 on one CPU and 0.0001 on
    another); every other character kept."""
    out = []
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = re.split(r"(?<!\\)\|", line)  # "", cell, ..., cell, ""
            for i in (-3, -2):
                cells[i] = re.sub(r"[-−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", cells[i])
            line = "|".join(cells)
        out.append(line)
    return "\n".join(out)


def test_docs_claims_md_is_the_generated_page(fast_results):
    """docs/claims.md is page() of the inventory's verdicts: regenerated here from the
    experiments at test sizes, it equals the committed file in every cell (the verdicts and
    the counts included) but the measured numbers."""
    for name in EXPERIMENTS:
        result_of(fast_results, name)  # the page needs every experiment
    results = _available(fast_results)
    generated = page(verdicts(results), inv.extension_verdicts(results))
    committed = DOC.read_text(encoding="utf-8")
    want, got = _masked(generated).splitlines(), _masked(committed).splitlines()
    stale = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b),
                 None if len(want) == len(got) else min(len(want), len(got)))
    assert stale is None, (
        f"docs/claims.md is stale from line {stale + 1}: regenerate it with "
        f"`python -m attnlab.report.claims_markdown`\n"
        f"committed: {got[stale] if stale < len(got) else '(end)'}\n"
        f"generated: {want[stale] if stale < len(want) else '(end)'}")
    fixed = [v for v in verdicts(results) if not v.claim.timed]
    n, k = inv.counts(fixed), inv.kind_counts(verdicts(results))
    assert committed.startswith("# The two articles, claim by claim\n")
    assert (f"{len(CLAIMS)} items (claim {k['claim']}, code {k['code']}, recommendation "
            f"{k['recommendation']}, error {k['error']}). Verdicts: holds {n['holds']},"
            in committed)
    # a verdict that depends on timing is not fixed in the page: its cell says so
    timed = [c.id for c in CLAIMS if c.timed]
    assert timed == ["001-fused-qkv-faster"]
    row = next(ln for ln in committed.splitlines() if ln.startswith(f"| `{timed[0]}` |"))
    assert f"| {TIMED_VERDICT} |" in row and "**holds**" not in row
    assert "measured when the report runs 1." in committed


def test_markdown_puts_the_chinese_beside_the_english_and_leaves_timing_to_the_run():
    timed = inv.claim("001-fused-qkv-faster")
    err = inv.claim("000-error-projection-raises-dimension")
    cond = inv.claim("000-apple-context")
    results = [_result("fused-qkv-speed", 0.0),
               _result("head-dimensions",
                       checks=[Check("W / d", 1.0, "≤ 1", True, id="whole-projection-no-wider"),
                               Check("stacked", 1.0, "≥ 1.5", False, id="stacked-qkv-wider")]),
               _result("contextualisation",
                       checks=[Check(i, 0.1, "≥ 0.001", True, id=p + i) for p in ("", "mid-")
                               for i in ("contexts-separate", "fruit-closer",
                                         "company-closer")]
                       + [Check(i, 0.01, "≤ 0.05", True, id=i)
                          for i in ("separation-p", "separating-layers")])]
    vs = verdicts(results, [timed, err, cond])
    live, fixed = markdown(vs), markdown(vs, live=False)
    assert live.startswith("| id | article | kind · 类型 | quote · 原文 | claim | 论断 |")
    rows = {ln.split(" | ")[0][3:-1]: ln for ln in live.splitlines() if ln.startswith("| `")}
    assert "| **holds** · 成立 |" in rows[timed.id] and timed.claim_zh in rows[timed.id]
    assert TIMED_VERDICT not in live  # attnlab claims: computed, whatever the timing
    frow = next(ln for ln in fixed.splitlines() if ln.startswith(f"| `{timed.id}`"))
    assert f"| {TIMED_VERDICT} |" in frow and "**holds**" not in frow
    assert fixed.replace(frow, "") == live.replace(rows[timed.id], "")  # only that cell
    assert "| error · 文章的错误 |" in rows[err.id] and "**文章有误：**" in rows[err.id]
    assert "**The article is wrong:**" in rows[err.id]
    assert "| **does not hold** · 不成立 |" in rows[err.id]
    assert f"条件：{cond.conditions_zh}" in rows[cond.id]
    (v,) = verdicts([], [inv.claim("000-math-scalpel")])
    assert "无法检验：这是观点与比喻。" in markdown([v]) and "· 无法检验 |" in markdown([v])


def test_an_error_of_the_article_quotes_it_and_is_shown_by_evidence_against_it():
    errors = [c for c in CLAIMS if c.kind == "error"]
    assert len(errors) >= 3 and {c.article for c in errors} == set(inv.ARTICLES)
    assert all(c.testable and c.evidence and all(e.against for e in c.evidence)
               and not c.conditions_en for c in errors)
    assert inv.ZH["error"] == inv.KIND_ZH["error"] == "文章的错误"
    with pytest.raises(ValueError, match="against it"):
        Claim("t-e", "000", "error", "升维", "Wrong.", "错误。", evidence=(Evidence("x"),))
    with pytest.raises(ValueError, match="needs evidence"):
        Claim("t-e", "000", "error", "升维", "Wrong.", "错误。", not_testable_en="no",
              not_testable_zh="无")
    with pytest.raises(ValueError, match="no conditions"):
        Claim("t-e", "000", "error", "升维", "Wrong.", "错误。",
              evidence=(Evidence("x", against=True),), conditions_en="if", conditions_zh="若")
    with pytest.raises(TypeError, match="timed must be a bool"):
        _claim(Evidence("x"), timed="yes")
    with pytest.raises(ValueError, match="timed claim needs evidence"):
        Claim("t-n", "001", "claim", "比喻", "A metaphor.", "比喻。", not_testable_en="m",
              not_testable_zh="比", timed=True)
    assert dict(inv.kind_counts(verdicts([], [inv.claim("000-math-scalpel")]))) == {
        "claim": 1, "code": 0, "recommendation": 0, "error": 0}


def test_the_projection_error_follows_its_check_both_ways():
    """The heading 「线性投影：升维与子空间切割」 is wrong while no projection to Q, K, V widens
    (per head or whole); the stacked reading, [W^Q W^K W^V] as one matrix, does widen, so the
    verdict depends on the reading; projections that widened would make it hold."""
    c = inv.claim("000-error-projection-raises-dimension")
    assert c.quote_zh == "线性投影：升维与子空间切割"
    assert c.covered_by == ("head-dimensions",) and len(c.readings) == 1

    def result(per_head: float, whole: float, stacked: float) -> Result:
        return Result("head-dimensions", "c", "论断", "d_k / d", "比", per_head, 1.0, 0.0,
                      relation="<=", checks=[
                          Check("W / d", whole, "≤ 1", whole <= 1,
                                id="whole-projection-no-wider"),
                          Check("stacked", stacked, "≥ 1.5", stacked >= 1.5,
                                id="stacked-qkv-wider", support=True)])

    assert verdicts([result(1 / 9, 1.0, 5 / 3)], [c])[0].verdict == "depends on the reading"
    assert verdicts([result(1 / 9, 1.0, 1.0)], [c])[0].verdict == "does not hold"
    assert verdicts([result(2.0, 2.0, 5 / 3)], [c])[0].verdict == "holds"


def test_the_projection_check_reads_the_dimensions_both_ways():
    import torch

    from attnlab.experiments import dot_product_geometry as dpg
    from attnlab.experiments import run

    r = run("dot-product-geometry", plot=False, n_tokens=8, embed_dim=32, heads=4)
    check = r.check("projection-no-wider")
    assert check.passed and check.value == 8 / 32
    x = torch.randn(2, 5, 8)
    widened = torch.nn.Linear(8, 16)(x)  # a projection that does raise the dimension
    assert dpg.widening(8, widened) == 2.0 and dpg.widening(8, x[..., :2], x) == 1.0
    with pytest.raises(ValueError, match="input_dim"):
        dpg.widening(0, x)
    with pytest.raises(ValueError, match="at least one"):
        dpg.widening(8)


def test_the_page_masks_only_the_measured_numbers():
    row = ("| `000-x` | 000 | claim | 「d_k 64」 | d 128 | `toy` | **holds** | "
           "toy: a: 0.5 (expected ≤ 1e-06) | `toy`：a：0.5（应 ≤ 1e-06） |")
    assert _masked(row) == ("| `000-x` | 000 | claim | 「d_k 64」 | d 128 | `toy` | **holds** | "
                            "toy: a: # (expected ≤ #) | `toy`：a：#（应 ≤ #） |")
    assert _masked(row.replace("**holds**", "**does not hold**")) != _masked(row)
    assert _masked("# Title 2") == "# Title 2"


def test_extensions_are_the_experiments_of_origin_attnlab(fast_results):
    whole = {e.experiment for e in EXTENSIONS if e.whole}
    attnlab = {r.name for r in _available(fast_results) if r.origin == "attnlab"}
    assert attnlab == whole, ("experiments of origin 'attnlab' and the inventory's whole "
                              f"extensions differ: {sorted(attnlab ^ whole)}")


# -- the command -----------------------------------------------------------------------------


def test_cli_json_for_one_claim(capsys):
    assert main(["claims", "--only", "001-pe-linear-shift", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    (c,) = data["claims"]
    assert tuple(c) == JSON_KEYS and c["id"] == "001-pe-linear-shift"
    # an identity of the sinusoids, shown beside a random table that fails it
    assert c["verdict"] == "holds by construction"
    assert c["covered_by"] == ["pe-relative-position"]
    assert c["measured"][0]["numbers"][0]["measured"] < 1e-9


def test_cli_table_and_markdown(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")
    assert main(["claims", "--only", "001-pe-linear-shift", "--only", "000-math-scalpel",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "001-pe-linear-shift" in out and "not testable" in out and "holds" in out
    assert main(["claims", "--only", "000-math-scalpel", "--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("| id | article |") and "**not testable**" in md
    assert "手术刀" in md


def test_cli_exit_1_only_for_a_defect(capsys, monkeypatch):
    import attnlab.experiments as experiments

    def fake(names, seed=0, **kw):
        return [_result(n, 1.0, expect_holds=False) for n in names]

    monkeypatch.setattr(experiments, "run_all", fake)
    # refuted as expected: a finding, exit 0
    assert main(["claims", "--only", "001-pe-linear-shift", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["claims"][0]["verdict"] == "does not hold"
    # refuted against expectation: a defect, exit 1
    monkeypatch.setattr(experiments, "run_all",
                        lambda names, seed=0, **kw: [_result(n, 1.0) for n in names])
    assert main(["claims", "--only", "001-pe-linear-shift", "--quiet"]) == 1
    assert "DEFECT" in capsys.readouterr().out


def test_cli_unknown_claim_is_a_usage_error(capsys):
    assert main(["claims", "--only", "000-nope"]) == 2
    err = capsys.readouterr().err
    assert "--only" in err and "000-nope" in err and "001-pe-linear-shift" in err
    assert err.count("\n") == 1


# -- the report section ----------------------------------------------------------------------


def _checks_for(name: str) -> list[Check]:
    """One passing check for each check id of ``name`` the inventory reads."""
    return [Check(i, 0.0, "≤ 1", True, id=i) for i in inv.check_ids(name)]


def test_report_opens_with_the_inventory_from_the_shared_cache(tmp_path, monkeypatch):
    from attnlab.report import PROVIDERS
    from attnlab.report import claims as section
    from attnlab.report.html import ReportContext

    assert list(PROVIDERS)[0] == "claims"
    assert PROVIDERS["claims"] == "attnlab.report.claims:build"
    ctx = ReportContext(out_dir=tmp_path, quiet=True)
    names = inv.covering_experiments() + [e.experiment for e in EXTENSIONS]
    bad = {"convex-combination"}  # refuted against expectation: a defect
    ctx.cache["experiments"] = [_result(n, 1.0 if n in bad else 0.0, checks=_checks_for(n))
                                for n in dict.fromkeys(names)]

    def no_run(*a, **k):
        raise AssertionError("the experiments ran again")

    monkeypatch.setattr(section, "run_all", no_run)
    s = section.build(ctx)
    assert s.id == "claims" and s.passed is False  # the defect fails the section
    html = s.html
    assert html.count('<table class="data"') == 4  # claims and extensions, en and zh
    assert '<div class="en">' in html and '<div class="zh" lang="zh">' in html
    assert "不成立" in html and "无法检验" in html and "does not hold" in html
    assert section.COLOURS["does not hold"] in html and 'href="#exp-convex-combination"' in html
    quote = inv.claim("000-convex-combination").quote_zh  # it holds $A_{i,j}$: MathML
    assert "「" + html_text(quote) in html and "<math" in html_text(quote)
    ctx.cache["experiments"] = [r for r in ctx.cache["experiments"]
                                if r.name not in bad] + [
        _result("convex-combination", checks=_checks_for("convex-combination"))]
    assert section.build(ctx).passed is True


_PLURAL = {"holds": "hold", "holds under stated conditions": "hold under stated conditions",
           "holds by construction": "hold by construction",
           "depends on the reading": "depend on the reading", "does not hold": "do not hold",
           "not decided here": "not decided here", "not testable": "not testable"}


def test_readme_and_guide_counts_are_the_inventorys(fast_results):
    """Every count of items or verdicts that README.md and docs/guide.md state is the one the
    inventory computes (a verdict that depends on timing counted apart)."""
    results = _available(fast_results)
    if {n for c in CLAIMS for n in c.covered_by} - {r.name for r in results}:
        pytest.skip("an experiment's model is not installed: the counts need every verdict")
    vs = verdicts(results)
    n = inv.counts([v for v in vs if not v.claim.timed])
    timed = sum(v.claim.timed for v in vs)
    root = DOC.parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    guide = (root / "docs" / "guide.md").read_text(encoding="utf-8")
    line = (f"{len(CLAIMS)} items: "
            + ", ".join(f"{n[v]} {_PLURAL[v]}" for v in CLAIM_VERDICTS)
            + f", {timed} measured when the report runs")
    assert line in readme
    assert f"the {len(CLAIMS)} items of the two articles" in readme
    flat = " ".join(guide.split())
    assert f"`attnlab claims` lists all {len(CLAIMS)} claims" in flat
    assert f"recommendation ({len(CLAIMS)} items)" in flat
    for v in CLAIM_VERDICTS:
        word = {"not decided here": "are not decided here",
                "not testable": "are not testable"}.get(v, _PLURAL[v])
        assert f"{n[v]} {word}" in flat, v
    assert f"{timed} is measured when the report runs" in flat
    # every number in the README line and the guide's sentence is one of these
    stated = re.findall(r"\b(\d+) (?:items|hold|depend|do not|not decided|not testable|are)",
                        readme + flat)
    assert set(map(int, stated)) <= {len(CLAIMS), timed, *n.values()}


def test_every_verdict_has_a_colour_in_the_report_and_the_command():
    """Each place that draws verdicts knows every one of them: a verdict added to the
    inventory without a colour would crash the report's claims part (a missing key)."""
    from attnlab.commands.claims import _COLOUR
    from attnlab.report.claims import COLOURS, _verdict_html

    for table in (COLOURS, _COLOUR):
        assert set(table) == set(inv.CLAIM_VERDICTS)
    for verdict in inv.CLAIM_VERDICTS:
        assert inv.ZH[verdict] in _verdict_html(verdict, True)
    with pytest.raises(KeyError):  # the wrong variant: a verdict no table knows
        _verdict_html("not a verdict", False)
