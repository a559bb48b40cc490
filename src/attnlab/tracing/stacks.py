"""StackedTrace: the attention stacks of an encoder–decoder model, kept apart, in one object.

An encoder–decoder model attends three ways: the encoder's self-attention over the source
tokens, the decoder's (causal) self-attention over the target tokens, and the decoder's
cross-attention from the target tokens to the source tokens. A :class:`StackedTrace` holds
one :class:`~attnlab.tracing.attention.AttentionTrace` per stack, each with its own
layers, heads, tokens and score shapes, as an ordered mapping::

    "encoder"   rows and columns: source tokens
    "decoder"   rows and columns: target tokens
    "cross"     rows: target tokens (``tokens``), columns: source tokens (``key_tokens``)

in that order, whichever stacks the model has (a ``nn.TransformerDecoder`` alone has a
decoder and a cross stack). Each stack's ``stack`` attribute is its name. The labels agree
across stacks: the cross stack's rows are the decoder's tokens and its columns the
encoder's, checked when the trace is made.

A :class:`StackedTrace` is saved as one safetensors file (format ``attnlab.StackedTrace``,
:data:`~attnlab.tracing.attention.FORMAT_VERSION` 4 on): each stack's tensors under a
``<stack>/`` prefix, and its metadata, as an :class:`AttentionTrace` file holds it, under
``stacks.<stack>``. :func:`load_trace` reads either kind of file.

>>> import torch
>>> from attnlab.tracing.attention import AttentionTrace
>>> w = lambda lq, lk: torch.softmax(torch.randn(1, 2, lq, lk), -1)
>>> st = StackedTrace({
...     "encoder": AttentionTrace(list("abc"), weights=w(3, 3), stack="encoder"),
...     "decoder": AttentionTrace(["x", "y"], weights=w(2, 2), stack="decoder"),
...     "cross": AttentionTrace(["x", "y"], key_tokens=list("abc"), weights=w(2, 3),
...                             stack="cross")}, model="toy", text="abc", target="xy")
>>> st.names, st["cross"].seq_len, st["cross"].key_len
(('encoder', 'decoder', 'cross'), 2, 3)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from attnlab._errors import ArgumentTypeError, Error
from attnlab.tracing import trace_file
from attnlab.tracing._names import STACK_ORDER
from attnlab.tracing._resident import RESIDENT_BYTES
from attnlab.tracing.attention import AttentionTrace

__all__ = ["STACK_ORDER", "StackedTrace", "load_trace", "open_trace", "verify_across"]


def _labels_of_keys(t: AttentionTrace) -> list[str]:
    return t.key_tokens if t.key_tokens is not None else t.tokens


class StackedTrace(Mapping[str, AttentionTrace]):
    """The attention stacks of one input through an encoder–decoder model (see the module
    docstring): an ordered, read-only mapping name -> :class:`AttentionTrace`.

    Args:
        stacks: name -> trace, names among :data:`STACK_ORDER` (at least one); each
            trace's ``stack`` must be its name. Kept in the order of :data:`STACK_ORDER`.
        model: the model's name (default: the first stack's ``model``).
        text: the source text; ``target``: the target text (given or generated).
        meta: anything else (JSON-ready): e.g. ``{"target_from": "generated"}``.

    Raises ``TypeError`` / ``ValueError`` naming the stack when a trace is not an
    :class:`AttentionTrace`, is labelled with another stack, or when the labels disagree
    across stacks (cross rows must be the decoder's tokens, cross columns the encoder's).
    """

    def __init__(self, stacks: Mapping[str, AttentionTrace], *, model: str = "",
                 text: str | None = None, target: str | None = None,
                 meta: dict[str, Any] | None = None) -> None:
        if not isinstance(stacks, Mapping):
            raise TypeError(f"stacks must be a mapping of stack name -> AttentionTrace, got "
                            f"{type(stacks).__name__}")
        unknown = [n for n in stacks if n not in STACK_ORDER]
        if unknown or not stacks:
            raise ValueError(f"stacks must be named among {', '.join(STACK_ORDER)} (at least "
                             f"one), got {list(stacks) or 'none'}")
        for name, t in stacks.items():
            if not isinstance(t, AttentionTrace):
                raise TypeError(f"stacks[{name!r}] must be an AttentionTrace, got "
                                f"{type(t).__name__}")
            if t.stack != name:
                raise ValueError(f"stacks[{name!r}] is a trace of stack {t.stack!r}; make it "
                                 f"with AttentionTrace(..., stack={name!r})")
        self._stacks = {n: stacks[n] for n in STACK_ORDER if n in stacks}
        cross = self._stacks.get("cross")
        if cross is not None:
            for side, other, got in (("decoder", "rows", cross.tokens),
                                     ("encoder", "columns", _labels_of_keys(cross))):
                own = self._stacks.get(side)
                if own is not None and own.tokens != got:
                    raise ValueError(
                        f"the cross stack's {other} must be the {side} stack's tokens "
                        f"({own.seq_len}: {_short(own.tokens)}), got {len(got)}: {_short(got)}")
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict or None, got {type(meta).__name__}")
        for field, value in (("text", text), ("target", target)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{field} must be a str or None, got {type(value).__name__}")
        first = next(iter(self._stacks.values()))
        self.model = str(model) or first.model
        self.text = text
        self.target = target
        self.meta: dict[str, Any] = dict(meta or {})

    # -- the mapping ----------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        """The stacks held, in order (a subset of :data:`STACK_ORDER`)."""
        return tuple(self._stacks)

    def __getitem__(self, name: str) -> AttentionTrace:
        try:
            return self._stacks[name]
        except (KeyError, TypeError):
            raise KeyError(f"no stack {name!r} in this trace; it holds "
                           f"{', '.join(self._stacks)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._stacks)

    def __len__(self) -> int:
        return len(self._stacks)

    def __contains__(self, name: object) -> bool:
        return name in self._stacks

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {t.num_layers} layers x {t.num_heads} heads, "
                          f"{t.seq_len}x{t.key_len}" for n, t in self._stacks.items())
        return f"StackedTrace(model={self.model!r}, {parts})"

    # -- files ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write one ``.safetensors`` file atomically: each stack's tensors under a
        ``<stack>/`` prefix, its metadata (with the sha256 of each tensor) under
        ``stacks.<stack>``; read it back with :meth:`load` or :func:`load_trace` (the
        format: :mod:`attnlab.tracing.trace_file`)."""
        return trace_file.save_stacked(
            path, {name: t._file_fields() for name, t in self._stacks.items()},
            model=self.model, text=self.text, target=self.target, meta=self.meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StackedTrace:
        """Read a file written by :meth:`save`, checking everything as
        :meth:`AttentionTrace.load` does, stack by stack (errors name the stack and the
        field or tensor). A one-stack file is refused with a
        :class:`~attnlab.tracing.attention.TraceFormatError` saying to read it with
        :meth:`AttentionTrace.load` or :func:`load_trace`."""
        return trace_file.load_stacked(path, AttentionTrace, cls)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *,
             resident_bytes: int = RESIDENT_BYTES) -> StackedTrace:
        """A file written by :meth:`save` opened without reading it, as
        :meth:`AttentionTrace.open` opens a one-stack file: one memory mapping, each stack's
        tensors views of it, the header and every stack's manifest checked now;
        :meth:`verify` checks every stack's sha256 and values. Of what the stacks read, at
        most ``resident_bytes`` stay in the process's memory, all stacks together."""
        return trace_file.open_stacked(path, AttentionTrace, cls,
                                       resident_bytes=resident_bytes)

    def verify(self, *, share: tuple[int, int] = (0, 1)) -> StackedTrace:
        """For an opened trace: every check :meth:`load` makes, stack by stack (each
        tensor's sha256 and the values), reading the file once; raises
        :class:`~attnlab.tracing.attention.TraceFormatError` naming the stack and the
        tensor, else returns the trace. ``share``: as :meth:`AttentionTrace.verify`."""
        for t in self._stacks.values():
            t.verify(share=share)
        return self


def one_stack(trace: AttentionTrace | StackedTrace, what: str = "trace") -> AttentionTrace:
    """``trace`` where it is one stack's :class:`AttentionTrace` (what :func:`trace` gives
    for a decoder or an encoder), for code that reads one stack; an encoder–decoder
    model's :class:`StackedTrace` is refused, naming its stacks (``what``: how the message
    names the trace).

    >>> import torch
    >>> t = AttentionTrace(["a", "b"], weights=torch.full((1, 1, 2, 2), 0.5))
    >>> one_stack(t) is t
    True
    """
    if isinstance(trace, StackedTrace):
        raise Error(f"{what} must be one attention stack, got an encoder–decoder trace of "
                    f"{len(trace)} stacks ({', '.join(trace.names)})")
    if not isinstance(trace, AttentionTrace):
        raise ArgumentTypeError(f"{what} must be an AttentionTrace, got "
                                f"{type(trace).__name__}")
    return trace


def stacks_of(trace: AttentionTrace | StackedTrace, what: str = "trace") -> StackedTrace:
    """``trace`` where it is an encoder–decoder model's :class:`StackedTrace`, for code that
    reads its stacks; one stack's :class:`AttentionTrace` is refused (``what``: how the
    message names the trace)."""
    if isinstance(trace, StackedTrace):
        return trace
    raise Error(f"{what} must be an encoder–decoder model's stacked trace, got "
                f"{type(trace).__name__} (one stack)")


def load_trace(path: str | os.PathLike[str]) -> AttentionTrace | StackedTrace:
    """Read a trace file of either kind: an :class:`AttentionTrace` (one stack, any
    format version) or a :class:`StackedTrace` (several stacks), as the file says.

    >>> import tempfile, torch
    >>> t = AttentionTrace(["a", "b"], weights=torch.full((1, 1, 2, 2), 0.5))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     type(load_trace(t.save(Path(d) / "t.safetensors"))).__name__
    'AttentionTrace'
    """
    if trace_file.file_format(path) == trace_file.SEVERAL_STACKS:
        return StackedTrace.load(path)
    return AttentionTrace.load(path)


def open_trace(path: str | os.PathLike[str], *, verify: bool = True
               ) -> AttentionTrace | StackedTrace:
    """Read a trace file of either kind for reading on demand, with bounded memory where
    the file allows: a one-stack file of version 2 on and a file of several stacks are
    memory-mapped (:meth:`AttentionTrace.open`, :meth:`StackedTrace.open`; ``verify``:
    every tensor's sha256 and the values checked now, reading the file once, as
    :meth:`AttentionTrace.load` does; a version-5 file's layers are also checked when
    first read); a version-1 file (dense weights) is read whole and checked
    (:func:`load_trace`). The one way attnlab's commands read a saved trace (``diagnose
    --trace``, ``explore --trace``, ``serve --trace``).

    >>> import tempfile, torch
    >>> t = AttentionTrace(["a", "b"], q=torch.randn(1, 1, 2, 4), k=torch.randn(1, 1, 2, 4),
    ...                    lse=torch.zeros(1, 1, 2), causal=True)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     got = open_trace(t.save(Path(d) / "t.safetensors"))
    ...     getattr(got, "opened_from", None) is not None
    True
    """
    kind = trace_file.file_format(path)
    if kind == trace_file.SEVERAL_STACKS:
        stacked = StackedTrace.open(path)
        return stacked.verify() if verify else stacked
    if kind == trace_file.ONE_STACK:
        try:
            opened = AttentionTrace.open(path)
        except trace_file.TraceFormatError as exc:
            if "version-1" not in str(exc):
                raise
        else:
            return opened.verify() if verify else opened
    return load_trace(path)


def verify_across(trace: AttentionTrace | StackedTrace, group: Any = None
                  ) -> AttentionTrace | StackedTrace:
    """The checks of :func:`open_trace`'s ``verify`` (every tensor's sha256 and the values)
    on a trace opened without them (``open_trace(path, verify=False)``), made once by the
    processes of ``group`` together: a :class:`attnlab._dist.Group` (``attnlab._dist.join()``
    under ``torchrun``); None or a group of one process checks everything here.

    In a group of ``world`` processes each checks its share of the file
    (``verify(share=(rank, world))``: every ``world``-th layer of each tensor, so that no
    process reads and hashes the whole file as each did when every process verified it),
    then the processes tell each other what they found: if any found the file corrupt,
    every process raises :class:`TraceFormatError` (the one that found it with its own
    message, naming the tensor and the layer; the others saying which process did), and
    none is left waiting for the others. Otherwise each counts every layer as checked, so
    that reading a layer another process checked does not hash it again. A trace that was
    read whole (a version-1 file) was checked when it was read and is returned as it is.

    Returns ``trace``.
    """
    stacks = [trace[name] for name in trace] if isinstance(trace, StackedTrace) else [trace]
    if all(t.opened_from is None for t in stacks):
        return trace  # read whole by load_trace, every check made then
    if group is None or not getattr(group, "distributed", False):
        return trace.verify()
    import torch
    import torch.distributed as dist

    error: BaseException | None = None
    try:
        trace.verify(share=(group.rank, group.world))
    except Exception as exc:  # told to the others below, then raised: none waits forever
        error = exc
    failed = torch.zeros(group.world, dtype=torch.int32, device=group.device)
    failed[group.rank] = int(error is not None)
    dist.all_reduce(failed)
    if error is not None:
        raise error
    if bool(failed.any()):
        ranks = failed.nonzero()[:, 0].tolist()
        which = (f"process {ranks[0]}" if len(ranks) == 1
                 else f"processes {', '.join(str(r) for r in ranks)}")
        where = stacks[0].opened_from
        raise trace_file.TraceFormatError(
            f"{where}: {which} of the {group.world} that checked the file together "
            f"found it unreadable or corrupt (its error names the tensor); process "
            f"{group.rank} found its own share whole")
    for t in stacks:
        if t._layer_digests is not None:
            t._layer_digests.mark_all()
    return trace


def _short(labels: list[str], n: int = 6) -> str:
    shown = ", ".join(repr(x) for x in labels[:n])
    return f"[{shown}{', ...' if len(labels) > n else ''}]"
