"""The course's helpers: what every notebook of ``docs/course`` calls.

Each notebook opens with one short setup cell::

    import torch

    from attnlab.course import T, answered, predicted, report, run, setup, show

    LANG = setup("zh")  # the language of the notebook's figures and messages

:func:`setup` sets the language (:data:`LANG`), the figures' fonts (a font covering
Chinese for ``"zh"``) and size, inline figures, the random seed and offline loading of the
real models.
:func:`run` runs an experiment and keeps its result for the rest of the session (the
notebook's kernel): the same call again, a cell run twice or the same notebook in the other
language, gets the same numbers at once, and ``again=True`` measures anew;
:func:`keep_measures` does the same for every experiment's ``measure`` (the course's runner
calls it in the kernel that runs the notebooks).
The rest prints or checks in that language: :func:`T` picks the text, :func:`report` and
:func:`show_checks` print an experiment's result, :func:`show` translates its figure,
:func:`answered` and :func:`predicted` check an exercise, :func:`slider` draws a figure
under sliders. The functions after them format the output of one part's experiment (part
04's principal angles, part 08's comparisons and timings, part 11's rankings), so that the
notebook's cell says what it measures in one line.

Importing this module is light: torch, matplotlib and the experiments are imported by the
functions that use them.

>>> setup("zh"), T("yes", "是")
('zh', '是')
>>> setup("en"), T("yes", "是")
('en', 'yes')
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from attnlab._course_runs import KEPT as _KEPT
from attnlab._course_runs import Kept, kept_call, run_key

#: The measurements :func:`keep_measures` keeps, by their function and arguments.
_MEASURES: dict[tuple[Any, ...], Kept] = {}

__all__ = ["LANG", "LANGS", "SLIDERS", "setup", "T", "fmt_num", "run", "keep_measures",
           "show_code", "show",
           "report", "check_line", "show_checks", "answered", "predicted", "slider", "UNEXPECTED",
           "multihead_cost_summary", "parity_summary", "article_code_table", "timing_report",
           "score_label", "agreement_report", "agreement_answer"]

#: The languages of the course.
LANGS = ("en", "zh")
#: The language :func:`setup` set last: the one :func:`T` and every printout use.
LANG = "en"
#: Every :func:`slider` drawn since the last :func:`setup` (what the course's tests move).
SLIDERS: list[SimpleNamespace] = []
#: What :func:`report` prints, in either language, for a verdict attnlab did not expect.
UNEXPECTED = ("unexpected: attnlab expected", "出乎预期：attnlab 预期")


def setup(lang: str = "en") -> str:
    """Set the notebook's language (``"en"`` or ``"zh"``) and return it; set the figures'
    fonts (a font covering Chinese for ``"zh"``, when one is installed) and size, seed
    torch's generator with 0, ask the real models to load offline, and forget the sliders
    of a notebook run before in the same kernel.

    >>> setup("fr")
    Traceback (most recent call last):
    ...
    ValueError: lang must be one of ('en', 'zh'), got 'fr'
    """
    global LANG
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    LANG = lang
    SLIDERS.clear()
    _inline_figures()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the real models load offline
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import matplotlib as mpl
    import torch

    from attnlab.viz.figures import cjk_font

    torch.manual_seed(0)
    font = cjk_font() if lang == "zh" else None
    mpl.rcParams["font.family"] = (["DejaVu Sans", font] if font
                                   else mpl.rcParamsDefault["font.family"])
    mpl.rcParams["figure.dpi"] = 80
    return lang


def _inline_figures() -> None:
    """``%matplotlib inline`` when running in IPython (a notebook's kernel), each figure
    shown as the PNG of :func:`_figure_png`: the image the inline backend shows (cut to the
    figure's artists), drawn once instead of twice."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.run_line_magic("matplotlib", "inline")
        from matplotlib.figure import Figure

        shell.display_formatter.formatters["image/png"].for_type(Figure, _figure_png)


def _figure_png(fig: Any) -> bytes | None:
    """A figure as the inline backend's PNG (at the figure's dpi, cut to its artists; an
    empty figure shows nothing), drawn once (:func:`attnlab._render.figure_png`)."""
    from attnlab._render import figure_png

    if not fig.axes and not fig.lines:
        return None
    return figure_png(fig, dpi=fig.dpi)


def T(en: str, zh: str) -> str:
    """The text in the notebook's language (:data:`LANG`).

    >>> _ = setup("en"); T("head", "头")
    'head'
    """
    return zh if LANG == "zh" else en


def fmt_num(x: float) -> str:
    """A number for a reader: 3 significant digits, an exponent for tiny and huge values
    (the report's format)."""
    from attnlab.experiments._result import fmt_num as fmt

    return fmt(x)


def run(name: str, seed: int = 0, *, again: bool = False, **kwargs: Any) -> Any:
    """Run one of attnlab's experiments by name (:func:`attnlab.experiments.run`): its
    :class:`~attnlab.experiments.Result`.

    The result is kept for the rest of the Python session (the notebook's kernel) under
    the exact arguments of the call: the same call again (the cell run twice, or the same
    notebook in the other language) returns a copy of it at once, with the same numbers,
    the same ``seconds`` and the same figure as the run drew it (a figure :func:`show`
    translated is the caller's copy, never the kept one). ``again=True`` measures anew and
    keeps the new result (a timing such as ``fused-qkv-speed`` then times this machine
    again).

    The arguments are compared by value and type: ``train_steps=100`` and
    ``train_steps=100.0`` are two runs, and so is a config dataclass changed since the last
    call. A call with an argument that is not a plain value (a function, such as a wrong
    variant, or a tensor) runs every time, as does one whose result cannot be copied. The
    random generators (torch's, Python's and numpy's) are left as a new run would leave
    them: an experiment that leaves them as it found them (each seeds its own) is reused
    whatever their state; one that draws from them (``multihead-cost`` does) is reused only
    from the state its run started from, and its copy leaves the state the run left.
    """
    import attnlab.experiments as experiments

    if not isinstance(again, bool):
        from attnlab._errors import ArgumentTypeError

        raise ArgumentTypeError(f"again must be True or False, got {again!r}")
    return kept_call(_KEPT, run_key(name, seed, kwargs),
                     lambda: experiments.run(name, seed=seed, **kwargs), again=again)


def keep_measures() -> dict[str, Callable[..., Any]]:
    """Keep every experiment's ``measure`` result for the rest of the session, as
    :func:`run` keeps whole results: each experiment module's ``measure`` (the one its
    notebook cell calls, ``m = qk_variance.measure(...)``, and the one its ``run`` calls)
    is replaced by one that computes once per exact set of arguments and returns an
    independent copy after (the random generators left as a new measurement would leave
    them; a call with an argument that is not a plain value, or whose result cannot be
    copied, measures every time). The function's source, its name and its documentation
    are the original's (:func:`show_code` shows the original).

    The course's runner calls it once in the kernel that runs every notebook: a part's
    notebooks in the two languages run the same code cells, and the second gets its
    measurements at once. Returns the original functions by module name (nothing for a
    module kept already), so that a caller can put them back.
    """
    import functools
    import importlib

    from attnlab.experiments.registry import EXPERIMENTS

    originals: dict[str, Callable[..., Any]] = {}
    for module_name in sorted(set(EXPERIMENTS.values())):
        module = importlib.import_module(module_name)
        measure = getattr(module, "measure", None)
        if not callable(measure) or getattr(measure, "_attnlab_kept", False):
            continue

        def kept(*args: Any, _fn: Callable[..., Any] = measure,
                 _name: str = f"{module_name}.measure", **kwargs: Any) -> Any:
            return kept_call(_MEASURES, run_key(_name, args, kwargs),
                             lambda: _fn(*args, **kwargs))

        wrapper = functools.wraps(measure)(kept)
        wrapper._attnlab_kept = True  # type: ignore[attr-defined]
        module.measure = wrapper  # type: ignore[attr-defined]
        originals[module_name] = measure
    return originals


def show_code(obj: Any) -> None:
    """Print the source of ``obj`` (a function or class of attnlab, e.g. an experiment's
    ``measure``) as the library holds it, so the page and the verdict cannot drift:
    highlighted in a notebook when IPython and pygments are there, plain text otherwise.

    >>> _ = setup("en"); show_code(fmt_num)  # doctest: +ELLIPSIS
    # attnlab.course.fmt_num
    def fmt_num(x: float) -> str:
    ...
    """
    import inspect

    src = inspect.getsource(obj)
    where = f"# {getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}\n"
    text = where + src
    shell = None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        pass
    if shell is not None and getattr(shell, "kernel", None) is not None:
        try:
            from IPython.display import Code, display

            display(Code(text, language="python"))
            return
        except ImportError:  # pragma: no cover (pygments missing)
            pass
    print(text, end="" if text.endswith("\n") else "\n")


def _catalog(name: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    from attnlab.experiments.registry import catalog
    from attnlab.i18n import COMMON

    return {**COMMON, **(catalog(name) if name else {}), **(extra or {})}


def _translator(name: str | None = None, extra: Mapping[str, str] | None = None
                ) -> Callable[[Any], str]:
    """str in English; the catalog's Chinese (or the text itself) in Chinese."""
    if LANG != "zh":
        return str
    from attnlab.i18n import translate

    cat = _catalog(name, extra)
    return lambda s: translate(str(s), cat) or str(s)


def show(result: Any) -> Any:
    """An experiment's figure, its texts in the notebook's language."""
    if LANG == "zh":
        from attnlab.i18n import translate_figure
        from attnlab.viz.figures import cjk_font

        translate_figure(result.figure, _catalog(result.name),
                         family=["DejaVu Sans", cjk_font() or "sans-serif"])
    return result.figure


def report(result: Any) -> None:
    """An experiment's result in the notebook's language: the quantity measured against
    what is expected, the control (the same measurement on something that should not show
    the property) and the verdict; a line starting with :data:`UNEXPECTED` when the verdict
    is not the one attnlab expected."""
    from attnlab.i18n import COMMON

    zh = LANG == "zh"
    expected = result.expected_text.replace("slack", "容差") if zh else result.expected_text
    print(T("measured: ", "测量：") + f"{result.quantity_zh if zh else result.quantity}")
    print(f"  = {fmt_num(result.measured)}   " + T("expected: ", "预期：") + expected)
    c = result.control
    if c is None:
        print(T("control: none for this experiment", "对照：该实验没有对照"))
    else:
        judged = (T("passes too — the measurement does not tell", "同样满足——该测量无法区分")
                  if c.holds else T("fails, as it should", "不满足，符合预期"))
        print(T("control: ", "对照：") + f"{c.what_zh if zh else c.what}")
        print(f"  = {fmt_num(c.measured)}   {judged}")
    if result.by_construction:
        why = result.by_construction_zh if zh else result.by_construction
        print(T("why: ", "原因：") + why)
    verdict = COMMON.get(result.verdict, result.verdict) if zh else result.verdict
    print(T("verdict: ", "结论：") + verdict)
    if not result.passed:
        print(T(UNEXPECTED[0] + " the other verdict", UNEXPECTED[1] + "的是另一个结论"))


def check_line(check: Any, en: str, zh: str) -> None:
    """One of an experiment's checks (``result.check(id)``) in the notebook's language: what
    it measures (``en`` / ``zh``), its value, what it must be and whether it passes; then
    its control, when it has one."""
    ok = T("yes", "是") if check.passed else T("no", "否")
    print(T(f"{en}: {fmt_num(check.value)} ({check.expected}) → {ok}",
            f"{zh}：{fmt_num(check.value)}（{check.expected}）→ {ok}"))
    if check.control is not None:
        c = check.control
        print("    " + T(f"control: {c.what} = {fmt_num(c.measured)}",
                         f"对照：{c.what_zh} = {fmt_num(c.measured)}"))


def show_checks(result: Any) -> None:
    """Every check behind an experiment's verdict, in the notebook's language: each value
    against what it must be, and its control when it has one."""
    tr = _translator(result.name)
    for c in result.checks:
        ok = T("pass", "通过") if c.passed else T("fail", "未通过")
        print(T(f"- {c.name}: {fmt_num(c.value)} ({c.expected}) {ok}",
                f"- {tr(c.name)}：{fmt_num(c.value)}（{tr(c.expected)}）{ok}"))
        if c.control is not None:
            judged = (T("passes too", "同样满足") if c.control.holds
                      else T("fails, as it should", "不满足，符合预期"))
            print("    " + T(f"control: {c.control.what} = {fmt_num(c.control.measured)}, "
                             f"{judged}",
                             f"对照：{c.control.what_zh} = {fmt_num(c.control.measured)}，"
                             f"{judged}"))


def answered(**answers: Any) -> None:
    """Fails (AssertionError) while an exercise's answer is still ``...``.

    >>> _ = setup("en"); answered(x=1)
    >>> answered(x=...)
    Traceback (most recent call last):
    ...
    AssertionError: x is still `...`: compute it in the cell above
    """
    for name, value in answers.items():
        if value is ...:
            raise AssertionError(T(f"{name} is still `...`: compute it in the cell above",
                                   f"{name} 仍是 `...`：请先在上面的单元格中算出它"))


def predicted(guess: Any, truth: float, *, within: float, why_en: str = "",
              why_zh: str = "") -> None:
    """Predict, then check: prints the prediction ``guess``, the measured ``truth`` and
    the gap between them; fails (AssertionError) while the guess is ``...`` or not a
    number, and when it is further than ``within`` from the truth (the message says why).

    >>> _ = setup("en"); predicted(2, 2.5, within=1, why_en="Half a unit.")
    your prediction 2, measured 2.5: off by 0.5
    close enough (within 1). Half a unit.
    >>> predicted("2", 2.5, within=1)
    Traceback (most recent call last):
    ...
    AssertionError: write your prediction as a number, not '2'
    """
    if guess is ...:
        raise AssertionError(T("your prediction is still `...`: write a number in the cell "
                               "above before the measurement runs",
                               "你的预测仍是 `...`：请先在上面的单元格中写下一个数，再运行测量"))
    if not (isinstance(guess, (int, float)) and not isinstance(guess, bool)
            and math.isfinite(guess)):
        raise AssertionError(T(f"write your prediction as a number, not {guess!r}",
                               f"请把预测写成一个数，而不是 {guess!r}"))
    truth = float(truth)
    gap = abs(guess - truth)
    print(T(f"your prediction {fmt_num(guess)}, measured {fmt_num(truth)}: "
            f"off by {fmt_num(gap)}",
            f"你的预测 {fmt_num(guess)}，实测 {fmt_num(truth)}：相差 {fmt_num(gap)}"))
    if not gap <= within:
        raise AssertionError(T(f"off by more than {fmt_num(within)}. {why_en}",
                               f"相差超过 {fmt_num(within)}。{why_zh}"))
    print(T("close enough (within ", "足够接近（相差不超过 ") + fmt_num(within)
          + T("). ", "）。") + T(why_en, why_zh))


#: The environment variable that keeps :func:`slider`'s figures still (``"1"``).
STILL_ENV = "ATTNLAB_COURSE_STILL"


def slider(draw: Callable[..., Any], **controls: Sequence[Any]) -> None:
    """A figure with sliders. ``draw(**values)`` draws it; each control is
    ``(low, high, step, default)`` or ``([choices], default)``. The figure is drawn once at
    the defaults (a still figure, which a page without a kernel shows too), then offered
    again under ipywidgets sliders, redrawn as they move, where a Jupyter front end is.
    Each slider is kept in :data:`SLIDERS`. With :data:`STILL_ENV` set to ``1`` (as the
    course's runner sets it: it executes the notebooks with no front end to move a slider,
    and its client can stall on the widget's messages) the sliders are built but not
    shown: the still figure stays."""
    defaults = {name: spec[-1] for name, spec in controls.items()}
    SLIDERS.append(SimpleNamespace(draw=draw, controls=controls, defaults=defaults))
    draw(**defaults)
    try:
        import ipywidgets as w  # type: ignore[import-untyped]
    except ImportError:  # the course extra installs it
        print(T("(ipywidgets is not installed: the figure stays still)",
                "（未安装 ipywidgets：图不能拖动）"))
        return
    widgets = {}
    for name, spec in controls.items():
        if len(spec) == 2:
            widgets[name] = w.SelectionSlider(options=spec[0], value=spec[1], description=name,
                                              continuous_update=False)
        elif all(isinstance(x, int) for x in spec):
            widgets[name] = w.IntSlider(min=spec[0], max=spec[1], step=spec[2], value=spec[3],
                                        description=name, continuous_update=False)
        else:
            widgets[name] = w.FloatSlider(min=spec[0], max=spec[1], step=spec[2],
                                          value=spec[3], description=name,
                                          continuous_update=False)
    if os.environ.get(STILL_ENV) == "1":
        return
    w.interact(draw, **widgets)


# --------------------------------------------------------------------------------------
# one experiment's output, formatted (parts 04, 08 and 11)
# --------------------------------------------------------------------------------------

#: multihead-cost's readings of the article's sentences: check id, English, Chinese.
_MULTIHEAD_READINGS = (
    ("head-blocks-orthogonal", "after the split, the heads' coordinate blocks are orthogonal",
     "切分后各头的坐标块正交"),
    ("heads-orthogonal", "the trained heads' W_q, W_k subspaces are orthogonal",
     "训练后各头的 W_q、W_k 子空间正交"),
    ("wq-angle-change", "training pushes the heads' W_q subspaces apart",
     "训练把各头的 W_q 子空间推开"),
    ("wk-angle-change", "training pushes the heads' W_k subspaces apart",
     "训练把各头的 W_k 子空间推开"),
    ("patterns-diverge", "the trained heads attend differently (total variation)",
     "训练后各头的注意力分布不同（全变差）"))


def multihead_cost_summary(r: Any) -> None:
    """Part 04: the principal angles between the heads of ``multihead-cost``'s result
    ``r`` (at initialisation → trained, per task, seed and matrix), then whether the
    trained heads stay in different subspaces and each reading's check."""
    import re

    task_name = {"copy": T("copy", "复制"), "sort": T("sort", "排序"),
                 "reverse": T("reverse", "反转")}
    angle_row = re.compile(r"(\w+), seed (\d+): mean principal angle between heads, "
                           r"(W_q|W_k) \(°\)")
    print(T("mean principal angle between heads, at initialisation → trained:",
            "各头之间的平均主夹角，初始化时 → 训练后："))
    rows = [(angle_row.fullmatch(row[0]), row[1], row[2]) for row in r.table[1]]
    if not any(m for m, _, _ in rows):
        raise ValueError("multihead-cost's table has no angle rows")
    for m, init, trained in rows:
        if m:
            task, seed, w = m.groups()
            comma = T(", ", "，")
            print(f"  {task_name.get(task, task)}{comma}" + T("seed", "种子") + f" {seed}{comma}"
                  f"{w}{T(': ', '：')}{init:.1f}° → {trained:.1f}°")
    print(T("trained heads stay in different subspaces (the headline):",
            "训练后各头处在不同的子空间（主测量）："),
          T("yes", "是") if r.headline_holds else T("no", "否"))
    for id_, en, zh in _MULTIHEAD_READINGS:
        check_line(r.check(id_), en, zh)


def parity_summary(comparisons: Sequence[Any]) -> None:
    """Part 08: how many of the comparisons with PyTorch (``parity.run_parity()``) pass,
    those that fail, the one closest to its tolerance and the wrong variant closest to
    passing."""
    from attnlab.experiments import parity

    name_of = _translator(extra=parity.ZH)
    ok = [c for c in comparisons if c.passed]
    print(T(f"{len(ok)} of {len(comparisons)} comparisons pass (within their tolerance, "
            "their wrong variant outside it)",
            f"{len(comparisons)} 项比较中有 {len(ok)} 项通过"
            "（误差在容差以内，错误变体在容差以外）"))
    for c in comparisons:
        if not c.passed:
            print(T("fails:", "未通过："), name_of(c.name), fmt_num(c.max_error))
    closest = max(comparisons, key=lambda c: c.max_error / c.tolerance)
    print(T("closest to its tolerance:", "最接近容差的一项："), name_of(closest.name),
          fmt_num(closest.max_error), "≤", fmt_num(closest.tolerance))
    controlled = [c for c in comparisons if c.control is not None]
    if not controlled:
        return
    weakest = min(controlled, key=lambda c: c.control / c.tolerance
                  if math.isfinite(c.control) else math.inf)
    print(T(f"{len(controlled)} comparisons measure a wrong variant; the one closest to "
            "passing:", f"{len(controlled)} 项比较测量了错误变体；最接近通过的一个："),
          name_of(weakest.name), "—", weakest.wrong_zh if LANG == "zh" else weakest.wrong,
          fmt_num(weakest.control), "≤" if weakest.control_holds else ">",
          fmt_num(weakest.tolerance))


def article_code_table(r: Any) -> None:
    """Part 08: ``article-code``'s table, one line per run of a listing (the error it met,
    with its line) and, indented, each fix."""
    tr = _translator(r.name)
    for row in r.table[1]:
        label, outcome, line, message = row[:4]
        colon = T(": ", "：")
        if not outcome:  # a line of a fix's diff
            print(f"    {tr(label)}{colon}{message}")
            continue
        where = T(f" (line {line})", f"（第 {line} 行）") if line != "" else ""
        print(f"- {tr(label)}{colon}{tr(outcome)}{where}"
              + (f" — {tr(message)}" if message else ""))


def timing_report(r: Any) -> None:
    """Part 08: a timing's result (``fused-qkv-speed``), its verdict shown as this run's on
    this machine (not :func:`report`'s): the measurement, the control, the threshold, each
    check and the table of timings and load."""
    zh = LANG == "zh"
    print(T("measured on this machine: ", "在这台机器上测得：")
          + (r.quantity_zh if zh else r.quantity) + f" = {fmt_num(r.measured)}")
    if r.control is not None:
        print(T("control: ", "对照：") + (r.control.what_zh if zh else r.control.what)
              + f" = {fmt_num(r.control.measured)}")
    print(T("threshold: ", "阈值：") + r.expected_text
          + T(", for the measurement and not for the control", "，测量值须达到，对照不得达到"))
    tr = _translator(r.name)
    print(T("this run, on this machine: ", "这次运行、在这台机器上：") + tr(r.verdict))
    show_checks(r)
    headers, rows = r.table
    for row in rows:
        if str(row[0]).startswith("load average"):  # before | after, and the CPUs
            print(f"{tr(row[0])}{T(' (', '（')}{tr(row[1])}{T('): ', '）：')}"
                  f"{fmt_num(row[2])} | {fmt_num(row[3])}")
            continue
        cells = [f"{tr(h)} {fmt_num(v)}" for h, v in zip(headers[2:], row[2:])
                 if isinstance(v, float)]
        print(f"{tr(row[0])}{T(', ', '，')}{tr(row[1])}: " + T(", ", "，").join(cells))


_SCORE_LABELS = {
    "weights": ("weights, all layers and heads", "注意力权重，所有层和头"),
    "last_layer": ("weights, last layer", "注意力权重，最后一层"),
    "rollout": ("rollout", "注意力展开"),
    "accumulated": ("accumulated over every query", "所有查询累计的注意力"),
    "random": ("random score (seeded)", "随机分数（固定种子）"),
    "value_weighted": ("value-weighted, all layers", "值加权，所有层"),
    "value_weighted_rollout": ("value-weighted rollout", "值加权注意力展开"),
}


def score_label(name: str) -> str:
    """Part 11: an importance score's name (``ablation.importances``' keys, and the
    value-weighted ones) as the reader reads it.

    >>> _ = setup("zh"); score_label("rollout"), score_label("mine")
    ('注意力展开', 'mine')
    >>> _ = setup("en")
    """
    en, zh = _SCORE_LABELS.get(name, (name, name))
    return T(en, zh)


def agreement_report(clean: float, rho: Mapping[str, float], null_one: Any,
                     null_best: Any) -> None:
    """Part 11: each score's Spearman ρ with the ablation's effect, best first, with the
    share of single random orders (``null_one``) reaching it; then the control's 95%
    quantiles, of single random orders and of the best of a set (``null_best``).
    ``clean``: the loss over the targets with nothing hidden."""
    n_scores = len(rho) - 1  # the random sets hold one order per score but the random one
    print(T(f"clean loss over the targets: {clean:.3f}", f"目标行上的干净损失：{clean:.3f}"))
    for name in sorted(rho, key=lambda n: rho[n], reverse=True):
        reach = float((null_one >= rho[name]).float().mean())
        print(T(f"  {score_label(name)}: ρ = {rho[name]:+.3f}  (random orders reaching it: "
                f"{reach:.1%})",
                f"  {score_label(name)}：ρ = {rho[name]:+.3f}（达到它的随机排列：{reach:.1%}）"))
    q_one, q_best = float(null_one.quantile(0.95)), float(null_best.quantile(0.95))
    print(T(f"control: 95% of single random orders below ρ = {q_one:+.3f}, 95% of the best "
            f"of {n_scores} below ρ = {q_best:+.3f}",
            f"对照：95% 的单个随机排列低于 ρ = {q_one:+.3f}，{n_scores} 个中最好者的 95% 低于 "
            f"ρ = {q_best:+.3f}"))


def agreement_answer(rho: Mapping[str, float], scores: Mapping[str, Any], effect: Any,
                     null_one: Any, null_best: Any) -> None:
    """Part 11's answer, from its numbers: which score predicts the effect of hiding a key
    best, against the random score and the best of the random sets, and where the first
    token stands by weight and by the loss rise when hidden."""
    n_scores = len(rho) - 1
    best = max((name for name in rho if name != "random"), key=lambda n: rho[n])
    reach_one = float((null_one >= rho[best]).float().mean())
    reach_best = float((null_best >= rho[best]).float().mean())
    label = score_label(best)
    print(T(f"best predictor: {label}, ρ = {rho[best]:+.3f}; the random score: "
            f"ρ = {rho['random']:+.3f} (a difference of {rho[best] - rho['random']:+.3f})",
            f"最好的预测者：{label}，ρ = {rho[best]:+.3f}；随机分数："
            f"ρ = {rho['random']:+.3f}（相差 {rho[best] - rho['random']:+.3f}）"))
    print(T(f"random orders reaching ρ = {rho[best]:+.3f}: {reach_one:.1%} of single ones, "
            f"{reach_best:.1%} of the best of {n_scores}",
            f"达到 ρ = {rho[best]:+.3f} 的随机排列：单个的 {reach_one:.1%}，"
            f"{n_scores} 个中最好者的 {reach_best:.1%}"))
    if reach_best < 0.05:
        print(T(f"So {label} predicts which token matters better than the best of "
                f"{n_scores} random scores: at this size it carries information about the "
                "effect of hiding a token.",
                f"所以「{label}」预测哪个词元要紧的能力好于 {n_scores} 个随机分数中"
                "最好的那个：在这个规模下，它带有关于藏起一个词元的效应的信息。"))
    else:
        print(T(f"So, once the pick of the best of {n_scores} is accounted for, no score is "
                "clearly better than chance here: on this text, how bright a cell is does "
                "not tell which token matters (a longer run can resolve a weaker agreement).",
                f"所以，把从 {n_scores} 个中挑出最好者这一点考虑进去之后，这里没有哪个分数明显"
                "好于随机：在这段文本上，格子有多亮并不能说明哪个词元要紧（更长的测量能分辨"
                "更弱的一致性）。"))
    print(T(f"the raw weights: ρ = {rho['weights']:+.3f}; value-weighted: "
            f"ρ = {rho['value_weighted']:+.3f}",
            f"原始注意力权重：ρ = {rho['weights']:+.3f}；值加权：ρ = {rho['value_weighted']:+.3f}"))

    def place(s: Any) -> int:  # the first key's place, 1 = top
        return int((s > s[0]).sum()) + 1

    n = len(effect)
    print(T(f"the first token: place {place(scores['weights'])} of {n} by weight, place "
            f"{place(effect)} of {n} by the loss rise when hidden ({float(effect[0]):+.4f})",
            f"第一个词元：按权重排第 {place(scores['weights'])} 位（共 {n} 个），"
            f"按藏起后损失的上升排第 {place(effect)} 位（{float(effect[0]):+.4f}）"))
