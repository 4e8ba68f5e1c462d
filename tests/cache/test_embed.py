"""Embedders: the deterministic fake, and the real static model loaded from its wheel, offline."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest

from mcp_code_mode.cache.embed import HashingEmbedder, StaticEmbedder, make_embedder


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
