"""Stage 1, the request: every check before anything is looked up, installed or run (no process)."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_code_mode.config import Settings
from mcp_code_mode.engine._request import plan_run, resolve
from mcp_code_mode.errors import PackageError, UnsupportedError
from mcp_code_mode.packages import Whitelist

from .fakes import FakeRunner, FakeSandbox, info

RUNNERS: dict[str, Any] = {
    "interp": FakeRunner(info("interp", keeps_off_network=True)),
    "full": FakeRunner(info("full")),
    "bare": FakeRunner(info("bare", packages="none")),
    "js": FakeRunner(info("js", "javascript", "typescript", packages="self")),
}
DEFAULTS = {"python": "interp", "javascript": "js", "typescript": "js"}


def plan(settings: Settings | None = None, sandbox: FakeSandbox | None = None, **request: Any) -> Any:
    settings = settings or Settings()
    arguments: dict[str, Any] = {
        "code": "1",
        "language": "python",
        "runner": None,
        "packages": None,
        "timeout_ms": None,
        "allow_networking": True,
        "cache": "auto",
        **request,
    }
    return plan_run(
        **arguments,
        runners=RUNNERS,
        defaults=DEFAULTS,
        settings=settings,
        sandbox=sandbox or FakeSandbox(),  # pyright: ignore[reportArgumentType]
        whitelist=Whitelist.load(settings.allowed_packages),
    )


def test_aliases_and_defaults_resolve() -> None:
    assert resolve(RUNNERS, DEFAULTS, " PY ", None)[1].name == "interp"
    assert resolve(RUNNERS, DEFAULTS, "ts", None)[1].name == "js"
    assert resolve(RUNNERS, DEFAULTS, "python", "FULL")[1].name == "full"


def test_an_unknown_language_or_runner_names_what_exists() -> None:
    with pytest.raises(UnsupportedError, match="supported: javascript, python, typescript"):
        resolve(RUNNERS, DEFAULTS, "ruby", None)
    with pytest.raises(UnsupportedError, match=r"available: interp, full, bare"):
        resolve(RUNNERS, DEFAULTS, "python", "js")


def test_the_default_timeout_comes_from_the_settings_and_bounds_hold() -> None:
    assert plan(Settings(default_timeout_ms=1234)).timeout_ms == 1234
    assert plan(timeout_ms=50).timeout_ms == 50
    with pytest.raises(UnsupportedError, match="between 1 and"):
        plan(timeout_ms=0)
    with pytest.raises(UnsupportedError, match="between 1 and 300000"):
        plan(timeout_ms=300_001)


def test_an_oversize_script_is_refused_before_anything_else() -> None:
    with pytest.raises(UnsupportedError, match="at most 1024 bytes"):
        plan(Settings(max_code_bytes=1024), code="x" * 1025, timeout_ms=0)


def test_the_server_policy_wins_over_the_request_for_network() -> None:
    assert plan(allow_networking=True).network is True
    assert plan(Settings(allow_network=False), allow_networking=True).network is False


def test_without_namespaces_only_a_runner_that_keeps_off_the_network_runs_without_it() -> None:
    process = FakeSandbox("process", "no bwrap")
    assert plan(sandbox=process, allow_networking=False).runner.name == "interp"
    with pytest.raises(UnsupportedError, match="networking cannot be switched off for the full runner"):
        plan(sandbox=process, runner="full", allow_networking=False)
    with pytest.raises(UnsupportedError, match="CODE_MODE_REQUIRE_ISOLATION"):
        plan(Settings(require_isolation=True), sandbox=process)


def test_without_a_network_namespace_a_run_with_the_network_is_refused_unless_allowed_unsandboxed() -> None:
    process = FakeSandbox("process", "no bwrap")
    with pytest.raises(UnsupportedError, match="CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true") as refused:
        plan(sandbox=process, allow_networking=True)
    assert "host's own network" in str(refused.value)
    with pytest.raises(UnsupportedError, match="CODE_MODE_ALLOW_UNSANDBOXED_NETWORK"):
        plan(sandbox=process, allow_networking=["api.example.com"])
    # Not asked: the default is no network where it cannot be given safely (no silent host network).
    default = plan(sandbox=process, allow_networking=None)
    assert default.network is False and default.grant is None
    allowed = plan(Settings(allow_unsandboxed_network=True), sandbox=process, allow_networking=None)
    assert allowed.network is True and allowed.grant is not None
    with pytest.raises(UnsupportedError, match="networking cannot be switched off for the full runner"):
        plan(sandbox=process, runner="full", allow_networking=None)


def test_a_list_of_hosts_narrows_the_servers_policy_and_a_bad_host_is_refused() -> None:
    planned = plan(Settings(network_allow="*.example.com"), allow_networking=["api.example.com:443"])
    assert planned.network is True and planned.grant is not None
    policy = planned.grant.policy
    policy.check_name("api.example.com", 443)
    from mcp_code_mode.egress import AddressRefused

    with pytest.raises(AddressRefused, match="allowNetworking names"):
        policy.check_name("www.example.com", 443)
    with pytest.raises(AddressRefused, match="CODE_MODE_NETWORK_ALLOW"):
        policy.check_name("api.other.org", 443)
    assert plan(allow_networking=[]).network is False
    assert plan(Settings(allow_network=False), allow_networking=["api.example.com"]).network is False
    with pytest.raises(UnsupportedError, match="allowNetworking: 'not a host!'"):
        plan(allow_networking=["not a host!"])
    grant = plan(Settings(network_max_mb=2, network_max_connections=7), allow_networking=True).grant
    assert grant is not None and (grant.max_bytes, grant.max_connections) == (2 << 20, 7)


def test_packages_are_validated_and_a_runner_that_takes_none_refuses_them() -> None:
    planned = plan(runner="full", packages=["six"])
    assert planned.requirements == ("six",)
    assert planned.package_imports == ("six",)
    with pytest.raises(PackageError):
        plan(packages=["not-on-the-list-at-all"])
    with pytest.raises(UnsupportedError, match="the bare runner takes no packages"):
        plan(runner="bare", packages=["six"])


def test_a_bad_cache_mode_is_refused() -> None:
    with pytest.raises(UnsupportedError):
        plan(cache="sometimes")
