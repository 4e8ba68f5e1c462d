#!/usr/bin/env python3
"""12. Privacy: what tokenizing costs per MB of output and per tool call.

    .venv/bin/python bench/pii.py [--reps 7] [--calls 300] [--mib 1]

Three measurements, each side by side in every repetition (the order of the two sides alternates):

- **mask per MB** (no run): ``RunPrivacy.mask_text`` over ``--mib`` MiB of JSON customer rows (an e-mail, a
  phone number, a card and an IBAN per row, about 12,000 values per MiB) and over as much text without
  personal data (log lines and code), with personal data tokenized (every detector on) and with secrets only
  (what every run pays, whatever the config). Median milliseconds per MiB.
- **output per MB** (a run): a ``cpython`` script printing ``--mib`` MiB of customer rows, on two engines in
  this process over the same fixture server, one with ``CODE_MODE_PII=off`` and one with ``tokenize`` (the
  output cap raised so that all of it is kept); the whole ``execute`` is timed. The difference is the cost of
  tokenizing a run's output end to end.
- **per tool call** (a run): a script making ``--calls`` calls of the fixture's ``echo`` with a customer line
  (an e-mail, a phone number, a card) on both engines: with tokenizing, each result is read for personal data
  on its way to the script (``harvest``) and the arguments are searched for tokens (``restore``). A third
  script on the tokenizing engine sends a token in every call's arguments (each restored). Median per call,
  and the ratio to the engine without tokenizing.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Section, engine, fixture_entry, median, ms, parser, quiesce, quiet_logs, ratio, run_section, timed

RUNNER = "cpython"
"""The runs' runner: real CPython, so that the script's own time is small and steady beside the host's."""


def customer_rows(mib: float, seed: int = 7) -> str:
    """``mib`` MiB of JSON customer rows, one per line."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    i = 0
    while size < mib * 1024 * 1024:
        card = luhn(f"4{rng.randrange(10**13, 10**14)}")
        row = {
            "id": i,
            "name": f"Customer {i}",
            "email": f"user{i}.{rng.randrange(10**6)}@example{i % 97}.com",
            "phone": f"+1 415-555-{rng.randrange(100, 199):04d}",
            "card": card,
            "iban": "DE89370400440532013000",
            "note": "prefers e-mail; renewal due next quarter",
        }
        line = json.dumps(row)
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)


def luhn(partial: str) -> str:
    """``partial`` with its Luhn check digit appended."""
    digits = [int(d) for d in partial][::-1]
    total = sum(sum(divmod(d * 2, 10)) if i % 2 == 0 else d for i, d in enumerate(digits))
    return partial + str((10 - total % 10) % 10)


def plain_text(mib: float) -> str:
    line = "2026-12-01T10:00:00Z INFO worker-3 handled request /api/v2/items in 12.5 ms (status 200)\n"
    code = "def handler(request):\n    return {'ok': True, 'items': [x for x in range(10)]}\n"
    block = line * 8 + code * 4
    return (block * int(mib * 1024 * 1024 / len(block) + 1))[: int(mib * 1024 * 1024)]


PRINT = """
import json, random
rng = random.Random(7)
out = []
for i in range({rows}):
    out.append(json.dumps({{"id": i, "email": f"user{{i}}@example{{i % 97}}.com",
                           "phone": f"+1 415-555-{{rng.randrange(100, 199):04d}}", "card": "4111 1111 1111 1111",
                           "note": "prefers e-mail; renewal due next quarter"}}))
print("\\n".join(out))
"""
CALLS = """
line = "Alice <alice@example.com>, +1 415-555-0132, card 4111 1111 1111 1111"
for i in range({n}):
    fixture.echo(text=line)
"""
CALLS_WITH_TOKEN = """
for i in range({n}):
    fixture.echo(text="to [EMAIL_1] about order " + str(i))
"""


async def measure(args: argparse.Namespace, section: Section) -> None:
    from mcp_code_mode.governance import PiiPolicy
    from mcp_code_mode.privacy.config import PrivacyConfig
    from mcp_code_mode.privacy.core import Privacy
    from mcp_code_mode.privacy.seal import Sealer
    from mcp_code_mode.privacy.vault import MemoryVault

    quiet_logs()
    reps = args.reps
    rows, plain = customer_rows(args.mib), plain_text(args.mib)
    values = rows.count("@") * 4

    def book(active: bool) -> Privacy:
        return Privacy(
            config=PrivacyConfig(),
            tokenize={"crm": active},
            sinks={"crm": PiiPolicy().kinds_for},
            secrets=["sk_live_0123456789abcdef"],
            vault=MemoryVault(),
            sealer=Sealer.ephemeral(),
        )

    # ----- mask per MB ---------------------------------------------------------------------------------
    times: dict[tuple[str, str], list[float]] = {}
    for rep in range(reps):
        sides = [("tokenize", True), ("secrets only", False)]
        for label, active in sides if rep % 2 == 0 else sides[::-1]:
            for text_name, text in (("customer rows", rows), ("no personal data", plain)):
                run = book(active).run(f"c{rep}", tenant="default")
                started = time.perf_counter()
                run.mask_text(text)
                times.setdefault((label, text_name), []).append((time.perf_counter() - started) * 1000 / args.mib)
    table = section.table(
        f"mask_text per MiB (median of {reps}; customer rows hold about {values / args.mib:,.0f} values per MiB):",
        ["text", "tokenize: ms/MiB", "secrets only: ms/MiB", "tokenize: MiB/s"],
    )
    for text_name in ("customer rows", "no personal data"):
        on, off = median(times[("tokenize", text_name)]), median(times[("secrets only", text_name)])
        table.rows.append([text_name, ms(on), ms(off), f"{1000 / on:.1f}"])

    # ----- runs: output per MB and per tool call ------------------------------------------------------
    with tempfile.TemporaryDirectory(prefix="bench-pii-") as folder:
        base = Path(folder)
        cap = int(args.mib * 1024 * 1024 * 2)  # the whole output is kept (and masked), not the default 100,000
        common = {"pool_size": 0, "cpython_pool_size": 1, "pyodide_pool_size": 0, "max_output_chars": cap}
        off = engine({"fixture": fixture_entry()}, base / "off", pii="off", **common)
        on = engine({"fixture": fixture_entry()}, base / "on", pii="tokenize", **common)
        rows_in_run = int(args.mib * 1024 * 1024 / 150)
        print_code = PRINT.format(rows=rows_in_run)
        calls_code = CALLS.format(n=args.calls)
        token_code = CALLS_WITH_TOKEN.format(n=args.calls)
        async with off, on:
            seeded = await on.execute('print(fixture.echo(text="alice@example.com"))', runner=RUNNER, cache="off")
            assert "[EMAIL_1]" in seeded.output, seeded.output
            results: dict[str, list[float]] = {}

            async def once(name: str, cm: Any, code: str) -> None:
                await quiesce()
                elapsed, result = await timed(lambda: cm.execute(code, runner=RUNNER, cache="off"))
                if not result.success:
                    raise SystemExit(f"{name}: {result.error}")
                results.setdefault(name, []).append(elapsed)

            for cm in (off, on):  # unmeasured first runs
                await cm.execute(print_code, runner=RUNNER, cache="off")
                await cm.execute(calls_code, runner=RUNNER, cache="off")
            for rep in range(reps):
                pairs = [("print off", off, print_code), ("print on", on, print_code)]
                pairs += [("calls off", off, calls_code), ("calls on", on, calls_code)]
                pairs += [("calls on, token restored", on, token_code)]
                for name, cm, code in pairs if rep % 2 == 0 else pairs[::-1]:
                    await once(name, cm, code)
    p_off, p_on = median(results["print off"]), median(results["print on"])
    table = section.table(
        f"A {RUNNER} run printing {args.mib:g} MiB of customer rows ({rows_in_run:,} rows), median of {reps}:",
        ["engine", "run", "per MiB over off"],
    )
    table.rows.append(["CODE_MODE_PII=off", ms(p_off), ""])
    table.rows.append(["CODE_MODE_PII=tokenize", ms(p_on), ms((p_on - p_off) / args.mib)])
    c_off, c_on, c_tok = (median(results[k]) for k in ("calls off", "calls on", "calls on, token restored"))
    n = args.calls
    table = section.table(
        f"{n} tool calls (fixture.echo with an e-mail, a phone and a card), median of {reps}:",
        ["engine", "run", "per call", "ratio to off"],
    )
    table.rows.append(["CODE_MODE_PII=off", ms(c_off), f"{c_off / n * 1000:.0f} µs", "1.00×"])
    table.rows.append(["tokenize", ms(c_on), f"{c_on / n * 1000:.0f} µs", ratio(c_on / c_off)])
    table.rows.append(["tokenize, a token in each call", ms(c_tok), f"{c_tok / n * 1000:.0f} µs", ratio(c_tok / c_off)])
    section.notes.append(
        "The per-call cost is what the host adds: reading each result for personal data (harvest) and each "
        "call's arguments for tokens (restore); the script's work is the same on both engines."
    )


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--mib", type=float, default=1.0)
    args = p.parse_args()
    section = Section("pii", "12. Privacy: tokenizing per MB of output and per tool call", "")
    return run_section(measure, section, args)


if __name__ == "__main__":
    raise SystemExit(main())
