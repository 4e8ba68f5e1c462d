"""Privacy end to end (issue 21): personal data and secrets are tokens in everything the client receives, and the
tokens a model writes in its code are restored on the way to the tools that may receive them.

One engine over three fixture servers, from a servers file as a user writes it:

- ``crm`` (``"pii": "tokenize"``): customers with e-mails, phones, cards, IBANs, API keys and employee ids (the
  custom kind ``employee_id``); ``query`` may receive every kind (``sinks: {"query": ["*"]}``), the other tools
  the values that came from ``crm`` (the default);
- ``mail`` (``"pii": "tokenize"``): ``send_mail`` may receive e-mails only and asks a person first;
  ``post_public`` may receive nothing in plaintext (``sinks: {"post_public": []}``);
- ``ledger`` (``"pii": "off"``): the crm fixture over another data set, whose values pass in plaintext (its
  secrets do not).

The top-level ``pii`` turns the IP detector off (the IPs in the notes stay as they are), adds ``employee_id`` and
reads national phone numbers as US or GB. Every client here is a real MCP client whose transport records every
message it receives; after each test, every message is scanned for every planted value (as written, in the
normalised forms, case-insensitively, JSON-escaped once and twice): none may appear. The fixtures record what
they were sent: that is how a restored value is seen.

The last test starts ``mcp-code-mode serve`` over stdio as a desktop client does (``CODE_MODE_PII=tokenize``, a
minimal environment) and scans every line the server writes to its stdout.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import mcp_types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client._memory import InMemoryTransport  # pyright: ignore[reportPrivateUsage]
from mcp.client._transport import TransportStreams  # pyright: ignore[reportPrivateUsage]
from mcp.client.session import ClientRequestContext
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import jsonrpc_message_adapter

from mcp_code_mode.config import CodeModeConfig
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import CACHE_DIR
from ..fixtures.pii_crm_server import CUSTOMERS, LEDGER, crm_entry
from ..fixtures.pii_mail_server import mail_entry
from .test_governance import SharedEngine

pytestmark = pytest.mark.anyio

WAIT = 90
"""The longest any one call here may take, in seconds."""

CRM_TOKEN = "crm-tok-7f3a9c2e5b1d4086"
"""The crm server's ``CRM_API_TOKEN``: a secret of a downstream server's env, which ``connection_info`` returns."""
LEDGER_TOKEN = "ledger-tok-c41d9e07a2b8f3"
"""The ledger server's: a secret even though that server says ``"pii": "off"``."""

TOKEN = re.compile(r"\[([A-Z][A-Z0-9_]*)_(\d+)\]")
SECRET = "[SECRET]"

PII_SETTINGS = {
    "detectors": {"ip": False},
    "custom": [{"kind": "employee_id", "regex": r"EMP-\d{6}"}],
    "phoneRegions": ["US", "GB"],
}
"""The servers file's top-level ``pii`` for the in-process engine."""

MAX_OUTPUT = 4000
"""The in-process engine's output cap (``CODE_MODE_MAX_OUTPUT_CHARS``)."""

NOTES_IP = "198.51.100.23"
"""The IP in Alice's notes: the in-process engine has the IP detector off, so it is shown as it is."""


# ----- what must never reach the client -------------------------------------------------------------------


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def _e164(phone: str) -> str:
    digits = _digits(phone)
    if phone.startswith("+"):
        return "+" + digits
    if phone.startswith("0"):  # GB national
        return "+44" + digits[1:]
    return "+1" + digits


def planted(*, with_ip: bool) -> frozenset[str]:
    """Every personal value of the crm data set and every secret, in the forms a leak could take."""
    values: set[str] = {CRM_TOKEN, LEDGER_TOKEN}
    values |= {row["api_key"] for row in LEDGER}  # a secret format: replaced even from a pii "off" server
    for row in CUSTOMERS:
        values |= {row["email"], row["phone"], row["card"], row["iban"], row["api_key"], row["manager"]}
        values |= {_e164(row["phone"]), _digits(row["phone"]), _digits(row["card"]), row["iban"].replace(" ", "")}
    for row in CUSTOMERS:  # half an address is a leak too (a value cut by a stream's chunks or the output cap)
        local, domain = str(row["email"]).split("@")
        values |= {local, domain}
    values |= {"536-22-1847", "536221847"}  # the SSN in Bob's notes
    if with_ip:
        values.add(NOTES_IP)
    return frozenset(values)


PLANTED = planted(with_ip=False)
PLANTED_DESKTOP = planted(with_ip=True)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value: keys and values, nested."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            yield str(key)  # pyright: ignore[reportUnknownArgumentType]
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:  # pyright: ignore[reportUnknownVariableType]
            yield from _strings(item)


def leaks(text: str, values: Iterable[str]) -> list[str]:
    """The planted values found in one message (its raw text and every string it decodes to)."""
    haystacks = [text.lower()]
    try:
        haystacks.append("\n".join(_strings(json.loads(text))).lower())
    except ValueError:
        pass
    found: list[str] = []
    for value in values:
        once = json.dumps(value)[1:-1]
        forms = {value.lower(), once.lower(), json.dumps(once)[1:-1].lower()}
        if any(form in haystack for form in forms for haystack in haystacks):
            found.append(value)
    return sorted(found)


@dataclass
class Recorder:
    """Every message any client of this module received, as its JSON text, with the values it must not carry."""

    messages: list[tuple[str, str, frozenset[str]]] = field(default_factory=list[tuple[str, str, frozenset[str]]])
    """(who received it, its text, the planted values)."""

    def add(self, who: str, text: str, values: frozenset[str] = PLANTED) -> None:
        self.messages.append((who, text, values))


RECORDER = Recorder()


@pytest.fixture(autouse=True)
def scanned() -> Iterator[None]:
    """After each test: no message received during it carries a planted value (and some messages were)."""
    start = len(RECORDER.messages)
    yield
    received = RECORDER.messages[start:]
    assert received, "the test received no message: the scan would prove nothing"
    found = [(who, leaks(text, values), text) for who, text, values in received]
    found = [(who, values, text) for who, values, text in found if values]
    if found:
        who, values, text = found[0]
        pytest.fail(
            f"{len(found)} of {len(received)} message(s) carried planted values; the first, to {who!r}, carried "
            f"{len(values)}: {values[:6]}\n{text[:400]}",
            pytrace=False,
        )


class _RecordingRead:
    """A transport's read stream that records each message as it passes."""

    def __init__(self, inner: Any, who: str) -> None:
        self._inner = inner
        self._who = who

    def _record(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if isinstance(item, SessionMessage):
            text = jsonrpc_message_adapter.dump_json(item.message, by_alias=True, exclude_none=True).decode()
        else:
            text = repr(item)
        RECORDER.add(self._who, text)
        return item

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return self._record(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._record(await self._inner.__anext__())

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)


class RecordingTransport(AbstractAsyncContextManager[TransportStreams]):
    """An in-process transport to a server whose every message to the client is recorded."""

    def __init__(self, engine: CodeMode, who: str) -> None:
        self._inner = InMemoryTransport(build_server(engine))
        self._who = who

    async def __aenter__(self) -> TransportStreams:
        read, write = await self._inner.__aenter__()
        return _RecordingRead(read, self._who), write  # pyright: ignore[reportReturnType]

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._inner.__aexit__(exc_type, exc, tb)


# ----- the engine, the clients and the people behind them ---------------------------------------------------


@dataclass
class Person:
    """Answers every approval question with allow_once and keeps each question."""

    asked: list[str] = field(default_factory=list[str])

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        self.asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"decision": "allow_once"})


@dataclass
class Peer:
    """A connected client (one MCP session: one vault), its person and its log and progress messages."""

    client: Client
    person: Person
    logs: list[tuple[float, mcp_types.LoggingMessageNotificationParams]] = field(
        default_factory=list[tuple[float, mcp_types.LoggingMessageNotificationParams]]
    )
    progress: list[str] = field(default_factory=list[str])


@dataclass(frozen=True)
class World:
    engine: SharedEngine
    crm: Path
    mail: Path
    ledger: Path
    """The record files of the three fixtures."""


def records(path: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """What a fixture received, call by call (the arguments), optionally only one tool's calls."""
    if not path.exists():
        return []
    calls = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [c["arguments"] for c in calls if tool is None or c["tool"] == tool]


def last(path: Path, tool: str) -> dict[str, Any]:
    calls = records(path, tool)
    assert calls, f"{path.name}: {tool} was never called"
    return calls[-1]


def settings_env(**settings: str) -> dict[str, str]:
    """The test process's environment without CODE_MODE_* settings, plus ``settings`` (as CODE_MODE_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_MODE_")}
    return env | {f"CODE_MODE_{k.upper()}": v for k, v in settings.items()}


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    base = tmp_path_factory.mktemp("privacy").resolve()
    crm, mail, ledger = base / "crm.jsonl", base / "mail.jsonl", base / "ledger.jsonl"
    servers = {
        "crm": {
            **crm_entry(crm, CRM_API_TOKEN=CRM_TOKEN),
            "pii": "tokenize",
            "policy": {"default": "allow", "pii": {"sinks": {"query": ["*"]}}},
        },
        "mail": {
            **mail_entry(mail),
            "pii": "tokenize",
            "policy": {
                "default": "allow",
                "tools": {"send_mail": "ask"},
                "pii": {"sinks": {"send_mail": ["email"], "post_public": []}},
            },
        },
        "ledger": {
            **crm_entry(ledger, CRM_DATASET="ledger", CRM_API_TOKEN=LEDGER_TOKEN),
            "pii": "off",
            "policy": {"default": "allow", "pii": {"sinks": {"query": ["email"]}}},
        },
    }
    path = base / "mcp_servers.json"
    path.write_text(json.dumps({"servers": servers, "pii": PII_SETTINGS}, indent=2), encoding="utf-8")
    env = settings_env(
        cache_dir=str(CACHE_DIR),
        cache_embedder="hashing",
        pyodide_pool_size="0",
        workspace_dir=str(base / "runs"),
        audit_tool="true",
        stream_output_after_ms="0",  # every printed line streams at once: more messages to scan
        approval_timeout="20",
        max_output_chars=str(MAX_OUTPUT),
    )
    engine = SharedEngine(CodeModeConfig.load(path, env=env))
    async with engine:
        yield World(engine, crm, mail, ledger)


@asynccontextmanager
async def peer(world: World, who: str) -> AsyncGenerator[Peer]:
    """A new client of the module's engine (a new session: a vault of its own), recorded."""
    holder: list[Peer] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        holder[0].logs.append((anyio.current_time(), params))

    person = Person()
    async with Client(
        RecordingTransport(world.engine, who), mode="legacy", elicitation_callback=person, logging_callback=on_log
    ) as client:
        holder.append(Peer(client, person))
        yield holder[0]


@pytest.fixture(scope="module")
async def alice(world: World) -> AsyncIterator[Peer]:
    """The module's long-lived client (tests that do not depend on token numbers share it)."""
    async with peer(world, "alice") as p:
        yield p


async def run(p: Peer, code: str, language: str = "python", **extra: Any) -> dict[str, Any]:
    """``execute_code`` (cache off unless given) and its structured content; progress messages are kept."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        p.progress.append(message or "")

    arguments = {"language": language, "code": code, "cache": "off", **extra}
    with anyio.fail_after(WAIT):
        result = await p.client.call_tool("execute_code", arguments, progress_callback=on_progress)
    assert result.structured_content is not None, result
    return result.structured_content


async def tool(p: Peer, name: str, arguments: dict[str, Any]) -> Any:
    """Another tool of the server (the cache and audit tools): its structured content."""
    with anyio.fail_after(WAIT):
        result = await p.client.call_tool(name, arguments)
    assert not result.is_error, result
    assert result.structured_content is not None, result
    return result.structured_content


async def audit(p: Peer, run_hash: str) -> dict[str, dict[str, Any]]:
    """The run's audit entries (get_audit_log, as the model reads it) by ``server.tool`` (the last of each)."""
    entries = (await tool(p, "get_audit_log", {"run": run_hash}))["entries"]
    return {f"{e['server']}.{e['tool']}": e for e in reversed(entries)}


def kinds(entry: dict[str, Any], which: str) -> list[str]:
    return sorted((entry.get("pii") or {}).get(which) or [])


# ----- listing the customers (what a model sees first) ------------------------------------------------------

FIELDS = ("email", "phone", "card", "iban", "api_key", "manager")

LIST_PYTHON = """customers = crm.list_customers(reverse=REVERSE)["customers"]
for c in customers:
    print("|".join([c["name"], c["email"], c["phone"], c["card"], c["iban"], c["api_key"], c["manager"]]))
print(customers[2]["email"], customers[2]["phone"])
print(customers[0]["notes"])
{
    "first": customers[0],
    "lengths": [len(c["email"]) for c in customers],
    "at": all("@" in c["email"] for c in customers),
    "digits": [sum(ch.isdigit() for ch in c["card"]) for c in customers],
    "by_email": {c["email"]: c["name"] for c in customers},
}
"""

LIST_JAVASCRIPT = """const { customers } = await crm.list_customers({ reverse: REVERSE });
for (const c of customers) {
  console.log([c.name, c.email, c.phone, c.card, c.iban, c.api_key, c.manager].join("|"));
}
console.log(customers[2].email + " " + customers[2].phone);
console.log(customers[0].notes);
export default {
  first: customers[0],
  lengths: customers.map((c) => c.email.length),
  at: customers.every((c) => c.email.includes("@")),
  digits: customers.map((c) => c.card.replace(/[^0-9]/g, "").length),
  by_email: Object.fromEntries(customers.map((c) => [c.email, c.name])),
};
"""

RUNNERS = [
    pytest.param("python", None, id="python-default"),
    pytest.param("python", "cpython", id="python-cpython"),
    pytest.param("javascript", "deno", id="javascript-deno"),
]
PRINT_RUNNERS = [*RUNNERS, pytest.param("python", "pyodide", id="python-pyodide")]


@dataclass(frozen=True)
class Listing:
    """What a client saw of the customers: each one's tokens by name, the raw result."""

    rows: dict[str, dict[str, str]]
    """name → field → what the client saw (a token, ``[SECRET]``)."""
    data: dict[str, Any]

    def token(self, name: str, field: str = "email") -> str:
        return self.rows[name][field]


def listing_code(language: str, reverse: bool = False) -> str:
    if language == "python":
        return LIST_PYTHON.replace("REVERSE", str(reverse))
    return LIST_JAVASCRIPT.replace("REVERSE", "true" if reverse else "false")


async def listing(p: Peer, language: str = "python", runner: str | None = None, reverse: bool = False) -> Listing:
    extra = {"runner": runner} if runner else {}
    data = await run(p, listing_code(language, reverse), language, **extra)
    assert data["success"], data["error"]
    lines = data["output"].splitlines()
    rows: dict[str, dict[str, str]] = {}
    for line in lines[: len(CUSTOMERS)]:
        name, *values = line.split("|")
        rows[name] = dict(zip(FIELDS, values, strict=True))
    return Listing(rows, data)


def kind_of(text: str) -> str | None:
    """The kind a token spells (``[PHONE_2]`` → ``PHONE``), or None for anything else."""
    match = TOKEN.fullmatch(text)
    return match.group(1) if match else None


def name_at(index: int) -> str:
    return str(CUSTOMERS[index]["name"])


# ----- 2. printed customers are tokens ----------------------------------------------------------------------


@pytest.mark.parametrize(("language", "runner"), PRINT_RUNNERS)
async def test_printed_customers_show_only_tokens_the_same_value_the_same_token(
    world: World, language: str, runner: str | None
) -> None:
    async with peer(world, f"print-{language}-{runner}") as p:
        seen = await listing(p, language, runner)
    data = seen.data
    lines = data["output"].splitlines()
    assert [line.split("|")[0] for line in lines[:6]] == [c["name"] for c in CUSTOMERS]  # names are not detected
    # A new session: its e-mails are numbered from 1, in the order it saw them.
    assert [seen.token(name_at(i)) for i in range(6)] == [f"[EMAIL_{i}]" for i in range(1, 7)]
    for kind, field_name in (("PHONE", "phone"), ("CARD", "card"), ("IBAN", "iban")):
        tokens = [seen.token(name_at(i), field_name) for i in range(6)]
        assert [kind_of(t) for t in tokens] == [kind] * 6, tokens
        assert len(set(tokens)) == 6, tokens  # six values, six tokens
    assert [seen.token(name_at(i), "api_key") for i in range(6)] == [SECRET] * 6
    managers = [seen.token(name_at(i), "manager") for i in range(6)]  # EMP-… (custom kind), two customers each
    assert all(re.fullmatch(r"\[EMPLOYEE_ID_\d+\]", m) for m in managers), managers
    assert managers[0] == managers[1] and managers[2] == managers[3] and managers[4] == managers[5]
    assert len(set(managers)) == 3
    # Carla printed again: the same tokens.
    assert lines[6] == f"{seen.token(name_at(2))} {seen.token(name_at(2), 'phone')}"
    # Addresses are not a detected kind; the IP detector is off in this servers file.
    assert lines[7] == CUSTOMERS[0]["notes"] and NOTES_IP in lines[7]

    value = data["returnValue"]
    first = CUSTOMERS[0]
    assert value["first"] == {
        "id": 1,
        "name": first["name"],
        **{f: seen.token(first["name"], f) for f in FIELDS},
        "notes": first["notes"],
    }
    # The script saw the real values.
    assert value["lengths"] == [len(c["email"]) for c in CUSTOMERS]
    assert value["at"] is True
    assert value["digits"] == [len(_digits(c["card"])) for c in CUSTOMERS]
    assert value["by_email"] == {seen.token(c["name"]): c["name"] for c in CUSTOMERS}  # keys are tokenized too


async def test_the_same_session_keeps_its_tokens_from_run_to_run(alice: Peer) -> None:
    first = await listing(alice)
    second = await listing(alice, "javascript")
    assert first.rows == second.rows


# ----- 3. the round trip: tokens a model writes are restored for the tools that may receive them -------------


ROUND_TRIP_PYTHON = """c = crm.get_customer(email="EMAIL")
sent = mail.send_mail(
    to="EMAIL", subject="Your card", body="Dear customer, your card CARD expires; call PHONE or write to EMAIL."
)
print(c["name"], c["email"], c["card"])
{"customer": c, "sent": sent}
"""

ROUND_TRIP_JAVASCRIPT = """const c = await crm.get_customer({ email: "EMAIL" });
const sent = await mail.send_mail({
  to: "EMAIL",
  subject: "Your card",
  body: "Dear customer, your card CARD expires; call PHONE or write to EMAIL.",
});
console.log(c.name + " " + c.email + " " + c.card);
export default { customer: c, sent };
"""


@pytest.mark.parametrize(("language", "runner"), RUNNERS)
async def test_a_script_written_with_the_tokens_it_saw_reaches_the_real_customer(
    world: World, language: str, runner: str | None
) -> None:
    carla = CUSTOMERS[2]
    async with peer(world, f"round-trip-{language}-{runner}") as p:
        seen = await listing(p, language, runner)
        email, card, phone = (seen.token(carla["name"], f) for f in ("email", "card", "phone"))
        template = ROUND_TRIP_PYTHON if language == "python" else ROUND_TRIP_JAVASCRIPT
        code = template.replace("EMAIL", email).replace("CARD", card).replace("PHONE", phone)
        extra = {"runner": runner} if runner else {}
        data = await run(p, code, language, **extra)
        assert data["success"], data["error"]
        entries = await audit(p, data["hash"])
        asked = list(p.person.asked)

    # The crm got the real address and found Carla; what came back is tokenized with the same tokens.
    assert last(world.crm, "get_customer") == {"email": carla["email"]}
    assert data["output"] == f"{carla['name']} {email} {card}\n"
    assert data["returnValue"]["customer"] == {
        "id": 3,
        "name": carla["name"],
        **{f: seen.token(carla["name"], f) for f in FIELDS},
        "notes": carla["notes"],
    }
    # send_mail may receive e-mails: the address is restored, in `to` and inside the body; a card and a phone
    # it may not receive stay tokens.
    assert last(world.mail, "send_mail") == {
        "to": carla["email"],
        "subject": "Your card",
        "body": f"Dear customer, your card {card} expires; call {phone} or write to {carla['email']}.",
    }
    assert data["returnValue"]["sent"] == {"sent": True, "to": email}  # the echoed address: a token again
    # The approval question (send_mail asks) showed the call with tokens.
    assert len(asked) == 1 and email in asked[0], asked
    # The audit log says what was restored and what withheld.
    assert email in entries["crm.get_customer"]["preview"], entries["crm.get_customer"]  # as the model wrote it
    assert kinds(entries["crm.get_customer"], "restored") == ["email"]
    assert kinds(entries["mail.send_mail"], "restored") == ["email"]
    assert kinds(entries["mail.send_mail"], "withheld") == ["card", "phone"]


# ----- 4. a token inside a larger string, nested, in keys ---------------------------------------------------


async def test_an_sql_query_with_a_token_searches_for_the_real_address(world: World, alice: Peer) -> None:
    bob = CUSTOMERS[1]
    seen = await listing(alice)
    email = seen.token(bob["name"])
    sql = f"SELECT * FROM customers WHERE email = '{email}'"
    data = await run(alice, f"crm.query(sql={sql!r})")
    assert data["success"], data["error"]
    assert last(world.crm, "query")["sql"] == f"SELECT * FROM customers WHERE email = '{bob['email']}'"
    result = data["returnValue"]
    assert result["count"] == 1 and result["rows"][0]["name"] == bob["name"]
    assert result["rows"][0]["email"] == email
    assert result["sql"] == sql  # the echoed query: tokenized again


async def test_tokens_nested_in_lists_dicts_and_keys_are_restored(world: World, alice: Peer) -> None:
    alice_row, bob = CUSTOMERS[0], CUSTOMERS[1]
    seen = await listing(alice)
    params = {
        "filters": [{"email": seen.token(bob["name"])}, {"phone": seen.token(bob["name"], "phone")}],
        seen.token(alice_row["name"]): [seen.token(alice_row["name"], "iban"), "plain text"],
        "note": f"from {seen.token(alice_row['name'])} to {seen.token(bob['name'])}",
    }
    data = await run(alice, f"crm.query(sql='SELECT 1', params={params!r})\nNone")
    assert data["success"], data["error"]
    assert last(world.crm, "query")["params"] == {
        "filters": [{"email": bob["email"]}, {"phone": bob["phone"]}],
        alice_row["email"]: [alice_row["iban"], "plain text"],
        "note": f"from {alice_row['email']} to {bob['email']}",
    }


async def test_call_tool_by_name_restores_tokens_too(world: World, alice: Peer) -> None:
    seen = await listing(alice)
    eve = CUSTOMERS[4]
    code = f"call_tool('crm', 'get_customer', {{'email': {seen.token(eve['name'])!r}}})['name']"
    data = await run(alice, code)
    assert data["success"], data["error"]
    assert data["returnValue"] == eve["name"]
    assert last(world.crm, "get_customer") == {"email": eve["email"]}


async def test_many_calls_at_once_in_javascript_each_get_their_own_value(world: World, alice: Peer) -> None:
    seen = await listing(alice)
    tokens = [seen.token(c["name"]) for c in CUSTOMERS]
    code = (
        f"const tokens = {json.dumps(tokens)};\n"
        "const found = await Promise.all(tokens.map((email) => crm.get_customer({ email })));\n"
        "export default found.map((c) => [c.name, c.email]);\n"
    )
    data = await run(alice, code, "javascript")
    assert data["success"], data["error"]
    assert data["returnValue"] == [[c["name"], seen.token(c["name"])] for c in CUSTOMERS]
    received = [r["email"] for r in records(world.crm, "get_customer")[-6:]]
    assert sorted(received) == sorted(c["email"] for c in CUSTOMERS)


# ----- 5. sinks: a tool that may not receive a kind gets the token ------------------------------------------


async def test_a_tool_that_may_not_receive_emails_gets_the_token_and_the_audit_says_withheld(
    world: World, alice: Peer
) -> None:
    seen = await listing(alice)
    email = seen.token(name_at(0))
    data = await run(alice, f"mail.post_public(text='contact {email}')")
    assert data["success"], data["error"]
    assert last(world.mail, "post_public") == {"text": f"contact {email}"}
    assert data["returnValue"] == {"sent": True, "text": f"contact {email}"}
    entry = (await audit(alice, data["hash"]))["mail.post_public"]
    assert kinds(entry, "withheld") == ["email"] and kinds(entry, "restored") == []


async def test_another_servers_tool_without_a_sinks_entry_gets_the_token(world: World, alice: Peer) -> None:
    """The default: a value is restored for the servers it came from (crm), not for ledger."""
    seen = await listing(alice)
    email = seen.token(name_at(1))
    code = f"try:\n    ledger.get_customer(email={email!r})\nexcept ToolError as e:\n    print(e)\n"
    data = await run(alice, code)
    assert data["success"], data["error"]
    assert last(world.ledger, "get_customer") == {"email": email}
    assert f"no customer with email '{email}'" in data["output"]  # the placeholder fails visibly
    entry = (await audit(alice, data["hash"]))["ledger.get_customer"]
    assert kinds(entry, "withheld") == ["email"]


async def test_a_token_the_session_never_saw_reaches_the_tool_as_it_is(world: World, alice: Peer) -> None:
    code = "try:\n    crm.get_customer(email='[EMAIL_999]')\nexcept ToolError as e:\n    print(e)\n"
    data = await run(alice, code)
    assert last(world.crm, "get_customer") == {"email": "[EMAIL_999]"}
    assert "no customer with email '[EMAIL_999]'" in data["output"]


async def test_a_real_value_the_script_sends_to_a_tool_that_may_not_receive_it_is_sent_as_its_token(
    world: World, alice: Peer
) -> None:
    """The sinks say which kinds a tool may receive *in plaintext*: a value the script got from a result and
    passes on itself is held to the same rule as a token the model wrote (the reading a user who writes
    ``"post_public": []`` expects)."""
    seen = await listing(alice)
    data = await run(alice, "c = crm.list_customers()['customers'][0]\nmail.post_public(text='contact ' + c['email'])")
    assert data["success"], data["error"]
    assert last(world.mail, "post_public") == {"text": f"contact {seen.token(name_at(0))}"}


# ----- 6. secrets -------------------------------------------------------------------------------------------


async def test_a_servers_env_secret_and_api_keys_are_secret_wherever_the_script_puts_them(alice: Peer) -> None:
    code = (
        "t = crm.connection_info()['token']\n"
        "print(t)\n"
        "print('length', len(t), t.startswith('crm-tok-'))\n"
        "print(crm.list_customers()['customers'][0]['api_key'])\n"
        "with open('key-' + t + '.txt', 'w') as f:\n"
        "    f.write('x')\n"
        "{t: 'as a key', 'value': t, 'ledger': ledger.connection_info()['token']}\n"
    )
    data = await run(alice, code)
    assert data["success"], data["error"]
    assert data["output"] == f"{SECRET}\nlength {len(CRM_TOKEN)} True\n{SECRET}\n"  # the script saw the real one
    assert [(f["path"], f["size"]) for f in data["files"]] == [(f"key-{SECRET}.txt", 1)]
    assert CRM_TOKEN not in str(data["files"]) and "%5BSECRET%5D" in data["files"][0]["uri"]  # its link: masked too
    assert data["returnValue"] == {SECRET: "as a key", "value": SECRET, "ledger": SECRET}  # pii "off": still


@pytest.mark.parametrize("extension", ["txt", "vcf"])
async def test_a_file_named_after_a_customer_is_listed_with_the_token(alice: Peer, extension: str) -> None:
    """``.txt`` is a file extension the e-mail detector knows (``x@host.com.txt`` is no address): the name shows
    the known address's token. ``x@host.com.vcf`` is itself a well-formed address (``vcf`` could be a top-level
    domain): the name is that address's token or the known one's followed by ``.vcf``, never plaintext."""
    seen = await listing(alice)
    code = f"for c in crm.list_customers()['customers'][:2]:\n    open(c['email'] + '.{extension}', 'w').close()\n"
    data = await run(alice, code)
    assert data["success"], data["error"]
    names = sorted(f["path"] for f in data["files"])
    expected = sorted(f"{seen.token(name_at(i))}.{extension}" for i in range(2))
    if extension == "vcf" and names != expected:
        assert [kind_of(name) for name in names] == ["EMAIL", "EMAIL"], names
    else:
        assert names == expected


GLUED = [
    pytest.param("c['email'] + '.json'", "{email}.json", id="an-address-then-a-file-extension"),
    pytest.param("'backup-' + c['email'] + '.1'", "backup-{email}.1", id="an-address-then-a-numbered-suffix"),
    pytest.param("c['email'] + '2'", "{email}2", id="an-address-then-a-digit"),
    pytest.param("c['phone'] + 'x12'", "{phone}x12", id="a-phone-then-its-extension"),
    pytest.param("'tel:' + c['phone'] + ';ext=5'", "tel:{phone};ext=5", id="a-phone-in-a-tel-uri"),
]


@pytest.mark.parametrize(("expression", "expected"), GLUED)
async def test_a_value_the_session_knows_is_its_token_even_glued_to_other_text(
    alice: Peer, expression: str, expected: str
) -> None:
    """The detectors' boundaries decide what *new* text is an address; a value a result already carried is known
    and is its token wherever it is printed."""
    seen = await listing(alice)
    bob = name_at(1)
    data = await run(alice, f"c = crm.list_customers()['customers'][1]\nprint({expression})\n")
    assert data["success"], data["error"]
    assert data["output"] == expected.format(email=seen.token(bob), phone=seen.token(bob, "phone")) + "\n"


@pytest.mark.parametrize(("language", "runner"), [RUNNERS[0], RUNNERS[2]])
async def test_a_secret_in_an_exception_message_and_traceback_is_secret(
    alice: Peer, language: str, runner: str | None
) -> None:
    if language == "python":
        code = "t = crm.connection_info()['token']\nraise ValueError('token ' + t + ' was refused')\n"
    else:
        code = "const { token } = await crm.connection_info({});\nthrow new Error('token ' + token + ' was refused');\n"
    data = await run(alice, code, language)
    assert not data["success"]
    assert data["error"]["message"].endswith(f"token {SECRET} was refused"), data["error"]
    if language == "javascript":  # a stack starts with the message (Python's local runner shows the line only)
        assert f"token {SECRET} was refused" in data["error"]["traceback"], data["error"]


async def test_secrets_are_never_restored(world: World, alice: Peer) -> None:
    code = (
        "crm.query(sql=\"SELECT * FROM customers WHERE email = '[SECRET]'\")\n"  # query may receive every kind
        "mail.post_public(text='key: [SECRET]')\n"
        "crm.get_customer(email='[SECRET]')\n"
    )
    data = await run(alice, "t = crm.connection_info()['token']\nprint(t)\n" + code)
    assert data["output"] == f"{SECRET}\n"
    assert last(world.crm, "query")["sql"] == "SELECT * FROM customers WHERE email = '[SECRET]'"
    assert last(world.mail, "post_public") == {"text": "key: [SECRET]"}
    assert last(world.crm, "get_customer") == {"email": SECRET}
    assert not data["success"] and "no customer with email '[SECRET]'" in data["error"]["message"]


# ----- 7. errors and tracebacks -----------------------------------------------------------------------------


@pytest.mark.parametrize(("language", "runner"), [RUNNERS[0], RUNNERS[1], RUNNERS[2]])
async def test_an_error_naming_a_customer_is_tokenized(alice: Peer, language: str, runner: str | None) -> None:
    seen = await listing(alice)
    dev = name_at(3)
    if language == "python":
        code = (
            "c = crm.list_customers()['customers'][3]\n"
            "try:\n"
            "    crm.get_customer(email=c['email'].upper())\n"  # the server's error names a new value
            "except ToolError as e:\n"
            "    print(e)\n"
            "raise ValueError('bad customer ' + c['email'] + ' at ' + c['phone'])\n"
        )
    else:
        code = (
            "const c = (await crm.list_customers({})).customers[3];\n"
            "try { await crm.get_customer({ email: c.email.toUpperCase() }); } catch (e) { console.log(String(e)); }\n"
            "throw new Error('bad customer ' + c.email + ' at ' + c.phone);\n"
        )
    data = await run(alice, code, language, **({"runner": runner} if runner else {}))
    assert not data["success"]
    assert data["error"]["message"].endswith(f"bad customer {seen.token(dev)} at {seen.token(dev, 'phone')}"), data[
        "error"
    ]
    traceback = data["error"].get("traceback") or ""
    assert CUSTOMERS[3]["email"] not in traceback
    assert re.search(r"no customer with email '\[EMAIL_\d+\]'", data["output"]), data["output"]


async def test_a_tools_error_that_echoes_a_restored_value_comes_back_as_its_token(world: World, alice: Peer) -> None:
    seen = await listing(alice)
    email = seen.token(name_at(4))
    code = f"try:\n    crm.get_customer(email={'to: ' + email!r})\nexcept ToolError as e:\n    print(e)\n"
    data = await run(alice, code)
    assert data["success"], data["error"]
    assert last(world.crm, "get_customer") == {"email": f"to: {CUSTOMERS[4]['email']}"}  # restored inside a string
    assert f"no customer with email 'to: {email}'" in data["output"]


async def test_output_cut_at_the_cap_never_shows_part_of_a_value(alice: Peer) -> None:
    code = f"c = crm.list_customers()['customers'][0]\nprint('x' * {MAX_OUTPUT - 12} + c['email'] + ' ' + c['card'])\n"
    data = await run(alice, code)
    assert data["success"], data["error"]
    assert data["truncated"], data["output"][-80:]
    assert "alice.mo" not in data["output"] and "4111" not in data["output"], data["output"][-80:]


# ----- 8. two clients: unrelated tokens ---------------------------------------------------------------------


async def test_another_clients_token_never_restores_to_the_first_clients_value(world: World) -> None:
    async with peer(world, "first") as first, peer(world, "reversed") as second, peer(world, "blank") as blank:
        a = await listing(first)
        b = await listing(second, reverse=True)  # the same customers seen in the other order
        token = a.token(name_at(0))  # [EMAIL_1]: Alice for the first client
        assert token == "[EMAIL_1]" and b.token(name_at(0)) == "[EMAIL_6]"
        assert b.token(name_at(5)) == token  # for the second client [EMAIL_1] is Frank

        data = await run(second, f"crm.get_customer(email={token!r})")
        assert data["success"], data["error"]
        assert last(world.crm, "get_customer") == {"email": CUSTOMERS[5]["email"]}  # its own value, never Alice's
        assert data["returnValue"]["name"] == name_at(5) and data["returnValue"]["email"] == token

        code = f"try:\n    crm.get_customer(email={token!r})\nexcept ToolError as e:\n    print(e)\n"
        data = await run(blank, code)  # a client that has no tokens at all
        assert last(world.crm, "get_customer") == {"email": token}
        assert f"no customer with email '{token}'" in data["output"]


# ----- 9. streamed output ----------------------------------------------------------------------------------


async def test_streamed_output_is_tokenized_even_when_a_value_is_split_across_writes(world: World) -> None:
    code = (
        "import time\n"
        "customers = crm.list_customers()['customers']\n"
        "for c in customers[:3]:\n"
        "    e = c['email']\n"
        "    print(e[: len(e) // 2], end='', flush=True)\n"
        "    time.sleep(0.3)\n"
        "    print(e[len(e) // 2 :], c['phone'], flush=True)\n"
        "    time.sleep(0.2)\n"
    )
    async with peer(world, "stream") as p:
        started = anyio.current_time()
        data = await run(p, code)
        ended = anyio.current_time()
    assert data["success"], data["error"]
    expected = "".join(f"[EMAIL_{i}] [PHONE_{i}]\n" for i in range(1, 4))
    assert data["output"] == expected
    stdout = [(at, params) for at, params in p.logs if params.logger == "stdout"]
    assert len(stdout) >= 2, "the output did not stream"
    assert stdout[0][0] < ended - 0.3 and stdout[0][0] >= started  # it arrived while the script ran
    # What streamed is the output, piece by piece: no half of an address went out on its own.
    assert "".join(str(params.data) for _, params in stdout) == expected
    assert p.progress, "no progress message was received"


# ----- 10. the script cache ---------------------------------------------------------------------------------

CACHED = (
    "# the privacy cache probe\n"
    "customers = crm.list_customers()['customers']\n"
    "for c in customers:\n"
    "    print(c['name'] + '|' + c['email'] + '|' + c['card'])\n"
    "[c['email'] for c in customers]\n"
)


async def test_cached_runs_show_tokens_and_a_replay_to_another_client_uses_its_own_tokens(world: World) -> None:
    carla = CUSTOMERS[2]
    async with peer(world, "cache-first") as first:
        stored = await run(first, CACHED, cache="auto", description="privacy cache probe: list the customers")
        assert stored["success"] and not stored["cached"], stored
        assert stored["output"].splitlines()[0] == f"{name_at(0)}|[EMAIL_1]|[CARD_1]"
        script = await tool(first, "get_cached_script", {"hash": stored["hash"]})
        assert TOKEN.search(script["output"]) and TOKEN.search(json.dumps(script["returnValue"]))
        found = await tool(first, "search_cached_scripts", {"query": "privacy cache probe list the customers"})
        assert stored["hash"] in [s["hash"] for s in found["scripts"]], found
        await tool(first, "list_cached_scripts", {})

    async with peer(world, "cache-second") as second:
        mine = await listing(second, reverse=True)  # this client's tokens: Frank is its [EMAIL_1]
        replay = await run(second, CACHED, cache="reuse")
        assert replay["success"] and replay["cached"], replay
        lines = [line.split("|") for line in replay["output"].splitlines()]
        assert lines == [[c["name"], mine.token(c["name"]), mine.token(c["name"], "card")] for c in CUSTOMERS]
        assert replay["returnValue"] == [mine.token(c["name"]) for c in CUSTOMERS]
        # And the tokens of the replay work in this client's next call.
        data = await run(second, f"crm.get_customer(email={mine.token(carla['name'])!r})")
        assert data["success"], data["error"]
        assert last(world.crm, "get_customer") == {"email": carla["email"]}
        assert data["returnValue"]["email"] == mine.token(carla["name"])


# ----- 11. a server with "pii": "off" ----------------------------------------------------------------------


async def test_a_server_with_pii_off_passes_its_values_while_a_tokenize_servers_are_tokens(alice: Peer) -> None:
    gina = LEDGER[0]
    seen = await listing(alice)
    code = (
        "l = ledger.list_customers()['customers'][0]\n"
        "c = crm.list_customers()['customers'][0]\n"
        "print(l['email'], l['phone'], l['card'])\n"
        "print(c['email'], c['phone'])\n"
        "print(l['api_key'])\n"
    )
    data = await run(alice, code)
    assert data["success"], data["error"]
    assert data["output"].splitlines() == [
        f"{gina['email']} {gina['phone']} {gina['card']}",
        f"{seen.token(name_at(0))} {seen.token(name_at(0), 'phone')}",
        SECRET,  # a secret format, whatever the server's pii says
    ]


async def test_a_restored_value_echoed_by_a_pii_off_server_comes_back_as_its_token(world: World, alice: Peer) -> None:
    """ledger (pii "off") may receive e-mails in its query and echoes the SQL: its own values pass in plaintext,
    but a value this session knows from crm is its token, whoever echoes it."""
    seen = await listing(alice)
    bob = CUSTOMERS[1]
    sql = f"SELECT * FROM customers WHERE email = '{seen.token(bob['name'])}'"
    data = await run(alice, f"ledger.query(sql={sql!r})")
    assert data["success"], data["error"]
    assert last(world.ledger, "query")["sql"] == f"SELECT * FROM customers WHERE email = '{bob['email']}'"
    assert data["returnValue"]["sql"] == sql and data["returnValue"]["count"] == 0


# ----- 12. approvals and plans ------------------------------------------------------------------------------


async def test_an_approval_question_about_restored_and_script_held_values_shows_tokens(
    world: World, alice: Peer
) -> None:
    eve = CUSTOMERS[4]
    seen = await listing(alice)
    alice.person.asked.clear()
    code = (
        "c = crm.list_customers()['customers'][4]\n"
        "mail.send_mail(to=c['email'], subject='Hello ' + c['name'], body='Your phone ' + c['phone'])\n"
        f"mail.send_mail(to={seen.token(eve['name'])!r}, subject='Again',"
        f" body='card {seen.token(eve['name'], 'card')}')\n"
    )
    data = await run(alice, code)
    assert data["success"], data["error"]
    assert len(alice.person.asked) == 2, alice.person.asked
    for question in alice.person.asked:
        assert seen.token(eve["name"]) in question, question
    assert seen.token(eve["name"], "phone") in alice.person.asked[0]
    assert [r["to"] for r in records(world.mail, "send_mail")[-2:]] == [eve["email"], eve["email"]]


async def test_a_plans_calls_show_tokens_and_its_approval_sends_the_real_address(world: World, alice: Peer) -> None:
    eve = CUSTOMERS[4]
    seen = await listing(alice)
    email = seen.token(eve["name"])
    code = (
        "c = crm.list_customers()['customers'][4]\n"
        "mail.send_mail(to=c['email'], subject='Plan for ' + c['name'], body='Your IBAN ' + c['iban'])\n"
        f"mail.send_mail(to={email!r}, subject='Planned', body='written with a token')\n"
    )
    before = len(records(world.mail, "send_mail"))
    planned = await run(alice, code, mode="plan")
    assert planned["success"], planned["error"]
    calls = planned["plan"]["calls"]
    assert [c["arguments"] for c in calls] == [
        {"to": email, "subject": f"Plan for {eve['name']}", "body": f"Your IBAN {seen.token(eve['name'], 'iban')}"},
        {"to": email, "subject": "Planned", "body": "written with a token"},
    ]
    assert len(records(world.mail, "send_mail")) == before  # nothing was sent
    approved = await run(alice, code, approvePlan=planned["plan"]["planId"])
    assert approved["success"], approved["error"]
    sent = records(world.mail, "send_mail")[before:]
    assert [s["to"] for s in sent] == [eve["email"], eve["email"]]


async def test_the_cache_database_holds_no_planted_value(alice: Peer) -> None:
    """After every run above (cached scripts, audit entries, plans): nothing the host stored on disk carries a value
    in plaintext (run last among the in-process tests)."""
    seen = await listing(alice)
    stored = await run(alice, "# stored for the database scan\n" + listing_code("python"), cache="auto")
    assert stored["success"], stored["error"]
    called = await run(alice, f"crm.get_customer(email={seen.token(name_at(0))!r})")  # an audit entry with a token
    assert called["success"], called["error"]
    database = CACHE_DIR / "scripts.db"
    assert database.exists()
    found: dict[str, list[str]] = {}
    tokens: dict[str, int] = {}
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    text = cell.decode("utf-8", "replace") if isinstance(cell, bytes) else str(cell)
                    if hits := leaks(text, PLANTED):
                        found.setdefault(table, []).extend(hits)
                    tokens[table] = tokens.get(table, 0) + len(TOKEN.findall(text))
    assert not found, {table: sorted(set(values))[:6] for table, values in found.items()}
    assert tokens.get("audit") and tokens.get("scripts"), tokens  # what was scanned held the runs' data


# ----- 13. the desktop way: stdio, a minimal environment, every line of stdout ------------------------------

TEE = """
import subprocess, sys
out = open(sys.argv[1], "ab", buffering=0)
child = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=open(sys.argv[1] + ".stderr", "ab"))
assert child.stdout is not None
for line in child.stdout:
    out.write(line)
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
sys.exit(child.wait())
"""
"""Runs the server and copies every line it writes to stdout into a file, byte for byte (its log, stderr, goes to
that file's name + ``.stderr``)."""


async def test_the_desktop_way_over_stdio_no_line_of_stdout_carries_a_planted_value(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    home = tmp_path_factory.mktemp("desktop-home").resolve()
    crm, mail, stdout = home / "crm.jsonl", home / "mail.jsonl", home / "stdout.jsonl"
    servers = {
        "crm": crm_entry(crm, CRM_API_TOKEN=CRM_TOKEN),
        "mail": {**mail_entry(mail), "policy": {"default": "allow", "pii": {"sinks": {"send_mail": ["email"]}}}},
        "ledger": {**crm_entry(None, CRM_DATASET="ledger", CRM_API_TOKEN=LEDGER_TOKEN), "pii": "off"},
    }
    top_level = {"custom": PII_SETTINGS["custom"], "phoneRegions": PII_SETTINGS["phoneRegions"]}
    config = home / "mcp_servers.json"
    config.write_text(json.dumps({"mcpServers": servers, "pii": top_level}), encoding="utf-8")
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/sh",
        "TERM": "dumb",
        "CODE_MODE_PII": "tokenize",
    }
    serve = str(Path(sys.executable).with_name("mcp-code-mode"))
    params = StdioServerParameters(
        command=sys.executable, args=["-c", TEE, str(stdout), serve, "serve", "--config", str(config)], env=env, cwd="/"
    )
    carla = CUSTOMERS[2]
    try:
        with anyio.fail_after(300):
            async with Client(params, mode="legacy") as client:
                p = Peer(client, Person())
                seen = await listing(p)
                email, card = seen.token(carla["name"]), seen.token(carla["name"], "card")
                assert kind_of(email) == "EMAIL" and kind_of(card) == "CARD", seen.rows
                code = (
                    f"c = crm.get_customer(email={email!r})\n"
                    f"mail.send_mail(to={email!r}, subject='Hi', body='Dear customer, your card {card} ...')\n"
                    "print(c['name'], c['email'], c['notes'])\n"
                    "print(ledger.connection_info()['token'])\n"
                    "print(ledger.list_customers()['customers'][0]['email'])\n"
                )
                data = await run(p, code)
    finally:  # whatever happened, every line the server wrote is scanned (its log too)
        lines = stdout.read_bytes().decode("utf-8", errors="replace").splitlines() if stdout.exists() else []
        for line in lines:
            RECORDER.add("desktop stdout", line, PLANTED_DESKTOP)
        log = Path(f"{stdout}.stderr")
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if log.exists() else []:
            RECORDER.add("desktop stderr (the server's log)", line, PLANTED_DESKTOP)
    assert len(lines) >= 4, lines
    assert data["success"], data["error"]
    assert data["output"].splitlines()[0].startswith(f"{carla['name']} {email} ")
    assert data["output"].splitlines()[1:] == [SECRET, LEDGER[0]["email"]]  # "off" wins over CODE_MODE_PII
    assert last(crm, "get_customer") == {"email": carla["email"]}
    assert last(mail, "send_mail") == {
        "to": carla["email"],
        "subject": "Hi",
        "body": f"Dear customer, your card {card} ...",
    }
    # With every detector on (the default), the IP in Alice's notes is a token too.
    assert NOTES_IP not in seen.data["output"] and "[IP_1]" in seen.data["output"]
