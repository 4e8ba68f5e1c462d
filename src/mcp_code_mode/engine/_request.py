"""Stage 1, the request: everything checked before anything is looked up, installed or run.

``plan_run`` turns what ``execute`` was asked into a ``RunPlan`` or raises a ``CodeModeError`` naming what is
wrong (language, runner, size, timeout, isolation, packages). Nothing here touches a process or the cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..cache import CacheMode, check_mode
from ..config import Settings
from ..egress import EgressPolicy, NetworkGrant
from ..errors import UnsupportedError
from ..packages import Whitelist, validate_npm, validate_python
from ..runners import LANGUAGE_ALIASES, Runner
from ..sandbox import Sandbox
from ..validate import code_size


@dataclass(frozen=True)
class RunPlan:
    code: str
    language: str
    """Canonical: ``python``, ``javascript``, ``typescript``."""
    runner: Runner
    mode: CacheMode
    """Cache mode: ``auto``, ``reuse``, ``refresh``, ``off``."""
    timeout_ms: int
    network: bool
    """The run may use the network (through the egress proxy, as ``grant`` says)."""
    requirements: tuple[str, ...]
    """Validated, normalised packages."""
    package_imports: tuple[str, ...]
    """Modules those packages provide (Python)."""
    grant: NetworkGrant | None = None
    """What the run may reach, when ``network``: the server's policy narrowed to the hosts it named."""


def resolve(
    runners: Mapping[str, Runner],
    defaults: Mapping[str, str],
    language: str,
    runner: str | None,
    unavailable: Mapping[str, str] | None = None,
) -> tuple[str, Runner]:
    """The canonical language and the runner for a request; ``UnsupportedError`` names what exists."""
    lang = LANGUAGE_ALIASES.get(language.strip().lower())
    if lang is None:
        supported = ", ".join(sorted(set(LANGUAGE_ALIASES.values())))
        raise UnsupportedError(f"language {language!r} is not supported yet (supported: {supported})")
    name = (runner or "").strip().lower() or defaults.get(lang, "")
    chosen = runners.get(name)
    if chosen is None and unavailable and name in unavailable:
        available = [r.name for r in runners.values() if lang in r.languages]
        raise UnsupportedError(
            f"the {name} runner is not available on this host: {unavailable[name]} "
            f"(available for {lang}: {', '.join(available) or 'none'})"
        )
    if chosen is None or lang not in chosen.languages:
        available = [r.name for r in runners.values() if lang in r.languages]
        raise UnsupportedError(
            f"runner {name!r} is not supported yet for {lang} (available: {', '.join(available) or 'none'})"
        )
    return lang, chosen


def validate_packages(language: str, packages: list[str], whitelist: Whitelist) -> tuple[str, ...]:
    """Validated, normalized requirements for a language; ``PackageError`` names a bad entry."""
    if not packages:
        return ()
    if language == "python":
        return tuple(validate_python(packages, whitelist))
    return tuple(validate_npm(packages, whitelist))


def check_isolation(runner: Runner, network: bool, sandbox: Sandbox, settings: Settings) -> None:
    """Refuse a run the host cannot isolate as asked: no namespaces and ``CODE_MODE_REQUIRE_ISOLATION``; a run
    with the network where there is no network namespace (it would get the host's own network) unless
    ``CODE_MODE_ALLOW_UNSANDBOXED_NETWORK``; a run without it on a runner that cannot keep scripts off it."""
    if sandbox.network_enforced():
        return
    reason = sandbox.reason or "namespaces are not available"
    if settings.require_isolation:
        raise UnsupportedError(f"CODE_MODE_REQUIRE_ISOLATION is set and this host has no namespaces ({reason})")
    if network and not settings.allow_unsandboxed_network:
        raise UnsupportedError(
            f"this host has no network namespace for a run ({reason}), so a run with the network would have the "
            "host's own network, loopback and private addresses included: it is refused. Run with "
            "allowNetworking=false, or set CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true to allow it anyway"
        )
    if not network and not runner.info.keeps_off_network:
        allow = "" if settings.allow_unsandboxed_network else " (with CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true)"
        raise UnsupportedError(
            f"networking cannot be switched off for the {runner.name} runner on this host ({reason}); "
            f"allow networking{allow} or use a runner that keeps scripts off the network (get_execution_limits)"
        )


NetworkRequest = bool | Sequence[str] | None
"""``allowNetworking``: true, false, a list of hosts (only those), or None (the server's default)."""


def plan_network(
    requested: NetworkRequest, settings: Settings, sandbox: Sandbox, policy: EgressPolicy
) -> NetworkGrant | None:
    """The run's network grant, or None for a run without the network.

    None (not given) is the server's default: the network when ``CODE_MODE_ALLOW_NETWORK`` is on and this host
    can give it safely (a network namespace, or ``CODE_MODE_ALLOW_UNSANDBOXED_NETWORK``); a list narrows the
    server's policy to those hosts (an empty list is no network)."""
    if requested is None:
        safe = sandbox.network_enforced() or settings.allow_unsandboxed_network
        requested = settings.allow_network and safe
    if isinstance(requested, str):
        requested = [requested]
    if not requested or not settings.allow_network:
        return None
    if not isinstance(requested, bool):
        try:
            policy = policy.narrowed(list(requested))
        except ValueError as exc:
            raise UnsupportedError(f"allowNetworking: {exc}") from None
    max_bytes = int(settings.network_max_mb * (1 << 20))
    return NetworkGrant(policy, max_bytes, settings.network_max_connections)


def plan_run(
    *,
    code: str,
    language: str,
    runner: str | None,
    packages: list[str] | None,
    timeout_ms: int | None,
    allow_networking: NetworkRequest,
    cache: str,
    runners: Mapping[str, Runner],
    defaults: Mapping[str, str],
    settings: Settings,
    sandbox: Sandbox,
    whitelist: Whitelist,
    unavailable: Mapping[str, str] | None = None,
    egress: EgressPolicy | None = None,
) -> RunPlan:
    mode = check_mode(cache)
    lang, chosen = resolve(runners, defaults, language, runner, unavailable)
    if (size := code_size(code)) > settings.max_code_bytes:
        raise UnsupportedError(
            f"the script is {size} bytes; this server takes scripts of at most {settings.max_code_bytes} bytes "
            "(CODE_MODE_MAX_CODE_BYTES)"
        )
    grant = plan_network(allow_networking, settings, sandbox, egress or settings.egress_policy())
    network = grant is not None
    check_isolation(chosen, network, sandbox, settings)
    timeout = settings.default_timeout_ms if timeout_ms is None else timeout_ms
    if not 1 <= timeout <= settings.max_timeout_ms:
        raise UnsupportedError(f"timeout must be between 1 and {settings.max_timeout_ms} ms, got {timeout}")
    requirements = validate_packages(lang, packages or [], whitelist)
    if requirements and chosen.info.packages == "none":
        raise UnsupportedError(f"the {chosen.name} runner takes no packages")
    imports = whitelist.imports_for(list(requirements)) if lang == "python" else ()
    return RunPlan(code, lang, chosen, mode, timeout, network, requirements, imports, grant)


__all__ = ["NetworkRequest", "RunPlan", "check_isolation", "plan_network", "plan_run", "resolve", "validate_packages"]
