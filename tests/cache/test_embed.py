"""Embedders: the deterministic fake, and the real static model loaded from its wheel, offline."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mcp_code_mode.cache.embed import HashingEmbedder, StaticEmbedder, make_embedder, map_tensor


def test_the_hashing_fake_is_deterministic_and_normalised() -> None:
    a, b = HashingEmbedder(), HashingEmbedder()
    texts = ["parse a csv file", "parse a csv file", "", "send an email"]
    va, vb = a.embed(texts), b.embed(texts)
    assert np.array_equal(va, vb)
    assert va.shape == (4, 64) and va.dtype == np.float32
    assert np.allclose(np.linalg.norm(va[[0, 1, 3]], axis=1), 1.0) and not va[2].any()
    assert float(va[0] @ va[1]) == pytest.approx(1.0)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to open a connection fails the test: the model must load from the wheel alone."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield


def test_the_static_model_loads_offline_and_places_related_tasks_close(no_network: None) -> None:
    model = StaticEmbedder()
    vectors = model.embed(
        ["sum a column of a CSV file", "add up the amounts in a spreadsheet export", "send a message to slack", ""]
    )
    assert vectors.shape == (4, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-5) and not vectors[3].any()
    related, unrelated = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    assert related > unrelated + 0.1
    assert np.array_equal(model.embed(["sum a column of a CSV file"])[0], vectors[0])


def test_embedders_are_chosen_by_the_setting() -> None:
    assert isinstance(make_embedder("wordllama"), StaticEmbedder)
    assert isinstance(make_embedder("hashing"), HashingEmbedder)
    assert make_embedder("none") is None


def test_the_model_is_mapped_not_read_and_its_package_is_not_imported() -> None:
    """The weights stay a read-only map of the wheel's file (pages in as texts use them); loading never runs the
    ``wordllama`` package's own ``__init__``, which would pull in far more than the embedder needs."""
    script = (
        "import sys, numpy as np\n"
        "from mcp_code_mode.cache.embed import StaticEmbedder\n"
        "m = StaticEmbedder(); m.embed(['read a file'])\n"
        "assert isinstance(m._table, np.memmap) and not m._table.flags.writeable\n"
        "print('wordllama' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def _safetensors(path: Path, header: dict[str, object], data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    return path


def test_a_tensor_is_read_where_its_header_says(tmp_path: Path) -> None:
    rows = np.arange(12, dtype=np.float16).reshape(3, 4)
    path = _safetensors(
        tmp_path / "ok.safetensors", {"t": {"dtype": "F16", "shape": [3, 4], "data_offsets": [0, 24]}}, rows.tobytes()
    )
    assert np.array_equal(map_tensor(path, "t"), rows)


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        ({"t": {"dtype": "F16", "shape": [3, 4], "data_offsets": [0, 24]}}, b"\0" * 10, "does not fit"),
        ({"t": {"dtype": "F16", "shape": [3, 4], "data_offsets": [0, 20]}}, b"\0" * 24, "does not fit"),
        ({"t": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]}}, b"\0" * 24, "not F16/F32"),
        ({"u": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}}, b"\0" * 2, "no tensor"),
    ],
)
def test_a_damaged_weights_file_is_refused(
    tmp_path: Path, header: dict[str, object], data: bytes, message: str
) -> None:
    path = _safetensors(tmp_path / "bad.safetensors", header, data)
    with pytest.raises(ValueError, match=message):
        map_tensor(path, "t")


def test_a_file_that_is_not_safetensors_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.safetensors"
    path.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="not a safetensors file"):
        map_tensor(path, "t")
