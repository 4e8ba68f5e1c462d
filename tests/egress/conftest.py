"""Test hosts in network namespaces (``netns.py``), one per session each: ``netns_host`` (the one tests open
with ``CODE_MODE_NETWORK_ALLOW_PRIVATE``) and ``netns_other_host`` (another in the same private range, never
opened). Skipped only where they cannot exist at all: not Linux, not root, no ``ip``."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from . import netns
from .netns import NetnsHost


def _host(tmp_path_factory: pytest.TempPathFactory, label: str) -> Generator[NetnsHost]:
    why = netns.unavailable()
    if why is not None:
        pytest.skip(f"no test hosts in network namespaces: {why}")
    with netns.test_host(workdir=tmp_path_factory.mktemp(label)) as host:
        yield host


@pytest.fixture(scope="session")
def netns_host(tmp_path_factory: pytest.TempPathFactory) -> Generator[NetnsHost]:
    """A test host: ``address`` (10.233.X.2), ``ports`` (8080, 8081), ``url(path, port)``, ``requests()``."""
    yield from _host(tmp_path_factory, "netns-host")


@pytest.fixture(scope="session")
def netns_other_host(tmp_path_factory: pytest.TempPathFactory) -> Generator[NetnsHost]:
    """A second test host in the same private range, for "only the opened one is reachable"."""
    yield from _host(tmp_path_factory, "netns-other-host")
