"""Assembling the report: every section computed now, written as one self-contained page.

A section builder is a function ``(ctx: ReportContext) -> Section | list[Section]``;
:data:`PROVIDERS` names them in page order (part name -> ``"module:function"``) so that each
part imports only when built. The page has no external resource of any kind (no CDN, no
fonts, no network); figures are inline SVG or data URIs.
"""

from __future__ import annotations

import html
import importlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab._io import atomic_write_text
from attnlab.report.html import ReportContext, Section

__all__ = ["PROVIDERS", "ReportResult", "build_report", "render_page"]

#: Section builders in page order: part name -> ``"module:function"``.
PROVIDERS: dict[str, str] = {
    "claims": "attnlab.report.claims:build",
    "parity": "attnlab.report.parity:build",
    "experiments": "attnlab.report.experiments:build",
    "explorer": "attnlab.report.explorer:build",
    "real-models": "attnlab.report.real_models:build",
    "architectures": "attnlab.report.architectures:build",
    "long-contexts": "attnlab.report.long_contexts:build",
    "survey": "attnlab.report.survey:build",
    "trained": "attnlab.report.trained_model:build",
}


@dataclass
class ReportResult:
    """The written page and its sections; ``passed`` unless some section failed."""

    path: Path
    sections: list[Section]

    @property
    def passed(self) -> bool:
        return all(s.passed is not False for s in self.sections)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "passed": self.passed,
            "sections": [
                {"id": s.id, "title": s.title, "passed": s.passed, "seconds": round(s.seconds, 3),
                 "rows": [{"check": c, "value": v, "passed": p} for c, v, p in s.rows]}
                for s in self.sections
            ],
        }


def _load_provider(spec: str):
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)


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
header { padding: 28px 32px 12px; border-bottom:1px solid var(--line); background:var(--card); }
header h1 { margin:0 0 4px; font-size:26px; }
header p { margin:0; color:var(--muted); }
nav { position:sticky; top:0; background:var(--card); border-bottom:1px solid var(--line);
      padding:8px 32px; display:flex; flex-wrap:wrap; gap:6px 14px; z-index:5; font-size:13px; }
nav a { color:var(--accent); text-decoration:none; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 32px 64px; }
section.card { background:var(--card); border:1px solid var(--line); border-radius:10px;
               padding: 18px 22px; margin: 18px 0; }
section.card h2 { margin: 0 0 10px; font-size:20px; display:flex; gap:10px; align-items:center; }
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
})();
"""


def render_page(sections: list[Section], *, title: str = "attnlab report",
                title_zh: str = "attnlab 报告", generated: str | None = None) -> str:
    """The whole page as one HTML string (no external resource)."""
    esc = html.escape
    n_pass = sum(s.passed is True for s in sections)
    n_fail = sum(s.passed is False for s in sections)
    nav = "".join(
        f'<a href="#{esc(s.id)}"><span class="en">{esc(s.title)}</span>'
        f'<span class="zh">{esc(s.title_zh)}</span></a>'
        for s in sections
    )
    body = "".join(
        f'<section class="card" id="{esc(s.id)}" data-passed="{s.passed}">'
        f'<h2><span class="en">{esc(s.title)}</span><span class="zh">{esc(s.title_zh)}</span>'
        f"{_badge(s.passed, s.finding)}</h2>{s.html}</section>"
        for s in sections
    )
    gen = esc(generated or time.strftime("%Y-%m-%d %H:%M:%S"))
    return f"""<!DOCTYPE html>
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
<header>
<h1><span class="en">{esc(title)}</span><span class="zh">{esc(title_zh)}</span></h1>
<p><span class="en">Every claim computed on real numbers, with the verdict the numbers give.
</span><span class="zh">每个论断都在真实数值上计算，并给出数值所支持的结论。</span>
&nbsp;·&nbsp; <span class="en">{n_pass} pass, {n_fail} fail</span>
<span class="zh">{n_pass} 项通过，{n_fail} 项失败</span>
&nbsp;·&nbsp; {gen}</p>
</header>
<nav>{nav}<button id="lang" type="button">English / 中文</button></nav>
<main>{body}</main>
<script>{_JS}</script>
</body>
</html>
"""


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


def build_report(out_dir: str | os.PathLike[str], *, only: list[str] | None = None,
                 quiet: bool = False, seed: int = 0,
                 providers: list[str] | None = None) -> ReportResult:
    """Build every part (or those named in ``only``) and write ``out_dir/index.html`` and
    ``out_dir/summary.json``.

    ``only`` takes part names, the keys of :data:`PROVIDERS`; ``providers`` overrides the
    list itself (``"module:function"`` strings).
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out_dir}: cannot create directory ({exc.strerror})") from None
    if only is not None:
        unknown = sorted(set(only) - set(PROVIDERS))
        if unknown:
            raise ValueError(f"--only: unknown part(s) {unknown}; the parts are {list(PROVIDERS)}")
    if providers is None:
        providers = [spec for key, spec in PROVIDERS.items() if only is None or key in only]
    loaded = [_load_provider(p) for p in providers]
    console = Console(stderr=True, quiet=quiet)
    sections: list[Section] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), console=console,
                  disable=quiet) as progress:
        task = progress.add_task("report", total=len(loaded))
        ctx = ReportContext(out_dir=out, quiet=quiet, seed=seed, progress=progress)
        for provider in loaded:
            name = provider.__module__.rsplit(".", 1)[-1].replace("_", " ")
            progress.update(task, description=f"report: {name}")
            t0 = time.perf_counter()
            result = provider(ctx)
            for s in result if isinstance(result, list) else [result]:
                s.seconds = time.perf_counter() - t0
                sections.append(s)
            progress.advance(task)
    path = out / "index.html"
    atomic_write_text(path, render_page(sections))
    atomic_write_text(out / "summary.json",
                      json.dumps(ReportResult(path, sections).to_json(), indent=2))
    if not quiet:
        _print_summary(sections, console, path)
    return ReportResult(path, sections)
