"""The vault's contract, kept alike by MemoryVault and DatabaseVault; and what only the persisted vault does:
processes that share its file share tokens, nothing is written in plaintext, another key reads nothing."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.cache import AuditLog
from mcp_code_mode.cache.schema import SCHEMA_VERSION
from mcp_code_mode.privacy.seal import Sealer
from mcp_code_mode.privacy.store import REFRESH_SLACK, DatabaseVault
from mcp_code_mode.privacy.vault import Entry, MemoryVault, Vault, kind_of

TTL = 100.0
START = 1_800_000_000.0
ALICE = "alice@example.com"
BOB = "bob@example.org"
PHONE = "+44 20 7946 0958"


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


AnyVault = MemoryVault | DatabaseVault
MakeVault = Callable[..., AnyVault]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "database"])
def make_vault(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[MakeVault]:
    """Makes a vault of the parameter's kind on the test's clock: ``make_vault(ttl=…, max_values=…)``."""
    made: list[AnyVault] = []
    key = os.urandom(32)

    def make(ttl: float = TTL, max_values: int = 1000) -> AnyVault:
        vault: AnyVault
        if request.param == "memory":
            vault = MemoryVault(ttl, max_values, clock=clock)
        else:
            vault = DatabaseVault(tmp_path / "scripts.db", Sealer(key), ttl, max_values, clock=clock)
        made.append(vault)
        return vault

    yield make
    for vault in made:
        vault.close()


@pytest.fixture
def vault(make_vault: MakeVault) -> AnyVault:
    return make_vault()


# ----- the contract, for both --------------------------------------------------------------------


def test_both_are_vaults(vault: AnyVault) -> None:
    checked: Vault = vault  # checked by the type checker: both satisfy the protocol
    assert checked.lookup("a", "[EMAIL_1]", tenant="default") is None


def test_the_same_value_gets_the_same_token(vault: AnyVault) -> None:
    token = vault.token_for("a", "email", ALICE, tenant="default")
    assert token == "[EMAIL_1]"
    assert vault.token_for("a", "email", ALICE, tenant="default") == token
    assert vault.token_for("a", "email", ALICE, origin="crm", tenant="default") == token
    assert vault.lookup("a", token, tenant="default") == Entry(token, "email", ALICE, frozenset({"crm"}))


def test_numbers_count_per_kind(vault: AnyVault) -> None:
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    assert vault.token_for("a", "email", BOB, tenant="default") == "[EMAIL_2]"
    assert vault.token_for("a", "phone", PHONE, tenant="default") == "[PHONE_1]"
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    assert vault.lookup("a", "[EMAIL_2]", tenant="default") == Entry("[EMAIL_2]", "email", BOB)
    assert vault.lookup("a", "[PHONE_1]", tenant="default") == Entry("[PHONE_1]", "phone", PHONE)
    assert vault.lookup("a", "[PHONE_2]", tenant="default") is None


def test_a_value_is_matched_exactly_kind_and_string(vault: AnyVault) -> None:
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    assert vault.token_for("a", "email", ALICE.upper(), tenant="default") == "[EMAIL_2]"
    assert vault.token_for("a", "email", f" {ALICE}", tenant="default") == "[EMAIL_3]"
    assert vault.token_for("a", "contact", ALICE, tenant="default") == "[CONTACT_1]"


def test_kinds_with_underscores(vault: AnyVault) -> None:
    token = vault.token_for("a", "employee_id", "E-0042", tenant="default")
    assert token == "[EMPLOYEE_ID_1]"
    assert kind_of(token) == "employee_id"
    assert vault.token_for("a", "employee", "E-0042", tenant="default") == "[EMPLOYEE_1]"
    assert vault.lookup("a", token, tenant="default") == Entry(token, "employee_id", "E-0042")
    assert vault.lookup("a", "[EMPLOYEE_1]", tenant="default") == Entry("[EMPLOYEE_1]", "employee", "E-0042")


def test_values_of_any_text(vault: AnyVault) -> None:
    for value in ["", "Zoë Ünal ☃", "line\nbreak\x00nul", "\ud800 lone surrogate", "x" * 10_000]:
        token = vault.token_for("a", "note", value, tenant="default")
        assert token is not None
        entry = vault.lookup("a", token, tenant="default")
        assert entry is not None and entry.value == value


def test_clients_are_unrelated(vault: AnyVault) -> None:
    alice = vault.token_for("a", "email", ALICE, tenant="default")
    assert vault.lookup("b", alice or "", tenant="default") is None
    bob = vault.token_for("b", "email", BOB, tenant="default")
    assert bob == alice == "[EMAIL_1]"  # each client counts from 1
    assert vault.lookup("b", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", BOB)
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", ALICE)
    assert (
        vault.token_for("b", "email", ALICE, tenant="default") == "[EMAIL_2]"
    )  # the same value in another client: its own token
    assert vault.lookup("a", "[EMAIL_2]", tenant="default") is None


def test_origins_accumulate(vault: AnyVault) -> None:
    token = vault.token_for("a", "email", ALICE, tenant="default")
    assert token is not None
    assert vault.lookup("a", token, tenant="default") == Entry(token, "email", ALICE, frozenset())
    vault.token_for("a", "email", ALICE, origin="crm", tenant="default")
    vault.token_for("a", "email", ALICE, origin="mail", tenant="default")
    vault.token_for("a", "email", ALICE, origin="crm", tenant="default")
    vault.token_for("a", "email", ALICE, tenant="default")
    vault.token_for("a", "email", ALICE, origin="", tenant="default")
    entry = vault.lookup("a", token, tenant="default")
    assert entry is not None and entry.origins == frozenset({"crm", "mail"})
    assert vault.token_for("b", "email", ALICE, origin="files", tenant="default") == "[EMAIL_1]"
    entry_b = vault.lookup("b", "[EMAIL_1]", tenant="default")
    assert entry_b is not None and entry_b.origins == frozenset({"files"})


def test_a_token_expires_ttl_after_it_was_given(vault: AnyVault, clock: Clock) -> None:
    token = vault.token_for("a", "email", ALICE, tenant="default")
    assert token is not None
    clock.advance(TTL - 1)
    assert vault.lookup("a", token, tenant="default") is not None  # which moves its expiry: TTL from now
    clock.advance(TTL)
    assert vault.lookup("a", token, tenant="default") is None
    assert vault.lookup("a", token, tenant="default") is None


def test_an_expired_value_gets_a_new_number_never_the_old_one(vault: AnyVault, clock: Clock) -> None:
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    clock.advance(TTL)
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_2]"
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is None
    assert vault.lookup("a", "[EMAIL_2]", tenant="default") == Entry("[EMAIL_2]", "email", ALICE)
    clock.advance(TTL)
    assert vault.lookup("a", "[EMAIL_2]", tenant="default") is None  # looked up after it expired: dropped
    assert vault.token_for("a", "email", BOB, tenant="default") == "[EMAIL_3]"
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_4]"


def test_giving_a_token_again_moves_its_expiry(vault: AnyVault, clock: Clock) -> None:
    vault.token_for("a", "email", ALICE, tenant="default")
    clock.advance(TTL * 0.6)
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    clock.advance(TTL * 0.6)
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", ALICE)


def test_a_lookup_moves_the_expiry(vault: AnyVault, clock: Clock) -> None:
    vault.token_for("a", "email", ALICE, tenant="default")
    for _ in range(5):
        clock.advance(TTL * 0.9)
        assert vault.lookup("a", "[EMAIL_1]", tenant="default") is not None
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    clock.advance(TTL)
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is None


def test_a_full_vault_gives_no_token_until_one_expires(make_vault: MakeVault, clock: Clock) -> None:
    vault = make_vault(max_values=2)
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    clock.advance(TTL / 2)
    assert vault.token_for("a", "phone", PHONE, tenant="default") == "[PHONE_1]"
    assert vault.token_for("a", "email", BOB, tenant="default") is None
    assert vault.token_for("a", "email", BOB, tenant="default") is None
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"  # a value it holds still has its token
    assert vault.token_for("b", "email", BOB, tenant="default") == "[EMAIL_1]"  # the cap is per client
    clock.advance(TTL / 2)  # PHONE_1 still lives; EMAIL_1 was given again at TTL/2 and lives too
    assert vault.token_for("a", "email", BOB, tenant="default") is None
    clock.advance(TTL / 2)  # both expired
    assert vault.token_for("a", "email", BOB, tenant="default") == "[EMAIL_2]"  # room again; no number given twice
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is None
    assert vault.lookup("a", "[PHONE_1]", tenant="default") is None
    assert vault.token_for("a", "email", "carol@example.net", tenant="default") == "[EMAIL_3]"
    assert vault.token_for("a", "email", "dave@example.net", tenant="default") is None


def test_forget_drops_a_clients_tokens_and_counters(vault: AnyVault) -> None:
    vault.token_for("a", "email", ALICE, tenant="default")
    vault.token_for("a", "email", BOB, tenant="default")
    vault.token_for("a", "phone", PHONE, tenant="default")
    vault.token_for("b", "email", BOB, tenant="default")
    assert vault.size("a", tenant="default") == 3
    vault.forget("a", tenant="default")
    assert vault.size("a", tenant="default") == 0
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is None
    assert vault.lookup("a", "[PHONE_1]", tenant="default") is None
    assert vault.lookup("b", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", BOB)
    assert (
        vault.token_for("a", "email", BOB, tenant="default") == "[EMAIL_1]"
    )  # a forgotten name is not meant to come back
    vault.forget("nobody", tenant="default")


def test_prune_drops_expired_tokens_and_says_how_many(vault: AnyVault, clock: Clock) -> None:
    assert vault.prune() == 0
    vault.token_for("a", "email", ALICE, tenant="default")
    vault.token_for("b", "email", ALICE, tenant="default")
    clock.advance(TTL / 2)
    vault.token_for("a", "email", BOB, tenant="default")
    clock.advance(TTL / 2)
    assert vault.prune() == 2
    assert vault.prune() == 0
    assert vault.size("a", tenant="default") == 1 and vault.size("b", tenant="default") == 0
    assert vault.lookup("a", "[EMAIL_2]", tenant="default") == Entry("[EMAIL_2]", "email", BOB)
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_3]"  # the counters stayed
    assert vault.token_for("b", "email", ALICE, tenant="default") == "[EMAIL_2]"


def test_lookup_of_what_is_not_a_token(vault: AnyVault) -> None:
    vault.token_for("a", "email", ALICE, tenant="default")
    for text in ["", "EMAIL_1", "[EMAIL_1", "[email_1]", "[EMAIL_0]", "[EMAIL]", ALICE, "[EMAIL_1] "]:
        assert vault.lookup("a", text, tenant="default") is None
    assert vault.lookup("nobody", "[EMAIL_1]", tenant="default") is None


def test_bad_settings_are_refused(make_vault: MakeVault) -> None:
    with pytest.raises(ValueError):
        make_vault(ttl=0)
    with pytest.raises(ValueError):
        make_vault(max_values=0)


def test_threads_of_one_vault_agree(vault: AnyVault) -> None:
    values = [f"user{i}@example.com" for i in range(40)]
    results: list[dict[str, str | None]] = []
    start = threading.Barrier(4)

    def work(seed: int) -> None:
        order = values[:]
        random.Random(seed).shuffle(order)
        start.wait()
        results.append({v: vault.token_for("a", "email", v, tenant="default") for v in order})

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert all(r == results[0] for r in results)
    assert sorted(str(t) for t in results[0].values()) == sorted(f"[EMAIL_{n}]" for n in range(1, 41))


# ----- the persisted vault -----------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "scripts.db"


@pytest.fixture
def key() -> bytes:
    return os.urandom(32)


@pytest.fixture
def opened(db: Path, key: bytes, clock: Clock) -> Iterator[Callable[..., DatabaseVault]]:
    """Opens DatabaseVaults on the test's file and clock: ``opened()`` with the test's key, ``opened(other)``."""
    vaults: list[DatabaseVault] = []

    def open_vault(with_key: bytes | None = None, **kwargs: Any) -> DatabaseVault:
        vault = DatabaseVault(db, Sealer(key if with_key is None else with_key), clock=clock, **kwargs)
        vaults.append(vault)
        return vault

    yield open_vault
    for vault in vaults:
        vault.close()


def raw(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


def test_opening_creates_and_migrates_the_cache_file(db: Path, opened: Callable[..., DatabaseVault]) -> None:
    vault = opened()
    assert vault.problems == []
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with AuditLog(db) as log:  # the same file as the audit log and the scripts
        assert log.problems == []
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"


def test_two_vaults_on_one_file_share_tokens(opened: Callable[..., DatabaseVault]) -> None:
    one, two = opened(), opened()
    assert one.token_for("a", "email", ALICE, origin="crm", tenant="default") == "[EMAIL_1]"
    assert two.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", ALICE, frozenset({"crm"}))
    assert two.token_for("a", "email", ALICE, origin="mail", tenant="default") == "[EMAIL_1]"
    assert two.token_for("a", "email", BOB, tenant="default") == "[EMAIL_2]"
    assert one.lookup("a", "[EMAIL_1]", tenant="default") == Entry(
        "[EMAIL_1]", "email", ALICE, frozenset({"crm", "mail"})
    )
    assert one.token_for("a", "email", "carol@example.net", tenant="default") == "[EMAIL_3]"
    two.forget("a", tenant="default")
    assert one.lookup("a", "[EMAIL_1]", tenant="default") is None


def test_tokens_survive_a_restart(opened: Callable[..., DatabaseVault]) -> None:
    first = opened()
    first.token_for("a", "email", ALICE, tenant="default")
    first.close()
    again = opened()
    assert again.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", ALICE)
    assert again.token_for("a", "email", BOB, tenant="default") == "[EMAIL_2]"


def test_a_number_is_never_given_twice_across_vaults_even_after_prune(
    opened: Callable[..., DatabaseVault], clock: Clock
) -> None:
    one, two = opened(), opened()
    assert one.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    clock.advance(86_400 * 2)
    assert two.prune() == 1
    assert two.token_for("a", "email", BOB, tenant="default") == "[EMAIL_2]"
    assert one.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_3]"


def test_concurrent_vaults_give_one_token_per_value(opened: Callable[..., DatabaseVault]) -> None:
    vaults = [opened(), opened()]
    values = [f"person{i}@example.com" for i in range(60)]
    results: list[dict[str, str | None]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def work(vault: DatabaseVault, seed: int) -> None:
        order = values[:]
        random.Random(seed).shuffle(order)
        start.wait()
        try:
            results.append({v: vault.token_for("a", "email", v, origin=f"s{seed}", tenant="default") for v in order})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(vaults[i % 2], i)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 6 and all(r == results[0] for r in results)
    assert sorted(str(t) for t in results[0].values()) == sorted(f"[EMAIL_{n}]" for n in range(1, 61))
    entry = vaults[0].lookup("a", results[0][values[0]] or "", tenant="default")
    assert entry is not None and entry.value == values[0]
    assert entry.origins == frozenset(f"s{i}" for i in range(6))


REPLICA = """
import json, random, sys, time
from pathlib import Path
from mcp_code_mode.privacy.seal import Sealer
from mcp_code_mode.privacy.store import DatabaseVault

db, key, me, peers, seed = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:-1], int(sys.argv[-1])
vault = DatabaseVault(db, Sealer(bytes.fromhex(key)))
values = [f"replica{i}@example.com" for i in range(80)]
random.Random(seed).shuffle(values)
(db.parent / me).touch()
deadline = time.monotonic() + 60
while not all((db.parent / p).exists() for p in peers) and time.monotonic() < deadline:
    time.sleep(0.005)
print(json.dumps({v: vault.token_for("shared", "email", v, origin=me, tenant="default") for v in values}))
vault.close()
"""


@pytest.mark.slow
def test_replica_processes_give_one_token_per_value(db: Path, key: bytes) -> None:
    names = ["r0", "r1"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REPLICA, str(db), key.hex(), name, *names, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, name in enumerate(names)
    ]
    results: list[dict[str, str]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert all(r == results[0] for r in results)
    assert sorted(results[0].values()) == sorted(f"[EMAIL_{n}]" for n in range(1, 81))
    some = next(iter(results[0]))
    with DatabaseVault(db, Sealer(key)) as vault:  # on the real clock, as the replicas were
        assert vault.lookup("shared", results[0][some], tenant="default") == Entry(
            results[0][some], "email", some, frozenset(names)
        )


def test_nothing_is_written_in_plaintext(db: Path, opened: Callable[..., DatabaseVault]) -> None:
    client = "session-Zanzibar-4417-quokka"
    planted = {
        "email": "planted.marmoset.7731@example.org",
        "phone": "+44 20 7946 0958",
        "card": "4111111111111111",
        "iban": "GB82WEST12345698765432",
        "name": "Ophelia Quarternight-Smythe",
    }
    vault = opened()
    for kind, value in planted.items():
        vault.token_for(client, kind, value, origin="crm", tenant="default")
    assert (
        vault.lookup(client, "[EMAIL_1]", tenant="default") is not None
    )  # and a lookup writes nothing readable either

    def contents() -> bytes:
        return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))

    written = contents()
    assert db.with_name(db.name + "-wal").exists()
    assert b"[EMAIL_1]" in written and b"crm" in written  # what is stored in plaintext is found: a fair search
    secrets = [*planted.values(), client]
    for text in secrets:
        for encoded in (text.encode(), text.encode("utf-16-le")):
            assert encoded not in written, text
    vault.close()
    with raw(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    written = contents()
    assert b"[EMAIL_1]" in written
    assert all(text.encode() not in written for text in secrets)


def test_the_columns_hold_macs_and_sealed_values(db: Path, opened: Callable[..., DatabaseVault], key: bytes) -> None:
    vault = opened()
    vault.token_for("session-a", "email", ALICE, origin="crm", tenant="default")
    sealer = Sealer(key)
    with raw(db) as conn:
        rows = conn.execute("SELECT client, token, kind, number, value_mac, sealed, origins FROM pii_vault").fetchall()
        counters = conn.execute("SELECT client, kind, last FROM pii_counters").fetchall()
    owner = sealer.mac("client", "session-a")
    assert len(rows) == 1
    client, token, kind, number, value_mac, sealed, origins = rows[0]
    assert (client, token, kind, number, origins) == (owner, "[EMAIL_1]", "email", 1, '["crm"]')
    assert value_mac == sealer.mac("value", "session-a", "email", ALICE)
    assert sealer.open(sealed, owner + b"[EMAIL_1]") == ALICE.encode()
    assert counters == [(owner, "email", 1)]


def test_another_key_reads_nothing_and_collides_with_nothing(
    opened: Callable[..., DatabaseVault], clock: Clock
) -> None:
    mine, theirs = opened(), opened(os.urandom(32))
    assert mine.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    assert theirs.lookup("a", "[EMAIL_1]", tenant="default") is None
    assert theirs.token_for("a", "email", BOB, tenant="default") == "[EMAIL_1]"  # its own numbering, in rows of its own
    assert theirs.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_2]"
    assert theirs.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", BOB)
    assert mine.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", ALICE)
    assert mine.token_for("a", "email", BOB, tenant="default") == "[EMAIL_2]"
    assert mine.lookup("a", "[EMAIL_2]", tenant="default") == Entry("[EMAIL_2]", "email", BOB)
    theirs.forget("a", tenant="default")
    assert mine.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", ALICE)
    assert mine.size("a", tenant="default") == 2 and theirs.size("a", tenant="default") == 0


def test_an_altered_row_is_looked_up_as_none(db: Path, opened: Callable[..., DatabaseVault]) -> None:
    vault = opened()
    vault.token_for("a", "email", ALICE, tenant="default")
    vault.token_for("a", "email", BOB, tenant="default")
    vault.token_for("a", "phone", PHONE, tenant="default")
    with raw(db) as conn:
        sealed: bytes = conn.execute("SELECT sealed FROM pii_vault WHERE token = '[EMAIL_1]'").fetchone()[0]
        flipped = bytes([*sealed[:-1], sealed[-1] ^ 1])
        conn.execute("UPDATE pii_vault SET sealed = ? WHERE token = '[EMAIL_1]'", (flipped,))
        # a sealed value moved to another row does not open there
        conn.execute(
            "UPDATE pii_vault SET sealed = (SELECT sealed FROM pii_vault WHERE token = '[PHONE_1]')"
            " WHERE token = '[EMAIL_2]'"
        )
        conn.execute("UPDATE pii_vault SET kind = 'email' WHERE token = '[PHONE_1]'")  # the kind, under its MAC
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is None
    assert vault.lookup("a", "[EMAIL_2]", tenant="default") is None
    assert vault.lookup("a", "[PHONE_1]", tenant="default") is None
    with raw(db) as conn:
        conn.execute("UPDATE pii_vault SET sealed = X'00', value_mac = 'text' WHERE token = '[PHONE_1]'")
    assert vault.lookup("a", "[PHONE_1]", tenant="default") is None


def test_a_value_sealed_under_another_key_is_looked_up_as_none(
    db: Path, opened: Callable[..., DatabaseVault], key: bytes
) -> None:
    vault = opened()
    vault.token_for("a", "email", ALICE, tenant="default")
    other = Sealer(os.urandom(32))
    owner = Sealer(key).mac("client", "a")
    with raw(db) as conn:
        conn.execute(
            "UPDATE pii_vault SET sealed = ? WHERE token = '[EMAIL_1]'",
            (other.seal(ALICE.encode(), owner + b"[EMAIL_1]"),),
        )
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is None


def test_a_counter_behind_its_rows_skips_the_numbers_in_use(db: Path, opened: Callable[..., DatabaseVault]) -> None:
    vault = opened()
    vault.token_for("a", "email", ALICE, tenant="default")
    vault.token_for("a", "email", BOB, tenant="default")
    with raw(db) as conn:
        conn.execute("DELETE FROM pii_counters")  # as if by hand: the rows stay, their numbers are in use
    assert vault.token_for("a", "email", "carol@example.net", tenant="default") == "[EMAIL_3]"
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") == Entry("[EMAIL_1]", "email", ALICE)
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    assert vault.token_for("a", "email", "dave@example.net", tenant="default") == "[EMAIL_4]"
    with raw(db) as conn:
        conn.execute("UPDATE pii_counters SET last = 1")
    for n in range(5, 8):
        assert vault.token_for("a", "email", f"user{n}@example.net", tenant="default") == f"[EMAIL_{n}]"


def test_a_file_that_is_not_a_database_is_moved_aside(db: Path, opened: Callable[..., DatabaseVault]) -> None:
    db.write_bytes(b"not a database at all" * 100)
    vault = opened()
    assert vault.problems and "moved" in vault.problems[0]
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"


def test_a_closed_vault_cannot_be_used(opened: Callable[..., DatabaseVault]) -> None:
    vault = opened()
    vault.close()
    with pytest.raises(sqlite3.ProgrammingError):
        vault.token_for("a", "email", ALICE, tenant="default")
    vault.close()


def test_a_token_used_again_within_the_slack_is_not_written(
    db: Path, opened: Callable[..., DatabaseVault], clock: Clock
) -> None:
    vault = opened(ttl=TTL)  # its slack: REFRESH_SLACK or a thousandth of the TTL, whichever is less
    slack = min(REFRESH_SLACK, TTL / 1000)

    def expiry() -> float:
        with raw(db) as conn:
            at: float = conn.execute("SELECT expires_at FROM pii_vault").fetchone()[0]
        return at

    vault.token_for("a", "email", ALICE, tenant="default")
    clock.advance(slack / 2)
    assert vault.token_for("a", "email", ALICE, tenant="default") == "[EMAIL_1]"
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is not None
    assert expiry() == START + TTL
    assert (
        vault.token_for("a", "email", ALICE, origin="crm", tenant="default") == "[EMAIL_1]"
    )  # a new origin is written
    assert expiry() == START + slack / 2 + TTL
    entry = vault.lookup("a", "[EMAIL_1]", tenant="default")
    assert entry is not None and entry.origins == frozenset({"crm"})
    clock.advance(slack * 2)  # past the slack: the lookup moves the expiry
    assert vault.lookup("a", "[EMAIL_1]", tenant="default") is not None
    assert expiry() == clock.now + TTL
