"""A package's public names imported on first use (PEP 562), for its ``__init__``; a
module imported on first use, for a module whose commonest run never touches it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_module", "lazy_names"]


def lazy_names(package: str, names: dict[str, str], namespace: dict[str, Any]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``, whose public
    ``names`` map to the (relative) module that defines each; a name is imported on first
    use and kept in ``namespace`` (the package's ``globals()``), so later lookups are plain."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__


class _Lazy:
    """Stands in a module's globals for ``module`` until an attribute is first read: then
    imports it and puts it in its place (``namespace[alias]``), so later lookups are
    plain."""

    __slots__ = ("_module", "_namespace", "_alias")

    def __init__(self, module: str, namespace: dict[str, Any], alias: str) -> None:
        self._module, self._namespace, self._alias = module, namespace, alias

    def __getattr__(self, name: str) -> Any:
        module = importlib.import_module(self._module)
        self._namespace[self._alias] = module
        return getattr(module, name)


def lazy_module(module: str, namespace: dict[str, Any], alias: str) -> Any:
    """``alias = lazy_module("numpy", globals(), "np")``: ``import numpy as np``, done
    when the module first reads an attribute of ``np`` (``np.zeros``), not when it is
    imported. Only for code that reads it so (numba's compiled functions take globals as
    they are at compile time: their modules import numpy as usual); names from it
    (``from numpy import ...``) and module-level uses import it at once."""
    return _Lazy(module, namespace, alias)
