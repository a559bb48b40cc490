"""Packages whose public names are imported on first use (PEP 562).

``attnlab`` and ``attnlab.train`` list their public API as ``name -> module``; nothing is
imported until a name is used, so ``import attnlab``, ``attnlab --help`` and
``attnlab COMMAND --help`` do not load torch. A public subpackage or module is imported on
first use too (``import attnlab; attnlab.nn.GPT``), as it would be by ``import attnlab.nn``.

>>> import types
>>> pkg = types.ModuleType("pkg")
>>> pkg.__getattr__, pkg.__dir__ = lazy_exports(vars(pkg), {"sqrt": "math", "json": "json"})
>>> pkg.sqrt(4.0), pkg.json.__name__, "sqrt" in vars(pkg)
(2.0, 'json', True)
>>> pkg.nothing
Traceback (most recent call last):
...
AttributeError: module 'pkg' has no attribute 'nothing'
>>> import attnlab
>>> attnlab.analysis.__name__
'attnlab.analysis'
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(namespace: dict[str, Any], names: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package whose public ``names``
    (name -> the module that defines it; a name equal to its module's last part is the
    module itself) are imported on first use, then kept in ``namespace``."""
    package = namespace.get("__name__", "?")

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None and not name.startswith("_") and "." not in name and \
                namespace.get("__path__") is not None and \
                importlib.util.find_spec(f"{package}.{name}") is not None:
            where = f"{package}.{name}"  # a public subpackage or module, not yet imported
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(where)
        value = module if where.rsplit(".", 1)[-1] == name else getattr(module, name)
        namespace[name] = value  # once: later uses are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
