"""The environment a downstream server's child process gets: an allow-list of the host's, plus its own ``env``."""

from __future__ import annotations

import os
from collections.abc import Mapping

# Enough for npx, node, python and uvx to find themselves, their caches and certificates; nothing secret.
INHERITED_ENV_VARS = (
    "HOME",
    "LOGNAME",
    "USER",
    "PATH",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
)


def child_environment(own: Mapping[str, str], host: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed host variables, overlaid by the entry's own ``env``."""
    source = os.environ if host is None else host
    inherited = {
        key: value
        for key in INHERITED_ENV_VARS
        if (value := source.get(key)) is not None and not value.startswith("()")  # no exported shell functions
    }
    return inherited | dict(own)
