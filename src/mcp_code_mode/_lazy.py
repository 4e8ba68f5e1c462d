"""``LazyModule``: a module imported on first use, for the heavy ones that serving may never need.

numpy is only needed to search (the embedder, the vector index, the tool ranker): importing it when the server
starts would cost every server its start-up time and memory (about 16 MiB) whether or not anyone searches.
Modules that use it write::

    if TYPE_CHECKING:
        import numpy as np
    else:
        np = LazyModule("numpy")

and keep every use of ``np`` inside functions (a type alias lives under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it; each attribute is then kept here."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        module: ModuleType = importlib.import_module(self._name)
        value = getattr(module, attribute)
        setattr(self, attribute, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` (PEP 562) that imports each of ``names`` (name → the submodule that
    defines it, relative to ``package``) on first use and keeps it in the package: for the names whose
    submodule imports the MCP SDK, which a light importer of the package need not wait for."""

    def getattr_(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return getattr_


__all__ = ["LazyModule", "lazy_names"]
