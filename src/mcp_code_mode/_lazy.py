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


__all__ = ["LazyModule"]
