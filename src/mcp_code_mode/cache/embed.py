"""Embedders: text → unit vectors, behind a small protocol.

``StaticEmbedder`` is the real one: WordLlama's ``l2_supercat_256`` static token embeddings (256
dimensions), which ship inside the ``wordllama`` wheel, pooled by averaging and normalised. It needs
numpy, ``tokenizers`` and ``safetensors``, no torch and no network; a query takes well under a
millisecond. It was chosen by measurement on ``tests/cache/quality_set.py`` (see the README).
``HashingEmbedder`` is a deterministic fake for unit tests: hashed words and word pairs, no model.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import CodeModeError

Vectors = npt.NDArray[np.float32]


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
    """WordLlama ``l2_supercat_256``: average of static token embeddings, loaded lazily from the wheel."""

    name = "wordllama-l2_supercat_256"
    dim = 256
    _PACKAGE = "wordllama"
    _WEIGHTS = ("weights", "l2_supercat_256.safetensors")
    _TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
    _MAX_TOKENS = 2048

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: Vectors | None = None
        self._tokenizer: Any = None

    def load(self) -> None:
        """Read the weights and tokenizer (about 0.2 s); ``embed`` calls it on first use."""
        with self._lock:
            if self._table is not None:
                return
            try:
                from safetensors import safe_open
                from tokenizers import Tokenizer

                root = resources.files(self._PACKAGE)
                tokenizer = Tokenizer.from_str(root.joinpath(*self._TOKENIZER).read_text(encoding="utf-8"))
                with resources.as_file(root.joinpath(*self._WEIGHTS)) as path, safe_open(str(path), "np") as f:
                    table = np.ascontiguousarray(f.get_tensor("embedding.weight"), dtype=np.float32)
            except (ImportError, OSError, ValueError) as exc:
                raise EmbedderUnavailable(f"the embedding model {self.name} could not be loaded: {exc}") from exc
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
                out[row] = table[ids].mean(axis=0)
        return normalize_rows(out)


EMBEDDERS = {"wordllama": StaticEmbedder, "hashing": HashingEmbedder}
"""Embedders by the name the ``cache_embedder`` setting uses."""


def make_embedder(name: str) -> Embedder | None:
    """The embedder a setting names; ``none`` means full-text search alone."""
    if name == "none":
        return None
    return EMBEDDERS[name]()
