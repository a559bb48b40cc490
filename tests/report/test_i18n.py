"""attnlab.i18n (templates, math, lookups, figures) and the report's bilingual pieces: tables,
figures drawn twice, the experiments' sections, the figures of viz in Chinese."""

from __future__ import annotations

import io
import re
import warnings

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attnlab import i18n  # noqa: E402
from attnlab.experiments import Check, Result  # noqa: E402
from attnlab.i18n import (  # noqa: E402
    COMMON,
    figure_texts,
    merge,
    missing,
    needs_translation,
    template,
    translate,
    translate_figure,
)
from attnlab.report import long_contexts as lc  # noqa: E402
from attnlab.report.experiments import section_for  # noqa: E402
from attnlab.report.html import BiText, figure, table  # noqa: E402
from attnlab.tracing.attention import AttentionTrace  # noqa: E402
from attnlab.viz import figures  # noqa: E402
from attnlab.viz.figures import cjk_font  # noqa: E402

_CJK = re.compile(r"[\u4e00-\u9fff]")


# -- strings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("heads 0–3", "heads {}–{}"),
    ("E = 256, N = 128, batch 4", "E = {}, N = {}, batch {}"),
    ("tolerance 1e-12 and 2.5e+3", "tolerance {} and {}"),
    ("offset −4 or -4 or +4", "offset {} or {} or {}"),
    ("L2H11, fp64", "L{}H{}, fp{}"),
    ("no numbers here", "no numbers here"),
])
def test_template_replaces_every_number(text, expected):
    assert template(text) == expected


@pytest.mark.parametrize("text, needed", [
    ("loss", True), ("k", False), ("d_k = 64", False), ("q·k / √d", False),
    ("$\\sqrt{d_k}$", False), ("$x$ and $y$", True), ("score $\\log p$", True),
    ("⟨R_m q, R_n k⟩", False), ("", False), ("FLOPs", True),
])
def test_needs_translation_sees_words_outside_math_only(text, needed):
    assert needs_translation(text) is needed


def test_translate_exact_then_template_then_itself():
    cat = {"loss": "损失", "step {} of {}": "第 {} 步，共 {} 步", "step 1 of 2": "第一步"}
    assert translate("loss", cat) == "损失"
    assert translate("step 1 of 2", cat) == "第一步"  # the exact entry wins
    assert translate("step 3 of −10", cat) == "第 3 步，共 −10 步"  # numbers in order
    assert translate("N = 4", cat) == "N = 4"  # nothing to translate
    assert translate("accuracy", cat) is None and translate("step", cat) is None
    assert translate("steps 3 of 10", cat) is None  # a near miss is not a match


def test_a_template_with_the_wrong_placeholders_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"'step \{\} of \{\}'.*1 '\{\}' placeholder.*2"):
        translate("step 3 of 10", {"step {} of {}": "第 {} 步"})


def test_missing_lists_each_untranslated_string_once_in_order():
    cat = {"loss": "损失"}
    assert missing(["b word", "loss", "a word", "b word", "x = 1"], cat) == ["b word", "a word"]
    assert missing(["loss"], cat) == []


def test_common_words_and_merge():
    assert translate("pass", COMMON) == "通过" and translate("FAIL", COMMON) == "失败"
    assert translate("does not hold", COMMON) == "不成立"
    assert translate("≤ 0.8 (slack 0.01)", COMMON) == "≤ 0.8（余量 0.01）"
    assert translate("computed in 3.2 s", COMMON) == "用时 3.2 秒"
    merged = merge({"pass": "过"}, None, {"x y": "甲"})
    assert merged["pass"] == "过" and merged["x y"] == "甲" and merged["FAIL"] == "失败"
    assert COMMON["pass"] == "通过"  # merge copies


# -- figures ---------------------------------------------------------------------------------


def _full_figure() -> Figure:
    fig = Figure(figsize=(6, 3))
    ax, ax2 = fig.subplots(1, 2)
    ax.plot([1, 2, 3], label="train loss")
    ax.plot([3, 2, 1], label="held-out 0.5")
    ax.legend(title="runs")
    ax.set_title("loss at step 3")
    ax.set_title("left note", loc="left")
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (nats)")
    ax.set_xticks([0, 1, 2], ["small", "medium", "large"])
    ax.text(0.5, 0.5, "a text")
    ax.annotate("minimum", (2, 1))
    ax.text(0, 0, "hidden words").set_visible(False)
    im = ax2.imshow([[0, 1], [1, 0]])
    fig.colorbar(im, ax=ax2, label="attention weight")
    ax2.set_ylabel("query position")
    ax2.axis("off")  # its labels are not shown
    fig.suptitle("two panels")
    return fig


ZH = {"train loss": "训练损失", "held-out {}": "留出集 {}", "runs": "运行", "loss at step {}":
      "第 {} 步的损失", "left note": "左注", "training step": "训练步数", "loss (nats)":
      "损失（纳特）", "small": "小", "medium": "中", "large": "大", "a text": "一段文字",
      "minimum": "最小值", "attention weight": "注意力权重", "two panels": "两幅图"}


def test_figure_texts_finds_every_visible_text_and_no_numeric_tick():
    texts = figure_texts(_full_figure())
    assert sorted(texts) == sorted(["two panels", "loss at step 3", "left note", "training step",
                                    "loss (nats)", "small", "medium", "large", "runs",
                                    "train loss", "held-out 0.5", "a text", "minimum",
                                    "attention weight"])
    assert "hidden words" not in texts and "query position" not in texts


def test_translate_figure_translates_legends_ticks_and_colorbars_in_place():
    fig = _full_figure()
    left = translate_figure(fig, ZH, family=[cjk_font(), "DejaVu Sans"])
    assert left == []
    after = figure_texts(fig)
    assert "留出集 0.5" in after and "第 3 步的损失" in after and "大" in after
    assert not [t for t in after if needs_translation(t)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a glyph missing from the font would warn
        fig.savefig(io.BytesIO(), format="png", dpi=30)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["小", "中", "大"]
    assert ax.get_legend().get_texts()[0].get_fontfamily()[0] == cjk_font()


def test_translate_figure_reports_what_it_cannot_translate_and_leaves_it():
    fig = _full_figure()
    partial = {k: v for k, v in ZH.items() if k not in ("medium", "held-out {}", "runs")}
    left = translate_figure(fig, partial)
    assert left == ["medium", "runs", "held-out 0.5"]
    assert "medium" in figure_texts(fig) and "held-out 0.5" in figure_texts(fig)


def test_tick_labels_of_a_fixed_formatter_translate_and_numeric_ones_are_left_alone():
    from matplotlib.ticker import FixedFormatter, FixedLocator

    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 1, 2], [0, 1, 2])
    ax.xaxis.set_major_locator(FixedLocator([0, 1, 2]))
    ax.xaxis.set_major_formatter(FixedFormatter(["small", "medium", "large"]))
    assert figure_texts(fig) == ["small", "medium", "large"]  # not the y axis' numbers
    assert translate_figure(fig, ZH, family=[cjk_font(), "DejaVu Sans"]) == []
    fig.savefig(io.BytesIO(), format="png", dpi=30)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["小", "中", "大"]


def test_chinese_without_the_cjk_font_draws_boxes():
    """Why translate_figure takes a font family: the default font has no Chinese."""
    fig = _full_figure()
    translate_figure(fig, ZH)
    with pytest.warns(UserWarning, match="missing from font"):
        fig.savefig(io.BytesIO(), format="png", dpi=30)


# -- report pieces ---------------------------------------------------------------------------


def test_table_translates_headers_cells_and_verdicts_and_keeps_the_rest():
    html = table(["check", "score", BiText("head", "头")], [("loss", "x = 1", True),
                                                              ("<untranslated>", 0.5, False)],
                 passed_col=2, catalog={"score": "分数", "loss": "损失"})
    assert '<th><span class="en">check</span><span class="zh" lang="zh">检查项</span></th>' in html
    assert '<span class="en">head</span><span class="zh" lang="zh">头</span>' in html
    assert '<span class="zh" lang="zh">损失</span>' in html and "<td>x = 1</td>" in html
    assert "<td>&lt;untranslated&gt;</td>" in html  # no Chinese: shown once, as it is
    assert "失败" in html and "通过" in html
    assert html.count("<table") == 1


def _png_count(html: str) -> int:
    return html.count('src="data:image/png;base64,')


def test_figure_is_drawn_in_both_languages_with_a_catalog():
    html = figure(_full_figure(), "caption", "图注", catalog=ZH, dpi=40)
    assert _png_count(html) == 2
    assert '<img class="en" alt="caption"' in html
    assert '<img class="zh" lang="zh" alt="图注"' in html
    en, zh = re.findall(r'src="(data:image/png;base64,[^"]+)"', html)
    assert en != zh


def test_figure_without_words_or_catalog_is_drawn_once():
    fig = Figure()
    fig.subplots().plot([0, 1])
    assert _png_count(figure(fig, "c", "图", catalog=ZH, dpi=40)) == 1  # nothing to translate
    assert _png_count(figure(_full_figure(), "c", "图", dpi=40)) == 1  # no catalog: as before
    two = figure(_full_figure(), "c", "图", zh=_full_figure(), dpi=40)
    assert _png_count(two) == 2 and 'class="zh"' in two


def _result(**kw) -> Result:
    base = dict(name="toy-claim", claim="Rows sum to one.", claim_zh="每行之和为一。",
                quantity="max |row sum - 1|", quantity_zh="行和误差", measured=0.0,
                expected=0.0, tolerance=1e-6, checks=[Check("weights >= 0", 0.0, "≥ 0", True)],
                table=(["n", "error"], [[4, 1.5e-7]]))
    return Result(**{**base, **kw})


def test_experiment_section_shows_the_verdict_in_both_languages():
    s = section_for(_result())
    assert "成立（与预期一致）" in s.html and "holds (as expected)" in s.html
    assert "文章的论断" in s.html and "用时" in s.html
    assert '<span class="zh" lang="zh">行和误差</span>' in s.html


def test_a_finding_states_why_in_both_languages():
    r = _result(measured=1.0, expect_holds=False, origin="attnlab",
                expect_why="the articles overstate it", expect_why_zh="文章说得过头了")
    s = section_for(r)
    assert s.finding and s.passed
    assert "不成立（与预期一致）" in s.html and "does not hold (as expected)" in s.html
    assert "Why: the articles overstate it" in s.html and "原因：文章说得过头了" in s.html
    assert "attnlab 自己的补充" in s.html
    defect = section_for(_result(expect_holds=False, expect_why="w", expect_why_zh="理由"))
    assert not defect.passed and "与预期不符" in defect.html and "理由：理由" in defect.html


def test_long_context_figures_and_tables_translate():
    doc = {"model": "m", "sizes": [256, 512], "dense_budget_bytes": 8e9,
           "dense_budget_origin": "default", "dense_stop": {"tokens": 512, "predicted_bytes": 9e9,
                                                            "reason": "over budget"},
           "points": [{"tokens": n, "eager_predicted_bytes": 2e9 if n == 512 else None,
                       "trace": {"peak_rss_bytes": 1e9, "forward_seconds": 1.0,
                                 "kept_bytes": 1e6, "loadavg": [1.0, 1.0, 1.0]},
                       "eager": None if n == 512 else {"peak_rss_bytes": 1.5e9,
                                                       "forward_seconds": 2.0,
                                                       "kept_bytes": 1e8}}
                      for n in (256, 512)]}
    fig = lc._curve_figure(doc)
    assert missing(figure_texts(fig), merge(lc.ZH)) == []
    trace = AttentionTrace(tokens=[str(i) for i in range(40)],
                           weights=torch.softmax(torch.randn(1, 1, 40, 40), -1))
    fig, _ = lc.article_map(trace, 0, 0, max_blocks=8)
    assert missing(figure_texts(fig), merge(lc.ZH)) == []
    html = lc._curve_table(doc)
    assert "未运行" in html and "预测 2.00" in html and "eager 峰值（GB）" in html


# -- viz figures in Chinese ------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_trace() -> AttentionTrace:
    import attnlab
    from attnlab.tracing.tracer import trace as trace_model

    torch.manual_seed(0)
    gpt = attnlab.GPT(attnlab.GPTConfig(vocab_size=16, num_layers=2, num_heads=2, embed_dim=16))
    t = trace_model(gpt, [1, 2, 3, 4, 5, 6])
    t.tokens = ["注意", "力", "是", "一", "种", "机制"]
    t.model = "GPT"
    return t


@pytest.mark.parametrize("kind", list(figures.KINDS))
def test_viz_figures_speak_chinese_with_lang_zh(toy_trace, kind):
    en = figure_texts(figures.plot(toy_trace, kind, 1, 1))
    zh_fig = figures.plot(toy_trace, kind, 1, 1, lang="zh")
    zh = figure_texts(zh_fig)
    def words(texts: list[str]) -> set[str]:
        return {w for t in texts for w in re.findall(r"[A-Za-z]{2,}", t)}

    assert words(zh) <= {"GPT", "cos"}, (kind, zh)  # the model's name and cos θ only
    assert words(en) - {"GPT", "cos"}, (kind, en)  # the English figure has English words
    assert any(_CJK.search(t) for t in zh if t not in toy_trace.tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the Chinese is drawn with a font that has it
        zh_fig.savefig(io.BytesIO(), format="png", dpi=30)


def test_viz_figures_refuse_an_unknown_language(toy_trace):
    with pytest.raises(ValueError, match="lang must be one of"):
        figures.heatmap(toy_trace, 0, 0, lang="fr")


def test_the_merge_rule_is_chinese_in_chinese_figures(toy_trace):
    merged = toy_trace.merge_tokens([[0, 1], [2], [3], [4], [5]])
    texts = " ".join(figure_texts(figures.heatmap(merged, 0, 0, lang="zh")))
    assert "对键求和、对查询取平均" in texts and "summed" not in texts


def test_i18n_is_on_the_lowest_layer():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(i18n.__file__).read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m.startswith("attnlab") for m in imported)
