"""The attention explorer: one self-contained HTML block built from an :class:`AttentionTrace`.

Python does the arithmetic that must be exact or that would be slow in the page, and hands
the page compact arrays; the page (``viz/static/explorer/``, hand-written parts joined into
one inlined script by :mod:`attnlab.viz.assets`) draws
seven linked views: model (layers × heads), head (arcs), matrix (heatmap), QK (the
softmax(q·k·scale / T) of one query, recomputed live from q and k), geometry (queries and
keys in one 2-D projection), positional (the sinusoidal table and its rotations) and
diagnostics (the sortable head table of :mod:`attnlab.analysis`), and for an image trace an
eighth, the image view (the picture with the chosen query patch's attention over the patch
grid, prefix tokens listed apart).

An input may be a ``StackedTrace`` (encoder self-, decoder self- and cross-attention of an
encoder–decoder or speech model): the page then has a stack selector, and every view works
on the stack chosen, with its own queries and keys — cross-attention has the target tokens as
rows and the source tokens (or time positions) as columns; its QK and geometry views use the
cross stack's own q and k, and the diagnostics leave out the scores that compare query and
key positions (:data:`POSITION_SCORES`), which mean nothing across two texts.

Every weight comes from the trace's on-demand methods (``head_weights`` for short inputs,
rows by tiles through the diagnostics' pass for long ones); nothing here asks for the dense
``trace.weights``.

* **Short inputs** (at most ``max_tokens`` tokens): every weight of every head, and the q/k
  of the heads that fit ``qk_budget``, so the QK view recomputes any row in the page.
* **Long inputs**: every head as a *pooled* map — the mean over a block's queries of the
  sum over the block's keys, so pooled rows still sum to 1 (as :meth:`AttentionTrace.pooled`)
  — made in the one pass of :func:`attnlab.analysis.diagnose` that also scores the heads,
  with the block size chosen so that the page stays within ``page_budget`` bytes; the
  page adds a token strip to move through the input. Served by ``attnlab serve`` (``api``
  set), a click on a token or a block fetches the exact row or tile from the server
  (:mod:`attnlab.serve.trace_api`), and the QK view works for any query.

Encoding of the embedded data (``format_version`` 2)::

    weights   uint16, w·65535 rounded (|error| <= 7.7e-6), gzip, base64   (L, H, R, C);
              uint8 (|error| <= 2e-3) when uint16 does not fit the budget
    q, k      float32 when every stored head fits ``qk_budget`` bytes, else float16
              (the per-head max |Δp| that float16 storage causes is measured and shown);
              k per key/value head (grouped-query heads share one)
    geometry  float32 2-D points, queries then keys, per stored head
    pe        float32 sinusoidal table (positions × embed_dim)

Every string that reaches the page goes through :func:`json_for_html`, which escapes ``<``,
``>`` and ``&`` so that a token such as ``</script>`` cannot end the script element.

The page itself lives here (:class:`Explorer`, :func:`explore`); what it is made of lives
in one module a job: :mod:`attnlab.viz.payload` (the data and its budgets),
:mod:`attnlab.viz.codec` (the encoding above), :mod:`attnlab.viz.inputs` (stacks, cross-
attention, images), :mod:`attnlab.viz.geometry` (the geometry view's projection),
:mod:`attnlab.viz.assets` (the inline JS and CSS). Their public names are importable from
here too.

>>> import torch
>>> w = torch.softmax(torch.randn(1, 2, 3, 3), dim=-1)
>>> t = AttentionTrace(tokens=["a", "</script>", "c"], weights=w, model="toy")
>>> page = Explorer(t, uid="x0").to_html()
>>> page.count("</script>"), 'id="x0"' in page   # only the page's own three scripts close
(3, True)
"""

from __future__ import annotations

import html
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch  # noqa: F401  (the doctests)

from attnlab.tracing.attention import STACKS as STACK_NAMES
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.assets import static_asset
from attnlab.viz.codec import decode_blob, json_for_html
from attnlab.viz.inputs import POSITION_SCORES, image_input, input_stacks, is_cross, is_stacked
from attnlab.viz.payload import (
    FORMAT_VERSION,
    IMAGE_VIEW,
    VIEWS,
    ExplorerConfig,
    PagePayload,
    page_payload,
)
from attnlab.viz.pooling import block_spans, coarsen_pooled
from attnlab.viz.qk import qk_row_probs, sink_logits

__all__ = ["VIEWS", "IMAGE_VIEW", "STACK_NAMES", "Explorer", "ExplorerConfig", "json_for_html",
           "static_asset", "explore", "decode_blob", "block_spans", "coarsen_pooled",
           "qk_row_probs", "sink_logits", "input_stacks", "image_input", "is_cross",
           "POSITION_SCORES"]

#: Names that moved to a module of their own, still importable from here: name -> (module,
#: its name there).
_MOVED = {
    "encode_blob": ("codec", "encode_blob"), "QUANTIZATION_ERROR": ("codec", "QUANTIZATION_ERROR"),
    "MATH_TEXTS": ("payload", "MATH_TEXTS"), "math_payload": ("payload", "math_payload"),
    "_fit_pooled": ("payload", "_fit_pooled"), "_geometry": ("geometry", "joint_projection"),
    "_top2": ("geometry", "top2"),
}


def __getattr__(name: str) -> Any:
    """The names of :data:`_MOVED`, from their own modules."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attr = _MOVED[name]
    return getattr(importlib.import_module(f"attnlab.viz.{module}"), attr)


class Explorer:
    """An interactive view of one or more inputs (e.g. two sentences on one model).

    Each input is an :class:`AttentionTrace` or a ``StackedTrace`` (encoder self-, decoder
    self- and cross-attention of one input), which the page shows with a stack selector;
    cross-attention has the target tokens as rows and the source tokens as columns. An
    image trace (``meta["input"]["kind"] == "image"``) adds the image view: the image with
    the chosen query's attention over its patches. Several traces on one page share the
    ``qk_budget`` and ``weights_budget`` of :class:`ExplorerConfig`.

    ``to_html()`` is a self-contained fragment (CSS, JS and data inline; ids from ``uid``),
    shown inline in Jupyter through ``_repr_html_``; ``save(path)`` writes a whole page.
    Nothing in either makes a network request. ``api`` (one URL prefix per trace, one per
    stack of a several-stack input, or None) is set by the server only: the page then
    fetches exact rows and tiles from it.
    """

    def __init__(self, traces: Any, *,
                 config: ExplorerConfig | None = None, uid: str | None = None,
                 layer: int = 0, head: int = 0,
                 api: Sequence[str | None] | None = None, stack: str | None = None) -> None:
        if isinstance(traces, AttentionTrace) or is_stacked(traces):
            traces = [traces]
        items = list(traces) if isinstance(traces, Sequence) else []
        ok = [isinstance(t, AttentionTrace) or is_stacked(t) for t in items]
        if not items or not all(ok):
            got = [type(t).__name__ for t in items] or type(traces).__name__
            raise TypeError(f"traces must be an AttentionTrace, a StackedTrace or a non-empty "
                            f"list of them, got {got}")
        #: one entry per input: (about, [(stack name, trace), ...]) (see input_stacks)
        self.inputs = [input_stacks(t) for t in items]
        #: every stack of every input, in page order (what ``api`` gives one prefix each)
        self.traces = [t for _, stacks in self.inputs for _, t in stacks]
        self.config = config or ExplorerConfig()
        if not isinstance(self.config, ExplorerConfig):
            raise TypeError(f"config must be an ExplorerConfig, got {type(config).__name__}")
        names = [name for name, _ in self.inputs[0][1]]
        if stack is not None and stack not in names:
            raise ValueError(f"stack must be one of the first input's stacks {names}, got "
                             f"{stack!r}")
        #: the stack the page opens on (of the first input)
        self.stack = stack if stack is not None else names[0]
        t0 = self.inputs[0][1][names.index(self.stack)][1]
        if not (0 <= layer < t0.num_layers and 0 <= head < t0.num_heads):
            raise ValueError(f"layer, head must lie in [0, {t0.num_layers}) x [0, "
                             f"{t0.num_heads}), got ({layer}, {head})")
        api = [None] * len(self.traces) if api is None else list(api)
        if len(api) != len(self.traces) or not all(a is None or isinstance(a, str) for a in api):
            raise ValueError(f"api must hold one URL prefix (str or None) per trace, one per "
                             f"stack of a several-stack input ({len(self.traces)}), got {api!r}")
        self.layer, self.head, self.api = layer, head, api
        self.uid = uid or f"ax-{uuid.uuid4().hex[:12]}"
        self._payload: PagePayload | None = None

    def payload(self, progress: bool = False, *, group: Any = None) -> PagePayload:
        """Everything the page receives, as a JSON-ready dict (computed once, then kept).

        ``progress``: show a progress bar on stderr over the one pass that reads every
        weight (diagnostics and pooled maps together). ``group``: a torchrun group
        (:func:`attnlab._dist.join`) whose processes split that pass by heads, every one
        of them calling this (each gets the whole payload, equal to one process's).
        """
        if self._payload is None:
            self._payload = page_payload(
                self.inputs, self.config, uid=self.uid, layer=self.layer, head=self.head,
                stack=self.stack, firsts=[self._first_head(t) for t in self.traces],
                api=self.api, progress=progress, group=group)
        self._payload["uid"] = self.uid
        return self._payload

    def target_cuts(self) -> list[tuple[int, int, int]]:
        """``(input, kept, given)`` for each input whose target text was cut to fit the model
        (an encoder–decoder input traced with ``truncate=True``): the input's index, the
        target tokens kept (the decoder's) and the tokens the target had. What a caller
        announces, as ``attnlab trace`` does (:func:`explore` itself prints nothing).

        >>> w = torch.softmax(torch.randn(1, 1, 2, 2), -1)
        >>> Explorer(AttentionTrace(tokens=["a", "b"], weights=w)).target_cuts()
        []
        """
        cuts = []
        for i, (about, stacks) in enumerate(self.inputs):
            given = about.get("target_truncated_from")
            if given is None:
                continue
            rows = dict(stacks)
            kept = next((rows[n].seq_len for n in ("decoder", "cross") if n in rows),
                        stacks[-1][1].seq_len)
            cuts.append((i, kept, int(given)))
        return cuts

    def _first_head(self, trace: AttentionTrace) -> tuple[int, int]:
        """The head whose q/k a page keeps first: the one it opens on, where ``trace`` has
        it (stacks differ in layers and heads), else (0, 0)."""
        if self.layer < trace.num_layers and self.head < trace.num_heads:
            return self.layer, self.head
        return 0, 0

    def to_html(self) -> str:
        """The fragment: ``<div id=uid>`` + data + inline CSS and JS + a boot call."""
        uid = html.escape(self.uid, quote=True)
        data = json_for_html(self.payload())
        return (
            f'<div class="attnlab-explorer" id="{uid}" data-format-version="{FORMAT_VERSION}">'
            f'<noscript>attnlab explorer: JavaScript is needed to draw the views. '
            f'需要 JavaScript 才能绘制各个视图。</noscript>'
            f'<div class="ax-loading">attnlab explorer…</div></div>'
            f'<script type="application/json" id="{uid}-data">{data}</script>'
            f"<style>{static_asset('explorer.css')}</style>"
            f"<script>{static_asset('explorer.js')}</script>"
            f'<script>window.AttnlabExplorer.mount("{uid}");</script>'
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_page(self, title: str | None = None, *, connect_self: bool = False) -> str:
        """A whole HTML document around :meth:`to_html` (strict CSP: nothing external;
        ``connect_self`` lets the page fetch from the server that sent it)."""
        model = self.inputs[0][0]["model"]
        title = title or f"attnlab explorer · {model or 'trace'}"
        connect = " connect-src 'self';" if connect_self else ""
        return (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
            f"{connect} img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
            f"<title>{html.escape(title)}</title>\n"
            "<style>body{margin:0;padding:16px;background:#fbfbfd;}</style>\n</head>\n<body>\n"
            f"{self.to_html()}\n</body>\n</html>\n"
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the whole page to ``path`` atomically; returns the path."""
        from attnlab._io import atomic_write_text

        path = Path(path)
        if path.suffix.lower() not in (".html", ".htm"):
            raise ValueError(f"path must end in .html, got {str(path)!r}")
        atomic_write_text(path, self.to_page())
        umask = os.umask(0)
        os.umask(umask)
        path.chmod(0o666 & ~umask)  # a page to share, not a private temp file
        return path



def explore(model: Any, texts: str | Sequence[str], *,
            target: str | Sequence[str | None] | None = None,
            config: ExplorerConfig | None = None, truncate: bool = False,
            progress: bool = False, run: dict[str, Any] | None = None) -> Explorer:
    """Trace each text through ``model`` (a name, path or loaded model) into one Explorer.

    The model is loaded once (:func:`attnlab.models.load` keeps it per process).
    ``target``: for an encoder–decoder model, the target text of each text (one str for a
    single text, or one str or None per text; None: the model's own generation); each
    input is then a ``StackedTrace`` with its stack selector.
    ``progress``: progress bars on stderr while tracing and while the page's one pass over
    the weights runs (the page is built here, so that ``save`` only writes it).
    ``truncate``: cut a text (and a target) longer than the model accepts instead of
    refusing it; :meth:`Explorer.target_cuts` says which targets were cut, for the caller to
    announce. ``run``: how the model runs on each text (the tracer's ``chat``,
    ``generate``, ``temperature``, ``top_p``, ``seed``, ``dtype``, ``device``).
    """
    from attnlab.analysis.heads import traced_with_sums
    from attnlab.tracing.tracer import trace

    if isinstance(texts, str):
        texts = [texts]
    if not texts:
        raise ValueError("texts must hold at least one text, got none")
    targets = [target] if target is None or isinstance(target, str) else list(target)
    if len(targets) == 1 and len(texts) > 1 and targets[0] is None:
        targets = targets * len(texts)
    if len(targets) != len(texts) or not all(x is None or isinstance(x, str) for x in targets):
        raise ValueError(f"target must be one str or None per text ({len(texts)}), got "
                         f"{target!r}")
    if isinstance(model, (str, os.PathLike)):
        from attnlab.models import load

        model = load(model, progress=False)
    run = run or {}
    # each trace's head sums from its forward's own attention, where they can be taken
    traces = [traced_with_sums(trace, model, t, target=g, truncate=truncate,
                               progress=progress, **run)
              for t, g in zip(texts, targets)]
    ex = Explorer(traces, config=config)
    ex.payload(progress=progress)
    return ex
