"""Embedders: text → unit vectors, behind a small protocol.

``StaticEmbedder`` is the real one: WordLlama's ``l2_supercat_256`` static token embeddings (256
dimensions), which ship inside the ``wordllama`` wheel, pooled by averaging and normalised. It needs
numpy and ``tokenizers``, no torch and no network; a query takes well under a
millisecond. It was chosen by measurement on ``tests/cache/quality_set.py`` (see the README).
``HashingEmbedder`` is a deterministic fake for unit tests: hashed words and word pairs, no model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .._lazy import LazyModule
from ..errors import CodeModeError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
else:
    np = LazyModule("numpy")
    Vectors = Any  # float32 arrays; importable without numpy, for annotations (never evaluated here)


class EmbedderUnavailable(CodeModeError):
    """The embedding model could not be loaded (its package is missing or damaged)."""


class Embedder(Protocol):
    """Turns texts into L2-normalised ``float32`` vectors of ``dim`` dimensions."""

    name: str
    """Identifies the model and its version; stored next to each vector so that a new model re-embeds."""
    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """A ``(len(texts), dim)`` array; every row has norm 1 (or is all zeros for an empty text)."""
        ...


def normalize_rows(matrix: npt.NDArray[Any]) -> Vectors:
    out = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


class HashingEmbedder:
    """A deterministic stand-in: each word and word pair adds ±1 to a hashed dimension."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _index(self, token: str) -> tuple[int, float]:
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if value >> 63 else -1.0

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"[a-z0-9]+", text.lower())
            for token in [*words, *(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))]:
                index, sign = self._index(token)
                out[row, index] += sign
        return normalize_rows(out)


class StaticEmbedder:
    """WordLlama ``l2_supercat_256``: average of static token embeddings, loaded lazily from the wheel.

    The weights (32,000 × 256 half floats, 16 MB) are mapped from the wheel's file, not read: a text's
    rows are paged in as it is embedded, and the process keeps only the pages its texts touched (a few MB).
    The package itself is never imported (its ``__init__`` loads more than this needs); its files are
    found by the import system's spec.
    """

    name = "wordllama-l2_supercat_256"
    dim = 256
    _PACKAGE = "wordllama"
    _WEIGHTS = ("weights", "l2_supercat_256.safetensors")
    _TENSOR = "embedding.weight"
    _TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
    _MAX_TOKENS = 2048

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: npt.NDArray[Any] | None = None
        self._tokenizer: Any = None

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (the script store embeds what it stores only then: a search loads it)."""
        return self._table is not None

    def load(self) -> None:
        """Open the tokenizer and map the weights (about 0.1 s); ``embed`` calls it on first use."""
        with self._lock:
            if self._table is not None:
                return
            try:
                from tokenizers import Tokenizer

                root = _package_folder(self._PACKAGE)
                tokenizer = Tokenizer.from_file(str(root.joinpath(*self._TOKENIZER)))
                table = map_tensor(root.joinpath(*self._WEIGHTS), self._TENSOR)
            except (ImportError, OSError, ValueError) as exc:
                raise EmbedderUnavailable(f"the embedding model {self.name} could not be loaded: {exc}") from exc
            if table.ndim != 2 or table.shape[1] != self.dim:
                raise EmbedderUnavailable(
                    f"the embedding model {self.name} has the shape {table.shape}, not (n, {self.dim})"
                )
            tokenizer.no_padding()
            tokenizer.enable_truncation(self._MAX_TOKENS)
            self._tokenizer, self._table = tokenizer, table

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.load()
        assert self._table is not None
        table = self._table
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        for row, encoding in enumerate(encodings):
            ids = np.clip(np.asarray(encoding.ids, dtype=np.int64), 0, table.shape[0] - 1)
            if ids.size:
                out[row] = table[ids].astype(np.float32).mean(axis=0)
        return normalize_rows(out)


_SAFETENSORS_DTYPES = {"F16": "float16", "F32": "float32"}
_MAX_HEADER = 1 << 20


def _package_folder(package: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise OSError(f"the package {package!r} is not installed")
    return Path(locations[0])


def map_tensor(path: Path, name: str) -> npt.NDArray[Any]:
    """One tensor of a ``.safetensors`` file as a read-only memory map (F16 or F32), its header checked
    against the file's size (an 8-byte little-endian length, a JSON header, then the raw data)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if not 0 < length <= min(_MAX_HEADER, size - 8):
            raise ValueError(f"{path.name}: not a safetensors file")
        header = json.loads(f.read(length))
    entry = header.get(name) if isinstance(header, dict) else None
    if not isinstance(entry, dict):
        raise ValueError(f"{path.name} has no tensor {name!r}")
    dtype = _SAFETENSORS_DTYPES.get(str(entry.get("dtype")))  # a numpy dtype's name
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if dtype is None or not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2:
        raise ValueError(f"{path.name}: tensor {name!r} is not F16/F32 with a shape and offsets")
    dims = [int(d) for d in shape]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
    start, end = int(offsets[0]), int(offsets[1])  # pyright: ignore[reportUnknownArgumentType]
    expected = int(np.prod(dims)) * np.dtype(dtype).itemsize
    if start < 0 or end - start != expected or 8 + length + end > size:
        raise ValueError(f"{path.name}: tensor {name!r} does not fit the file")
    return np.memmap(path, dtype=dtype, mode="r", offset=8 + length + start, shape=tuple(dims))


EMBEDDERS = {"wordllama": StaticEmbedder, "hashing": HashingEmbedder}
"""Embedders by the name the ``cache_embedder`` setting uses."""


def make_embedder(name: str) -> Embedder | None:
    """The embedder a setting names; ``none`` means full-text search alone."""
    if name == "none":
        return None
    return EMBEDDERS[name]()
