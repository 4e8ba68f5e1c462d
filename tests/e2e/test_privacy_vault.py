"""The persisted vault end to end: two engines (as two ``--stateless`` replicas would be) over one cache
directory with ``CODE_MODE_PII_VAULT=database`` and one ``CODE_MODE_PII_KEY``, the real CRM fixture behind each.
A token one replica gave a client restores on the other; the database holds no value in plaintext; a replica
with another key cannot read the tokens (they stay tokens); a token past its TTL is unknown."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_code_mode.engine import CodeMode

from ..conftest import make_config
from ..fixtures.pii_crm_server import crm_entry

pytestmark = pytest.mark.anyio

KEY = secrets.token_hex(32)
CLIENT = "http-token:replica-test"
LIST = "c = crm.list_customers()['customers'][0]\nprint(c['email'], c['phone'])"


def engine(cache: Path, record: Path, key: str = KEY, **settings: Any) -> CodeMode:
    servers = {"crm": {**crm_entry(record), "pii": "tokenize"}}
    return CodeMode(
        make_config(
            servers, cache_dir=cache, pii_vault="database", pii_key=key, pool_size=1, cpython_pool_size=0, **settings
        )
    )


def recorded(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[CodeMode, CodeMode, Path]]:
    record = tmp_path / "crm.jsonl"
    a, b = engine(tmp_path / "cache", record), engine(tmp_path / "cache", record)
    async with a, b:
        yield a, b, record


async def test_a_token_given_by_one_replica_restores_on_the_other(
    replicas: tuple[CodeMode, CodeMode, Path], tmp_path: Path
) -> None:
    a, b, record = replicas
    first = await a.execute(LIST, client=CLIENT, cache="off")
    assert first.success, first.error
    email_token, phone_token = first.output.split()
    assert email_token == "[EMAIL_1]" and phone_token == "[PHONE_1]"
    second = await b.execute(f"print(crm.get_customer(email='{email_token}')['phone'])", client=CLIENT, cache="off")
    assert second.success, second.error
    assert second.output.strip() == phone_token  # the same client's tokens on the other replica
    (got,) = [r for r in recorded(record) if r.get("tool") == "get_customer"]
    address = got["arguments"]["email"]
    assert "@" in address and address != email_token  # the real address reached the CRM
    other = await b.execute(f"crm.get_customer(email='{email_token}')", client="http-token:someone-else", cache="off")
    assert not other.success and email_token in (other.error.message if other.error else "")  # unknown to them
    assert recorded(record)[-1]["arguments"] == {"email": email_token}
    database = b"".join(p.read_bytes() for p in (tmp_path / "cache").glob("scripts.db*"))
    assert address.encode() not in database and b"[EMAIL_1]" in database


async def test_a_replica_with_another_key_cannot_read_the_tokens(tmp_path: Path) -> None:
    record = tmp_path / "crm.jsonl"
    async with engine(tmp_path / "cache", record) as a:
        first = await a.execute(LIST, client=CLIENT, cache="off")
        token = first.output.split()[0]
    async with engine(tmp_path / "cache", record, key=secrets.token_hex(32)) as other:
        result = await other.execute(f"crm.get_customer(email='{token}')", client=CLIENT, cache="off")
    assert not result.success
    assert [r for r in recorded(record) if r.get("tool") == "get_customer"][-1]["arguments"] == {"email": token}


async def test_a_token_past_its_ttl_is_unknown(tmp_path: Path) -> None:
    record = tmp_path / "crm.jsonl"
    async with engine(tmp_path / "cache", record, pii_ttl=1.0) as a:
        first = await a.execute(LIST, client=CLIENT, cache="off")
        token = first.output.split()[0]
        await anyio.sleep(1.5)
        late = await a.execute(f"crm.get_customer(email='{token}')", client=CLIENT, cache="off")
        assert not late.success
        again = await a.execute(LIST, client=CLIENT, cache="off")
    assert again.output.split()[0] == "[EMAIL_2]"  # a new number: an expired one never comes back
