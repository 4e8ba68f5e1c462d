"""The engine's privacy parts, made from the config: which servers' results are tokenized, the secrets every
downstream server's entry holds, the sinks, the vault and the sealer (``privacy``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from ..config import CodeModeConfig, Settings, resolve_server
from ..database import Database
from ..errors import ConfigError
from ..privacy.core import Privacy
from ..privacy.seal import Sealer, load_key
from ..privacy.vault import MemoryVault

logger = logging.getLogger(__name__)

_BEARER = ("bearer ", "basic ", "token ")


def build_privacy(config: CodeModeConfig) -> Privacy:
    settings = config.settings
    tokenize = {name: (entry.pii or settings.pii) == "tokenize" for name, entry in config.servers.items()}
    sinks = {
        name: entry.policy.pii.kinds_for
        for name, entry in config.servers.items()
        if entry.policy is not None and entry.policy.pii is not None
    }
    key = settings.pii_key.get_secret_value() if settings.pii_key is not None else None
    sealer = Sealer(load_key(key)) if key else Sealer.ephemeral()
    return Privacy(
        config=config.privacy,
        tokenize=tokenize,
        sinks=sinks,
        secrets=secret_values(config),
        vault=MemoryVault(ttl=settings.pii_ttl, max_values=settings.pii_max_values),
        sealer=sealer,
        everywhere=settings.pii == "tokenize",
    )


def secret_values(config: CodeModeConfig) -> list[str]:
    """Every value of every downstream server's ``env`` and ``headers`` (expanded), the credential of an
    ``Authorization``-style header alone too, and this server's own keys. A value that names a file or folder
    under a directory that exists (``MEMORY_FILE_PATH``) is a path, not a secret."""
    found: list[str] = []
    for entry in config.servers.values():
        try:
            resolved = resolve_server(entry, config.env, config.settings.tool_timeout)
        except ConfigError:  # an unset variable: the server cannot start; its literal values still count
            values: Iterable[str] = [*entry.env.values(), *entry.headers.values()]
        else:
            values = [*resolved.env.values(), *resolved.headers.values()]
        for value in values:
            if _is_path(value):
                continue
            found.append(value)
            lowered = value.lower()
            found.extend(value[len(scheme) :].strip() for scheme in _BEARER if lowered.startswith(scheme))
    settings = config.settings
    found.extend(s.get_secret_value() for s in (settings.auth_token, settings.pii_key) if s is not None)
    if settings.database_url is not None:  # the URL and its password: never in what reaches the model
        from urllib.parse import urlsplit

        url = settings.database_url.get_secret_value()
        found.append(url)
        try:
            password = urlsplit(url).password
        except ValueError:
            password = None
        if password:
            found.append(password)
    return found


def _is_path(value: str) -> bool:
    if not value.startswith(("/", "./", "../", "~/")) or any(c.isspace() for c in value):
        return False
    try:
        return Path(value).expanduser().parent.is_dir()
    except (OSError, ValueError):
        return False


def persist_vault(privacy: Privacy, path: Path | Database, settings: Settings) -> None:
    """Keep the vault in the cache database (``CODE_MODE_PII_VAULT=database``): values sealed with
    ``CODE_MODE_PII_KEY``, shared by every process that uses this cache and this key."""
    from ..privacy.store import DatabaseVault

    privacy.vault.close()
    vault = DatabaseVault(path, privacy.sealer, ttl=settings.pii_ttl, max_values=settings.pii_max_values)
    privacy.vault = vault
    logger.info("privacy: the vault is in %s (key %s)", vault.path, privacy.sealer.key_id)


__all__ = ["build_privacy", "persist_vault", "secret_values"]
