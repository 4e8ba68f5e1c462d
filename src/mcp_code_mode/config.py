"""Configuration: ``mcp_servers.json`` (the downstream servers) and settings (``CODE_MODE_*``).

The servers file accepts the ``servers`` key (VS Code) and the ``mcpServers`` key (Claude Desktop).
An entry is stdio (``command``, ``args``, ``env``, ``cwd``) or streamable HTTP (``url``,
``headers``); either may set ``disabled``, ``timeout`` (seconds, for start-up and each call),
``startupTimeout`` (seconds, start-up only), ``description`` and ``policy`` (which of its tools a script may
call, must ask for, or may not call: ``governance.policy``). Any other field (or top-level key besides
``servers``, ``mcpServers``, VS Code's ``inputs`` and ``$schema``) is an error naming the nearest valid one.

String values may use ``${VAR}`` and ``${VAR:-default}``; variables come from the process
environment, then from ``.env``; ``${CONFIG_DIR}`` is the directory of the servers file. Expansion
happens when a server starts, so an unset variable makes that one server fail to start (with a
message naming it) while the others serve.

Settings come from ``CODE_MODE_*`` variables in the environment or ``.env``; ``.env.example`` lists
every one with its default. ``.env`` is the one beside the servers file and ``./.env``: the environment
wins over both, and the one beside the servers file over ``./.env`` (``$CODE_MODE_ENV_FILE`` names a single
file instead).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dotenv import dotenv_values
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._json import read_document
from .errors import ConfigError
from .governance.policy import ServerPolicy
from .privacy.config import BUILTIN_KINDS, PrivacyConfig
from .tenants import TenantBook, load_tenants

if TYPE_CHECKING:
    from .egress.policy import EgressPolicy

logger = logging.getLogger(__name__)

ENV_PREFIX = "CODE_MODE_"
DEFAULT_CONFIG_NAME = "mcp_servers.json"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_TRANSPORT_ALIASES = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
}


class ServerConfig(BaseModel):
    """One downstream MCP server, as written in the servers file (before ``${VAR}`` expansion)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, populate_by_name=True)

    name: str
    """The entry's key in the file; the server's namespace in scripts is made from it."""
    transport: Literal["stdio", "http"]
    """``stdio`` (a child process) or ``http`` (streamable HTTP)."""
    command: str | None = None
    """Executable to start (stdio)."""
    args: list[str] = Field(default_factory=list)
    """Arguments for ``command`` (stdio)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the child, added to a small allow-list of the host's variables (stdio)."""
    cwd: str | None = None
    """Working directory of the child; relative paths are relative to the servers file (stdio)."""
    url: str | None = None
    """Endpoint of a streamable HTTP server (http)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent with every request, e.g. ``Authorization`` (http)."""
    disabled: bool = False
    """A disabled server is listed but not started."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds allowed for start-up and for each tool call; the ``tool_timeout`` setting when unset."""
    startup_timeout: float | None = Field(default=None, gt=0, alias="startupTimeout")
    """Seconds allowed for start-up alone, when it needs longer (or shorter) than ``timeout``."""
    max_concurrent_calls: int | None = Field(default=None, ge=1, alias="maxConcurrentCalls")
    """Calls of one run this server answers at once (within ``CODE_MODE_MAX_CONCURRENT_CALLS``); unset: no
    limit of its own."""
    description: str | None = None
    """One line shown to the model in ``execute_code``'s description."""
    policy: ServerPolicy | None = None
    """Which of the server's tools a run may call: allow, ask (a person approves) or deny, per tool pattern,
    with conditions on the arguments and call caps (``governance/policy.py``). None: every tool is allowed
    (with ``CODE_MODE_POLICY=annotations``, decided by its annotations)."""
    pii: Literal["tokenize", "off"] | None = None
    """What the server's results carry to the model: ``tokenize`` (personal data becomes tokens such as
    ``[EMAIL_1]``) or ``off``; unset: ``CODE_MODE_PII``. Secrets are replaced whatever it says."""
    base_dir: Path = Path(".")
    """Directory of the servers file; relative ``cwd`` values are resolved against it."""


class Settings(BaseModel):
    """Server-wide settings, read from ``CODE_MODE_<NAME>`` variables (environment first, then ``.env``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    config: Path | None = None
    """Path of the servers file; ``--config`` overrides it. Default: ./mcp_servers.json."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """Log level of the server (logs go to stderr)."""
    default_timeout_ms: int = Field(default=30_000, gt=0)
    """Timeout of a run when ``execute_code`` gives none, in milliseconds."""
    max_timeout_ms: int = Field(default=300_000, gt=0)
    """Largest timeout a caller may ask for, in milliseconds."""
    max_output_chars: int = Field(default=100_000, gt=0)
    """Characters of printed output kept per run; the rest is dropped and ``truncated`` is set."""
    max_code_bytes: int = Field(default=131_072, ge=1024)
    """Largest script ``execute_code`` runs and ``validate_code`` checks, in UTF-8 bytes: a larger one is
    refused at once (``validate_code``: a ``size`` finding). Parsing holds the interpreter lock (every
    session waits), so this bounds how long one check can stall the others."""
    max_tool_calls: int = Field(default=10_000, gt=0)
    """Tool calls allowed in one run; the next one raises ``ToolError``."""
    max_concurrent_calls: int = Field(default=16, ge=1)
    """Tool calls of one run answered at once (the rest wait their turn, answered in order to each caller)."""
    policy: Literal["explicit", "annotations"] = "explicit"
    """``explicit``: only the servers file's ``policy`` entries decide (the rest: each server's ``default``);
    ``annotations``: a tool without an entry is decided by its MCP annotations (``readOnlyHint`` → allow,
    ``destructiveHint`` or ``openWorldHint`` → ask, none → the server's default)."""
    approval_timeout: float = Field(default=120.0, gt=0)
    """Seconds a gated call waits for the person's answer; then it is denied (the wait is not run time)."""
    plan_ttl: float = Field(default=3600.0, gt=0)
    """Seconds a plan (``execute_code`` with ``mode="plan"``) can be approved for."""
    audit_days: float = Field(default=30.0, gt=0)
    """Days the audit log keeps each tool call."""
    stale_skills: Literal["run", "refuse"] = "run"
    """A skill whose tools changed since it was saved still runs (``run``, listed as stale) or is refused
    when called (``refuse``)."""
    audit_tool: bool = False
    """Offer the ``get_audit_log`` tool (operators decide whether a model may read the audit log)."""
    pii: Literal["tokenize", "off"] = "off"
    """Personal data in every server's results becomes tokens on the way to the model (``tokenize``), unless
    the server's entry says ``"pii": "off"``; ``off``: only the servers whose entry says ``tokenize``."""
    pii_ttl: float = Field(default=86_400.0, gt=0)
    """Seconds a token lasts after it was last shown or used (then it is unknown: it stays a token)."""
    pii_max_values: int = Field(default=50_000, ge=1)
    """Tokens one client session may hold; past it, a new value is written as its kind alone (``[EMAIL]``)."""
    pii_vault: Literal["memory", "database"] = "memory"
    """Where tokens and their values are kept: this process's memory, or the cache database with every value
    sealed (``CODE_MODE_PII_KEY`` required; for several processes sharing one cache, e.g. HTTP --stateless)."""
    pii_key: SecretStr | None = None
    """The key that seals values in the cache database (the persisted vault, stored runs' tokens): 64 hex
    characters, base64 of 32 bytes, or a passphrase of at least 20 characters. Unset: a key of this process
    only (stored runs' tokens cannot be re-tokenized after a restart; such runs are run again)."""
    max_concurrent_runs: int | None = Field(default=None, ge=1)
    """Runs that may run at once; others wait in the queue. Default: four per core, within the memory budget
    (``memory_budget_mb`` / ``limit_memory_mb``)."""
    max_queued_runs: int | None = Field(default=None, ge=0)
    """Runs that may wait for a slot; one more gets ``ServerBusy`` at once. Default: four times the slots."""
    queue_timeout_ms: int = Field(default=60_000, ge=1)
    """How long a run may wait in the queue before it gets ``ServerBusy`` (its own timeout starts when it runs)."""
    max_runs_per_client: int | None = Field(default=None, ge=1)
    """Slots one client (an MCP session) may hold at once; it may have as large a share of the queue queued.
    Default: every slot over stdio (one client), half the slots over HTTP."""
    memory_budget_mb: int | None = Field(default=None, ge=64)
    """The sum of running runs' memory limits (``limit_memory_mb`` each) stays within this; a run that would
    pass it waits. Default: half of the host's memory."""
    pool_size: int = Field(default=2, ge=0)
    """Warm worker processes kept waiting per runner (``local``, ``deno``) once runs overlap; one until then
    (``WorkerPool``)."""
    warmup_timeout: float = Field(default=15.0, ge=0)
    """Seconds an eager runner may take, in the background after start-up, to have its first warm worker (0: an
    eager runner is started but not warmed); ``CodeMode.ready()`` waits at most this long for every runner."""
    eager_runners: str = "default"
    """Runners started, and warmed, when the server starts (``CODE_MODE_EAGER_RUNNERS``): ``default`` (the
    default Python runner), ``all``, ``none``, or runner names separated by commas. Every other runner starts on
    its first run, which then waits for a worker's start (its pool stays empty until then)."""
    tool_timeout: float = Field(default=60.0, gt=0)
    """Seconds allowed for a downstream server to start and for each tool call, unless its entry sets ``timeout``."""
    workspace_dir: Path | None = None
    """Where per-run workspace directories are made. Default: the system's temporary directory."""
    python_runner: str | None = None
    """Runner used for Python when ``execute_code`` names none (a name from the runner registry; default: the
    runner that declares itself Python's default). An unknown name stops start-up with the valid ones."""
    max_warm_environments: int = Field(default=4, ge=1)
    """Package environments per runner that keep a warm worker; the least recently used one's workers are
    stopped when another is needed (its files stay installed)."""
    cpython_pool_size: int = Field(default=1, ge=0)
    """Warm workers kept for the cpython runner."""
    allow_network: bool = True
    """Server policy: whether any run may use the network (a run still asks with ``allowNetworking``). A run
    with the network reaches it only through the egress proxy on the host (SECURITY.md, "Network")."""
    network_allow: str = ""
    """Hosts runs may connect to, comma- or space-separated: ``example.com``, ``*.example.com`` (subdomains),
    either with ``:port``; an address or network. Empty: any public address."""
    network_deny: str = ""
    """Hosts runs may never connect to (same forms as ``network_allow``); the deny-list always wins."""
    network_allow_private: str = ""
    """Private, loopback or link-local addresses runs may reach after all, e.g. ``10.0.5.7:8080`` or
    ``10.0.5.0/24`` (an internal API). Everything else of those ranges is refused whatever the lists say."""
    network_max_mb: float = Field(default=100.0, gt=0)
    """Bytes one run may move through the proxy, both ways together, in MiB; its connections end past it."""
    network_max_connections: int = Field(default=256, ge=1)
    """Connections one run may open through the proxy (refused ones count); the next is refused."""
    allow_unsandboxed_network: bool = False
    """Where there is no network namespace (no bubblewrap): give networked runs the host's own network
    (unfiltered; the proxy settings only guide clients that honour them). Off: such runs are refused."""
    sandbox: Literal["auto", "process"] = "auto"
    """``auto``: bubblewrap namespaces where they work, else plain processes; ``process``: never namespaces."""
    require_isolation: bool = False
    """Refuse to run code unless namespaces are in force."""
    sandbox_uid_base: int = Field(default=2_000_000_000, ge=1000, le=4_000_000_000)
    """First uid of the range given to sandboxed workers when the server runs as root (one uid per worker)."""
    limit_memory_mb: int = Field(default=2048, ge=64)
    """Address space of a run's process (RLIMIT_AS), in MiB."""
    limit_cpu_seconds: int = Field(default=300, ge=1)
    """CPU seconds of a run (RLIMIT_CPU); never more than the run's timeout plus one second."""
    limit_file_size_mb: int = Field(default=64, ge=1)
    """Largest file a run may write (RLIMIT_FSIZE), in MiB."""
    limit_open_files: int = Field(default=256, ge=16)
    """Open file descriptors of a run (RLIMIT_NOFILE)."""
    limit_processes: int = Field(default=64, ge=4)
    """Processes and threads of a sandbox user (RLIMIT_NPROC; not enforced for root, see SECURITY.md)."""
    limit_workspace_mb: int = Field(default=256, ge=1)
    """Size of a sandboxed run's workspace and of its /tmp (tmpfs), in MiB."""
    cache_dir: Path | None = None
    """Where the script cache (``scripts.db``) and package environments (``envs/``) are kept.

    Default: ``$XDG_CACHE_HOME/mcp-code-mode``, else ``~/.cache/mcp-code-mode``."""
    allowed_packages: Path | None = None
    """The package whitelist (JSON). Default: the allowed_packages.json shipped with the package."""
    install_timeout: float = Field(default=300.0, gt=0)
    """Seconds an install of packages may take; it does not count against the run's timeout."""

    def cache_root(self) -> Path:
        """``cache_dir``, else ``$XDG_CACHE_HOME/mcp-code-mode``, else ``~/.cache/mcp-code-mode``."""
        if self.cache_dir is not None:
            return self.cache_dir
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "mcp-code-mode"

    database_url: SecretStr | None = None
    """Where the stores live (scripts and search, skills, audit, plans, artifacts, PII vault, session metadata):
    unset, the SQLite file ``<cache root>/scripts.db``; ``postgresql://user:password@host:port/database``, a
    PostgreSQL server shared by replicas (the ``postgres`` extra; migrated on start; a server that cannot be
    reached stops the start, naming its host). A secret: it may hold a password, never shown."""
    auth_token: SecretStr | None = None
    """Bearer token that HTTP clients must send (``Authorization: Bearer <token>``), one shared by every client
    (tenant ``default``). A token or ``auth_tokens`` is required to serve HTTP on an address other than loopback;
    unused over stdio."""
    auth_tokens: Path | None = None
    """The tokens file (JSON): each tenant's name, the SHA-256 of each of its tokens, and optionally its servers
    and its policy file (``tenants``; ``mcp-code-mode tokens add`` writes entries). Instead of ``auth_token``;
    over stdio there is one tenant, ``default``."""
    trace_content: bool = False
    """Whether trace spans (on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set) carry the code of each run and the
    arguments of each tool call (masked, as the audit log keeps them). Off: only names, decisions and sizes."""
    metrics_public: bool = False
    """Whether ``GET /metrics`` on the HTTP server answers without the bearer token (``CODE_MODE_AUTH_TOKEN``):
    for a scraper on a private network. Host and Origin are checked either way."""
    http_allowed_hosts: str = ""
    """Extra ``Host`` header values the HTTP server accepts, comma-separated (``host``, ``host:port`` or
    ``host:*``). Loopback names are always accepted; anything else gets 421 (DNS-rebinding protection)."""
    http_allowed_origins: str = ""
    """Extra ``Origin`` header values the HTTP server accepts, comma-separated (``scheme://host[:port]``
    or ``scheme://host:*``). Loopback origins are always accepted; another browser origin gets 403."""
    http_max_sessions: int = Field(default=256, ge=1)
    """Streamable HTTP sessions open at once. While that many are open, a request that would open another
    gets 503 ("Too many open sessions"); the open ones keep working. Unused with ``--stateless``."""
    http_session_idle_s: float = Field(default=1800.0, gt=0)
    """Seconds a streamable HTTP session may go without a request in flight before it is closed and its
    resources freed; its id then answers 404 and the client opens a new session. Unused with ``--stateless``."""
    replica_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """This process's name among replicas behind a load balancer (letters, digits, ``-``, ``_``). Its streamable
    HTTP session ids then start with ``<replica_id>.``, which the balancer reads to send a session's requests to
    the replica that holds it (``deploy/nginx``); a session id of another replica answers 404 naming both."""
    session_idle_s: float = Field(default=600.0, gt=0)
    """Seconds a session (``execute_code(session="new")``) may go unused before it is closed and its worker
    killed; its id then answers "unknown session"."""
    max_sessions: int = Field(default=16, ge=0)
    """Sessions open at once, all clients together (0: no sessions); one more is refused naming this cap."""
    max_sessions_per_client: int = Field(default=4, ge=1)
    """Sessions one client (an MCP session or bearer token, within its tenant) may hold open at once."""
    session_memory_mb: int | None = Field(default=None, ge=64)
    """The memory a session's worker may use (the rlimit a run gets, for the whole session). Default and upper
    bound: ``limit_memory_mb``."""
    progress_interval_ms: int = Field(default=1000, gt=0)
    """How often a run reports progress (elapsed time, tool calls) to a client that asked for it, in ms."""
    stream_output_after_ms: int = Field(default=200, ge=0)
    """How long a run goes before its printed output streams to the client as log messages, in ms: what
    was printed until then goes out at that moment, later output as it is printed. A run that ends
    sooner sends none (its result has all the output). 0 streams from the first line."""

    cache_ttl: float = Field(default=3600.0, ge=0)
    """Seconds during which ``cache="auto"`` replays a stored run that had no side effects."""
    artifact_max_file_mb: float = Field(default=10.0, ge=0)
    """Largest workspace file a run leaves that is kept as an artifact, in MB; a larger one is not kept (the
    result says so, naming this cap). 0 keeps no files."""
    artifact_max_run_mb: float = Field(default=50.0, ge=0)
    """Bytes of artifacts kept per run, in MB; the files past it are not kept."""
    artifact_max_total_mb: float = Field(default=1024.0, ge=0)
    """Bytes of artifacts kept in all (every client's), in MB; when a run's files would pass it, the oldest
    artifacts are removed first."""
    artifact_max_files: int = Field(default=100, ge=0, le=1000)
    """Files kept per run; the rest are listed as not kept."""
    artifact_ttl_s: float = Field(default=3600.0, gt=0)
    """Seconds an artifact can be read (``resources/read`` of its ``code-mode://runs/...`` link) after its run."""
    artifact_inline_image_kb: int = Field(default=512, ge=0)
    """An image artifact (png, jpeg, gif, webp) or a ``show()``n image up to this size, in KB, also comes back
    inline as image content; 0 sends none inline."""
    cache_embedder: Literal["wordllama", "hashing", "none"] = "wordllama"
    """Embeddings for searching scripts and tools.

    ``wordllama`` (a static model bundled in a wheel), ``hashing`` (no model), ``none`` (full text only)."""

    deno_dir: Path | None = None
    """Deno's cache (npm packages, compiled modules) for the JavaScript/TypeScript runner.
    Default: ``deno/`` in the cache directory (``CODE_MODE_CACHE_DIR``)."""
    deno_isolates: bool = False
    """The ``deno`` runner's isolate mode (``CODE_MODE_DENO_ISOLATES``): each run in a V8 isolate of its own (a web
    Worker) in a supervisor process that serves run after run of one client and never runs user code itself,
    instead of a process per run. Back-to-back runs then wait for no process start; a V8 escape could reach the
    later runs of the same client (SECURITY.md). Sessions keep a process each."""

    tools: Literal["full", "minimal"] = "full"
    """Which tools the server offers: ``full`` (every tool), ``minimal`` (``execute_code``, ``search_tools`` and
    ``get_tool_stubs`` only, for clients that want the least in their context)."""
    monty_pool_size: int = Field(default=1, ge=0)
    """Warm Monty interpreters (pydantic-monty) kept waiting for the monty runner."""
    pyodide_pool_size: int = Field(default=1, ge=0)
    """Warm Pyodide interpreters kept waiting (each is a Deno process of about 200 MB, used for one run)."""
    pyodide_dir: Path | None = None
    """The npm ``pyodide`` package folder. Default: ``node_modules/pyodide`` of the project, else of the cwd."""
    pyodide_cache_dir: Path | None = None
    """Where the pyodide runner keeps its memory snapshot, wheels and Deno's cache.
    Default: ``pyodide/`` in the cache directory (``CODE_MODE_CACHE_DIR``)."""
    pyodide_max_memory_mb: int = Field(default=1024, ge=64, le=4096)
    """Memory a Pyodide interpreter may grow to (WebAssembly memory, in MiB); past it, MemoryError."""
    pyodide_tiering_budget: int = Field(default=1_000_000_000, ge=0)
    """V8's WebAssembly tier-up budget (``--wasm-tiering-budget``) for Pyodide workers; 0 keeps V8's default
    (13,000,000). A worker serves one run, so a short script that crosses V8's default budget pays for
    optimizing compiles it never uses (print(1): about 18 ms instead of 7); a large budget leaves them to
    long hot loops."""
    pyodide_index_url: str | None = None
    """A Pyodide package index (URL or folder) for packages that need Pyodide's own builds (numpy, pandas).
    Empty: only pure-Python wheels can be installed under the pyodide runner."""

    @field_validator(
        "config",
        "workspace_dir",
        "cache_dir",
        "allowed_packages",
        "auth_token",
        "auth_tokens",
        "pii_key",
        "deno_dir",
        "pyodide_dir",
        "pyodide_cache_dir",
        "pyodide_index_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("network_allow", "network_deny", "network_allow_private")
    @classmethod
    def _host_rules(cls, value: str, info: ValidationInfo) -> str:
        from .egress.policy import EgressPolicy

        # Every entry parses, and ALLOW_PRIVATE takes addresses only (a ValueError names the entry).
        EgressPolicy.from_settings(**{(info.field_name or "").removeprefix("network_"): value})
        return value

    @field_validator("pii_key")
    @classmethod
    def _a_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None:
            from .privacy.seal import load_key

            load_key(key.get_secret_value())  # a ValueError says which forms are accepted, never the key
        return key

    @field_validator("database_url")
    @classmethod
    def _a_database_url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None and not url.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL (unset: the SQLite file in the cache directory)")
        return url

    @model_validator(mode="after")
    def _vault_has_a_key(self) -> Settings:
        if self.pii_vault == "database" and self.pii_key is None:
            raise ValueError("CODE_MODE_PII_VAULT=database needs CODE_MODE_PII_KEY (values are kept sealed)")
        return self

    @model_validator(mode="after")
    def _one_way_of_auth(self) -> Settings:
        if self.auth_token is not None and self.auth_tokens is not None:
            raise ValueError(
                "CODE_MODE_AUTH_TOKEN and CODE_MODE_AUTH_TOKENS are both set: use one (a shared token, or the tokens "
                "file of tenants)"
            )
        return self

    def egress_policy(self) -> EgressPolicy:
        """The server's egress policy (``network_allow``, ``network_deny``, ``network_allow_private``)."""
        from .egress.policy import EgressPolicy

        return EgressPolicy.from_settings(self.network_allow, self.network_deny, self.network_allow_private)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, source: str = "environment") -> Settings:
        """Build settings from ``CODE_MODE_*`` entries of ``env``; unknown ``CODE_MODE_*`` names are logged."""
        values: dict[str, str] = {}
        known = set(cls.model_fields)
        unknown: list[str] = []
        for key, value in env.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX) :].lower()
            if name in known:
                if value == "" and cls.model_fields[name].default is None:
                    continue  # empty, as .env.example lists it: the default (derived where it says so)
                values[name] = value
            elif name not in _NON_SETTINGS:
                unknown.append(key)
        if unknown:
            logger.warning("%s: ignoring unknown setting(s) %s; see .env.example", source, ", ".join(sorted(unknown)))
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            lines: list[str] = []
            for err in exc.errors():
                if not err["loc"]:  # a rule across settings: its message names them
                    lines.append(f"{source}: {err['msg'].removeprefix('Value error, ')}")
                    continue
                name = str(err["loc"][0])
                got = "hidden" if name in _SECRET_SETTINGS else repr(values.get(name))
                lines.append(f"{source}: {ENV_PREFIX}{name.upper()}: {err['msg']} (got {got})")
            raise ConfigError("\n".join(lines)) from None


_SECRET_SETTINGS = {"auth_token", "pii_key", "database_url"}
"""Settings whose value an error message never shows."""

# CODE_MODE_* variables that are read elsewhere, not settings of the server itself.
_NON_SETTINGS = {"env_file"}


def env_files(config: Path | None = None, cwd: Path | None = None) -> list[Path]:
    """The ``.env`` files read, lowest precedence first: ``./.env``, then the one beside the servers file.

    ``$CODE_MODE_ENV_FILE`` alone when set. The servers file is ``config``, else ``$CODE_MODE_CONFIG`` (from the
    environment or ``./.env``), else ``./mcp_servers.json``; a file that does not exist is left out.
    """
    env_file = os.environ.get(f"{ENV_PREFIX}ENV_FILE")
    if env_file:
        if not Path(env_file).is_file():
            raise ConfigError(f"{ENV_PREFIX}ENV_FILE: {env_file} does not exist")
        return [Path(env_file)]
    here = (cwd or Path.cwd()) / ".env"
    found = [here] if here.is_file() else []
    if config is None:
        named = os.environ.get(f"{ENV_PREFIX}CONFIG") or (_read_env(here).get(f"{ENV_PREFIX}CONFIG") if found else None)
        config = Path(named) if named else (cwd or Path.cwd()) / DEFAULT_CONFIG_NAME
    if not config.is_absolute():
        config = (cwd or Path.cwd()) / config
    beside = config.parent / ".env"
    if beside.is_file() and not (found and beside.resolve() == here.resolve()):
        found.append(beside)
    return found


def _read_env(path: Path) -> dict[str, str]:
    return {k: v for k, v in dotenv_values(path, encoding="utf-8").items() if v is not None}


def load_environment(cwd: Path | None = None, *, config: Path | None = None) -> dict[str, str]:
    """The variables for settings and ``${VAR}`` expansion: the ``.env`` files of ``env_files`` (the one
    beside the servers file over ``./.env``), overlaid by the real environment, which always wins."""
    values: dict[str, str] = {}
    for path in env_files(config, cwd):
        values |= _read_env(path)
        logger.info("read variables from %s", path)
    return values | dict(os.environ)


def expand(value: str, env: Mapping[str, str], *, where: str) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}`` in ``value``; ``where`` names the field in errors."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and (env[name] != "" or default is None):
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: environment variable {name} is not set (write ${{{name}:-default}} for a default)")

    return _VAR.sub(substitute, value)


class ResolvedServer(BaseModel):
    """A server entry with every ``${VAR}`` expanded and paths made absolute: ready to start."""

    model_config = ConfigDict(frozen=True)

    name: str
    transport: Literal["stdio", "http"]
    command: str | None
    args: list[str]
    env: dict[str, str]
    cwd: Path | None
    url: str | None
    headers: dict[str, str]
    timeout: float
    startup_timeout: float


def resolve_server(server: ServerConfig, env: Mapping[str, str], default_timeout: float) -> ResolvedServer:
    """Expand variables in one entry. Raises ``ConfigError`` naming the entry and field of an unset variable."""
    prefix = f"server {server.name!r}"
    variables = {"CONFIG_DIR": str(server.base_dir), **env}

    def x(value: str, field: str) -> str:
        return expand(value, variables, where=f"{prefix}, field {field!r}")

    cwd: Path | None = None
    if server.transport == "stdio":
        cwd = Path(x(server.cwd, "cwd")) if server.cwd else server.base_dir
        if not cwd.is_absolute():
            cwd = (server.base_dir / cwd).resolve()
    return ResolvedServer(
        name=server.name,
        transport=server.transport,
        command=x(server.command, "command") if server.command else None,
        args=[x(a, f"args[{i}]") for i, a in enumerate(server.args)],
        env={k: x(v, f"env.{k}") for k, v in server.env.items()},
        cwd=cwd,
        url=x(server.url, "url") if server.url else None,
        headers={k: x(v, f"headers.{k}") for k, v in server.headers.items()},
        timeout=server.timeout or default_timeout,
        startup_timeout=server.startup_timeout or server.timeout or default_timeout,
    )


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


SERVER_FIELDS = (
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "type",
    "transport",
    "disabled",
    "timeout",
    "startupTimeout",
    "maxConcurrentCalls",
    "description",
    "policy",
    "pii",
)
"""The fields a server entry may have (``startup_timeout`` is accepted for ``startupTimeout``)."""
TOP_LEVEL_KEYS = ("servers", "mcpServers", "pii", "inputs", "$schema")
"""The keys the servers file may have at the top level (``pii``: ``privacy.config``); VS Code's ``inputs`` and
``$schema`` are ignored."""


_LONG_NAMES = {
    "environment": "env",
    "arguments": "args",
    "argv": "args",
    "cmd": "command",
    "endpoint": "url",
    "workdir": "cwd",
    "working_directory": "cwd",
    "workingDirectory": "cwd",
    "enabled": "disabled",
    "startupTimeoutSeconds": "startupTimeout",
}
"""Spelt-out names people write for a field, so that a typo of one still finds the field."""


def _nearest(key: str, valid: tuple[str, ...]) -> str | None:
    candidates = {v.lower(): v for v in valid} | {
        long.lower(): short for long, short in _LONG_NAMES.items() if short in valid
    }
    near = difflib.get_close_matches(key.lower(), list(candidates), n=1, cutoff=0.6)
    return candidates[near[0]] if near else None


def _unknown_keys(keys: object, valid: tuple[str, ...], where: str, what: str) -> list[str]:
    """One problem per key not in ``valid``, naming the nearest valid one (a typo) or listing them all."""
    problems: list[str] = []
    for key in [str(k) for k in keys] if isinstance(keys, dict) else []:  # pyright: ignore[reportUnknownVariableType]
        if key in valid:
            continue
        nearest = _nearest(key, valid)
        if nearest is not None:
            problems.append(f"{where}: unknown {what} {key!r} (did you mean {nearest!r}?)")
        else:
            problems.append(f"{where}: unknown {what} {key!r} (valid: {', '.join(valid)})")
    return problems


def _parse_entry(name: str, raw: object, base_dir: Path) -> tuple[ServerConfig | None, list[str]]:
    where = f"server {name!r}"
    if not isinstance(raw, dict):
        return None, [f"{where}: must be an object, got {type(raw).__name__}"]
    entry: dict[str, Any] = dict(raw)  # pyright: ignore[reportUnknownArgumentType]
    if "startup_timeout" in entry and "startupTimeout" not in entry:
        entry["startupTimeout"] = entry.pop("startup_timeout")
    unknown = _unknown_keys(entry, SERVER_FIELDS, where, "field")
    if unknown:
        return None, unknown
    declared = entry.pop("type", None)
    if declared is None:
        declared = entry.pop("transport", None)
    else:
        entry.pop("transport", None)
    if declared is not None:
        if not isinstance(declared, str) or declared.lower() not in _TRANSPORT_ALIASES:
            return None, [
                f"{where}, field 'type': unknown transport {declared!r} "
                "(expected 'stdio' or 'http'; SSE servers are not supported, use streamable HTTP)"
            ]
        transport = _TRANSPORT_ALIASES[declared.lower()]
    elif "command" in entry:
        transport = "stdio"
    elif "url" in entry:
        transport = "http"
    else:
        return None, [f"{where}: missing field 'command' (a stdio server) or 'url' (a streamable HTTP server)"]
    if transport == "stdio" and "command" not in entry:
        return None, [f"{where}, field 'command': missing (required for a stdio server)"]
    if transport == "http" and "url" not in entry:
        return None, [f"{where}, field 'url': missing (required for an HTTP server)"]
    for field in ("command", "url"):
        if isinstance(entry.get(field), str) and not entry[field].strip():
            return None, [f"{where}, field {field!r}: must not be empty"]
    try:
        config = ServerConfig.model_validate({**entry, "name": name, "transport": transport, "base_dir": base_dir})
    except ValidationError as exc:
        return None, [
            f"{where}, field {_field_path(err['loc'])!r}: {err['msg']} (got {err.get('input')!r})"
            for err in exc.errors()
        ]
    return config, []


def parse_servers(text: str, *, source: str, base_dir: Path) -> dict[str, ServerConfig]:
    """Parse the servers file's text. Raises one ``ConfigError`` listing every problem, each named."""
    return parse_document(text, source=source, base_dir=base_dir)[0]


def parse_document(text: str, *, source: str, base_dir: Path) -> tuple[dict[str, ServerConfig], PrivacyConfig]:
    """Parse the servers file's text: the servers and the top-level ``pii``. One ``ConfigError`` lists every
    problem, each named."""
    data = read_document(text, source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be an object with a 'servers' or 'mcpServers' key")
    top_level = _unknown_keys(data, TOP_LEVEL_KEYS, source, "top-level key")
    present = [key for key in ("servers", "mcpServers") if key in data]
    if not present:
        top_level.append(f"{source}: no 'servers' or 'mcpServers' key at the top level")
    if top_level:
        raise ConfigError("\n".join(top_level))
    if len(present) == 2:
        raise ConfigError(f"{source}: has both 'servers' and 'mcpServers'; use one")
    entries = data[present[0]]
    if not isinstance(entries, dict):
        raise ConfigError(f"{source}: {present[0]!r} must be an object mapping names to servers")
    servers: dict[str, ServerConfig] = {}
    problems: list[str] = []
    for name, raw in entries.items():  # pyright: ignore[reportUnknownVariableType]
        if not str(name).strip():
            problems.append("a server has an empty name")
            continue
        config, errors = _parse_entry(str(name), raw, base_dir)
        problems.extend(errors)
        if config is not None:
            servers[config.name] = config
    privacy = PrivacyConfig()
    if "pii" in data:
        try:
            privacy = PrivacyConfig.model_validate(data["pii"])
        except ValidationError as exc:
            problems.extend(
                f"top-level 'pii', field {_field_path(err['loc'])!r}: {err['msg']} (got {err.get('input')!r})"
                for err in exc.errors()
            )
    kinds = {*BUILTIN_KINDS, *(c.kind for c in privacy.custom), "*"}
    for server in servers.values():
        sinks = server.policy.pii.sinks if server.policy is not None and server.policy.pii is not None else {}
        for pattern, named in sinks.items():
            problems.extend(
                f"server {server.name!r}, field 'policy.pii.sinks.{pattern}': unknown kind {kind!r} "
                f'(kinds: {", ".join(sorted(kinds - {"*"}))}, or "*")'
                for kind in named
                if kind not in kinds
            )
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems))
    return servers, privacy


def load_servers(path: Path) -> dict[str, ServerConfig]:
    """Read and parse a servers file."""
    return load_document(path)[0]


def load_document(path: Path) -> tuple[dict[str, ServerConfig], PrivacyConfig]:
    """Read and parse a servers file: the servers and the top-level ``pii``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (give --config or set {ENV_PREFIX}CONFIG)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    return parse_document(text, source=str(path), base_dir=path.resolve().parent)


class CodeModeConfig(BaseModel):
    """Everything the engine needs to start: the servers, the settings and the variables for expansion."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    path: Path | None
    servers: dict[str, ServerConfig]
    settings: Settings
    env: dict[str, str]
    privacy: PrivacyConfig = PrivacyConfig()
    """The servers file's top-level ``pii``: detectors, custom kinds, phone regions."""
    tenants: TenantBook | None = None
    """The tokens over HTTP and the tenant each names (``CODE_MODE_AUTH_TOKENS``, or ``CODE_MODE_AUTH_TOKEN`` as
    tenant ``default``); None: no token (loopback only, or stdio)."""

    @classmethod
    def load(cls, path: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> CodeModeConfig:
        """Load settings and the servers file; ``path`` overrides ``CODE_MODE_CONFIG``."""
        variables = dict(env) if env is not None else load_environment(config=Path(path) if path is not None else None)
        settings = Settings.from_env(variables)
        chosen = Path(path) if path is not None else settings.config or Path(DEFAULT_CONFIG_NAME)
        servers, privacy = load_document(chosen)
        return cls(
            path=chosen,
            servers=servers,
            settings=settings,
            env=variables,
            privacy=privacy,
            tenants=tenant_book(settings, servers),
        )

    @classmethod
    def from_servers(
        cls,
        servers: Mapping[str, Mapping[str, Any]],
        *,
        settings: Settings | None = None,
        env: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
        pii: Mapping[str, Any] | None = None,
    ) -> CodeModeConfig:
        """Build a config in code (tests, library users) from the same shape as the file's ``servers`` (and
        its top-level ``pii``)."""
        text = json.dumps({"servers": servers, **({"pii": pii} if pii is not None else {})})
        parsed, privacy = parse_document(text, source="<servers>", base_dir=base_dir or Path.cwd())
        settings = settings or Settings()
        return cls(
            path=None,
            servers=parsed,
            settings=settings,
            env=dict(env or os.environ),
            privacy=privacy,
            tenants=tenant_book(settings, parsed),
        )


def tenant_book(settings: Settings, servers: Mapping[str, ServerConfig]) -> TenantBook | None:
    """The tenants of the settings' token(s): the tokens file (``ConfigError`` naming each problem), the shared
    token as tenant ``default``, or None."""
    if settings.auth_tokens is not None:
        return load_tenants(settings.auth_tokens, list(servers))
    if settings.auth_token is not None:
        return TenantBook.shared(settings.auth_token.get_secret_value())
    return None
