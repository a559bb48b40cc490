"""What a streamed capture (``capture(model, out=PATH)``) keeps while the model runs: where
its file is written and the little it must remember; each layer's tensors are written to the
file as they arrive and dropped (:class:`LayerStream`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._errors import check_int
from attnlab.tracing.adapters import AttentionRecord
from attnlab.tracing.budget import first_int
from attnlab.tracing.model_parts import output_projection
from attnlab.tracing.trace_stream import TraceStream

__all__ = ["LayerStream", "stream_layers"]


class LayerStream:
    """What a streamed capture keeps: where its file is written (a
    :class:`~attnlab.tracing.trace_stream.TraceStream`) and the little it must remember (the
    first call's shape, the layer names); each record's tensors are written and dropped.

    As in memory (:func:`_one_stack`, :func:`_stack`), only the calls with the (H, Lq, Lk)
    of the first one are layers (the others are named in ``meta["skipped"]``), every tensor
    is float32 and a layer with fewer key/value heads has each repeated for the query heads
    it serves; ``out_proj`` is each layer's own output projection. What a file laid out
    from the first layer cannot hold (another stack, a layer of other shapes, more layers)
    is refused, naming it.
    """

    def __init__(self, root: nn.Module, writer: TraceStream, batch_index: int) -> None:
        check_int("batch_index", batch_index, minimum=None)
        self.root = root
        self.writer = writer
        self.bi = batch_index
        self.batch = 0
        self.dims: tuple[int, int, int] | None = None
        self.source = ""
        self.stack = ""
        self.kv_heads = 0
        self.out_proj = False
        self.causal = True
        self.names: list[str] = []
        self.skipped: list[str] = []
        self.repeat: str | None = None  # why the calls are not one forward pass

    def add(self, r: AttentionRecord, stack: str) -> None:
        if self.dims is None:
            b = r.batch
            if not -b <= self.bi < b:
                raise IndexError(f"batch_index must be in [0, {b}), got {self.bi}")
            self.bi, self.batch, self.dims = self.bi % b, b, r.dims
            self.source, self.stack = r.source, stack
            self.kv_heads = r.k.shape[1] if r.k is not None else 0
        if stack != self.stack:
            raise ValueError(
                f"{r.name} is {stack} attention, after {self.stack} attention: a streamed "
                "trace holds one attention stack; trace this model without out= (in "
                "memory) and save its StackedTrace")
        if r.dims != self.dims:
            if r.name in self.names and self.repeat is None:
                self.repeat = (
                    f"{r.name} was called again with {r.dims[1]} queries over {r.dims[2]} "
                    f"keys after its call of {self.dims[1]} over {self.dims[2]} (a decoding "
                    "step through a KV cache, or another input): a streamed capture holds "
                    "one forward pass; capture a generation in memory (no out=), or give "
                    "attnlab.trace(model, text, generate=N, out=PATH), which streams it")
            self.skipped.append(r.name)
            return
        layer = len(self.names)
        names = ("weights", "context") if r.weights is not None else (
            "q", "k", "v", "lse", "context")
        parts: dict[str, Tensor] = {}
        for name in names:
            x = getattr(r, name)
            if x is None:
                continue
            part = x[self.bi]
            if name in ("k", "v") and part.shape[0] != self.kv_heads:
                if part.shape[0] > self.kv_heads or self.kv_heads % part.shape[0]:
                    raise ValueError(
                        f"{r.name} (layer {layer}) has {part.shape[0]} key/value heads, the "
                        f"first layer {self.kv_heads}: a streamed trace needs every layer's "
                        "count to divide the first's (trace it in memory instead)")
                part = part.repeat_interleave(self.kv_heads // part.shape[0], dim=0)
            parts[name] = part.to(torch.float32)
        if "v" in parts:
            heads, dv = self.dims[0], parts["v"].shape[-1]
            try:
                w = output_projection(self.root.get_submodule(r.name), heads, dv)
            except AttributeError:
                w = None
            if layer == 0:
                self.out_proj = w is not None
            if self.out_proj:
                if w is None:
                    raise ValueError(
                        f"{r.name} (layer {layer}) has no output projection attnlab finds, "
                        "the first layer has one: a streamed trace needs every layer alike "
                        "(trace it in memory instead)")
                parts["out_proj"] = w
        shape = r.shapes[self.bi]
        self.writer.add(parts, shape)
        self.causal = self.causal and shape.causal
        self.names.append(r.name)


def stream_layers(module: nn.Module, matched: int) -> int:
    """How many layers a streamed capture of ``module`` lays its file out for: its config's
    number of layers, else the number of attention modules it holds (``matched``)."""
    cfg = getattr(module, "config", None)
    n = None if cfg is None else first_int(
        cfg, "num_hidden_layers", "num_layers", "n_layer", "n_layers")
    return n or matched
