"""Every string an experiment shows has a Chinese translation in its catalog.

For each experiment of the registry (new ones included, automatically): its check names
and expected values, its table's headers and string cells and every text of its figure
must translate with :func:`attnlab.experiments.registry.catalog` (the module's ``ZH`` over
``_common.ZH``) and the report's common words (:data:`attnlab.i18n.COMMON`). A failure
lists each missing string with the template key that would cover it.
"""

from __future__ import annotations

import importlib

import pytest
from experiment_sizes import result_of

from attnlab.experiments import EXPERIMENTS, Check, Result
from attnlab.experiments.parity import run_parity, seed_demos
from attnlab.experiments.registry import catalog
from attnlab.i18n import NUMBER, figure_texts, merge, missing, template


def visible_strings(r: Result) -> list[str]:
    """What the report shows of ``r`` besides its ``*_zh`` fields: check names and expected
    values, the expected text, the table's headers and string cells, the figure's texts."""
    texts = [r.expected_text]
    texts += [t for c in r.checks for t in (c.name, c.expected)]
    if r.table is not None:
        headers, rows = r.table
        texts += [str(h) for h in headers] + [x for row in rows for x in row
                                              if isinstance(x, str)]
    assert r.figure is not None, (f"{r.name}: the shared result lost its figure (a test "
                                  "must hand section_for a copy)")
    return texts + figure_texts(r.figure)


def report(name: str, left: list[str], module: str | None = None) -> str:
    module = module or EXPERIMENTS[name]
    lines = [f"{name}: {len(left)} visible string(s) without Chinese; add them to ZH in "
             f"{module} (exact, or the template where numbers vary):"]
    lines += [f"    {s!r}" + (f"  (template {template(s)!r})" if NUMBER.search(s) else "")
              for s in left]
    return "\n".join(lines)


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_visible_string_has_chinese(fast_results, name):
    r = result_of(fast_results, name)
    left = missing(visible_strings(r), merge(catalog(name)))
    assert not left, report(name, left)


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_catalog_entries_are_well_formed(name):
    """Templates keep their placeholders; Chinese is given where the English has one."""
    module = importlib.import_module(EXPERIMENTS[name])
    assert isinstance(getattr(module, "ZH", None), dict), f"{EXPERIMENTS[name]} has no ZH dict"
    for en, zh in catalog(name).items():
        assert isinstance(en, str) and isinstance(zh, str) and zh.strip(), (name, en)
        assert en.count("{}") == zh.count("{}"), f"{name}: {en!r} -> {zh!r}: placeholders"


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_chinese_fields_are_given(fast_results, name):
    r = result_of(fast_results, name)
    for field in ("claim", "quantity", "caption", "expect_why"):
        en, zh = getattr(r, field), getattr(r, f"{field}_zh")
        assert bool(zh.strip()) == bool(en.strip()), f"{name}: {field}_zh must match {field}"


def test_a_string_without_chinese_is_reported():
    """The wrong variant: an experiment result with one English string its catalog lacks."""
    name = next(iter(EXPERIMENTS))
    r = Result(name, "c", "论断", "q", "量", 0.0, 0.0, 0.0,
               checks=[Check("an untranslated check 3", 0.0, "≤ 1", True)])
    texts = [c.name for c in r.checks] + [r.expected_text]
    left = missing(texts, merge(catalog(name)))
    assert left == ["an untranslated check 3"]
    assert "template 'an untranslated check {}'" in report(name, left)


def test_parity_strings_have_chinese():
    from attnlab.report.parity import catalog as parity_catalog

    texts = [c.name for c in run_parity(0)] + [t for n, v, _ in seed_demos(0) for t in (n, v)]
    left = missing(texts, merge(parity_catalog()))
    assert not left, report("parity", left, "attnlab.experiments.parity")
