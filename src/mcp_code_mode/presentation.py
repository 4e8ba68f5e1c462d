"""What the MCP tools show about the engine: the payloads of ``get_execution_limits`` and
``list_supported_languages``, the server lines of ``execute_code``'s description and its ``runner`` parameter.

The server layer's own module: it reads the engine's public facts (``CodeMode.runner_facts``, ``servers``,
``settings``) and words them; no runner is named here, each says what it is (``RunnerInfo``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .discovery import first_sentence
from .engine import CodeMode
from .runners import LANGUAGE_ALIASES
from .stubs.index import ToolSpec

SERVER_EXAMPLES = 3
"""Tool names shown per server in ``execute_code``'s description; the rest are found with search_tools."""
RUNNER_SUMMARY = 70
"""Characters of a runner's summary in the ``runner`` parameter's description."""
SERVER_LINES = 12
"""Servers named one per line in ``execute_code``'s description; more are summed up in one line."""


def _languages() -> list[str]:
    return sorted(set(LANGUAGE_ALIASES.values()))


def execution_limits(engine: CodeMode) -> dict[str, Any]:
    """The limits and the isolation in force on this host right now (``get_execution_limits``)."""
    settings = engine.settings
    facts = engine.runner_facts()
    isolation = engine.isolation()
    enforced = isolation.pop("networkOffIsEnforced")
    return {
        "timeoutMs": {"default": settings.default_timeout_ms, "max": settings.max_timeout_ms},
        "maxOutputChars": settings.max_output_chars,
        "maxReturnValueChars": settings.max_output_chars,
        "maxCodeBytes": settings.max_code_bytes,
        "maxToolCallsPerRun": settings.max_tool_calls,
        "admission": engine.load(),
        "sessions": {
            "open": len(engine.sessions),
            "max": settings.max_sessions,
            "maxPerClient": settings.max_sessions_per_client,
            "idleS": settings.session_idle_s,
            "runners": [f.info.name for f in facts if f.info.sessions],
        },
        "network": network_facts(engine, enforced),
        "policy": {
            **_policy_seen(engine),
            "approvals": {
                "timeoutS": settings.approval_timeout,
                "how": "a call that asks waits while the client asks the person (MCP elicitation); a client "
                'without elicitation gets ToolError: run with mode="plan", then approvePlan=<planId>',
                "planTtlS": settings.plan_ttl,
            },
        },
        "privacy": engine.privacy.describe(),
        "artifacts": {
            "kept": engine.artifacts is not None,
            "maxFileMB": settings.artifact_max_file_mb,
            "maxRunMB": settings.artifact_max_run_mb,
            "maxTotalMB": settings.artifact_max_total_mb,
            "maxFiles": settings.artifact_max_files,
            "ttlS": settings.artifact_ttl_s,
            "inlineImageKB": settings.artifact_inline_image_kb,
        },
        "isolation": isolation,
        "requireIsolation": settings.require_isolation,
        "runners": {
            f.info.name: {
                "languages": list(f.info.languages),
                "isolation": f.isolation,
                "packages": f.info.packages,
                "keepsOffNetwork": f.info.keeps_off_network,
                **f.state,
                "settings": f.settings,
            }
            for f in facts
        },
        "defaultRunner": {lang: engine.defaults.get(lang, "") for lang in _languages()},
        "unavailableRunners": dict(engine.unavailable_runners),
        "servers": engine.servers(),
    }


def _policy_seen(engine: CodeMode) -> dict[str, Any]:
    """The policy of the tenant asking, of its servers only (``engine.servers()`` is its view)."""
    described = engine.policy.describe()
    mine = {s["name"] for s in engine.servers()}
    described["servers"] = {name: p for name, p in described["servers"].items() if name in mine}
    return described


def network_facts(engine: CodeMode, enforced: bool) -> dict[str, Any]:
    """What a run may reach and how that is enforced on this host (``get_execution_limits``' ``network``)."""
    settings = engine.settings
    unsandboxed = not enforced and settings.allow_unsandboxed_network
    if not settings.allow_network:
        default, how = "off", "no run may use the network (CODE_MODE_ALLOW_NETWORK=false)"
    elif enforced:
        default = "allowed"
        how = (
            "each run has its own network namespace with loopback only; with the network, its one way out is "
            "the egress proxy on the host (HTTP_PROXY/HTTPS_PROXY point at it), which resolves every name itself "
            "and applies the policy below to each connection"
        )
    elif unsandboxed:
        default = "allowed"
        how = (
            "UNSANDBOXED: no network namespace on this host, and CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true gives a run "
            "with the network the host's own network; the proxy only guides clients that honour HTTP(S)_PROXY"
        )
    else:
        default = "off"
        how = (
            "no network namespace on this host: runs with the network are refused (they would have the host's own "
            "network); CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true allows them anyway"
        )
    return {
        "serverPolicy": "allowed" if settings.allow_network else "never",
        "defaultForRuns": default,
        "offIsEnforced": enforced,
        "enforcement": how,
        "networkPolicy": engine.egress.describe(),
        "perRun": {
            "maxMB": settings.network_max_mb,
            "maxConnections": settings.network_max_connections,
            "hosts": "allowNetworking may name hosts (a list): the run reaches only those, within the policy",
        },
    }


def supported_languages(engine: CodeMode) -> list[dict[str, Any]]:
    """Each language with its runners, their isolation and package manager (``list_supported_languages``)."""
    facts = engine.runner_facts()
    out: list[dict[str, Any]] = []
    for lang in _languages():
        aliases = sorted(a for a, canonical in LANGUAGE_ALIASES.items() if canonical == lang)
        mine = [f for f in facts if lang in f.info.languages]
        runners = [
            {
                "name": f.info.name,
                "isolation": f.isolation,
                "default": lang in f.default_for,
                "summary": f.info.summary,
                "packageManager": f.info.package_manager,
                **({"awaitableStubs": f.info.awaitable_stubs} if f.info.awaitable_stubs else {}),
            }
            for f in mine
        ]
        default = next((f for f in mine if lang in f.default_for), mine[0] if mine else None)
        manager = default.info.package_manager if default else None
        out.append({"language": lang, "aliases": aliases, "runners": runners, "packageManager": manager})
    return out


def runner_choices(engine: CodeMode) -> str:
    """The ``runner`` parameter's description: each runner with its brief (else its summary, at most
    ``RUNNER_SUMMARY`` characters) and the languages it is the default for (``list_supported_languages`` has the
    whole summaries)."""
    parts: list[str] = []
    for f in engine.runner_facts():
        short = {"javascript": "js", "typescript": "ts"}
        default = f", default {'/'.join(short.get(lang, lang) for lang in f.default_for)}" if f.default_for else ""
        parts.append(f"{f.info.name} ({f.info.brief or clipped(f.info.summary, RUNNER_SUMMARY)}{default})")
    return "; ".join(parts) + "."


def clipped(text: str, limit: int) -> str:
    """``text``, or its words that fit in ``limit`` characters followed by "…" (open parentheses closed)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return head + ")" * max(0, head.count("(") - head.count(")"))


def describe_servers(engine: CodeMode) -> str:
    """One line per server: namespace, summary, tool count and a few tool names; past ``SERVER_LINES`` servers,
    one line with the count of the others. Bounded whatever the tool count."""
    lines: list[str] = []
    states = {s["name"]: s for s in engine.servers()}
    specs = engine.index.servers
    for spec in specs[:SERVER_LINES]:
        status = states.get(spec.name, {})
        head = f"- {spec.namespace}"
        if spec.description:
            head += f": {first_sentence(spec.description, 100)}"
        if status.get("state") == "starting":
            lines.append(f"{head} (starting: get_tool_stubs and search_tools wait for its tools)")
            continue
        if status.get("state") != "ready":
            reason = status.get("error") or status.get("state") or "unknown"
            lines.append(f"{head} (not available: {first_sentence(str(reason), 120)})")
            continue
        names = ", ".join(t.func for t in spec.tools[:SERVER_EXAMPLES])
        more = ", …" if len(spec.tools) > SERVER_EXAMPLES else ""
        lines.append(f"{head} ({len(spec.tools)} tools: {names}{more}){gated_note(engine, spec.tools)}")
    if len(specs) > SERVER_LINES:
        others = specs[SERVER_LINES:]
        count = sum(len(spec.tools) for spec in others)
        lines.append(f"- {len(others)} more servers ({count} tools): search_tools finds them")
    text = "Servers (namespace in scripts):\n" + ("\n".join(lines) if lines else "- none")
    if any(gated_note(engine, spec.tools) for spec in specs):
        text += (
            '\nA call that asks waits for a person\'s approval (denied: ToolError); mode="plan" records such calls'
            " instead (result: plan.planId), and approvePlan=<planId> runs the same code with them approved."
        )
    if engine.privacy.active:
        text += (
            "\nPersonal data reaches you as tokens ([EMAIL_1]); scripts see the real values. A token in a tool call's"
            " arguments is restored where that tool may receive it."
        )
    return text


def gated_note(engine: CodeMode, tools: Sequence[ToolSpec]) -> str:
    """`` [asks: a, b; denies: c]`` for a server whose policy gates some of its tools, else empty."""
    decisions: dict[str, list[str]] = {"ask": [], "deny": [], "conditional": []}
    for tool in tools:
        decision = engine.policy_of(tool.server, tool.name)
        if decision in decisions:
            decisions[decision].append(tool.func)
    parts = [
        f"{label}: {', '.join(names[:SERVER_EXAMPLES])}{', …' if len(names) > SERVER_EXAMPLES else ''}"
        for label, names in (
            ("asks", decisions["ask"]),
            ("denies", decisions["deny"]),
            ("depends", decisions["conditional"]),
        )
        if names
    ]
    return f" [{'; '.join(parts)}]" if parts else ""


__all__ = ["describe_servers", "execution_limits", "runner_choices", "supported_languages"]
