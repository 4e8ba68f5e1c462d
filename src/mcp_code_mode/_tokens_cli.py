"""``mcp-code-mode tokens``: entries of the tokens file (``CODE_MODE_AUTH_TOKENS``).

``tokens add NAME --file tokens.json`` makes a fresh random token, prints it once on stdout and writes only its
SHA-256 to the file (created with mode 600; a tenant already in it gets one more token). ``tokens list`` shows
each tenant, how many tokens it has, its servers and its policy file; never a token.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, cast

from ._json import DuplicateKey, unique_keys
from .errors import ConfigError
from .tenants import TENANT_NAME, new_token


def add_tokens_parser(sub: Any) -> None:
    tokens = sub.add_parser(
        "tokens",
        help="make tenants' bearer tokens for CODE_MODE_AUTH_TOKENS (only their hashes are kept)",
        description="The tokens file names each tenant over HTTP: the SHA-256 of each of its tokens, and optionally "
        "the servers it may use and its policy file. Point CODE_MODE_AUTH_TOKENS at it.",
    )
    actions = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add",
        help="a new token for a tenant: printed once, its hash written to the file",
        description="Make a random token for tenant NAME, print it once on stdout (give it to that tenant's "
        "clients: 'Authorization: Bearer <token>') and write only its SHA-256 to --file, which is created with "
        "mode 600 if need be. A tenant already in the file gets one more token; --servers and --policy, when "
        "given, replace its servers and policy. The running server reads the file at start-up.",
    )
    add.add_argument("name", help="the tenant: lower-case letters, digits, '_', '.', '-'")
    add.add_argument("--file", type=Path, required=True, help="the tokens file (CODE_MODE_AUTH_TOKENS)")
    add.add_argument(
        "--servers", help="comma-separated servers of the servers file this tenant may use (default: every one)"
    )
    add.add_argument(
        "--policy", help="this tenant's policy file, relative to the tokens file's folder (default: the servers file's)"
    )
    listing = actions.add_parser("list", help="the tenants of a tokens file (never a token)")
    listing.add_argument("--file", type=Path, required=True, help="the tokens file (CODE_MODE_AUTH_TOKENS)")


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"tenants": []}
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_keys)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, DuplicateKey) as exc:
        raise ConfigError(f"{path}: cannot be read as a tokens file: {exc}") from None
    if not isinstance(data, dict) or not isinstance(cast("dict[str, Any]", data).get("tenants"), list):
        raise ConfigError(f'{path}: not a tokens file (expected {{"tenants": [...]}})')
    return cast("dict[str, Any]", data)


def _write(path: Path, data: dict[str, Any]) -> None:
    """Replace the file at once (a reader sees the old or the new one), readable and writable by its owner only."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def run_tokens_command(args: argparse.Namespace) -> int:
    try:
        if args.tokens_command == "list":
            return _list(args.file)
        return _add(args)
    except ConfigError as exc:
        print(f"mcp-code-mode: {exc}", file=sys.stderr)
        return 2


def _add(args: argparse.Namespace) -> int:
    name: str = args.name
    if not TENANT_NAME.match(name):
        raise ConfigError(f"a tenant's name must match {TENANT_NAME.pattern}, got {name!r}")
    data = _read(args.file)
    tenants = cast("list[dict[str, Any]]", data["tenants"])
    entry = next((t for t in tenants if isinstance(t, dict) and t.get("name") == name), None)  # pyright: ignore[reportUnnecessaryIsInstance]
    token, digest = new_token()
    if entry is None:
        entry = {"name": name, "token_sha256": [digest]}
        tenants.append(entry)
    else:
        hashes = entry.get("token_sha256")
        entry["token_sha256"] = [*([hashes] if isinstance(hashes, str) else list(hashes or [])), digest]
    if args.servers is not None:
        entry["servers"] = [s.strip() for s in args.servers.split(",") if s.strip()]
    if args.policy is not None:
        entry["policy"] = args.policy
    _write(args.file, data)
    print(token)
    count = len(entry["token_sha256"])
    print(
        f"mcp-code-mode: tenant {name!r} has {count} token{'s' if count > 1 else ''} in {args.file}; the token above "
        "is shown only now (the file keeps its SHA-256). Restart the server to use it.",
        file=sys.stderr,
    )
    return 0


def _list(path: Path) -> int:
    if not path.exists():
        raise ConfigError(f"{path}: no such file")
    for entry in cast("list[Any]", _read(path)["tenants"]):
        if not isinstance(entry, dict):
            continue
        tenant = cast("dict[str, Any]", entry)
        hashes = tenant.get("token_sha256")
        count = 1 if isinstance(hashes, str) else len(hashes) if isinstance(hashes, list) else 0  # pyright: ignore[reportUnknownArgumentType]
        servers = ", ".join(tenant["servers"]) if isinstance(tenant.get("servers"), list) else "every server"
        policy = tenant.get("policy") or "the servers file's"
        print(f"{tenant.get('name')}: {count} token{'s' if count != 1 else ''}; servers: {servers}; policy: {policy}")
    return 0


__all__ = ["add_tokens_parser", "run_tokens_command"]
