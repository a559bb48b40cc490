"""The experiments by name, and :func:`run_all`.

>>> from attnlab.experiments import EXPERIMENTS
>>> list(EXPERIMENTS)[:3]
['qk-variance', 'softmax-saturation', 'scaling-training']
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._result import Result

__all__ = ["EXPERIMENTS", "catalog", "get", "run", "run_all"]

#: name -> module (imported when run); page and table order.
EXPERIMENTS: dict[str, str] = {
    "qk-variance": "attnlab.experiments.qk_variance",
    "softmax-saturation": "attnlab.experiments.softmax_saturation",
    "scaling-training": "attnlab.experiments.scaling_training",
    "dot-product-geometry": "attnlab.experiments.dot_product_geometry",
    "convex-combination": "attnlab.experiments.convex_combination",
    "multihead-cost": "attnlab.experiments.multihead_cost",
    "pe-relative-position": "attnlab.experiments.pe_relative_position",
    "rope-relative": "attnlab.experiments.rope_relative",
    "kernel-smoothing": "attnlab.experiments.kernel_smoothing",
    "dynamic-graph": "attnlab.experiments.dynamic_graph",
    "masking": "attnlab.experiments.masking",
    "linear-attention": "attnlab.experiments.linear_attention",
    "init-scale": "attnlab.experiments.init_scale",
    "article-code": "attnlab.experiments.article_code",
    "fused-qkv-speed": "attnlab.experiments.fused_qkv_speed",
    "contextualisation": "attnlab.experiments.contextualisation",
    "one-relation-per-head": "attnlab.experiments.one_relation_per_head",
    "qkv-roles": "attnlab.experiments.qkv_roles",
    "wo-fusion": "attnlab.experiments.wo_fusion",
    "pe-frequency-roles": "attnlab.experiments.pe_frequency_roles",
    "relative-position-learned": "attnlab.experiments.relative_position_learned",
    "learned-kernel": "attnlab.experiments.learned_kernel",
    "head-dimensions": "attnlab.experiments.head_dimensions",
}


def _check_names(names: Sequence[str]) -> list[str]:
    if isinstance(names, str):
        names = [names]
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise ValueError(
            f"unknown experiment(s) {unknown}; valid names: {', '.join(EXPERIMENTS)}"
        )
    return list(dict.fromkeys(names))


def get(name: str) -> Callable[..., Result]:
    """The ``run`` function of experiment ``name``."""
    (name,) = _check_names([name])
    return importlib.import_module(EXPERIMENTS[name]).run


def catalog(name: str) -> dict[str, str]:
    """The Chinese catalog for what experiment ``name`` shows: the shared words of
    ``_common.ZH``, then the module's own ``ZH`` (English -> Chinese, see
    :mod:`attnlab.i18n`)."""
    from . import _common

    (name,) = _check_names([name])
    module = importlib.import_module(EXPERIMENTS[name])
    return {**_common.ZH, **getattr(module, "ZH", {})}


def run(name: str, seed: int = 0, **kwargs: Any) -> Result:
    """Run one experiment by name; ``kwargs`` go to its ``run`` (sizes, variants, plot)."""
    from ._common import one_thread

    fn = get(name)
    t0 = time.perf_counter()
    with one_thread():
        result = fn(seed=seed, **kwargs)
    result.seconds = time.perf_counter() - t0
    return result


def run_all(
    only: Sequence[str] | None = None,
    seed: int = 0,
    *,
    plot: bool = False,
    progress: Any = None,
    quiet: bool = False,
) -> list[Result]:
    """Run every experiment (or those in ``only``) in registry order.

    ``progress`` is a ``rich.progress.Progress`` to report into; without one, a progress
    bar is drawn on stderr unless ``quiet``. ``plot`` also draws each figure.
    """
    names = list(EXPERIMENTS) if only is None else _check_names(only)
    names = [n for n in EXPERIMENTS if n in names]  # registry order
    if progress is None and not quiet:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as bar:
            return _run_names(names, seed, plot, bar)
    return _run_names(names, seed, plot, progress)


def _run_names(names: list[str], seed: int, plot: bool, progress: Any) -> list[Result]:
    task = None
    if progress is not None:
        task = progress.add_task("experiments", total=len(names))
    results = []
    for name in names:
        if task is not None:
            progress.update(task, description=f"experiment: {name}")
        results.append(run(name, seed=seed, plot=plot))
        if task is not None:
            progress.advance(task)
    if task is not None:
        progress.remove_task(task)
    return results
