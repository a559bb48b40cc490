"""Command-line options built from a config dataclass: its fields, types, defaults and
checks stay in the dataclass; a command adds only each option's help text (and a flag
where the field's name is not the flag it wants).

* :func:`add_dataclass_options` adds one option per field named in ``help``: ``--field-name``
  (or ``flags[field]``), typed by the field's annotation, its default the field's (shown in
  the help), a ``bool`` field a switch (``--name`` when it defaults to False, ``--no-name``
  when True). ``given_only=True`` leaves every default None (the config's own factory fills
  what was not given) and makes a bool field ``--name/--no-name``.
* :func:`config_from_args` builds the config from the parsed options; a value the
  dataclass's own check refuses is a ``ValueError`` whose message names the flag.

The dataclass may live in a module too heavy to import for ``--help`` (it loads torch):
pass ``cls=None`` to :func:`add_dataclass_options` and the options keep what was typed;
:func:`config_from_args`, given the class at run time, converts each value by its field's
type and lets the field's default stand for one not given.

Depends on nothing.

>>> import argparse
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Cfg:
...     batch_size: int = 8
...     probes: bool = True
...     def __post_init__(self):
...         if self.batch_size < 1:
...             raise ValueError(f"batch_size must be a positive int, got {self.batch_size}")
>>> p = argparse.ArgumentParser()
>>> add_dataclass_options(p, Cfg, help={"batch_size": "texts a pass", "probes": "skip probes"})
>>> config_from_args(Cfg, p.parse_args(["--batch-size", "4", "--no-probes"]))
Cfg(batch_size=4, probes=False)
>>> config_from_args(Cfg, p.parse_args(["--batch-size", "0"]))
Traceback (most recent call last):
...
ValueError: --batch-size must be a positive int, got 0
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["add_dataclass_options", "config_from_args", "flag_of", "positive_int"]

C = TypeVar("C", bound="DataclassInstance")  # a dataclass (dataclasses.fields reads it)

_KINDS = {"int": int, "float": float, "str": str, "bool": bool}
_WORDS = {int: "an integer", float: "a number", str: "a text", bool: "true or false"}


def flag_of(field: str, flags: Mapping[str, str] | None = None) -> str:
    """The option of ``field``: ``flags[field]``, else ``--`` and its name with hyphens.

    >>> flag_of("max_tokens"), flag_of("num_layers", {"num_layers": "--layers"})
    ('--max-tokens', '--layers')
    """
    return (flags or {}).get(field) or "--" + field.replace("_", "-")


def _kind(cls: type, field: dataclasses.Field) -> type:
    """The field's type as one of int, float, str, bool (annotations may be strings)."""
    t = field.type
    if isinstance(t, str):
        t = _KINDS.get(t) or typing.get_type_hints(cls).get(field.name, str)
    if t not in _WORDS:
        raise TypeError(f"{cls.__name__}.{field.name}: an option needs an int, float, str or "
                        f"bool field, got {t!r}")
    return t


def add_dataclass_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                          cls: type | None, *, help: Mapping[str, str],
                          flags: Mapping[str, str] | None = None,
                          metavars: Mapping[str, str] | None = None,
                          required: tuple[str, ...] = (), given_only: bool = False) -> None:
    """One option per field named in ``help``, in ``help``'s order (see the module
    docstring). ``cls=None``: the class is not imported now; each option takes a value
    (a flag ``--no-...`` is a switch that sets the field False) kept as typed."""
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls is not None else {}
    for name, text in help.items():
        if cls is not None and name not in fields:
            raise TypeError(f"{cls.__name__} has no field {name!r}; fields: {', '.join(fields)}")
        flag = flag_of(name, flags)
        kw: dict[str, Any] = {"dest": name, "help": text, "required": name in required}
        f = fields.get(name)
        kind = _kind(cls, f) if cls is not None and f is not None else None
        default = None if f is None or f.default is dataclasses.MISSING else f.default
        if kind is bool and given_only:
            kw.update(action=argparse.BooleanOptionalAction, default=None)
        elif kind is bool:  # a switch away from the field's default
            kw.update(action="store_false" if default else "store_true", default=None)
            if not (flags and name in flags):
                flag = ("--no-" if default else "--") + name.replace("_", "-")
        elif kind is None and flag.startswith("--no-"):  # cls=None: a switch to False
            kw.update(action="store_false", default=None)
        else:
            kw.update(type=kind or str, default=None if given_only else default,
                      metavar=(metavars or {}).get(name) or _metavar(flag))
            if default is not None and not kw["required"] and "default" not in text:
                kw["help"] = f"{text} (default {default})"
        parser.add_argument(flag, **kw)


def positive_int(text: str) -> int:
    """An argparse ``type`` for an option that is not a config field: an integer >= 1.

    >>> positive_int("3")
    3
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _metavar(flag: str) -> str:
    """``--batch-size`` -> ``BATCH_SIZE``, as argparse names a value after its flag."""
    return flag.lstrip("-").replace("-", "_").upper()


def _convert(value: str, kind: type, flag: str) -> Any:
    """A typed-in value as the field's type; ``ValueError`` naming the flag otherwise."""
    if kind is str:
        return value
    try:
        if kind is bool:
            low = value.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(value)
            return low in ("1", "true", "yes", "on")
        return kind(value)
    except ValueError:
        raise ValueError(f"{flag}: expected {_WORDS[kind]}, got {value!r}") from None


def _with_flags(message: str, flags: Mapping[str, str]) -> str:
    """A dataclass's message that begins with a field's name (``"batch_size must be ..."``)
    with that name written as the field's flag; any other message unchanged."""
    m = re.match(r"\w+", message)
    if m and m.group() in flags:
        return flags[m.group()] + message[m.end():]
    return message


def config_from_args(cls: type[C], args: argparse.Namespace, *,
                     flags: Mapping[str, str] | None = None,
                     build: Callable[..., C] | None = None, **fixed: Any) -> C:
    """``build(**values)`` (default: ``cls``): each field of ``cls`` whose option was given
    (not None) in ``args``, converted by its type when kept as typed, then ``fixed``. A
    refusal (``ValueError``/``TypeError``) is re-raised with the flag named for the field."""
    options = {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not hasattr(args, f.name):
            continue
        flag = flag_of(f.name, flags)
        options[f.name] = flag
        v = getattr(args, f.name)
        if v is None:
            continue
        kind = _kind(cls, f)
        values[f.name] = _convert(v, kind, flag) if isinstance(v, str) else v
    values.update(fixed)
    try:
        return (build or cls)(**values)
    except (ValueError, TypeError) as exc:
        msg = _with_flags(str(exc), options)
        raise (ValueError(msg) if isinstance(exc, ValueError) else TypeError(msg)) from exc
