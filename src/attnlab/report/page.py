"""Assembling the report: every section computed now, written as one self-contained page.

A section builder is a function ``(ctx: ReportContext) -> Section | list[Section]``;
:data:`PROVIDERS` names them in page order (part name -> ``"module:function"``) so that each
part imports only when built. The page has no external resource of any kind (no CDN, no
fonts, no network); figures are inline SVG or data URIs; formulas are MathML.

The page opens with its status, its size (the exact bytes of the written page) and how long
it took to build, then a grouped table of contents (:data:`GROUPS`, the experiments by
:data:`EXPERIMENT_THEMES`), every entry with its section's badge. A slim sticky bar keeps
the language switch and the groups at hand; a jump to an anchor leaves the section's
title below it (``scroll-padding-top`` is the bar's height).
"""

from __future__ import annotations

import html
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from attnlab._io import atomic_write_text
from attnlab.report.html import ReportContext, Section

__all__ = ["PROVIDERS", "ReportResult", "build_report", "render_page", "GROUPS",
           "EXPERIMENT_THEMES", "group_of", "status_of"]

#: Section builders in page order: part name -> ``"module:function"``.
PROVIDERS: dict[str, str] = {
    "claims": "attnlab.report.claims:build",
    "parity": "attnlab.report.parity:build",
    "experiments": "attnlab.report.experiments:build",
    "explorer": "attnlab.report.explorer:build",
    "real-models": "attnlab.report.real_models:build",
    "architectures": "attnlab.report.architectures:build",
    "long-contexts": "attnlab.report.long_contexts:build",
    "attribution": "attnlab.report.attribution:build",
    "survey": "attnlab.report.survey:build",
    "trained": "attnlab.report.trained_model:build",
}


#: The table of contents' groups in page order: key, English, Chinese. A section belongs
#: to the group its id names (:func:`group_of`); experiments to their theme.
GROUPS: list[tuple[str, str, str]] = [
    ("claims", "Claims", "论断"),
    ("parity", "Parity with PyTorch", "与 PyTorch 的一致性"),
    ("experiments", "Experiments", "实验"),
    ("explorer", "Explorer", "探索器"),
    ("real-models", "Real models", "真实模型"),
    ("architectures", "Architectures", "架构"),
    ("long-contexts", "Long contexts", "长上下文"),
    ("attribution", "Attribution", "归因"),
    ("survey", "Survey", "头的普查"),
    ("trained", "Trained models", "训练的模型"),
    ("other", "Other", "其他"),
]

#: The experiments by theme (registry names; :mod:`attnlab.experiments.registry`): key,
#: English, Chinese, names. An experiment named in none goes to the last theme, "more".
EXPERIMENT_THEMES: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("geometry", "Geometry & scaling", "几何与缩放",
     ("qk-variance", "dot-product-geometry", "softmax-saturation")),
    ("softmax", "Softmax & weights", "softmax 与权重",
     ("convex-combination", "kernel-smoothing", "learned-kernel", "dynamic-graph",
      "contextualisation")),
    ("heads", "Heads & projections", "多头与投影",
     ("multihead-cost", "one-relation-per-head", "qkv-roles", "wo-fusion", "fused-qkv-speed",
      "head-dimensions")),
    ("positions", "Positions", "位置",
     ("pe-relative-position", "rope-relative", "pe-frequency-roles",
      "relative-position-learned")),
    ("masks", "Masks & modules", "掩码与模块", ("masking", "linear-attention", "article-code")),
    ("training", "Training", "训练", ("scaling-training", "init-scale")),
    ("more", "More experiments", "其他实验", ()),
]

_PREFIXES = {"claims": "claims", "parity": "parity", "exp-": "experiments",
             "explorer": "explorer", "real-models": "real-models",
             "architectures": "architectures", "long-contexts": "long-contexts",
             "attribution": "attribution", "survey": "survey", "trained": "trained"}


def group_of(section_id: str) -> tuple[str, str | None]:
    """The TOC group of a section id, and the experiment theme for an experiment.

    >>> group_of("exp-masking"), group_of("survey-smollm2"), group_of("trained-model")
    (('experiments', 'masks'), ('survey', None), ('trained', None))
    >>> group_of("exp-new-one"), group_of("notes")
    (('experiments', 'more'), ('other', None))
    """
    for prefix, group in _PREFIXES.items():
        if section_id.startswith(prefix):
            if group != "experiments":
                return group, None
            name = section_id[len(prefix):]
            theme = next((k for k, _, _, names in EXPERIMENT_THEMES if name in names), "more")
            return group, theme
    return "other", None


def status_of(s: Section) -> str:
    """A section's badge as a word: ``pass``, ``finding`` (passed; the claim does not hold,
    as expected), ``fail``, or ``info`` (a section that only shows things)."""
    if s.passed is None:
        return "info"
    if s.passed:
        return "finding" if s.finding else "pass"
    return "fail"


class SummaryRow(TypedDict):
    """One of a section's summary rows (:attr:`Section.rows`)."""

    check: str
    value: str
    passed: bool | None  # None: a row that only shows a number


class SectionSummary(TypedDict):
    """One section of a written report: its verdict and summary rows."""

    id: str
    title: str
    passed: bool | None  # None: a section that only shows things
    seconds: float  # the time it took to build
    rows: list[SummaryRow]


class ReportSummary(TypedDict):
    """:meth:`ReportResult.to_json`: the page written, and each section's verdict."""

    path: str
    passed: bool
    sections: list[SectionSummary]


@dataclass
class ReportResult:
    """The written page and its sections; ``passed`` unless some section failed."""

    path: Path
    sections: list[Section]

    @property
    def passed(self) -> bool:
        return all(s.passed is not False for s in self.sections)

    def to_json(self) -> ReportSummary:
        """The page's path, the verdict and every section's summary, JSON-ready."""
        return {
            "path": str(self.path),
            "passed": self.passed,
            "sections": [
                {"id": s.id, "title": s.title, "passed": s.passed, "seconds": round(s.seconds, 3),
                 "rows": [{"check": c, "value": v, "passed": p} for c, v, p in s.rows]}
                for s in self.sections
            ],
        }


def _badge(passed: bool | None, finding: bool = False) -> str:
    if passed is None:
        return ""
    if passed and finding:
        return ('<span class="badge finding"><span class="en">FINDING: does not hold</span>'
                '<span class="zh">发现：论断不成立</span></span>')
    cls, text, zh = ("pass", "PASS", "通过") if passed else ("fail", "FAIL", "失败")
    return (f'<span class="badge {cls}"><span class="en">{text}</span>'
            f'<span class="zh">{zh}</span></span>')


_CSS = """
:root { --fg:#1d2330; --muted:#5b6478; --bg:#fbfbfd; --card:#fff; --line:#e3e6ee;
        --pass:#137a3a; --fail:#b3261e; --accent:#3451b2; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.55 system-ui, -apple-system, "Segoe UI", "Noto Sans",
       "PingFang SC", "Microsoft YaHei", sans-serif; color:var(--fg); background:var(--bg); }
html { --bar-h: 42px; scroll-padding-top: calc(var(--bar-h) + 8px); }
header { padding: 24px 32px 12px; border-bottom:1px solid var(--line); background:var(--card); }
header h1 { margin:0 0 4px; font-size:26px; }
header p { margin:2px 0 0; color:var(--muted); }
#bar { position:sticky; top:0; height:var(--bar-h); background:var(--card);
       border-bottom:1px solid var(--line); padding:0 32px; display:flex; align-items:center;
       gap:14px; z-index:5; font-size:13px; white-space:nowrap; overflow-x:auto; }
#bar a { color:var(--accent); text-decoration:none; }
#bar .home { font-weight:700; color:var(--fg); }
main { max-width: 1180px; margin: 0 auto; padding: 16px 32px 64px; }
section.card, nav.toc { background:var(--card); border:1px solid var(--line); border-radius:10px;
               padding: 18px 22px; margin: 18px 0; scroll-margin-top: calc(var(--bar-h) + 8px); }
nav.toc h2 { margin:0 0 8px; font-size:20px; }
.toc-grid { display:grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr));
            gap: 10px 18px; }
.toc-group { border-left:3px solid var(--line); padding: 2px 0 2px 10px; }
.toc-group h3 { margin:0 0 3px; font-size:13px; color:var(--muted); display:flex; gap:6px;
                align-items:center; flex-wrap:wrap; }
.toc-group ul { list-style:none; margin:0; padding:0; font-size:13px; line-height:1.45; }
.toc-group li { display:flex; gap:6px; align-items:baseline; }
.toc-group li a { color:var(--accent); text-decoration:none; overflow-wrap:anywhere; }
.toc-group li a:hover { text-decoration:underline; }
.dot { flex:none; display:inline-block; min-width:1.4em; text-align:center; font-size:11px;
       font-weight:700; border-radius:99px; color:#fff; padding:0 4px; }
.dot.pass { background:var(--pass); } .dot.fail { background:var(--fail); }
.dot.finding { background:#a15c00; } .dot.info { background:#c4c9d6; }
.toc-group.has-fail { border-left-color:var(--fail); }
.toc-group.all-pass { border-left-color:var(--pass); }
.toc-legend { font-size:12px; color:var(--muted); margin:6px 0 0; }
math[display="block"] { margin: 4px 0; }
table.data math[display="block"] { display: inline math; math-style: normal; margin: 0 2px; }
section.card h2 { margin: 0 0 10px; font-size:20px; display:flex; gap:10px; align-items:center; }
p.took { margin: -6px 0 10px; color:#666; font-size:12px; }
.badge { font-size:12px; font-weight:700; padding:2px 8px; border-radius:99px; color:#fff; }
.badge.pass { background:var(--pass); } .badge.fail { background:var(--fail); }
.badge.finding { background:#a15c00; }
table.data { border-collapse:collapse; font-size:13px; margin:8px 0; }
table.data th, table.data td { border-bottom:1px solid var(--line); padding:4px 10px;
                               text-align:left; font-variant-numeric: tabular-nums; }
table.data th { color:var(--muted); font-weight:600; }
td.ok { color:var(--pass); font-weight:600; } td.bad { color:var(--fail); font-weight:600; }
figure { margin: 10px 0; } figure img, figure svg { max-width:100%; height:auto; }
figcaption { color:var(--muted); font-size:13px; }
.claim { font-size:15px; margin: 4px 0 8px; }
.muted { color:var(--muted); }
code { background:#f1f3f8; padding:1px 4px; border-radius:4px; }
#lang { margin-left:auto; }
html[data-lang="en"] .zh { display:none; } html[data-lang="zh"] .en { display:none; }
.summary { display:flex; gap:18px; flex-wrap:wrap; margin-top:8px; }
"""

_JS = """
(function(){
  var root = document.documentElement;
  var pref = (navigator.language || 'en').toLowerCase().indexOf('zh') === 0 ? 'zh' : 'en';
  root.setAttribute('data-lang', pref);
  var b = document.getElementById('lang');
  if (b) b.addEventListener('click', function(){
    root.setAttribute('data-lang', root.getAttribute('data-lang') === 'zh' ? 'en' : 'zh');
  });
  // the sticky bar's real height (it may differ from the CSS default): anchors land below it
  var bar = document.getElementById('bar');
  function fit(){ if (bar) root.style.setProperty('--bar-h', bar.offsetHeight + 'px'); }
  fit(); window.addEventListener('resize', fit);
})();
"""


_DOT = {"pass": ("✓", "pass", "通过"), "finding": ("!", "finding: the claim does not hold",
                                                  "发现：论断不成立"),
        "fail": ("✗", "FAIL", "失败"), "info": ("–", "shows, no verdict", "展示，无结论")}


def _dot(status: str) -> str:
    mark, en, zh = _DOT[status]
    return (f'<span class="dot {status}" title="{en}" aria-label="{en}">{mark}</span>')


def _short_title(s: Section) -> tuple[str, str]:
    """A TOC entry's text: an experiment by its name (its group says it is one)."""
    if s.id.startswith("exp-") and s.title.startswith("Experiment: "):
        name = s.title[len("Experiment: "):]
        return name, name
    return s.title, s.title_zh


def _group_status(statuses: list[str]) -> str:
    judged = [x for x in statuses if x != "info"]
    if "fail" in judged:
        return "has-fail"
    return "all-pass" if judged else "info"


def _toc(sections: list[Section]) -> str:
    """The grouped table of contents: one block per group (the experiments one per theme),
    each entry a link with its section's badge."""
    esc = html.escape
    blocks: dict[tuple[str, str | None], list[Section]] = {}
    for s in sections:
        blocks.setdefault(group_of(s.id), []).append(s)
    names = {k: (en, zh) for k, en, zh in GROUPS}
    themes = {k: (en, zh) for k, en, zh, _ in EXPERIMENT_THEMES}
    group_order = [k for k, _, _ in GROUPS]
    theme_order = [k for k, _, _, _ in EXPERIMENT_THEMES]
    first_seen = {key: i for i, key in reversed(list(enumerate(
        group_of(s.id) for s in sections)))}
    keys = sorted(blocks, key=lambda k: (group_order.index(k[0]),
                                         theme_order.index(k[1]) if k[1] else -1,
                                         first_seen[k]))
    out = []
    for group, theme in keys:
        members = blocks[(group, theme)]
        en, zh = names[group]
        if theme is not None:
            ten, tzh = themes[theme]
            en, zh = f"{en}: {ten}", f"{zh}：{tzh}"
        statuses = [status_of(s) for s in members]
        n_judged = sum(x != "info" for x in statuses)
        n_ok = sum(x in ("pass", "finding") for x in statuses)
        count = f'<span class="muted">{n_ok}/{n_judged}</span>' if n_judged else ""
        items = []
        for s, st in zip(members, statuses):
            ten, tzh = _short_title(s)
            label = (esc(ten) if ten == tzh else
                     f'<span class="en">{esc(ten)}</span><span class="zh" lang="zh">{esc(tzh)}'
                     "</span>")
            items.append(f'<li>{_dot(st)}<a href="#{esc(s.id)}" data-status="{st}">{label}</a>'
                         "</li>")
        gid = group if theme is None else f"{group}-{theme}"
        out.append(
            f'<div class="toc-group {_group_status(statuses)}" data-group="{esc(gid)}">'
            f'<h3><span class="en">{esc(en)}</span><span class="zh" lang="zh">{esc(zh)}</span>'
            f"{count}</h3><ul>{''.join(items)}</ul></div>")
    legend = ("✓ pass · ! finding (the claim does not hold, as the experiment expected) · "
              "✗ fail · – no verdict (the section shows things)")
    legend_zh = ("✓ 通过 · ! 发现（论断不成立，与实验的预期一致）· ✗ 失败 · "
                 "– 无结论（该部分只作展示）")
    return ('<nav class="toc" id="toc" aria-label="Contents">'
            '<h2><span class="en">Contents</span><span class="zh" lang="zh">目录</span></h2>'
            f'<div class="toc-grid">{"".join(out)}</div>'
            f'<p class="toc-legend"><span class="en">{esc(legend)}</span>'
            f'<span class="zh" lang="zh">{esc(legend_zh)}</span></p></nav>')


def _bar(sections: list[Section], title: str, title_zh: str) -> str:
    """The sticky bar: the title (to the top), the contents, each group's first section, and
    the language switch."""
    esc = html.escape
    names = {k: (en, zh) for k, en, zh in GROUPS}
    links, seen = [], set()
    for s in sections:
        group = group_of(s.id)[0]
        if group in seen:
            continue
        seen.add(group)
        en, zh = names[group]
        links.append(f'<a href="#{esc(s.id)}"><span class="en">{esc(en)}</span>'
                     f'<span class="zh" lang="zh">{esc(zh)}</span></a>')
    return (f'<nav id="bar" aria-label="Sections"><a class="home" href="#top">'
            f'<span class="en">{esc(title)}</span><span class="zh" lang="zh">{esc(title_zh)}'
            '</span></a><a href="#toc"><span class="en">Contents</span>'
            '<span class="zh" lang="zh">目录</span></a>'
            f'{"".join(links)}<button id="lang" type="button">English / 中文</button></nav>')


_SIZE = "\x00ATTNLAB-PAGE-BYTES\x00"
_SIZE_ZH = "\x00ATTNLAB-PAGE-BYTES-ZH\x00"


def _human_bytes(n: int) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _with_size(page: str) -> str:
    """``page`` with its own size in bytes (UTF-8) where :data:`_SIZE` stands: the number
    written is the exact size of the page returned (a fixed point: the number's own digits
    count)."""
    def fill(n: int) -> str:
        exact = f"{n:,}".replace(",", "\u2009")
        return page.replace(_SIZE, f"{_human_bytes(n)} ({exact} bytes)").replace(
            _SIZE_ZH, f"{n / 1e6:.1f} MB（{exact} 字节）")

    n = len(fill(0).encode("utf-8"))
    for _ in range(8):
        m = len(fill(n).encode("utf-8"))
        if m == n:
            return fill(n)
        n = m
    raise AssertionError("the page's size does not settle")  # pragma: no cover


def _took(s: Section) -> str:
    """The line under a section's title: how long its part took to build (nothing for a
    section built outside :func:`build_report`).

    >>> t = _took(Section("x", "X", "X", "", seconds=12.34))
    >>> t.startswith('<p class="took">'), "computed in 12.3 s" in t, "用时 12.3 秒" in t
    (True, True, True)
    >>> "with the 3 sections of its part" in _took(Section("x", "X", "X", "", seconds=2,
    ...                                                    seconds_shared=3))
    True
    """
    if s.seconds <= 0:
        return ""
    if s.seconds_shared > 1:
        en = f"computed in {s.seconds:.1f} s, with the {s.seconds_shared} sections of its part"
        zh = f"与所在部分的 {s.seconds_shared} 节一起用时 {s.seconds:.1f} 秒"
    else:
        en, zh = f"computed in {s.seconds:.1f} s", f"用时 {s.seconds:.1f} 秒"
    return (f'<p class="took"><span class="en">{en}</span><span class="zh" lang="zh">{zh}'
            "</span></p>")


def render_page(sections: list[Section], *, title: str = "attnlab report",
                title_zh: str = "attnlab 报告", generated: str | None = None,
                build_seconds: float | None = None) -> str:
    """The whole page as one HTML string (no external resource): the status, the page's
    exact size and (``build_seconds``) how long the build took, the grouped table of
    contents, the sections."""
    esc = html.escape
    n_pass = sum(s.passed is True for s in sections)
    n_find = sum(s.passed is True and s.finding for s in sections)
    n_fail = sum(s.passed is False for s in sections)
    body = "".join(
        f'<section class="card" id="{esc(s.id)}" data-passed="{s.passed}" '
        f'data-status="{status_of(s)}">'
        f'<h2><span class="en">{esc(s.title)}</span><span class="zh">{esc(s.title_zh)}</span>'
        f"{_badge(s.passed, s.finding)}</h2>{_took(s)}{s.html}</section>"
        for s in sections
    )
    gen = esc(generated or time.strftime("%Y-%m-%d %H:%M:%S"))
    took_en = took_zh = ""
    if build_seconds is not None:
        took_en = f" · built in {build_seconds:.1f} s"
        took_zh = f" · 构建用时 {build_seconds:.1f} 秒"
    page = f"""<!DOCTYPE html>
<html lang="en" data-lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>{esc(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<header id="top">
<h1><span class="en">{esc(title)}</span><span class="zh">{esc(title_zh)}</span></h1>
<p><span class="en">Every claim computed on real numbers, with the verdict the numbers give.
</span><span class="zh">每个论断都在真实数值上计算，并给出数值所支持的结论。</span></p>
<p id="status"><span class="en">{len(sections)} sections: {n_pass} pass ({n_find} of them
findings), {n_fail} fail</span><span class="zh">共 {len(sections)} 个部分：{n_pass} 项通过（其中
{n_find} 项为发现），{n_fail} 项失败</span></p>
<p id="build"><span class="en">page size <span class="page-bytes">{_SIZE}</span>{took_en}
</span><span class="zh">页面大小 <span class="page-bytes">{_SIZE_ZH}</span>{took_zh}</span>
&nbsp;·&nbsp; {gen}</p>
</header>
{_bar(sections, title, title_zh)}
<main>{_toc(sections)}{body}</main>
<script>{_JS}</script>
</body>
</html>
"""
    return _with_size(page)


def _print_summary(sections: list[Section], console: Any, path: Path) -> None:
    from rich.table import Table

    table = Table(title="attnlab report", show_lines=False)
    table.add_column("section")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_column("result")
    for s in sections:
        rows = s.rows or [("", "", s.passed)]
        for i, (check, value, ok) in enumerate(rows):
            mark = "" if ok is None else ("[green]pass[/]" if ok else "[red]FAIL[/]")
            table.add_row(s.title if i == 0 else "", check, value, mark)
    console.print(table)
    console.print(f"wrote {path}")


#: The parts beside taken first, the longest first (about 50, 23, 15, 9 and 7 s of one
#: core on the 2-core machine): the parts left when the parts here are done, which this
#: process then builds from the last, are the short ones (the page keeps its order).
BESIDE_FIRST = ("claims", "trained", "survey", "real-models", "architectures")


def _build_here(parts: list[tuple[str, Any]], ctx: ReportContext, progress: Any, task: Any,
                *, threads: int | None = None) -> list[tuple[str, list[Section]]]:
    """(spec, sections) of each (spec, provider) built here in order; ``threads``: torch's
    threads while they build (the parts of the second process's list run on its one)."""
    import contextlib

    from attnlab._proc import torch_threads
    from attnlab.report._lanes import build_part

    out = []
    with torch_threads(threads) if threads is not None else contextlib.nullcontext():
        for spec, provider in parts:
            name = provider.__module__.rsplit(".", 1)[-1].replace("_", " ")
            progress.update(task, description=f"report: {name}")
            out.append((spec, build_part(provider, ctx, time.perf_counter)))
            progress.advance(task)
    return out


def build_report(out_dir: str | os.PathLike[str], *, only: list[str] | None = None,
                 quiet: bool = False, seed: int = 0,
                 providers: list[str] | None = None,
                 processes: int | None = None) -> ReportResult:
    """Build every part (or those named in ``only``) and write ``out_dir/index.html`` and
    ``out_dir/summary.json``.

    ``only`` takes part names, the keys of :data:`PROVIDERS`; ``providers`` overrides the
    list itself (``"module:function"`` strings, built in order in this process).
    ``processes``: 2 builds the long text's parts here and the others in a second process
    beside them (:mod:`attnlab.report._lanes`), 1 builds every part here in turn; the
    default is 2 on a machine of two cores or more. The page is the same either way.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from attnlab._errors import check_optional_int
    from attnlab.report._lanes import (
        build_beside,
        lanes_for,
        load_provider,
        start_ahead,
    )

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out_dir}: cannot create directory ({exc.strerror})") from None
    if only is not None:
        unknown = sorted(set(only) - set(PROVIDERS))
        if unknown:
            raise ValueError(f"--only: unknown part(s) {unknown}; the parts are {list(PROVIDERS)}")
    processes = check_optional_int("processes", processes, minimum=1, maximum=2)
    if processes is None:
        processes = 2 if (os.cpu_count() or 1) >= 2 else 1
    here: list[str] = list(providers or [])
    beside: list[str] = []
    keys: list[str] = []  # the parts built here, by name (none named with ``providers``)
    if providers is None:
        keys, side_keys = lanes_for([k for k in PROVIDERS if only is None or k in only],
                                    processes)
        side_keys.sort(key=lambda k: BESIDE_FIRST.index(k) if k in BESIDE_FIRST else 99)
        here, beside = [PROVIDERS[k] for k in keys], [PROVIDERS[k] for k in side_keys]
    started = time.perf_counter()
    loaded = [load_provider(p) for p in here]
    console = Console(stderr=True, quiet=quiet)
    built: list[tuple[str, list[Section]]] = []  # (provider, its sections) as each is done
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), console=console,
                  disable=quiet) as progress:
        task = progress.add_task("report", total=len(here) + len(beside))
        ctx = ReportContext(out_dir=out, quiet=quiet, seed=seed, progress=progress)
        ahead = start_ahead(keys, seed) if providers is None and processes > 1 else {}
        ctx.cache.update({name: work.result for name, work in ahead.items()})
        side = (build_beside(beside, out, seed, log=ctx.log,
                             part_done=lambda: progress.advance(task)) if beside else None)
        try:
            built.extend(_build_here(list(zip(here, loaded)), ctx, progress, task))
            # the parts beside that the second process has not taken yet: built here, from
            # the last, on one thread as there (the same numbers whichever process builds)
            while side is not None and (unit := side.take_last()) is not None:
                built.extend(_build_here([(spec, load_provider(spec)) for spec in unit], ctx,
                                         progress, task, threads=1))
        except BaseException:
            if side is not None:
                side.stop()  # a part here failed: the parts beside are not waited for
            raise
        finally:
            for work in ahead.values():  # (ended when read; else nothing will read it)
                work.stop()
        if side is not None:
            progress.update(task, description="report: the parts beside")
            built.extend(side.result())
    if beside:  # back in page order
        rank = {spec: i for i, spec in enumerate(PROVIDERS.values())}
        built.sort(key=lambda part: rank[part[0]])
    sections = [s for _, part in built for s in part]
    path = out / "index.html"
    atomic_write_text(path, render_page(sections,
                                        build_seconds=time.perf_counter() - started))
    atomic_write_text(out / "summary.json",
                      json.dumps(ReportResult(path, sections).to_json(), indent=2))
    if not quiet:
        _print_summary(sections, console, path)
    return ReportResult(path, sections)
