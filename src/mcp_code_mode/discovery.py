"""``search_tools`` and ``get_tool_stubs``: finding the few downstream tools a script needs.

``ToolRanker`` ranks tools for a task as a person phrases it ("save a string to disk" → ``write_file``):
BM25F over the tool's name (split: ``approve_invoice`` → approve invoice), description, parameter names and
the server, with light stemming and a small table of task-language synonyms that expands the query
(``TASK_SYNONYMS``: "sign off" → approve, "how many" → count, "bill" → invoice), fused with the cosine
similarity of static embeddings (WordLlama, the script cache's embedder) by a weighted sum of the two
scores, each scaled by its best. It was chosen by measurement on the labelled set of ``tests/discovery``
(``bench/tool_search.py``). The index is in memory (numpy) and rebuilt whenever the pool's tool version
changes, so a server that adds or removes tools is reflected by the next call.
"""

from __future__ import annotations

import difflib
import math
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._lazy import LazyModule
from .cache.describe import split_identifier
from .cache.embed import Embedder
from .errors import UnsupportedError
from .stubs.index import StubIndex, ToolSpec
from .stubs.python import render_server, render_tool

Detail = Literal["name", "summary", "full"]
DETAILS: tuple[str, ...] = ("name", "summary", "full")
ToolKey = tuple[str, str]
"""``(server name, tool name)``."""

FIELD_WEIGHTS = {"name": 4.0, "description": 1.0, "params": 0.4, "server": 0.5}
"""BM25F weight of each field's term frequencies."""
BM25_K1 = 1.2
BM25_B = 0.75
SYNONYM_WEIGHT = 0.7
"""Weight of a term the synonym table added, against 1 for a word of the query."""
SEMANTIC_WEIGHT = 0.2
"""Weight of the embedding's cosine (scaled by the best) against BM25 (scaled by the best)."""

STOPWORDS = frozenset(
    """a an the of to in on for and or is are be with by from at it its this that these those what which how
    my our your me i we you do does did can could should would will please some any using use via into as than
    then there here about up out so just want need let s t has have had was were been being them they
    their his her him she he us one""".split()
)

TASK_SYNONYMS: tuple[str, ...] = (
    # what is done
    "create, add, new, make, register, insert, set up, open, remember",
    "get, fetch, retrieve, show, view, see, display, look at, inspect, details, check, pull up",
    "list, all, browse, enumerate, every, everything, entire, whole",
    "update, change, edit, modify, alter, adjust, amend, correct, set",
    "update, reschedule, postpone, push back, push, delay, bring forward",
    "delete, remove, erase, drop, forget, destroy, discard, get rid of, purge, wipe",
    "search, find, look up, lookup, query, locate, seek, look for",
    "count, how many, number of, total number, headcount, tally",
    "approve, sign off, ok, okay, authorize, authorise, greenlight, accept",
    "reject, decline, deny, refuse, turn down",
    "cancel, stop, abort, call off, discontinue, void, revoke, kill",
    "pause, suspend, put on hold, on hold, freeze, stop for",
    "resume, unpause, reactivate, restart, continue",
    "reopen, undo, open again, revert",
    "send, email, mail, notify, ping, message, dispatch",
    "export, download, dump",
    "import, upload, attach",
    "move, rename, transfer, relocate",
    "merge, combine, deduplicate, consolidate, duplicate, become one",
    "assign, hand over, hand, delegate, allocate, reassign, give to",
    "close, resolve, resolved, solve, solved, finish, complete, done",
    "escalate, bump, urgency, urgent, priority",
    "schedule, book, reserve, arrange, plan, set up",
    "pay, settle, reimburse, pay back, payout",
    "refund, money back, give back",
    "charge, bill, debit, collect",
    "write, save, store, persist, put, record, log, remember, memorize, keep",
    "log, record, write down, jot down, note down, note, track",
    "read, open, view, contents, inside, load, text of",
    "compress, zip, gzip, pack",
    "sum, add up, total, plus, addition",
    "echo, repeat, say back",
    "terminate, let go, fire, dismiss, lay off, offboard",
    "hire, onboard, recruit, new hire",
    "convert, turn into",
    "track, where is, tracking",
    "subscribe, subscriber, sign up, enroll, opt in, join",
    "unsubscribe, opt out",
    "deactivate, disable, block, lock out",
    "toggle, turn on, turn off, switch on, switch off",
    "multiple, several, many, at once, batch, bulk",
    "share, give access, send to",
    "announcement, announce, tell everyone, whole company, company wide, broadcast, all hands",
    "post, publish, advertise",
    "calculate, compute, work out, figure out, what applies",
    "reconcile, match",
    "fulfill, fulfil, ship, pack, send out",
    "return, send back, rma",
    "quote, estimate, how much would, rates, cost to",
    "stats, statistics, metrics, analytics, performance, perform, results, how did",
    "review, evaluate, appraisal, feedback",
    "interview, screening, call with a candidate",
    # what it is done to
    "file, document, disk",
    "directory, folder, dir, directories, nested",
    "image, picture, photo, media, screenshot",
    "invoice, bill, bills",
    "customer, client, buyer",
    "employee, staff, worker, personnel, colleague, engineer, team member",
    "ticket, support case, case, complaint, problem, incident, support request",
    "event, meeting, appointment, standup, call, all hands, review",
    "invitation, invite, attendee, participant, guest, invitee",
    "calendar, agenda, diary",
    "time off, holiday, holidays, vacation, leave, pto, days off",
    "subscription, membership, plan, tier",
    "payroll, salary, salaries, wages, pay run",
    "payslip, pay stub, salary slip, paycheck",
    "signature, signed, signing, e-signature, esign, sign",
    "coupon, discount, promo, voucher, percent off",
    "lead, prospect",
    "deal, opportunity",
    "shipment, parcel, package, delivery, box",
    "shipping, postage, courier, carrier, ship",
    "product, item, stock, inventory, goods, sku",
    "stock level, on hand, in stock, quantity",
    "supplier, vendor, provider, suppliers, vendors",
    "purchase order, order more, po",
    "entity, person, people, someone, node, know about",
    "observation, fact, facts, note, note down, jot down",
    "relation, relationship, link, connection, manages, works at",
    "graph, knowledge graph, memory, remember, remembered, stored, knowledge base",
    "overdue, past due, late, unpaid, outstanding, hasn t paid",
    "balance, owe, owes, owed, outstanding balance",
    "low stock, restock, restocking, reorder, running out, replenish",
    "environment variables, env, environment, configuration variables",
    "settings, configuration, config, preferences",
    "free slots, available, availability, free, busy",
    "recurring, weekly, daily, monthly, every week, repeating",
    "expense, expenses, receipt, taxi, travel, claim, hotel, spending",
    "policy, rules, limit, allowance",
    "pipeline, forecast, projection",
    "sla, response time, breach, breaching",
    "metadata, info, last modified, last changed, modified, changed",
    "string, text, content",
    "allowed, permitted, access",
    "task, to do, todo, action item, work item",
    "due date, deadline, due",
    "campaign, email blast, blast, newsletter, mailing, mailshot",
    "mailing list, newsletter, audience",
    "ledger, books, journal, journal entry, bookkeeping",
    "accounting period, books, period, month end",
    "tax, vat, sales tax, gst",
    "presentation, slides, deck, document",
    "audit log, history, activity log, who changed, who did",
    "job opening, vacancy, position, job ad, job posting, job",
    "candidate, applicant",
    "org chart, reports to, manager, boss, hierarchy, reporting line, direct reports",
    "hours, timesheet, time entry, time spent",
    "price, pricing, cost, what we charge",
    "vat number, tax id",
    "admin, administrator, rights, permissions, role",
    "password, login, credentials",
    "api key, token, key, secret",
    "sms, text message, text, phone, mobile",
    "chat, channel, slack, team chat",
    "contract, agreement, nda, paperwork, document",
    "revenue, sales, income, earnings, recurring revenue",
    "profit and loss, profit, loss, profitable, income statement",
    "balance sheet, assets, liabilities, equity",
    "cash flow, cash",
    "credit note, credit, write off",
    "chargeback, dispute, contest",
    "reminder, nudge, chase, follow up, remind",
    "meeting room, room, conference room",
    "budget, money left, remaining, spent",
    "lost, lose",
    "won, win",
)


def stem(word: str) -> str:
    """A light suffix stemmer (plural, -ed, -ing, final e): ``invoices``, ``invoiced`` → ``invoic``."""
    w = word
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 4 and w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            w = w[: -len(suffix)]
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


_FILE_NAME = re.compile(r"\b[\w-]{2,}\.[a-z][a-z0-9]{0,4}\b")


def query_text(query: str) -> str:
    """What a query says between the lines: a file name (``config.yaml``) is a file, ``%`` is percent."""
    return _FILE_NAME.sub(lambda m: f"{m.group(0)} file", query).replace("%", " percent ")


def words(text: str) -> list[str]:
    """Lower-case words of ``text``, identifiers split (``read_text_file``, ``getSum``, ``get-sum``)."""
    return re.findall(r"[a-z0-9]+", " ".join(split_identifier(text.replace("-", " "))).lower())


def terms(text: str) -> list[str]:
    """Stemmed words without stop words (all words if only stop words)."""
    found = words(text)
    kept = [w for w in found if w not in STOPWORDS] or found
    return [stem(w) for w in kept]


def _synonym_table(groups: Iterable[str]) -> dict[tuple[str, ...], set[str]]:
    """Each phrase (a tuple of stemmed words) → the stemmed words of the other phrases of its groups."""
    table: dict[tuple[str, ...], set[str]] = {}
    for group in groups:
        phrases = [tuple(stem(w) for w in words(p)) for p in group.split(",")]
        vocabulary = {w for p in phrases for w in p}
        for phrase in phrases:
            if phrase:
                table.setdefault(phrase, set()).update(vocabulary - set(phrase))
    return table


_SYNONYMS = _synonym_table(TASK_SYNONYMS)
_LONGEST = max((len(p) for p in _SYNONYMS), default=1)


def expand(query: str, table: dict[tuple[str, ...], set[str]] | None = None) -> dict[str, float]:
    """The query's terms with weights: 1 for its own words, ``SYNONYM_WEIGHT`` for those the table adds.

    Phrases match longest first, and their words are not looked up again alone ("sign up" is not "sign")."""
    table = _SYNONYMS if table is None else table
    query = query_text(query)
    own = [stem(w) for w in words(query)]
    weights = dict.fromkeys(terms(query), 1.0)
    done = [False] * len(own)
    for i, j in ((i, i + gap) for gap in (2, 3) for i in range(len(own) - gap)):
        # a verb and its particle around a word or two: "sign someone up", "turn debug logging on"
        added = None if done[i] or done[j] else table.get((own[i], own[j]))
        if added is not None:
            for term in added - STOPWORDS:
                weights.setdefault(term, SYNONYM_WEIGHT)
            done[i] = done[j] = True
    i = 0
    while i < len(own):
        for size in range(min(_LONGEST, len(own) - i), 0, -1):
            added = None if any(done[i : i + size]) else table.get(tuple(own[i : i + size]))
            if added is not None:
                for term in added - STOPWORDS:
                    weights.setdefault(term, SYNONYM_WEIGHT)
                i += size
                break
        else:
            i += 1
    return weights


def _fields(spec: ToolSpec, server_description: str | None) -> dict[str, str]:
    name = " ".join(dict.fromkeys([*split_identifier(spec.name.replace("-", "_")), *split_identifier(spec.func)]))
    params = " ".join(p.name for p in spec.params)
    server = " ".join([spec.server, server_description or ""])
    return {"name": name, "description": spec.info.description, "params": params, "server": server}


def _embedded_text(spec: ToolSpec) -> str:
    return f"{' '.join(split_identifier(spec.func))}. {first_sentence(spec.info.description, 300)}"


if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float32]
else:
    np = LazyModule("numpy")


@dataclass(frozen=True)
class Ranked:
    key: ToolKey
    score: float


class ToolRanker:
    """An index of tools: BM25F postings and embedding rows, searched with numpy.

    ``synonyms`` and ``semantic_weight`` are the knobs the benchmark compares (no expansion; BM25 alone).
    """

    def __init__(
        self,
        tools: Sequence[tuple[ToolSpec, str | None]],
        embedder: Embedder | None,
        *,
        synonyms: bool = True,
        semantic_weight: float = SEMANTIC_WEIGHT,
        fields: dict[str, float] | None = None,
    ) -> None:
        self.keys: list[ToolKey] = [(spec.server, spec.name) for spec, _ in tools]
        self._row = {key: i for i, key in enumerate(self.keys)}
        self._names = {spec.name.lower(): i for i, (spec, _) in enumerate(tools)}
        self._names.update({spec.func.lower(): i for i, (spec, _) in enumerate(tools)})
        self._names.update({spec.qualified.lower(): i for i, (spec, _) in enumerate(tools)})
        self._servers = np.asarray([spec.server for spec, _ in tools], dtype=object)
        self._synonyms = synonyms
        self._embedder = embedder
        self._semantic_weight = semantic_weight if embedder is not None else 0.0
        weights = FIELD_WEIGHTS if fields is None else fields
        count = len(tools)
        frequencies: list[dict[str, float]] = []
        lengths = np.zeros(count, dtype=np.float32)
        for row, (spec, description) in enumerate(tools):
            tf: dict[str, float] = {}
            for field, text in _fields(spec, description).items():
                for term in terms(text) if text else ():
                    tf[term] = tf.get(term, 0.0) + weights[field]
            frequencies.append(tf)
            lengths[row] = sum(tf.values())
        average = float(lengths.mean()) if count else 1.0
        norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / max(average, 1e-9))
        rows: dict[str, list[int]] = {}
        values: dict[str, list[float]] = {}
        for row, tf in enumerate(frequencies):
            for term, f in tf.items():
                rows.setdefault(term, []).append(row)
                values.setdefault(term, []).append(f * (BM25_K1 + 1) / (f + norm[row]))
        self._postings: dict[str, tuple[npt.NDArray[np.int64], Floats]] = {}
        for term, hit_rows in rows.items():
            idf = math.log(1 + (count - len(hit_rows) + 0.5) / (len(hit_rows) + 0.5))
            self._postings[term] = (np.asarray(hit_rows, dtype=np.int64), np.asarray(values[term], np.float32) * idf)
        self._matrix: Floats | None = None
        if embedder is not None and count:
            self._matrix = np.ascontiguousarray(embedder.embed([_embedded_text(spec) for spec, _ in tools]))

    def __len__(self) -> int:
        return len(self.keys)

    def lexical(self, query: str) -> Floats:
        scores = np.zeros(len(self.keys), dtype=np.float32)
        weights = expand(query) if self._synonyms else dict.fromkeys(terms(query_text(query)), 1.0)
        for term, weight in weights.items():
            posting = self._postings.get(term)
            if posting is not None:
                scores[posting[0]] += weight * posting[1]
        return scores

    def semantic(self, query: str) -> Floats | None:
        if self._matrix is None or self._embedder is None or not query.strip():
            return None
        vector = self._embedder.embed([query])[0]
        # einsum runs in this thread: a BLAS matrix-vector product spreads over threads that a busy host slows down
        return np.einsum("ij,j->i", self._matrix, vector)

    def search(
        self, query: str, limit: int, server: str | None = None, within: frozenset[str] | None = None
    ) -> list[Ranked]:
        """The best ``limit`` tools, of one ``server`` or of the servers ``within`` when given."""
        if not self.keys:
            return []
        scores = _scaled(self.lexical(query))
        if self._semantic_weight:
            cosine = self.semantic(query)
            if cosine is not None:
                scores = scores + self._semantic_weight * _scaled(np.maximum(cosine, 0.0))
        exact = self._names.get(query.strip().lower())
        if exact is not None:
            scores[exact] = scores.max() + 1.0
        if server is not None:
            scores = np.where(self._servers == server, scores, -np.inf).astype(np.float32)
        if within is not None:
            scores = np.where(np.isin(self._servers, list(within)), scores, -np.inf).astype(np.float32)
        count = min(limit, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.lexsort((top, -scores[top]))]
        return [Ranked(self.keys[i], float(scores[i])) for i in top if np.isfinite(scores[i]) and scores[i] > 0]


def _scaled(scores: Floats) -> Floats:
    best = float(scores.max()) if scores.size else 0.0
    return scores / best if best > 0 else scores


class ToolSearch:
    """Ranks the downstream tools of a ``StubIndex``; rebuilt when the index's version changes."""

    def __init__(self, embedder: Embedder | None) -> None:
        self._embedder = embedder
        self._ranker: ToolRanker | None = None
        self._version = -1
        self._lock = threading.Lock()
        self._described: dict[tuple[ToolKey, str], dict[str, Any]] = {}
        """What ``describe_tool`` said of a tool at a detail, for this version of the tools (rendering a
        signature costs more than ranking)."""

    def close(self) -> None:
        self._ranker = None
        self._described = {}

    def _ensure(self, stubs: StubIndex, version: int) -> tuple[ToolRanker, dict[tuple[ToolKey, str], dict[str, Any]]]:
        with self._lock:
            if self._ranker is None or version != self._version:
                tools = [(t, s.description) for s in stubs.servers for t in s.tools]
                self._ranker, self._version = ToolRanker(tools, self._embedder), version
                self._described = {}
            return self._ranker, self._described

    def search(
        self,
        stubs: StubIndex,
        version: int,
        query: str,
        *,
        server: str | None = None,
        detail: str = "summary",
        limit: int = 10,
        view: StubIndex | None = None,
    ) -> dict[str, Any]:
        """The best ``limit`` tools for ``query`` (optionally on one ``server``) at the chosen ``detail``; with a
        tenant's ``view`` (``StubIndex.only``), among its servers only (ranked in the whole index, kept once)."""
        if detail not in DETAILS:
            raise UnsupportedError(f"detail must be one of {', '.join(DETAILS)}, got {detail!r}")
        only: str | None = None
        if server:
            spec = (view or stubs).server(server)
            if spec is None:
                known = (view or stubs).known().replace("configured:", "connected:")
                raise UnsupportedError(f"unknown server {server!r} ({known})")
            only = spec.name
        ranker, cache = self._ensure(stubs, version)
        tools: list[dict[str, Any]] = []
        within = frozenset(s.name for s in view.servers) if view is not None else None
        for hit in ranker.search(query, max(1, min(limit, 50)), only, within):
            described = cache.get((hit.key, detail))
            if described is None:
                spec = stubs.tool(*hit.key)
                if spec is None:
                    continue
                described = cache[(hit.key, detail)] = describe_tool(spec, stubs, detail)  # pyright: ignore[reportArgumentType]
            tools.append({**described, "score": round(hit.score, 5)})
        return {"query": query, "detail": detail, "tools": tools}


def first_sentence(text: str, limit: int = 160) -> str:
    """The first sentence (or line) of a description, at most ``limit`` characters."""
    line = " ".join(text.strip().split("\n\n", 1)[0].split())
    for end in (". ", "? ", "! "):
        if end in line:
            line = line.split(end, 1)[0] + end.strip()
            break
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def describe_tool(spec: ToolSpec, stubs: StubIndex, detail: Detail) -> dict[str, Any]:
    """One tool at a detail level: its name; plus one line and signature; or its complete Python stub."""
    out: dict[str, Any] = {"tool": spec.qualified, "server": spec.server}
    if spec.name != spec.func:
        out["originalName"] = spec.name
    if detail == "name":
        return out
    if detail == "summary":
        rendered = render_tool(spec)
        return {**out, "summary": first_sentence(spec.info.description), "signature": rendered.summary}
    server = stubs.server(spec.server)
    assert server is not None
    return {**out, "stub": render_server(server, [spec], {s.namespace for s in stubs.servers})}


def select_tools(stubs: StubIndex, names: Iterable[str]) -> dict[str, list[ToolSpec]]:
    """Resolve tool names (``server.tool``, ``namespace.func`` or a tool name unique across servers).

    Raises ``UnsupportedError`` naming every unknown or ambiguous name, with close matches.
    """
    selection: dict[str, list[ToolSpec]] = {}
    problems: list[str] = []
    every = stubs.tools()
    for raw in names:
        name = raw.strip()
        found: list[ToolSpec] = []
        if "." in name:
            server, tool = name.split(".", 1)
            spec = stubs.tool(server, tool)
            found = [spec] if spec else []
        else:
            found = [t for t in every if name in (t.name, t.func)]
        if len(found) == 1:
            selection.setdefault(found[0].server, [])
            if found[0] not in selection[found[0].server]:
                selection[found[0].server].append(found[0])
        elif found:
            problems.append(f"{name!r} is ambiguous: {', '.join(t.qualified for t in found)}")
        else:
            close = difflib.get_close_matches(name, [t.qualified for t in every] + [t.func for t in every], n=3)
            problems.append(f"unknown tool {name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    if problems:
        raise UnsupportedError("; ".join(problems))
    # keep the config's server order
    return {s.name: selection[s.name] for s in stubs.servers if s.name in selection}
