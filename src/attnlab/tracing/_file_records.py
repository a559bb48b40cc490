"""The records of a trace file (:mod:`attnlab.tracing.trace_file`): the JSON documents its
header holds, and the constructor's arguments a file is written from and read into.

The header's documents, as the format's versions allow them (a field that an older
version lacks is ``NotRequired``; what the writers write today is every field):

* :class:`OneTraceHeader`: the attnlab metadata of a one-trace file, one
  :class:`TraceMetadata` with its ``format`` and ``format_version``;
* :class:`StackedHeader`: that of a file of several stacks, one :class:`TraceMetadata`
  per stack;
* :class:`ShapeEntry`: one layer's score shape; :class:`ManifestEntry`: one tensor;
* :class:`TensorPlace`: one tensor in the safetensors header around them.

The trace's side, the constructor's keyword arguments: :class:`TraceLabels` (what a file
holds of a trace besides its tensors and score shapes), :class:`TraceFields` (all of it,
which the writers take) and :class:`TraceArgs` (what each version's reader gives the
constructor).

The tensor fields of a score shape, as keys of a :class:`ShapeEntry`, are those of
:class:`~attnlab.core.scores.ScoreShape`:

>>> from attnlab.core.scores import TENSOR_FIELDS
>>> SHAPE_TENSORS == TENSOR_FIELDS
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args

from torch import Tensor

from attnlab.core.scores import ScoreShape

if TYPE_CHECKING:  # Python 3.11's; the annotations below are never evaluated at run time
    from typing import NotRequired

__all__ = ["SHAPE_TENSORS", "ManifestEntry", "OneTraceHeader", "ShapeEntry", "ShapeTensor",
           "StackedHeader", "TensorPlace", "TraceArgs", "TraceFields", "TraceLabels",
           "TraceMetadata", "TraceTensors"]

#: The name of a score shape's tensor field (:data:`attnlab.core.scores.TENSOR_FIELDS`).
ShapeTensor = Literal["key_mask", "alibi_slopes", "bias", "sinks"]
#: The tensor fields of a score shape, in the order a :class:`ShapeEntry` lists them.
SHAPE_TENSORS: tuple[ShapeTensor, ...] = get_args(ShapeTensor)


class ShapeEntry(TypedDict):
    """One layer's :class:`~attnlab.core.scores.ScoreShape` in a trace file's ``shapes``
    (version 2 on): its numbers inline, each of its tensors by its name in the file (a
    tensor equal to an earlier layer's named once), None for a tensor it does not have."""

    scale: float
    causal: bool
    window: NotRequired[int | None]
    softcap: NotRequired[float | None]
    key_mask: NotRequired[str | None]
    alibi_slopes: NotRequired[str | None]
    bias: NotRequired[str | None]
    #: Version 3 on.
    sinks: NotRequired[str | None]


class ManifestEntry(TypedDict):
    """One tensor of a trace file, as its metadata's ``tensors`` lists it (version 2 on)."""

    #: The safetensors dtype (``"F32"``, ``"BF16"``, ...).
    dtype: str
    shape: list[int]
    #: Of the tensor's bytes as they stand in the file (checked when they are read).
    sha256: str
    #: Version 5, a tensor stacked by layer: the sha256 of each layer's chunk.
    layer_sha256: NotRequired[list[str]]


class TraceMetadata(TypedDict):
    """One trace's metadata in a trace file: the labels and descriptions of an
    :class:`~attnlab.tracing.attention.AttentionTrace`, its score shapes and the manifest
    of its tensors (each checked by ``trace_header._check_fields`` before it is read)."""

    tokens: list[str]
    key_tokens: NotRequired[list[str] | None]
    token_ids: NotRequired[list[int] | None]
    model: NotRequired[str]
    causal: NotRequired[bool]
    text: NotRequired[str | None]
    #: The trace's own ``meta``: whatever JSON its maker recorded.
    meta: NotRequired[dict[str, Any] | None]
    #: Version 1 only: the one scale of every layer.
    scale: NotRequired[float | None]
    #: Version 4 on: one of :data:`~attnlab.tracing._names.STACKS`.
    stack: NotRequired[str]
    #: Version 2 on: the pieces of each merged token (None: no merge).
    groups: NotRequired[list[list[int]] | None]
    #: Version 2 on: one entry per layer.
    shapes: NotRequired[list[ShapeEntry]]
    #: Version 2 on: tensor name -> its dtype, shape and sha256.
    tensors: NotRequired[dict[str, ManifestEntry]]


class OneTraceHeader(TraceMetadata):
    """The attnlab metadata of a one-trace file (``format``
    :data:`~attnlab.tracing.trace_header.ONE_STACK`, versions 1 to 5)."""

    format: str
    format_version: int


class StackedHeader(TypedDict):
    """The attnlab metadata of a file of several stacks (``format``
    :data:`~attnlab.tracing.trace_header.SEVERAL_STACKS`, version 4 on), each stack's
    tensors under a ``<stack>/`` prefix."""

    format: str
    format_version: int
    model: str
    text: NotRequired[str | None]
    #: The decoder's text.
    target: NotRequired[str | None]
    #: The stacked trace's own ``meta``: whatever JSON its maker recorded.
    meta: NotRequired[dict[str, Any] | None]
    #: Stack name (encoder, decoder, cross) -> that stack's metadata.
    stacks: dict[str, TraceMetadata]


class TensorPlace(TypedDict):
    """One tensor in a safetensors header (beside ``"__metadata__"``, which holds the
    attnlab metadata as JSON text under ``"attnlab"``)."""

    #: The safetensors dtype, as in :class:`ManifestEntry`.
    dtype: str
    shape: list[int]
    #: [start, end) of its bytes, counted from the start of the data.
    data_offsets: list[int]


class _Described(TypedDict):
    """The labels and descriptions of an :class:`~attnlab.tracing.attention.AttentionTrace`
    (the constructor's arguments of these names), as a trace file holds them."""

    stack: str
    tokens: list[str]
    key_tokens: list[str] | None
    token_ids: list[int] | None
    model: str
    text: str | None
    #: The trace's own ``meta``, any JSON-ready values.
    meta: dict[str, Any]
    groups: list[list[int]] | None


class TraceTensors(TypedDict):
    """The tensors of an :class:`~attnlab.tracing.attention.AttentionTrace` (each one it
    does not hold None), stacked by layer, as the constructor takes them."""

    weights: Tensor | None
    q: Tensor | None
    k: Tensor | None
    v: Tensor | None
    lse: Tensor | None
    context: Tensor | None
    out_proj: Tensor | None


class TraceLabels(_Described):
    """What a trace file holds of an :class:`~attnlab.tracing.attention.AttentionTrace`
    besides its tensors and score shapes (what
    :meth:`~attnlab.tracing.trace_stream.TraceStream.write_header` takes)."""

    causal: bool


class TraceFields(TraceLabels, TraceTensors):
    """Everything a trace file holds of an :class:`~attnlab.tracing.attention.AttentionTrace`
    (what ``AttentionTrace._file_fields()`` gives the writers): the constructor's arguments
    of these names."""

    shapes: Sequence[ScoreShape]


class TraceArgs(_Described, TraceTensors):
    """The constructor's keyword arguments a format version's reader gives (what
    :class:`~attnlab.tracing.attention.AttentionTrace` is built from)."""

    #: None when the score shapes say it.
    causal: bool | None
    #: None for a file without score shapes (version 1).
    shapes: Sequence[ScoreShape] | None
    #: Version 1 only: the one scale of every layer.
    scale: NotRequired[float | None]
