"""The experiments' results :func:`attnlab.course.run` keeps for a Python session: by
their exact arguments (:func:`run_key`), each as an independent pickled copy (figures
included: :func:`pickled`), with the random generators' state before and after its run.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import pickle
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = ["KEPT", "Kept", "generators", "kept_call", "pickled", "run_key", "set_generators"]


class Kept(NamedTuple):
    """One experiment's result as :func:`attnlab.course.run` keeps it: pickled as the run
    returned it (figure and all, before anything drew or translated it), and the random
    generators' state (:func:`generators`) before and after the run."""

    result: bytes
    before: tuple[bytes, ...]
    after: tuple[bytes, ...]


#: The experiments :func:`attnlab.course.run` ran in this Python session, by their arguments
#: (:func:`run_key`). A variable of this module, not of the notebook: IPython's
#: ``%reset -f`` clears the notebook's names and leaves it, so a notebook run again in the
#: same kernel, or in the other language, gets each result at once.
KEPT: dict[tuple[Any, ...], Kept] = {}

#: The types whose values :func:`run_key` compares as they are (with their type: ``1``,
#: ``1.0`` and ``True`` are three keys).
_PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes)


def _all(parts: list[Any]) -> tuple[Any, ...] | None:
    """``parts`` as a tuple, or None if one of them is None (not a plain value)."""
    return None if any(p is None for p in parts) else tuple(parts)


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` as a part of a key: its type and its value, recursively through tuples,
    lists, dicts, sets, dataclasses (every field, as they are now) and enums; a float by its
    ``repr`` (``-0.0`` and ``0.0`` differ, ``nan`` equals itself). None for anything else
    (a function, a tensor), or for a value nested more than 16 deep."""
    kind = type(value)
    if depth > 16:
        return None
    if kind in _PLAIN_TYPES:
        return (kind, repr(value) if kind in (float, complex) else value)
    if kind in (tuple, list, set, frozenset):
        parts = _all([_plain(v, depth + 1) for v in value])
        if parts is not None and kind in (set, frozenset):
            parts = tuple(sorted(parts, key=repr))
        return None if parts is None else (kind, parts)
    if kind is dict:
        pairs = _all([_all([_plain(k, depth + 1), _plain(v, depth + 1)])
                      for k, v in value.items()])
        return None if pairs is None else (kind, tuple(sorted(pairs, key=repr)))
    if isinstance(value, enum.Enum):
        return (kind, value.name)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = _all([_all([f.name, _plain(getattr(value, f.name), depth + 1)])
                       for f in dataclasses.fields(value)])
        return None if fields is None else (kind, fields)
    if kind.__module__ == "torch" and kind.__name__ in ("dtype", "device"):
        return (kind, str(value))
    return None


def run_key(name: str, seed: Any, kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What :func:`attnlab.course.run` keeps a result under: the experiment's name, the
    seed and every keyword argument, by value and type (:func:`_plain`); None when one of
    them is not a plain value (a function, such as a wrong variant, or a tensor: the run is
    not kept).

    >>> run_key("masking", 0, {"n": 4}) == run_key("masking", 0, {"n": 4})
    True
    >>> run_key("masking", 0, {"n": 4}) == run_key("masking", 0, {"n": 4.0})
    False
    >>> run_key("masking", 0, {"mask_fn": print}) is None
    True
    >>> run_key("masking", 0, {"sizes": [1, (2, print)]}) is None
    True
    """
    return _all([_plain(name), _plain(seed),
                 _all([_all([k, _plain(v)]) for k, v in sorted(kwargs.items())])])


def generators() -> tuple[bytes, ...]:
    """The state of the random generators a notebook's cells draw from: torch's global
    (CPU) generator, Python's :mod:`random` and numpy's global one."""
    import random

    import numpy as np
    import torch

    return (torch.get_rng_state().numpy().tobytes(), pickle.dumps(random.getstate()),
            pickle.dumps(np.random.get_state()))


def set_generators(state: tuple[bytes, ...]) -> None:
    """Set the random generators to ``state`` (:func:`generators`)."""
    import random

    import numpy as np
    import torch

    torch_state, py_state, np_state = state
    torch.set_rng_state(torch.frombuffer(bytearray(torch_state), dtype=torch.uint8))
    random.setstate(pickle.loads(py_state))
    np.random.set_state(pickle.loads(np_state))


def _transform_state(node: Any, state: dict[str, Any]) -> None:
    """Set the pickled ``state`` of a matplotlib transform ``node`` (its class's
    ``__setstate__``), then key its parents by their own ``id``, as matplotlib keys a live
    transform's (``TransformNode.set_children``).

    matplotlib pickles the parents under the ``id`` of the original ones: in a copy those
    keys name objects of the original, and a new parent that happens to get one of their
    addresses (once the original is freed) replaces another parent's entry, which then
    misses the transform's changes and draws with a stale one (points of a copied figure
    off their place). Keyed by the copy's own parents, no live parent shares a key.
    """
    node.__setstate__(state)
    parents = [ref() for ref in node._parents.values()]
    keyed: dict[int, weakref.ReferenceType[Any]] = {}
    node._parents = keyed
    for parent in parents:
        if parent is not None:
            keyed[id(parent)] = weakref.ref(parent, _forget(keyed, id(parent)))


def _forget(parents: dict[int, Any], key: int) -> Callable[[Any], None]:
    """The callback that drops a transform's parent ``key`` once the parent is gone."""
    def forget(_ref: Any) -> None:
        parents.pop(key, None)

    return forget


class _Pickler(pickle.Pickler):
    """A pickler whose matplotlib transforms unpickle with their parents keyed by the
    copy's own objects (:func:`_transform_state`)."""

    def reducer_override(self, obj: Any) -> Any:
        node = getattr(sys.modules.get("matplotlib.transforms"), "TransformNode", None)
        if node is None or not isinstance(obj, node):
            return NotImplemented
        reduced = obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return (*reduced, *(None,) * (5 - len(reduced)), _transform_state)


def pickled(result: Any) -> bytes:
    """``result`` pickled so that ``pickle.loads`` gives an independent copy of it, its
    figure drawing as the original does (:class:`_Pickler`)."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(result)
    return buf.getvalue()


def kept_call(store: dict[tuple[Any, ...], Kept], key: tuple[Any, ...] | None,
              compute: Callable[[], Any], *, again: bool = False) -> Any:
    """``compute()``'s result, kept in ``store`` under ``key`` for the rest of the session:
    a later call with the same key gets an independent copy (:func:`pickled`) at once.

    The random generators (:func:`generators`) are left as ``compute`` would leave them: a
    result whose computation left them as it found them is reused whatever their state; one
    that drew from them is reused only from the state its computation started from, and the
    copy leaves the state it left. ``key=None`` (an argument that is not a plain value,
    :func:`run_key`) computes every time, as does a result that cannot be copied;
    ``again=True`` computes anew and keeps the new result.
    """
    before = generators()
    kept = None if key is None or again else store.get(key)
    if kept is not None and (kept.after == kept.before or kept.before == before):
        if kept.after != kept.before:
            set_generators(kept.after)
        return pickle.loads(kept.result)
    result = compute()
    if key is not None:
        try:
            copy = pickled(result)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError, RecursionError):
            store.pop(key, None)  # a result that cannot be copied is computed every time
        else:
            store[key] = Kept(copy, before, generators())
    return result
